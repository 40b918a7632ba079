"""The last holes a hostile or careless checkpoint found: each now fails closed, and loudly.

Numbers refer to the "What happens when..." table in the README.
"""

from __future__ import annotations

from pathlib import Path

from evalsentry.cli import main
from evalsentry.config import load_config
from evalsentry.flows.weekly_eval import weekly_eval
from evalsentry.registry import Registry
from tests.models import TRUST


def test_a_week_without_production_gates_its_candidate_against_the_line(
    toy_project: Path, toy_checkpoints: dict[str, Path]
) -> None:
    """Production archived, a degraded candidate left: it FAILs against the line's last result."""
    registry = Registry(load_config(toy_project).registry_url)
    assert weekly_eval(
        week="2026-W39", config_path=str(toy_project), return_state=True
    ).is_completed()
    registry.register(toy_checkpoints["degraded"], "toy-model", trust=TRUST)  # v2, a candidate
    registry.archive("toy-model", 1)
    state = weekly_eval(week="2026-W40", config_path=str(toy_project), return_state=True)
    assert state.is_failed()
    assert (state.message or "").startswith("2026-W40: FAIL toy-model@v2 accuracy")
    assert "vs production" in (state.message or "")
    assert main(["gate", "--week", "2026-W40", "--config", str(toy_project)]) == 1
