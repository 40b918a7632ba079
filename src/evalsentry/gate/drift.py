"""Drift of live production inputs against the frozen evalset, and of the predictions on them.

A frozen evalset catches regressions of the model and its environment; it cannot see the
world changing. For each input feature (a tabular evalset's columns; for a tensor input, the
per-row summaries ``drift.features`` names, else ``DEFAULT_ROW_SUMMARIES``) the live sample is
compared with the frozen rows by population stability index and a two-sample
Kolmogorov-Smirnov test, Benjamini-Hochberg corrected across features; for each production
checkpoint, the distribution of predicted classes on live data is compared with the one on the
frozen set (PSI and a chi-square test).
"""

from __future__ import annotations

import glob
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from evalsentry.errors import EvalsetError
from evalsentry.gate.verdicts import Verdict
from evalsentry.sections import DEFAULT_ROW_SUMMARIES, DriftPolicy
from evalsentry.storage import filesystem

if TYPE_CHECKING:
    from evalsentry.evalsets.evalset import Evalset, EvalsetSpec

log = logging.getLogger(__name__)

PSI_BINS = 10
KS_EXACT_BELOW = 50
PSI_FLOOR = 1e-4  # keeps empty bins from making the index infinite


def _share_above_half_max(rows: np.ndarray, scale: float) -> np.ndarray:
    """Share of each row's values above half of ``scale`` (all zero when ``scale`` is not > 0)."""
    if scale <= 0:
        return np.zeros(len(rows))
    return np.asarray((rows > 0.5 * scale).mean(axis=1))


#: The per-row summaries a tensor input's drift can be measured on, by the name
#: ``drift.features`` uses. Each takes the rows (one flattened example a row) and the
#: evalset's largest value.
#: (The names, and the default ones, are config's: ``ROW_SUMMARY_NAMES``.)
ROW_SUMMARIES: Mapping[str, Callable[[np.ndarray, float], np.ndarray]] = {
    "mean": lambda rows, _: rows.mean(axis=1),
    "std": lambda rows, _: rows.std(axis=1),
    "min": lambda rows, _: rows.min(axis=1),
    "max": lambda rows, _: rows.max(axis=1),
    "share_above_half_max": _share_above_half_max,
}


@dataclass(frozen=True)
class DriftResult:
    """One feature's (or one model's predictions') drift."""

    evalset: str
    feature: str
    kind: str  # input | prediction
    psi: float
    statistic: float
    p_value: float
    p_adjusted: float
    n_reference: int
    n_live: int
    verdict: Verdict  # PASS, WARN or FAIL
    model: str | None = None
    #: Why it was not measured (a model that hung or crashed on the live sample): a WARN.
    reason: str = ""

    @classmethod
    def not_measured(
        cls, evalset: str, model: str, reason: str, n_reference: int, n_live: int
    ) -> DriftResult:
        """A model's prediction drift that could not be measured: a WARN saying why."""
        nan = float("nan")
        return cls(
            evalset,
            "predicted_class",
            "prediction",
            nan,
            nan,
            nan,
            nan,
            n_reference,
            n_live,
            Verdict.WARN,
            model,
            f"not measured: {reason}",
        )

    def row(self, run_id: str, week: str) -> dict[str, Any]:
        """The history row of this result."""
        return {**asdict(self), "verdict": str(self.verdict), "run_id": run_id, "week": week}

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> DriftResult:
        """A result as the history's drift table stored it (a plain record)."""
        names = {f.name for f in fields(cls)}
        values = {key: value for key, value in row.items() if key in names}
        values["model"] = values.get("model") or None
        values["reason"] = values.get("reason") or ""
        for name in ("psi", "statistic", "p_value", "p_adjusted"):
            values[name] = float("nan") if values.get(name) is None else float(values[name])
        return cls(**{**values, "verdict": Verdict(values["verdict"])})

    @property
    def label(self) -> str:
        """What drifted: ``digits mean`` (an input feature), ``digits predicted_class of m``."""
        return f"{self.evalset} {self.feature}" + (f" of {self.model}" if self.model else "")

    @property
    def measured(self) -> bool:
        """False for a model's prediction drift that could not be measured (see ``reason``)."""
        return math.isfinite(self.psi)

    def brief(self) -> str:
        """A few words: ``digits mean PSI 7.05`` or ``digits predicted_class of m not measured``."""
        return f"{self.label} " + (f"PSI {self.psi:.3g}" if self.measured else "not measured")

    def describe(self) -> str:
        """One line, verdict first: ``WARN drift digits mean: PSI 7.050, p=1e-30 (KS, BH)``."""
        if not self.measured:
            return f"{self.verdict} drift {self.label}: {self.reason or 'not measured'}"
        test = "KS, BH" if self.kind == "input" else "chi-square"
        return (
            f"{self.verdict} drift {self.label}: PSI {self.psi:.3f}, p={self.p_adjusted:.2g} "
            f"({test}; {self.n_live} live vs {self.n_reference} frozen rows)"
        )


def drift_verdict(policy: DriftPolicy, psi: float, p_value: float) -> Verdict:
    """FAIL or WARN when the shift is both significant and large enough, else PASS."""
    if p_value < policy.alpha and psi >= policy.psi_fail:
        return Verdict.FAIL
    if p_value < policy.alpha and psi >= policy.psi_warn:
        return Verdict.WARN
    return Verdict.PASS


def psi(reference: np.ndarray, live: np.ndarray, bins: int = PSI_BINS) -> float:
    """Population stability index over ``bins`` quantile bins of the reference."""
    edges = np.unique(np.quantile(reference, np.linspace(0, 1, bins + 1)))
    if len(edges) < 2:  # a constant reference: one bin either side of its value
        edges = np.array([reference[0] - 0.5, reference[0] + 0.5])
    edges[0], edges[-1] = -np.inf, np.inf
    expected = np.histogram(reference, edges)[0] / len(reference)
    actual = np.histogram(live, edges)[0] / len(live)
    expected, actual = np.maximum(expected, PSI_FLOOR), np.maximum(actual, PSI_FLOOR)
    return float(np.sum((actual - expected) * np.log(actual / expected)))


def class_psi(reference: np.ndarray, live: np.ndarray, classes: int) -> float:
    """PSI between two distributions of class indices."""
    expected = np.maximum(np.bincount(reference, minlength=classes) / len(reference), PSI_FLOOR)
    actual = np.maximum(np.bincount(live, minlength=classes) / len(live), PSI_FLOOR)
    return float(np.sum((actual - expected) * np.log(actual / expected)))


def feature_table(
    inputs: np.ndarray,
    columns: list[str] | None,
    summaries: Sequence[str] = DEFAULT_ROW_SUMMARIES,
    *,
    scale: float | None = None,
) -> dict[str, np.ndarray]:
    """Named scalar features: the columns themselves, or the named per-row summaries of a tensor.

    Args:
        inputs: the examples, one a row.
        columns: the evalset's input columns; None for a tensor input.
        summaries: names in ``ROW_SUMMARIES``, for a tensor input.
        scale: the evalset's largest value, the reference of ``share_above_half_max``; None
            takes the largest of ``inputs``.
    """
    flat = inputs.reshape(len(inputs), -1).astype(np.float64)
    if columns is not None:
        return {name: flat[:, i] for i, name in enumerate(columns)}
    if scale is None:
        scale = float(flat.max()) if flat.size else 1.0
    return {name: ROW_SUMMARIES[name](flat, scale) for name in summaries}


def row_summaries(spec: EvalsetSpec, policy: DriftPolicy) -> tuple[str, ...]:
    """The per-row summaries a tensor evalset's drift is measured on.

    Its ``drift.features`` entry, else ``DEFAULT_ROW_SUMMARIES``.

    Raises:
        EvalsetError: the entry names features of an evalset with named input columns, whose
            features are its columns.
    """
    name, columns = spec.name, spec.inputs.columns
    listed = policy.features.get(name)
    if listed is not None and columns is not None:
        raise EvalsetError(
            f"drift.features.{name}: {name}'s inputs are {len(columns)} named columns, which "
            f"are its drift features; remove drift.features.{name}"
        )
    return tuple(listed) if listed is not None else DEFAULT_ROW_SUMMARIES


def read_live(source: str, evalset: Evalset) -> np.ndarray:
    """The live inputs from a Parquet path, glob or fsspec URL, shaped like the evalset's inputs.

    Raises:
        EvalsetError: nothing matches, or the data lacks the evalset's input columns.
    """
    import pyarrow.parquet as pq

    from evalsentry.evalsets.inputs import inputs_array

    fs, path = filesystem(source)
    files = sorted(fs.glob(path)) if glob.has_magic(path) else [path]
    if not files or not all(fs.exists(f) for f in files):
        raise EvalsetError(f"drift.live.{evalset.spec.name}: no live data at {source}")
    tables = []
    for file in files:
        with fs.open(file, "rb") as handle:
            tables.append(pq.read_table(handle))
    table = pa.concat_tables(tables, promote_options="default")
    try:
        return inputs_array(table, evalset.spec.inputs, source)
    except (KeyError, EvalsetError) as exc:
        detail = str(exc).removeprefix(f"{source}: ")
        raise EvalsetError(
            f"drift.live.{evalset.spec.name}: {source} does not match the evalset's inputs "
            f"({detail})"
        ) from None


def input_drift(evalset: Evalset, live: np.ndarray, policy: DriftPolicy) -> list[DriftResult]:
    """PSI and KS per input feature, Benjamini-Hochberg corrected.

    Raises:
        EvalsetError: ``drift.features`` lists the evalset but its inputs are named columns, or
            its inputs are token sequences.
    """
    from scipy.stats import false_discovery_control, ks_2samp

    names, summaries = evalset.spec.inputs.columns, row_summaries(evalset.spec, policy)
    inputs = evalset.inputs
    if not isinstance(inputs, np.ndarray):
        raise EvalsetError(f"drift.live.{evalset.spec.name}: token sequences have no input drift")
    # One threshold for both samples: a live sample's own maximum would hide a change of scale.
    scale = float(inputs.max()) if inputs.size else 1.0
    reference = feature_table(inputs, names, summaries, scale=scale)
    current = feature_table(live, names, summaries, scale=scale)
    # The asymptotic distribution is accurate at these sample sizes; scipy's exact method fails
    # (and warns) on large samples with ties.
    method = "asymp" if min(len(live), len(evalset.inputs)) >= KS_EXACT_BELOW else "auto"
    tests = [(name, ks_2samp(reference[name], current[name], method=method)) for name in reference]
    adjusted = false_discovery_control([float(t.pvalue) for _, t in tests], method="bh")
    results = []
    for (name, test), p_adj in zip(tests, adjusted, strict=True):
        index = psi(reference[name], current[name])
        results.append(
            DriftResult(
                evalset=evalset.spec.name,
                feature=name,
                kind="input",
                psi=index,
                statistic=float(test.statistic),
                p_value=float(test.pvalue),
                p_adjusted=float(p_adj),
                n_reference=len(reference[name]),
                n_live=len(current[name]),
                verdict=drift_verdict(policy, index, float(p_adj)),
            )
        )
    return results


def prediction_drift(
    model: str,
    evalset: Evalset,
    reference_predictions: np.ndarray,
    live_predictions: np.ndarray,
    policy: DriftPolicy,
) -> DriftResult:
    """Predicted-class distribution on live data against the frozen set (PSI, chi-square)."""
    from scipy.stats import chi2_contingency

    classes = evalset.spec.num_classes or int(
        max(reference_predictions.max(), live_predictions.max()) + 1
    )
    table = np.stack(
        [
            np.bincount(reference_predictions, minlength=classes),
            np.bincount(live_predictions, minlength=classes),
        ]
    )
    table = table[:, table.sum(axis=0) > 0]
    test = chi2_contingency(table)
    index = class_psi(reference_predictions, live_predictions, classes)
    return DriftResult(
        evalset=evalset.spec.name,
        feature="predicted_class",
        kind="prediction",
        psi=index,
        statistic=float(test.statistic),
        p_value=float(test.pvalue),
        p_adjusted=float(test.pvalue),
        n_reference=len(reference_predictions),
        n_live=len(live_predictions),
        verdict=drift_verdict(policy, index, float(test.pvalue)),
        model=model,
    )
