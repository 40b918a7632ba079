"""The weekly run as the UI shows it: its verdict is the state message and the head of its log,
and every Failed run sends exactly one `evalsentry.week.failed` event, whatever stopped it."""

from __future__ import annotations

import logging
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from evalsentry.flows.weekly_eval import weekly_eval
from tests.flows.api import alerts_of, run_logs, run_name, run_tags


class TestTheVerdictLeads:
    def test_a_passing_week_s_state_message_and_first_log_line_are_its_verdict(
        self, toy_project: Path
    ) -> None:
        """Completed is not all the UI says: the message is the verdict, the log opens on it,
        and a passing week sends no alert."""
        first = weekly_eval(week="2026-W40", config_path=str(toy_project), return_state=True)
        second = weekly_eval(week="2026-W41", config_path=str(toy_project), return_state=True)
        assert first.is_completed() and (first.message or "").startswith("2026-W40: BASELINE")
        assert second.is_completed() and second.message == "2026-W41: PASS, 0 warning(s)"
        logs = run_logs(second.state_details.flow_run_id)
        assert logs[0] == (logging.INFO, "2026-W41: PASS, 0 warning(s)")
        assert logs[1][1].startswith("report: ")
        assert alerts_of(second, "2026-W41", expect=False) == []

    def test_a_run_created_before_it_starts_shows_its_verdict_when_it_ran(
        self, toy_project: Path
    ) -> None:
        """A run the scheduler created ahead (here 3 s; weeks, for a schedule) and a worker
        started later: the verdict leads the log stamped at the run's start, not its creation."""
        import time

        from prefect.client.orchestration import get_client
        from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
        from prefect.client.schemas.sorting import LogSort
        from prefect.flow_engine import run_flow
        from prefect.logging.handlers import APILogWorker
        from prefect.states import Scheduled

        parameters = {"week": "2026-W40", "config_path": str(toy_project)}
        with get_client(sync_client=True) as client:
            created = client.create_flow_run(weekly_eval, parameters=parameters, state=Scheduled())
        time.sleep(3)
        run_flow(weekly_eval, flow_run=created, parameters=parameters, return_type="state")
        APILogWorker.drain_all(timeout=30)  # the run's logs reach the API in batches
        with get_client(sync_client=True) as client:
            run = client.read_flow_run(created.id)
            logs = client.read_logs(
                LogFilter(flow_run_id=LogFilterFlowRunId(any_=[created.id])),
                sort=LogSort.TIMESTAMP_ASC,
            )
        assert run.start_time is not None and run.created is not None
        assert logs[0].message.startswith("2026-W40: BASELINE")
        assert logs[0].timestamp >= run.start_time - timedelta(seconds=1)
        assert logs[0].timestamp >= run.created + timedelta(seconds=2)


class TestEveryFailedRunAlertsOnce:
    @pytest.mark.parametrize(
        ("case", "headline"),
        [
            ("mistyped-model", "2026-W40: ERROR nothing to evaluate"),
            ("missing-config", "2026-W40: ERROR "),
        ],
    )
    def test_a_run_that_fails_before_its_gate_alerts_once_with_its_headline(
        self, toy_project: Path, case: str, headline: str
    ) -> None:
        """Nothing to evaluate, or no config: Failed, one event whose first line is the
        headline, which also opens the run's log (ERROR, then each reason)."""
        if case == "mistyped-model":
            state = weekly_eval(
                week="2026-W40",
                models=["toy-modle"],
                config_path=str(toy_project),
                return_state=True,
            )
        else:
            missing = toy_project.parent / "missing.yaml"
            state = weekly_eval(week="2026-W40", config_path=str(missing), return_state=True)
        assert state.is_failed()
        message = state.message or ""
        assert message.startswith(headline)
        own = message.split(" | ")[0]
        (alert,) = alerts_of(state, "2026-W40")
        payload = alert.payload
        assert payload["alert"] == "failed" and payload["gate"] == "ERROR"
        assert payload["week"] == "2026-W40" and payload["headline"] == own
        assert payload["text"].splitlines()[0] == f"evalsentry: {own}"
        assert payload["counts"]["ERROR"] == 1
        logs = run_logs(state.state_details.flow_run_id)
        assert logs[0] == (logging.ERROR, own)
        if case == "mistyped-model":
            assert "Did you mean 'toy-model'?" in logs[1][1] and logs[1][0] == logging.ERROR
        else:
            assert "missing.yaml" in own

    def test_a_retried_run_alerts_again_only_for_another_verdict(self, tmp_path: Path) -> None:
        """The UI's Retry of a Failed run: failing the same way sends nothing more; failing
        another way (here the config, missing, then written wrong) alerts again."""
        from prefect.client.orchestration import get_client
        from prefect.events.worker import EventsWorker
        from prefect.flow_engine import run_flow
        from prefect.states import AwaitingRetry, Scheduled

        config = tmp_path / "evalsentry.yaml"
        parameters = {"week": "2026-W40", "config_path": str(config)}
        with get_client(sync_client=True) as client:
            created = client.create_flow_run(weekly_eval, parameters=parameters, state=Scheduled())

        def attempt() -> Any:
            with get_client(sync_client=True) as client:
                run = client.read_flow_run(created.id)
                if run.state is not None and run.state.is_failed():  # the UI's Retry button
                    client.set_flow_run_state(created.id, AwaitingRetry(), force=True)
                    run = client.read_flow_run(created.id)
            state = run_flow(weekly_eval, flow_run=run, parameters=parameters, return_type="state")
            EventsWorker.drain_all(timeout=30)  # its alert, if any, has reached the server
            return state

        first = attempt()
        assert first.is_failed() and "file not found" in first.message
        assert len(alerts_of(first, "2026-W40")) == 1
        same = attempt()
        assert same.is_failed() and same.message == first.message
        assert len(alerts_of(same, "2026-W40")) == 1  # still the first attempt's only
        config.write_text("store: [\n")
        other = attempt()
        assert other.is_failed() and "file not found" not in other.message
        alerts = _until(2, lambda: alerts_of(other, "2026-W40"))  # the server stores events late
        assert sorted(a.payload["headline"] for a in alerts) == sorted(
            state.message.split(" | ")[0] for state in (first, other)
        )

    def test_a_malformed_week_refused_by_the_flow_still_alerts(self, toy_project: Path) -> None:
        """A week that is not an ISO week fails the run at once; it alerts as that week."""
        state = weekly_eval(week="W49", config_path=str(toy_project), return_state=True)
        assert state.is_failed() and "ISO week" in (state.message or "")
        (alert,) = alerts_of(state, "W49")
        assert alert.payload["headline"].startswith("W49: ERROR ")


class TestNames:
    def test_a_fanned_out_child_is_named_after_its_parent_run(self, toy_project: Path) -> None:
        """evaluate-one's name: the model, an integer version, the evalset, the week, and the
        end of the parent flow run's id (as the parent's own name ends), not the history's."""
        from prefect import flow, runtime

        from evalsentry.flows.evaluate_one import evaluate_one

        @flow(name="fan-out-parent")
        def parent() -> tuple[str, str, str]:
            child = evaluate_one(
                model="toy-model",
                version=1,
                evalset="toy",
                week="2026-W40",
                run_id="history-run-id-not-the-parent",
                config_path=str(toy_project),
                return_state=True,
            )
            message = f"{child.name}: {child.message}"
            return str(runtime.flow_run.id), str(child.state_details.flow_run_id), message

        parent_id, child_id, message = parent()
        assert run_name(child_id) == (
            f"evaluate-one-toy-model-v1-toy-2026-W40-{parent_id.replace('-', '')[-6:]}"
        )
        # Its state message says what it recorded; the parent gates the week.
        assert re.fullmatch(
            r"Completed: 2026-W40: toy-model@v1 on toy: ok, accuracy \d\.\d{4}, .*; "
            r"the parent run gates the week",
            message,
        ), message
        assert run_tags(child_id) == {"week:2026-W40", "model:toy-model"}


class TestExitCodes:
    @pytest.mark.parametrize(
        ("state", "code"),
        [
            ("Completed:2026-W40: PASS, 0 warning(s)", 0),
            ("Completed:2026-W40: INCONCLUSIVE m@v2 accuracy (possible regression)", 0),
            ("Failed:2026-W40: FAIL m@v2 accuracy -4.5 pts (p=0.001) | details", 1),
            ("Failed:2026-W40: INCONCLUSIVE m@v2 accuracy (strict)", 1),
            ("Failed:2026-W40: ERROR m2@v3 (MISSING: no result in 2026-W40 ...)", 2),
            ("Failed:week 49: ERROR nothing to evaluate", 2),
            ("Failed:Flow run encountered an exception: FAIL", 2),
            ("Crashed:Execution was interrupted", 2),
            ("Cancelled:2026-W40: PASS, 0 warning(s)", 2),
        ],
    )
    def test_a_run_exits_as_the_gate_of_its_week(self, state: str, code: int) -> None:
        """`evalsentry run`'s code from the final state: FAIL 1, ERROR 2, and 2 for any run
        that did not finish with a verdict of ours (crashed, cancelled, an exception)."""
        from prefect import states

        from evalsentry.flows.runs import exit_code

        kind, _, message = state.partition(":")
        assert exit_code(getattr(states, kind)(message=message)) == code


def _until(count: int, read: Any, timeout_s: float = 30) -> Any:
    """``read()`` until it holds ``count`` items (a busy server persists events late)."""
    import time

    deadline = time.monotonic() + timeout_s
    while len(found := read()) < count and time.monotonic() < deadline:
        time.sleep(1)
    return found
