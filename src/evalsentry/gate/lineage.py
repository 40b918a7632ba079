"""What changed between the two checkpoints a FAIL compares: code, data, config, seed.

Model or data? A drop says *that* a line got worse; the lineage each result was recorded with
says what was different about the checkpoint that did: "training data changed (a1b2c3d4 ->
d4e5f6a7); code and config the same". Built only from the recorded columns (``git_sha``,
``data_sha``, ``config_json``, ``seed``, ``checkpoint_sha256``); an imported harness run records
none of these, and then nothing is said.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from evalsentry.gate.flips import class_concentration, flipped_ids
from evalsentry.gate.verdicts import Comparison, Reference, Verdict
from evalsentry.weeks import week_start, weeks_in_order

if TYPE_CHECKING:
    import pandas as pd

    from evalsentry.history.store import History

SHORT = 8  # characters of a hash shown


def what_changed(reference: Mapping[str, Any], current: Mapping[str, Any]) -> str | None:
    """What differs between two results' checkpoints, in one line; None without lineage.

    ``digits v2 -> v3: training data changed (a1b2c3d4 -> d4e5f6a7); code and config the same``.
    """
    who = f"{current['model']} v{_version(reference)} -> v{_version(current)}"
    if _text(reference.get("checkpoint_sha256")) == _text(current.get("checkpoint_sha256")):
        return f"{who}: the same checkpoint (the model did not change)"
    changed, same = [], []
    for column, words in (("data_sha", "training data"), ("git_sha", "code")):
        before, after = _text(reference.get(column)), _text(current.get(column))
        if before is None and after is None:
            continue
        if before != after:
            changed.append(f"{words} changed ({_short(before)} -> {_short(after)})")
        else:
            same.append(words)
    config = _config_change(reference.get("config_json"), current.get("config_json"))
    if config is None:
        same.append("config")
    elif config:
        changed.append(f"config {config}")
    seeds = _text(reference.get("seed")), _text(current.get("seed"))
    if seeds[0] != seeds[1] and None not in seeds:
        changed.append(f"seed {seeds[0]} -> {seeds[1]}")
    if not changed and not same:
        return None
    words = "; ".join(changed) if changed else "the same recipe (only a retrain's noise)"
    if changed and same:
        words += f"; {' and '.join(same)} the same"
    return f"{who}: {words}"


def lineage_changes(
    frame: pd.DataFrame, week: str, comparisons: Sequence[Comparison], history: History
) -> list[str]:
    """For each line a FAIL against the previous week names, what changed since that week.

    ``what changed: ...`` (the lineage), ``where the flips are: ...`` (their classes) and
    ``label-error suspects: ...`` (how many of the newly wrong examples are).
    """
    failed = {
        (c.model, c.evalset)
        for c in comparisons
        if c.verdict == Verdict.FAIL and c.reference == Reference.PREVIOUS_WEEK
    }
    out = []
    production = frame[(frame["stage"] == "production") & (frame["status"] == "ok")]
    for model, evalset in sorted(failed):
        rows = production[(production["model"] == model) & (production["evalset"] == evalset)]
        now = rows[rows["week"] == week]
        earlier = [w for w in weeks_in_order(rows["week"]) if week_start(w) < week_start(week)]
        if now.empty or not earlier:
            continue
        before = rows[rows["week"] == earlier[-1]]
        reference, current = before.iloc[-1].to_dict(), now.iloc[-1].to_dict()
        said = what_changed(reference, current)
        if said is not None:
            out.append(f"what changed: {said}")
        where = class_concentration(
            history, str(current["evaluation_id"]), str(reference["evaluation_id"])
        )
        if where is not None:
            out.append(f"where the flips are: {model}@v{_version(current)} on {evalset}: {where}")
        suspects = _suspects_among_flips(history, current, reference)
        if suspects is not None:
            out.append(
                f"label-error suspects: {model}@v{_version(current)} on {evalset}: {suspects}"
            )
    return list(dict.fromkeys(out))


def _suspects_among_flips(
    history: History, current: Mapping[str, Any], reference: Mapping[str, Any]
) -> str | None:
    """How many of the newly wrong examples are label-error suspects, in words.

    cleanlab is imported here, on a FAIL only: never on the gate's path to a PASS.
    """
    from evalsentry.gate.suspects import flipped_suspects

    flips = flipped_ids(history, str(current["evaluation_id"]), str(reference["evaluation_id"]))
    return None if flips is None else flipped_suspects(history, current, flips[0])


def _config_change(before: Any, after: Any) -> str | None:
    """``lr 0.01 -> 0.1, epochs 10 -> 20``; None when equal; "" when not comparable."""
    old, new = _json(before), _json(after)
    if old is None and new is None:
        return ""
    if old == new:
        return None
    if not isinstance(old, dict) or not isinstance(new, dict):
        return "changed"
    keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    shown = [f"{k} {_value(old.get(k))} -> {_value(new.get(k))}" for k in keys[:4]]
    return ", ".join(shown) + (f" and {len(keys) - 4} more" if len(keys) > 4 else "")


def _json(value: Any) -> Any:
    if not isinstance(value, str):
        return None
    try:
        return json.loads(value)
    except ValueError:
        return None


def _value(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 24 else text[:23] + "…"


def _text(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _short(value: str | None) -> str:
    return "none" if value is None else value[:SHORT]


def _version(row: Mapping[str, Any]) -> str:
    return _text(row.get("version")) or "?"
