"""INCONCLUSIVE in the weekly flow: reported and Completed by default, Failed with gate.strict."""

from __future__ import annotations

from pathlib import Path

from evalsentry.flows.weekly_eval import weekly_eval


def test_an_inconclusive_week_completes_unless_strict(toy_project: Path) -> None:
    """300 rows cannot show an unchanged model within a 0.5-point tolerance: the run completes,
    its verdict PASS with the unresolved comparison listed (informational); with
    ``gate.strict: true`` the same week fails, naming the comparison."""
    text = toy_project.read_text()
    toy_project.write_text(text + "gate:\n  metrics:\n    accuracy: {max_drop: 0.005}\n")
    assert weekly_eval(
        week="2026-W40", config_path=str(toy_project), return_state=True
    ).is_completed()
    state = weekly_eval(week="2026-W41", config_path=str(toy_project), return_state=True)
    assert state.is_completed(), state.message
    result = state.result()
    assert result["verdict"] == "PASS"
    assert not [line for line in result["inconclusive"] if "accuracy vs" in line]
    lines = [line for line in result["unresolved"] if "accuracy vs previous-week" in line]
    assert lines and "cannot resolve ±0.5 pts on 300 examples" in lines[0]
    assert "detects drops of about" in lines[0]

    toy_project.write_text(
        text + "gate:\n  strict: true\n  metrics:\n    accuracy: {max_drop: 0.005}\n"
    )
    strict = weekly_eval(week="2026-W41", config_path=str(toy_project), return_state=True)
    assert strict.is_failed()
    assert strict.message.startswith("2026-W41: INCONCLUSIVE toy-model@v1 accuracy")
