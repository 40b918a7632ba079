"""Every deployment in prefect.yaml loads (the demo story runs in tests/integration/test_demo_cli.py)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parents[2]


def test_every_deployment_parses_and_its_entrypoint_imports() -> None:
    """Each prefect.yaml deployment names a flow that imports, on the gpu pool, with a schedule where due."""
    from prefect.flows import Flow

    spec = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    deployments = {d["name"]: d for d in spec["deployments"]}
    assert set(deployments) == {"weekly-eval", "evaluate-candidate", "evaluate-one"}
    for deployment in deployments.values():
        path, name = deployment["entrypoint"].split(":")
        assert path.startswith("evalsentry.flows.")  # a module of the installed package
        module = importlib.import_module(path)
        flow = getattr(module, name)
        assert isinstance(flow, Flow)
        assert deployment["work_pool"]["name"] == "gpu"
        assert set(deployment.get("parameters", {})) <= set(flow.parameters.properties)
    schedule = deployments["weekly-eval"]["schedules"][0]
    assert (schedule["cron"], schedule["timezone"]) == ("0 6 * * 1", "UTC")
    assert (
        "schedules" not in deployments["evaluate-candidate"]
        and "schedules" not in deployments["evaluate-one"]
    )


def test_a_deployment_passing_the_old_config_parameter_is_refused() -> None:
    """A deployment from a prefect.yaml older than `config_path` fails at the start, naming `config`."""
    from prefect.exceptions import SignatureMismatchError

    from evalsentry.flows.weekly_eval import weekly_eval

    weekly_eval.validate_parameters({"config_path": "evalsentry.yaml"})
    with pytest.raises(SignatureMismatchError, match=r"provided with parameters \['config'\]"):
        weekly_eval.validate_parameters({"config": "evalsentry.yaml"})


def test_automation_example_is_valid_for_the_prefect_api() -> None:
    """The alert automation parses, fires on the week's summary event, and posts it back as JSON."""
    from prefect.events.schemas.automations import AutomationCore
    from prefect.server.utilities.user_templates import render_user_template_sync

    from evalsentry.alerts import summary
    from evalsentry.gate import Comparison, GateReport, Verdict
    from evalsentry.tasks.events import WEEK_FAILED

    document = yaml.safe_load((ROOT / "flows" / "regression-alert.yaml").read_text())
    automation = AutomationCore.model_validate(document)
    assert automation.trigger.expect == {WEEK_FAILED}  # type: ignore[union-attr]
    (action,) = automation.actions
    assert action.type == "call-webhook"
    failed = Comparison("e", "2026-W41", "m", 2, "s", "previous-week", "accuracy", Verdict.FAIL, "")
    payload = summary(GateReport("2026-W41", [failed]), run_name="weekly-eval-2026-W41")
    body = render_user_template_sync(action.payload, {"event": {"payload": payload}})  # type: ignore[union-attr]
    assert json.loads(body) == payload
