"""Reading a run of Inspect (UK AISI's ``inspect_ai``) from its log, through Inspect's reader.

``inspect_ai.log.read_eval_log`` (header) and ``read_eval_log_samples`` (samples, streamed) read
any log Inspect wrote (``.eval`` or ``.json``, on any fsspec path). Examples are keyed by the
sample's ``id``; each epoch is a repeat, averaged per example. Scores become numbers by
Inspect's own ``value_to_float`` (``C`` 1, ``I`` 0, ``P`` 0.5, ...); a scorer whose value is a
dictionary gives one score per key (``scorer.key``). Inspect is imported only here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any, NoReturn

from evalsentry.harnesses.limits import check_log_size
from evalsentry.harnesses.run import HarnessLogInvalid, HarnessRun, content_hash

HARNESS = "inspect"
#: The log format versions this reader knows (``version`` of an Inspect log).
SUPPORTED_VERSIONS = (2,)
_VERSION = re.compile(r"\bversion (\d+)\b", re.IGNORECASE)
_FIX = "re-run the task with inspect_ai and import its log"


def read_inspect(path: str, *, cluster: str | None = None) -> HarnessRun:
    """The run in the Inspect log at ``path`` (a local path or an fsspec URL).

    Args:
        path: The log file.
        cluster: A key of each sample's ``metadata`` whose equal values form one cluster.

    Raises:
        HarnessLogInvalid: the log cannot be imported (says what, and the fix).
    """
    check_log_size(path)
    header = _header(path)
    ids, prompts, targets, clusters, scores = _samples(path, cluster)
    if not ids:
        raise HarnessLogInvalid(
            path, "samples", "the log holds no sample", "run it with log_samples on"
        )
    evaluation = header.eval
    revision = evaluation.revision
    usage = _usage(path, header.stats.model_usage if header.stats else {})
    started, finished = _when(header.stats.started_at), _when(header.stats.completed_at)
    task_version = evaluation.task_version
    return HarnessRun(
        harness=HARNESS,
        harness_version=str(evaluation.packages.get("inspect_ai", "")),
        task=str(evaluation.task).split("/")[-1],
        scoring=_scoring(header),
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
        cluster_key=cluster,
        git_sha=revision.commit if revision is not None and revision.commit else None,
        started_at=started,
        finished_at=finished,
        wall_s=(finished - started).total_seconds() if started and finished else None,
        input_tokens=sum(u.input_tokens for u in usage.values()) if usage else None,
        output_tokens=sum(u.output_tokens for u in usage.values()) if usage else None,
        money=_money(usage),
    )  # fmt: skip


def _scoring(header: Any) -> dict[str, Any]:
    """What gives the run's scores their meaning besides each sample's input and target.

    The task (version, arguments, solver), the plan (each solver step with its parameters:
    a system message added to the task's own chain is one), the generate config
    (temperature, max tokens, ...), epochs and their reducer, the scorers and their reducers,
    and the sandbox.
    """
    evaluation = header.eval
    plan = header.plan
    scores = header.results.scores if header.results else []
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


def _header(path: str) -> Any:
    """The log's header (Inspect's ``EvalLog`` without samples), once its format is known."""
    from inspect_ai.log import read_eval_log

    try:
        header = read_eval_log(path, header_only=True)
    except FileNotFoundError:
        raise HarnessLogInvalid(
            path, "", "no such log", "give the path of an Inspect log"
        ) from None
    except Exception as exc:  # noqa: BLE001 - Inspect's reader raises many kinds; one line says why
        version = _VERSION.search(" ".join(map(str, _chain(exc))))
        if version:  # Inspect's reader refuses formats it does not know, before we could
            _unsupported(path, int(version[1]))
        raise HarnessLogInvalid(
            path, "", f"not an Inspect log Inspect can read ({_first(exc)})", _FIX
        ) from None
    if header.version not in SUPPORTED_VERSIONS:
        _unsupported(path, header.version)
    if header.status != "success":
        raise HarnessLogInvalid(
            path, "status", f"the run ended {header.status!r}, not 'success'", _FIX
        )
    return header


def _samples(
    path: str, cluster: str | None
) -> tuple[list[str], list[str], list[str], list[str], dict[str, list[float]]]:
    """Each sample's id, prompt and target hashes, cluster, and scores, epoch by epoch."""
    from inspect_ai.log import read_eval_log_samples

    ids: list[str] = []
    prompts: list[str] = []
    targets: list[str] = []
    clusters: list[str] = []
    scores: dict[str, list[float]] = {}
    try:
        samples = list(read_eval_log_samples(path, all_samples_required=True))
    except Exception as exc:  # noqa: BLE001 - as above
        raise HarnessLogInvalid(path, "samples", f"unreadable ({_first(exc)})", _FIX) from None
    for sample in samples:
        where = f"samples[{sample.id} epoch {sample.epoch}]"
        values = _values(path, where, sample.scores)
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


def _first(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__
