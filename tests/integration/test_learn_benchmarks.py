"""``prefixmon learn`` on BFCL ground-truth runs and τ-bench gold runs, executed on their environments.

A bounded version of ``benchmarks/bench_learn.py accuracy``: the learned references and
invalidations beside the hand-written toolsets, and held-out replays with the learned spec
that refuse no call the environment accepted.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from prefixmon import Toolset
from prefixmon.learn import Learner, Transcript, read_transcripts
from prefixmon.learn.evaluate import CheckReport, Refusal, check_spec, compare_rules

if TYPE_CHECKING:
    from prefixmon.adapters.taubench import Domain

pytestmark = pytest.mark.integration


def _task(episode: str) -> str:
    return episode.rsplit("_", 1)[-1] if "/multi_turn_" in episode else episode.split("-trial", 1)[0]


def _halves(transcripts: Sequence[Transcript], seed: int) -> tuple[list[Transcript], list[Transcript]]:
    tasks = sorted({_task(t.episode_id) for t in transcripts})
    random.Random(seed).shuffle(tasks)
    train = set(tasks[: len(tasks) // 2])
    return [t for t in transcripts if _task(t.episode_id) in train], [t for t in transcripts if _task(t.episode_id) not in train]


def _added(
    tools: Callable[[], Toolset], train: Sequence[Transcript], test: Sequence[Transcript]
) -> tuple[list[Refusal], CheckReport]:
    """Refusals of accepted held-out calls that the learned spec adds to the bare toolset's."""
    spec = Learner(tools()).add_all(train).spec()
    bare = anyio.run(check_spec, test, tools())
    learned = anyio.run(check_spec, test, tools().apply_spec(spec))
    seen = {(r.episode, r.depth) for r in bare.refused}
    return [r for r in learned.refused if (r.episode, r.depth) not in seen], learned


@pytest.fixture(scope="module")
def bfcl_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    pytest.importorskip("bfcl_eval", reason="the BFCL data and environment classes come with bfcl-eval")
    from prefixmon.adapters.bfcl import load_tasks
    from prefixmon.adapters.bfcl.replay import ground_truth_results, tool_definitions

    folder = tmp_path_factory.mktemp("bfcl")
    entries = ground_truth_results(load_tasks())
    gt = folder / "BFCL_v4_multi_turn_base_result.json"
    gt.write_text("".join(json.dumps(e) + "\n" for e in entries))
    probes = folder / "use_after_cancel.json"
    with probes.open("w") as fh:
        for entry in entries:
            turns = [
                [
                    [
                        c
                        for call in turn[0]
                        for c in (call, *(["retrieve_invoice(" + call[15:]] if call.startswith("cancel_booking(") else []))
                    ]
                ]
                for turn in entry["result"]
            ]
            if turns != entry["result"]:
                fh.write(json.dumps({"id": entry["id"], "result": turns}) + "\n")
    tools = folder / "tools.json"
    tools.write_text(json.dumps(tool_definitions()))
    return {"gt": list(read_transcripts([gt])), "probes": list(read_transcripts([probes])), "tools": tools}


class TestBfcl:
    """BFCL multi-turn ground truth, run on BFCL's own environment classes by the bfcl reader."""

    def toolset(self, runs: dict[str, Any]) -> Toolset:
        return Toolset.from_openai(json.loads(runs["tools"].read_text()))

    def test_references_beside_the_hand_written_ones(self, bfcl_runs: dict[str, Any]) -> None:
        """Every hand-written reference the runs exercise is learned; at most one learned reference is not hand-written."""
        from prefixmon.adapters.bfcl import build_toolset

        runs = bfcl_runs
        learner = Learner(self.toolset(runs)).add_all(runs["gt"])
        c = compare_rules(learner.spec(), build_toolset("declared"), learner=learner)
        assert c.references.recall == 1.0 and len(c.references.agreed) >= 20
        assert c.references.precision is not None and c.references.precision >= 0.95
        assert set(c.references.extra) <= {("retrieve_invoice", "insurance_id")}  # a real reference the toolset lacks
        assert c.invalidations.agreed == () and c.invalidations.extra == ()  # no use after a cancellation: no evidence

    def test_invalidation_from_uses_after_cancel(self, bfcl_runs: dict[str, Any]) -> None:
        """With the booking retrieved after its cancellation (rejected), cancel_booking invalidates booking ids, nothing else."""
        from prefixmon.adapters.bfcl import build_toolset

        runs = bfcl_runs
        learner = Learner(self.toolset(runs)).add_all([*runs["gt"], *runs["probes"]])
        c = compare_rules(learner.spec(), build_toolset("declared"), learner=learner)
        assert c.invalidations.agreed == (("cancel_booking", "booking_id"),) and c.invalidations.extra == ()

    def test_held_out_replay_refuses_no_accepted_call(self, bfcl_runs: dict[str, Any]) -> None:
        """Learn on half of the tasks, replay the other half: no accepted call is refused before it runs."""
        runs = bfcl_runs
        train, test = _halves(runs["gt"], seed=0)
        added, report = _added(lambda: self.toolset(runs), train, test)
        assert report.accepted > 500
        assert added == []
        assert report.false_errors == []


@pytest.fixture(scope="module")
def tau_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Transcript]]:
    from prefixmon.adapters.taubench.replay import gold_rollouts

    folder = tmp_path_factory.mktemp("tau")
    out: dict[str, list[Transcript]] = {}
    for domain, splits in (("airline", ["airline_test"]), ("retail", ["retail_test", "retail_dev"])):
        files = []
        for split in splits:
            path = folder / f"{split}.json"
            path.write_text(json.dumps(gold_rollouts(split)))
            files.append(path)
        out[domain] = list(read_transcripts(files))
    return out


class TestTau:
    """τ-bench gold actions (with the reads before them) on the sandbox, as τ-bench results files."""

    @staticmethod
    def toolset(domain: Domain) -> Toolset:
        from prefixmon.adapters.taubench import load_schemas
        from prefixmon.adapters.transcripts import error_text

        return Toolset.from_openai(load_schemas(domain), error_result=error_text)

    @pytest.mark.parametrize(("domain", "recall"), [("airline", 1.0), ("retail", 0.9)])
    def test_references_and_writes(self, tau_runs: dict[str, list[Transcript]], domain: Domain, recall: float) -> None:
        """Every learned reference is hand-written; the write tools are found; no invalidation where the toolset has none."""
        from prefixmon.adapters.taubench.toolsets import toolset

        learner = Learner(self.toolset(domain)).add_all(tau_runs[domain])
        spec = learner.spec()
        c = compare_rules(spec, toolset(domain), learner=learner)
        assert c.references.precision == 1.0
        assert c.references.recall is not None and c.references.recall >= recall
        if domain == "retail":
            # the lookups' bare answers ('.') and list_all_product_types' values ('*') are producers spec/1 writes;
            # get_user_details is called with ids neither the user nor a result gave (the gold skips the lookup)
            assert c.references.missed == (("get_user_details", "user_id"),)
            assert spec.tools["find_user_id_by_name_zip"].produces == {"user_id": "."}
            assert spec.tools["list_all_product_types"].produces == {"product_id": "*"}
        assert c.invalidations.extra == () and c.invalidations.missed == ()
        assert c.writes is not None and c.writes.recall == 1.0
        assert [r.text for r in spec.defaults.errors] in ([], ["^Error:"])

    @pytest.mark.parametrize("domain", ["airline", "retail"])
    def test_held_out_replay_refuses_no_accepted_call(self, tau_runs: dict[str, list[Transcript]], domain: Domain) -> None:
        """Learn on half of the tasks, replay the other half: no accepted call is refused before it runs."""
        train, test = _halves(tau_runs[domain], seed=0)
        added, report = _added(lambda: self.toolset(domain), train, test)
        assert report.accepted > 100
        assert added == []
        assert report.false_errors == []

    def test_cli_on_a_results_file(self, tau_runs: dict[str, list[Transcript]], tmp_path: Path) -> None:
        """prefixmon learn reads a τ-bench results file and writes a spec the replay toolset accepts."""
        from prefixmon._cli import main
        from prefixmon.adapters.taubench import load_schemas
        from prefixmon.adapters.taubench.replay import gold_rollouts
        from prefixmon.rules.specfile import load_spec

        results, tools, out = tmp_path / "results.json", tmp_path / "tools.json", tmp_path / "learned.yaml"
        results.write_text(json.dumps(gold_rollouts("airline_test")))
        tools.write_text(json.dumps(load_schemas("airline")))
        assert main(["learn", "--tools", str(tools), str(results), "--out", str(out)]) == 0
        assert self.toolset("airline").apply_spec(load_spec(out))["book_reservation"].refs
