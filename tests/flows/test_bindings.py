"""An estate of two models of different input widths, each bound to its own evalset, in one week."""

from __future__ import annotations

from pathlib import Path

from evalsentry.cli import main
from evalsentry.config import load_config
from evalsentry.flows.weekly_eval import weekly_eval
from evalsentry.history.store import History
from evalsentry.names import NO_EVALSET
from tests.bindings import BOUND, estate

WEEK = "2026-W40"


def test_one_week_evaluates_each_model_on_its_own_evalset_only(
    tmp_path: Path, train_data: Path
) -> None:
    config = estate(tmp_path, BOUND, train_data=train_data)
    state = weekly_eval(week=WEEK, config_path=str(config), return_state=True)
    assert state.is_completed(), state.message
    rows = History(load_config(config).store_url).evaluations()
    assert sorted(zip(rows["model"], rows["evalset"], rows["status"], strict=True)) == [
        ("narrow", "narrow", "ok"),
        ("wide", "wide", "ok"),
    ]
    reports = sorted((Path(load_config(config).store_url) / "reports").glob("weekly-eval-*.md"))
    assert len(reports) == 2  # this run's report and the week's latest copy: one report each
    text = reports[0].read_text()
    assert "### Model lines" in text
    assert "| narrow | narrow |" in text and "| wide | wide |" in text
    assert "<h2>Model lines</h2>" in reports[0].with_suffix(".html").read_text()


def test_an_unbound_model_is_an_error_and_the_bound_one_still_runs(
    tmp_path: Path, train_data: Path
) -> None:
    """The unbound line is the week's ERROR, in the history too, so the gate says the same."""
    config = estate(tmp_path, "models:\n  narrow: {evalsets: [narrow]}\n", train_data=train_data)
    state = weekly_eval(week=WEEK, config_path=str(config), return_state=True)
    assert state.is_failed()
    assert (state.message or "").startswith(
        f"{WEEK}: ERROR wide@v1 (not evaluated: model 'wide' is bound"
    )
    rows = History(load_config(config).store_url).evaluations()
    assert sorted(zip(rows["model"], rows["evalset"], rows["status"], strict=True)) == [
        ("narrow", "narrow", "ok"),
        ("wide", NO_EVALSET, "error"),
    ]
    report = Path(load_config(config).store_url) / "reports" / f"weekly-eval-{WEEK}.md"
    assert "model 'wide' is bound to no evalset" in report.read_text()
    assert main(["gate", "--week", WEEK, "--config", str(config)]) == 2
