"""``prefixmon learn``: each miner on small real runs, thresholds, output, merge and diff, bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from prefixmon import Monitor, Telemetry, Toolset
from prefixmon import semconv as sc
from prefixmon._cli import main
from prefixmon.learn import (
    Call,
    CorpusError,
    Learner,
    Message,
    Problem,
    Thresholds,
    Transcript,
    detect_format,
    learn,
    read_transcripts,
)
from prefixmon.learn.evaluate import check_spec, compare_rules
from prefixmon.learn.otlp import transcript_from_spans
from prefixmon.learn.output import diff_spec, dump_spec, merge_spec, render_spec, write_spec
from prefixmon.records.otlp import OtlpSpan
from prefixmon.rules.specfile import SpecFile, load_spec, parse_spec
from prefixmon.telemetry.otel_setup import configure_otel

from .learn_shop import CATALOGUE_TOOLS, TOOLS, as_messages, shop_episode
from .test_bounds import collections_watched


def shop_tools(*, catalogue: bool = False) -> Toolset:
    return Toolset.from_openai([*TOOLS, *CATALOGUE_TOOLS] if catalogue else TOOLS)


def corpus(n: int = 24, **options: Any) -> list[Transcript]:
    return [shop_episode(seed, **options) for seed in range(n)]


@pytest.fixture(scope="module")
def shop_spec() -> SpecFile:
    return learn(corpus(), tools=shop_tools())


def catalogue_learner(n: int = 24, **options: Any) -> Learner:
    return Learner(shop_tools(catalogue=True)).add_all(corpus(n, catalogue=True, **options))


@pytest.fixture(scope="module")
def catalogue_spec() -> SpecFile:
    return catalogue_learner().spec()


class TestProvenance:
    """References, producers, grounded and derived arguments from where values came from."""

    def test_reference_with_producer_and_result_key(self, shop_spec: SpecFile) -> None:
        """order_id of every order tool is a reference that get_user returns under 'orders'."""
        for tool in ("get_order", "cancel_order", "ship_to", "delete_order"):
            rule = shop_spec.tools[tool].args["order_id"]
            assert rule.ref == "order_id", tool
            assert rule.evidence is not None and rule.evidence.support >= 3 and rule.evidence.counter_examples == 0
            assert rule.evidence.first_seen is not None and rule.evidence.last_seen is not None
        assert shop_spec.tools["get_user"].produces["order_id"] == "orders"
        assert "produces.order_id" in shop_spec.tools["get_user"].evidence_for

    def test_user_stated_facts_are_grounded(self, shop_spec: SpecFile) -> None:
        """The city the user asked for is grounded; the user's id, stated by the user, is grounded too."""
        assert shop_spec.tools["ship_to"].args["city"].grounded
        assert shop_spec.tools["get_user"].args["user_id"].grounded

    def test_computed_amounts_are_derived(self, shop_spec: SpecFile) -> None:
        """A refund that sums two item prices is grounded as derived (the runtime's test), with how it was computed."""
        rule = shop_spec.tools["refund_order"].args["amount"]
        assert rule.grounded == "derived"
        assert rule.evidence is not None and any(" + " in e or " * " in e for e in rule.evidence.examples)

    def test_choices_are_not_grounded(self, shop_spec: SpecFile) -> None:
        """An enum argument is the schema's business: no grounding rule."""
        assert "reason" not in shop_spec.tools["cancel_order"].args

    def test_the_learned_spec_applies_and_checks_references(self, shop_spec: SpecFile) -> None:
        """Applied to the toolset, an invented order id is a dependency failure; a returned one passes."""

        async def run() -> tuple[bool, bool]:
            monitor = Monitor(shop_tools().apply_spec(shop_spec))
            async with monitor.episode(task_id="t") as ep:
                invented = await ep.begin("get_order", {"order_id": "#W0000001"})
                invented.done('{"order_id": "#W0000001"}')
                user = await ep.begin("get_user", {"user_id": "u"})
                user.done('{"user_id": "u", "orders": ["#W7654321"]}')
                known = await ep.begin("get_order", {"order_id": "#W7654321"})
                known.done('{"order_id": "#W7654321"}')
            return invented.verdict.executable, known.verdict.executable

        assert anyio.run(run) == (False, True)


class TestWholeResults:
    """Producers of a whole result: '.' (a bare answer) and '*' (every value of an object keyed by names)."""

    def test_bare_answer(self, catalogue_spec: SpecFile) -> None:
        """find_user answers with the bare user id that get_user then takes: produces {user_id: '.'}, with evidence."""
        assert catalogue_spec.tools["find_user"].produces == {"user_id": "."}
        evidence = catalogue_spec.tools["find_user"].evidence_for["produces.user_id"]
        assert evidence.support == 12 and evidence.first_seen == "shop-0" and evidence.last_seen == "shop-22"
        assert evidence.examples[0] == "find_user answers with a bare value (12 of 12 accepted results)"
        assert evidence.examples[1].startswith("shop-0: get_user(user_id=") and evidence.examples[1].endswith(" <- find_user")
        rule = catalogue_spec.tools["get_user"].args["user_id"]
        assert rule.ref == "user_id" and rule.user  # the next user may state what these looked up

    def test_mapping_keyed_by_names(self, catalogue_spec: SpecFile) -> None:
        """list_products returns {product name: product id}: names that are not identifiers, so produces {product_id: '*'}."""
        assert catalogue_spec.tools["list_products"].produces == {"product_id": "*"}
        evidence = catalogue_spec.tools["list_products"].evidence_for["produces.product_id"]
        assert evidence.support == 48  # the get_product and add_item calls whose product id it returned
        assert evidence.examples[0] == (
            "list_products returns objects keyed by names (24 of 24 accepted results; 12 different keys, "
            "12 not identifiers, at most 12 in one result; none names an id)"
        )
        example = evidence.examples[1]
        assert example.startswith("shop-0: add_item(product_id=") and example.endswith(" <- list_products.*")
        assert catalogue_spec.tools["get_product"].args["product_id"].ref == "product_id"

    def test_mapping_keyed_by_varying_identifiers(self, catalogue_spec: SpecFile) -> None:
        """user_directory's keys are identifiers ('ana') but differ between runs (more than twice as many keys over
        all results as one result has): a mapping keyed by names, so produces {user_id: '*'}."""
        assert catalogue_spec.tools["user_directory"].produces == {"user_id": "*"}
        why = catalogue_spec.tools["user_directory"].evidence_for["produces.user_id"].examples[0]
        assert "0 not identifiers, at most 3 in one result" in why
        keys = int(why.split("; ")[1].split(" different keys")[0])
        assert keys >= 2 * 3

    def test_records_keep_their_id_key(self, catalogue_spec: SpecFile) -> None:
        """A flat record with a key naming the id (get_product's product_id) stays a named-key producer, not '*'."""
        assert catalogue_spec.tools["get_product"].produces == {"product_id": "product_id"}
        assert catalogue_spec.tools["add_item"].args["product_id"].ref == "product_id"
        assert catalogue_spec.tools["get_user"].produces["order_id"] == "orders"
        assert "." not in catalogue_spec.tools["get_order"].produces.values()

    def test_answers_nobody_uses_produce_nothing(self, catalogue_spec: SpecFile) -> None:
        """order_total answers with a bare number that no later call takes: no producer."""
        assert catalogue_spec.tools["order_total"].produces == {}

    def test_too_few_names_are_held_back(self) -> None:
        """With three products the catalogue cannot be told from a record: no '*', and the reference is held back, noted."""
        learner = catalogue_learner(n_products=3)
        spec = learner.spec()
        assert spec.tools["list_products"].produces == {}
        assert "product_id" not in spec.tools["get_product"].args
        notes = [n for n in learner.stats.notes if n.startswith("get_product.product_id: not written as a reference")]
        assert len(notes) == 1 and "list_products: its results are not all bare answers, nor objects keyed by names" in notes[0]

    def test_mixed_answers_are_held_back(self) -> None:
        """find_user answering sometimes with the bare id and sometimes with an object: neither '.' nor a key covers it."""
        learner = catalogue_learner(lookup_json=True)
        spec = learner.spec()
        assert "." not in spec.tools["find_user"].produces.values()
        assert "user_id" not in spec.tools["get_user"].args
        assert any(n.startswith("get_user.user_id: not written") and "find_user:" in n for n in learner.stats.notes)

    def test_applied_spec_binds_whole_results(self, catalogue_spec: SpecFile) -> None:
        """At runtime the bare answer and the mapping's values are bound; ids no result gave are refused."""

        async def run() -> list[bool]:
            monitor = Monitor(shop_tools(catalogue=True).apply_spec(catalogue_spec))
            verdicts = []
            async with monitor.episode(task_id="t") as ep:
                ep.user("My email is a@example.com.")
                for tool, args, result in (
                    ("get_user", {"user_id": "user_1111_0"}, '{"user_id": "user_1111_0", "orders": []}'),  # guessed, and it ran
                    ("find_user", {"email": "a@example.com"}, "user_1111_0\n"),
                    ("get_user", {"user_id": "user_1111_0"}, '{"user_id": "user_1111_0", "orders": []}'),
                    ("user_directory", {}, '{"bo": "user_2222_1"}'),
                    ("get_user", {"user_id": "user_2222_1"}, '{"user_id": "user_2222_1", "orders": []}'),
                    ("get_product", {"product_id": "4455667788"}, '{"product_id": "4455667788", "name": "Desk Lamp"}'),
                    ("list_products", {}, '{"Desk Lamp": "4455667788", "T-Shirt": "1122334455"}'),
                    ("get_product", {"product_id": "4455667788"}, '{"product_id": "4455667788", "name": "Desk Lamp"}'),
                ):
                    pending = await ep.begin(tool, args)
                    verdicts.append(pending.verdict.executable)
                    pending.done(result)
            return verdicts

        assert anyio.run(run) == [False, True, True, True, True, False, True, True]

    async def test_held_out_catalogue_runs(self, catalogue_spec: SpecFile) -> None:
        """Catalogue runs the learner did not see: no accepted call is refused."""
        held_out = corpus(0) + [shop_episode(seed, catalogue=True) for seed in range(100, 130)]
        report = await check_spec(held_out, shop_tools(catalogue=True).apply_spec(catalogue_spec))
        assert report.accepted > 300 and report.refused == [] and report.false_errors == []

    def test_tau_retail_lookups_and_product_types(self, tmp_path: Path) -> None:
        """τ-bench retail gold runs on the sandbox: the find_user_id_by_* answers and list_all_product_types' values."""
        from prefixmon.adapters.taubench import load_schemas
        from prefixmon.adapters.taubench.replay import gold_rollouts
        from prefixmon.adapters.transcripts import error_text

        tools = Toolset.from_openai(load_schemas("retail"), error_result=error_text)
        file = tmp_path / "retail_test.json"
        file.write_text(json.dumps(gold_rollouts("retail_test")))
        learner = Learner(tools).add_all(read_transcripts([file]))
        spec = learner.spec()
        assert spec.tools["find_user_id_by_name_zip"].produces == {"user_id": "."}
        assert spec.tools["find_user_id_by_email"].produces == {"user_id": "."}
        assert spec.tools["list_all_product_types"].produces == {"product_id": "*"}
        assert spec.tools["get_product_details"].args["product_id"].ref == "product_id"
        assert spec.tools["modify_user_address"].args["user_id"].ref == "user_id"
        assert spec.tools["get_product_details"].produces["product_id"] == "product_id"
        assert spec.tools["calculate"].produces == {}
        why = spec.tools["list_all_product_types"].evidence_for["produces.product_id"].examples[0]
        assert "50 different keys" in why and "none names an id" in why
        assert not [n for n in learner.stats.notes if "not written as a reference" in n]


class TestThresholds:
    """Support and confidence decide what becomes a rule."""

    def test_min_support(self) -> None:
        """With fewer observations than min_support, nothing is a reference."""
        spec = learn(corpus(2), tools=shop_tools(), thresholds=Thresholds(min_support=50))
        assert not any(a.ref for t in spec.tools.values() for a in t.args.values())

    def test_counter_examples_need_a_lower_confidence(self) -> None:
        """One call with an id no result returned blocks the rule at confidence 1, admits it (counted) at 0.9."""
        bad = Transcript(
            episode_id="bad",
            events=(Call(tool="get_order", arguments={"order_id": "#W1234567"}, result='{"order_id": "#W1234567"}'),),
        )
        episodes = [*corpus(), bad]
        strict = learn(episodes, tools=shop_tools())
        assert strict.tools["get_order"].args.get("order_id") is None or strict.tools["get_order"].args["order_id"].ref is None
        loose = learn(episodes, tools=shop_tools(), thresholds=Thresholds(min_confidence=0.9))
        rule = loose.tools["get_order"].args["order_id"]
        assert rule.ref == "order_id" and rule.evidence is not None and rule.evidence.counter_examples == 1

    @pytest.mark.parametrize(
        "options", [{"min_support": 0}, {"min_confidence": 0.2}, {"min_rejected": 0}, {"examples": -1}, {"min_distinct": 0}]
    )
    def test_bad_thresholds(self, options: dict[str, Any]) -> None:
        """Out-of-range thresholds are refused with the name of the threshold."""
        with pytest.raises(ValueError, match=next(iter(options))):
            Thresholds(**options)

    def test_no_examples(self) -> None:
        """examples=0 writes evidence without quoting any value."""
        spec = learn(corpus(), tools=shop_tools(), thresholds=Thresholds(examples=0))
        assert all(not a.evidence.examples for t in spec.tools.values() for a in t.args.values() if a.evidence)


class TestInvalidations:
    """Ids never accepted again after a call of a tool succeeded on them."""

    def test_delete_invalidates(self, shop_spec: SpecFile) -> None:
        """delete_order invalidates order ids (the order is never accepted again); reading tools do not."""
        assert shop_spec.tools["delete_order"].invalidates == ("order_id",)
        evidence = shop_spec.tools["delete_order"].evidence_for["invalidates.order_id"]
        assert evidence.support >= 3 and evidence.counter_examples == 0
        assert not shop_spec.tools["get_order"].invalidates and not shop_spec.tools["ship_to"].invalidates

    def test_no_later_use_no_rule(self) -> None:
        """Without a later use of a deleted id there is no evidence, so no invalidation."""
        spec = learn(corpus(delete_then_use=False), tools=shop_tools())
        assert not spec.tools["get_order"].invalidates and "delete_order" not in spec.tools

    def test_invalidation_is_enforced(self, shop_spec: SpecFile) -> None:
        """With the learned spec a deleted order id is stale."""

        async def run() -> str:
            monitor = Monitor(shop_tools().apply_spec(shop_spec))
            async with monitor.episode(task_id="t") as ep:
                user = await ep.begin("get_user", {"user_id": "u"})
                user.done('{"user_id": "u", "orders": ["#W7654321"]}')
                gone = await ep.begin("delete_order", {"order_id": "#W7654321"})
                gone.done('{"deleted": true}')
                again = await ep.begin("get_order", {"order_id": "#W7654321"})
                again.done("Error: order not found")
            return again.verdict.failures[0].code

        assert anyio.run(run) == "stale_reference"


class TestAccessAndErrors:
    """Read/write tools and error-result recognisers."""

    def test_access(self, shop_spec: SpecFile) -> None:
        """ship_to changed the order read before and after it (write); get_order reads."""
        assert shop_spec.tools["ship_to"].access == "write"
        assert shop_spec.tools["ship_to"].evidence is not None and shop_spec.tools["ship_to"].evidence.support >= 1
        assert shop_spec.tools["get_order"].access == "read"

    def test_error_prefix_shared_by_tools_is_a_default(self, shop_spec: SpecFile) -> None:
        """'Error:' results of several tools become one default recogniser with examples of the results."""
        (rule,) = shop_spec.defaults.errors
        assert rule.text == "^Error:" and rule.evidence is not None and rule.evidence.support >= 3
        assert any("Error:" in e for e in rule.evidence.examples)

    def test_marked_errors_learn_json_shapes(self) -> None:
        """Results the transcript marks as errors teach the JSON shape; accepted results are counter-examples."""
        episodes = [
            Transcript(
                episode_id=f"e{i}",
                events=(
                    Call(tool="login", arguments={"user": "a"}, result={"login_status": False, "message": "no"}, error=True),
                    Call(tool="login", arguments={"user": "a"}, result={"login_status": True, "message": "ok"}, error=False),
                ),
            )
            for i in range(4)
        ]
        spec = learn(episodes)
        (rule,) = spec.tools["login"].errors
        assert (rule.json_path, rule.equals) == ("login_status", False)
        assert rule.evidence is not None and (rule.evidence.support, rule.evidence.counter_examples) == (4, 0)

    def test_is_error_flag(self) -> None:
        """MCP results with isError: true become an is_error recogniser."""
        episodes = [
            Transcript(
                episode_id=f"e{i}",
                events=(Call(tool="read_file", arguments={"path": "x"}, result={"isError": True, "content": []}),),
            )
            for i in range(3)
        ]
        assert learn(episodes).tools["read_file"].errors[0].is_error is True


class TestPreconditions:
    """A field of the referenced object that separates accepted from rejected calls."""

    def test_status_suggestion(self, shop_spec: SpecFile) -> None:
        """cancel_order gets order.status == "pending", with its let and observes, enabled by its confidence."""
        rules = shop_spec.tools["cancel_order"]
        (suggestion,) = [r for r in rules.requires if "status" in r.expr]
        assert suggestion.expr == 'order.status == "pending"'
        assert suggestion.suggested and suggestion.enabled
        assert suggestion.evidence is not None and suggestion.evidence.support >= 3
        assert suggestion.evidence.confidence is not None and suggestion.evidence.confidence >= Thresholds().enable_above
        assert suggestion.evidence.predicts == ("Error: non-pending order cannot be cancelled",)
        assert rules.let["order"].object == "order" and rules.let["order"].id == "args.order_id"
        assert any(o.object == "order" and o.id == "order_id" for o in shop_spec.tools["get_order"].observes)

    def test_enabled_suggestion_refuses(self, shop_spec: SpecFile) -> None:
        """Enabled by a person, the suggestion refuses cancelling a delivered order it observed."""
        pytest.importorskip("cel_expr_python", reason="CEL preconditions need the cel extra")
        data = dump_spec(shop_spec)
        for rule in data["tools"]["cancel_order"]["requires"]:
            rule["enabled"] = True
        spec = parse_spec(data)

        async def run() -> list[str]:
            monitor = Monitor(shop_tools().apply_spec(spec))
            codes = []
            async with monitor.episode(task_id="t") as ep:
                user = await ep.begin("get_user", {"user_id": "u"})
                user.done('{"user_id": "u", "orders": ["#W7654321"]}')
                seen = await ep.begin("get_order", {"order_id": "#W7654321"})
                seen.done('{"order_id": "#W7654321", "status": "delivered"}')
                cancel = await ep.begin("cancel_order", {"order_id": "#W7654321", "reason": "no longer needed"})
                cancel.done("Error: non-pending order cannot be cancelled")
                codes.append(cancel.verdict.failures[0].cause.value if cancel.verdict.failures else "executable")
            return codes

        assert anyio.run(run) == ["precondition"]


class TestOutput:
    """YAML and JSON output that load_spec reads back, in a stable order."""

    @pytest.mark.parametrize("suffix", [".yaml", ".yml", ".json"])
    def test_round_trip(self, shop_spec: SpecFile, tmp_path: Path, suffix: str) -> None:
        """What write_spec writes, load_spec reads back as the same spec, without comments."""
        path = write_spec(shop_spec, tmp_path / f"learned{suffix}")
        text = path.read_text(encoding="utf-8")
        assert "#" not in "".join(line.split(":", 1)[0] for line in text.splitlines())  # no comment lines
        assert dump_spec(load_spec(path)) == dump_spec(shop_spec)

    def test_stable_order(self) -> None:
        """The corpus order does not change the file; tools and arguments are sorted."""
        a = render_spec(learn(corpus(), tools=shop_tools()))
        b = render_spec(learn(list(reversed(corpus())), tools=shop_tools()))
        assert _without_evidence(a) == _without_evidence(b)
        tools = list(dump_spec(parse_spec(a))["tools"])
        assert tools == sorted(tools)

    def test_bad_extension(self, shop_spec: SpecFile, tmp_path: Path) -> None:
        """An output name that is not .yaml/.yml/.json is refused with the name."""
        with pytest.raises(ValueError, match=r"spec\.txt"):
            write_spec(shop_spec, tmp_path / "spec.txt")


def _without_evidence(text: str) -> Any:
    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if k not in ("evidence", "evidence_for")}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    return strip(dump_spec(parse_spec(text)))


HAND_WRITTEN = """\
schema: prefixmon.spec/1
tools:
  get_order:
    access: write
    args:
      order_id: {ref: purchase}
  cancel_order:
    requires:
      - expr: order.status != "shipped"
        message: shipped orders stay
    let: {order: "order[args.order_id]"}
  get_user:
    produces: {purchase: orders}
"""


class TestMerge:
    """Merging never overwrites hand-written rules; --diff shows what would change."""

    def test_hand_written_rules_stay(self, shop_spec: SpecFile) -> None:
        """A hand-written reference kind, access, producer and precondition survive; the learner's disagreements are listed."""
        existing = parse_spec(HAND_WRITTEN)
        merged = merge_spec(existing, shop_spec)
        tools = merged.spec.tools
        assert tools["get_order"].args["order_id"].ref == "purchase" and tools["get_order"].args["order_id"].evidence is None
        assert tools["get_order"].access == "write"
        assert tools["get_user"].produces["purchase"] == "orders"
        assert "order_id" not in tools["get_user"].produces  # the key already names a hand-written kind
        assert tools["cancel_order"].requires[0].expr == 'order.status != "shipped"'
        assert any("get_order.args.order_id" in k for k in merged.kept)
        assert any("get_order.access" in k for k in merged.kept)
        # learned rules the file did not have are added
        assert tools["ship_to"].args["city"].grounded
        assert tools["delete_order"].invalidates == ("order_id",)

    def test_merge_refreshes_learned_rules_and_keeps_enabled(self, shop_spec: SpecFile) -> None:
        """Merging twice is stable; a suggestion a person enabled stays enabled with new evidence."""
        data = dump_spec(shop_spec)
        for rule in data["tools"]["cancel_order"]["requires"]:
            rule["enabled"] = True
        enabled = parse_spec(data)
        fresh = learn(corpus(30), tools=shop_tools())
        merged = merge_spec(enabled, fresh).spec
        (rule,) = [r for r in merged.tools["cancel_order"].requires if "status" in r.expr]
        assert rule.enabled
        assert rule.evidence == next(r for r in fresh.tools["cancel_order"].requires if "status" in r.expr).evidence
        assert dump_spec(merge_spec(merged, fresh).spec) == dump_spec(merged)

    def test_diff(self, shop_spec: SpecFile) -> None:
        """The diff adds learned lines and removes none of the hand-written ones; the same spec has no diff."""
        existing = parse_spec(HAND_WRITTEN)
        text = diff_spec(existing, merge_spec(existing, shop_spec).spec)
        added = [line for line in text.splitlines() if line.startswith("+") and not line.startswith("+++")]
        removed = [line for line in text.splitlines() if line.startswith("-") and not line.startswith("---")]
        assert any("invalidates" in line or "order_id" in line for line in added)
        assert not any("purchase" in line or "shipped" in line for line in removed)
        assert diff_spec(shop_spec, shop_spec) == ""


class TestReaders:
    """Every transcript format reads into the same episodes."""

    def test_openai_jsonl(self, tmp_path: Path) -> None:
        """OpenAI-messages JSON Lines: user text, calls with their matched results, marks, outcome."""
        file = tmp_path / "runs.jsonl"
        episodes = corpus(3)
        lines = [json.dumps({"messages": as_messages(t), "task_id": t.episode_id, "reward": 1.0}) for t in episodes]
        messages = as_messages(episodes[0])
        messages[-1]["is_error"] = True
        lines.append(json.dumps(messages))
        file.write_text("\n".join(lines) + "\n")
        assert detect_format(file) == "openai-jsonl"
        got = list(read_transcripts([file]))
        assert [t.episode_id for t in got] == ["shop-0", "shop-1", "shop-2", "runs:4"]
        assert got[0].events == episodes[0].events and got[0].outcome == "success"
        last = [e for e in got[3].events if isinstance(e, Call)][-1]
        assert last.error is True

    def test_tau_results(self, tmp_path: Path) -> None:
        """τ-bench results files (gold runs on the sandbox): the policy is information, the instruction the user's."""
        from prefixmon.adapters.taubench.replay import gold_rollouts

        file = tmp_path / "tau.json"
        file.write_text(json.dumps(gold_rollouts("retail_dev", limit=3), indent=2))
        assert detect_format(file) == "tau"
        got = list(read_transcripts([file]))
        assert len(got) == 3
        first = got[0]
        policy, instruction = first.events[:2]
        assert isinstance(policy, Message) and isinstance(instruction, Message) and not policy.user and instruction.user
        calls = list(first.calls)
        assert calls and calls[0].result and calls[0].error is None and first.source == f"{file}:2"

    def test_bfcl_results_run_on_the_environment(self, tmp_path: Path) -> None:
        """BFCL result files: the calls run on BFCL's classes; results are data, rejections marked."""
        pytest.importorskip("bfcl_eval", reason="the BFCL data and environment classes come with bfcl-eval")
        from prefixmon.adapters.bfcl import load_tasks
        from prefixmon.adapters.bfcl.replay import ground_truth_results

        task = next(t for t in load_tasks(["base"]) if "TravelAPI" in t.involved_classes)
        entry = ground_truth_results([task])[0]
        wrong = {"id": task.id, "result": [[["cancel_booking(access_token='nope', booking_id='0000000')"]]]}
        file = tmp_path / "BFCL_v4_multi_turn_base_result.json"
        file.write_text(json.dumps(entry) + "\n" + json.dumps(wrong) + "\n")
        assert detect_format(file) == "bfcl"
        first, second = list(read_transcripts([file]))
        assert first.given and any(isinstance(c.result, dict) for c in first.calls)
        assert all(c.error is False for c in first.calls if c.ran)
        (bad,) = second.calls
        assert bad.error is True

    async def test_otlp_traces_with_content(self, tmp_path: Path) -> None:
        """Traces recorded with capture_content: arguments, results and rejections per call; without content, skipped."""
        traces, bare = tmp_path / "with.otlp.jsonl", tmp_path / "without.otlp.jsonl"
        for path, content in ((traces, True), (bare, False)):
            otel = configure_otel(otlp_file=path)
            tools = shop_tools()
            monitor = Monitor(tools, observers=[Telemetry(tracer_provider=otel.tracer_provider, capture_content=content)])
            for seed in range(2):
                recorded = shop_episode(seed)
                async with monitor.episode(task_id=recorded.episode_id) as ep:
                    for event in recorded.calls:
                        pending = await ep.begin(event.tool, event.arguments)
                        if str(event.result).startswith("Error:"):
                            pending.failed(str(event.result))
                        else:
                            pending.done(event.result)
            otel.shutdown()
        assert detect_format(traces) == "otlp"
        got = list(read_transcripts([traces]))
        assert len(got) == 2
        calls = list(got[0].calls)
        assert calls[0].tool == "get_user" and isinstance(calls[0].arguments, dict)
        assert calls[0].error is None  # the result text decides
        assert any(c.error for c in calls)
        problems: list[Problem] = []
        assert list(read_transcripts([bare], problems=problems)) == []
        assert len(problems) == 2 and "capture_content" in problems[0].message


class TestBadInput:
    """A malformed line is reported with file and line and skipped; an empty corpus is an error that says so."""

    def test_captured_arguments_nested_too_deeply(self) -> None:
        """Captured arguments nested 5,000 deep are a call without usable arguments, not a RecursionError."""
        root = OtlpSpan(trace_id="t", span_id="r", name="invoke_agent", attributes={sc.PREFIXMON_EPISODE_ID: "e-1"})
        deep = '{"a": ' + "[" * 5_000 + "]" * 5_000 + "}"
        call = OtlpSpan(
            trace_id="t",
            span_id="c",
            parent_span_id="r",
            name="execute_tool f",
            attributes={sc.GEN_AI_TOOL_NAME: "f", sc.GEN_AI_TOOL_CALL_ARGUMENTS: deep, sc.PREFIXMON_DEPTH: 1},
        )
        with collections_watched() as failures:
            transcript = transcript_from_spans(root, [call])
        assert failures == []
        assert not isinstance(transcript, str)
        (event,) = transcript.events
        assert isinstance(event, Call) and event.tool == "f"

    def test_malformed_jsonl_lines(self, tmp_path: Path) -> None:
        """Not JSON, not UTF-8 and not a conversation: each named by line; the good lines are read."""
        file = tmp_path / "runs.jsonl"
        good = json.dumps({"messages": as_messages(shop_episode(1))})
        file.write_bytes(f"{good}\n{{not json\n".encode() + b"\xff\xfe\n" + b'{"messages": 3}\n' + f"{good}\n".encode())
        problems: list[Problem] = []
        got = list(read_transcripts([file], format="openai-jsonl", problems=problems))
        assert len(got) == 2
        assert [(p.line, p.path) for p in problems] == [(2, str(file)), (3, str(file)), (4, str(file))]
        assert "not JSON" in problems[0].message and "UTF-8" in problems[1].message

    def test_where_a_truncated_line_breaks(self, tmp_path: Path) -> None:
        """A line cut short is reported at the column where it ends (it said column 1)."""
        file = tmp_path / "runs.jsonl"
        good = json.dumps({"messages": as_messages(shop_episode(1))})
        cut = good[: good.index(', "', 20) + 1]  # ends with a comma: the next key is missing
        file.write_text(f"{good}\n{cut}\n{good}")
        problems: list[Problem] = []
        assert len(list(read_transcripts([file], format="openai-jsonl", problems=problems))) == 2
        (problem,) = problems
        assert problem.line == 2 and f"at column {len(cut) + 1})" in problem.message, problem.message

    def test_concatenated_files(self, tmp_path: Path) -> None:
        """``cat`` of files saved with a byte order mark, one without its last newline: every conversation is read."""
        file = tmp_path / "runs.jsonl"
        one, two, three = (json.dumps({"messages": as_messages(shop_episode(seed))}) for seed in (1, 2, 3))
        file.write_text(f"\ufeff{one}\n\ufeff{two}{three}\n", encoding="utf-8")
        problems: list[Problem] = []
        got = list(read_transcripts([file], format="openai-jsonl", problems=problems))
        assert problems == []
        assert [t.episode_id for t in got] == ["runs:1", "runs:2.1", "runs:2.2"]
        assert [t.events for t in got] == [t.events for t in read_transcripts([_one_per_line(tmp_path, one, two, three)])]

    def test_a_deeply_nested_line_leaves_collections_room(self, tmp_path: Path) -> None:
        """A 5,000-deep line is one bad line, read without json recursing near the interpreter's limit."""
        file = tmp_path / "runs.jsonl"
        good = json.dumps({"messages": as_messages(shop_episode(1))})
        file.write_text(f"{good}\n" + '{"messages": [' + "[" * 5_000 + "]" * 5_000 + f"]}}\n{good}\n")
        problems: list[Problem] = []
        with collections_watched() as failures:
            got = list(read_transcripts([file], format="openai-jsonl", problems=problems))
        assert failures == []
        assert len(got) == 2 and [(p.line, "nested too deeply" in p.message) for p in problems] == [(2, True)]

    def test_an_unknown_format_names_what_each_reader_expects(self, tmp_path: Path) -> None:
        """The error quotes the file's start and lists every format with what it reads."""
        file = tmp_path / "notes.txt"
        file.write_text("hello world\n")
        with pytest.raises(CorpusError, match="cannot tell its transcript format") as caught:
            detect_format(file)
        text = str(caught.value)
        assert "it starts 'hello world'" in text
        assert "records: prefixmon episode records" in text and "otlp: OTLP JSON Lines traces" in text

    def test_a_folder_is_named_as_one(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A folder given as a file: 'is a folder', not 'no such file'."""
        from prefixmon._cli import main

        with pytest.raises(IsADirectoryError, match="a folder"):
            list(read_transcripts([tmp_path]))
        tools = tmp_path / "tools.json"
        tools.write_text(json.dumps(TOOLS))
        assert main(["learn", str(tmp_path), "--tools", str(tools), "--out", str(tmp_path / "s.yaml")]) == 1
        err = capsys.readouterr().err
        assert f"{tmp_path} is a folder" in err and "no such file" not in err

    def test_malformed_tau_rollout(self, tmp_path: Path) -> None:
        """A rollout that is not one is reported with its line; a truncated file stops where it breaks."""
        from prefixmon.adapters.taubench.replay import gold_rollouts

        rollouts: list[Any] = gold_rollouts("retail_dev", limit=2)
        rollouts.insert(1, {"task_id": 9, "traj": "nope"})
        file = tmp_path / "tau.json"
        file.write_text(json.dumps(rollouts, indent=1))
        problems: list[Problem] = []
        assert len(list(read_transcripts([file], format="tau", problems=problems))) == 2
        (problem,) = problems
        starts = [n for n, line in enumerate(file.read_text().splitlines(), start=1) if line == " {"]
        assert problem.line == starts[1]
        assert "traj" in problem.message and problem.episode == "9"
        cut = tmp_path / "cut.json"
        cut.write_text(file.read_text()[: len(file.read_text()) // 2])
        problems = []
        got = list(read_transcripts([cut], format="tau", problems=problems))
        assert len(got) == 1 and problems and "rest of the file" in problems[-1].message

    def test_empty_corpus(self, tmp_path: Path) -> None:
        """No transcript at all is an error; so is a corpus without tool calls."""
        with pytest.raises(CorpusError, match="empty"):
            learn([], tools=shop_tools())
        with pytest.raises(CorpusError, match="no tool call"):
            learn([Transcript(episode_id="e", events=(Message(text="hello"),))], tools=shop_tools())
        with pytest.raises(CorpusError, match="no tool call of a declared tool"):
            learn([Transcript(episode_id="e", events=(Call(tool="other", arguments={}),))], tools=shop_tools())

    def test_unknown_format(self, tmp_path: Path) -> None:
        """A file no reader recognises asks for --format; an unknown --format lists the known ones."""
        file = tmp_path / "notes.txt"
        file.write_text("hello\n")
        with pytest.raises(CorpusError, match="--format"):
            list(read_transcripts([file]))
        with pytest.raises(CorpusError, match="openai-jsonl"):
            list(read_transcripts([file], format="nope"))


class TestCli:
    """prefixmon learn."""

    def write_corpus(self, tmp_path: Path) -> tuple[Path, Path]:
        tools, runs = tmp_path / "tools.json", tmp_path / "runs.jsonl"
        tools.write_text(json.dumps(TOOLS))
        runs.write_text("".join(json.dumps({"messages": as_messages(t), "task_id": t.episode_id}) + "\n" for t in corpus()))
        return tools, runs

    def test_learn_writes_a_spec(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """--out writes a spec load_spec reads; the summary counts the rules."""
        tools, runs = self.write_corpus(tmp_path)
        out = tmp_path / "learned.yaml"
        assert main(["learn", "--tools", str(tools), str(runs), "--out", str(out)]) == 0
        assert load_spec(out).tools["get_order"].args["order_id"].ref == "order_id"
        assert "references" in capsys.readouterr().out

    def test_enable_above(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """--enable-above decides which learned preconditions are written enabled; the summary counts both."""
        tools, runs = self.write_corpus(tmp_path)
        out = tmp_path / "learned.yaml"
        assert main(["learn", "--tools", str(tools), str(runs), "--out", str(out)]) == 0
        assert any(r.enabled for r in load_spec(out).tools["cancel_order"].requires)
        printed = capsys.readouterr()
        assert "enabled" in printed.out and "learned precondition(s) are enabled" in printed.err
        assert main(["learn", "--tools", str(tools), str(runs), "--out", str(out), "--enable-above", "1"]) == 0
        requires = load_spec(out).tools["cancel_order"].requires
        assert requires and not any(r.enabled for r in requires)
        assert main(["learn", "--tools", str(tools), str(runs), "--out", str(out), "--enable-above", "2"]) == 1
        assert "enable_above" in capsys.readouterr().err

    def test_an_empty_shard_among_the_inputs(self, tmp_path: Path) -> None:
        """An empty file of a run with a given format adds nothing and stops nothing (the input check refused it)."""
        tools, runs = self.write_corpus(tmp_path)
        empty = tmp_path / "empty.jsonl"
        empty.write_text("")
        out = tmp_path / "learned.yaml"
        args = ["learn", "--format", "openai-jsonl", "--tools", str(tools), str(runs), str(empty), "--out", str(out)]
        assert main(args) == 0 and load_spec(out).tools["get_order"].args["order_id"].ref == "order_id"

    def test_diff_writes_nothing_and_merge_keeps_hand_written(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """--diff prints a unified diff and writes nothing; --merge keeps the hand-written rules."""
        tools, runs = self.write_corpus(tmp_path)
        existing = tmp_path / "spec.yaml"
        existing.write_text(HAND_WRITTEN)
        before = existing.read_text()
        assert main(["learn", "--tools", str(tools), str(runs), "--merge", str(existing), "--diff"]) == 0
        captured = capsys.readouterr()
        assert captured.out.startswith("---") and "+++" in captured.out and "kept:" in captured.err
        assert existing.read_text() == before
        assert main(["learn", "--tools", str(tools), str(runs), "--merge", str(existing), "--out", str(existing)]) == 0
        merged = load_spec(existing)
        assert merged.tools["get_order"].args["order_id"].ref == "purchase"

    def test_skipped_lines_exit_1(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A malformed line is named with file and line, the spec is still written, the exit code is 1."""
        tools, runs = self.write_corpus(tmp_path)
        with runs.open("a") as fh:
            fh.write("{broken\n")
        out = tmp_path / "learned.json"
        assert main(["learn", "--tools", str(tools), str(runs), "--out", str(out)]) == 1
        assert f"skipped: {runs}:25" in capsys.readouterr().err
        assert out.is_file()

    def test_bad_tools_file_and_empty_corpus(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A tools file that is not JSON names file and line; an empty transcript file says the corpus is empty."""
        tools, runs = self.write_corpus(tmp_path)
        bad = tmp_path / "bad.json"
        bad.write_text('[{"type": "function",\n oops}]')
        assert main(["learn", "--tools", str(bad), str(runs), "--out", str(tmp_path / "x.yaml")]) == 1
        assert f"{bad}:2" in capsys.readouterr().err
        empty = tmp_path / "empty.jsonl"
        empty.write_text("")
        assert (
            main(["learn", "--tools", str(tools), str(empty), "--format", "openai-jsonl", "--out", str(tmp_path / "x.yaml")]) == 1
        )
        assert "empty" in capsys.readouterr().err

    def test_out_or_diff_required(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """Without --out and without --diff, learn says what it needs (exit 2)."""
        tools, runs = self.write_corpus(tmp_path)
        assert main(["learn", "--tools", str(tools), str(runs)]) == 2
        assert "--out" in capsys.readouterr().err


class TestEvaluate:
    """Comparing with a hand-written toolset; replays that must not refuse what ran."""

    def test_compare_rules(self, shop_spec: SpecFile) -> None:
        """Precision and recall against hand-written refs; rules the corpus never exercised are left out of recall."""
        refs = {"refs": {"order_id": "order_id"}}
        reference = Toolset.from_openai(
            TOOLS, rules=dict.fromkeys(("get_order", "cancel_order", "ship_to", "refund_order"), refs)
        )
        learner = Learner(shop_tools()).add_all(corpus())
        c = compare_rules(learner.spec(), reference, learner=learner)
        assert c.references.recall == 1.0 and c.references.precision is not None and c.references.precision < 1.0
        assert ("delete_order", "order_id") in c.references.extra
        assert c.writes is None

    async def test_held_out_replay(self, shop_spec: SpecFile) -> None:
        """Episodes the learner did not see: no accepted call is refused; rejected stale ids are caught."""
        held_out = [shop_episode(seed) for seed in range(100, 130)]
        report = await check_spec(held_out, shop_tools().apply_spec(shop_spec))
        assert report.accepted > 100 and report.refused == [] and report.false_errors == []
        assert report.caught >= 30  # every get_order of a deleted order


def _one_per_line(folder: Path, *lines: str) -> Path:
    file = folder / "plain.jsonl"
    file.write_text("".join(f"{line}\n" for line in lines))
    return file
