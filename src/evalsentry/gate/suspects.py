"""Label-error suspects: examples whose given label the evaluated models agree is wrong.

Found from the history alone. Every evaluation of a classification (or multi-label) evalset
keeps each example's probability of every class (the ``probabilities`` predictions column, for
up to 100 classes). For each checkpoint evaluated on the evalset's current content (the same
``evalset_sha256``), its newest successful evaluation is taken: its outputs are out of sample,
as the evalset is held out from training. The checkpoints' mean probabilities go to cleanlab's
confident learning (Northcutt et al. 2021: ``cleanlab.filter.find_label_issues``, pruned by the
estimated noise rate, ranked by the given label's probability): an example is a suspect where
its given label is less likely than another class by more than the per-class thresholds the
data itself sets. Each suspect says the label the models agree on, its mean probability, and
how many checkpoints put it first.

A suspect is not a label error found, only one worth a look: nothing is dropped from any
verdict (``evalsentry evalset suspects``; see the README's "Model or data?"). A FAIL counts its
newly wrong examples among the suspects the *other* checkpoints find: a model under suspicion
does not testify against the labels.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from evalsentry.errors import UsageError
from evalsentry.history.store import History
from evalsentry.names import PROBABILITIES

if TYPE_CHECKING:
    from evalsentry.evalsets.evalset import Evalset

log = logging.getLogger(__name__)

SUPPORTED_TASKS = ("classification", "multilabel")
#: What a week's report says of an evalset whose evaluations hold no class probabilities.
NOT_LOOKED_FOR = (
    "not looked for: its evaluations hold no class probabilities (suspects are found for "
    "classification and multi-label evalsets)"
)


@dataclass(frozen=True)
class Suspect:
    """One example whose given label the models doubt."""

    example_id: str
    row: int  # its position in the frozen evalset (0-based)
    given: str
    agreed: str
    confidence: float  # the models' mean probability of ``agreed``
    given_probability: float  # ... and of ``given``
    agreeing: int  # checkpoints whose own top answer is ``agreed``


@dataclass(frozen=True)
class Suspects:
    """The suspects of one evalset, and what they were found from."""

    evalset: str
    examples: int
    checkpoints: list[str]  # model@vN of each evaluation used
    without_probabilities: int  # evaluations of the same content recorded without them
    method: str
    suspects: list[Suspect]

    def headline(self) -> str:
        """``12 of 1,797 examples (0.7%) ... from 3 checkpoints (...)``."""
        share = len(self.suspects) / self.examples if self.examples else 0.0
        return (
            f"label-error suspects in {self.evalset}: {len(self.suspects):,} of "
            f"{self.examples:,} examples ({share:.1%}), from {len(self.checkpoints)} "
            f"checkpoint(s) ({', '.join(self.checkpoints)}); {self.method}"
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form."""
        return {**asdict(self), "suspects": [asdict(s) for s in self.suspects]}


@dataclass(frozen=True)
class Examples:
    """What suspects are found over: an evalset's identity, task, classes, ids and given labels."""

    name: str
    sha256: str
    task: str
    classes: list[str]
    ids: np.ndarray
    targets: np.ndarray  # class indices; for multi-label a bool [N, L] matrix

    @classmethod
    def of(cls, evalset: Evalset) -> Examples:
        """A frozen evalset's examples."""
        spec = evalset.spec
        classes = [str(c) for c in spec.classes or []]
        return cls(spec.name, spec.evalset_sha256, spec.task, classes, evalset.ids, evalset.targets)


def find_suspects(
    history: History, evalset: Evalset | Examples, *, without: Sequence[str] = ()
) -> Suspects:
    """The label-error suspects of ``evalset`` from the evaluations the history holds of it.

    ``without``: checkpoints (sha256) that are no witness, such as the one whose FAIL is being
    explained: a model under suspicion does not testify against the labels.

    Raises:
        UsageError: the task has no labels to doubt, or no evaluation of this content holds
            class probabilities.
    """
    examples = evalset if isinstance(evalset, Examples) else Examples.of(evalset)
    if examples.task not in SUPPORTED_TASKS:
        raise UsageError(
            f"evalset {examples.name!r} is a {examples.task} evalset: label-error suspects are "
            f"found for {' and '.join(SUPPORTED_TASKS)} evalsets"
        )
    names, probabilities, unkept = _probabilities(history, examples, set(without))
    if not names:
        raise UsageError(
            f"no evaluation of evalset {examples.name!r} (its current content, "
            f"{examples.sha256[:12]}) holds class probabilities"
            + (f" ({unkept} recorded before evalsentry kept them)" if unkept else "")
            + "; run the weekly evaluation (evalsentry run), then ask again"
        )
    stacked = np.stack(probabilities)  # [checkpoints, N, K]
    mean = stacked.mean(axis=0, dtype=np.float64)
    multilabel = examples.task == "multilabel"
    found = _cleanlab(examples.targets, mean, multilabel=multilabel)
    describe = _multilabel_suspect if multilabel else _class_suspect
    return Suspects(
        evalset=examples.name,
        examples=len(examples.ids),
        checkpoints=names,
        without_probabilities=unkept,
        method=f"cleanlab {_cleanlab_version()} confident learning",
        suspects=[describe(examples, int(i), mean, stacked) for i in found],
    )


@dataclass(frozen=True)
class FlipSuspects:
    """How many of a line's newly wrong examples are label-error suspects."""

    hits: int
    flips: int
    found: Suspects

    def describe(self) -> str:
        """``4 of 52 newly wrong examples are label-error suspects (12 in digits, ...)``."""
        name = self.found.evalset
        return (
            f"{self.hits} of {self.flips} newly wrong examples are label-error suspects "
            f"({len(self.found.suspects)} in {name}, from {len(self.found.checkpoints)} "
            f"checkpoint(s): evalsentry evalset suspects {name})"
        )


def flipped_suspects(
    history: History,
    evaluation: Mapping[str, Any],
    newly_wrong: np.ndarray,
    columns: Mapping[str, np.ndarray] | None = None,
) -> FlipSuspects | None:
    """How many of one evaluation's newly wrong examples are label-error suspects.

    Found from the other checkpoints evaluated on the same content: not from the evaluation's
    own. None where none can be found: a task without labels, no stored probabilities, or any
    failure (this explains a verdict, never makes one). ``columns``: the evaluation's stored
    outputs, where the caller has read them already.
    """
    if columns is None:
        columns = history.predictions(str(evaluation["evaluation_id"]))
    if columns is None or PROBABILITIES not in columns or not len(newly_wrong):
        return None
    examples = _examples_from(evaluation, columns)
    try:
        found = find_suspects(history, examples, without=[str(evaluation["checkpoint_sha256"])])
    except Exception as exc:  # noqa: BLE001 - an explanation that cannot be given is left out
        log.warning("label-error suspects of %s not found: %s", examples.name, exc)
        return None
    suspect_ids = {s.example_id for s in found.suspects}
    hits = sum(str(e) in suspect_ids for e in newly_wrong)
    return FlipSuspects(hits, len(newly_wrong), found)


def week_suspects(
    history: History, evaluations: Sequence[Mapping[str, Any]], evalsets_dir: str | None = None
) -> dict[str, Suspects | str]:
    """The label-error suspects of each evalset the week's evaluations ran on, by evalset name.

    Found over the evalset's content as evaluated (from the stored outputs, as a FAIL's are);
    where none can be found, why, in words (a task without labels to doubt, no probabilities
    stored, any failure: a report section is never worth the report). Class names are read
    from the evalset's manifest under ``evalsets_dir`` where it still holds that content.
    """
    found: dict[str, Suspects | str] = {}
    settled: set[str] = set()  # found, or tried and failed: one try per evalset
    for evaluation in evaluations:
        name = str(evaluation["evalset"])
        if name in settled or evaluation.get("status") != "ok":
            continue
        columns = history.predictions(str(evaluation["evaluation_id"]))
        if columns is None or PROBABILITIES not in columns:
            found.setdefault(name, NOT_LOOKED_FOR)  # another evaluation of it may hold them
            continue
        examples = _examples_from(evaluation, columns, _class_names(evaluation, evalsets_dir))
        settled.add(name)
        try:
            found[name] = find_suspects(history, examples)
        except Exception as exc:  # noqa: BLE001 - a report section never fails the report
            found[name] = f"not found: {exc}"
    return dict(sorted(found.items()))


def _class_names(evaluation: Mapping[str, Any], evalsets_dir: str | None) -> list[str] | None:
    """The evalset's class names, where its manifest still describes the content evaluated."""
    from evalsentry.evalsets.evalset import evalset_folder, read_spec

    try:
        spec = read_spec(evalset_folder(str(evaluation["evalset"]), evalsets_dir))
    except Exception:  # noqa: BLE001 - an imported or removed evalset: class indices then
        return None
    same = spec.evalset_sha256 == evaluation.get("evalset_sha256")
    return [str(c) for c in spec.classes] if same and spec.classes else None


def _examples_from(
    evaluation: Mapping[str, Any],
    columns: Mapping[str, np.ndarray],
    classes: list[str] | None = None,
) -> Examples:
    """The examples one evaluation's stored outputs describe: ids, given labels, classes."""
    probabilities, target = columns[PROBABILITIES], np.asarray(columns["target"])
    multilabel = "hamming" in columns  # a multi-label evaluation's labels are bit masks
    if multilabel:
        target = (target[:, None] >> np.arange(probabilities.shape[1])) & 1 == 1
    width = probabilities.shape[1]
    return Examples(
        name=str(evaluation["evalset"]),
        sha256=str(evaluation["evalset_sha256"]),
        task="multilabel" if multilabel else "classification",
        classes=classes if classes and len(classes) == width else [str(i) for i in range(width)],
        ids=np.asarray(columns["example_id"]).astype(str),
        targets=target,
    )


def _probabilities(
    history: History, examples: Examples, without: set[str]
) -> tuple[list[str], list[Any], int]:
    """Each checkpoint's newest successful evaluation of these examples' content.

    A week re-run since is included (its outputs are still that checkpoint's). Returns the
    checkpoints' names, their [N, K] arrays in the examples' order, and how many such
    evaluations hold no probabilities.
    """
    frame = history.evaluations(evalset=examples.name, include_superseded=True)
    if frame.empty:
        return [], [], 0
    frame = frame[(frame["status"] == "ok") & (frame["evalset_sha256"] == examples.sha256)]
    frame = frame[~frame["checkpoint_sha256"].isin(without)]
    newest = frame.sort_values("started_at").groupby("checkpoint_sha256").tail(1)
    position = {example: row for row, example in enumerate(examples.ids.tolist())}
    names, arrays, unkept = [], [], 0
    for row in newest.sort_values(["model", "version"]).itertuples():
        columns = history.predictions(str(row.evaluation_id)) or {}
        values = columns.get(PROBABILITIES)
        if values is None or values.ndim != 2:
            unkept += 1
            continue
        order = np.array([position.get(str(e), -1) for e in columns["example_id"]])
        if len(order) != len(position) or (order < 0).any():
            continue  # not every example of this content: not comparable row by row
        aligned = np.empty_like(values)
        aligned[order] = values
        names.append(f"{row.model}@v{row.version}")
        arrays.append(aligned)
    return names, arrays, unkept


def _cleanlab(targets: np.ndarray, mean: np.ndarray, *, multilabel: bool) -> np.ndarray:
    """Row indices of the suspects, most suspect first."""
    from cleanlab.filter import find_label_issues
    from cleanlab.multilabel_classification.filter import find_label_issues as find_multilabel

    options: dict[str, Any] = {"return_indices_ranked_by": "self_confidence", "n_jobs": 1}
    if multilabel:  # n_jobs=1: no process pool inside a flow's worker
        labels = [np.flatnonzero(row).tolist() for row in np.asarray(targets, bool)]
        found = find_multilabel(labels, np.clip(mean, 0.0, 1.0), **options)
    else:
        probabilities = mean / mean.sum(axis=1, keepdims=True)
        found = find_label_issues(np.asarray(targets, np.int64), probabilities, **options)
    return np.asarray(found, np.int64)


def _class_suspect(examples: Examples, row: int, mean: np.ndarray, stacked: np.ndarray) -> Suspect:
    given, agreed = int(examples.targets[row]), int(mean[row].argmax())
    return Suspect(
        example_id=str(examples.ids[row]),
        row=row,
        given=examples.classes[given],
        agreed=examples.classes[agreed],
        confidence=float(mean[row, agreed]),
        given_probability=float(mean[row, given]),
        agreeing=int((stacked[:, row].argmax(axis=1) == agreed).sum()),
    )


def _multilabel_suspect(
    examples: Examples, row: int, mean: np.ndarray, stacked: np.ndarray
) -> Suspect:
    given = np.asarray(examples.targets[row], bool)
    agreed = mean[row] >= 0.5
    # The chance of a whole label set, each label taken on its own.
    chance = np.where(agreed, mean[row], 1.0 - mean[row]).prod()
    given_chance = np.where(given, mean[row], 1.0 - mean[row]).prod()
    return Suspect(
        example_id=str(examples.ids[row]),
        row=row,
        given=_label_set(given, examples.classes),
        agreed=_label_set(agreed, examples.classes),
        confidence=float(chance),
        given_probability=float(given_chance),
        agreeing=int(((stacked[:, row] >= 0.5) == agreed).all(axis=1).sum()),
    )


def _label_set(mask: np.ndarray, classes: list[str]) -> str:
    return "{" + ",".join(c for c, on in zip(classes, mask.tolist(), strict=True) if on) + "}"


def _cleanlab_version() -> str:
    import cleanlab

    return str(cleanlab.__version__)


class HistoryWithout(History):
    """The history as if some examples of some evalsets had never been evaluated.

    Every evaluation's predictions lose the rows of ``excluded[evalset]``; a verdict computed
    from it is the verdict on the evalset without those examples. Only for a report beside the
    full one (``evalsentry gate --without-suspects``): nothing is written through it.
    """

    def __init__(self, root: str, excluded: Mapping[str, set[str]]) -> None:
        super().__init__(root)
        self.excluded = excluded
        self._evalset_of: dict[str, str] | None = None

    def predictions(self, evaluation_id: str) -> dict[str, np.ndarray] | None:
        """The evaluation's per-example outputs without the excluded examples of its evalset."""
        columns = super().predictions(evaluation_id)
        if columns is None:
            return None
        if self._evalset_of is None:
            frame = self.evaluations(include_superseded=True)
            self._evalset_of = dict(zip(frame["evaluation_id"], frame["evalset"], strict=True))
        excluded = self.excluded.get(self._evalset_of.get(evaluation_id, ""), set())
        keep = ~np.isin(np.asarray(columns["example_id"]).astype(str), list(excluded))
        return {name: values[keep] for name, values in columns.items()}
