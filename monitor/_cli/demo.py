"""The demo: a population of scripted agents with different error habits, monitored live.

A small phone assistant tool layer (contacts, messages, payments) and three agents:

* ``careful``: looks things up before it acts, like a ReAct agent that reads its results;
* ``plan_conditioned``: follows a plan written before it saw any result, so it often acts
  on a phone number where an id is needed or forgets to turn cellular on, then repairs
  after the monitor blocks the call (success after recovery);
* ``sloppy``: invents ids and amounts, and gives up easily.

Every call goes through a blocking monitor, so no invalid call reaches the environment;
first failures are logged live, records (and OTLP traces) are written to a folder, and the
prefix-executability report is built from the records. Everything is seeded.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import structlog

from ..commands import run_async
from ..episode import current_episode
from ..exceptions import ToolBlocked
from ..monitor import Monitor
from ..observer import Observer
from ..rules.spec import Grounded, Ref
from ..state import TrackedState
from ..telemetry.logging import LiveLog
from ..telemetry.spans import Telemetry
from ..toolset import Toolset
from .args import non_negative_int, positive_int

PEOPLE: tuple[tuple[str, str, str], ...] = (
    ("p-101", "Fredrik Lind", "+1 555 0100"),
    ("p-102", "Amara Osei", "+1 555 0142"),
    ("p-103", "Chen Wei", "+1 555 0177"),
    ("p-104", "Lucía Romero", "+1 555 0190"),
    ("p-105", "Tomasz Nowak", "+1 555 0123"),
    ("p-106", "Aiko Tanaka", "+1 555 0168"),
)
METHODS: tuple[str, ...] = ("careful", "plan_conditioned", "sloppy")


@dataclass(slots=True)
class Phone:
    """The environment: an address book, a cellular switch, an outbox and a wallet."""

    contacts: dict[str, dict[str, str]]
    cellular: bool = False
    outbox: list[tuple[str, str]] | None = None
    payments: list[tuple[str, float]] | None = None

    @classmethod
    def fresh(cls) -> Phone:
        return cls(
            contacts={pid: {"person_id": pid, "name": n, "phone_number": ph} for pid, n, ph in PEOPLE},
            outbox=[],
            payments=[],
        )


def _contact_exists(state: TrackedState, args: Any) -> bool | str:
    phone: Phone = state.env
    return args["person_id"] in phone.contacts or f"there is no contact with person_id {args['person_id']!r}"


def _cellular_on(state: TrackedState, args: Any) -> bool:
    """cellular service is off; call set_cellular(on=true) first"""
    phone: Phone = state.env
    return phone.cellular


def _positive_amount(state: TrackedState, args: Any) -> bool | str:
    return args["amount"] > 0 or f"amount must be positive, got {args['amount']}"


def build_toolset(phone_of: Callable[[], Phone]) -> Toolset:
    """The phone assistant's tools; ``phone_of()`` returns the current episode's phone."""
    tools = Toolset()

    @tools.tool(produces="person_id")
    def search_contacts(name: str | None = None, phone_number: str | None = None) -> list[dict[str, str]]:
        """Find contacts by (part of a) name or by exact phone number."""
        return [
            dict(c)
            for c in phone_of().contacts.values()
            if (name is None or name.lower() in c["name"].lower()) and (phone_number is None or c["phone_number"] == phone_number)
        ]

    @tools.tool(requires=[_contact_exists], invalidates="person_id")
    def remove_contact(person_id: Annotated[str, Ref("person_id")]) -> dict[str, str]:
        """Remove a contact from the address book."""
        del phone_of().contacts[person_id]
        return {"removed": person_id}

    @tools.tool
    def set_cellular(on: bool) -> dict[str, bool]:
        """Turn cellular service on or off."""
        phone_of().cellular = on
        return {"cellular": on}

    @tools.tool(requires=[_contact_exists, _cellular_on])
    def send_message(person_id: Annotated[str, Ref("person_id")], text: str) -> dict[str, str]:
        """Send a text message to a contact."""
        outbox = phone_of().outbox
        assert outbox is not None
        outbox.append((person_id, text))
        return {"status": "delivered"}

    @tools.tool(requires=[_positive_amount])
    def send_money(
        phone_number: Annotated[str, Grounded(block=True)], amount: Annotated[float, Grounded(block=True)]
    ) -> dict[str, str]:
        """Send money to a phone number."""
        # Money sent to a number or amount nobody said cannot be taken back: this tool opts in to blocking.
        payments = phone_of().payments
        assert payments is not None
        payments.append((phone_number, amount))
        return {"status": "sent"}

    return tools


@dataclass(frozen=True, slots=True, kw_only=True)
class Task:
    """One user request and how to tell it was done."""

    task_id: str
    kind: str
    """``remove``, ``text``, ``pay`` or ``invite`` (one text to three people: the long task)."""
    person: tuple[str, str, str]
    others: tuple[tuple[str, str, str], ...] = ()
    """The other people an ``invite`` goes to."""
    text: str = ""
    amount: float = 0.0

    @property
    def group(self) -> tuple[tuple[str, str, str], ...]:
        """Everyone the request is about, in the order the user named them."""
        return (self.person, *self.others)

    @property
    def request(self) -> str:
        _pid, name, number = self.person
        first = name.split()[0]
        if self.kind == "remove":
            return f"Please delete {first} from my contacts, the number is {number}."
        if self.kind == "text":
            return f"Text {first} ({number}): {self.text}"
        if self.kind == "invite":
            names = [f"{n.split()[0]} ({ph})" for _, n, ph in self.group]
            return f"Text {', '.join(names[:-1])} and {names[-1]}: {self.text}"
        return f"Send {self.amount:g} dollars to {first}, number {number}."

    def outcome(self, phone: Phone) -> str:
        """``success`` when the request was met exactly, ``partial`` when it was met in part
        (the right person got a different message or amount, or only some of an invite's
        people got it), else ``failure``."""
        pid, _, number = self.person
        if self.kind == "remove":
            return "success" if pid not in phone.contacts else "failure"
        outbox = phone.outbox or []
        if self.kind == "invite":
            reached = [any(to == p and text == self.text for to, text in outbox) for p, _, _ in self.group]
            if all(reached):
                return "success"
            return "partial" if any(reached) or outbox else "failure"
        if self.kind == "text":
            sent: list[object] = [text for to, text in outbox if to == pid]
            wanted: object = self.text
        else:
            sent, wanted = [amount for to, amount in (phone.payments or []) if to == number], self.amount
        if wanted in sent:
            return "success"
        return "partial" if sent else "failure"


KINDS: tuple[str, ...] = ("remove", "text", "pay", "invite")


def make_tasks(n: int, seed: int) -> list[Task]:
    """``n`` seeded tasks cycling through the four kinds."""
    rng = random.Random(seed)
    messages = ("Running late, see you at 7", "Happy birthday!", "Can you call me back?", "The keys are under the mat")
    tasks = []
    for i in range(n):
        kind = KINDS[i % len(KINDS)]
        group = rng.sample(PEOPLE, 3)
        tasks.append(
            Task(
                task_id=f"task-{i:03d}",
                kind=kind,
                person=group[0],
                others=tuple(group[1:]) if kind == "invite" else (),
                text=rng.choice(messages) if kind != "invite" else rng.choice(("Dinner at 8 tonight?", "Game night on Friday!")),
                amount=float(rng.choice((5, 12, 20, 35, 50))),
            )
        )
    return tasks


Step = tuple[str, dict[str, Any]]
"""A scripted call. ``"$found"`` stands for the id of the last search's first contact, and
``"$id:<phone number>"`` for the id a search returned for that number (the number itself
when no search did: the plan-conditioned agent's mistake)."""


def _id_of(number: str) -> str:
    return f"$id:{number}"


class _Agent:
    """A scripted agent: a plan of calls, and a habit of repairing when a call is refused."""

    def __init__(self, method: str, rng: random.Random) -> None:
        self.method = method
        self.rng = rng

    def first_plan(self, task: Task) -> list[Step]:
        pid, name, number = task.person
        first = name.split()[0]
        r = self.rng.random()
        if task.kind == "invite":
            return self._invite_plan(task, r)
        if self.method == "careful":
            lookup = ("search_contacts", {"name": first})
            if task.kind == "remove":
                return [lookup, ("remove_contact", {"person_id": "$found"})]
            if task.kind == "text":
                return [lookup, ("set_cellular", {"on": True}), ("send_message", {"person_id": "$found", "text": task.text})]
            amount = task.amount if r > 0.1 else str(task.amount)  # rarely a string amount: still valid after coercion
            return [("send_money", {"phone_number": number, "amount": amount})]
        if self.method == "plan_conditioned":
            if task.kind == "remove":
                return [("remove_contact", {"person_id": number})]  # a phone number is not a person_id
            if task.kind == "text":
                steps: list[Step] = [
                    ("search_contacts", {"phone_number": number}),
                    ("send_message", {"person_id": "$found", "text": task.text}),
                ]
                return steps if r < 0.7 else [("set_cellular", {"on": True}), *steps]
            return [("send_money", {"phone_number": number, "amount": task.amount if r < 0.6 else round(task.amount * 1.1, 2)})]
        # sloppy
        if task.kind == "remove":
            return [("remove_contact", {"person_id": f"p-{self.rng.randrange(100, 200)}" if r < 0.6 else number})]
        if task.kind == "text":
            return [("send_message", {"person_id": pid if r < 0.2 else "p-007", "text": task.text})]
        return [
            ("send_money", {"phone": number, "amount": task.amount})
            if r < 0.4
            else ("send_money", {"phone_number": number, "amount": task.amount + 1})
        ]

    def _invite_plan(self, task: Task, r: float) -> list[Step]:
        """The long task: one text to three people (seven calls when done right)."""
        numbers = [ph for _, _, ph in task.group]
        if self.method == "careful":  # every lookup first, then cellular, then the messages
            lookups: list[Step] = [("search_contacts", {"name": n.split()[0]}) for _, n, _ in task.group]
            sends: list[Step] = [("send_message", {"person_id": _id_of(ph), "text": task.text}) for ph in numbers]
            return [*lookups, ("set_cellular", {"on": True}), *sends]
        if self.method == "plan_conditioned":  # written before any result: cellular is often forgotten
            plan: list[Step] = [] if r < 0.4 else [("set_cellular", {"on": True})]
            for i, ph in enumerate(numbers):
                if i == len(numbers) - 1 and 0.4 <= r < 0.75:  # by the last person the plan takes a shortcut
                    plan.append(("send_message", {"person_id": _id_of(ph), "text": task.text}))  # the number, not an id
                else:
                    plan += [
                        ("search_contacts", {"phone_number": ph}),
                        ("send_message", {"person_id": _id_of(ph), "text": task.text}),
                    ]
            return plan
        # sloppy: an invented id at once, or after the first person
        if r < 0.5:
            return [("send_message", {"person_id": "p-007", "text": task.text})]
        _, first_name, first_number = task.group[0]
        return [
            ("search_contacts", {"name": first_name.split()[0]}),
            ("set_cellular", {"on": True}),
            ("send_message", {"person_id": _id_of(first_number), "text": task.text}),
            ("send_message", {"person_id": f"p-{self.rng.randrange(100, 200)}", "text": task.text}),
        ]

    def repair(self, task: Task, refused: ToolBlocked, delivered: set[str]) -> list[Step] | None:
        """What to try after a refusal, or ``None`` to give up; ``delivered`` are the ids already texted."""
        keep_going = {"careful": 0.98, "plan_conditioned": 0.85, "sloppy": 0.35}[self.method]
        if self.rng.random() > keep_going:
            return None
        _pid, _name, number = task.person
        if task.kind == "remove":
            return [("search_contacts", {"phone_number": number}), ("remove_contact", {"person_id": "$found"})]
        if task.kind in ("text", "invite"):
            text = task.text if self.method != "sloppy" or self.rng.random() < 0.5 else task.text.lower().rstrip("!.?")
            steps: list[Step] = [("set_cellular", {"on": True})]
            for pid, _, ph in task.group:
                if pid not in delivered:
                    steps += [
                        ("search_contacts", {"phone_number": ph}),
                        ("send_message", {"person_id": _id_of(ph), "text": text}),
                    ]
            return steps
        return [("send_money", {"phone_number": number, "amount": task.amount})]


async def run_episode(monitor: Monitor, phone_box: list[Phone], task: Task, method: str, trial: int, seed: int) -> None:
    """Run one agent on one task through the monitor."""
    rng = random.Random(f"{seed}:{method}:{task.task_id}:{trial}")
    agent = _Agent(method, rng)
    phone = Phone.fresh()
    phone_box[0] = phone
    async with monitor.episode(task.task_id, {"method": method, "trial": str(trial)}, env=phone) as ep:
        ep.user(task.request)
        plan = agent.first_plan(task)
        found: str | None = None
        ids: dict[str, str] = {}  # phone number -> person_id, from search results
        repairs = 0
        i = 0
        while i < len(plan):
            name, args = plan[i]
            args = {k: _resolve(v, found, ids) for k, v in args.items()}
            i += 1
            try:
                result = await ep.call(name, args, call_id=f"call-{ep.depth + 1}")
            except ToolBlocked as refused:
                delivered = {to for to, _ in phone.outbox or []}
                repair = agent.repair(task, refused, delivered) if repairs < 2 else None
                repairs += 1
                if repair is None:
                    break
                plan, i = repair, 0
                continue
            if name == "search_contacts" and result:
                found = result[0]["person_id"]
                ids.update((c["phone_number"], c["person_id"]) for c in result)
        ep.finish(task.outcome(phone))


def _resolve(value: Any, found: str | None, ids: dict[str, str]) -> Any:
    if value == "$found":
        return found
    if isinstance(value, str) and value.startswith("$id:"):
        number = value.removeprefix("$id:")
        return ids.get(number, number)
    return value


async def run_population(
    *,
    tasks: Sequence[Task],
    trials: int,
    seed: int,
    sink: Path,
    observers: Sequence[Observer] = (),
    dataset: str = "phone-assistant",
    model: str = "scripted",
) -> Monitor:
    """Run every method on every task ``trials`` times; records go to ``sink``."""
    phone_box: list[Phone] = [Phone.fresh()]
    tools = build_toolset(lambda: phone_box[0])
    monitor = Monitor(tools, policy="block", sink=sink, observers=observers, labels={"dataset": dataset, "model": model})
    for method in METHODS:
        for task in tasks:
            for trial in range(trials):
                await run_episode(monitor, phone_box, task, method, trial, seed)
    return monitor


class _FirstFailures:
    """A structlog processor chain end: prints the first ``limit`` first-failure events."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.seen = 0

    def __call__(self, logger: Any, method: str, event: MutableMapping[str, Any]) -> str:
        if event.get("event") != "first_failure":
            raise structlog.DropEvent
        self.seen += 1
        if self.seen > self.limit:
            raise structlog.DropEvent
        return (
            f"  first failure  {event['labels_method']:<16} {event['task_id']}  depth {event['depth']}  "
            f"{event['tool']:<15} {event['cause']:<12} {event.get('reason', '')}"
        )


def _label_method(logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    episode = current_episode()
    event["labels_method"] = episode.labels.get("method", "") if episode is not None else ""
    return event


def main(*, out: str | Path, tasks: int, trials: int, seed: int, bootstrap: int, live: bool = True) -> int:
    """``prefixmon demo``: run the population, write records and traces, print the report."""
    from ..analytics import build_report, load_columns, plot_pec, render
    from ..analytics.report import DEFAULT_CHECKPOINTS
    from ..telemetry.otel_setup import configure_otel
    from .report import only_checkpoints, with_plot_depths

    if tasks < 1 or trials < 1:
        raise ValueError(f"the demo needs at least one task and one rollout, got tasks={tasks}, trials={trials}")
    folder = Path(out)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--out {folder} is a file; the demo writes several files into a folder")
    folder.mkdir(parents=True, exist_ok=True)
    records, traces = folder / "records.jsonl", folder / "traces.jsonl"
    for stale in (records, traces):
        stale.unlink(missing_ok=True)
    printer = _FirstFailures(limit=12 if live else 0)
    logger = structlog.wrap_logger(
        structlog.PrintLogger(sys.stdout), processors=[_label_method, printer], wrapper_class=structlog.BoundLogger
    )
    observers: list[Observer] = [LiveLog(logger, include_reasons=True)]
    try:
        pipeline = configure_otel(service_name="prefixmon-demo", otlp_file=traces, otlp_metrics=False)
    except ImportError as e:  # traces need the otlp extra; the rest of the demo does not
        pipeline = configure_otel(service_name="prefixmon-demo")
        traces_note = f"(not written: {e})"
    else:
        observers.append(Telemetry(tracer_provider=pipeline.tracer_provider, metrics=False))
        traces_note = str(traces)
    population = make_tasks(tasks, seed)
    print(f"prefixmon demo: {len(METHODS)} scripted agents x {len(population)} tasks x {trials} rollouts, policy=block")
    if live:
        print("live first-failure events (the monitor blocks each call before it reaches the tools):")
    with pipeline:
        monitor = run_async(lambda: run_population(tasks=population, trials=trials, seed=seed, sink=records, observers=observers))
    if live and printer.seen > printer.limit:
        print(f"  ... and {printer.seen - printer.limit} more first failures (all in {records})")
    print()
    columns = load_columns(records)
    plotted = build_report(
        columns,
        by=["method"],
        bootstrap=bootstrap,
        seed=seed,
        compare=["method=plan_conditioned,method=careful"],
        checkpoints=with_plot_depths(DEFAULT_CHECKPOINTS, columns, None),  # bands at every plotted depth
    )
    report = only_checkpoints(plotted, DEFAULT_CHECKPOINTS)
    print(render(report, "table"))
    plot = plot_pec(plotted, folder / "pec.png")
    (folder / "report.json").write_text(render(report, "json"), encoding="utf-8")
    (folder / "report.md").write_text(render(report, "markdown"), encoding="utf-8")
    print(f"episodes: {monitor.stats.episodes}, monitor-internal errors: {monitor.stats.internal_errors}")
    print(f"records: {records}\ntraces:  {traces_note}")
    print(f"report:  {folder / 'report.json'}, {folder / 'report.md'}\nplot:    {plot}")
    return 0


class DemoCommand:
    """``prefixmon demo``: scripted agents through the monitor, then the report."""

    help = "run scripted agents with different error habits through the monitor and report"
    description = (
        "Run a population of scripted agents (careful, plan-conditioned, sloppy) on a small "
        "phone-assistant tool layer through a blocking monitor, log first failures live, "
        "write episode records and OTLP traces to a folder, and print the report."
    )

    def configure(self, parser: argparse.ArgumentParser) -> None:
        """The verb's arguments."""
        parser.add_argument("--out", default="prefixmon-demo", metavar="DIR", help="output folder (default: %(default)s)")
        parser.add_argument("--tasks", type=positive_int, default=30, metavar="N", help="tasks per agent (default: %(default)s)")
        parser.add_argument(
            "--trials", type=positive_int, default=2, metavar="N", help="rollouts per task (default: %(default)s)"
        )
        parser.add_argument("--seed", type=int, default=7, help="seed of tasks and agents (default: %(default)s)")
        parser.add_argument(
            "--bootstrap", type=non_negative_int, default=2000, metavar="N", help="bootstrap resamples (default: %(default)s)"
        )
        parser.add_argument("--quiet", action="store_true", help="do not print live first-failure events")

    def run(self, args: argparse.Namespace) -> int:
        """Run the demo."""
        return main(
            out=args.out, tasks=args.tasks, trials=args.trials, seed=args.seed, bootstrap=args.bootstrap, live=not args.quiet
        )
