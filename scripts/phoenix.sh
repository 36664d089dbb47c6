#!/usr/bin/env bash
# Run a real OTLP tracing backend (Arize Phoenix, pinned) on 127.0.0.1 for the telemetry
# integration test (tests/integration/test_phoenix.py).
#
#   scripts/phoenix.sh install   create the Phoenix venv (idempotent)
#   scripts/phoenix.sh start     install if needed, start on free ports, wait for /readyz,
#                                write the base URL to $PHOENIX_STATE_DIR/url
#   scripts/phoenix.sh status    print the URL and whether it is ready (exit 1 if not running)
#   scripts/phoenix.sh stop      stop the server this script started and remove its data
#
# Phoenix pins its own dependencies (OpenTelemetry, protobuf, ...), so it lives in its own
# virtual environment, never in the project's .venv. Environment:
#   PHOENIX_VERSION    pinned version (default below)
#   PHOENIX_PYTHON     interpreter for the venv (default python3; Phoenix needs >= 3.11)
#   PHOENIX_VENV       venv path (default ~/.cache/prefixmon/phoenix-<version>)
#   PHOENIX_STATE_DIR  pid, log, url and the sqlite working dir (default /tmp/prefixmon-phoenix)
#   PHOENIX_START_TIMEOUT  seconds to wait for /readyz (default 180)
set -euo pipefail

PHOENIX_VERSION="${PHOENIX_VERSION:-20.26.1}"
PHOENIX_PYTHON="${PHOENIX_PYTHON:-python3}"
PHOENIX_VENV="${PHOENIX_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/prefixmon/phoenix-$PHOENIX_VERSION}"
PHOENIX_STATE_DIR="${PHOENIX_STATE_DIR:-/tmp/prefixmon-phoenix}"
PHOENIX_START_TIMEOUT="${PHOENIX_START_TIMEOUT:-180}"

PID_FILE="$PHOENIX_STATE_DIR/pid"
URL_FILE="$PHOENIX_STATE_DIR/url"
LOG_FILE="$PHOENIX_STATE_DIR/phoenix.log"
WORK_DIR="$PHOENIX_STATE_DIR/data"

log() { echo "phoenix.sh: $*" >&2; }

installed() {
    [[ -x "$PHOENIX_VENV/bin/phoenix" ]] &&
        [[ "$(cat "$PHOENIX_VENV/.prefixmon-phoenix-version" 2>/dev/null)" == "$PHOENIX_VERSION" ]]
}

do_install() {
    if installed; then
        return 0
    fi
    local t0=$SECONDS
    log "installing arize-phoenix==$PHOENIX_VERSION into $PHOENIX_VENV"
    rm -rf "$PHOENIX_VENV"
    mkdir -p "$(dirname "$PHOENIX_VENV")"
    "$PHOENIX_PYTHON" -m venv "$PHOENIX_VENV"
    mkdir -p "$PHOENIX_STATE_DIR"
    if ! "$PHOENIX_VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        "arize-phoenix==$PHOENIX_VERSION" >"$PHOENIX_STATE_DIR/install.log" 2>&1; then
        log "pip install failed; last lines of $PHOENIX_STATE_DIR/install.log:"
        grep -v "is ignored: it is neither" "$PHOENIX_STATE_DIR/install.log" | tail -n 20 >&2
        rm -rf "$PHOENIX_VENV"
        return 1
    fi
    echo "$PHOENIX_VERSION" >"$PHOENIX_VENV/.prefixmon-phoenix-version"
    log "installed in $((SECONDS - t0)) s"
}

running_pid() {
    local pid
    pid="$(cat "$PID_FILE" 2>/dev/null)" || return 1
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

free_port() {
    "$PHOENIX_VENV/bin/python" -c \
        'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

ready() {
    curl --silent --fail --max-time 2 "$1/readyz" >/dev/null 2>&1
}

do_start() {
    if pid="$(running_pid)"; then
        log "already running (pid $pid) at $(cat "$URL_FILE")"
        return 0
    fi
    do_install
    rm -rf "$WORK_DIR"
    mkdir -p "$WORK_DIR"
    rm -f "$URL_FILE"
    local port grpc_port url t0=$SECONDS
    port="$(free_port)"
    grpc_port="$(free_port)"
    while [[ "$grpc_port" == "$port" ]]; do grpc_port="$(free_port)"; done
    url="http://127.0.0.1:$port"
    # Own session (setsid) so that stop can end the server and its children together.
    PHOENIX_WORKING_DIR="$WORK_DIR" \
        PHOENIX_TELEMETRY_ENABLED=false \
        PHOENIX_HOST=127.0.0.1 \
        PHOENIX_PORT="$port" \
        PHOENIX_GRPC_PORT="$grpc_port" \
        setsid "$PHOENIX_VENV/bin/phoenix" serve --host 127.0.0.1 --port "$port" \
        --grpc-port "$grpc_port" --no-internet >"$LOG_FILE" 2>&1 </dev/null &
    echo $! >"$PID_FILE"
    until ready "$url"; do
        if ! running_pid >/dev/null; then
            log "Phoenix exited during start; last log lines:"
            tail -n 30 "$LOG_FILE" >&2
            return 1
        fi
        if ((SECONDS - t0 > PHOENIX_START_TIMEOUT)); then
            log "not ready after $PHOENIX_START_TIMEOUT s; last log lines:"
            tail -n 30 "$LOG_FILE" >&2
            do_stop
            return 1
        fi
        sleep 0.5
    done
    echo "$url" >"$URL_FILE"
    log "Phoenix $PHOENIX_VERSION ready at $url in $((SECONDS - t0)) s (pid $(cat "$PID_FILE"))"
    echo "$url"
}

do_stop() {
    local pid
    if pid="$(running_pid)"; then
        # The server leads its own process group (setsid); end the group, then wait.
        kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 40); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.25
        done
        if kill -0 "$pid" 2>/dev/null; then
            kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
        fi
        log "stopped (pid $pid)"
    else
        log "not running"
    fi
    rm -f "$PID_FILE" "$URL_FILE"
    rm -rf "$WORK_DIR"
}

do_status() {
    local pid url
    if pid="$(running_pid)"; then
        url="$(cat "$URL_FILE" 2>/dev/null || true)"
        if [[ -n "$url" ]] && ready "$url"; then
            echo "running (pid $pid) at $url, ready"
        else
            echo "running (pid $pid), not ready"
        fi
    else
        echo "not running"
        return 1
    fi
}

case "${1:-}" in
install) do_install ;;
start) do_start ;;
stop) do_stop ;;
status) do_status ;;
*)
    echo "usage: $0 install|start|stop|status" >&2
    exit 2
    ;;
esac
