"""Task completion (task-completion chapter): S/P/F, unstable tasks, attribution, review sample."""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from prefixmon import RecordError
from prefixmon.analytics import (
    CHECKLIST,
    build_report,
    columns_from_records,
    read_annotations,
    review_sample,
    write_review_sheet,
)
from prefixmon.records import ActionRecord, EpisodeRecord, build_record
from prefixmon.vocabulary import Cause, Outcome

NOW = datetime(2026, 1, 1, tzinfo=UTC)
OUTCOME = {"S": Outcome.SUCCESS, "P": Outcome.PARTIAL, "F": Outcome.FAILURE}

# The chapter's worked example: 12 tasks, each run twice.
TASKS = {
    "查库存并下单": "SS",
    "汇总周报数据": "SS",
    "生成退款工单": "SS",
    "批量改订单地址": "PS",
    "检索竞品价格": "SF",
    "跨系统核对发票": "FF",
    "重置会员积分": "SS",
    "导出对账单": "SP",
    "多条件筛选工单": "PF",
    "回复催件邮件": "SS",
    "核销优惠券": "FS",
    "归档旧工单": "PP",
}
# The chapter's human attribution of the abnormal tasks (its own category names).
CAUSES = {
    "批量改订单地址": ("模型", "长任务中途丢失指令约束"),
    "检索竞品价格": ("环境", "目标页面改版，选择器失效"),  # noqa: RUF001 - the chapter's own text
    "跨系统核对发票": ("工具", "发票接口超时且无重试"),
    "导出对账单": ("题目", "任务描述存在两种合理理解"),
    "多条件筛选工单": ("模型", "条件组合遗漏一项"),
    "核销优惠券": ("环境", "沙箱时间与真实时间不一致"),
    "归档旧工单": ("工具", "归档接口分页参数错误"),
}


def chapter_records(labels: dict[str, str] | None = None) -> list[EpisodeRecord]:
    """One real record per run of the chapter's example (two actions; F runs fail at depth 2)."""
    out = []
    for task, runs in TASKS.items():
        for r, code in enumerate(runs):
            bad = code == "F"
            actions = [
                ActionRecord(depth=1, tool="lookup", executable=True),
                ActionRecord(
                    depth=2,
                    tool="update",
                    executable=not bad,
                    cause=Cause.STATE_CONSISTENCY if bad else None,
                    reason="the service rejected the update" if bad else None,
                ),
            ]
            out.append(
                build_record(
                    episode_id=f"{task}#{r}",
                    task_id=task,
                    labels=labels or {"model": "m1"},
                    actions=actions,
                    outcome=OUTCOME[code],
                    started_at=NOW,
                    ended_at=NOW,
                )
            )
    return out


class TestThreeState:
    """S/P/F counts and weighted completion."""

    def test_chapter_example(self) -> None:
        """24 runs: S 14 / P 5 / F 5, weighted completion (14 + 2.5) / 24 = 68.8%."""
        c = build_report(chapter_records(), bootstrap=0).cohorts[0]
        assert c.outcomes == {"success": 14, "partial": 5, "failure": 5, "none": 0}
        assert c.completion.value == pytest.approx(16.5 / 24)
        assert f"{(c.completion.value or 0) * 100:.1f}%" == "68.8%"


class TestUnstable:
    """Tasks whose reruns disagree."""

    def test_chapter_example(self) -> None:
        """The five tasks the chapter lists, with mean ± sample standard deviation of the score."""
        c = build_report(chapter_records(), bootstrap=0).cohorts[0]
        assert {u.task_id for u in c.unstable} == {"批量改订单地址", "检索竞品价格", "导出对账单", "多条件筛选工单", "核销优惠券"}
        assert c.rerun_tasks == 12
        ps = next(u for u in c.unstable if u.task_id == "批量改订单地址")
        assert ps.runs == 2
        assert ps.outcomes == {"success": 1, "partial": 1}
        assert ps.mean == pytest.approx(0.75)
        assert ps.spread == pytest.approx(0.5 / 2**0.5)  # sd of (1, 0.5), ddof = 1
        sf = next(u for u in c.unstable if u.task_id == "检索竞品价格")
        assert (sf.mean, sf.spread) == pytest.approx((0.5, 2**0.5 / 2))

    def test_per_cohort(self) -> None:
        """Reruns are compared within a cohort: the same task in two models is not a rerun."""
        records = [r for r in chapter_records({"model": "a"}) if r.episode_id.endswith("#0")]
        records += [r for r in chapter_records({"model": "b"}) if r.episode_id.endswith("#1")]
        report = build_report(records, by=["model"], bootstrap=0)
        assert all(c.unstable == () and c.rerun_tasks == 0 for c in report.cohorts)

    def test_same_task_id_in_two_datasets_is_two_tasks(self) -> None:
        """t0..t4 exist in bfcl and in toolsandbox (different tasks), one run each, pooled by model.

        10 distinct tasks, no reruns and nothing unstable, though bfcl succeeded and toolsandbox failed.
        """
        records = []
        for dataset, code in (("bfcl", "S"), ("toolsandbox", "F")):
            for t in range(5):
                labels = {"dataset": dataset, "model": "m"}
                actions = [ActionRecord(depth=1, tool="lookup", executable=True)]
                records.append(
                    build_record(
                        episode_id=f"{dataset}-{t}",
                        task_id=f"t{t}",
                        labels=labels,
                        actions=actions,
                        outcome=OUTCOME[code],
                        started_at=NOW,
                        ended_at=NOW,
                    )
                )
        again = build_record(
            episode_id="bfcl-0-again",
            task_id="t0",
            labels={"dataset": "bfcl", "model": "m"},
            actions=[ActionRecord(depth=1, tool="lookup", executable=True)],
            outcome=Outcome.FAILURE,
            started_at=NOW,
            ended_at=NOW,
        )
        c = build_report(records, by=["model"], bootstrap=0).cohorts[0]
        assert (c.n, c.tasks, c.rerun_tasks, c.unstable) == (10, 10, 0, ())
        c = build_report([*records, again], by=["model"], bootstrap=0).cohorts[0]
        assert (c.n, c.tasks, c.rerun_tasks) == (11, 10, 1)
        (u,) = c.unstable
        assert (u.dataset, u.task_id, u.runs, dict(u.outcomes)) == ("bfcl", "t0", 2, {"success": 1, "failure": 1})


def test_a_run_without_outcome_scores_as_a_failure_for_instability() -> None:
    """Reruns disagree when their S / P / F results do: a run without an outcome (cancelled,
    not judged) counts as F, as it does in success and completion (fixed cohort), so F and
    no outcome agree and S and no outcome do not; the runs per outcome still say which it was."""

    def run(task: str, i: int, outcome: Outcome | None) -> EpisodeRecord:
        return build_record(
            episode_id=f"{task}-{i}",
            task_id=task,
            labels={"model": "m"},
            actions=[ActionRecord(depth=1, tool="lookup", executable=True)],
            outcome=outcome,
            started_at=NOW,
            ended_at=NOW,
        )

    records = [run("t0", 0, Outcome.FAILURE), run("t0", 1, None), run("t1", 0, Outcome.SUCCESS), run("t1", 1, None)]
    c = build_report(records, by=["model"], bootstrap=0).cohorts[0]
    assert c.rerun_tasks == 2
    assert [(u.task_id, dict(u.outcomes), u.mean) for u in c.unstable] == [("t1", {"success": 1, "none": 1}, 0.5)]


def write_chapter_annotations(path: Path) -> Path:
    """The chapter's CAUSES table as a task-level JSON Lines annotation file."""
    with path.open("w", encoding="utf-8") as f:
        for task, (who, note) in CAUSES.items():
            f.write(json.dumps({"task_id": task, "attribution": who, "note": note}, ensure_ascii=False) + "\n")
    return path


class TestAttribution:
    """Failure attribution counts from a human annotation file."""

    def test_chapter_example(self, tmp_path: Path) -> None:
        """Episode counts per attribution; model-only completion leaves out tool, environment and task failures."""
        path = write_chapter_annotations(tmp_path / "review.jsonl")
        report = build_report(chapter_records(), bootstrap=0, annotations=path)
        a = report.cohorts[0].attribution
        assert a is not None
        # non-success runs: model 1 (PS) + 2 (PF); environment 1 (SF) + 1 (FS); tool 2 (FF) + 2 (PP); task 1 (SP)
        assert a.counts == {"model": 3, "tool": 4, "environment": 2, "task": 1, "unattributed": 0}
        assert a.excluded == 7
        # (S + 0.5 P) without the excluded runs: 14 + 0.5 * (5 - 3 excluded partials) over 24 - 7 runs
        assert a.model_only_completion == pytest.approx(15 / 17)
        assert a.model_failure_rate == pytest.approx(3 / 17)
        assert report.unmatched_annotations == ()

    def test_episode_level_overrides_task_level_and_label_filters(self, tmp_path: Path) -> None:
        """An episode_id row wins over its task's row; ``label.<key>`` restricts a task-level row."""
        path = tmp_path / "notes.csv"
        with path.open("w", encoding="utf-8", newline="") as f:
            w = csv.writer(f)
            w.writerow(["episode_id", "task_id", "label.model", "attribution", "note"])
            w.writerow(["", "跨系统核对发票", "m1", "tool", "timeout"])
            w.writerow(["跨系统核对发票#1", "", "", "model", "gave up early"])
            w.writerow(["", "归档旧工单", "other-model", "tool", "does not apply to m1"])
            w.writerow(["", "查库存并下单", "", "", "not filled in yet"])
        report = build_report(chapter_records(), bootstrap=0, annotations=path)
        a = report.cohorts[0].attribution
        assert a is not None
        assert a.counts["tool"] == 1 and a.counts["model"] == 1
        assert a.counts["unattributed"] == 10 - 2
        assert [u.where.endswith(":4") for u in report.unmatched_annotations] == [True]

    def test_bad_rows(self, tmp_path: Path) -> None:
        """An unknown attribution or a row without ids is an error naming file and line."""
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"task_id": "x", "attribution": "model"}\n{"task_id": "y", "attribution": "luck"}\n')
        with pytest.raises(RecordError, match=r"bad\.jsonl:2: attribution: expected one of model, tool"):
            read_annotations(bad)
        bad.write_text('{"attribution": "tool"}\n')
        with pytest.raises(RecordError, match=r"bad\.jsonl:1: a row needs episode_id or task_id"):
            read_annotations(bad)


class TestReviewSample:
    """Every F and P, a seeded 20% of S, exported with the five-item checklist."""

    def test_selection(self) -> None:
        """10 non-success runs + ceil(0.2 * 14) = 3 successes; seeded and reproducible."""
        columns = columns_from_records(chapter_records())
        items = review_sample(columns, seed=1)
        assert len(items) == 13
        assert sum(it.selected == "sampled success" for it in items) == 3
        assert {it.selected for it in items if it.outcome != "success"} == {"failure", "partial"}
        assert [it.episode_id for it in review_sample(columns, seed=1)] == [it.episode_id for it in items]
        picks = {
            tuple(sorted(it.episode_id for it in review_sample(columns, seed=s) if it.outcome == "success")) for s in range(8)
        }
        assert len(picks) > 1
        assert len(review_sample(columns, fraction=1.0)) == 24
        with pytest.raises(ValueError, match="fraction"):
            review_sample(columns, fraction=1.5)

    def test_sheet_round_trip(self, tmp_path: Path) -> None:
        """The sheet has the checklist columns; once filled in, it reads back as an annotation file."""
        columns = columns_from_records(chapter_records())
        items = review_sample(columns, seed=0)
        path = tmp_path / "review.csv"
        assert write_review_sheet(path, items) == len(items)
        with path.open(encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
        header = list(rows[0])
        for column, _ in CHECKLIST:
            assert column in header
        assert [c for c, _ in CHECKLIST] == [
            "goal_reachable",
            "steps_supported",
            "tool_calls_correct",
            "context_used",
            "termination_reasonable",
        ]
        failed = next(r for r in rows if r["outcome"] == "failure")
        assert failed["first_failure_cause"] == "state_consistency"
        assert failed["first_failure_tool"] == "update"
        for r in rows:
            if r["outcome"] != "success":
                r["attribution"] = "environment"
        with path.open("w", encoding="utf-8", newline="") as f:
            w = csv.DictWriter(f, fieldnames=header)
            w.writeheader()
            w.writerows(rows)
        notes = read_annotations(path)
        assert len(notes) == 10 and all(n.episode_id for n in notes)
        report = build_report(chapter_records(), bootstrap=0, annotations=notes)
        a = report.cohorts[0].attribution
        assert a is not None and a.counts["environment"] == 10 and a.model_only_completion == 1.0
