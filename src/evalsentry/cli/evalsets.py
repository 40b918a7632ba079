"""evalset freeze|verify|seal|list|show|suspects|leak-check."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from evalsentry.cli._app import (
    ConfigOption,
    _config,
    _csv,
    _short,
    evalset_app,
)
from evalsentry.cli.output import echo, print_table
from evalsentry.errors import UsageError

#: The tasks an evalset can be frozen for (``EvalsetSpec.task``), kept here to spare the import.
TASK_NAMES = ("classification", "regression", "multilabel", "language_modeling", "multiple_choice")

if TYPE_CHECKING:
    from evalsentry.config import Config
    from evalsentry.evalsets.evalset import EvalsetSpec
    from evalsentry.evalsets.inputs import InputsSpec


InputsOption = Annotated[
    str | None, typer.Option(help="Feature columns (a,b,c), or one list column.")
]
ShapeOption = Annotated[
    str | None, typer.Option(help="Shape of one example of a list column, e.g. 1,8,8.")
]
IdOption = Annotated[
    str | None, typer.Option("--id", help="Id column (default: a deterministic one is added).")
]
ClassesOption = Annotated[
    str | None,
    typer.Option(
        help="Class labels in the order of the model's logit columns, e.g. 1,2,3 "
        "(default: the labels in natural order, class_2 before class_10)."
    ),
]
OutputsOption = Annotated[
    str,
    typer.Option(
        help="What the classifier returns: logits, or probabilities (it ends in a softmax)."
    ),
]


@evalset_app.command("freeze")
def evalset_freeze(
    source: Annotated[Path, typer.Argument(help="Parquet or CSV file with the rows to freeze.")],
    name: Annotated[str, typer.Option(help="Evalset name (its folder under evalsets/).")],
    task: Annotated[str, typer.Option(help=f"One of: {', '.join(TASK_NAMES)}.")],
    target: Annotated[str, typer.Option(help="Target column.")],
    inputs: InputsOption = None,
    shape: ShapeOption = None,
    dtype: Annotated[str, typer.Option(help="Tensor dtype of a list column.")] = "float32",
    tokens: Annotated[str | None, typer.Option(help="List column of token ids.")] = None,
    pad_id: Annotated[int | None, typer.Option(help="Token id padding batches.")] = None,
    max_length: Annotated[int | None, typer.Option(help="Most tokens a row may have.")] = None,
    truncation: Annotated[str, typer.Option(help="Longer rows: error, left, right.")] = "error",
    named: Annotated[list[str] | None, typer.Option(help="More inputs: kw=col1,col2.")] = None,
    choices: Annotated[str | None, typer.Option(help="Continuations column.")] = None,
    scoring: Annotated[str | None, typer.Option(help="Continuations: sum or mean.")] = None,
    id_column: IdOption = None,
    slices: Annotated[
        str | None, typer.Option(help="Columns to report metrics per value of.")
    ] = None,
    classes: ClassesOption = None,
    outputs: OutputsOption = "logits",
    version: Annotated[int, typer.Option(help="Version number recorded in the manifest.")] = 1,
    description: Annotated[str, typer.Option(help="What the data is.")] = "",
    provenance: Annotated[str, typer.Option(help="Where it comes from.")] = "",
    license_: Annotated[str, typer.Option("--license", help="Its license.")] = "",
    config: ConfigOption = None,
) -> None:
    """Freeze a dataset into a hash-pinned evalset with a generated expectation suite."""
    from evalsentry.evalsets.freeze import freeze_evalset, read_source

    token_options: dict[str, Any] = {"pad_id": pad_id, "max_length": max_length}
    token_options["truncation"] = truncation
    token_options |= {"tokens": tokens, "named": named, "choices": choices}
    spec_inputs = _freeze_options(inputs, shape, dtype, task, outputs, **token_options)
    dest = Path(_config(config).evalsets_dir) / name
    spec = freeze_evalset(
        read_source(source),
        dest,
        name=name,
        task=task,  # type: ignore[arg-type]
        target=target,
        inputs=spec_inputs,
        id_column=id_column,
        slices=_csv(slices),
        classes=_csv(classes) if classes is not None else None,
        outputs=outputs,  # type: ignore[arg-type]
        scoring=scoring,  # type: ignore[arg-type]
        version=version,
        description=description,
        provenance=provenance,
        license=license_,
        source=str(source),
    )
    _print_frozen(spec, dest, config)


def _freeze_options(
    inputs: str | None,
    shape: str | None,
    dtype: str,
    task: str,
    outputs: str,
    **token_options: Any,
) -> InputsSpec:
    """The inputs spec of --inputs/--shape/--dtype or --tokens and its options, all checked."""
    from evalsentry.evalsets.inputs import InputsSpec

    columns = _csv(inputs)
    if task not in TASK_NAMES:
        raise UsageError(f"--task: {task!r} is not one of {', '.join(TASK_NAMES)}")
    if outputs not in ("logits", "probabilities"):
        raise UsageError(f"--outputs: {outputs!r} is not logits or probabilities")
    if (inputs is None) == (token_options["tokens"] is None):
        raise UsageError("give --inputs (feature or tensor columns) or --tokens (token ids)")
    try:
        if token_options["tokens"] is not None:
            named = _named(token_options.pop("named") or [])
            return InputsSpec(**token_options, named=named or None)
        if shape:
            return InputsSpec(column=columns[0], shape=[int(d) for d in _csv(shape)], dtype=dtype)
        return InputsSpec(columns=columns)
    except ValueError as exc:
        flags = "--tokens" if token_options["tokens"] else "--inputs/--shape"
        raise UsageError(f"{flags}: {exc}".splitlines()[0]) from None


def _named(values: list[str]) -> dict[str, list[str]]:
    """``--named price=open,close`` as ``{"price": ["open", "close"]}``."""
    named = {}
    for value in values:
        keyword, _, columns = value.partition("=")
        if not keyword.strip() or not _csv(columns):
            raise UsageError(f"--named {value!r}: write it as keyword=column1,column2")
        named[keyword.strip()] = _csv(columns)
    return named


def _print_pad_inside(folder: Path, pad_id: int) -> None:
    """Say where the pad id is also a real token: the mask marks it real there (README)."""
    from evalsentry.evalsets.evalset import load_evalset

    rows = load_evalset(folder).token_inputs().tokens.rows_holding(pad_id)
    if len(rows):
        echo(
            f"note: the pad id {pad_id} is a token inside {len(rows)} row(s) (first: row "
            f"{int(rows[0])}); the attention mask marks it real (1) there, as each row's length "
            "says. A model that masks by id would drop it: freeze with another --pad-id"
        )


def _print_frozen(spec: EvalsetSpec, dest: Path, config: Path | None) -> None:
    """What was frozen where, the model contract it states, and the resolution it can offer."""
    echo(f"froze {spec.name} v{spec.version}: {spec.num_rows} rows -> {dest}")
    listed = f": {', '.join(spec.inputs.columns)}" if spec.inputs.columns else ""
    echo(f"model input: {spec.inputs.contract()}{listed}")
    if spec.task in ("language_modeling", "multiple_choice"):
        echo("model output: next-token logits [N, T, V] (position t predicts token t+1)")
    elif spec.classes is not None:
        what = "label" if spec.task == "multilabel" else "class"
        echo(
            f"model output: {spec.outputs} [N, {len(spec.classes)}], one column per {what} in "
            f"this order: {', '.join(map(str, spec.classes))}"
        )
    else:
        echo("model output: predictions [N] or [N, 1]")
    echo(f"evalset_sha256 {spec.evalset_sha256}")
    if spec.inputs.is_tokens:
        _print_pad_inside(dest, int(spec.inputs.pad_id or 0))
    # A new evalset has no history: the resolution rests on the assumed churn.
    _print_resolution(_config(config), spec.name, measured=False)


@evalset_app.command("verify")
def evalset_verify(
    name: Annotated[str, typer.Argument(help="Evalset name (a folder under evalsets/).")],
    config: ConfigOption = None,
) -> None:
    """Re-hash every file, check the pinned fields, run the expectation suite; exit 1 on a failure."""
    from evalsentry.evalsets.check import validate_evalset
    from evalsentry.evalsets.evalset import evalset_folder, read_spec
    from evalsentry.evalsets.identity import identity_gaps

    evalsets_dir = _config(config).evalsets_dir
    summary = validate_evalset(name, evalsets_dir)
    spec = read_spec(evalset_folder(name, evalsets_dir))
    rows = [
        [
            "ok" if o.success else "FAILED",
            o.expectation,
            o.column or "",
            _short(o.observed),
            "" if o.unexpected_count is None else o.unexpected_count,
            _short(o.unexpected_examples) if o.unexpected_examples else "",
        ]
        for o in summary.outcomes
    ]
    columns = ["", "expectation", "column", "observed", "unexpected", "examples"]
    print_table(f"Evalset {name}: files match the manifest", columns, rows)
    if not summary.success:
        echo(
            f"error: evalset {name!r} fails {summary.failed} of {summary.evaluated} expectations",
            err=True,
        )
        raise typer.Exit(1)
    for gap in identity_gaps(spec):
        echo(
            f"warning: evalset {name!r}: {gap} not pinned (identity version 1); "
            f"`evalsentry evalset seal {name}` pins it, evalset_sha256 unchanged",
            err=True,
        )
    echo(f"evalset {name!r} verified: {summary.evaluated} expectations pass")


@evalset_app.command("seal")
def evalset_seal(
    name: Annotated[str, typer.Argument(help="Evalset name (a folder under evalsets/).")],
    config: ConfigOption = None,
) -> None:
    """Pin the classes, metrics and slices of an evalset frozen before identity version 2.

    Its evalset_sha256, and so its history, stays the same. Check the manifest first
    (`evalset show`): the fields are pinned as they are now.
    """
    from evalsentry.evalsets.freeze import seal_evalset

    spec = seal_evalset(name, _config(config).evalsets_dir)
    echo(
        f"sealed {spec.name}: {', '.join(spec.field_sha256 or {})} pinned; "
        f"evalset_sha256 {spec.evalset_sha256} unchanged"
    )


@evalset_app.command("list")
def evalset_list(config: ConfigOption = None) -> None:
    """List the evalsets with version, rows and identity hash."""
    from evalsentry.evalsets.evalset import list_evalsets, read_spec
    from evalsentry.storage import join

    root = _config(config).evalsets_dir
    specs = [read_spec(join(root, name)) for name in list_evalsets(root)]
    rows = [
        [
            s.name,
            s.version,
            s.task,
            s.num_rows,
            s.evalset_sha256[:12],
            f"v{s.identity_version}"
            + (" sealed" if s.identity_version == 1 and s.field_sha256 else ""),
            s.frozen_at,
        ]
        for s in specs
    ]
    print_table(
        f"Evalsets in {root}",
        ["name", "version", "task", "rows", "sha256", "identity", "frozen"],
        rows,
    )


@evalset_app.command("show")
def evalset_show(
    name: Annotated[str, typer.Argument(help="Evalset name (a folder under evalsets/).")],
    config: ConfigOption = None,
) -> None:
    """Print an evalset's manifest, then (as YAML comments) what tolerances it can certify."""
    from evalsentry.evalsets.evalset import evalset_folder, read_manifest_text

    settings = _config(config)
    echo(read_manifest_text(evalset_folder(name, settings.evalsets_dir)), nl=False)
    _print_resolution(settings, name, measured=True, prefix="# ")


def _print_resolution(settings: Config, name: str, *, measured: bool, prefix: str = "") -> None:
    """Per gated metric, print the smallest tolerance the evalset can certify.

    A tolerance configured below it is also one warning line on stderr; the exit code stays.
    """
    from evalsentry.gate.resolution import (
        evalset_resolutions,
        measured_comparisons,
        resolution_heading,
    )

    comparisons = measured_comparisons(settings) if measured else None
    found = evalset_resolutions(settings, name, comparisons)
    if not found:
        return
    echo(prefix + resolution_heading(found[0].rows, settings.gate.alpha))
    for resolution in found:
        echo(f"{prefix}  {resolution.line()}")
    for resolution in found:
        if resolution.too_fine:
            echo(f"warning: {resolution.warning()}", err=True)


@evalset_app.command("suspects")
def evalset_suspects(
    name: Annotated[str, typer.Argument(help="Evalset name (a folder under evalsets/).")],
    output: Annotated[str, typer.Option("--format", help="table or json.")] = "table",
    config: ConfigOption = None,
) -> None:
    """List the examples whose given label the evaluated checkpoints agree is wrong.

    Found with cleanlab's confident learning from the class probabilities every evaluation of
    the evalset's current content keeps (classification and multi-label evalsets), most
    suspect first. Each is worth a look, not a verdict: nothing is dropped from the gate.
    """
    import json

    from evalsentry.cli import ci
    from evalsentry.evalsets.evalset import load_evalset
    from evalsentry.gate.suspects import find_suspects

    if output not in ("table", "json"):
        raise UsageError(f"--format: {output!r} is not table or json")
    settings, history = ci.project(config)
    found = find_suspects(history, load_evalset(name, evalsets_dir=settings.evalsets_dir))
    if output == "json":
        echo(json.dumps(found.to_dict(), indent=2))
        return
    if not found.suspects:
        echo(found.headline())
        return
    rows = [
        [
            s.example_id,
            s.row,
            s.given,
            f"{s.given_probability:.3f}",
            s.agreed,
            f"{s.confidence:.3f}",
            f"{s.agreeing} of {len(found.checkpoints)}",
        ]
        for s in found.suspects
    ]
    columns = ["example", "row", "given", "p(given)", "agreed", "p(agreed)", "checkpoints agreeing"]
    print_table(found.headline(), columns, rows)


@evalset_app.command("leak-check")
def evalset_leak_check(
    name: Annotated[str, typer.Argument(help="Evalset name (a folder under evalsets/).")],
    train: Annotated[
        str,
        typer.Option(
            help="The training data: a Parquet or CSV file, a folder or a glob of them, holding "
            "the evalset's input columns."
        ),
    ],
    decimals: Annotated[
        int,
        typer.Option(help="Near rows (tabular, images): equal after rounding to this many places."),
    ] = 2,
    jaccard: Annotated[
        float,
        typer.Option(
            help="Near rows (token sequences): this 5-gram Jaccard similarity at least "
            "(MinHash LSH, confirmed exactly; at most 0.99)."
        ),
    ] = 0.8,
    fail_on_leak: Annotated[
        bool, typer.Option(help="Exit 1 when any example is in the training data (else 0).")
    ] = False,
    output: Annotated[str, typer.Option("--format", help="table or json.")] = "table",
    config: ConfigOption = None,
) -> None:
    """List the evalset's examples that are also in the training data: exact, near, 13-gram.

    A leaked example flatters every model trained on it. Exit 0 (a warning) unless
    --fail-on-leak is given and a leak is found.
    """
    import json

    from evalsentry.evalsets.evalset import load_evalset
    from evalsentry.evalsets.leaks import check_leaks

    if output not in ("table", "json"):
        raise UsageError(f"--format: {output!r} is not table or json")
    if decimals < 0:
        raise UsageError(f"--decimals: {decimals} is negative; give the places to round to")
    settings = _config(config)
    evalset = load_evalset(name, evalsets_dir=settings.evalsets_dir)
    found = check_leaks(evalset, train, decimals, jaccard)
    if output == "json":
        echo(json.dumps(found.to_dict(), indent=2))
    elif not found.leaks:
        echo(found.headline())
    else:
        tokens = evalset.spec.inputs.is_tokens
        rows = [
            [leak.example_id, leak.row, leak.kind, _blank(leak.train_row), _share(leak, tokens)]
            for leak in found.leaks
        ]
        columns = ["example", "row", "kind", "training row", "overlap"]
        print_table("WARN " + found.headline(), columns, rows)
    if fail_on_leak and found.leaks:
        raise typer.Exit(1)


def _blank(value: object) -> object:
    return "" if value is None else value


def _share(leak: Any, tokens: bool) -> str:
    """``40% of 13-grams``, ``Jaccard 0.86`` (a near token row); "" where the row is equal."""
    if leak.kind.endswith("gram"):
        return f"{leak.share:.0%} of 13-grams"
    return f"Jaccard {leak.share:.2f}" if tokens and leak.kind == "near" else ""
