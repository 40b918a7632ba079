"""register and registry list|show|promote|archive."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from evalsentry.checkpoints.variants import TRANSFORMS
from evalsentry.cli._app import (
    ConfigOption,
    _config,
    _json_arg,
    _registry,
    app,
    registry_app,
)
from evalsentry.cli.output import echo, print_table
from evalsentry.errors import EvalsentryError, UsageError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from evalsentry.checkpoints.registry import Registration, RegistryEntry
    from evalsentry.config import Config

_TRANSFORMS_HELP = "; ".join(f"{name}: {what}" for name, what in TRANSFORMS.items())


CheckpointArgument = Annotated[
    Path | None,
    typer.Argument(
        help="Checkpoint file: written by save_checkpoint, by hand as {model_state_dict, "
        "lineage, ...}, or a bare state dict (with --lineage). None with --variant-of.",
        show_default=False,
    ),
]
VariantOfOption = Annotated[
    str | None,
    typer.Option(
        help="MODEL@vN: register --transform of that version as the line's next version "
        "(evalsentry transforms the parent's weights; no file is given).",
        show_default=False,
    ),
]
TransformOption = Annotated[
    str | None, typer.Option(help=f"With --variant-of: {_TRANSFORMS_HELP}.", show_default=False)
]

ModelOption = Annotated[
    str | None,
    typer.Option(
        help="Model line of this version (with --variant-of: the parent's).", show_default=False
    ),
]
NewModelOption = Annotated[
    bool,
    typer.Option(
        "--new-model",
        help="MODEL starts a new model line (else a model with no line yet is refused: a "
        "typo would start a line every week's run then fails on).",
    ),
]
AllowNonfiniteOption = Annotated[
    bool,
    typer.Option(
        "--allow-nonfinite",
        help="Register weights that hold NaN or infinity (else refused: they predict NaN).",
    ),
]
LineageOption = Annotated[
    Path | None,
    typer.Option(
        help="JSON or YAML lineage for a checkpoint that records none (a bare state dict): "
        "git_sha, data_sha, config, timestamp_utc; seed optional."
    ),
]


@app.command()
def register(
    checkpoint: CheckpointArgument = None,
    model: ModelOption = None,
    variant_of: VariantOfOption = None,
    transform: TransformOption = None,
    stage: Annotated[str, typer.Option(help="candidate, production or archived.")] = "candidate",
    factory: Annotated[
        str | None, typer.Option(help="package.module:callable, for checkpoints without one.")
    ] = None,
    factory_kwargs: Annotated[
        str | None, typer.Option(help="JSON keyword arguments for --factory.")
    ] = None,
    copy: Annotated[bool, typer.Option("--copy", help="Store a copy inside the registry.")] = False,
    new_model: NewModelOption = False,
    allow_nonfinite: AllowNonfiniteOption = False,
    lineage: LineageOption = None,
    config: ConfigOption = None,
) -> None:
    """Register a checkpoint: pin its sha256, size and model factory, record its lineage.

    The model is rebuilt now, as evaluation will: only by a factory in trusted_factories.
    A file already registered for the model is not registered again. The first version of a
    model line needs --new-model. A serving variant (--variant-of MODEL@vN --transform NAME)
    is built by evalsentry from the registered parent.
    """
    from evalsentry.names import check_name

    if variant_of is not None or transform is not None:
        _register_variant(checkpoint, model, variant_of, transform, stage, config)
        return
    if checkpoint is None or model is None:
        raise UsageError(
            "register: give the CHECKPOINT file and --model, or --variant-of MODEL@vN "
            "--transform NAME for a serving variant of a registered version"
        )
    check_name("model", model)
    kwargs = _factory_kwargs(factory, factory_kwargs)
    done = _add_checkpoint(
        checkpoint, model, stage, factory, kwargs, copy, new_model, allow_nonfinite, lineage, config
    )
    _print_registered(done, stage, factory, kwargs)
    if done.new:
        _check_split_leaks(_config(config), model)


def _register_variant(
    checkpoint: Path | None,
    model: str | None,
    variant_of: str | None,
    transform: str | None,
    stage: str,
    config: Path | None,
) -> None:
    """Register the serving variant ``transform`` of ``variant_of`` and say what it is."""
    from evalsentry.checkpoints.registry import Registry
    from evalsentry.checkpoints.variant_registry import register_variant
    from evalsentry.checkpoints.variants import check_transform, parse_ref

    if variant_of is None or transform is None:
        raise UsageError(
            "register: --variant-of MODEL@vN and --transform NAME go together "
            f"(transforms: {', '.join(TRANSFORMS)})"
        )
    if checkpoint is not None:
        raise UsageError(
            f"register: {checkpoint}: a variant is built from its parent by evalsentry; drop "
            "the file, or register it as a version of its own (save_checkpoint(..., "
            "transform=...) records the transform it went through)"
        )
    line, _ = parse_ref(variant_of)
    if model is not None and model != line:
        raise UsageError(
            f"register: --model {model} differs from the line of --variant-of {variant_of}; "
            "a variant is a version of its parent's line (drop --model)"
        )
    check_transform(transform)
    settings = _config(config)
    done = register_variant(
        Registry(settings.registry_url), variant_of, transform, trust=settings.trust, stage=stage
    )
    entry = done.entry
    what = f"{transform} variant of {line}@v{entry.lineage['variant_of']['version']}"
    if done.new:
        echo(
            f"registered {entry.ref} ({entry.stage}): {what}, sha256 {entry.sha256[:12]} -> {entry.uri}"
        )
    else:
        echo(f"{entry.ref} is already the {what} ({entry.stage}); nothing registered")


def _check_split_leaks(settings: Config, model: str) -> None:
    """Where the line names its training data, check each of its evalsets for its rows now.

    The check the weekly run makes, said at once: one line per evalset. It never undoes the
    registration (the file is pinned); ``leak: fail`` is the weekly verdict's to enforce.
    """
    from evalsentry.evalsets.evalset import load_evalset
    from evalsentry.evalsets.leaks import check_leaks, read_training

    binding = settings.models.get(model)
    if binding is None or binding.train_data is None:
        return
    train = settings.resolve(binding.train_data)
    read = functools.cache(read_training)  # once for all the line's evalsets
    for name in binding.evalsets:
        try:
            evalset = load_evalset(name, evalsets_dir=settings.evalsets_dir)
            found = check_leaks(evalset, train, table=read(train))
        except EvalsentryError as exc:
            echo(f"WARN split-leak check of {name} not run: {exc}")
            continue
        if not found.leaks:
            echo(f"split leaks: {found.headline()}")
            continue
        weeks = "FAIL" if binding.leak == "fail" else "WARN"
        echo(
            f"WARN split leaks: {found.headline()}; each week {model} is evaluated on {name} will "
            f"{weeks} (leak: {binding.leak}); list them: evalsentry evalset leak-check {name} "
            f"--train {train}"
        )


def _factory_kwargs(factory: str | None, factory_kwargs: str | None) -> dict[str, Any] | None:
    """The ``--factory-kwargs`` JSON, refused without the ``--factory`` it is for."""
    if factory_kwargs is not None and factory is None:
        raise UsageError(
            "--factory-kwargs: given without --factory, it would be ignored; pass both "
            "(the kwargs are those of --factory)"
        )
    return _json_arg(factory_kwargs, "--factory-kwargs")


def _add_checkpoint(
    checkpoint: Path,
    model: str,
    stage: str,
    factory: str | None,
    kwargs: dict[str, Any] | None,
    copy: bool,
    new_model: bool,
    allow_nonfinite: bool,
    lineage: Path | None,
    config: Path | None,
) -> Registration:
    """Add the checkpoint to the registry, once its model line is known (or ``new_model``)."""
    from evalsentry.checkpoints.lineage import read_lineage_file
    from evalsentry.checkpoints.registry import Registry
    from evalsentry.evaluation.planning import check_model_line
    from evalsentry.history.store import History

    settings = _config(config)
    registry = Registry(settings.registry_url)
    if not new_model:
        check_model_line(model, registry, History(settings.store_url))
    return registry.add(
        checkpoint,
        model,
        trust=settings.trust,
        stage=stage,
        factory=factory,
        factory_kwargs=kwargs,
        copy=copy,
        lineage=read_lineage_file(lineage) if lineage is not None else None,
        allow_nonfinite=allow_nonfinite,
    )


def _print_registered(
    done: Registration, stage: str, factory: str | None, kwargs: dict[str, Any] | None
) -> None:
    """Say what was registered, or (see :func:`_already`) that the file already was."""
    entry = done.entry
    if not done.new:
        _already(entry, stage, factory, kwargs)
        return
    echo(f"registered {entry.ref} ({entry.stage}) sha256 {entry.sha256[:12]} -> {entry.uri}")


def _already(
    entry: RegistryEntry, stage: str, factory: str | None, kwargs: dict[str, Any] | None
) -> None:
    """Say that ``entry`` already pins the file, and what of the request was not done.

    A different ``--factory``/``--factory-kwargs`` is refused (exit 2): the pinned model is what
    runs, and the request cannot be honoured. A different ``--stage`` names the command that
    changes it.
    """
    pinned = entry.lineage["model"]
    said = f"{entry.model} v{entry.version} is already this file (sha256 {entry.sha256[:12]}...)"
    asked = {"factory": factory, "kwargs": kwargs if kwargs is not None else pinned["kwargs"]}
    if factory is not None and asked != {k: pinned[k] for k in ("factory", "kwargs")}:
        raise UsageError(
            f"{said}, pinned to model {pinned['factory']} with kwargs "
            f"{json.dumps(pinned['kwargs'], sort_keys=True)}; --factory {factory} with "
            f"{json.dumps(asked['kwargs'], sort_keys=True)} differs and was not used (a file is "
            "registered once and its pinned model is what runs); nothing registered"
        )
    note = ""
    if entry.stage != stage:
        command = {
            "production": f"promote {entry.model} {entry.version}",
            "candidate": f"promote {entry.model} {entry.version} --stage candidate",
            "archived": f"archive {entry.model} {entry.version}",
        }[stage]
        note = f" (v{entry.version} stays {entry.stage}; make it {stage} with: evalsentry registry {command})"
    echo(f"{said}; nothing registered{note}")


@registry_app.command("list")
def registry_list(
    model: Annotated[str | None, typer.Option(help="Only this model.")] = None,
    config: ConfigOption = None,
) -> None:
    """List registered versions: stage, bound evalsets, last week evaluated, factory, lineage."""
    from evalsentry.checkpoints.registry import Registry
    from evalsentry.evalsets.evalset import list_evalsets
    from evalsentry.evaluation.planning import binding_text

    settings = _config(config)
    listed = Registry(settings.registry_url).list(model)
    by_sha = {(e.model, e.sha256): e.version for e in listed}
    made = {e.ref: _made_from(e, {s: v for (m, s), v in by_sha.items() if m == e.model}) for e in listed}  # fmt: skip

    def beside_parent(e: RegistryEntry) -> tuple[str, int, int]:
        """Each variant or student right after the version it was made from."""
        parent = made[e.ref]
        return (e.model, e.version, 0) if parent is None else (e.model, parent[0], e.version)

    entries = sorted(listed, key=beside_parent)
    weeks = _last_weeks(settings, model)
    available = list_evalsets(settings.evalsets_dir)
    rows = [
        [
            e.ref,
            _variant_text(made[e.ref], e),
            e.stage,
            binding_text(e.model, settings, available),
            weeks.get((e.model, e.version), "-"),
            e.lineage["model"]["factory"],
            e.sha256[:12],
            str(e.lineage.get("git_sha", ""))[:10]
            + ("+dirty" if e.lineage.get("git_dirty") else ""),
            str(e.lineage.get("data_sha", ""))[:12],
            "" if e.lineage.get("seed") is None else e.lineage["seed"],
            str(e.lineage.get("timestamp_utc", ""))[:19],
            e.registered_at[:19],
        ]
        for e in entries
    ]
    columns = [
        "version",
        "variant of",
        "stage",
        "evalsets",
        "last week",
        "factory",
        "sha256",
        "git",
        "data",
        "seed",
        "trained",
        "registered",
    ]
    print_table("Registered checkpoints", columns, rows)


def _made_from(entry: RegistryEntry, by_sha: Mapping[str, int]) -> tuple[int, str] | None:
    """``(2, "dynamic-int8")`` for a variant of v2, ``(2, "student")`` for a student of v2."""
    parent, teacher = entry.lineage.get("variant_of"), entry.lineage.get("teacher")
    if isinstance(parent, dict) and isinstance(parent.get("version"), int):
        return parent["version"], str(entry.lineage["model"].get("transform"))
    if isinstance(teacher, dict) and str(teacher.get("sha256")).lower() in by_sha:
        return by_sha[str(teacher["sha256"]).lower()], "student"
    return None


def _variant_text(made: tuple[int, str] | None, entry: RegistryEntry) -> str:
    """``v2 dynamic-int8`` for a variant of v2, ``v2 student``; empty for a version of its own."""
    if made is not None:
        return f"v{made[0]} {made[1]}"
    if entry.lineage.get("teacher") is not None:
        return "student (teacher not registered)"
    return str(entry.lineage["model"].get("transform") or "")


@registry_app.command("show")
def registry_show(
    model: Annotated[str, typer.Argument(help="Model name.")],
    version: Annotated[int | None, typer.Option(help="Version number.")] = None,
    stage: Annotated[str | None, typer.Option(help="Newest version in this stage.")] = None,
    config: ConfigOption = None,
) -> None:
    """Print one registry entry as JSON (default: the newest version).

    lineage.model is what evaluation runs: the factory and kwargs pinned at registration.
    """
    from evalsentry.checkpoints.registry import Registry

    settings = _config(config)
    registry = Registry(settings.registry_url)
    if version is not None:
        entry = registry.show(model, version)
    elif stage is not None:
        entry = registry.resolve(model, stage)
    else:
        entries = registry.list(model)
        if not entries:
            registry.show(model, 1)  # raises NotRegistered with a did-you-mean
        entry = entries[-1]
    shown = entry.model_dump(mode="json")
    shown["binding"] = settings.bound_evalsets(entry.model)  # null: bound to no evalset
    shown["last_week"] = _last_weeks(settings, entry.model).get((entry.model, entry.version))
    echo(json.dumps(shown, indent=2, sort_keys=True))


@registry_app.command("promote")
def registry_promote(
    model: Annotated[str, typer.Argument(help="Model name.")],
    version: Annotated[int, typer.Argument(help="Version number.")],
    stage: Annotated[str, typer.Option(help="Target stage.")] = "production",
    config: ConfigOption = None,
) -> None:
    """Move a version to a stage; promoting to production archives the previous one."""
    entry = _registry(config).promote(model, version, stage)
    echo(f"{entry.ref} is now {entry.stage}")


@registry_app.command("archive")
def registry_archive(
    model: Annotated[str, typer.Argument(help="Model name.")],
    version: Annotated[int, typer.Argument(help="Version number.")],
    config: ConfigOption = None,
) -> None:
    """Retire a version: never evaluated again; its entry and file are kept for audit."""
    registry = _registry(config)
    was = registry.show(model, version).stage
    if was == "archived":
        echo(f"{model}@v{version} is already archived; nothing changed")
        return
    entry = registry.archive(model, version)
    line = f"{entry.ref} is now archived (was {was}); it is never evaluated again"
    if was == "production":
        line += (
            f"; {model} has no production version now: promote one with "
            f"`evalsentry registry promote {model} VERSION`"
        )
    echo(line)


def _last_weeks(settings: Config, model: str | None = None) -> dict[tuple[str, int], str]:
    """The newest week each (model, version) was evaluated in (ok or error), from the history."""
    from evalsentry.history.store import History
    from evalsentry.weeks import latest_week

    frame = History(settings.store_url).evaluations(model=model)
    frame = frame[frame["version"].notna()]
    weeks: dict[tuple[str, int], str] = {}
    for (name, version), group in frame.groupby(["model", "version"]):
        week = latest_week(group["week"])
        if week is not None:
            weeks[(str(name), int(version))] = week
    return weeks
