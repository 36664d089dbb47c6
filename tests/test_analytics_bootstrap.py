"""Paired task-level bootstrap, percentile and Wilson intervals, paired comparisons."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from scipy.stats import binomtest  # type: ignore[import-untyped]
from scipy.stats import bootstrap as scipy_bootstrap

from prefixmon.analytics import build_report, columns_from_records, percentile_interval, render, wilson_interval
from prefixmon.analytics.bootstrap import resample_blocks, resample_sums
from prefixmon.analytics.metrics import FloatArray, episode_statistics, group
from prefixmon.records import ActionRecord, EpisodeRecord, build_record
from prefixmon.vocabulary import Cause, Outcome

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def episode(eid: str, task: str, labels: dict[str, str], horizon: int, fed: int, success: bool) -> EpisodeRecord:
    """A real record (fed = horizon + 1: fully executable)."""
    actions = [
        ActionRecord(
            depth=d,
            tool="t",
            executable=d != fed,
            cause=Cause.PRECONDITION if d == fed else None,
            reason="precondition failed" if d == fed else None,
        )
        for d in range(1, horizon + 1)
    ]
    return build_record(
        episode_id=eid,
        task_id=task,
        labels=labels,
        actions=actions,
        outcome=Outcome.SUCCESS if success else Outcome.FAILURE,
        started_at=NOW,
        ended_at=NOW,
    )


def grid(seed: int = 3, tasks: int = 40, rollouts: int = 1) -> list[EpisodeRecord]:
    """Two datasets x two methods; method 'b' differs from 'a' on a third of the tasks."""
    rng = np.random.default_rng(seed)
    out = []
    for dataset in ("d1", "d2"):
        for t in range(tasks):
            horizon = int(rng.integers(1, 6))
            fed = int(rng.integers(1, horizon + 2))
            ok = bool(rng.random() < 0.6)
            for method in ("a", "b"):
                for r in range(rollouts):
                    f = fed if method == "a" or t % 3 else horizon + 1
                    labels = {"dataset": dataset, "method": method}
                    out.append(episode(f"{dataset}-{method}-{t}-{r}", f"{dataset}-t{t}", labels, horizon, f, ok))
    return out


class TestWilson:
    """Wilson score interval for RR."""

    @pytest.mark.parametrize(("k", "n"), [(138, 190), (0, 12), (12, 12), (1, 3), (73, 101)])
    def test_matches_scipy(self, k: int, n: int) -> None:
        """Same interval as scipy's binomtest(...).proportion_ci(method='wilson')."""
        ours = wilson_interval(k, n)
        ref = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
        assert ours is not None
        assert ours == pytest.approx((ref.low, ref.high), abs=1e-12)

    def test_undefined_denominator(self) -> None:
        """No eligible episode: no interval."""
        assert wilson_interval(0, 0) is None


class TestPercentile:
    """Percentile interval over the last axis."""

    def test_matches_numpy_linear(self) -> None:
        """Equals np.percentile (linear interpolation) row by row."""
        draws = np.random.default_rng(0).normal(size=(7, 1001))
        low, high = percentile_interval(draws, 0.9)
        assert low == pytest.approx(np.percentile(draws, 5, axis=1))
        assert high == pytest.approx(np.percentile(draws, 95, axis=1))

    def test_nan_draws_are_left_out(self) -> None:
        """NaN draws (undefined ratios) are ignored; an all-NaN row gives NaN."""
        draws = np.random.default_rng(1).random((3, 500))
        draws[0, ::3] = np.nan
        draws[2, :] = np.nan
        low, high = percentile_interval(draws)
        assert low[0] == pytest.approx(np.nanpercentile(draws[0], 2.5))
        assert high[1] == pytest.approx(np.percentile(draws[1], 97.5))
        assert np.isnan(low[2]) and np.isnan(high[2])


def sums_for(
    records: list[EpisodeRecord], resamples: int = 500, seed: int = 0, chunk_cells: int = 4_000_000
) -> tuple[FloatArray, list[str]]:
    """Bootstrap sums (S, C, B) of the standard statistics, and cohort labels."""
    columns = columns_from_records(records)
    g = group(columns, ["dataset", "method"], "dataset")
    values = episode_statistics(columns, [1, 2])
    out = resample_sums(
        values,
        cohort=g.cohort,
        n_cohorts=len(g.cohort_keys),
        task=columns.task,
        task_names=columns.task_ids,
        stratum=g.stratum,
        strata=g.strata,
        resamples=resamples,
        seed=seed,
        chunk_cells=chunk_cells,
    )
    return out, ["/".join(str(v) for v in k) for k in g.cohort_keys]


class TestResampling:
    """What is resampled, and how the draws are shared."""

    def test_same_task_ids_for_every_cohort_of_a_dataset(self) -> None:
        """Two cohorts with identical per-task data get identical sums in every resample (paired)."""
        records = grid()
        twin = [
            episode(r.episode_id + "-twin", r.task_id, {**r.labels, "method": "c"}, r.horizon, r.fed, r.success)
            for r in records
            if r.labels["method"] == "a"
        ]
        sums, names = sums_for(records + twin)
        a, c = names.index("d1/a"), names.index("d1/c")
        assert np.array_equal(sums[:, a, :], sums[:, c, :])
        other = names.index("d2/a")  # another dataset: its own, independent draws
        assert not np.array_equal(sums[4, a, :] / 40, sums[4, other, :] / 40)

    def test_tasks_resampled_within_their_dataset(self) -> None:
        """One rollout per task, every task in the cohort: N of each resample is the dataset's task count."""
        sums, _ = sums_for(grid())
        assert np.all(sums[0] == 40)

    def test_rollouts_of_a_task_move_together(self) -> None:
        """Two identical rollouts per task: every resampled count is even."""
        sums, _ = sums_for(grid(rollouts=2))
        assert np.all(sums[0] == 80)
        assert np.all(sums[4] % 2 == 0) and np.all(sums[1] % 2 == 0)
        assert len(np.unique(sums[4])) > 5

    def test_seeded_and_independent_of_chunking_and_order(self) -> None:
        """Same seed: same draws whatever the chunk size or the order of the records; other seed: other draws."""
        records = grid()
        base, _ = sums_for(records, seed=5)
        chunked, _ = sums_for(records, seed=5, chunk_cells=37)
        shuffled, _ = sums_for(list(reversed(records)), seed=5)
        other, _ = sums_for(records, seed=6)
        counts = [i for i in range(base.shape[0]) if i != 3]  # statistic 3, (FED-1)/T, is not an integer
        assert np.array_equal(base[counts], chunked[counts])
        assert np.array_equal(base[counts], shuffled[counts])
        # unscaled (FED-1)/T fractions are summed in double precision, in an order that depends on chunking
        assert np.allclose(base, chunked, rtol=1e-12, atol=0)
        assert np.allclose(base, shuffled, rtol=1e-12, atol=0)
        assert not np.array_equal(base[counts], other[counts])

    def test_blocks_of_cohorts_hold_the_same_sums(self) -> None:
        """resample_blocks, a few cohorts at a time, gives every cohort the sums resample_sums does (issue 39).

        The blocks bound memory: every cohort's sums at once were statistics x cohorts x resamples.
        """
        records = grid(tasks=12) + [
            episode(f"x{i}", f"d1-t{i}", {"dataset": "d1", "method": "c"}, 3, 2, True) for i in range(5)
        ]  # method c ran other tasks: a group of its own
        columns = columns_from_records(records)
        g = group(columns, ["method"], "dataset")  # cohorts span both datasets
        values = episode_statistics(columns, [1, 2])
        kw: dict[str, Any] = {
            "cohort": g.cohort,
            "n_cohorts": len(g.cohort_keys),
            "task": columns.task,
            "task_names": columns.task_ids,
            "stratum": g.stratum,
            "strata": g.strata,
            "resamples": 300,
            "seed": 4,
        }
        whole = resample_sums(values, **kw)
        blocks = list(resample_blocks(values, block_cells=values.shape[1] * 300, **kw))
        assert [b.tolist() for b, _ in blocks] == [[0], [1], [2]]
        for members, sums in blocks:
            np.testing.assert_allclose(sums, whole[:, members], rtol=1e-12, atol=1e-12)  # (chunks sum in another order)

    def test_large_sums_stay_exact(self) -> None:
        """Sums beyond single precision's exact range switch the product to double precision."""
        big = float(2**24 + 1)  # not representable in float32
        values = np.array([[big], [1.0], [3.0]])
        zeros = np.zeros(3, dtype=np.int32)
        sums = resample_sums(
            values,
            cohort=zeros,
            n_cohorts=1,
            task=np.array([0, 1, 2], dtype=np.int32),
            task_names=["a", "b", "c"],
            stratum=zeros,
            strata=[None],
            resamples=200,
            seed=0,
        )
        draws = sums[0, 0]
        counts_of_a = np.round((draws - draws % big) / big)
        rest = draws - counts_of_a * big
        assert np.all(np.isin(rest, [0, 1, 2, 3, 4, 5, 6, 7, 9]))  # sums of 1s and 3s, exactly

    def test_progress_callback(self) -> None:
        """The callback sees monotone progress ending at the total."""
        seen: list[tuple[int, int]] = []
        columns = columns_from_records(grid())
        g = group(columns, ["dataset", "method"], "dataset")
        resample_sums(
            episode_statistics(columns, []),
            cohort=g.cohort,
            n_cohorts=len(g.cohort_keys),
            task=columns.task,
            task_names=columns.task_ids,
            stratum=g.stratum,
            strata=g.strata,
            resamples=100,
            seed=0,
            progress=lambda done, total: seen.append((done, total)),
            chunk_cells=400,
        )
        assert len(seen) > 2
        assert [d for d, _ in seen] == sorted(d for d, _ in seen)
        assert seen[-1][0] == seen[-1][1] == 100 * 80


class TestAgainstScipy:
    """Our percentile intervals agree with scipy.stats.bootstrap up to Monte Carlo error."""

    def test_ter_interval(self) -> None:
        """TER of one cohort: task-level percentile interval within 0.01 of scipy's (10,000 resamples each)."""
        records = [r for r in grid(tasks=120) if r.labels["dataset"] == "d1" and r.labels["method"] == "a"]
        report = build_report(records, bootstrap=10_000, seed=1)
        c = report.cohorts[0]
        executable = np.array([r.executable for r in records], dtype=float)
        ref = scipy_bootstrap((executable,), np.mean, n_resamples=10_000, method="percentile", rng=np.random.default_rng(2))
        assert c.ter.ci is not None
        assert c.ter.ci[0] == pytest.approx(ref.confidence_interval.low, abs=0.01)
        assert c.ter.ci[1] == pytest.approx(ref.confidence_interval.high, abs=0.01)


class TestComparisons:
    """Paired differences between methods."""

    def test_identical_methods_have_zero_difference(self) -> None:
        """A method compared with an identical copy: every difference is 0 with interval [0, 0]."""
        records = [r for r in grid() if r.labels["method"] == "a"]
        twin = [
            episode(r.episode_id + "-t", r.task_id, {**r.labels, "method": "c"}, r.horizon, r.fed, r.success) for r in records
        ]
        report = build_report(records + twin, bootstrap=300, compare=["method=a,method=c"])
        assert len(report.comparisons) == 2
        for cmp in report.comparisons:
            assert cmp.paired
            for name in ("ter", "auc_pec", "success", "pec@1"):
                assert cmp.differences[name].value == 0.0
                assert cmp.differences[name].ci == (0.0, 0.0)

    def test_difference_and_interval(self) -> None:
        """b repairs a third of a's failures: ΔTER = TER(b) - TER(a) > 0 with a paired interval around it."""
        report = build_report(grid(), bootstrap=2000, compare=["method=b,method=a"])
        cmp = next(c for c in report.comparisons if c.key == {"dataset": "d1"})
        a, b = report.cohort(dataset="d1", method="a"), report.cohort(dataset="d1", method="b")
        diff = cmp.differences["ter"]
        assert diff.value == pytest.approx((b.ter.value or 0) - (a.ter.value or 0))
        assert diff.ci is not None and diff.value is not None
        assert 0 < diff.ci[0] <= diff.value <= diff.ci[1]
        # Paired: the interval of the difference is narrower than the two marginal intervals combined.
        assert a.ter.ci is not None and b.ter.ci is not None
        assert diff.ci[1] - diff.ci[0] < (a.ter.ci[1] - a.ter.ci[0]) + (b.ter.ci[1] - b.ter.ci[0])
        assert cmp.a == {"method": "b"} and cmp.b == {"method": "a"}

    def test_bad_compare(self) -> None:
        """A compare key outside the cohort keys, or a malformed spec, is a clear error."""
        with pytest.raises(ValueError, match="not one of the cohort keys"):
            build_report(grid(), by=["dataset"], bootstrap=0, compare=["method=a,method=b"])
        with pytest.raises(ValueError, match="two sides"):
            build_report(grid(), bootstrap=0, compare=["method=a"])
        with pytest.raises(ValueError, match="key=value"):
            build_report(grid(), bootstrap=0, compare=["method=a,b"])


def one_method(method: str, feds: dict[int, int], dataset: str = "d", horizon: int = 3) -> list[EpisodeRecord]:
    """One rollout per task t<i> of ``feds`` (task index -> FED), success iff fully executable."""
    labels = {"dataset": dataset, "method": method}
    return [
        episode(f"{dataset}-{method}-{t}", f"t{t}", labels, horizon, fed, fed == horizon + 1) for t, fed in sorted(feds.items())
    ]


class TestTaskSets:
    """Cohorts that ran different tasks: each cohort resamples its own, differences use the shared ones."""

    def test_difference_is_on_the_shared_tasks(self) -> None:
        """a ran t0..t9 (all executable); b ran t0..t19 and failed at depth 1 on t0..t4 only.

        On the 10 shared tasks: TER(a) = 1, TER(b) = 5/10, so ΔTER = +0.5 (not 1 - 15/20 = 0.25);
        mean FED 4 vs (5·1 + 5·4)/10 = 2.5, so Δ = +1.5. Point and interval equal those of a
        report on the shared tasks alone (same seed, same draws).
        """
        a = one_method("a", dict.fromkeys(range(10), 4))
        b = one_method("b", {t: 1 if t < 5 else 4 for t in range(20)})
        report = build_report(a + b, bootstrap=1000, seed=4, compare=["method=a,method=b"])
        (cmp,) = report.comparisons
        assert (cmp.shared_tasks, cmp.tasks_a, cmp.tasks_b) == (10, 10, 20)
        assert cmp.paired and cmp.computable
        assert cmp.differences["ter"].value == pytest.approx(0.5)
        assert cmp.differences["mean_fed"].value == pytest.approx(1.5)
        assert cmp.differences["success"].value == pytest.approx(0.5)
        assert cmp.differences["rr"].value is None  # a never failed on the shared tasks
        shared = build_report(a + b[:10], bootstrap=1000, seed=4, compare=["method=a,method=b"])
        (ref,) = shared.comparisons
        assert (ref.shared_tasks, ref.tasks_a, ref.tasks_b) == (10, 10, 10)
        for m in ("ter", "mean_fed", "auc_pec", "success", "completion", "pec@1", "pec@3"):
            assert cmp.differences[m].value == pytest.approx(ref.differences[m].value)
            assert cmp.differences[m].ci == pytest.approx(ref.differences[m].ci)
        ci = cmp.differences["ter"].ci
        assert ci is not None and ci[0] <= 0.5 <= ci[1] and ci[0] >= 0.0

    def test_identical_on_shared_tasks_is_zero(self) -> None:
        """The reviewer's case: identical on the 10 shared tasks, b also failed on 10 more: every Δ is 0 [0, 0]."""
        a = one_method("a", dict.fromkeys(range(10), 4))
        b = one_method("b", {t: 4 if t < 10 else 1 for t in range(20)})
        (cmp,) = build_report(a + b, bootstrap=500, seed=1, compare=["method=a,method=b"]).comparisons
        for m in ("ter", "mean_fed", "auc_pec", "success", "pec@1"):
            assert cmp.differences[m].value == 0.0
            assert cmp.differences[m].ci == (0.0, 0.0)

    def test_shared_tasks_are_taken_within_each_dataset(self) -> None:
        """Same task ids in two datasets are different tasks: a ran t0..t3 in d1, b ran t0..t3 in d2 only.

        by=method pools the datasets: no (dataset, task) pair is shared, so nothing is computable.
        """
        a = one_method("a", dict.fromkeys(range(4), 4), dataset="d1")
        b = one_method("b", dict.fromkeys(range(4), 1), dataset="d2")
        (cmp,) = build_report(a + b, by=["method"], bootstrap=200, compare=["method=a,method=b"]).comparisons
        assert cmp.shared_tasks == 0 and not cmp.computable and not cmp.paired
        assert all(e.value is None and e.ci is None for e in cmp.differences.values())

    def test_no_shared_task_is_not_computable(self) -> None:
        """a ran t0..t4, b ran t5..t9 of one dataset: the comparison is there but has no number."""
        a = one_method("a", dict.fromkeys(range(5), 4))
        b = one_method("b", {t: 1 for t in range(5, 10)})
        for resamples in (0, 300):
            report = build_report(a + b, bootstrap=resamples, compare=["method=a,method=b"])
            (cmp,) = report.comparisons
            assert (cmp.shared_tasks, cmp.tasks_a, cmp.tasks_b) == (0, 5, 5)
            assert not cmp.computable and not cmp.paired
            assert all(e.value is None and e.ci is None for e in cmp.differences.values())
            doc = report.to_dict()
            assert doc["comparisons"][0]["shared_tasks"] == 0 and doc["comparisons"][0]["paired"] is False

    def test_own_interval_does_not_depend_on_other_cohorts(self) -> None:
        """a ran 20 of the 60 tasks b ran: a's intervals are the same with or without b (its N is always 20)."""
        a = one_method("a", {t: 4 if t % 2 else 1 for t in range(20)})
        b = one_method("b", {t: 4 if t % 3 else 2 for t in range(60)})
        both = build_report(a + b, bootstrap=2000, seed=0)
        alone = build_report(a, bootstrap=2000, seed=0)
        ca, ref = both.cohort(method="a"), alone.cohort(method="a")
        for m in ("ter", "mean_fed", "auc_pec", "success", "completion"):
            assert getattr(ca, m).ci == getattr(ref, m).ci
        assert ca.checkpoints[1].ci == ref.checkpoints[1].ci
        columns = columns_from_records(a + b)
        g = group(columns, ["method"], "dataset")
        sums = resample_sums(
            episode_statistics(columns, []),
            cohort=g.cohort,
            n_cohorts=2,
            task=columns.task,
            task_names=columns.task_ids,
            stratum=g.stratum,
            strata=g.strata,
            resamples=300,
            seed=0,
        )
        assert np.all(sums[0, 0] == 20) and np.all(sums[0, 1] == 60)

    def test_same_task_sets_still_share_draws(self) -> None:
        """Cohorts that ran the same tasks are resampled together: a's and b's statistics move in step."""
        a = one_method("a", dict.fromkeys(range(30), 4))
        b = one_method("b", dict.fromkeys(range(30), 4))
        (cmp,) = build_report(a + b, bootstrap=300, compare=["method=a,method=b"]).comparisons
        assert (cmp.shared_tasks, cmp.tasks_a, cmp.tasks_b) == (30, 30, 30)
        assert cmp.differences["mean_fed"].ci == (0.0, 0.0)


class TestPairedFlag:
    """Pairing holds whenever both sides are resampled with the same draws in every stratum."""

    def test_paired_across_several_datasets(self) -> None:
        """by=method over two datasets with the same tasks: paired, and the tables do not say unpaired."""
        records = [r for r in grid() if r.labels["method"] in ("a", "b")]
        report = build_report(records, by=["method"], bootstrap=300, seed=1, compare=["method=a,method=b"])
        (cmp,) = report.comparisons
        assert cmp.paired and cmp.shared_tasks == 80
        doc = report.to_dict()
        assert doc["bootstrap"]["paired"] is True and doc["comparisons"][0]["paired"] is True
        text = render(report, "markdown")
        assert "unpaired" not in text and "a - b" in text

    def test_json_paired_is_not_hard_coded(self) -> None:
        """No bootstrap: nothing was resampled, so bootstrap.paired is false."""
        doc = build_report(grid(), bootstrap=0).to_dict()
        assert doc["bootstrap"]["paired"] is False


class TestAucPrecision:
    """AUC-PEC draws are summed in double precision: a constant statistic gives [value, value]."""

    @pytest.mark.parametrize(("horizon", "fed"), [(3, 2), (6, 2), (7, 3), (7, 5), (6, 5)])
    @pytest.mark.parametrize("n", [7, 10, 13, 50])
    def test_constant_auc_interval_holds_its_value(self, horizon: int, fed: int, n: int) -> None:
        """Every episode has (FED-1)/T = the same fraction: every resample equals the point estimate."""
        records = [episode(f"e{t}", f"t{t}", {"dataset": "d"}, horizon, fed, False) for t in range(n)]
        auc = build_report(records, bootstrap=300, seed=0).cohorts[0].auc_pec
        assert auc.value == pytest.approx((fed - 1) / horizon)
        assert auc.ci is not None and auc.value is not None
        assert auc.ci[0] <= auc.value <= auc.ci[1]


class TestCompareSpecs:
    """A --compare spec that cannot match is an error naming the spec and what is available."""

    def test_value_matching_no_cohort(self) -> None:
        """A typo in a value names the spec and the values of that key."""
        with pytest.raises(ValueError, match=r"'method=a,method=bb'.*method='bb'.*a, b"):
            build_report(grid(), bootstrap=0, compare=["method=a,method=bb"])

    def test_tuple_form_with_a_key_outside_the_cohort_keys(self) -> None:
        """The tuple form is checked like the string form: b's key must be a cohort key, not a KeyError."""
        with pytest.raises(ValueError, match=r"'methd'.*cohort keys \(dataset, method\)"):
            build_report(grid(), bootstrap=0, compare=[({"method": "a"}, {"methd": "b"})])
        with pytest.raises(ValueError, match="same keys"):
            build_report(grid(), bootstrap=0, compare=[({"method": "a"}, {"dataset": "d1"})])

    def test_spec_without_any_pair(self) -> None:
        """Both values exist but never with the same other keys: no pair of cohorts, an error."""
        records = [r for r in grid() if (r.labels["dataset"], r.labels["method"]) in (("d1", "a"), ("d2", "b"))]
        with pytest.raises(ValueError, match=r"'method=a,method=b' matches no pair of cohorts"):
            build_report(records, bootstrap=0, compare=["method=a,method=b"])


class TestUndefinedResamples:
    """A ratio undefined in some resamples (ΔRR when a side has no failed task there): the
    interval leaves those out, and the report says how many."""

    def test_delta_rr_counts_the_resamples_it_left_out(self) -> None:
        """a fails on one task of 20, b on five: a resample without a's failed task has no RR
        for a, so no ΔRR; that happens with probability (19/20)^20 ≈ 0.358 per resample."""
        a = one_method("a", {t: 1 if t == 0 else 4 for t in range(20)})
        b = one_method("b", {t: 1 if t < 5 else 4 for t in range(20)})
        report = build_report(a + b, bootstrap=2000, seed=7, compare=["method=a,method=b"])
        (cmp,) = report.comparisons
        rr = cmp.differences["rr"]
        assert rr.value is not None and rr.ci is not None
        expected, sd = 2000 * (19 / 20) ** 20, (2000 * 0.358 * 0.642) ** 0.5
        assert abs(rr.undefined_resamples - expected) < 5 * sd
        assert cmp.differences["ter"].undefined_resamples == 0
        as_json = report.to_dict()["comparisons"][0]["differences"]
        assert as_json["rr"]["undefined_resamples"] == rr.undefined_resamples
        assert "undefined_resamples" not in as_json["ter"]
        text = render(report, "markdown")
        assert f"ΔRR was undefined in {rr.undefined_resamples} of 2000 resamples" in text
        rows = list(csv.DictReader(io.StringIO(render(report, "csv"))))
        assert [r["rr_undefined_resamples"] for r in rows] == ["", "", str(rr.undefined_resamples)]

    def test_no_note_when_every_resample_is_defined(self) -> None:
        report = build_report(grid(), bootstrap=200, compare=["method=b,method=a"])
        assert all(e.undefined_resamples == 0 for c in report.comparisons for e in c.differences.values())
        assert "undefined in" not in render(report, "markdown")
