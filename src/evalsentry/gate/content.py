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


def content_change(
    reference: Mapping[str, NDArray[Any]], current: Mapping[str, NDArray[Any]]
) -> str | None:
    """``not comparable: the prompt changed (...)``, or None when no recorded content differs.

    Per-example hashes are compared on the examples both hold (paired by ``example_id``); a run
    column on its one value. Evaluations without these columns (a weekly run's) give None.
    """
    changed = _run_change(reference, current, *HARNESS_COLUMN)
    if changed:
        return changed
    ids_ref, ids_cur = np.asarray(reference["example_id"]), np.asarray(current["example_id"])
    common, at_ref, at_cur = np.intersect1d(ids_ref, ids_cur, return_indices=True)
    for column, word in CONTENT_COLUMNS:
        if column in reference and column in current and common.size:
            differ = np.asarray(reference[column])[at_ref] != np.asarray(current[column])[at_cur]
            if differ.any():
                return (
                    f"not comparable: the {word} changed ({int(differ.sum())} of {common.size} "
                    f"examples' {column} differ)"
                )
    return _scoring_change(reference, current) or _run_change(reference, current, *TASK_COLUMN)


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


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


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
