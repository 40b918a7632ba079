"""What a person sees of a flow run: a name that tells runs apart, and a verdict that reads as one.

Run names carry what distinguishes a run, and end with the first hex digits of its flow run id,
so two runs of one week (a re-run, a backfill) differ, and the report file named after the run
is found from the run's page.

A Failed week is the pipeline working, not crashing. The run's state message leads with the
headline (what the UI shows before "See More" and what an automation quotes), and each detail
is its own log line.

Prefect 3.9's worker subprocess (`python -m prefect.engine`) asks the engine for the run's
result at the end; for a Failed state that raises ``FailedRun``, which ``run_flow`` logs to the
run's log as "Engine execution exited with unexpected exception" with a traceback (and
``handle_engine_signals`` logs it again to the worker's console). Every way of ending Failed
takes that path: returning a ``Failed`` state, raising, or returning failed states. So the one
``FailedRun`` whose message is the verdict this process returned is kept out of those two
loggers; any other exception, a crash included, still logs its traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from prefect import get_run_logger, runtime
from prefect.client.schemas.objects import State
from prefect.exceptions import FailedRun
from prefect.states import Failed

from evalsentry.errors import EvalsentryError

RUN_ID_CHARS = 6  # of the flow run id, in run and report file names: unique enough per week
ENGINE_LOGGERS = ("prefect.flow_runs", "prefect.engine")
SEPARATOR = " | "  # joins the headline and the details into one line for the state message
MESSAGE_DETAILS = 3  # details in the state message; the log and the report hold all of them


def short_id() -> str:
    """The first hex digits of the current flow run's id (``local`` outside a run)."""
    return str(runtime.flow_run.id or "").replace("-", "")[:RUN_ID_CHARS] or "local"


class VerdictIsNotACrash(logging.Filter):
    """Drops the engine's traceback of a ``FailedRun`` that carries a verdict returned here."""

    def __init__(self) -> None:
        super().__init__()
        self.verdicts: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        """False for a record of the engine re-raising one of this process's verdicts."""
        error = record.exc_info[1] if record.exc_info else None
        return not (isinstance(error, FailedRun) and str(error) in self.verdicts)


_FILTER = VerdictIsNotACrash()


class DomainErrorIsOneLine(logging.Filter):
    """A task that refused unusable input logs one line, its reason, and no traceback.

    A task raising an evalsentry error (a tampered evalset, an unusable store) is reporting a
    fact about the input, already worded for a person; the engine's traceback of it would bury
    the reason under frames of evalsentry and Prefect. Any other exception keeps its traceback.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Strip the traceback from a record of an evalsentry error; keep every record."""
        if record.exc_info and isinstance(record.exc_info[1], EvalsentryError):
            record.exc_info, record.exc_text = None, None
        return True


_ONE_LINE = DomainErrorIsOneLine()


def quiet_domain_errors() -> None:
    """Install :class:`DomainErrorIsOneLine` on Prefect's task-run logger (once)."""
    target = logging.getLogger("prefect.task_runs")
    if _ONE_LINE not in target.filters:
        target.addFilter(_ONE_LINE)


def fail(headline: str, details: Sequence[str]) -> State:
    """Log the headline and each detail as its own line; the Failed state the flow returns.

    The state message is one line, so the run's "Finished in state Failed(...)" log line holds
    no escaped newlines: the headline, then the first ``MESSAGE_DETAILS`` details, `` | ``
    between them, and how many more the log holds.
    """
    logger = get_run_logger()
    logger.error(headline)
    for line in details:
        logger.error(line)
    shown = list(details[:MESSAGE_DETAILS])
    if len(details) > MESSAGE_DETAILS:
        shown.append(f"{len(details) - MESSAGE_DETAILS} more in the run's log and report")
    message = SEPARATOR.join([headline, *shown])
    _FILTER.verdicts.add(message)
    for name in ENGINE_LOGGERS:
        target = logging.getLogger(name)
        if _FILTER not in target.filters:
            target.addFilter(_FILTER)
    return Failed(message=message)


def outcome_line(state: State) -> str:
    """How a finished run reads in a terminal: its verdict, or what a Completed week found.

    ``flow run Completed: 2026-W40: PASS, 2 evaluation(s), 0 warning(s); report file:///...``;
    unresolved comparisons (informational) are counted after the warnings.
    """
    text = state.message or ""
    if state.is_completed() and not text:
        result = state.result(raise_on_failure=False)
        if isinstance(result, dict) and {"week", "verdict", "evaluations"} <= set(result):
            unsure = len(result.get("inconclusive", []))
            unresolved = len(result.get("unresolved", []))
            text = (
                f"{result['week']}: {result['verdict']}, {result['evaluations']} evaluation(s), "
                + (f"{unsure} inconclusive, " if unsure else "")
                + f"{len(result.get('warnings', []))} warning(s)"
                + (f", {unresolved} unresolved" if unresolved else "")
                + f"; report {result.get('report')}"
            )
    return f"flow run {state.name}: {text}" if text else f"flow run {state.name}"
