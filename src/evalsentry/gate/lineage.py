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
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from evalsentry.gate.concentration import Concentration, concentration_of
from evalsentry.gate.flips import Flips, flips_of
from evalsentry.gate.verdicts import Comparison, GateReport, Reference, Verdict
from evalsentry.names import LEAK_METRIC
from evalsentry.weeks import week_start, weeks_in_order

if TYPE_CHECKING:
    import pandas as pd

    from evalsentry.gate.drift import DriftResult
    from evalsentry.gate.suspects import FlipSuspects
    from evalsentry.history.store import History

SHORT = 8  # characters of a hash shown
#: Keys of an imported run's config that name the run itself, drawn afresh each run: not a
#: change of configuration.
RUN_IDENTITIES = frozenset({"import_id", "run_id", "task_id"})


def _differences(
    reference: Mapping[str, Any], current: Mapping[str, Any]
) -> tuple[dict[str, str], list[str]]:
    """What differs between two results' checkpoints, and what is recorded and the same.

    The differences by what differs (``training data``, ``code``, ``config``, ``seed``), each
    in words.
    """
    changed: dict[str, str] = {}
    same: list[str] = []
    for column, words in (("data_sha", "training data"), ("git_sha", "code")):
        before, after = _text(reference.get(column)), _text(current.get(column))
        if before is None and after is None:
            continue
        if before != after:
            changed[words] = f"{words} changed ({_short(before)} -> {_short(after)})"
        else:
            same.append(words)
    config = _config_change(reference.get("config_json"), current.get("config_json"))
    if config is None:
        same.append("config")
    elif config:
        changed["config"] = f"config {config}"
    seeds = _text(reference.get("seed")), _text(current.get("seed"))
    if seeds[0] != seeds[1] and None not in seeds:
        changed["seed"] = f"seed {seeds[0]} -> {seeds[1]}"
    return changed, same


def _same_checkpoint(reference: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    return _text(reference.get("checkpoint_sha256")) == _text(current.get("checkpoint_sha256"))


def what_changed(reference: Mapping[str, Any], current: Mapping[str, Any]) -> str | None:
    """What differs between two results' checkpoints, in one line; None without lineage.

    ``digits v2 -> v3: training data changed (a1b2c3d4 -> d4e5f6a7); code and config the same``.
    """
    who = f"{current['model']} v{_version(reference)} -> v{_version(current)}"
    if _same_checkpoint(reference, current):
        return f"{who}: the same checkpoint (the model did not change)"
    changed, same = _differences(reference, current)
    if not changed and not same:
        return None
    words = "; ".join(changed.values()) if changed else "the same recipe (only a retrain's noise)"
    if changed and same:
        words += f"; {' and '.join(same)} the same"
    return f"{who}: {words}"


@dataclass(frozen=True)
class Findings:
    """What was measured about why one line FAILed against the previous week."""

    line: str  # ``digits@v3 on digits``
    what_changed: str | None
    changed: dict[str, str]  # see _differences
    same: list[str]
    same_checkpoint: bool
    where: Concentration | None
    suspects: FlipSuspects | None
    evaluation_id: str = ""

    def lines(self) -> list[str]:
        """``what changed: ...``, ``where the flips are: ...``, ``label-error suspects: ...``."""
        out = [] if self.what_changed is None else [f"what changed: {self.what_changed}"]
        if self.where is not None:
            out.append(f"where the flips are: {self.line}: {self.where.text}")
        if self.suspects is not None:
            out.append(f"label-error suspects: {self.line}: {self.suspects.describe()}")
        return out


def lineage_changes(
    frame: pd.DataFrame, week: str, comparisons: Sequence[Comparison], history: History
) -> list[Findings]:
    """For each line a FAIL against the previous week names, what was measured about why.

    Its lineage against that week's (what changed), where its flips are (their classes) and how
    many of its newly wrong examples are label-error suspects.
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
        out.append(_findings(history, before.iloc[-1].to_dict(), now.iloc[-1].to_dict()))
    return out


def changes_of(findings: Sequence[Findings]) -> list[str]:
    """Every line of ``findings``, once each: a report's ``changes``."""
    return list(dict.fromkeys(line for found in findings for line in found.lines()))


def explain_candidate(history: History, report: GateReport) -> GateReport:
    """A candidate's report with what changed and the diagnosis of each FAIL against production."""
    findings = candidate_findings(history, report.comparisons)
    if not findings:
        return report
    return replace(report, changes=changes_of(findings), diagnosis=diagnose(findings, ()))


def candidate_findings(history: History, comparisons: Sequence[Comparison]) -> list[Findings]:
    """For each evaluation of a candidate that FAILs against production, what was measured."""
    pairs = sorted(
        {
            (c.evaluation_id, c.reference_evaluation_id)
            for c in comparisons
            if c.verdict == Verdict.FAIL
            and c.reference == Reference.PRODUCTION
            and c.reference_evaluation_id
        }
    )
    if not pairs:
        return []
    frame = history.evaluations(include_superseded=True)
    rows = {str(r["evaluation_id"]): r for r in frame.to_dict("records")}
    return [
        _findings(history, rows[reference], rows[current])
        for current, reference in pairs
        if current in rows and reference in rows
    ]


def _findings(
    history: History, reference: Mapping[str, Any], current: Mapping[str, Any]
) -> Findings:
    ids = str(current["evaluation_id"]), str(reference["evaluation_id"])
    flips = flips_of(history, *ids)  # read once: where they are, and which are suspects
    version = _text(current.get("version"))
    who = f"{current['model']}@v{version}" if version else f"the {current['model']} candidate"
    return Findings(
        f"{who} on {current['evalset']}",
        what_changed(reference, current),
        *_differences(reference, current),
        _same_checkpoint(reference, current),
        concentration_of(flips),
        _suspects_among_flips(history, current, flips),
        ids[0],
    )


def _suspects_among_flips(
    history: History, current: Mapping[str, Any], flips: Flips | None
) -> FlipSuspects | None:
    """How many of the newly wrong examples are label-error suspects.

    cleanlab is imported here, on a FAIL only: never on the gate's path to a PASS.
    """
    from evalsentry.gate.suspects import flipped_suspects

    if flips is None:
        return None
    newly_wrong = flips.current["example_id"][flips.newly_wrong]
    return flipped_suspects(history, current, newly_wrong, flips.current)


def diagnose(
    findings: Sequence[Findings],
    drifted: Sequence[DriftResult],
    comparisons: Sequence[Comparison] = (),
) -> str:
    """A failed week's first word on why, built only from what was measured; "" with nothing.

    Data causes are a change of the training data, newly wrong examples that are label-error
    suspects, evalset rows found in the training data (the week's split-leak verdicts among
    ``comparisons``, where the line names its training data) and drifted live inputs: ``likely
    data: digits@v3 on digits: training data changed (...); live inputs drifted (...). Checked,
    nothing found: digits@v3 on digits: 0 of 52 newly wrong examples are label-error suspects.
    Where: digits@v3 on digits: flips concentrate in classes 5, 8. Also changed: config,
    seed.`` Without one it opens ``no data cause found.``
    """
    if not findings:
        return ""
    data: list[str] = []
    cleared: list[str] = []
    where: list[str] = []
    model: list[str] = []
    for f in findings:
        if "training data" in f.changed:
            data.append(f"{f.line}: {f.changed['training data']}")
        elif "training data" in f.same:
            cleared.append(f"{f.line}: the training data is the same")
        if f.suspects is not None:
            said = f"{f.suspects.hits} of {f.suspects.flips} newly wrong examples are label-error suspects"
            (data if f.suspects.hits else cleared).append(f"{f.line}: {said}")
        if f.where is not None:
            places = f.where.places
            spread = "the flips spread as chance would"
            where.append(f"{f.line}: {f'flips concentrate in {places}' if places else spread}")
        leak = _leak_of(f, comparisons)
        if leak is not None:
            (data if leak[0] else cleared).append(f"{f.line}: {leak[1]}")
        model += [words for words in ("code", "config", "seed") if words in f.changed]
        if f.same_checkpoint:
            model.append("nothing of the model (the same checkpoint: its environment changed)")
    shifted = [d for d in drifted if d.measured and d.kind == "input"]
    if shifted:
        top = max(shifted, key=lambda d: d.psi)
        more = f" and {len(shifted) - 1} more" if len(shifted) > 1 else ""
        data.append(f"live inputs drifted ({top.label} PSI {top.psi:.2f}{more})")
    said = f"likely data: {'; '.join(data)}." if data else "no data cause found."
    for title, items in (("Checked, nothing found", cleared), ("Where", where)):
        said += f" {title}: {'; '.join(items)}." if items else ""
    if model:
        said += f" Also changed: {', '.join(dict.fromkeys(model))}."
    return said


def _leak_of(found: Findings, comparisons: Sequence[Comparison]) -> tuple[bool, str] | None:
    """Whether the split-leak check found rows of the line's training data, in words."""
    for c in comparisons:
        if c.metric == LEAK_METRIC and c.evaluation_id == found.evaluation_id and c.n is not None:
            count = int(c.value or 0)
            if not count:
                return False, "no evalset row is in its training data"
            return True, f"{count:,} of {c.n:,} evalset rows are in its training data (a leak)"
    return None


def _config_change(before: Any, after: Any) -> str | None:
    """``lr 0.01 -> 0.1, epochs 10 -> 20``; None when equal; "" when not comparable."""
    old, new = _json(before), _json(after)
    if old is None and new is None:
        return ""
    if old == new:
        return None
    if not isinstance(old, dict) or not isinstance(new, dict):
        return "changed"
    keys = sorted(
        k for k in set(old) | set(new) if old.get(k) != new.get(k) and k not in RUN_IDENTITIES
    )
    if not keys:
        return None
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
