"""Reading a run of Inspect (UK AISI's ``inspect_ai``) from its log, through Inspect's reader.

``inspect_ai.log.read_eval_log`` reads any log Inspect wrote (``.eval`` or ``.json``, on any
fsspec path), samples without their transcripts, once :mod:`.limits` has checked its size.
Examples are keyed by the sample's ``id``; each epoch is a repeat carrying the sample's score
reduced as Inspect reduced it (the log's ``reductions``). Scores become numbers by Inspect's own
``value_to_float`` (``C`` 1, ``I`` 0, ``P`` 0.5, ...); a scorer whose value is a dictionary
gives one score per key (``scorer.key``). Inspect is imported only here.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping
from datetime import datetime
from typing import Any, NoReturn

from evalsentry.harnesses.example_text import TEXT_COLUMNS, inspect_texts
from evalsentry.harnesses.limits import check_log_size
from evalsentry.harnesses.run import (
    HarnessLogInvalid,
    HarnessRun,
    content_hash,
    unforeseen_as_one_line,
)

HARNESS = "inspect"
#: The log format versions this reader knows (``version`` of an Inspect log).
SUPPORTED_VERSIONS = (2,)
_VERSION = re.compile(r"\bversion (\d+)\b", re.IGNORECASE)
_FIX = "re-run the task with inspect_ai and import its log"
#: A sample's fields evalsentry does not read (its transcript): not loaded.
_NOT_READ = {"messages", "events", "attachments", "store"}


def read_inspect(path: str, *, cluster: str | None = None) -> HarnessRun:
    """The run in the Inspect log at ``path`` (a local path or an fsspec URL).

    Args:
        path: The log file.
        cluster: A key of each sample's ``metadata`` whose equal values form one cluster.

    Raises:
        HarnessLogInvalid: the log cannot be imported (says what, and the fix).
    """
    with unforeseen_as_one_line(path, _FIX):
        return _read(path, cluster)


def _read(path: str, cluster: str | None) -> HarnessRun:
    """:func:`read_inspect` (see there)."""
    check_log_size(path)
    log = _log(path)
    ids, prompts, targets, clusters, scores = _samples(path, log, cluster)
    texts = [inspect_texts(sample) for sample in log.samples or []]
    if not ids:
        raise HarnessLogInvalid(
            path, "samples", "the log holds no sample", "run it with log_samples on"
        )
    evaluation = log.eval
    revision = evaluation.revision
    usage = _usage(path, log.stats.model_usage if log.stats else {})
    started, finished = _when(log.stats.started_at), _when(log.stats.completed_at)
    task_version = evaluation.task_version
    return HarnessRun(
        harness=HARNESS,
        harness_version=str(evaluation.packages.get("inspect_ai", "")),
        task=str(evaluation.task).split("/")[-1],
        scoring=_scoring(log),
        task_version=task_version if isinstance(task_version, int) else None,
        source=path,
        example_ids=ids,
        prompt_hashes=prompts,
        target_hashes=targets,
        scores=scores,
        model=str(evaluation.model),
        model_identity={"model_args": _plain(evaluation.model_args), "model_base_url": evaluation.model_base_url},
        lineage={
            "revision": _plain(revision) if revision is not None else None,
            "packages": dict(evaluation.packages),
            "task_id": evaluation.task_id,
            "run_id": evaluation.run_id,
            "epochs": evaluation.config.epochs,
            "dataset": evaluation.dataset.name,
        },
        clusters=clusters if cluster is not None else None,
        texts={name: [t[name] for t in texts] for name in TEXT_COLUMNS if texts and name in texts[0]},
        cluster_key=cluster,
        git_sha=revision.commit if revision is not None and revision.commit else None,
        started_at=started,
        finished_at=finished,
        wall_s=(finished - started).total_seconds() if started and finished else None,
        input_tokens=sum(u.input_tokens for u in usage.values()) if usage else None,
        output_tokens=sum(u.output_tokens for u in usage.values()) if usage else None,
        money=_money(usage),
    )  # fmt: skip


def _scoring(log: Any) -> dict[str, Any]:
    """What gives the run's scores their meaning besides each sample's input and target.

    The task (version, arguments, solver), the plan (each solver step with its parameters:
    a system message added to the task's own chain is one), the generate config
    (temperature, max tokens, ...), epochs and their reducer, the scorers and their reducers,
    and the sandbox.
    """
    evaluation = log.eval
    plan = log.plan
    scores = log.results.scores if log.results else []
    return {
        "task": evaluation.task,
        "task_version": evaluation.task_version,
        "task_args": _plain(evaluation.task_args),
        "solver": evaluation.solver,
        "solver_args": _plain(evaluation.solver_args),
        "plan": [[step.solver, _plain(step.params)] for step in plan.steps] if plan else [],
        "generate_config": _plain(plan.config) if plan else {},
        "epochs": evaluation.config.epochs,
        "epochs_reducer": evaluation.config.epochs_reducer,
        "scorers": [[score.name, score.scorer, score.reducer] for score in scores],
        "sandbox": _plain(evaluation.sandbox),
    }


def _log(path: str) -> Any:
    """The log (Inspect's ``EvalLog``; samples without their transcripts), once it is whole.

    Raises:
        HarnessLogInvalid: a format this reader does not know, a run that did not succeed, a
            sample or epoch missing.
    """
    from inspect_ai.log import read_eval_log

    try:
        log = read_eval_log(path, exclude_fields=_NOT_READ)
    except FileNotFoundError:
        raise HarnessLogInvalid(
            path, "", "no such log", "give the path of an Inspect log"
        ) from None
    except Exception as exc:  # noqa: BLE001 - Inspect's reader raises many kinds; one line says why
        version = _VERSION.search(" ".join(map(str, _chain(exc))))
        if version:  # Inspect's reader refuses formats it does not know, before we could
            _unsupported(path, int(version[1]))
        field, why = _invalid_field(exc)
        raise HarnessLogInvalid(
            path, field, f"not an Inspect log Inspect can read ({why})", _FIX
        ) from None
    if log.version not in SUPPORTED_VERSIONS:
        _unsupported(path, log.version)
    if log.status != "success":
        raise HarnessLogInvalid(
            path, "status", f"the run ended {log.status!r}, not 'success'", _FIX
        )
    expected = {
        (str(sample_id), epoch)
        for sample_id in log.eval.dataset.sample_ids or []
        for epoch in range(1, (log.eval.config.epochs or 1) + 1)
    }
    logged = Counter((str(s.id), s.epoch) for s in log.samples or [])
    twice = sorted(key for key, count in logged.items() if count > 1)
    if twice:
        (sample_id, epoch), count = twice[0], logged[twice[0]]
        raise HarnessLogInvalid(path, f"samples[{sample_id} epoch {epoch}]", f"logged {count} times: one sample can have one score", _FIX)  # fmt: skip
    missing = expected - set(logged)
    if missing:
        sample_id, epoch = min(missing)
        raise HarnessLogInvalid(path, "samples", f"{len(missing)} missing (sample {sample_id} epoch {epoch} first)", _FIX)  # fmt: skip
    return log


def _samples(
    path: str, log: Any, cluster: str | None
) -> tuple[list[str], list[str], list[str], list[str], dict[str, list[float]]]:
    """Each sample's id, prompt and target hashes, cluster, and scores, epoch by epoch.

    A score is the sample's reduced score over its epochs as Inspect reduced it (``mean``,
    ``at_least_1``, ``max``, ...: the log's ``reductions``), on every epoch's row, so that the
    mean over an example's rows is the score Inspect's metrics are computed from.
    """
    reduced = _reductions(path, log)
    ids: list[str] = []
    prompts: list[str] = []
    targets: list[str] = []
    clusters: list[str] = []
    scores: dict[str, list[float]] = {}
    for sample in log.samples or []:
        where = f"samples[{sample.id} epoch {sample.epoch}]"
        values = _values(path, where, sample.scores)
        values.update(reduced.get(str(sample.id), {}))
        if ids and set(values) != set(scores):
            raise HarnessLogInvalid(path, f"{where}.scores", f"scores {sorted(values)}, other samples {sorted(scores)}", _FIX)  # fmt: skip
        for key, value in values.items():
            scores.setdefault(key, []).append(value)
        ids.append(str(sample.id))
        prompts.append(content_hash(_plain(sample.input)))
        targets.append(content_hash(_plain(sample.target)))
        if cluster is not None:
            metadata = sample.metadata or {}
            if cluster not in metadata:
                raise HarnessLogInvalid(path, f"{where}.metadata.{cluster}", "missing (the cluster key)", "name a key every sample's metadata has with --cluster")  # fmt: skip
            clusters.append(str(metadata[cluster]))
    return ids, prompts, targets, clusters, scores


def _reductions(path: str, log: Any) -> dict[str, dict[str, float]]:
    """Each sample's reduced scores, by sample id, as :func:`_values` names them.

    Raises:
        HarnessLogInvalid: a scorer reduced by anything but the mean has no reductions logged
            (its per-epoch values would be averaged: another number than Inspect's).
    """
    out: dict[str, dict[str, float]] = {}
    logged: dict[str, Any] = {}
    for reduction in log.reductions or []:
        if reduction.scorer in logged:  # several reducers: which one is the score is not said
            raise HarnessLogInvalid(path, f"reductions.{reduction.scorer}", f"reduced twice ({logged[reduction.scorer].reducer}, {reduction.reducer}): evalsentry gates one score per scorer", "run the task with one epochs reducer")  # fmt: skip
        logged[reduction.scorer] = reduction
    for score in log.results.scores if log.results else []:
        reducer = score.reducer or _epochs_reducer(log)
        if score.name not in logged and reducer not in (None, "mean"):
            raise HarnessLogInvalid(path, "reductions", f"scorer {score.name!r} is reduced by {reducer!r} and the log holds no reduced score", _FIX)  # fmt: skip
    # Every sample the log holds (not the dataset's sample_ids, an optional field of Inspect's).
    samples = {str(sample.id) for sample in log.samples or []}
    for name, reduction in logged.items():
        for item in reduction.samples:
            where = f"reductions.{name}[{item.sample_id}]"
            found = _values(path, where, {name: item})
            out.setdefault(str(item.sample_id), {}).update(found)
        missing = sorted(samples - {str(item.sample_id) for item in reduction.samples})
        if missing:  # those would be averaged over epochs, the others reduced: refused
            raise HarnessLogInvalid(path, f"reductions.{name}", f"no reduced score for {len(missing)} sample(s) ({', '.join(missing[:3])})", _FIX)  # fmt: skip
    return out


def _epochs_reducer(log: Any) -> str | None:
    reducers = log.eval.config.epochs_reducer or []
    return reducers[0] if len(reducers) == 1 else ("/".join(reducers) or None)


def _unsupported(path: str, version: int) -> NoReturn:
    raise HarnessLogInvalid(
        path, "version", f"log format version {version}, this evalsentry reads {SUPPORTED_VERSIONS[0]}",
        "re-run it with an inspect_ai that writes format 2 (0.3.x)",
    )  # fmt: skip


def _values(path: str, where: str, scores: Mapping[str, Any] | None) -> dict[str, float]:
    """A sample's scores as numbers, by Inspect's ``value_to_float``."""
    from inspect_ai.scorer import value_to_float

    if not scores:
        raise HarnessLogInvalid(
            path, f"{where}.scores", "the sample has no score (did it fail?)", _FIX
        )
    to_float = value_to_float()
    out: dict[str, float] = {}
    for name, score in scores.items():
        value = score.value
        items = value.items() if isinstance(value, dict) else [(None, value)]
        for key, item in items:
            number = float(to_float(item))
            if not math.isfinite(number):
                raise HarnessLogInvalid(path, f"{where}.scores.{name}", f"value {item!r} is not a finite number", _FIX)  # fmt: skip
            out[name if key is None else f"{name}.{key}"] = number
    return out


def _usage(path: str, usage: Mapping[str, Any]) -> Mapping[str, Any]:
    """The run's model usage, once no count or cost in it is negative or not finite.

    Raises:
        HarnessLogInvalid: naming the model and field (a bill must never go down).
    """
    for model, used in usage.items():
        for name in ("input_tokens", "output_tokens", "total_cost"):
            value = getattr(used, name, None)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise HarnessLogInvalid(
                    path, f"stats.model_usage.{model}.{name}", f"{value!r} is not a count or cost", _FIX
                )  # fmt: skip
    return usage


def _money(usage: Mapping[str, Any]) -> float | None:
    costs = [u.total_cost for u in usage.values() if u.total_cost is not None]
    return float(sum(costs)) if costs else None


def _plain(value: Any) -> Any:
    """A pydantic value (messages, a revision) as plain JSON-able data."""
    if isinstance(value, list):
        return [_plain(v) for v in value]
    dump = getattr(value, "model_dump", None)
    if not callable(dump):
        return value
    data = dump(mode="json", exclude_none=True)
    if isinstance(data, dict) and "role" in data:
        data.pop("id", None)  # a message's id is drawn afresh each run: not its content
    return data


def _when(stamp: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(stamp) if stamp else None
    except ValueError:
        return None


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and those it was raised from (Inspect wraps the reason)."""
    found = [exc]
    while (cause := found[-1].__cause__ or found[-1].__context__) and len(found) < 10:
        found.append(cause)
    return found


def _invalid_field(exc: BaseException) -> tuple[str, str]:
    """The field Inspect's validation refused first (``samples.3.epoch``) and why, if it did."""
    from pydantic import ValidationError

    for cause in _chain(exc):
        if isinstance(cause, ValidationError) and cause.errors():
            first = cause.errors()[0]
            field = ".".join(str(part) for part in first["loc"])[:200]
            more = cause.error_count() - 1
            return field, f"{first['msg'][:200]}" + (f"; {more} more" if more else "")
    return "", _first(exc)


def _first(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__
