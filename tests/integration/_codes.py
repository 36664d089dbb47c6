"""An observer the framework tests share: the failure codes of every call, by call id, from the verdicts."""

from __future__ import annotations

from typing import Any

from prefixmon import Observer, Verdict


class Codes(Observer):
    """The failure codes of every recorded call (all of them, not only the primary one the record keeps), by call id."""

    def __init__(self) -> None:
        self.codes: dict[str | None, list[str]] = {}

    def call_finished(self, episode: Any, action: Any, verdict: Verdict, token: Any) -> None:
        self.codes[verdict.call_id] = [f.code for f in verdict.failures]
