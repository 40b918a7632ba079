"""What a person sees of a flow run: a name that tells runs apart, and a verdict that reads as one.

Run names carry what distinguishes a run, and end with the first hex digits of its flow run id,
so two runs of one week (a re-run, a backfill) differ, and the report file named after the run
is found from the run's page.

A Failed week is the pipeline working, not crashing. Every finished week carries its verdict in
its state message, headline first (what the UI shows before "See More" and what an automation
quotes), and its log opens on the verdict: the headline and each detail, one line each, are
stamped just before the run's first log line, so the Logs tab (oldest first) shows them first,
then the run as it happened.

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
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from prefect import get_run_logger, runtime
from prefect.client.schemas.objects import State
from prefect.exceptions import FailedRun
from prefect.states import Completed, Failed

from evalsentry.errors import EXIT_CHECK_FAILED, EXIT_OK, EXIT_USAGE, EvalsentryError

RUN_ID_CHARS = 6  # of the flow run id, in run and report file names: unique enough per week
ENGINE_LOGGERS = ("prefect.flow_runs", "prefect.engine")
SEPARATOR = " | "  # joins the headline and the details into one line for the state message
MESSAGE_DETAILS = 3  # details in the state message; the log and the report hold all of them


def short_id(flow_run_id: object = None) -> str:
    """The last hex digits of a flow run's id (the current run's; ``local`` outside a run).

    The last, not the first: the ids of the runs a server schedules are time-ordered (UUID
    version 7), so runs created together share their first digits; the tail is random.
    """
    run_id = flow_run_id if flow_run_id is not None else runtime.flow_run.id
    return str(run_id or "").replace("-", "")[-RUN_ID_CHARS:] or "local"


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


#: A record carrying this attribute (a Unix time) is stamped with it: see :func:`log_verdict`.
STAMP = "evalsentry_stamp"


class VerdictFirst(logging.Filter):
    """Gives a record the time in its ``evalsentry_stamp`` attribute, if it has one."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Restamp a verdict line; keep every record."""
        stamp = getattr(record, STAMP, None)
        if isinstance(stamp, float):
            record.created = stamp
            record.msecs = (stamp - int(stamp)) * 1000
        return True


_FIRST = VerdictFirst()


def _first_log_time() -> float | None:
    """Just before the first log line of the current flow run, as a Unix time (None if unknown)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.client.schemas.sorting import LogSort

    run_id = runtime.flow_run.id
    if not run_id:
        return None
    try:
        with get_client(sync_client=True) as client:
            first = client.read_logs(
                LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id])),
                limit=1,
                sort=LogSort.TIMESTAMP_ASC,
            )
            run = client.read_flow_run(run_id)
    except Exception:  # noqa: BLE001 - without the API the lines keep their own time
        return None
    return verdict_time([log.timestamp for log in first], run.start_time, run.created)


def verdict_time(
    first_logs: Sequence[datetime], start: datetime | None, created: datetime | None
) -> float | None:
    """Just before the run's first log line or its start, whichever is earlier (Unix time).

    Its creation time only when neither is known: a scheduled run is created weeks before it
    runs, and a queued one minutes or hours, and a verdict stamped then would read as if the
    run had finished before it began.
    """
    times = [t.timestamp() for t in [*first_logs, start] if t is not None]
    if not times and created is not None:
        times = [created.timestamp()]
    return min(times) - VERDICT_LEAD_S if times else None


VERDICT_LEAD_S = 0.001  # the verdict's first line, before the run's first log line
VERDICT_STEP_S = 0.000_01  # between the verdict's lines, which keep their order


def log_verdict(lines: Sequence[tuple[int, str]]) -> None:
    """Log ``(level, text)`` lines as the head of the run's log: the verdict, then its details.

    Each is one record of the flow run's logger, stamped just before the run's first log line
    (in their order), so the Prefect UI's Logs tab, oldest first, opens on them.
    """
    logger = get_run_logger()
    target = logging.getLogger("prefect.flow_runs")
    if _FIRST not in target.filters:
        target.addFilter(_FIRST)
    start = _first_log_time()
    for index, (level, text) in enumerate(lines):
        extra: dict[str, Any] = {}
        if start is not None:
            extra[STAMP] = start + index * VERDICT_STEP_S
        logger.log(level, text, extra=extra)


def tag_run(tags: Sequence[str]) -> None:
    """Add ``tags`` (``week:2026-W49``, ``model:digits``) to this flow run, to filter runs by.

    A run's tags are set when it is created; these are known only once it runs, so they are
    added through the API. A failure to tag is logged, never the run's failure.
    """
    from prefect.client.orchestration import get_client

    current = set(runtime.flow_run.tags or [])
    if set(tags) <= current:
        return
    try:
        with get_client(sync_client=True) as client:
            client.update_flow_run(runtime.flow_run.id, tags=sorted(current | set(tags)))
    except Exception as exc:  # noqa: BLE001 - a tag is a convenience; the week goes on
        get_run_logger().warning("could not tag the run %s: %s", sorted(tags), exc)


def fail(headline: str, details: Sequence[str | tuple[int, str]]) -> State:
    """Log the headline and each detail as the head of the run's log; the Failed state to return.

    A detail is logged at ERROR, or at the level given with it (a note beside the failure:
    drift, a comparison the evalset cannot resolve). The state message is one line, so the
    run's "Finished in state Failed(...)" log line holds no escaped newlines: the headline,
    then the first ``MESSAGE_DETAILS`` details, `` | `` between them, and how many more the
    log holds.
    """
    graded = [d if isinstance(d, tuple) else (logging.ERROR, d) for d in details]
    log_verdict([(logging.ERROR, headline), *graded])
    shown = [line for _, line in graded[:MESSAGE_DETAILS]]
    if len(details) > MESSAGE_DETAILS:
        shown.append(f"{len(details) - MESSAGE_DETAILS} more in the run's log and report")
    message = SEPARATOR.join([headline, *shown])
    _FILTER.verdicts.add(message)
    for name in ENGINE_LOGGERS:
        target = logging.getLogger(name)
        if _FILTER not in target.filters:
            target.addFilter(_FILTER)
    return Failed(message=message)


def complete(headline: str, level: int, details: Sequence[tuple[int, str]], data: Any) -> State:
    """Log the headline (at ``level``) and its details as the head of the log; the end state.

    The state message is the headline (the verdict: ``2026-W49: PASS, 0 warning(s)``), so a
    Completed run reads as what it found, not only as "Completed"; ``data`` is its result.
    """
    log_verdict([(level, headline), *details])
    return Completed(message=headline, data=data)


#: The headline verdicts of a Failed run that are check failures (exit 1), as `gate` exits.
_CHECK_FAILED = ("FAIL", "INCONCLUSIVE")


def exit_code(state: State) -> int:
    """The run's exit code: the one `evalsentry gate` gives its week (README, "Exit codes").

    0 Completed (pass, warn, inconclusive); 1 Failed on a FAIL (or a strict INCONCLUSIVE);
    2 Failed on an ERROR, and any run that did not finish with a verdict (crashed, cancelled,
    or failed with no headline of ours): never 0 for a run that did not say what it found.
    """
    if state.is_completed():
        return EXIT_OK
    week, _, said = (state.message or "").split(SEPARATOR)[0].partition(": ")
    ours = re.fullmatch(r"\d{4}-W\d{2}", week) is not None  # a week's verdict leads
    failed = state.is_failed() and ours and said.split(" ", 1)[0] in _CHECK_FAILED
    return EXIT_CHECK_FAILED if failed else EXIT_USAGE


def outcome_line(state: State) -> str:
    """How a finished run reads in a terminal: its verdict (the state message) and its report.

    ``flow run Completed: 2026-W40: PASS, 0 warning(s); report file:///...``, or the Failed
    run's verdict.
    """
    text = state.message or ""
    result = state.result(raise_on_failure=False) if state.is_completed() else None
    if isinstance(result, dict) and result.get("report"):
        text += f"; report {result['report']}"
    return f"flow run {state.name}: {text}" if text else f"flow run {state.name}"
