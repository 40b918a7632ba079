"""Tolerances from what retrains do: the spread of a model line's seed reruns, per metric.

A tolerance is a claim about honest retrains: a version trained from the same code, data and
config with another seed should pass. ``suggest`` measures that instead of assuming it: it
takes the line's registered versions whose lineage differs only in the seed (the largest such
group), reads each one's latest result on each evalset from the history, and per metric
proposes the drop an honest retrain stays within with probability ``probability``.

Two retrains differ by the difference of two draws of the seed's spread: with ``s`` the sample
standard deviation of the ``k`` versions' values, a retrain-to-retrain change has a standard
deviation of ``sqrt(2) s``, and the one-sided ``probability`` quantile of Student's t with
``k - 1`` degrees of freedom (the spread is estimated from ``k`` values) bounds it. The
suggestion is set beside the smallest drop the evalset can resolve (:mod:`.resolution`): a
tolerance below that is one no evalset of its size can certify.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from evalsentry.errors import UsageError

if TYPE_CHECKING:
    from evalsentry.checkpoints.registry import RegistryEntry
    from evalsentry.config import Config
    from evalsentry.history.store import History

#: Lineage fields a retrain may change without being another recipe (the seed is the point).
RETRAIN_FREE = ("seed", "timestamp_utc", "training_cost")
DEFAULT_PROBABILITY = 0.95


@dataclass(frozen=True)
class Suggestion:
    """One metric on one evalset: the seed spread and the tolerance it suggests."""

    evalset: str
    metric: str
    values: dict[int, float]  # version -> its latest overall value
    spread: float  # sample standard deviation across the versions
    suggested: float  # max_drop an honest retrain stays within with the stated probability
    resolvable: float | None  # the smallest drop the evalset can certify, when known
    configured: str  # the tolerance set today, as written

    @property
    def advice(self) -> float:
        """The tolerance to set: the suggestion, or what the evalset can resolve if larger."""
        return max(self.suggested, self.resolvable or 0.0)


def seed_reruns(entries: Sequence[RegistryEntry]) -> list[RegistryEntry]:
    """The largest group of versions whose lineage differs only in seed (two seeds at least).

    Ties go to the group with the newest version. Empty when no two versions qualify.
    """
    groups: dict[str, list[RegistryEntry]] = {}
    for entry in entries:
        recipe = {k: v for k, v in entry.lineage.items() if k not in RETRAIN_FREE}
        groups.setdefault(json.dumps(recipe, sort_keys=True, default=str), []).append(entry)
    candidates = [
        group for group in groups.values() if len({e.lineage.get("seed") for e in group}) > 1
    ]
    if not candidates:
        return []
    largest = max(candidates, key=_size_then_newest)
    return sorted(largest, key=lambda e: e.version)


def _size_then_newest(group: list[RegistryEntry]) -> tuple[int, int]:
    return len(group), max(e.version for e in group)


def suggest(
    config: Config,
    history: History,
    model: str,
    versions: Sequence[RegistryEntry],
    probability: float = DEFAULT_PROBABILITY,
) -> list[Suggestion]:
    """Per evalset and metric, the seed reruns' spread and the tolerance it suggests.

    Raises:
        UsageError: fewer than two of the versions have an ok result on any evalset.
    """
    from scipy import stats

    from evalsentry.gate.resolution import evalset_resolutions, measured_comparisons

    latest = _latest_results(history, model, [v.version for v in versions])
    if not latest:
        raise UsageError(
            f"model {model!r}: its seed reruns ({described(versions)}) have no results to compare; "
            "evaluate them first (a weekly run evaluates registered candidates, or "
            "`evalsentry evaluate --checkpoint FILE --model LINE`)"
        )
    metrics = history.metrics(
        [eid for by_version in latest.values() for eid in by_version.values()]
    )
    metrics = metrics[metrics["slice"] == ""]
    comparisons = measured_comparisons(config)
    out = []
    for evalset, by_version in sorted(latest.items()):
        resolvable = {
            r.metric: r.certifiable for r in evalset_resolutions(config, evalset, comparisons)
        }
        rows = metrics[metrics["evaluation_id"].isin(list(by_version.values()))]
        version_of = {eid: version for version, eid in by_version.items()}
        for metric, group in rows.groupby("metric", sort=True):
            values = {
                version_of[e]: float(v)
                for e, v in zip(group["evaluation_id"], group["value"], strict=True)
            }
            finite = [v for v in values.values() if math.isfinite(v)]
            if len(finite) < 2:
                continue
            mean = sum(finite) / len(finite)
            spread = math.sqrt(sum((v - mean) ** 2 for v in finite) / (len(finite) - 1))
            quantile = float(stats.t.ppf(probability, len(finite) - 1))
            out.append(
                Suggestion(
                    evalset=evalset,
                    metric=str(metric),
                    values=values,
                    spread=spread,
                    suggested=quantile * math.sqrt(2.0) * spread,
                    resolvable=resolvable.get(str(metric)),
                    configured=str(config.gate.tolerance(str(metric), evalset).max_drop),
                )
            )
    return out


def _latest_results(
    history: History, model: str, versions: Sequence[int]
) -> dict[str, dict[int, str]]:
    """Evalset -> version -> the evaluation id of that version's latest ok result on it.

    Only evalsets two versions at least were evaluated on.
    """
    # Superseded rows too: a week's later run replaces its rows as the week's result, not as
    # the result of each version it evaluated.
    rows = history.evaluations(model=model, include_superseded=True)
    if rows.empty:
        return {}
    rows = rows[(rows["status"] == "ok") & rows["version"].isin(list(versions))]
    rows = rows.sort_values("finished_at")
    latest: dict[str, dict[int, str]] = {}
    for row in rows.itertuples():
        latest.setdefault(str(row.evalset), {})[int(row.version)] = str(row.evaluation_id)
    return {e: by_version for e, by_version in latest.items() if len(by_version) >= 2}


def described(versions: Sequence[RegistryEntry]) -> str:
    """``v2 seed 1, v3 seed 2``: the seed reruns, as the command lists them."""
    return ", ".join(f"v{e.version} seed {e.lineage.get('seed')}" for e in versions)


def as_yaml(suggestions: Sequence[Suggestion]) -> str:
    """The suggestions as a ``gate:`` block to paste into evalsentry.yaml."""
    from evalsentry.gate.resolution import round_up

    by_evalset: dict[str, dict[str, Any]] = {}
    for s in suggestions:
        by_evalset.setdefault(s.evalset, {})[s.metric] = f"{{max_drop: {round_up(s.advice):g}}}"
    lines = ["gate:", "  evalsets:"]
    for evalset, metrics in by_evalset.items():
        lines.append(f"    {evalset}:")
        lines += [f"      {metric}: {setting}" for metric, setting in metrics.items()]
    return "\n".join(lines)
