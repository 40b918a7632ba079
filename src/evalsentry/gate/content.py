"""Why two imported evaluations of one evalset cannot be paired: which content changed.

An evaluation imported from a harness (``evalsentry.harnesses``) stores, per example, the hashes
of what the model was shown and judged against (``prompt_hash``, ``target_hash``), and the
task's hash and the harness that ran it. When its evalset identity differs from the reference's,
these say what changed, so the ERROR names it: ``not comparable: the prompt changed``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

#: The per-example content columns, and the word each change is reported with, checked in order.
CONTENT_COLUMNS = (("prompt_hash", "prompt"), ("target_hash", "target"))
#: Columns holding one value for the whole run: the harness (checked first), the task's hash
#: (checked last: a new prompt template changes it too, and the prompt is the finer answer).
HARNESS_COLUMN, TASK_COLUMN = ("harness", "harness"), ("task_hash", "task")
#: The run's scoring settings as JSON (one value): a change is named by its setting.
SCORING = "scoring"
SHOWN_CHARS = 60  # of a changed setting's value, in the message
#: The column naming the harness's task, and how many changed examples a message names.
TASK_NAME, NAMED, QUESTION_CHARS = "task", 3, 40
#: A task group's subtask column (an imported lm-eval group: ``harnesses.lm_eval_groups``).
GROUP_TASK = "slice:task"


def content_change(
    reference: Mapping[str, NDArray[Any]], current: Mapping[str, NDArray[Any]]
) -> str | None:
    """``not comparable: the prompt changed (...)``, or None when no recorded content differs.

    Per-example hashes are compared on the examples both hold (paired by ``example_id``); a run
    column on its one value. Evaluations without these columns (a weekly run's) give None.
    """
    changed = _run_change(reference, current, *HARNESS_COLUMN) or _task_renamed(reference, current)
    if changed:
        return changed
    ids_ref, ids_cur = np.asarray(reference["example_id"]), np.asarray(current["example_id"])
    common, at_ref, at_cur = np.intersect1d(ids_ref, ids_cur, return_indices=True)
    for column, word in CONTENT_COLUMNS:
        if column in reference and column in current and common.size:
            differ = np.asarray(reference[column])[at_ref] != np.asarray(current[column])[at_cur]
            if differ.any():
                named = _named(current, at_cur[differ])
                return (
                    f"not comparable: {int(differ.sum())} of {common.size} {word}s changed "
                    f"({column} differs): {named}"
                )
    return (
        _scoring_change(reference, current)
        or _examples_change(reference, current, common.size)
        or _run_change(reference, current, *TASK_COLUMN)
    )


def _examples_change(
    reference: Mapping[str, NDArray[Any]], current: Mapping[str, NDArray[Any]], common: int
) -> str | None:
    """Which examples only one side holds, each kind counted and its first named.

    Edited documents (the same doc id, other content) first, then examples gone, then new.

    ``not comparable: 50 of the reference's 200 examples are not in this run (doc 150 '...',
    ...) (a --limit, or another split?); 150 in both``.
    """
    ids_ref, ids_cur = np.asarray(reference["example_id"]), np.asarray(current["example_id"])
    gone = np.flatnonzero(~np.isin(ids_ref, ids_cur))
    new = np.flatnonzero(~np.isin(ids_cur, ids_ref))
    if not gone.size and not new.size:
        return None
    parts = []
    edited_gone, edited_new = _edited(reference, current, gone, new)
    if edited_new.any():
        count = int(edited_new.sum())
        parts.append(f"{count} of {ids_ref.size} documents edited ({_named(current, new[edited_new])})")  # fmt: skip
        gone, new = gone[~edited_gone], new[~edited_new]
    if gone.size:
        parts.append(
            f"{gone.size} of the reference's {ids_ref.size} examples are not in this run "
            f"({_named(reference, gone)})"
        )
    if new.size:
        parts.append(f"{new.size} {'is' if new.size == 1 else 'are'} new ({_named(current, new)})")
    limited = " (a --limit, or another split?)" if gone.size and not new.size else ""
    return f"not comparable: {'; '.join(parts)}{limited}; {common} in both"


def _edited(
    reference: Mapping[str, NDArray[Any]],
    current: Mapping[str, NDArray[Any]],
    gone: NDArray[np.intp],
    new: NDArray[np.intp],
) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
    """Which gone and which new examples are one document edited.

    The same doc id (in a task group, of the same subtask) with other content; without doc
    ids, none.
    """
    if "doc_id" not in reference or "doc_id" not in current:
        return np.zeros(gone.size, bool), np.zeros(new.size, bool)

    def keys(columns: Mapping[str, NDArray[Any]], rows: NDArray[np.intp]) -> NDArray[Any]:
        docs = np.asarray(columns["doc_id"]).astype(str)[rows]
        task = np.asarray(columns[GROUP_TASK]).astype(str)[rows] if GROUP_TASK in columns else ""
        return np.char.add(np.char.add(np.asarray(task, dtype=str), "\t"), docs)

    ref_keys, cur_keys = keys(reference, gone), keys(current, new)
    documented_ref = np.asarray(reference["doc_id"]).astype(str)[gone] != ""
    documented_cur = np.asarray(current["doc_id"]).astype(str)[new] != ""
    return np.isin(ref_keys, cur_keys) & documented_ref, np.isin(
        cur_keys, ref_keys
    ) & documented_cur


def _task_renamed(
    reference: Mapping[str, NDArray[Any]], current: Mapping[str, NDArray[Any]]
) -> str | None:
    if TASK_NAME in reference and TASK_NAME in current:
        before, after = _single(reference[TASK_NAME]), _single(current[TASK_NAME])
        if before != after:
            return f"not comparable: the task changed: {_short(before)} -> {_short(after)}"
    return None


def example_label(columns: Mapping[str, NDArray[Any]], row: int) -> str:
    """How a person finds example ``row``: ``doc 17``, ``arith doc 17`` in a task group.

    Without a doc id, the start of the example's id.
    """
    doc = str(columns["doc_id"][row]) if "doc_id" in columns else ""
    name = f"doc {doc}" if doc else _short(str(columns["example_id"][row]), 16)
    return f"{columns[GROUP_TASK][row]} {name}" if GROUP_TASK in columns else name


def _named(columns: Mapping[str, NDArray[Any]], rows: NDArray[Any]) -> str:
    """The first :data:`NAMED` of ``rows`` as a person finds them: doc id or id, and question.

    ``doc 17 'What is 22 plus 11?', doc 4 '...' and 1 more``.
    """
    if "doc_id" in columns:  # in document order, as the harness numbered them
        docs = np.asarray(columns["doc_id"]).astype(str)[rows]
        rows = rows[np.lexsort((docs, np.char.str_len(docs.astype("U"))))]
    shown = []
    for row in rows[:NAMED].tolist():
        name = example_label(columns, row)
        question = str(columns["question"][row]) if "question" in columns else ""
        shown.append(f"{name} {_short(question, QUESTION_CHARS)!r}" if question else name)
    more = len(rows) - NAMED
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def _scoring_change(
    reference: Mapping[str, NDArray[Any]], current: Mapping[str, NDArray[Any]]
) -> str | None:
    """The first setting of the runs' ``scoring`` that differs, named; None when none does.

    ``not comparable: the filter changed: flexible-extract -> strict-match``. A reference
    recorded before ``scoring`` existed cannot be shown to match: it is refused, saying so.
    """
    if SCORING not in current:
        return None
    if SCORING not in reference:
        return (
            "not comparable: the reference was imported by an earlier evalsentry, which did not "
            "record how its run scored; import its run again (evalsentry import ... --week W)"
        )
    before, after = _settings(reference[SCORING]), _settings(current[SCORING])
    if before is None or after is None:  # two runs' settings in one file: no pairing
        return "not comparable: the scoring settings are unreadable (two runs in one file?)"
    for key in sorted(set(before) | set(after)):
        if before.get(key) != after.get(key):
            word = key.replace("_", " ")
            return f"not comparable: the {word} changed: {_short(before.get(key))} -> {_short(after.get(key))}"
    return None


def _settings(values: NDArray[Any]) -> dict[str, Any] | None:
    """The run's one scoring setting as a dict; None when the column holds anything else."""
    try:
        found = json.loads(_single(values))
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def _short(value: Any, chars: int = SHOWN_CHARS) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= chars else text[: chars - 1] + "…"


def _run_change(
    reference: Mapping[str, NDArray[Any]],
    current: Mapping[str, NDArray[Any]],
    column: str,
    word: str,
) -> str | None:
    if column in reference and column in current:
        before, after = _single(reference[column]), _single(current[column])
        if before != after:
            return f"not comparable: the {word} changed ({before[:12]} -> {after[:12]})"
    return None


def _single(values: NDArray[Any]) -> str:
    distinct = sorted({str(v) for v in np.asarray(values).tolist()})
    return distinct[0] if len(distinct) == 1 else "/".join(distinct)


def unchanged_ids(
    reference: Mapping[str, NDArray[Any]], current: Mapping[str, NDArray[Any]]
) -> tuple[NDArray[Any], str] | None:
    """The example ids both runs hold with the same content, and what was left out in words.

    None when the runs differ as a whole (harness, task, scoring: no subset mends that) or
    hold no per-example content hashes (not imported runs). ``what`` reads ``10 left out: 3
    changed, 7 not in this run``.
    """
    whole = (
        _run_change(reference, current, *HARNESS_COLUMN)
        or _task_renamed(reference, current)
        or _scoring_change(reference, current)
        or _run_change(reference, current, *TASK_COLUMN)
    )
    columns = [c for c, _ in CONTENT_COLUMNS if c in reference and c in current]
    if whole or not columns:
        return None
    ids_ref, ids_cur = np.asarray(reference["example_id"]), np.asarray(current["example_id"])
    common, at_ref, at_cur = np.intersect1d(ids_ref, ids_cur, return_indices=True)
    same = np.ones(common.size, dtype=bool)
    for column in columns:
        same &= np.asarray(reference[column])[at_ref] == np.asarray(current[column])[at_cur]
    gone = np.flatnonzero(~np.isin(ids_ref, ids_cur))
    new = np.flatnonzero(~np.isin(ids_cur, ids_ref))
    edited_gone, edited_new = _edited(reference, current, gone, new)
    counts = {
        "changed": int((~same).sum()),
        "edited": int(edited_new.sum()),
        "not in this run": int((~edited_gone).sum()),
        "new": int((~edited_new).sum()),
    }
    left = ", ".join(f"{n} {what}" for what, n in counts.items() if n)
    return common[same], f"{sum(counts.values())} left out: {left}"
