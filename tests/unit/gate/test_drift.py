"""Drift statistics against scipy and hand-computed cases, and the drift policy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.stats import chi2_contingency, false_discovery_control, ks_2samp

from evalsentry.errors import EvalsetError
from evalsentry.evalsets.evalset import InputsSpec, load_evalset
from evalsentry.evalsets.freeze import freeze_evalset
from evalsentry.gate.drift import (
    DEFAULT_ROW_SUMMARIES,
    DriftResult,
    class_psi,
    drift_verdict,
    feature_table,
    input_drift,
    prediction_drift,
    psi,
    read_live,
)
from evalsentry.gate.verdicts import Verdict
from evalsentry.history.store import History
from evalsentry.sections import DriftPolicy


@pytest.fixture
def tabular_evalset(tmp_path: Path) -> Path:
    """A frozen regression evalset whose inputs are two named columns, ``a`` and ``b``."""
    return freeze_tabular(tmp_path / "evalsets")


def freeze_tabular(evalsets: Path) -> Path:
    """Freeze evalset ``tab`` (inputs: named columns ``a`` and ``b``) under ``evalsets``."""
    rng = np.random.default_rng(4)
    table = pa.table({"a": rng.normal(size=100), "b": rng.normal(size=100), "y": np.zeros(100)})
    folder = evalsets / "tab"
    freeze_evalset(
        table,
        folder,
        name="tab",
        task="regression",
        target="y",
        inputs=InputsSpec(columns=["a", "b"]),
    )
    return folder


class TestPSI:
    def test_identical_samples_have_zero_psi(self) -> None:
        """The same distribution has a stability index of 0."""
        values = np.random.default_rng(0).normal(size=5000)
        assert psi(values, values) == pytest.approx(0.0, abs=1e-12)

    def test_matches_a_hand_computed_case(self) -> None:
        """Two bins with 50/50 against 80/20: PSI = 0.3*ln(1.6) + (-0.3)*ln(0.4)."""
        reference = np.array([0.0] * 50 + [1.0] * 50)
        live = np.array([0.0] * 80 + [1.0] * 20)
        expected = (0.8 - 0.5) * np.log(0.8 / 0.5) + (0.2 - 0.5) * np.log(0.2 / 0.5)
        assert psi(reference, live, bins=2) == pytest.approx(expected)

    def test_grows_with_the_shift(self) -> None:
        """A larger mean shift gives a larger index."""
        rng = np.random.default_rng(1)
        reference = rng.normal(size=5000)
        small, large = (
            psi(reference, rng.normal(0.1, size=5000)),
            psi(reference, rng.normal(1.0, size=5000)),
        )
        assert 0 < small < 0.1 < large

    def test_class_psi(self) -> None:
        """Class-mix PSI is zero for the same mix and positive for another."""
        same = np.array([0, 1, 2] * 10)
        assert class_psi(same, same, 3) == pytest.approx(0.0)
        assert class_psi(same, np.array([0] * 25 + [1] * 5), 3) > 0.5


class TestTests:
    def test_input_drift_uses_ks_and_benjamini_hochberg_like_scipy(self, toy_evalset: Path) -> None:
        """Per-feature statistics and BH-adjusted p-values equal scipy's."""
        evalset = load_evalset(toy_evalset)
        rng = np.random.default_rng(2)
        live = (evalset.inputs[:200] + rng.normal(0.5, 0.1, (200, 4))).astype(np.float32)
        results = input_drift(evalset, live, DriftPolicy())
        reference = evalset.inputs.reshape(300, -1)
        flat = live.reshape(200, -1)
        by_name = {r.feature: r for r in results}
        assert set(by_name) == {"mean", "std", "min", "max"}
        mean_ks = ks_2samp(reference.mean(axis=1), flat.mean(axis=1))
        assert by_name["mean"].statistic == pytest.approx(mean_ks.statistic)
        raw = [r.p_value for r in results]
        assert [r.p_adjusted for r in results] == pytest.approx(
            list(false_discovery_control(raw, method="bh"))
        )
        assert by_name["mean"].verdict == "FAIL"  # every value moved by 0.5

    def test_prediction_drift_uses_chi_square(self, toy_evalset: Path) -> None:
        """Predicted-class drift is scipy's chi-square on the two class counts."""
        evalset = load_evalset(toy_evalset)
        reference = np.array([0, 1, 2] * 100)
        live = np.array([0] * 150 + [1] * 30 + [2] * 20)
        result = prediction_drift("m", evalset, reference, live, DriftPolicy())
        table = np.stack([np.bincount(reference, minlength=3), np.bincount(live, minlength=3)])
        assert result.statistic == pytest.approx(chi2_contingency(table).statistic)
        assert result.verdict == "FAIL" and result.model == "m"


class TestFeatures:
    def test_the_listed_features_are_the_ones_computed(self, toy_evalset: Path) -> None:
        """An evalset's drift.features entry is exactly the features tested, in its order."""
        evalset = load_evalset(toy_evalset)
        policy = DriftPolicy(features={"toy": ["share_above_half_max", "std"]})
        results = input_drift(evalset, evalset.inputs[:100], policy)
        assert [r.feature for r in results] == ["share_above_half_max", "std"]

    def test_a_live_sample_is_measured_against_the_evalsets_maximum(
        self, toy_evalset: Path
    ) -> None:
        """A live sample at half the scale drifts in share_above_half_max (one threshold for both)."""
        evalset = load_evalset(toy_evalset)
        live = evalset.inputs[:100] * 0.5  # its own maximum would hide the change of scale
        policy = DriftPolicy(features={"toy": ["share_above_half_max"]})
        [result] = input_drift(evalset, live, policy)
        half = 0.5 * evalset.inputs.max()
        expected = ks_2samp((evalset.inputs > half).mean(axis=1), (live > half).mean(axis=1))
        assert result.statistic == pytest.approx(expected.statistic)
        assert result.statistic > 0

    def test_an_unlisted_tensor_evalset_gets_the_default(self, toy_evalset: Path) -> None:
        """A tensor evalset drift.features does not list is summarised by mean, std, min, max."""
        evalset = load_evalset(toy_evalset)
        policy = DriftPolicy(features={"other": ["share_above_half_max"]})
        results = input_drift(evalset, evalset.inputs[:100], policy)
        assert DEFAULT_ROW_SUMMARIES == ("mean", "std", "min", "max")
        assert [r.feature for r in results] == list(DEFAULT_ROW_SUMMARIES)

    def test_share_above_half_max_measures_against_the_evalsets_maximum(self) -> None:
        """Each row's share of values above half the given maximum, else of its own table's."""
        rows = np.array([[0.0, 0.4, 0.6, 1.0], [0.2, 0.2, 0.2, 0.2]])
        own = feature_table(rows, None, ["share_above_half_max"])["share_above_half_max"]
        assert own.tolist() == [0.5, 0.0]
        dimmer = feature_table(rows, None, ["share_above_half_max"], scale=1.6)
        assert dimmer["share_above_half_max"].tolist() == [0.25, 0.0]
        nothing = feature_table(-rows, None, ["share_above_half_max"])  # the maximum is 0
        assert nothing["share_above_half_max"].tolist() == [0.0, 0.0]

    def test_a_tabular_evalset_uses_its_columns(self, tabular_evalset: Path) -> None:
        """An evalset with named input columns tests each column, whatever the default."""
        evalset = load_evalset(tabular_evalset)
        results = input_drift(evalset, evalset.inputs[:50], DriftPolicy())
        assert [r.feature for r in results] == ["a", "b"]

    def test_features_listed_for_a_tabular_evalset_are_refused(self, tabular_evalset: Path) -> None:
        """Row summaries named for an evalset with columns are refused, naming the setting."""
        evalset = load_evalset(tabular_evalset)
        policy = DriftPolicy(features={"tab": ["mean"]})
        with pytest.raises(
            EvalsetError,
            match=r"^drift\.features\.tab: tab's inputs are 2 named columns, which are its "
            r"drift features; remove drift\.features\.tab$",
        ):
            input_drift(evalset, evalset.inputs[:50], policy)

    def test_history_rows_of_retired_feature_names_read_back(self, tmp_path: Path) -> None:
        """A drift row stored before drift.features (feature ink_fraction) reads like any other."""
        history = History(str(tmp_path / "store"))
        old = DriftResult(
            "digits", "ink_fraction", "input", 0.3, 0.2, 1e-4, 1e-3, 719, 500, Verdict.FAIL
        )
        new = DriftResult(
            "digits", "share_above_half_max", "input", 0.0, 0.01, 0.9, 0.9, 719, 500, Verdict.PASS
        )
        history.append_drift([old.row("r1", "2026-W40")])
        history.append_drift([new.row("r2", "2026-W41")])
        frame = history.drift()
        assert dict(zip(frame["week"], frame["feature"], strict=True)) == {
            "2026-W40": "ink_fraction",
            "2026-W41": "share_above_half_max",
        }


class TestPolicy:
    def test_verdict_needs_both_significance_and_size(self) -> None:
        """Significant but tiny shifts pass; large and significant ones warn or fail."""
        policy = DriftPolicy(psi_warn=0.1, psi_fail=0.25, alpha=0.05)
        assert drift_verdict(policy, 0.05, 1e-9) == Verdict.PASS
        assert drift_verdict(policy, 0.5, 0.2) == Verdict.PASS
        assert drift_verdict(policy, 0.15, 0.001) == Verdict.WARN
        assert drift_verdict(policy, 0.3, 0.001) == Verdict.FAIL


class TestLiveData:
    def test_reads_a_glob_of_parquet_files(self, toy_evalset: Path, tmp_path: Path) -> None:
        """Live data is read from every file a glob matches, shaped like the evalset inputs."""
        values = np.zeros(40, np.float32)
        for i in range(2):
            pq.write_table(
                pa.table({"x": pa.FixedSizeListArray.from_arrays(pa.array(values), 4)}),
                tmp_path / f"live-{i}.parquet",
            )
        live = read_live(str(tmp_path / "live-*.parquet"), load_evalset(toy_evalset))
        assert live.shape == (20, 4)

    def test_missing_live_data_is_named(self, toy_evalset: Path, tmp_path: Path) -> None:
        """A live source that matches nothing is a clear error naming the setting."""
        with pytest.raises(EvalsetError, match=r"drift\.live\.toy: no live data"):
            read_live(str(tmp_path / "none-*.parquet"), load_evalset(toy_evalset))

    def test_live_data_without_the_input_column(self, toy_evalset: Path, tmp_path: Path) -> None:
        """Live data lacking the evalset's input column is refused."""
        pq.write_table(pa.table({"other": [1, 2]}), tmp_path / "live.parquet")
        with pytest.raises(EvalsetError, match="does not match the evalset's inputs"):
            read_live(str(tmp_path / "live.parquet"), load_evalset(toy_evalset))
