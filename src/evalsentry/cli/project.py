"""init: a starter project (evalsentry.yaml, prefect.yaml, evalsets/) in a team's own folder."""

from __future__ import annotations

import shlex
from importlib import resources
from pathlib import Path
from typing import Annotated

import typer

from evalsentry.cli._app import app
from evalsentry.errors import UsageError

#: The package data folder the starter files are copied from (named so it cannot be imported).
TEMPLATES = "project-template"
GITIGNORE = ".gitignore"
#: The line of the starter .gitignore that keeps the history and registry out of git.
STORE_IGNORE = ".evalsentry/"
#: Refused when present: the project files a second ``init`` must not replace.
PROJECT_FILES = ("evalsentry.yaml", "prefect.yaml")
EVALSETS = "evalsets"
#: An empty file that keeps the empty evalsets folder in git.
KEEP = ".gitkeep"


def _template(name: str) -> str:
    return (resources.files("evalsentry") / TEMPLATES / name).read_text(encoding="utf-8")


def _check_writable(root: Path) -> None:
    """Refuse before writing anything: a file where the folder should be, or a file in the way."""
    if root.exists() and not root.is_dir():
        raise UsageError(f"{root}: a file, not a folder; give the folder to set up the project in")
    for name in PROJECT_FILES:
        target = root / name
        if target.exists() or target.is_symlink():
            raise UsageError(
                f"{target}: already exists; init never overwrites a file. Move it aside, or run "
                "`evalsentry init OTHER_DIR` and merge the two by hand"
            )
    evalsets = root / EVALSETS
    if evalsets.exists() and not evalsets.is_dir():
        raise UsageError(f"{evalsets}: a file, not a folder; move it aside (it holds the evalsets)")


def write_project(root: Path) -> list[tuple[str, Path, str]]:
    """Write the starter files into ``root`` (created as needed).

    Nothing is written unless every project file can be: an existing evalsentry.yaml or
    prefect.yaml is refused, never replaced. An existing ``evalsets/`` folder and .gitignore are
    kept as they are.

    Returns:
        For each file: ``wrote`` or ``kept``, its path, and a note for the user (or "").

    Raises:
        UsageError: naming the file in the way, or the one that could not be written.
    """
    _check_writable(root)
    done: list[tuple[str, Path, str]] = []
    try:
        root.mkdir(parents=True, exist_ok=True)
        for name in PROJECT_FILES:
            target = root / name
            with target.open("x", encoding="utf-8") as handle:  # "x": never replace a file
                handle.write(_template(name))
            done.append(("wrote", target, ""))
        evalsets = root / EVALSETS
        if evalsets.is_dir() and any(evalsets.iterdir()):
            done.append(("kept", evalsets, ""))
        else:
            evalsets.mkdir(exist_ok=True)
            (evalsets / KEEP).touch()
            done.append(("wrote", evalsets / KEEP, ""))
        gitignore = root / GITIGNORE
        if not gitignore.exists():
            gitignore.write_text(_template("gitignore"), encoding="utf-8")
            done.append(("wrote", gitignore, ""))
        elif STORE_IGNORE not in gitignore.read_text(encoding="utf-8", errors="replace"):
            note = f"add {STORE_IGNORE} to it: the history and registry are not for git"
            done.append(("kept", gitignore, note))
    except OSError as exc:
        raise UsageError(
            f"{exc.filename or root}: cannot write it ({exc.strerror or exc}); "
            "give a folder you can write to"
        ) from None
    return done


NEXT_STEPS = """\
Next steps{where}:
  1. Freeze an evaluation set from a CSV or Parquet file:
       evalsentry evalset freeze rows.csv --name NAME --task classification --target LABEL --inputs a,b,c
  2. Save checkpoints in training code with evalsentry.save_checkpoint(...), list the module of
     your model class under trusted_factories: in evalsentry.yaml, and register one:
       evalsentry register model.pt --model MODEL --new-model --stage production
  3. Bind each model to its evalsets under models: in evalsentry.yaml
  4. Run a week now, then gate it:
       evalsentry run
       evalsentry gate
  5. Deploy the Monday 06:00 UTC schedule, and run its runs on a worker:
       prefect work-pool create gpu --type process
       EVALSENTRY_PROJECT_DIR={folder} prefect deploy --all
       prefect worker start --pool gpu"""


@app.command()
def init(
    folder: Annotated[
        Path, typer.Argument(help="Folder to set up (created if missing).", show_default=True)
    ] = Path(),
) -> None:
    """Write a starter project: evalsentry.yaml, prefect.yaml, evalsets/ and a .gitignore.

    Never overwrites: an existing evalsentry.yaml or prefect.yaml is refused (exit 2) and
    nothing is written. The deployments run the flows of the installed evalsentry package.
    """
    for what, path, note in write_project(folder):
        typer.echo(f"{what} {path}" + (f" ({note})" if note else ""))
    here = folder.resolve() == Path.cwd().resolve()
    where = "" if here else f" (first: cd {shlex.quote(str(folder))})"
    typer.echo(NEXT_STEPS.format(where=where, folder=shlex.quote(str(folder.resolve()))))
