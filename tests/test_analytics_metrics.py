"""Exactness and properties of the prefix-executability metrics (DESIGN §3, paper eqs. 1-12)."""

from __future__ import annotations

from datetime import UTC, datetime
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixmon.analytics import build_report, columns_from_records
from prefixmon.analytics.metrics import cohort_sums, group
from prefixmon.records import ActionRecord, EpisodeRecord, build_record
from prefixmon.vocabulary import Cause, Outcome

NOW = datetime(2026, 1, 1, tzinfo=UTC)
LABELS = {"dataset": "bfcl", "model": "llama-4", "method": "plan_conditioned_react"}


def episode(
    n: int,
    horizon: int,
    fed: int,
    outcome: Outcome | None,
    *,
    task: str | None = None,
    labels: dict[str, str] | None = None,
    cause: Cause = Cause.DEPENDENCY,
) -> EpisodeRecord:
    """A real record whose first non-executable action is at depth ``fed`` (fed = horizon+1: none)."""
    actions = [
        ActionRecord(
            depth=d,
            tool=f"tool_{d}",
            executable=d != fed,
            cause=cause if d == fed else None,
            reason="not executable" if d == fed else None,
        )
        for d in range(1, horizon + 1)
    ]
    return build_record(
        episode_id=f"ep-{n}",
        task_id=task or f"task-{n}",
        labels=labels if labels is not None else LABELS,
        actions=actions,
        outcome=outcome,
        started_at=NOW,
        ended_at=NOW,
    )


def worked_example() -> list[EpisodeRecord]:
    """BFCL, Llama-4, plan-conditioned ReAct (paper §3.1): 200 episodes, 10 fully executable
    and all successful, 190 with a prefix failure of which 138 succeed."""
    records = [episode(i, 4, 5, Outcome.SUCCESS) for i in range(10)]
    for i in range(10, 200):
        records.append(episode(i, 6, 1 + i % 6, Outcome.SUCCESS if i < 148 else Outcome.FAILURE))
    return records


class TestWorkedExample:
    """The paper's worked example of eq. (12)."""

    def test_ter_rr_success_and_eligible(self) -> None:
        """TER 0.05, RR 138/190 ~ 0.7263, success 0.74, RR-eligible 190."""
        c = build_report(worked_example(), bootstrap=0).cohorts[0]
        assert c.n == 200
        assert c.ter.value == 0.05
        assert c.rr.value == pytest.approx(138 / 190)
        assert round(c.rr.value or 0.0, 4) == 0.7263
        assert c.rr.eligible == 190
        assert c.rr.recovered == 138
        assert c.success.value == 0.74

    def test_decomposition(self) -> None:
        """P(Y=1) = q·s + (1-q)·r = 0.05·1 + 0.95·(138/190); 138/148 of successes followed an invalid prefix."""
        c = build_report(worked_example(), bootstrap=0).cohorts[0]
        d = c.decomposition
        assert (d.q, d.s) == (0.05, 1.0)
        assert d.r == pytest.approx(138 / 190)
        assert d.q * (d.s or 0) + (1 - d.q) * (d.r or 0) == pytest.approx(0.74)
        assert d.uninterrupted == pytest.approx(10 / 200)
        assert d.recovered == pytest.approx(138 / 200)
        assert d.recovered / (c.success.value or 1) == pytest.approx(138 / 148)
        assert round(138 / 148, 3) == 0.932

    def test_causes_sum_to_eligible(self) -> None:
        """Primary-cause counts are mutually exclusive and sum to RR-eligible (§2.4)."""
        c = build_report(worked_example(), bootstrap=0).cohorts[0]
        assert sum(c.causes.values()) == c.rr.eligible
        assert c.causes["dependency"] == 190

    def test_wilson_interval_present_without_bootstrap(self) -> None:
        """RR's interval is Wilson's on its eligible denominator, bootstrap or not."""
        c = build_report(worked_example(), bootstrap=0).cohorts[0]
        assert c.rr.ci is not None
        low, high = c.rr.ci
        assert low < 138 / 190 < high
        assert c.ter.ci is None


class TestHandComputed:
    """A four-episode cohort computed by hand."""

    def records(self) -> list[EpisodeRecord]:
        """(T, FED, Y): (3, 4, 1), (2, 1, 0), (4, 3, 1), (1, 2, 0)."""
        return [
            episode(1, 3, 4, Outcome.SUCCESS),
            episode(2, 2, 1, Outcome.FAILURE, cause=Cause.SCHEMA),
            episode(3, 4, 3, Outcome.SUCCESS, cause=Cause.PRECONDITION),
            episode(4, 1, 2, Outcome.PARTIAL),
        ]

    def test_scalars(self) -> None:
        """TER 2/4, mean FED 10/4, AUC-PEC (1 + 0 + 1/2 + 1)/4, RR 1/2 on 2 eligible, success 1/2."""
        c = build_report(self.records(), bootstrap=0).cohorts[0]
        assert c.ter.value == 0.5
        assert c.mean_fed.value == 2.5
        assert c.auc_pec.value == 0.625
        assert (c.rr.value, c.rr.eligible) == (0.5, 2)
        assert c.success.value == 0.5
        assert c.completion.value == (2 + 0.5) / 4

    def test_curves(self) -> None:
        """PEC = [3/4, 2/4, 1/4, 0], n_k = [4, 3, 2, 1], PEC_elig = [3/4, 2/3, 1/2, 0]."""
        c = build_report(self.records(), bootstrap=0).cohorts[0]
        assert c.pec == (0.75, 0.5, 0.25, 0.0)
        assert c.n_k == (4, 3, 2, 1)
        assert c.pec_elig == pytest.approx((0.75, 2 / 3, 0.5, 0.0))
        assert c.checkpoints[1].value == 0.75
        assert c.checkpoints[10].value == 0.0

    def test_causes_outcomes_and_s(self) -> None:
        """Causes by first failure; S/P/F counts; s = P(Y=1 | executable) = 1/2."""
        c = build_report(self.records(), bootstrap=0).cohorts[0]
        assert c.causes == {
            "schema": 1,
            "dependency": 0,
            "precondition": 1,
            "state_consistency": 0,
            "information": 0,
            "provenance": 0,
        }
        assert c.outcomes == {"success": 2, "partial": 1, "failure": 1, "none": 0}
        assert c.decomposition.s == 0.5


class TestUndefinedAndEdges:
    """RR undefined when nothing failed; missing outcomes; grouping."""

    def test_rr_undefined_not_zero(self) -> None:
        """All episodes fully executable: RR is None (not 0), RR-eligible 0, no interval."""
        records = [episode(i, 3, 4, Outcome.SUCCESS if i % 2 else Outcome.FAILURE) for i in range(6)]
        c = build_report(records, bootstrap=200).cohorts[0]
        assert c.rr.value is None
        assert c.rr.ci is None
        assert c.rr.eligible == 0
        assert c.ter.value == 1.0
        assert c.decomposition.r is None
        assert c.decomposition.s == 0.5

    def test_s_undefined_when_nothing_executable(self) -> None:
        """No fully executable episode: s is None and success equals RR."""
        records = [episode(i, 2, 1, Outcome.SUCCESS if i < 3 else Outcome.FAILURE) for i in range(5)]
        c = build_report(records, bootstrap=0).cohorts[0]
        assert c.decomposition.s is None
        assert c.success.value == c.rr.value == 0.6

    def test_missing_outcome_counts_as_not_success(self) -> None:
        """An episode without an outcome has Y = 0 and is counted under ``none``."""
        records = [episode(1, 2, 3, None), episode(2, 2, 3, Outcome.SUCCESS)]
        c = build_report(records, bootstrap=0).cohorts[0]
        assert c.success.value == 0.5
        assert c.outcomes["none"] == 1

    def test_cohorts_by_labels(self) -> None:
        """Episodes group by the ``by`` keys; cohorts are sorted by their label values."""
        a = {"dataset": "d", "model": "m", "method": "react"}
        b = {"dataset": "d", "model": "m", "method": "dual_loop"}
        records = [episode(1, 2, 3, Outcome.SUCCESS, labels=a), episode(2, 2, 1, Outcome.FAILURE, labels=b)]
        report = build_report(records, bootstrap=0)
        assert report.by == ("dataset", "model", "method")
        assert [c.key["method"] for c in report.cohorts] == ["dual_loop", "react"]
        assert report.cohort(method="react").ter.value == 1.0
        only = build_report(records, by=["model"], bootstrap=0)
        assert len(only.cohorts) == 1 and only.cohorts[0].n == 2

    def test_unknown_by_key(self) -> None:
        """Grouping by a label no episode has is a clear error naming the labels present."""
        with pytest.raises(ValueError, match=r"no episode has the label 'agent'.*dataset, method, model"):
            build_report(worked_example(), by=["agent"], bootstrap=0)

    def test_no_episodes(self) -> None:
        """An empty input is an error, not a report of NaNs."""
        with pytest.raises(ValueError, match="no episodes"):
            build_report([], bootstrap=0)


# Random cohorts: (T, FED, outcome) with FED in 1..T+1.
episodes_st = st.integers(1, 12).flatmap(
    lambda t: st.tuples(st.just(t), st.integers(1, t + 1), st.sampled_from([*Outcome, None]))
)
cohort_st = st.lists(episodes_st, min_size=1, max_size=40)


def cohort_records(cohort: list[tuple[int, int, Outcome | None]]) -> list[EpisodeRecord]:
    """Records of one random cohort."""
    return [episode(i, t, f, o) for i, (t, f, o) in enumerate(cohort)]


class TestProperties:
    """Exact identities of appendix B on random cohorts (hypothesis)."""

    @settings(max_examples=150, deadline=None)
    @given(cohort_st)
    def test_identities(self, cohort: list[tuple[int, int, Outcome | None]]) -> None:
        """PEC non-increasing; 0 <= TER <= AUC-PEC <= 1; RR-eligible = N(1-TER); PEC = (n_k/N)·PEC_elig; eq. 12."""
        c = build_report(cohort_records(cohort), bootstrap=0).cohorts[0]
        n = c.n
        assert all(a >= b for a, b in zip(c.pec, c.pec[1:], strict=False))
        assert len(c.pec) == max(t for t, _, _ in cohort)
        ter, auc = c.ter.value, c.auc_pec.value
        assert ter is not None and auc is not None
        assert 0.0 <= ter <= auc + 1e-12 <= 1.0 + 1e-12
        assert c.rr.eligible == round(n * (1 - ter))
        for k, (p, e, nk) in enumerate(zip(c.pec, c.pec_elig, c.n_k, strict=True), start=1):
            assert nk == sum(1 for t, _, _ in cohort if t >= k)
            assert e is not None
            assert p == pytest.approx(nk / n * e)
        d = c.decomposition
        success = c.success.value
        assert success is not None
        assert success == pytest.approx(d.q * (d.s or 0.0) + (1 - d.q) * (d.r or 0.0))
        if 0 < d.q < 1:
            assert d.s is not None and d.r is not None

    @settings(max_examples=150, deadline=None)
    @given(cohort_st)
    def test_against_plain_python_oracle(self, cohort: list[tuple[int, int, Outcome | None]]) -> None:
        """Every vectorised value equals the definition computed with exact fractions."""
        c = build_report(cohort_records(cohort), bootstrap=0).cohorts[0]
        n = len(cohort)
        k_max = max(t for t, _, _ in cohort)
        y = [o is Outcome.SUCCESS for _, _, o in cohort]
        failed = [f <= t for t, f, _ in cohort]
        assert c.ter.value == pytest.approx(float(Fraction(sum(f == t + 1 for t, f, _ in cohort), n)))
        assert c.mean_fed.value == pytest.approx(float(Fraction(sum(f for _, f, _ in cohort), n)))
        # eq. (10) first form: mean over episodes of (1/T) Σ_k 1{FED > k}
        auc = sum(Fraction(sum(f > k for k in range(1, t + 1)), t) for t, f, _ in cohort) / n
        assert c.auc_pec.value == pytest.approx(float(auc))
        assert c.pec == pytest.approx([sum(f > k for _, f, _ in cohort) / n for k in range(1, k_max + 1)])
        eligible = sum(failed)
        if eligible:
            assert c.rr.value == pytest.approx(sum(a and b for a, b in zip(y, failed, strict=True)) / eligible)
        else:
            assert c.rr.value is None
        assert c.success.value == pytest.approx(sum(y) / n)

    @settings(max_examples=60, deadline=None)
    @given(st.integers(1, 8), st.lists(st.tuples(st.integers(0, 9), st.booleans()), min_size=1, max_size=30))
    def test_common_horizon_ter_is_pec_at_horizon(self, horizon: int, draws: list[tuple[int, bool]]) -> None:
        """With one common horizon T0, TER = PEC(T0) (paper §2.2)."""
        cohort: list[tuple[int, int, Outcome | None]] = [
            (horizon, 1 + f % (horizon + 1), Outcome.SUCCESS if ok else Outcome.FAILURE) for f, ok in draws
        ]
        c = build_report(cohort_records(cohort), bootstrap=0).cohorts[0]
        assert c.ter.value == pytest.approx(c.pec[horizon - 1])


class TestSums:
    """The bincount sums behind the report."""

    def test_survivors_and_reach(self) -> None:
        """survivors[:, k] = #{FED > k} and reach[:, k] = #{T >= k}, column 0 = N."""
        records = TestHandComputed().records()
        columns = columns_from_records(records)
        g = group(columns, ["method"], None)
        sums = cohort_sums(columns, g.cohort, 1)
        assert sums.survivors[0].tolist() == [4, 3, 2, 1, 0]
        assert sums.reach[0].tolist() == [4, 4, 3, 2, 1]
        assert sums.curve_length(0) == 4

    def test_counted_in_chunks_the_same(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The counts a report makes a chunk of episodes at a time (for its memory at ten million
        episodes) give the report a single pass gives, reruns, unstable tasks and a repeated id included."""
        import prefixmon.analytics.columns as columns_module

        outcomes = (Outcome.SUCCESS, Outcome.PARTIAL, Outcome.FAILURE, None)
        records = [
            episode(
                n,
                1 + n % 4,
                1 + n % 5 if n % 5 <= n % 4 else 2 + n % 4,
                outcomes[n % 4 if n % 3 else 0],
                task=f"t-{n % 9}",
                labels={"dataset": ("bfcl", "tau")[n % 2], "method": ("react", "plan", "dual")[n % 3]},
                cause=tuple(Cause)[n % 5],
            )
            for n in range(300)
        ]
        records.append(records[17])
        whole = build_report(records, bootstrap=0).to_dict()
        monkeypatch.setattr(columns_module, "_COUNT_CHUNK", 7)
        chunked = build_report(records, bootstrap=0)
        assert chunked.to_dict() == whole
        assert any(len(c.unstable) for c in chunked.cohorts) and chunked.duplicates
