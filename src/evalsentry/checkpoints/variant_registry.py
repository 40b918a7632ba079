"""Registering a serving variant: ``evalsentry register --variant-of MODEL@vN --transform NAME``.

See :mod:`evalsentry.checkpoints.variants` for the transforms and how a variant is loaded.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from evalsentry.checkpoints.checkpoint import load_checkpoint
from evalsentry.checkpoints.registry import Registration, Registry
from evalsentry.checkpoints.safetensors_file import SUFFIX, safetensors_bytes
from evalsentry.checkpoints.variants import (
    apply_transform,
    check_transform,
    parse_ref,
    portable_state,
)
from evalsentry.errors import UsageError
from evalsentry.trust import Trust

#: Lineage fields a variant does not take from its parent: training cost is the parent's bill.
NOT_INHERITED = ("training_cost", "variant_of")


def register_variant(
    registry: Registry, parent_ref: str, transform: str, *, trust: Trust, stage: str = "candidate"
) -> Registration:
    """Register ``transform`` of the version ``parent_ref`` as its line's next version.

    The parent is loaded as evaluation loads it (pinned sha256 and model), transformed, and its
    weights written as a safetensors file the registry keeps a copy of; the variant's lineage is
    the parent's (code, data, config, seed) with the transform in its model and ``variant_of``
    naming the parent, without the parent's training cost. Asked again, the version already
    holding that transform of that parent is returned (``new=False``): nothing is registered.

    Raises:
        UsageError: ``parent_ref`` is not ``MODEL@vN``, or names a variant itself.
        UnknownTransform, NotRegistered, VersionNotRegistered, and what loading the parent raises.

    """
    model, version = parse_ref(parent_ref)
    check_transform(transform)
    parent = registry.show(model, version)
    pinned = parent.lineage["model"]
    if pinned.get("transform") is not None:
        made = parent.lineage.get("variant_of")
        source = f" (v{made['version']})" if isinstance(made, dict) and "version" in made else ""
        raise UsageError(
            f"--variant-of: {parent.ref} is itself a {pinned['transform']} variant; make "
            f"variants of the float version it came from{source}"
        )
    for entry in registry.list(model):
        made = entry.lineage.get("variant_of")
        if (
            isinstance(made, dict)
            and made.get("sha256") == parent.sha256
            and entry.lineage["model"].get("transform") == transform
        ):
            return Registration(entry, new=False)
    loaded = load_checkpoint(
        parent.uri,
        trust=trust,
        expected_sha256=parent.sha256,
        factory=pinned["factory"],
        factory_kwargs=pinned["kwargs"],
    )
    lineage = {k: v for k, v in parent.lineage.items() if k not in NOT_INHERITED}
    lineage["model"] = {**pinned, "transform": transform}
    lineage["variant_of"] = {"version": version, "sha256": parent.sha256}
    written = safetensors_bytes(
        portable_state(apply_transform(loaded.model, transform)), lineage=lineage, metrics={}
    )
    with tempfile.TemporaryDirectory(prefix="evalsentry-variant-") as folder:
        file = Path(folder) / f"{model}-v{version}-{transform}{SUFFIX}"
        file.write_bytes(written)
        return registry.add(file, model, trust=trust, stage=stage, copy=True)
