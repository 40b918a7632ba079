"""Picking up each configured model line's new harness runs, as the ``import-results`` flow does.

``imports:`` of ``evalsentry.yaml`` names, per model line, a harness and where its runs land
(:class:`~evalsentry.config.ImportSource`). :func:`plan_imports` finds the runs there and says
of each what becomes of it: imported, skipped (already in the history, or not the line's
newest) or refused (unreadable, another harness version, nothing found), with the reason.
A run is known by its content (:func:`~.run.run_identity`, kept as ``import_id`` in the
history), so a run imported before, by the flow or by ``evalsentry import``, is never imported
again, wherever it lies. :func:`import_found` records one through the path the CLI takes
(:func:`~.run.record_import`).
"""

from __future__ import annotations

import glob
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final

from evalsentry.errors import EvalsentryError, UsageError
from evalsentry.harnesses.run import (
    HarnessRun,
    check_same_harness,
    default_evalset,
    record_import,
    run_identity,
)
from evalsentry.names import WEEKLY_RUN

if TYPE_CHECKING:
    from evalsentry.config import Config
    from evalsentry.history.store import History
    from evalsentry.sections import ImportSource

log = logging.getLogger(__name__)

IMPORT: Final = "import"
SKIPPED: Final = "skipped"
REFUSED: Final = "refused"
#: What one run is, under a folder a pattern names: lm-eval's results file, an Inspect log.
RUN_FILES = {"lm-eval": "results_*.json", "inspect": "*.eval"}


@dataclass(frozen=True)
class Found:
    """A run found for a model line, and what becomes of it (``action``) and why."""

    line: str
    source: str  # the results file or log
    action: str  # IMPORT, SKIPPED or REFUSED
    reason: str = ""
    run: HarnessRun | None = None
    evalset: str | None = None

    def describe(self) -> str:
        """``not imported sums: <source>: <reason>`` (or ``skipped ...``), one line."""
        said = "not imported" if self.action == REFUSED else self.action
        task = f" ({self.evalset})" if self.evalset else ""
        return f"{said} {self.line}: {self.source}{task}: {self.reason}"


@dataclass(frozen=True)
class Imported:
    """A run recorded as the week's result of its line."""

    line: str
    source: str
    version: int
    evalset: str
    n_examples: int
    metrics: dict[str, float]

    def describe(self) -> str:
        """``sums@v2 on lm-eval.arith: 40 examples, score:acc 1.0000``."""
        shown = ", ".join(f"{k} {v:.4f}" for k, v in self.metrics.items())
        return f"{self.line}@v{self.version} on {self.evalset}: {self.n_examples} examples, {shown}"


def locate(pattern: str, harness: str) -> list[str]:
    """The runs ``pattern`` names: the files it matches, and the run files under its folders."""
    # An absolute pattern, which Path.glob does not take.
    matches = glob.glob(pattern, recursive=True) if glob.has_magic(pattern) else [pattern]  # noqa: PTH207
    runs: set[str] = set()
    for match in map(Path, matches):
        if match.is_dir():
            runs.update(str(p) for p in match.rglob(RUN_FILES[harness]))
        elif match.is_file() and (harness == "inspect" or match.match(RUN_FILES[harness])):
            runs.add(str(match))
    return sorted(runs)


def read_source(source: ImportSource, path: str) -> list[HarnessRun]:
    """The runs at ``path`` (one per task), read with the line's options.

    As ``evalsentry import`` reads them.
    """
    if source.harness == "lm-eval":
        from evalsentry.harnesses.lm_eval_groups import read_lm_eval_tasks

        tasks = [source.task] if isinstance(source.task, str) else list(source.task or [])
        return read_lm_eval_tasks(path, tasks, filter_name=source.filter, cluster=source.cluster)
    from evalsentry.harnesses.inspect_logs import read_inspect

    return [read_inspect(path, cluster=source.cluster)]


def imported_runs(history: History) -> dict[str, tuple[str, datetime | None]]:
    """Each run in the history (superseded ones too) by its ``import_id``: its line, its end."""
    rows = history.evaluations(kind=WEEKLY_RUN, include_superseded=True)
    known: dict[str, tuple[str, datetime | None]] = {}
    for model, config, finished in zip(
        rows["model"], rows["config_json"], rows["finished_at"], strict=True
    ):
        identity = json.loads(config or "{}").get("import_id") if config else None
        if identity:
            known[identity] = (str(model), _when(finished))
    return known


def plan_imports(
    history: History, config: Config, lines: Sequence[str] | None = None
) -> list[Found]:
    """Every run the configured lines' patterns name (or ``lines``' only), and its fate.

    Raises:
        UsageError: ``lines`` names a line ``imports:`` does not list.
    """
    unknown = sorted(set(lines or ()) - set(config.imports))
    if unknown:
        raise UsageError(
            f"{', '.join(unknown)}: not a model line of imports: in {config.trust.config_file}; "
            f"choose from {', '.join(sorted(config.imports)) or '(none listed)'}"
        )
    known = imported_runs(history)
    found: list[Found] = []
    for line, source in sorted(config.imports.items()):
        if lines is None or line in lines:
            found += plan_line(history, line, source, config, known)
    return found


def plan_line(
    history: History,
    line: str,
    source: ImportSource,
    config: Config,
    known: dict[str, tuple[str, datetime | None]],
) -> list[Found]:
    """The runs of one line: the newest new one imported; the others skipped or refused."""
    pattern = config.resolve(source.results)
    paths = locate(pattern, source.harness)
    if not paths:
        fix = f"check imports.{line}.results in {config.trust.config_file}"
        reason = f"no {source.harness} run found there; {fix}"
        return [Found(line, pattern, REFUSED, reason)]
    found, new, broken = [], [], []
    for path in paths:
        try:
            runs = read_source(source, path)
        except EvalsentryError as exc:
            broken.append(Found(line, path, REFUSED, str(exc).removeprefix(f"{path}: ")))
            continue
        except Exception as exc:  # noqa: BLE001 - one unreadable run never stops the pick-up
            why = f"unreadable ({type(exc).__name__}: {str(exc)[:200]}); nothing was recorded"
            broken.append(Found(line, path, REFUSED, why))
            continue
        for run in runs:
            evalset = source.evalset or default_evalset(run)
            before = known.get(run_identity(run))
            if before is not None:
                said = f"already in the history (line {before[0]})"
                found.append(Found(line, path, SKIPPED, said, evalset=evalset))
            else:
                new.append(Found(line, path, IMPORT, run=run, evalset=evalset))
    for evalset in sorted({f.evalset or "" for f in new}):
        same = [f for f in new if f.evalset == evalset]
        found += _newest_only(history, line, source, same, known)
    return _superseded(line, broken, found, known) + found


def _superseded(
    line: str,
    broken: list[Found],
    found: list[Found],
    known: dict[str, tuple[str, datetime | None]],
) -> list[Found]:
    """Runs that cannot be imported: refused, unless written before the line's newest import.

    An errored or damaged run left in the folder fails the pick-up that finds it, as long as
    nothing newer stands for the line; once a newer run is imported it is skipped, naming it,
    and no later week fails for it.
    """
    imported = [_end(f.run) for f in found if f.action == IMPORT]
    ends = [end for model, end in known.values() if model == line and end] + imported
    newest = max(ends, default=None)
    out = []
    for item in broken:
        written = _written(item.source)
        if newest is not None and written is not None and written <= newest:
            why = item.reason.removesuffix("; nothing was recorded")
            reason = f"not importable ({why}), and older than the line's newest imported run"
            out.append(replace(item, action=SKIPPED, reason=reason))
        else:
            out.append(item)
    return out


def _newest_only(
    history: History,
    line: str,
    source: ImportSource,
    new: list[Found],
    known: dict[str, tuple[str, datetime | None]],
) -> list[Found]:
    """Of a line's new runs, the newest is the week's result, if newer than its last import."""
    if not new:
        return []
    ordered = sorted(new, key=lambda f: (_end(f.run), f.source))
    newest, older = ordered[-1], ordered[:-1]
    backfill = "import it by hand for its own week (evalsentry import ... --week)"
    kept = [replace(f, action=SKIPPED, reason=f"older than {newest.source}; {backfill}", run=None) for f in older]  # fmt: skip
    last = max((end for model, end in known.values() if model == line and end), default=None)
    if last is not None and _end(newest.run) <= last:
        reason = f"finished before the line's last imported run; {backfill}"
        return [*kept, replace(newest, action=SKIPPED, reason=reason, run=None)]
    if not source.allow_harness_change and newest.run is not None and newest.evalset:
        try:
            check_same_harness(history, line, newest.evalset, newest.run)
        except UsageError as exc:
            said = str(exc).removeprefix(f"{newest.source}: ")
            reason = f"{said} (in evalsentry.yaml: imports.{line}.allow_harness_change: true)"
            return [*kept, replace(newest, action=REFUSED, reason=reason, run=None)]
    return [*kept, newest]


def import_found(history: History, found: Found, config: Config, week: str) -> Imported:
    """Record a run :func:`plan_imports` marked IMPORT as ``week``'s result of its line."""
    if found.action != IMPORT or found.run is None:
        raise UsageError(f"{found.source}: not a run to import ({found.action}: {found.reason})")
    source = config.imports[found.line]
    outcome = record_import(
        history,
        found.run,
        config=config,
        model=found.line,
        evalset=found.evalset,
        week=week,
        allow_harness_change=source.allow_harness_change,
    )
    row = outcome.evaluation
    return Imported(
        found.line,
        found.source,
        int(row["version"]),
        str(row["evalset"]),
        int(row["n_examples"]),
        {str(m["metric"]): float(m["value"]) for m in outcome.metrics if not m["slice"]},
    )


def _end(run: HarnessRun | None) -> datetime:
    """When the run finished (timezone-aware); the earliest time when it did not say."""
    end = run.finished_at if run is not None else None
    if end is None:
        return datetime.min.replace(tzinfo=UTC)
    return end if end.tzinfo is not None else end.replace(tzinfo=UTC)


def _written(path: str) -> datetime | None:
    """When the run at ``path`` ended, as its log says; else when the file was last written.

    A log's own time survives a copy or a download, which gives the file a new one. None when
    neither can be read.
    """
    said = _logged_end(path)
    if said is not None:
        return said
    try:
        return datetime.fromtimestamp(Path(path).stat().st_mtime, UTC)
    except OSError:
        return None


def _logged_end(path: str) -> datetime | None:
    """The end an lm-eval results file (``date``) or an Inspect log's header records, if any."""
    from evalsentry.harnesses.limits import check_log_size

    try:
        check_log_size(path)  # a header is read only from a log of a sane size
        if path.endswith(".json") and Path(path).name.startswith("results_"):
            stamp = json.loads(Path(path).read_text(encoding="utf-8")).get("date")
            return datetime.fromtimestamp(float(stamp), UTC)
        from inspect_ai.log import read_eval_log

        stats = read_eval_log(path, header_only=True).stats
        end = datetime.fromisoformat(stats.completed_at or stats.started_at)
        return end if end.tzinfo is not None else end.replace(tzinfo=UTC)
    except Exception:  # noqa: BLE001 - unreadable as a log: the file's own time is all there is
        return None


def _when(value: object) -> datetime | None:
    """A history timestamp (pandas or datetime) as a datetime, None when missing."""
    to = getattr(value, "to_pydatetime", None)
    result = to() if callable(to) else value
    if not isinstance(result, datetime):
        return None
    return result if result.tzinfo is not None else result.replace(tzinfo=UTC)
