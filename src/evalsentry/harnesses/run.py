"""A harness's run as evalsentry records it: per-example scores paired by content, and lineage.

A :class:`HarnessRun` is what a harness log says, row by row (one row per sample and repeat).
:func:`harness_outcome` turns it into a week's evaluation of a model line: repeats averaged per
example, the examples keyed by their content (``example_id``), the evalset pinned by a hash of
the example ids and content hashes, a ``score:<key>`` metric per score, lineage, cost. Its
predictions hold, per example: ``example_id``, one ``score:<key>`` column per score (the mean
over repeats), ``prediction`` (1 where the first score is at least one half: what a flip is)
and ``target`` (1), ``prompt_hash``, ``target_hash``, ``task_hash``, ``harness``, ``repeats``,
the texts a person reads (``doc_id``, ``question``, ``expected``, ``response``: the first
row's, :mod:`.example_text`) and, when examples come in groups, ``cluster`` and ``cluster_key`` (the field they were grouped
by): the gate's tests and the metrics' intervals are then clustered (:mod:`evalsentry.gate.clusters`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from evalsentry import __version__
from evalsentry.errors import ConfigError, UsageError
from evalsentry.gate.slices import slice_column
from evalsentry.harnesses.example_text import visible
from evalsentry.names import SCORE_PREFIX, WEEKLY_RUN, check_name
from evalsentry.weeks import now_utc

if TYPE_CHECKING:
    from evalsentry.config import Config
    from evalsentry.evaluation.pipeline import Outcome
    from evalsentry.history.store import History

log = logging.getLogger(__name__)

#: The stage an imported result is recorded in: a harness run is the line's result of its week.
IMPORTED_STAGE = "production"
#: The currency harnesses record money in (Inspect's ``total_cost``).
HARNESS_CURRENCY = "USD"
#: A score's name, as a harness log gives it: plain text that no report, Markdown comment or
#: terminal can take for a link, an image, a mention or a control sequence.
SCORE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.,:/+-]{0,99}")
#: An example counts as right (for flips) when its first score is at least this.
RIGHT_AT = 0.5


class HarnessLogInvalid(ConfigError):
    """A harness log evalsentry cannot import: names the file, the field and the fix."""

    def __init__(self, path: object, field: str, problem: str, fix: str) -> None:
        # The field and problem quote the log (a key, a value): one line, whatever they hold.
        said = visible(f"{problem}; {fix}; nothing was recorded")
        super().__init__(path, visible(field), said)


@contextmanager
def unforeseen_as_one_line(path: object, fix: str) -> Iterator[None]:
    """Inside, a log of a shape no check foresaw is one line naming it, never a traceback.

    Raises:
        HarnessLogInvalid: for the reading errors such a shape raises (its type and words).
    """
    try:
        yield
    except HarnessLogInvalid:
        raise
    except (ValueError, TypeError, AttributeError, KeyError, OverflowError, RecursionError) as exc:
        why = f"unreadable ({type(exc).__name__}: {str(exc)[:200]})"
        raise HarnessLogInvalid(path, "", why, fix) from None


@dataclass(frozen=True)
class HarnessRun:
    """One harness run on one task, as read from its log (one row per sample and repeat)."""

    harness: str  # "lm-eval" or "inspect"
    harness_version: str
    task: str
    #: What gives a score its meaning besides the examples (lm-eval's filter, metrics, shots,
    #: templates, generation kwargs; Inspect's plan, generate config, epochs, scorers): a
    #: difference makes two runs incomparable. Order-free: no harness's ordered task hash.
    scoring: Mapping[str, Any]
    task_version: int | None
    source: str
    example_ids: Sequence[str]
    prompt_hashes: Sequence[str]
    target_hashes: Sequence[str]
    scores: Mapping[str, Sequence[float]]  # score key -> one value per row
    model: str  # the harness's name of the model
    model_identity: Mapping[str, Any]  # what says which model version it was
    lineage: Mapping[str, Any]  # everything else the run recorded about itself
    clusters: Sequence[str] | None = None
    cluster_key: str | None = None  # the field ``clusters`` came from (``passage``)
    git_sha: str | None = None
    seed: int | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    wall_s: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    money: float | None = None  # in HARNESS_CURRENCY, when the harness recorded it
    notes: list[str] = field(default_factory=list)
    #: What a person reads of each row (:mod:`.example_text`): text column -> one per row.
    texts: Mapping[str, Sequence[str]] = field(default_factory=dict)
    #: Slices of the examples (a task group's subtask): slice name -> one value per row.
    slices: Mapping[str, Sequence[str]] = field(default_factory=dict)


def task_hash(run: HarnessRun) -> str:
    """The hash of the run's ``scoring``: one value standing for all of it in the identity."""
    return content_hash(dict(run.scoring))


def content_hash(value: Any) -> str:
    """The sha256 of a JSON-able value (an Inspect sample's input or target)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def per_example(run: HarnessRun) -> dict[str, np.ndarray]:
    """The run's rows averaged per example (repeats, epochs), in example-id order.

    Raises:
        HarnessLogInvalid: one example's repeats were shown different content.
    """
    for key in run.scores:
        if not SCORE_NAME.fullmatch(key):
            raise HarnessLogInvalid(
                run.source,
                f"scores.{key!r}",
                "not a metric name evalsentry shows as it is (letters, digits and _ . , : / + -, "
                "at most 100): a name lands in reports, pull request comments and job summaries",
                "rename the scorer or metric",
            )
    ids = np.asarray(run.example_ids, dtype=object).astype(str)
    order = np.unique(ids)
    index = np.searchsorted(order, ids)
    counts = np.bincount(index, minlength=order.size)
    columns: dict[str, np.ndarray] = {"example_id": order}
    for key, values in run.scores.items():
        sums = np.bincount(index, weights=np.asarray(values, np.float64), minlength=order.size)
        columns[SCORE_PREFIX + key] = sums / counts
    for name, hashes in (("prompt_hash", run.prompt_hashes), ("target_hash", run.target_hashes)):
        columns[name] = _one_per_example(run, name, order, index, hashes)
    first_row = np.unique(index, return_index=True)[1]  # every example has a row
    for name, texts in run.texts.items():
        columns[name] = np.asarray(texts, dtype=object)[first_row]
    for name, labels in run.slices.items():
        columns[slice_column(name)] = _one_per_example(run, name, order, index, labels)
    if run.clusters is not None:
        columns["cluster"] = _one_per_example(run, "cluster", order, index, run.clusters)
        if run.cluster_key:
            columns["cluster_key"] = np.full(order.size, run.cluster_key, dtype=object)
    first = columns[SCORE_PREFIX + next(iter(run.scores))]
    columns["prediction"] = (first >= RIGHT_AT).astype(np.int64)
    columns["target"] = np.ones(order.size, np.int64)
    columns["repeats"] = counts.astype(np.int64)
    columns["task_hash"] = np.full(order.size, task_hash(run), dtype=object)
    scoring = json.dumps(dict(run.scoring), sort_keys=True, default=str)
    columns["scoring"] = np.full(order.size, scoring, dtype=object)
    columns["harness"] = np.full(order.size, run.harness, dtype=object)
    columns["task"] = np.full(order.size, run.task, dtype=object)
    return columns


def _one_per_example(
    run: HarnessRun, name: str, order: np.ndarray, index: np.ndarray, values: Sequence[str]
) -> np.ndarray:
    out = np.empty(order.size, dtype=object)
    for position, value in zip(index.tolist(), values, strict=True):
        if out[position] is not None and out[position] != value:
            raise HarnessLogInvalid(
                run.source,
                name,
                f"example {order[position]} has two values ({out[position]}, {value}) across "
                "its repeats",
                "import each run's own log",
            )
        out[position] = str(value)
    return out


def evalset_sha256(run: HarnessRun, columns: Mapping[str, np.ndarray]) -> str:
    """The imported evalset's identity: harness, task, task hash, each example's content hashes.

    Pinned like a frozen evalset's: a changed prompt, target or task is another evalset, which
    the gate refuses to pair (naming what changed, :mod:`evalsentry.gate.content`).
    """
    digest = hashlib.sha256()
    digest.update(json.dumps([run.harness, run.task, task_hash(run)]).encode())
    for row in zip(
        columns["example_id"], columns["prompt_hash"], columns["target_hash"], strict=True
    ):
        digest.update(("\t".join(map(str, row)) + "\n").encode())
    return digest.hexdigest()


def model_sha256(run: HarnessRun) -> str:
    """What stands for a checkpoint's sha256: a hash of the model's identity in the run."""
    return content_hash({"harness": run.harness, "model": run.model, **run.model_identity})


def default_evalset(run: HarnessRun) -> str:
    """``lm-eval.<task>`` or ``inspect.<task>``: the evalset name when none is given."""
    return check_name("evalset", f"{run.harness}.{run.task}"[:100])


def harness_outcome(
    run: HarnessRun,
    *,
    model: str,
    evalset: str,
    week: str,
    version: int,
    config: Config,
    run_id: str | None = None,
) -> Outcome:
    """The run as one week's evaluation of ``model`` on ``evalset``: rows for the history."""
    from evalsentry.evaluation.pipeline import Outcome

    columns = per_example(run)
    n = int(columns["example_id"].size)
    finished = run.finished_at or now_utc()
    wall = run.wall_s if run.wall_s is not None and math.isfinite(run.wall_s) else None
    row: dict[str, Any] = {
        "evaluation_id": uuid.uuid4().hex,
        "run_id": run_id or uuid.uuid4().hex,
        "week": week,
        "kind": WEEKLY_RUN,
        "started_at": run.started_at or finished,
        "finished_at": finished,
        "status": "ok",
        "model": check_name("model", model),
        "version": version,
        "stage": IMPORTED_STAGE,
        "checkpoint_sha256": model_sha256(run),
        "checkpoint_uri": f"{run.harness}:{run.model}",
        "git_sha": run.git_sha,
        "config_json": json.dumps(_lineage(run), sort_keys=True, default=str),
        "seed": run.seed,
        "evalset": check_name("evalset", evalset),
        "evalset_version": run.task_version,
        "evalset_sha256": evalset_sha256(run, columns),
        "n_examples": n,
        "device": run.harness,
        "evalsentry_version": __version__,
        "wall_s": wall,
        "inference_s": wall,
        "examples_per_s": n / wall if wall else None,
        "input_tokens": run.input_tokens,
        "output_tokens": run.output_tokens,
        **_money(run, config),
        "validation_json": json.dumps({"imported_from": run.source, "notes": run.notes}),
    }
    names = [SCORE_PREFIX + key for key in run.scores]
    return Outcome(row, _metric_rows(row, _unit_values(columns, names, config)), columns)


def _unit_values(
    columns: Mapping[str, np.ndarray], names: Sequence[str], config: Config
) -> dict[str, Mapping[str, Any]]:
    """Each score's mean and interval, overall and on each slice value (a group's subtask)."""
    from evalsentry.gate.slices import OVERALL, slice_columns, slice_masks

    values = {OVERALL: _metric_values(columns, names, config)}
    for unit, mask in slice_masks(slice_columns(columns)):
        values[unit] = _metric_values({k: v[mask] for k, v in columns.items()}, names, config)
    return values


def _metric_values(
    columns: Mapping[str, np.ndarray], names: Sequence[str], config: Config
) -> Mapping[str, Any]:
    """Each score's mean and interval: a cluster bootstrap when the examples come in groups."""
    from evalsentry.gate.clusters import CLUSTER_COLUMN, Clusters, cluster_intervals
    from evalsentry.gate.metrics import compute_metrics

    resamples = config.gate.bootstrap_resamples
    if CLUSTER_COLUMN not in columns:
        return compute_metrics(columns, names, num_classes=None, n_resamples=resamples)
    _, index = np.unique(np.asarray(columns[CLUSTER_COLUMN]).astype(str), return_inverse=True)
    clusters = Clusters(index.ravel().astype(np.intp), int(index.max(initial=-1)) + 1)
    return cluster_intervals(columns, names, clusters, n_resamples=resamples)


def _metric_rows(
    row: Mapping[str, Any], units: Mapping[str, Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The metric rows of the evaluation ``row``: one per score and unit (overall, slices)."""
    from evalsentry.gate.metrics import get_metric

    return [
        {
            "evaluation_id": row["evaluation_id"],
            "week": row["week"],
            "model": row["model"],
            "evalset": row["evalset"],
            "metric": name,
            "slice": unit,
            "value": value.value,
            "ci_low": value.ci_low,
            "ci_high": value.ci_high,
            "n": value.n,
            "higher_is_better": get_metric(name).higher_is_better,
        }
        for unit, values in units.items()
        for name, value in values.items()
    ]


def run_identity(run: HarnessRun) -> str:
    """What tells this harness run from any other, whatever folder it lies in: a content hash.

    Its harness, task, model, lineage (an Inspect run's ``run_id``; lm-eval's seeds and hashes),
    times and examples; not its scores or clusters, which the import options (a filter, a
    cluster field) change for the same run. Recorded as ``import_id`` in ``config_json``.
    """
    lineage = {k: v for k, v in run.lineage.items() if k != "filter"}
    scoring = {k: v for k, v in run.scoring.items() if k != "filter"}
    return content_hash(
        [
            run.harness, run.harness_version, run.task, scoring, run.model,
            dict(run.model_identity), lineage, run.started_at, run.finished_at,
            list(run.example_ids), list(run.prompt_hashes), list(run.target_hashes),
        ]
    )  # fmt: skip


def _lineage(run: HarnessRun) -> dict[str, Any]:
    return {
        "import_id": run_identity(run),
        "harness": run.harness,
        "harness_version": run.harness_version,
        "task": run.task,
        "task_hash": task_hash(run),
        "scoring": dict(run.scoring),
        "task_version": run.task_version,
        "model": run.model,
        **run.model_identity,
        **run.lineage,
    }


def _money(run: HarnessRun, config: Config) -> dict[str, Any]:
    """The cost columns: what the harness recorded, in the project's currency only."""
    currency = config.cost.currency
    if run.money is None or currency != HARNESS_CURRENCY:
        if run.money is not None:
            log.warning(
                "%s: cost %.4f %s not recorded: the project counts in %s",
                run.source,
                run.money,
                HARNESS_CURRENCY,
                currency,
            )
        return {"cost": None, "currency": currency, "energy_method": "not measured (imported)"}
    return {"cost": run.money, "currency": currency, "energy_method": "not measured (imported)"}


def next_version(history: History, model: str, identity: str) -> int:
    """The version an imported model gets: its earlier one if imported before, else the next."""
    rows = history.evaluations(model=model, kind=WEEKLY_RUN, include_superseded=True)
    same = rows[rows["checkpoint_sha256"] == identity]["version"].dropna()
    if not same.empty:
        return int(same.iloc[-1])
    known = rows["version"].dropna()
    return int(known.max()) + 1 if not known.empty else 1


def check_same_harness(history: History, model: str, evalset: str, run: HarnessRun) -> None:
    """Refuse a run of another harness, or harness version, than the line's last result on it.

    Raises:
        UsageError: the line's latest result on ``evalset`` came from another harness (version).
    """
    rows = history.evaluations(model=model, evalset=evalset, kind=WEEKLY_RUN)
    rows = rows[rows["status"] == "ok"]
    if rows.empty:
        return
    last = json.loads(rows.iloc[-1]["config_json"] or "{}")
    before = f"{last.get('harness')} {last.get('harness_version')}"
    now = f"{run.harness} {run.harness_version}"
    if before != now:
        raise UsageError(
            f"{run.source}: harness_version: {model} on {evalset} was last evaluated with "
            f"{before}, this log with {now}; results of different harness versions may differ "
            "for no change of the model: pass --allow-harness-change to record it anyway "
            "(nothing was recorded)"
        )


def record_import(
    history: History,
    run: HarnessRun,
    *,
    config: Config,
    model: str | None,
    evalset: str | None,
    week: str,
    allow_harness_change: bool = False,
) -> Outcome:
    """Record ``run`` as ``week``'s result of its model line; the outcome recorded."""
    from evalsentry.evaluation.pipeline import record

    line = check_name("model", model or line_name(run.model))
    evalset = evalset or default_evalset(run)
    if not allow_harness_change:
        check_same_harness(history, line, evalset, run)
    version = next_version(history, line, model_sha256(run))
    outcome = harness_outcome(
        run, model=line, evalset=evalset, week=week, version=version, config=config
    )
    record(history, [outcome])
    return outcome


def line_name(name: str) -> str:
    """A harness's model name (``mockllm/model``, ``hf``) as a model line name."""
    cleaned = "".join(c if c.isalnum() or c in "._-" else "-" for c in name).strip("-._")
    return cleaned[:100] or "model"
