"""Several tasks of one lm-eval run, and task groups (MMLU is one), as evalsentry imports them.

``lm_eval --tasks arc_easy,hellaswag`` writes one results file for both tasks: each task named
is its own run here (its own evalset). A group (``group_subtasks`` of the results file) is one
run of all its leaf subtasks' documents, keyed ``<subtask>/<example id>``, with the subtask as
the slice ``task``: the group is gated as one evalset, its subtasks as slices in one family
(shown, or gating with ``gate.slices: gate``). Where lm-eval reports a group score, the gated
score must equal it: a group lm-eval averages otherwise than over all its documents
(``weight_by_size: false``) is refused, naming its subtasks to import one by one. Where it
reports none, the mean over the documents is gated, and the import says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evalsentry.harnesses.lm_eval_logs import read_lm_eval, read_results, results_file
from evalsentry.harnesses.run import HarnessLogInvalid, HarnessRun, unforeseen_as_one_line

#: The slice a group's examples carry: which of its subtasks each came from.
SUBTASK_SLICE = "task"
_FIX = "import its subtasks one by one (--task NAME, once per subtask)"
_FIX_RERUN = "re-run `lm_eval ... --log_samples --output_path DIR` and import that folder"


def read_lm_eval_tasks(
    folder: str | Path,
    tasks: Sequence[str],
    *,
    filter_name: str | None = None,
    cluster: str | None = None,
) -> list[HarnessRun]:
    """One run per task in ``tasks`` (or the run's one task when none is named).

    Raises:
        HarnessLogInvalid: as :func:`~.lm_eval_logs.read_lm_eval`, for any task named.
    """
    if not tasks:
        return [read_lm_eval(folder, filter_name=filter_name, cluster=cluster)]
    path = results_file(Path(folder))
    with unforeseen_as_one_line(path, _FIX_RERUN):
        return _read_tasks(path, tasks, filter_name, cluster)


def _read_tasks(
    path: Path, tasks: Sequence[str], filter_name: str | None, cluster: str | None
) -> list[HarnessRun]:
    """:func:`read_lm_eval_tasks` of one results file (see there)."""
    results = read_results(path)
    groups = results.get("group_subtasks")
    groups = groups if isinstance(groups, Mapping) else {}
    configs = results.get("configs") if isinstance(results.get("configs"), Mapping) else {}
    runs = []
    for task in dict.fromkeys(tasks):  # each once, in the order given
        if task in groups and task not in (configs or {}):
            leaves = _leaves(path, groups, task)
            parts = [read_lm_eval(path, task=leaf, filter_name=filter_name, cluster=cluster) for leaf in leaves]  # fmt: skip
            runs.append(_group(path, results, task, parts))
        else:
            runs.append(read_lm_eval(path, task=task, filter_name=filter_name, cluster=cluster))
    return runs


def _leaves(path: Path, groups: Mapping[str, Any], group: str, seen: tuple[str, ...] = ()) -> list[str]:  # fmt: skip
    """The group's leaf tasks, depth first, each once."""
    if group in seen or len(seen) > 20:
        raise HarnessLogInvalid(path, f"group_subtasks.{group}", "the groups nest in a loop", _FIX)
    children = groups.get(group)
    if not isinstance(children, list) or not children:
        raise HarnessLogInvalid(path, f"group_subtasks.{group}", "lists no subtask", _FIX)
    leaves: list[str] = []
    for child in map(str, children):
        found = _leaves(path, groups, child, (*seen, group)) if child in groups else [child]
        leaves += [leaf for leaf in found if leaf not in leaves]
    return leaves


def _group(
    path: Path, results: Mapping[str, Any], group: str, parts: Sequence[HarnessRun]
) -> HarnessRun:
    """The subtasks' runs as one run of ``group`` (see the module)."""
    keys = {tuple(run.scores) for run in parts}
    if len(keys) != 1:
        shown = "; ".join(f"{run.task}: {', '.join(run.scores)}" for run in parts)
        raise HarnessLogInvalid(path, f"group_subtasks.{group}", f"its subtasks score different metrics ({shown})", _FIX)  # fmt: skip
    first = parts[0]
    run = HarnessRun(
        harness=first.harness,
        harness_version=first.harness_version,
        task=group,
        scoring={"group": group, "tasks": {r.task: dict(r.scoring) for r in parts}},
        task_version=None,
        source=str(path),
        example_ids=[f"{r.task}/{i}" for r in parts for i in r.example_ids],
        prompt_hashes=[h for r in parts for h in r.prompt_hashes],
        target_hashes=[h for r in parts for h in r.target_hashes],
        scores={key: [v for r in parts for v in r.scores[key]] for key in first.scores},
        model=first.model,
        model_identity=first.model_identity,
        lineage={**first.lineage, "group": group, "tasks": [r.task for r in parts]},
        clusters=_clusters(parts),
        cluster_key=first.cluster_key,
        git_sha=first.git_sha,
        seed=first.seed,
        finished_at=first.finished_at,
        wall_s=first.wall_s,
        texts={k: [t for r in parts for t in r.texts.get(k, [])] for k in first.texts},
        slices={SUBTASK_SLICE: [r.task for r in parts for _ in r.example_ids]},
    )
    _check_reported(path, results, run)
    return run


def _clusters(parts: Sequence[HarnessRun]) -> list[str] | None:
    """Each row's cluster, its subtask's name first (a passage of one task is not another's)."""
    if parts[0].clusters is None:
        return None
    return [f"{r.task}/{c}" for r in parts for c in r.clusters or []]


def _check_reported(path: Path, results: Mapping[str, Any], run: HarnessRun) -> None:
    """Refuse a group whose score lm-eval computes otherwise than evalsentry would gate it."""
    reported = (results.get("results") or {}).get(run.task)
    if not isinstance(reported, Mapping):
        return
    filters = {str(r.get("filter")) for r in run.scoring["tasks"].values()}
    chosen = filters.pop() if len(filters) == 1 else "none"
    for key, values in run.scores.items():
        number = reported.get(f"{key},{chosen}")
        if not isinstance(number, int | float) or not math.isfinite(number):
            # lm-eval reported no group score (a group without aggregate_metric_list): ours
            # is the mean over the documents, and the import says so.
            run.notes.append(f"lm-eval reports no {key} for the group {run.task}: the mean over its documents is gated")  # fmt: skip
            continue
        ours = float(np.mean(values))
        if abs(ours - number) > 1e-9:
            raise HarnessLogInvalid(
                path, f"results.{run.task}.{key}",
                f"lm-eval reports {number:.4f}, the mean over the group's documents is "
                f"{ours:.4f}: the group averages its subtasks otherwise (weight_by_size: false?)",
                _FIX,
            )  # fmt: skip
