"""An evalset's identity: the versioned ``evalset_sha256`` and the per-field pins behind it.

``evalset_sha256`` is sha256 over the canonical JSON (sorted keys, no spaces) of the data files'
hashes (``[[path, sha256], ...]`` sorted by path) and the manifest fields that change results.
It changes when any of them changes, and not when a description is edited. The scheme is
versioned by ``identity_version`` so that no recorded hash ever changes meaning:

- 2 (written by every freeze now): ``files``, ``identity_version`` and ``RESULT_FIELDS`` (task,
  inputs, target, id_column, classes in order, metrics, slices). ``field_sha256`` also pins each
  of those fields on its own, so a changed field is named, not just detected.
- 1 (absent = 1; evalsets frozen before version 2): ``files``, task, inputs, target, id_column
  only, exactly as they were hashed then. Their classes are checked against the class list the
  expectation suite pinned at freeze (in order). ``evalset seal`` adds ``field_sha256`` to such
  a manifest, pinning the other fields without changing its ``evalset_sha256``; until then a
  ``metrics`` list cannot be vouched for and is refused, and ``slices`` are reported unpinned.

Pure functions over a parsed manifest; reading files is the caller's (``evalsets``) business.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from evalsentry.errors import CheckFailed, EvalsetTampered

if TYPE_CHECKING:
    from evalsentry.evalsets.evalset import DataFile, EvalsetSpec

IDENTITY_VERSION = 2  # what freeze writes
RESULT_FIELDS = ("task", "inputs", "target", "id_column", "classes", "metrics", "slices")
#: Results-changing fields added since version 2: hashed (and pinned) only when set to other
#: than their default, so an evalset frozen before keeps its identity.
OPTIONAL_RESULT_FIELDS = ("outputs", "scoring")
V1_FIELDS = ("task", "inputs", "target", "id_column")
SUITE_CLASSES = "expect_column_distinct_values_to_equal_set"  # written from the class list


class EvalsetFieldChanged(EvalsetTampered):
    """A manifest field that changes results differs from what was frozen; ``fields`` names it."""

    def __init__(self, path: object, fields: Sequence[str], problem: str) -> None:
        self.path, self.fields = str(path), list(fields)
        self.expected, self.actual = "(as frozen)", problem
        CheckFailed.__init__(self, f"{self.path}: {', '.join(self.fields)}: {problem}")


def _digest(value: object) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def evalset_identity(
    files: Sequence[DataFile], fields: Mapping[str, Any], version: int = IDENTITY_VERSION
) -> str:
    """The evalset's identity hash under scheme ``version``.

    Args:
        files: the pinned data files.
        fields: the manifest's ``RESULT_FIELDS`` as canonical JSON values (``result_fields()``).
        version: 1 hashes only ``V1_FIELDS``, exactly as evalsets frozen before version 2 were.
    """
    canonical: dict[str, Any] = {"files": sorted([f.path, f.sha256] for f in files)}
    if version == 1:
        canonical.update({name: fields[name] for name in V1_FIELDS})
    else:
        canonical.update({name: fields[name] for name in _present(fields)})
        canonical["identity_version"] = version
    return _digest(canonical)


def _present(fields: Mapping[str, Any]) -> list[str]:
    return [*RESULT_FIELDS, *(name for name in OPTIONAL_RESULT_FIELDS if name in fields)]


def field_digests(fields: Mapping[str, Any]) -> dict[str, str]:
    """sha256 of each result-changing field on its own, so a changed field can be named."""
    return {name: _digest(fields[name]) for name in _present(fields)}


def check_fields(spec: EvalsetSpec, where: str, suite: Callable[[], Mapping[str, Any]]) -> None:
    """Check a manifest's results-changing fields against what freeze pinned.

    Each field with a pinned hash (``field_sha256``) must still match it; a version-1 manifest
    without them has its classes checked against the suite's and may not list metrics; then
    ``evalset_sha256`` must match the manifest.

    Args:
        spec: the parsed manifest.
        where: the manifest's path, for messages.
        suite: reads the expectation suite (only a version-1 manifest without pins needs it).

    Raises:
        EvalsetFieldChanged: naming the field(s) that changed since freeze.
        EvalsetTampered: ``evalset_sha256`` does not match the files and fields it covers.
    """
    if spec.field_sha256 is not None:
        digests = field_digests(spec.result_fields())
        changed = [
            name
            for name in (*RESULT_FIELDS, *OPTIONAL_RESULT_FIELDS)
            if spec.field_sha256.get(name) != digests.get(name)
        ]
        if changed:
            raise EvalsetFieldChanged(
                where,
                changed,
                "changed since freeze (no longer matches its field_sha256) and results depend "
                "on it; restore the frozen value, or freeze the data as a new evalset version",
            )
    elif spec.identity_version == 1:
        check_v1_classes(spec, where, suite)
        unpinned = [name for name in OPTIONAL_RESULT_FIELDS if name in spec.result_fields()]
        if unpinned:
            raise EvalsetFieldChanged(
                where,
                unpinned,
                "identity version 1 does not pin it, so it cannot be vouched for; remove it, or "
                "freeze the data as a new evalset version with it",
            )
        if spec.metrics is not None:
            raise EvalsetFieldChanged(
                where,
                ["metrics"],
                "identity version 1 does not pin this list, so it cannot be vouched for; if it "
                f"is what was frozen, pin it with `evalsentry evalset seal {spec.name}`, "
                "else remove it",
            )
    actual = spec.identity()
    if actual != spec.evalset_sha256:
        raise EvalsetTampered(where, spec.evalset_sha256, actual)


def check_v1_classes(spec: EvalsetSpec, where: str, suite: Callable[[], Mapping[str, Any]]) -> None:
    """Version-1 classes against the class list the suite pinned at freeze, in order.

    Raises:
        EvalsetFieldChanged: naming ``classes``, with both lists.
    """
    if spec.task != "classification" and spec.classes is None:
        return
    pinned = next(
        (
            e["kwargs"].get("value_set")
            for e in suite().get("expectations", [])
            if e.get("type") == SUITE_CLASSES and e.get("kwargs", {}).get("column") == spec.target
        ),
        None,
    )
    if pinned != spec.classes:
        raise EvalsetFieldChanged(
            where,
            ["classes"],
            f"{spec.classes} differs from {pinned}, the classes in order as frozen (pinned by "
            "the expectation suite; their order maps model outputs to labels); restore the "
            "frozen list, or freeze the data as a new evalset version",
        )


def identity_gaps(spec: EvalsetSpec) -> list[str]:
    """Results-changing fields of ``spec`` that no hash or suite pins (version 1, not sealed)."""
    if spec.identity_version != 1 or spec.field_sha256 is not None:
        return []
    return ["slices"] if spec.slices else []
