"""Every deployment in prefect.yaml loads (the demo story runs in tests/integration/test_demo_cli.py)."""

from __future__ import annotations

import asyncio
import importlib
import itertools
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
    assert set(deployments) == {
        "weekly-eval",
        "import-results",
        "evaluate-candidate",
        "evaluate-one",
    }
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
    imports = deployments["import-results"]
    assert imports["entrypoint"] == "evalsentry.flows.import_results:import_results"
    schedule = imports["schedules"][0]
    assert (schedule["cron"], schedule["timezone"], schedule["active"]) == (
        "0 5 * * 1",
        "UTC",
        True,
    )
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


def test_the_alert_automations_are_valid_for_the_prefect_api() -> None:
    """The three automations parse; the failed week's posts its event's summary back as JSON, and
    the crashed and overdue ones render, from the flow run, a payload of the same shape."""
    import uuid
    from datetime import UTC, datetime, timedelta

    from prefect.server.events.actions import JinjaTemplateAction
    from prefect.server.schemas.responses import FlowRunResponse
    from prefect.server.schemas.states import State, StateType
    from prefect.server.utilities.user_templates import render_user_template_sync

    from evalsentry.flows.alerts import AUTOMATION_FILE, load_automations
    from evalsentry.gate.week import Comparison, GateReport, Verdict
    from evalsentry.reports.alerts import summary
    from evalsentry.tasks.events import WEEK_DRIFTED, WEEK_FAILED

    block = uuid.uuid4()
    automations = load_automations(AUTOMATION_FILE, block, timedelta(minutes=90))
    failed, drifted, crashed, overdue = automations
    assert failed.trigger.expect == {WEEK_FAILED}  # type: ignore[union-attr]
    assert drifted.trigger.expect == {WEEK_DRIFTED}  # type: ignore[union-attr]
    assert crashed.trigger.expect == {"prefect.flow-run.Crashed"}  # type: ignore[union-attr]
    assert overdue.trigger.posture == "Proactive"  # type: ignore[union-attr]
    assert overdue.trigger.within == timedelta(minutes=90)  # type: ignore[union-attr]
    assert overdue.trigger.after == {  # type: ignore[union-attr]
        "prefect.flow-run.Late",
        "prefect.flow-run.Pending",
        "prefect.flow-run.Running",
    }
    for automation in (crashed, overdue):  # the weekly flows' runs, each on its own
        assert automation.trigger.match_related.root == {  # type: ignore[union-attr]
            "prefect.resource.role": "flow",
            "prefect.resource.name": ["weekly-eval", "import-results"],
        }
    actions = [a for automation in automations for a in automation.actions]
    assert {a.block_document_id for a in actions} == {block}  # type: ignore[union-attr]
    fail = Comparison("e", "2026-W41", "m", 2, "s", "previous-week", "accuracy", Verdict.FAIL, "")
    payload = summary(GateReport("2026-W41", [fail]), run_name="weekly-eval-2026-W41")
    for automation in (failed, drifted):  # each posts its event's summary as it is
        action = automation.actions[0]
        body = render_user_template_sync(action.payload, {"event": {"payload": payload}})  # type: ignore[union-attr]
        assert json.loads(body) == payload

    JinjaTemplateAction._register_filters_if_needed()  # ui_url, as the server registers it
    run = FlowRunResponse(
        id=uuid.uuid4(),
        name="brave-otter",
        flow_id=uuid.uuid4(),
        parameters={"config_path": "evalsentry.yaml"},
        expected_start_time=datetime(2026, 12, 7, 6, tzinfo=UTC),
        state=State(type=StateType.CRASHED, name="Crashed", message='exit code -9 "killed"'),
    )
    # The server reads the run when the action fires but puts the triggering event's state in
    # flow_run.state: a fanned-out week whose clock started at Pending is Running by then.
    started = run.model_copy(
        update={"state": State(type=StateType.PENDING, name="Pending"), "state_name": "Running"}
    )
    for automation, flow_run, alert, words in (
        (crashed, run, "crashed", 'ERROR the run crashed: exit code -9 "killed"'),
        (overdue, started, "overdue", "ERROR the run has not ended within 90m (it is Running)"),
        (overdue, run, "overdue", "ERROR the run has not ended within 90m (it is Crashed)"),
    ):
        context = {"flow_run": flow_run, "automation": automation}
        rendered = json.loads(render_user_template_sync(automation.actions[0].payload, context))  # type: ignore[union-attr]
        assert set(rendered) == set(payload) and set(rendered["counts"]) == set(payload["counts"])
        assert rendered["alert"] == alert and rendered["week"] == "2026-W50"
        assert rendered["headline"] == f"2026-W50: {words}"
        assert rendered["text"].splitlines()[0] == f"evalsentry: 2026-W50: {words}"
        assert rendered["run"]["name"] == "brave-otter"


def test_the_import_results_deployment_runs_its_flow_once_a_week() -> None:
    """import-results deploys the import flow; the server's reading of its cron fires weekly."""
    from datetime import UTC, datetime, timedelta

    from prefect.server.schemas.schedules import CronSchedule

    from evalsentry.flows.import_results import import_results

    spec = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    deployment = next(d for d in spec["deployments"] if d["name"] == "import-results")
    path, name = deployment["entrypoint"].split(":")
    assert getattr(importlib.import_module(path), name) is import_results
    import_results.validate_parameters(deployment["parameters"])
    (schedule,) = deployment["schedules"]
    cron = CronSchedule(cron=schedule["cron"], timezone=schedule["timezone"])
    fires = asyncio.run(cron.get_dates(n=3, start=datetime(2026, 12, 1, tzinfo=UTC)))
    assert [b - a for a, b in itertools.pairwise(fires)] == [timedelta(days=7)] * 2
    assert (fires[0].weekday(), fires[0].hour) == (0, 5)  # Monday, before weekly-eval at 6


def test_the_run_form_describes_every_parameter_of_every_flow() -> None:
    """Each parameter has a description in the UI's Run form; task_runner is a choice."""
    from prefect.utilities.callables import parameter_schema

    from evalsentry.flows.evaluate_candidate import evaluate_candidate
    from evalsentry.flows.evaluate_one import evaluate_one
    from evalsentry.flows.import_results import import_results
    from evalsentry.flows.weekly_eval import weekly_eval

    for flow in (weekly_eval, import_results, evaluate_candidate, evaluate_one):
        properties = parameter_schema(flow).model_dump()["properties"]
        assert properties, flow.name
        undescribed = [name for name, p in properties.items() if not p.get("description")]
        assert not undescribed, (flow.name, undescribed)
    weekly = parameter_schema(weekly_eval).model_dump()["properties"]
    assert weekly["task_runner"]["enum"] == ["thread", "dask"]
    assert "cuda:N" in weekly["device"]["description"]
