"""Names: validation of user-supplied ones that become path segments, and the fixed vocabularies."""

from __future__ import annotations

import re
from typing import Final, Literal

from evalsentry.errors import InvalidName

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
#: Registry stages of a checkpoint version (its ``stage``, in the registry and in each history row).
STAGES = ("candidate", "production", "archived")
#: What a weekly run evaluates of each model line: its newest version in each of these stages.
WEEKLY_STAGES = ("production", "candidate")

#: The ``kind`` of a history evaluation row: which run recorded it. Not a registry stage: a
#: weekly run records ``stage`` candidate rows too, as ``kind`` scheduled. The stored values are
#: kept as first written (the history is append-only and queried directly with DuckDB or pandas),
#: so the code names them for what they mean.
RunKind = Literal["scheduled", "candidate"]
#: Recorded by a weekly-eval run, however it started (schedule, by hand, backfill); the gate,
#: the baseline, timing and the bill read only these.
WEEKLY_RUN: Final[RunKind] = "scheduled"
#: Recorded by a candidate check (``evalsentry evaluate``, the evaluate-candidate flow): gated
#: against production, never part of a week's result.
CANDIDATE_CHECK: Final[RunKind] = "candidate"
RUN_KINDS: tuple[RunKind, ...] = (WEEKLY_RUN, CANDIDATE_CHECK)
#: The ``metric`` of a paired-timing verdict (a new production checkpoint against last week's):
#: stored with the gate's comparisons, and part of the week's verdict from then on.
TIMING_METRIC: Final = "microseconds_per_example"
#: The ``metric`` of a split-leak verdict (a line's evalset holding rows of its ``train_data``):
#: recorded by the weekly run with the gate's comparisons, part of the week's verdict.
LEAK_METRIC: Final = "leaked_examples"
#: The metric names of a harness's per-example scores (``score:acc``): each is the mean of the
#: predictions column of the same name (``evalsentry.harnesses``), higher is better.
SCORE_PREFIX: Final = "score:"
#: The ``evalset`` of a history row about a whole model line that ran on no evalset (one bound
#: to none while the project has several): recorded, so the week's ERROR is in the history.
NO_EVALSET: Final = "*"
#: The harnesses whose runs evalsentry imports; an imported evaluation's ``device`` is its name.
HARNESSES = ("lm-eval", "inspect")
#: The predictions column of each example's probability of every class (one list per example):
#: classification evalsets of few enough classes, and multi-label ones (each label's chance).
PROBABILITIES: Final = "probabilities"


def check_name(kind: str, name: str) -> str:
    """Return ``name`` if it is safe as one path segment, else raise ``InvalidName``.

    Letters, digits, ``.``, ``_`` and ``-``, starting with a letter or digit, at most 100
    characters, and never ``..``: a name can never climb out of its folder.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name:
        raise InvalidName(
            kind, str(name), "use letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return name


def check_stage(stage: str) -> str:
    """Return ``stage`` if it is one of ``STAGES``."""
    if stage not in STAGES:
        raise InvalidName("stage", stage, f"choose one of {', '.join(STAGES)}")
    return stage
