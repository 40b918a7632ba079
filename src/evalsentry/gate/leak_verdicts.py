"""The weekly run's split-leak verdicts: a line's evalset holding rows of its training data.

Where a model line names its training data (``models.<line>.train_data``), each week every
evalset it was evaluated on is checked against it (:mod:`evalsentry.evalsets.leaks`). The
verdict is one comparison per evaluation, metric ``leaked_examples``: PASS when no row is
there, WARN when some are (FAIL with ``leak: fail``), WARN when the check could not run. The
weekly run records it with the gate's comparisons, as it does the paired timing, so every view
of the week (the gate, the reports, the alert, a raw query) carries it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from evalsentry.errors import EvalsetError
from evalsentry.gate.verdicts import Comparison, Reference, Verdict
from evalsentry.names import LEAK_METRIC

if TYPE_CHECKING:
    from evalsentry.config import Config
    from evalsentry.evalsets.evalset import Evalset
    from evalsentry.evalsets.leaks import LeakCheck


def leak_verdicts(
    evaluations: Sequence[Mapping[str, Any]], evalsets: Mapping[str, Evalset], settings: Config
) -> list[Comparison]:
    """A verdict for each successful evaluation whose line names its training data."""
    from evalsentry.evalsets.leaks import check_leaks, read_training

    read = functools.cache(read_training)  # each training set read once for all its evalsets
    checked: dict[tuple[str, str], LeakCheck | str] = {}
    out = []
    for row in evaluations:
        binding = settings.models.get(str(row["model"]))
        if binding is None or binding.train_data is None or row["evalset"] not in evalsets:
            continue
        train, evalset = settings.resolve(binding.train_data), str(row["evalset"])
        if (train, evalset) not in checked:
            try:
                checked[train, evalset] = check_leaks(evalsets[evalset], train, table=read(train))
            except EvalsetError as exc:
                checked[train, evalset] = str(exc)
        out.append(_verdict(row, checked[train, evalset], binding.train_data, binding.leak))
    return out


def _verdict(
    row: Mapping[str, Any], found: LeakCheck | str, named: str, on_leak: str
) -> Comparison:
    if isinstance(found, str):
        verdict, reason, count = Verdict.WARN, f"split-leak check not run: {found}", None
    elif not found.leaks:
        verdict, count = Verdict.PASS, 0
        reason = f"none of its {found.examples:,} examples is in its training data ({named})"
    else:
        count = len(found.leaks)
        verdict = Verdict.FAIL if on_leak == "fail" else Verdict.WARN
        reason = (
            f"{count:,} of {found.examples:,} examples ({count / found.examples:.1%}) are in its "
            f"training data {named} ({found.kinds()}): they flatter its metrics; the verdict without "
            f"them: evalsentry gate --without-leaks {named}"
        )
    return Comparison(
        evaluation_id=str(row["evaluation_id"]),
        week=str(row["week"]),
        model=str(row["model"]),
        version=row.get("version"),
        evalset=str(row["evalset"]),
        reference=Reference.NONE,
        metric=LEAK_METRIC,
        verdict=verdict,
        reason=reason,
        value=None if count is None else float(count),
        n=None if isinstance(found, str) else found.examples,
        kind=row.get("kind"),
        stage=row.get("stage"),
        checkpoint_sha256=row.get("checkpoint_sha256"),
    )
