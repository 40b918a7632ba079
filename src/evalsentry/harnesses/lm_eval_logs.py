"""Reading a run of lm-evaluation-harness from its folder (``lm_eval --log_samples``).

The folder holds ``results_<timestamp>.json`` (the run's configuration, versions, task hashes)
and one ``samples_<task>_<timestamp>.jsonl`` per task: a line per document, with its
``doc_hash``, ``prompt_hash`` and ``target_hash`` and the value of each of the task's metrics
under that metric's name. Examples are keyed by ``doc_hash``: ``doc_id`` is only the row's
position. A task that logs several filters (``filter``) needs one chosen. Only
lm-evaluation-harness 0.4 writes these files: another version is refused.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evalsentry.harnesses.example_text import TEXT_COLUMNS, lm_eval_texts
from evalsentry.harnesses.limits import check_log_size
from evalsentry.harnesses.run import HarnessLogInvalid, HarnessRun, unforeseen_as_one_line

log = logging.getLogger(__name__)

HARNESS = "lm-eval"
#: The versions whose logs this reader knows (``lm_eval_version`` of the results file).
SUPPORTED = re.compile(r"^0\.4\.\d+")
_FIX_RERUN = "re-run `lm_eval ... --log_samples --output_path DIR` and import that folder"
_HEX = re.compile(r"^[0-9a-f]{7,64}$")
_MODEL_KEYS = ("model_name", "model_source", "model_revision", "model_sha", "model_dtype")
#: Fields of a results file that lm-eval writes as JSON objects (a damaged file may not).
_OBJECTS = ("configs", "config", "higher_is_better", "n-shot", "versions", "task_hashes")


def read_lm_eval(
    folder: str | Path,
    *,
    task: str | None = None,
    filter_name: str | None = None,
    cluster: str | None = None,
) -> HarnessRun:
    """The run of one task in ``folder`` (searched recursively for one ``results_*.json``).

    Args:
        folder: What ``--output_path`` was given (or the model's folder inside it), or one
            run's ``results_*.json`` in it.
        task: The task, when the run holds several.
        filter_name: The filter (``filter`` of each sample), when the task logs several.
        cluster: A field of each document whose equal values form one cluster.

    Raises:
        HarnessLogInvalid: the folder, a file or a line cannot be imported (says which, and
            the fix); nothing is recorded.
    """
    results_path = results_file(Path(folder))
    with unforeseen_as_one_line(results_path, _FIX_RERUN):
        return _read(results_path, task, filter_name, cluster)


def _read(
    results_path: Path, task: str | None, filter_name: str | None, cluster: str | None
) -> HarnessRun:
    """:func:`read_lm_eval` of one results file (see there)."""
    results = read_results(results_path)
    for key in _OBJECTS:
        if results.get(key) is not None and not isinstance(results[key], dict):
            kind = type(results[key]).__name__
            raise HarnessLogInvalid(results_path, key, f"a {kind} where lm-eval writes an object", _FIX_RERUN)  # fmt: skip
    version = _version(results_path, results)
    task = _task(results_path, results, task)
    samples_path = _samples_file(results_path, task)
    rows = _rows(samples_path)
    rows = _filtered(samples_path, rows, filter_name)
    higher = results.get("higher_is_better", {}).get(task, {})
    keys = _score_keys(samples_path, rows, higher)
    config = results.get("config") or {}
    model_identity = {k: results[k] for k in _MODEL_KEYS if results.get(k) not in (None, "")}
    model_identity["model_args"] = config.get("model_args")
    git = str(results.get("git_hash") or "").strip()
    seconds = _float(results.get("total_evaluation_time_seconds"))
    finished = _when(results_path, _float(results.get("date")))
    return HarnessRun(
        harness=HARNESS,
        harness_version=version,
        task=task,
        scoring=_scoring(results, config, task, rows[0][1].get("filter")),
        task_version=_int(results.get("versions", {}).get(task)),
        source=str(samples_path),
        example_ids=_example_ids(samples_path, rows),
        prompt_hashes=[_field(samples_path, i, r, "prompt_hash") for i, r in rows],
        target_hashes=[_field(samples_path, i, r, "target_hash") for i, r in rows],
        scores={key: [float(r[key]) for _, r in rows] for key in keys},
        model=str(config.get("model") or results.get("model_name") or "model"),
        model_identity=model_identity,
        lineage=_lineage(results, config, task, rows[0][1]),
        clusters=[_cluster(samples_path, i, r, cluster) for i, r in rows] if cluster else None,
        texts=_texts([r for _, r in rows]),
        cluster_key=cluster or None,
        git_sha=git if _HEX.fullmatch(git) else None,
        seed=_int(config.get("random_seed")),
        started_at=None,
        finished_at=finished,
        wall_s=seconds,
    )  # fmt: skip


def _texts(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Each row's texts (:func:`~.example_text.lm_eval_texts`), column by column."""
    texts = [lm_eval_texts(row) for row in rows]
    return {name: [t[name] for t in texts] for name in TEXT_COLUMNS}


def _version(path: Path, results: Mapping[str, Any]) -> str:
    """The lm-eval version that wrote the run, once this reader knows its files."""
    version = str(results.get("lm_eval_version") or "")
    if not SUPPORTED.match(version):
        raise HarnessLogInvalid(
            path,
            "lm_eval_version",
            f"written by lm-evaluation-harness {version or '(no version recorded)'}, this "
            "evalsentry reads the logs of 0.4.x",
            "run the evaluation with lm-eval 0.4",
        )
    return version


def _scoring(
    results: Mapping[str, Any], config: Mapping[str, Any], task: str, filter_name: Any
) -> dict[str, Any]:
    """What gives the task's scores their meaning, besides each document's prompt and target.

    Not lm-eval's ``task_hashes``: it hashes the documents in order, so a reordered data file
    or a run gathered from several GPUs would read as another task.
    """
    task_config = (results.get("configs") or {}).get(task) or {}
    shots = (results.get("n-shot") or {}).get(task)
    fewshot = task_config.get("fewshot_config") or {}
    return {
        "filter": filter_name,
        "metrics": [
            [m.get("metric"), m.get("aggregation")]
            for m in task_config.get("metric_list") or []
            if isinstance(m, Mapping)
        ],
        "num_fewshot": shots,
        "fewshot_seed": config.get("fewshot_seed") if shots else None,
        "fewshot_sampler": fewshot.get("sampler") if shots else None,
        "system_instruction": results.get("system_instruction_sha"),
        "chat_template": results.get("chat_template_sha"),
        "fewshot_as_multiturn": results.get("fewshot_as_multiturn"),
        "generation_kwargs": [task_config.get("generation_kwargs"), config.get("gen_kwargs")],
        "output_type": task_config.get("output_type"),
        "repeats": task_config.get("repeats"),
    }


def _lineage(
    results: Mapping[str, Any], config: Mapping[str, Any], task: str, first: Mapping[str, Any]
) -> dict[str, Any]:
    """What the run says about itself besides the model: filter, seeds, hashes, versions."""
    seeds = ("random_seed", "numpy_seed", "torch_seed", "fewshot_seed")
    return {
        "filter": first.get("filter"),
        "seeds": {k: config.get(k) for k in seeds},
        "task_hashes": results.get("task_hashes"),
        "n_shot": (results.get("n-shot") or {}).get(task),
        "transformers_version": results.get("transformers_version"),
        "git_hash": str(results.get("git_hash") or "").strip() or None,
    }


def results_file(folder: Path) -> Path:
    """The one ``results_*.json`` of ``folder`` (or ``folder`` itself when it is one)."""
    if folder.is_file() and folder.name.startswith("results_") and folder.suffix == ".json":
        return folder  # one run of a folder lm-eval wrote several into
    if not folder.is_dir():
        raise HarnessLogInvalid(folder, "", "not a folder", f"give the folder {_FIX_RERUN[7:]}")
    found = sorted(folder.rglob("results_*.json"))
    if len(found) != 1:
        what = (
            "no results_*.json"
            if not found
            else f"{len(found)} runs ({', '.join(p.name for p in found)})"
        )
        raise HarnessLogInvalid(
            folder, "results_*.json", f"holds {what}", "give the folder of one run (lm_eval --output_path)"
        )  # fmt: skip
    return found[0]


def read_results(path: Path) -> dict[str, Any]:
    """A results file as a JSON object, once its size is checked; one line if unreadable."""
    check_log_size(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise HarnessLogInvalid(path, "", f"unreadable ({_why(exc)})", _FIX_RERUN) from None
    if not isinstance(data, dict):
        raise HarnessLogInvalid(path, "", "not a JSON object", _FIX_RERUN)
    return data


def _task(path: Path, results: Mapping[str, Any], task: str | None) -> str:
    tasks = sorted((results.get("configs") or {}).keys())
    if task is not None and task not in tasks:
        raise HarnessLogInvalid(
            path,
            "configs",
            f"no task {task!r} (it has {', '.join(tasks)})",
            "choose one of those with --task",
        )
    if task is None and len(tasks) != 1:
        raise HarnessLogInvalid(
            path, "configs", f"{len(tasks)} tasks ({', '.join(tasks)})", "choose one with --task"
        )
    return task or tasks[0]  # fmt: skip


def _samples_file(results_path: Path, task: str) -> Path:
    stamp = results_path.stem.removeprefix("results_")
    path = results_path.with_name(f"samples_{task}_{stamp}.jsonl")
    if not path.is_file():
        raise HarnessLogInvalid(
            results_path.parent, path.name, "missing: the run logged no samples of this task",
            "re-run lm_eval with --log_samples",
        )  # fmt: skip
    return path


def _rows(path: Path) -> list[tuple[int, dict[str, Any]]]:
    check_log_size(path)
    rows = []
    with path.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line.decode("utf-8"))
            except json.JSONDecodeError as exc:
                raise HarnessLogInvalid(
                    path, f"line {number}", f"not valid JSON ({exc.msg}: truncated?)", _FIX_RERUN
                ) from None
            except (UnicodeDecodeError, RecursionError) as exc:
                raise HarnessLogInvalid(path, f"line {number}", _why(exc), _FIX_RERUN) from None
            if not isinstance(row, dict):
                raise HarnessLogInvalid(path, f"line {number}", "not a JSON object", _FIX_RERUN)
            rows.append((number, row))
    if not rows:
        raise HarnessLogInvalid(path, "", "holds no sample", _FIX_RERUN)
    return rows


def _filtered(
    path: Path, rows: list[tuple[int, dict[str, Any]]], filter_name: str | None
) -> list[tuple[int, dict[str, Any]]]:
    filters = sorted({str(r.get("filter")) for _, r in rows})
    if filter_name is None and len(filters) > 1:
        raise HarnessLogInvalid(
            path, "filter", f"{len(filters)} filters ({', '.join(filters)})", "choose one with --filter"
        )  # fmt: skip
    if filter_name is not None and filter_name not in filters:
        raise HarnessLogInvalid(
            path, "filter", f"no filter {filter_name!r} (it has {', '.join(filters)})", "choose one of those with --filter"
        )  # fmt: skip
    chosen = filter_name or filters[0]
    return [(i, r) for i, r in rows if str(r.get("filter")) == chosen]


def _example_ids(path: Path, rows: Sequence[tuple[int, dict[str, Any]]]) -> list[str]:
    """Each sample's example id: its ``doc_hash``, or ``<doc_hash>#<k>`` for a repeated document.

    A document the task holds several times (MMLU has such) is numbered by content (prompt,
    target), then doc id. A duplicate document is an example as lm-eval counts it (200 is 200), paired with the
    occurrence that was shown the same prompt. A ``doc_id`` logged twice is refused.

    Raises:
        HarnessLogInvalid: a sample without a ``doc_hash``, or a ``doc_id`` on two lines.
    """
    first_line: dict[Any, int] = {}
    for number, row in rows:
        doc_id = row.get("doc_id") if isinstance(row.get("doc_id"), int | str) else None
        if doc_id is not None and doc_id in first_line:
            raise HarnessLogInvalid(
                path, f"line {number}: doc_id",
                f"document {doc_id} is also on line {first_line[doc_id]}: one sample logged twice",
                _FIX_RERUN,
            )  # fmt: skip
        first_line.setdefault(doc_id, number)
    hashes = [_field(path, number, row, "doc_hash") for number, row in rows]
    counts = Counter(hashes)
    ids = list(hashes)
    seen: Counter[str] = Counter()

    def content(j: int) -> tuple[str, str, str, float]:
        row = rows[j][1]
        doc_id = _float(row.get("doc_id"))
        return hashes[j], str(row.get("prompt_hash")), str(row.get("target_hash")), doc_id or 0.0

    for j in sorted(range(len(rows)), key=content):
        if counts[hashes[j]] > 1:
            seen[hashes[j]] += 1
            ids[j] = f"{hashes[j]}#{seen[hashes[j]]}"
    return ids


#: Metrics whose per-sample value lies in [0, 1]: anything else is a damaged or forged log.
UNIT_METRICS = frozenset(
    ("acc", "acc_norm", "acc_mutual_info", "exact_match", "em", "f1", "mc1", "mc2", "pass@1")
)


def _score_keys(
    path: Path, rows: Sequence[tuple[int, dict[str, Any]]], higher: Mapping[str, Any]
) -> list[str]:
    """The metrics every sample scores with a number, higher being better."""
    number, first = rows[0]
    keys = []
    for key in first.get("metrics") or []:
        values = [r.get(key) for _, r in rows]
        if not all(_finite(v) for v in values):
            log.info("%s: %s is not a number per sample (a corpus metric): not imported", path, key)
            continue
        if higher.get(key) is False:
            log.warning("%s: %s is lower-is-better: not imported", path, key)
            continue
        if key in UNIT_METRICS:
            outside = [(n, r[key]) for n, r in rows if not 0 <= r[key] <= 1]
            if outside:
                line, value = outside[0]
                raise HarnessLogInvalid(
                    path, f"line {line}: {key}", f"{value!r} is outside [0, 1], where {key} lies",
                    _FIX_RERUN,
                )  # fmt: skip
        keys.append(str(key))
    if not keys:
        raise HarnessLogInvalid(
            path, f"line {number}: metrics", "no metric with a number per sample",
            "give a task whose metrics score each sample (acc, exact_match, ...)",
        )  # fmt: skip
    return keys


def _field(path: Path, number: int, row: Mapping[str, Any], name: str) -> str:
    value = row.get(name)
    if not isinstance(value, str) or not value:
        raise HarnessLogInvalid(
            path, f"line {number}: {name}", "missing",
            "lm-eval writes it from 0.4.3 on: re-run with lm-eval 0.4 and --log_samples",
        )  # fmt: skip
    return value


def _cluster(path: Path, number: int, row: Mapping[str, Any], name: str) -> str:
    doc = row.get("doc")
    doc = doc if isinstance(doc, dict) else {}
    if name not in doc:
        raise HarnessLogInvalid(path, f"line {number}: doc.{name}", "missing (the cluster key)", "name a field every document has with --cluster")  # fmt: skip
    return str(doc[name])


def _finite(value: Any) -> bool:
    """A number a score can be: an int or float that is finite as a float."""
    try:
        return isinstance(value, int | float) and math.isfinite(value)
    except OverflowError:  # an integer beyond any float
        return False


def _when(path: Path, stamp: float | None) -> datetime | None:
    """The run's end from its ``date`` (a Unix time); a date no calendar holds is refused."""
    if stamp is None:
        return None
    try:
        return datetime.fromtimestamp(stamp, UTC)
    except (OverflowError, OSError, ValueError):
        raise HarnessLogInvalid(path, "date", f"{stamp!r} is no time", _FIX_RERUN) from None


def _why(exc: BaseException) -> str:
    """A reading error in words: not UTF-8, nested too deeply, or the error's own words."""
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text (byte {exc.start})"
    if isinstance(exc, RecursionError):
        return "nested too deeply to be an lm-eval log"
    return str(exc)


def _float(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _int(value: Any) -> int | None:
    number = _float(value)
    return int(number) if number is not None and number == int(number) else None
