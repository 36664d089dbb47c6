"""prefixmon.analytics.agreement: confusion counts of a predictor against labels, importable without the extra."""

from __future__ import annotations

import json
import subprocess
import sys
from itertools import product

from prefixmon.analytics import INSTALL_HINT, Confusion


class TestConfusion:
    """The four counts and the rates built from them."""

    def test_counts_each_outcome_once(self) -> None:
        """Every (predicted, actual) pair lands in exactly one cell."""
        c = Confusion.of(product((True, False), (True, False)))
        assert (c.tp, c.fp, c.fn, c.tn, c.n) == (1, 1, 1, 1, 4)

    def test_of_equals_adding_one_by_one(self) -> None:
        """``Confusion.of`` counts what ``add`` counts."""
        pairs = [(True, True), (True, True), (True, False), (False, True), (False, False), (False, False), (False, False)]
        added = Confusion()
        for predicted, actual in pairs:
            added.add(predicted, actual)
        assert Confusion.of(pairs) == added == Confusion(tp=2, fp=1, fn=1, tn=3)

    def test_rates(self) -> None:
        """Precision tp/(tp+fp), recall tp/(tp+fn), agreement (tp+tn)/n."""
        c = Confusion(tp=3, fp=1, fn=2, tn=4)
        assert c.precision == 3 / 4
        assert c.recall == 3 / 5
        assert c.agreement == 7 / 10

    def test_undefined_rates_are_none_not_zero(self) -> None:
        """No positive prediction: precision undefined; no actual positive: recall undefined; nothing counted: agreement too."""
        only_negatives = Confusion(tn=5)
        assert only_negatives.precision is None and only_negatives.recall is None
        assert only_negatives.agreement == 1.0
        assert Confusion().agreement is None
        assert Confusion(fn=2).precision is None and Confusion(fn=2).recall == 0.0

    def test_as_dict_is_the_benchmarks_json(self) -> None:
        """``as_dict`` gives precision, recall and the counts, in the order the bench verbs print them."""
        data = Confusion(tp=1, fp=0, fn=1, tn=2).as_dict()
        assert list(data) == ["precision", "recall", "tp", "fp", "fn", "tn"]
        assert json.loads(json.dumps(data)) == {"precision": 1.0, "recall": 0.5, "tp": 1, "fp": 0, "fn": 1, "tn": 2}


WITHOUT_NUMPY = """
import sys
sys.modules["numpy"] = None  # as if the analytics extra were not installed
from prefixmon.analytics import Confusion
from prefixmon.analytics.agreement import Confusion as Same
assert Confusion is Same
print(Confusion.of([(True, True), (False, True)]).recall)
import prefixmon.adapters.taubench.bench  # bench tau works from a plain install
try:
    from prefixmon.analytics import build_report
except ImportError as e:
    print(e)
"""


class TestWithoutTheExtra:
    """Agreement counting needs no numpy; the rest of analytics still names the extra."""

    def test_confusion_imports_and_the_rest_gives_the_hint(self) -> None:
        """Without numpy: Confusion and the tau-bench verb import; ``build_report`` raises the install hint."""
        done = subprocess.run([sys.executable, "-c", WITHOUT_NUMPY], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == ["0.5", INSTALL_HINT]
