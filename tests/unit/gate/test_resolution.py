"""What an evalset can certify: exact PASS chances, the certifiable tolerance, the warnings."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evalsentry.cli import main
from evalsentry.config import load_config
from evalsentry.evaluation.planning import tolerance_warnings
from evalsentry.gate.resolution import (
    ASSUMED_CHURN,
    certifiable_tolerance,
    pass_probability,
    resolutions,
    rows_needed,
)
from evalsentry.gate.stats import drop_upper_bound, within_tolerance
from evalsentry.history.store import History
from evalsentry.sections import GatePolicy, Tolerance
from tests.models import TRUST, TRUSTED_YAML

ALPHA = 0.05
DIGITS = Path(__file__).parents[3] / "evalsets" / "digits"
FIVE = ["accuracy", "macro_f1", "nll", "ece", "top5_accuracy"]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project with a copy of the shipped digits evalset (719 rows) and a config file."""
    shutil.copytree(DIGITS, tmp_path / "evalsets" / "digits")
    (tmp_path / "evalsentry.yaml").write_text("evalsets: evalsets\nstore: store\n")
    return tmp_path


def week_rows(
    model: str, newly_wrong: int, newly_right: int, weeks: int
) -> list[dict[str, object]]:
    """Comparison rows of ``weeks`` week-to-week accuracy and nll comparisons on digits."""
    rows: list[dict[str, object]] = []
    for week in range(weeks):
        common = {
            "evaluation_id": f"{model}-{week}",
            "week": f"2026-W{week + 10}",
            "model": model,
            "evalset": "digits",
            "reference": "previous-week",
            "slice": "",
            "n": 719,
            "verdict": "PASS",
            "run_id": "r",
            "created_at": pd.Timestamp("2026-12-01", tz="UTC"),
        }
        rows.append(
            {
                **common,
                "metric": "accuracy",
                "reference_value": 0.95,
                "newly_wrong": newly_wrong,
                "newly_right": newly_right,
                "drop": (newly_wrong - newly_right) / 719,
                "drop_bound": 0.01,
            }
        )
        rows.append(
            {
                **common,
                "metric": "nll",
                "reference_value": 0.2,
                "drop": 0.001,
                "drop_bound": 0.031,
            }
        )
    return rows


class TestPassProbability:
    def test_matches_the_bound_pass_uses_on_simulated_flips(self) -> None:
        """Summed exactly, the chance of a PASS agrees with 4,000 simulated retrains to 0.025."""
        n, churn, tolerance = 719, 0.03, 0.012
        rng = np.random.default_rng(1)
        cells = rng.multinomial(n, [churn / 2, churn / 2, 1 - churn], size=4000)
        simulated = np.mean(
            [within_tolerance(int(b), int(c), n, tolerance, ALPHA) for b, c in cells[:, :2]]
        )
        exact = pass_probability(n, churn / 2, 0.0, tolerance, ALPHA)
        assert exact == pytest.approx(simulated, abs=0.025)

    def test_a_drop_at_the_tolerance_passes_at_most_about_alpha(self) -> None:
        """The bound is a level-alpha test: a true drop equal to the tolerance rarely PASSes."""
        for n in (360, 1000, 5000):
            for churn in (0.01, 0.03, 0.05):
                assert pass_probability(n, churn / 2, 0.01, 0.01, ALPHA) <= ALPHA + 0.002


class TestCertifiableTolerance:
    def test_an_unchanged_retrain_passes_it_80_percent_of_the_time(self) -> None:
        """At the certifiable tolerance the chance of a PASS is 80%; a tenth below, less."""
        tolerance = certifiable_tolerance(719, 0.03, ALPHA)
        assert pass_probability(719, 0.015, 0.0, tolerance, ALPHA) == pytest.approx(0.8, abs=1e-3)
        assert pass_probability(719, 0.015, 0.0, tolerance * 0.9, ALPHA) < 0.8

    def test_more_rows_resolve_finer_and_more_churn_coarser(self) -> None:
        """The resolution shrinks with the evalset and grows with the churn."""
        assert certifiable_tolerance(5000, 0.03, ALPHA) < certifiable_tolerance(1000, 0.03, ALPHA)
        assert certifiable_tolerance(1000, 0.05, ALPHA) > certifiable_tolerance(1000, 0.01, ALPHA)

    def test_without_churn_it_is_the_bound_of_no_flips(self) -> None:
        """A retrain that changes nothing still leaves the no-flip bound (about z^2 / n)."""
        assert certifiable_tolerance(360, 0.0, ALPHA) == pytest.approx(
            drop_upper_bound(0, 0, 360, ALPHA), rel=1e-6
        )

    def test_rows_needed_is_the_size_at_which_a_tolerance_becomes_certifiable(self) -> None:
        """1 point at 3% churn needs about 1,900 rows: there it is certifiable, at half not."""
        rows = rows_needed(0.01, 0.03, ALPHA)
        assert rows is not None and 1500 < rows < 2500
        assert certifiable_tolerance(rows, 0.03, ALPHA) <= 0.01
        assert certifiable_tolerance(rows // 2, 0.03, ALPHA) > 0.01
        assert rows_needed(0.0, 0.03, ALPHA) is None


class TestResolutions:
    def test_without_history_count_metrics_assume_the_churn_and_others_wait(self) -> None:
        """On 719 rows at the assumed 3% churn, 1 point of accuracy is too fine (with a fix that
        works); nll's resolution is unknown until a comparison, and never warned about."""
        found = {r.metric: r for r in resolutions("digits", 719, FIVE, GatePolicy())}
        accuracy = found["accuracy"]
        assert accuracy.certifiable == pytest.approx(
            certifiable_tolerance(719, ASSUMED_CHURN, ALPHA)
        )
        assert accuracy.too_fine and accuracy.basis == "3.0% churn, assumed"
        warning = accuracy.warning()
        assert "\n" not in warning
        assert warning.startswith(
            "evalset digits (719 rows) cannot certify gate.metrics.accuracy.max_drop 0.01 "
            "(3.0% churn, assumed): the smallest it can is 0.01675"
        )
        assert warning.endswith(
            "set gate.evalsets.digits.accuracy.max_drop >= 0.017 or an evalset of >= 2,000 rows"
        )
        assert found["nll"].certifiable is None and not found["nll"].too_fine
        assert found["nll"].line().startswith("nll: known after a first comparison")

    def test_the_fix_applied_to_one_evalset_silences_it_and_no_other(self) -> None:
        """gate.evalsets.digits.accuracy at the suggested 0.017 is enough on digits; another
        evalset of the same size keeps the 1-point tolerance, and its warning."""
        policy = GatePolicy.model_validate(
            {"evalsets": {"digits": {"accuracy": {"max_drop": 0.017}}}}
        )
        digits = {r.metric: r for r in resolutions("digits", 719, FIVE, policy)}["accuracy"]
        other = {r.metric: r for r in resolutions("other", 719, FIVE, policy)}["accuracy"]
        assert not digits.too_fine and digits.setting == "gate.evalsets.digits.accuracy.max_drop"
        assert other.too_fine and other.setting == "gate.metrics.accuracy.max_drop"

    def test_a_tolerance_it_can_certify_is_not_too_fine(self) -> None:
        """2 points of accuracy on 719 rows at 3% churn is within reach: no warning."""
        policy = GatePolicy(metrics={"accuracy": Tolerance(max_drop=0.02)})
        (accuracy,) = resolutions("digits", 719, ["accuracy"], policy)
        assert not accuracy.too_fine and accuracy.line().endswith("configured 0.02")

    def test_measured_churn_and_bounds_replace_the_assumptions(self) -> None:
        """A line whose retrains flip 2 + 2 of 719 examples has its own resolution; nll's comes
        from its bounds (0.03 above the change) scaled to an 80% PASS; relative tolerances use
        the line's reference value."""
        comparisons = pd.DataFrame(week_rows("digits", 2, 2, weeks=3))
        policy = GatePolicy(
            metrics={"accuracy": Tolerance(max_drop=0.01), "nll": Tolerance(max_drop="10%")}
        )
        found = {
            r.metric: r
            for r in resolutions("digits", 719, ["accuracy", "nll"], policy, comparisons)
        }
        accuracy = found["accuracy"]
        assert accuracy.basis == f"{4 / 719:.1%} churn, 3 week(s) of digits"
        assert accuracy.certifiable == pytest.approx(certifiable_tolerance(719, 4 / 719, ALPHA))
        assert not accuracy.too_fine
        nll = found["nll"]
        assert nll.allowed == pytest.approx(0.02)
        assert nll.certifiable == pytest.approx(0.03 * (1.6449 + 0.8416) / 1.6449, rel=1e-3)
        assert nll.too_fine and "an evalset of >= " in nll.warning()

    def test_a_regression_is_not_churn(self) -> None:
        """A FAIL week's flips are left out, and a drop's extra newly wrong examples never count:
        the churn is twice the newly right share of the weeks without a regression."""
        rows = week_rows("digits", 6, 2, weeks=2) + [
            {**row, "verdict": "FAIL", "newly_wrong": 60, "newly_right": 9, "week": "2026-W20"}
            for row in week_rows("digits", 0, 0, weeks=1)
        ]
        (accuracy,) = resolutions("digits", 719, ["accuracy"], GatePolicy(), pd.DataFrame(rows))
        assert accuracy.basis == f"{4 / 719:.1%} churn, 2 week(s) of digits"


class TestWhereItIsSaid:
    def test_show_prints_the_resolution_and_warns_on_stderr_exit_0(
        self, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`evalset show` ends with the resolution as YAML comments; each too-fine tolerance is
        one warning line on stderr, and the exit code stays 0."""
        assert (
            main(["evalset", "show", "digits", "--config", str(project / "evalsentry.yaml")]) == 0
        )
        out, err = capsys.readouterr()
        assert "# resolution: the smallest tolerance an unchanged retrain PASSes 80%" in out
        assert "#   accuracy: 0.01675 (3.0% churn, assumed); configured 0.01: too fine" in out
        warnings = err.strip().splitlines()
        assert len(warnings) == 2 and all(w.startswith("warning: evalset digits") for w in warnings)

    def test_show_uses_the_churn_the_history_measured(
        self, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Once the history holds a line's weeks, show states its measured churn."""
        History(str(project / "store")).append_comparisons(week_rows("digits", 2, 2, weeks=2))
        assert (
            main(["evalset", "show", "digits", "--config", str(project / "evalsentry.yaml")]) == 0
        )
        assert "(0.6% churn, 2 week(s) of digits)" in capsys.readouterr().out

    def test_the_run_start_warns_with_the_fix_and_stays_quiet_when_it_fits(
        self, project: Path
    ) -> None:
        """The weekly run's check names each too-fine tolerance; wide enough ones say nothing."""
        config = load_config(project / "evalsentry.yaml")
        assert len(tolerance_warnings(config, ["digits"])) == 2
        (project / "evalsentry.yaml").write_text(
            "evalsets: evalsets\nstore: store\ngate:\n  metrics:\n"
            "    accuracy: {max_drop: 0.02}\n    top5_accuracy: {max_drop: 0.02}\n"
        )
        assert tolerance_warnings(load_config(project / "evalsentry.yaml"), ["digits"]) == []

    def test_evalsentry_run_prints_the_warnings_before_it_starts(
        self, project: Path, tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`evalsentry run` checks, before Prefect starts, and prints each warning as one line on
        stderr; nothing is refused (the run would go on)."""
        from evalsentry.checkpoints.registry import Registry
        from evalsentry.cli.runs import _something_to_evaluate
        from evalsentry.config import load_config

        (project / "evalsentry.yaml").write_text(
            f"evalsets: evalsets\nstore: store\nregistry: registry\n{TRUSTED_YAML}"
        )
        Registry(str(project / "registry")).register(
            tiny_checkpoint, "tiny", stage="production", trust=TRUST
        )
        _something_to_evaluate(load_config(project / "evalsentry.yaml"), None, None)
        warnings = capsys.readouterr().err.splitlines()
        assert len(warnings) == 2
        assert warnings[0].startswith("warning: evalset digits (719 rows) cannot certify")

    def test_freeze_states_the_resolution_of_the_new_evalset(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A freshly frozen evalset states what it can certify at the assumed churn."""
        source = tmp_path / "rows.csv"
        source.write_text("a,b,y\n" + "".join(f"{i},{i % 3},{i % 2}\n" for i in range(400)))
        config = tmp_path / "evalsentry.yaml"
        config.write_text("evalsets: evalsets\n")
        args = ["evalset", "freeze", str(source), "--name", "toy", "--task", "classification"]
        args += ["--target", "y", "--inputs", "a,b", "--config", str(config)]
        assert main(args) == 0
        out, err = capsys.readouterr()
        assert "resolution: the smallest tolerance an unchanged retrain PASSes 80%" in out
        assert "  accuracy: " in out and "(3.0% churn, assumed)" in out
        assert "warning: evalset toy (400 rows) cannot certify" in err
