"""init: a starter project in a team's own folder; lock: the pins evalsentry was tested with.

``init`` writes evalsentry.yaml, prefect.yaml, evalsets/ and evalsentry-lock.txt.
``init --ci github`` (or ``gitlab``) adds the pull request check: a workflow that evaluates a
branch's checkpoint against production and reports where the team reviews.
"""

from __future__ import annotations

import shlex
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Annotated

import typer

from evalsentry.cli._app import app
from evalsentry.cli.output import echo
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
#: Every package pin evalsentry's own CI tested, written into the project for its installs.
LOCK_FILE = "evalsentry-lock.txt"


def _template(name: str) -> str:
    return (resources.files("evalsentry") / TEMPLATES / name).read_text(encoding="utf-8")


def lock_text() -> str:
    """The installed evalsentry's lock (package data), under a header saying what it is."""
    from importlib.metadata import version

    lines = (resources.files("evalsentry") / "lock.txt").read_text(encoding="utf-8").splitlines()
    while lines and lines[0].startswith("#"):  # how this repository regenerates it: not theirs
        lines.pop(0)
    pins = "".join(f"{line}\n" for line in lines)
    return (
        f"# evalsentry {version('evalsentry')} was tested with exactly these packages, every\n"
        f"# transitive pin. Install with them as constraints: pip install -c {LOCK_FILE} ...\n"
        f"# After upgrading evalsentry, refresh it: evalsentry lock > {LOCK_FILE}\n" + pins
    )


def write_lock(root: Path) -> tuple[str, Path, str]:
    """Write ``evalsentry-lock.txt`` into ``root`` where there is none; an existing one is kept."""
    target = root / LOCK_FILE
    try:
        if not target.exists():
            target.write_text(lock_text(), encoding="utf-8")
            return ("wrote", target, "")
        if target.read_text(encoding="utf-8", errors="replace") == lock_text():
            return ("kept", target, "")
    except OSError as exc:
        raise UsageError(
            f"{target}: cannot write it ({exc.strerror or exc}); give a folder you can write to"
        ) from None
    return ("kept", target, f"not this evalsentry's pins: evalsentry lock > {LOCK_FILE}")


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
        done.append(write_lock(root))
    except OSError as exc:
        raise UsageError(
            f"{exc.filename or root}: cannot write it ({exc.strerror or exc}); "
            "give a folder you can write to"
        ) from None
    return done


class CI(StrEnum):
    """The CI systems ``init --ci`` writes a pull request check for."""

    GITHUB = "github"
    GITLAB = "gitlab"


#: Each CI's file, relative to the repository's root, and the template it is written from.
CI_FILES = {
    CI.GITHUB: (".github/workflows/evalsentry.yml", "github-workflow.yml"),
    CI.GITLAB: (".gitlab/evalsentry.gitlab-ci.yml", "gitlab-ci.yml"),
}
#: GitLab reads one file at the root; init writes one that includes the job where there is none.
GITLAB_ROOT = ".gitlab-ci.yml"
PROJECT_CONFIG = PROJECT_FILES[0]


def repository_root(folder: Path) -> Path | None:
    """The root of the git repository that holds ``folder`` (which may not exist yet), if any."""
    start = folder.resolve()
    for candidate in [start, *start.parents]:
        if (candidate / ".git").exists():
            return candidate
    return None


def _ci_layout(folder: Path) -> tuple[Path, str]:
    """Where CI files go (the repository's root, else ``folder``) and the project's folder from there."""
    project = folder.resolve()
    root = repository_root(project) or project
    return root, project.relative_to(root).as_posix()


def render_ci(ci: CI, workdir: str) -> str:
    """The ``ci`` check's file for a project in ``workdir`` (``.``: the repository's root)."""
    prefix = "" if workdir == "." else workdir.rstrip("/") + "/"
    text = _template(CI_FILES[ci][1])
    return (
        text.replace("@PREFIX@", prefix)
        .replace("@WORKDIR@", workdir)
        .replace("@INCLUDE@", CI_FILES[CI.GITLAB][0])
    )


def ci_target(folder: Path, ci: CI) -> Path:
    """Where the ``ci`` check of the project in ``folder`` is written."""
    root, _ = _ci_layout(folder)
    return root / CI_FILES[ci][0]


def _check_ci_writable(folder: Path, ci: CI) -> Path:
    """The CI file's path; refused, before anything is written, if a file is already there."""
    target = ci_target(folder, ci)
    if target.exists() or target.is_symlink():
        raise UsageError(
            f"{target}: already exists; init never overwrites a file. Move it aside and run "
            f"`evalsentry init --ci {ci}` again, or merge the two by hand"
        )
    return target


def write_ci(folder: Path, ci: CI) -> list[tuple[str, Path, str]]:
    """Write the pull request check of ``ci`` for the project in ``folder``.

    The file goes to the git repository's root (CI systems read it only there), its paths and
    working directory pointing at ``folder``; outside a repository, into ``folder``. It is
    never replaced. For GitLab a ``.gitlab-ci.yml`` that includes the job is written where
    there is none; an existing one is kept, with a note saying what to add.

    Raises:
        UsageError: naming the file in the way, or the one that could not be written.
    """
    target = _check_ci_writable(folder, ci)
    root, workdir = _ci_layout(folder)
    done: list[tuple[str, Path, str]] = []
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("x", encoding="utf-8") as handle:
            handle.write(render_ci(ci, workdir))
        note = "" if (root / ".git").exists() else "not in a git repository: move it to its root"
        done.append(("wrote", target, note))
        if ci == CI.GITLAB:
            include = f"include:\n  - local: {CI_FILES[ci][0]}\n"
            main = root / GITLAB_ROOT
            if not main.exists():
                main.write_text(include, encoding="utf-8")
                done.append(("wrote", main, ""))
            elif CI_FILES[ci][0] not in main.read_text(encoding="utf-8", errors="replace"):
                done.append(
                    (
                        "kept",
                        main,
                        f"include the job: add `- local: {CI_FILES[ci][0]}` under include:",
                    )
                )
    except OSError as exc:
        raise UsageError(
            f"{exc.filename or target}: cannot write it ({exc.strerror or exc}); "
            "give a folder you can write to"
        ) from None
    return done


CI_NEXT_STEPS = {
    CI.GITHUB: """\
Next steps for the pull request check ({file}):
  1. Point store: and registry: in evalsentry.yaml at a store the job can reach (s3://...),
     and add its credentials as repository secrets EVALSENTRY_AWS_ACCESS_KEY_ID and
     EVALSENTRY_AWS_SECRET_ACCESS_KEY (variable EVALSENTRY_AWS_REGION)
  2. In the workflow set EVALSENTRY_MODEL, EVALSENTRY_CHECKPOINT, the install line, and the
     paths that change a model
  3. Commit it: each pull request that touches them gets the check, a job summary and one
     comment, updated on every push""",
    CI.GITLAB: """\
Next steps for the merge request check ({file}):
  1. Point store: and registry: in evalsentry.yaml at a store the job can reach (s3://...),
     with its credentials as masked CI/CD variables
  2. Add a project access token (api scope) as the masked variable EVALSENTRY_GITLAB_TOKEN,
     for the one merge request note
  3. In the job set EVALSENTRY_MODEL, EVALSENTRY_CHECKPOINT, the install line and the
     changes: that trigger it, then commit it""",
}


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
    ci: Annotated[
        CI | None,
        typer.Option(
            "--ci",
            help="Also write the pull request check for this CI: a GitHub Actions workflow or a "
            "GitLab CI job (at the git repository's root). In an existing project it writes "
            "only that, and evalsentry-lock.txt where there is none.",
        ),
    ] = None,
) -> None:
    """Write a starter project: evalsentry.yaml, prefect.yaml, evalsets/, .gitignore, the lock.

    The lock, evalsentry-lock.txt, holds every package pin this evalsentry was tested with.
    Never overwrites: an existing evalsentry.yaml or prefect.yaml is refused (exit 2) and
    nothing is written. The deployments run the flows of the installed evalsentry package.
    With ``--ci``, a folder that holds a project gets only the CI file (and the lock where it has
    none); an existing CI file is refused the same way.
    """
    started = ci is not None and (folder / PROJECT_CONFIG).is_file()
    done = []
    if ci is not None:
        _check_ci_writable(folder, ci)  # before the project is written, not after
    if not started:
        done += write_project(folder)
    if ci is not None:
        done += write_ci(folder, ci)
        if started:  # the workflow installs with it; a project older than it has none
            done.append(write_lock(folder))
    for what, path, note in done:
        echo(f"{what} {path}" + (f" ({note})" if note else ""))
    if not started:
        here = folder.resolve() == Path.cwd().resolve()
        where = "" if here else f" (first: cd {shlex.quote(str(folder))})"
        echo(NEXT_STEPS.format(where=where, folder=shlex.quote(str(folder.resolve()))))
    if ci is not None:
        echo(CI_NEXT_STEPS[ci].format(file=ci_target(folder, ci)))


@app.command()
def lock() -> None:
    """Print every package pin this evalsentry was tested with (its evalsentry-lock.txt).

    After an upgrade: evalsentry lock > evalsentry-lock.txt, then install with it as
    constraints (pip install -c evalsentry-lock.txt ...), as the generated CI workflow does.
    """
    echo(lock_text(), nl=False)
