"""Installed use: a team's own folder, the built wheel, a real Prefect server and worker.

The wheel is built from this checkout and installed into a fresh virtual environment that sees
the test environment's third-party packages (torch, prefect, ...) through a ``.pth`` line, but
not the checkout: ``.pth`` files in a folder added that way are not processed, so the editable
install's finder never runs there. The team starts with ``evalsentry init``, brings its own model
module (a copy of examples/tabular/model.py kept in a shared folder, linked beside its
evalsentry.yaml), trains two models of different input widths, binds
each to its own evalset, runs a week with ``evalsentry run``, gates it, and deploys the init's
prefect.yaml from its folder for a process worker to run the next week. The pull request
workflow ``init --ci github`` writes installs the wheel with the lock init wrote and gates a
checkpoint; the last edges a team trips on are tried through the installed command.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from evalsentry.history.store import History
from tests.integration.prefect_server import ROOT, prefect_server, read_run

pytestmark = pytest.mark.integration

#: What the wheel is built from; copied aside so the build writes nothing into the checkout.
SOURCES = ("pyproject.toml", "README.md", "src", "flows", "tasks")
TABULAR = ROOT / "examples" / "tabular"
#: Model line -> (its evalset, the shipped CSV): 13 and 30 input features.
MODELS = {"wine-classifier": "wine", "cancer-screen": "cancer"}
WEEK, NEXT_WEEK = "2026-W40", "2026-W41"
LOCK = "evalsentry-lock.txt"
EPOCHS = "60"  # seconds of CPU, not minutes; accuracy is not what is tested here


@dataclass(frozen=True)
class Team:
    """The team's folder, its environment's python, and the environment its commands run in."""

    folder: Path
    python: Path
    env: dict[str, str]
    wheel: Path

    def run(self, *args: str | Path, timeout: float = 180, cwd: Path | None = None) -> str:
        """Run a command in the team's folder; assert exit 0; its stdout and stderr."""
        result = subprocess.run(
            [str(a) for a in args],
            cwd=cwd or self.folder,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        output = f"{result.stdout}\n{result.stderr}"
        assert result.returncode == 0, (
            f"{' '.join(map(str, args))} -> {result.returncode}\n{output}"
        )
        return output

    def evalsentry(self, *args: str | Path, timeout: float = 180) -> str:
        """The installed ``evalsentry`` script, as the team calls it (found on PATH)."""
        return self.run("evalsentry", *args, timeout=timeout)

    def prefect(self, *args: str, timeout: float = 180, cwd: Path | None = None) -> str:
        """Prefect's CLI under the team's python (the environment has no `prefect` script)."""
        return self.run(self.python, "-m", "prefect", *args, timeout=timeout, cwd=cwd)


def build_wheel(into: Path) -> Path:
    """The wheel of this checkout, built (without network) from a copy of its sources."""
    source = into / "source"
    source.mkdir(parents=True)
    for name in SOURCES:
        origin = ROOT / name
        if origin.is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
            shutil.copytree(origin, source / name, ignore=ignore)
        else:
            shutil.copy2(origin, source / name)
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"),
            *("-w", str(into / "dist"), str(source)),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = (into / "dist").glob("evalsentry-*.whl")
    return wheel


def venv_seeing(venv: Path, packages: Path) -> Path:
    """A new environment whose python imports (and whose pip sees) ``packages``; its python.

    The ``.pth`` files inside ``packages`` (the editable install of this checkout among them)
    are not processed from a folder named this way.
    """
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = venv / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(site, "dependencies.pth").write_text(f"{packages}\n")
    return python


def install(wheel: Path, venv: Path) -> Path:
    """A new environment with ``wheel`` installed and this one's packages visible; its python."""
    # torch, prefect, pip ... from the test environment
    python = venv_seeing(venv, Path(sysconfig.get_paths()["purelib"]))
    subprocess.run(
        [
            *(python, "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed"),
            *("-q", str(wheel)),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return python


def team_env(base: Mapping[str, str], venv: Path, folder: Path) -> dict[str, str]:
    """The server's env for a shell in the team's folder with its environment activated."""
    env = {k: v for k, v in base.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{base.get('PATH', os.defpath)}"
    env["VIRTUAL_ENV"] = str(venv)
    env["EVALSENTRY_PROJECT_DIR"] = str(folder)  # read by the init's prefect.yaml at deploy
    return env


def edit(path: Path, old: str, new: str) -> None:
    """Replace the one ``old`` in a file, as a person editing it would."""
    text = path.read_text()
    assert text.count(old) == 1, f"{path}: {old!r}"
    path.write_text(text.replace(old, new))


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory, prefect_database: Path) -> Iterator[Team]:
    """A team's repository set up with the installed wheel, against its own Prefect server.

    Its own server, not the shared one: deploying the team's prefect.yaml replaces deployments
    of the same names, which the other integration tests run.
    """
    base = tmp_path_factory.mktemp("installed")
    wheel = build_wheel(base / "build")
    python = install(wheel, base / "venv")
    folder = base / "team-repo"
    folder.mkdir()
    (base / "server").mkdir()
    with prefect_server(base / "server", deploy=False, database=prefect_database) as server:
        yield Team(folder, python, team_env(server, base / "venv", folder), wheel)


@pytest.fixture(scope="module")
def week(team: Team) -> Team:
    """init, the team's model module, two models frozen, trained, registered, bound; a week run."""
    team.run("git", "init", "-q")
    init = team.evalsentry("init", ".")
    written = ("evalsentry.yaml", "prefect.yaml", "evalsets/.gitkeep", ".gitignore", LOCK)
    for name in written:
        assert f"wrote {name}" in init
    # The model code lives in a folder the team shares between repositories, linked beside
    # evalsentry.yaml: both lines are built through the link, in one run.
    shared = team.folder.parent / "shared-models"
    shared.mkdir()
    shutil.copy(TABULAR / "model.py", shared / "team_models.py")
    (team.folder / "team_models.py").symlink_to(shared / "team_models.py")
    shutil.copy(TABULAR / "train.py", team.folder / "train_tabular.py")
    config = team.folder / "evalsentry.yaml"
    edit(config, "trusted_factories: []", "trusted_factories:\n  - team_models")
    bindings = "".join(f"  {m}: {{evalsets: [{e}]}}\n" for m, e in MODELS.items())
    edit(config, "models: {}\n", "models:\n" + bindings)
    team.run("git", "add", "-A")
    team.run(
        "git", "-c", "user.name=ci", "-c", "user.email=ci@example.invalid", "commit", "-qm", "x"
    )

    for model, evalset in MODELS.items():
        out = team.run(
            team.python,
            "train_tabular.py",
            "--dataset",
            evalset,
            "--data",
            TABULAR / f"{evalset}.csv",
            "--out",
            f"checkpoints/{evalset}.pt",
            "--factory",
            "team_models:TabularNet",
            "--epochs",
            EPOCHS,
        )
        assert f"froze {evalset} v1" in out
        out = team.evalsentry(
            "register",
            f"checkpoints/{evalset}.pt",
            "--model",
            model,
            "--new-model",
            "--stage",
            "production",
        )
        assert f"registered {model}@v1 (production)" in out

    out = team.evalsentry("run", "--week", WEEK, timeout=300)
    assert f"flow run Completed: {WEEK}: BASELINE, 0 warning(s)" in out, out
    return team


def test_the_checkout_is_not_importable(team: Team) -> None:
    """The team's python imports evalsentry and its flows from the wheel, and nothing of ours."""
    where = team.run(
        team.python,
        "-c",
        "import evalsentry, evalsentry.flows, evalsentry.tasks; "
        "print(evalsentry.__file__); print(evalsentry.flows.__file__)",
    )
    site = str(team.python.parents[1])
    for line in where.strip().splitlines():
        assert line.startswith(site) and "site-packages" in line, where
    for module in ("flows", "tasks", "examples", "tests"):
        result = subprocess.run(
            [team.python, "-c", f"import {module}"],
            cwd=team.folder,
            env=team.env,
            capture_output=True,
            text=True,
        )
        assert result.returncode == 1 and "ModuleNotFoundError" in result.stderr, module
    demo = subprocess.run(
        ["evalsentry", "demo"], cwd=team.folder, env=team.env, capture_output=True, text=True
    )
    assert demo.returncode == 2, demo.stderr
    assert demo.stderr.startswith("error: the demo tells its story on the digits example"), demo
    assert len(demo.stderr.strip().splitlines()) == 1


def test_each_model_runs_only_on_its_own_evalset(week: Team) -> None:
    """`evalsentry run` evaluated wine on wine and cancer on cancer, both ok, in one report."""
    store = week.folder / ".evalsentry"
    rows = History(str(store)).evaluations(weeks=[WEEK])
    assert sorted(zip(rows["model"], rows["evalset"], strict=True)) == sorted(
        (model, evalset) for model, evalset in MODELS.items()
    ), rows[["model", "evalset", "status"]]
    assert set(rows["status"]) == {"ok"}, rows[["model", "evalset", "status"]]
    reports = store / "reports"
    assert len(list(reports.glob(f"weekly-eval-{WEEK}-*.md"))) == 1  # this run's, and no other
    assert (reports / f"weekly-eval-{WEEK}.md").is_file()  # the week's latest
    week.evalsentry("gate", "--week", WEEK)


def test_deployed_from_the_team_folder_a_worker_runs_the_week(week: Team, tmp_path: Path) -> None:
    """The init's prefect.yaml deploys module entrypoints; a process worker runs the week to Completed.

    The worker starts in another folder: the deployment's pull step brings each run into the
    team's folder, where its evalsentry.yaml and team_models.py are.
    """
    week.prefect("work-pool", "create", "gpu", "--type", "process")
    week.prefect("--no-prompt", "deploy", "--all")
    out = week.prefect(
        "deployment", "inspect", "weekly-eval/weekly-eval", "--output", "json", cwd=tmp_path
    )
    assert '"entrypoint": "evalsentry.flows.weekly_eval:weekly_eval"' in out, out
    assert str(week.folder) in out  # the pull step, resolved at deploy

    out = week.prefect(
        "deployment", "run", "weekly-eval/weekly-eval", "--param", f"week={NEXT_WEEK}"
    )
    match = re.search(r"UUID:\s*([0-9a-f-]{36})", out)
    assert match, out
    worker = week.prefect(
        "worker",
        "start",
        "--pool",
        "gpu",
        "--type",
        "process",
        "--run-once",
        timeout=300,
        cwd=tmp_path,
    )
    run = read_run(week.env, match.group(1))
    assert run["state"] == "COMPLETED", (run, worker[-3000:])
    assert "Traceback" not in worker, worker[-3000:]

    rows = History(str(week.folder / ".evalsentry")).evaluations(weeks=[NEXT_WEEK])
    assert sorted(zip(rows["model"], rows["evalset"], strict=True)) == sorted(MODELS.items())
    assert set(rows["status"]) == {"ok"}
    week.evalsentry("gate", "--week", NEXT_WEEK)  # against the week `evalsentry run` recorded


def packages_but_evalsentry(into: Path) -> Path:
    """A folder of links to this environment's installed packages, evalsentry's own left out."""
    into.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith(("evalsentry", "__editable__")):
            (into / entry.name).symlink_to(entry)
    return into


def test_the_generated_workflow_installs_the_wheel_with_the_lock_and_gates(
    week: Team, tmp_path: Path
) -> None:
    """`init --ci github`, then the workflow's own install and gate steps, run as a script.

    The install step runs as written, the placeholder replaced by the wheel as its comment
    says, with pip kept off every index (PIP_NO_INDEX): every dependency must already be
    installed at the version evalsentry-lock.txt pins, so only evalsentry is installed; a pin
    the environment does not hold would fail the step. The gate step then evaluates the
    production checkpoint as a candidate with the freshly installed command: PASS, exit 0.
    """
    from tests.github_runner import run_github_job

    out = week.evalsentry("init", "--ci", "github")
    workflow = week.folder / ".github" / "workflows" / "evalsentry.yml"
    assert f"wrote {workflow}" in out and f"kept {LOCK}\n" in out, out
    lock = (week.folder / LOCK).read_text()
    assert lock.endswith((ROOT / "requirements" / "lock.txt").read_text().split("\n", 2)[2])
    edit(workflow, "EVALSENTRY_MODEL: my-model", "EVALSENTRY_MODEL: wine-classifier")
    edit(workflow, "checkpoints/my-model.pt", "checkpoints/wine.pt")
    edit(workflow, 'whl/cpu "evalsentry[s3]"', f'whl/cpu "evalsentry[s3] @ {week.wheel.as_uri()}"')

    venv = tmp_path / "runner-python"
    venv_seeing(venv, packages_but_evalsentry(tmp_path / "packages"))  # what setup-python gives
    env = {
        **{k: v for k, v in week.env.items() if k != "PATH"},
        "PATH": os.pathsep.join([str(venv / "bin"), "/usr/local/bin", "/usr/bin", "/bin"]),
        "VIRTUAL_ENV": str(venv),
        "PYTHONPATH": "",
        "PIP_NO_INDEX": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    fork = {"pull_request": {"number": 7, "head": {"repo": {"full_name": "fork/models"}}}}
    job = run_github_job(workflow, week.folder, tmp_path / "runner", fork, env, install=True)

    installed = job.step("Install evalsentry")
    assert installed.ran and installed.code == 0, installed.out[-3000:]
    assert re.findall(r"Successfully installed (.+)", installed.out) == ["evalsentry-0.1.0"]
    assert (venv / "bin" / "evalsentry").is_file()
    gate = job.step("Evaluate the checkpoint")
    assert gate.outputs.get("exit-code") == "0", gate.out[-3000:]
    assert "PASS" in gate.summary and not job.failed, gate.summary


def test_the_last_edges_through_the_installed_command(week: Team, tmp_path: Path) -> None:
    """A closed pipe keeps the verdict's code; a dangling store link is one line; weights of
    another dtype are refused at register; a pad id inside a row is said at freeze."""
    program = ["evalsentry", "gate", "--week", WEEK]
    with subprocess.Popen(
        program, cwd=week.folder, env=week.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as gate:
        assert gate.stdout is not None and gate.stderr is not None
        gate.stdout.close()  # `evalsentry gate | head -0`: the reader left before any line
        err = gate.stderr.read().decode()
    assert gate.returncode == 0 and err == "", err

    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    (elsewhere / "store").symlink_to(tmp_path / "unmounted")
    (elsewhere / "evalsentry.yaml").write_text("store: store\n")
    refused = subprocess.run(
        ["evalsentry", "gate"], cwd=elsewhere, env=week.env, capture_output=True, text=True
    )
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "store: the store is a symbolic link to" in refused.stderr, refused.stderr

    script = (
        "import json, sys, torch; from safetensors.torch import save_file; "
        "saved = torch.load(sys.argv[1], weights_only=True); "
        "state = {k: v.to(torch.int32) for k, v in saved['model_state_dict'].items()}; "
        "save_file(state, sys.argv[2], {'lineage': json.dumps(saved['lineage'])})"
    )
    cast = tmp_path / "wine-int32.safetensors"
    week.run(week.python, "-c", script, "checkpoints/wine.pt", cast)
    register = subprocess.run(
        ["evalsentry", "register", str(cast), "--model", "wine-classifier"],
        cwd=week.folder,
        env=week.env,
        capture_output=True,
        text=True,
    )
    assert register.returncode == 2 and register.stderr.count("\n") == 1, register.stderr
    assert "is int32 where the model's is float32" in register.stderr, register.stderr

    rows = tmp_path / "tokens.parquet"
    week.run(
        week.python,
        "-c",
        "import sys, pyarrow as pa, pyarrow.parquet as pq; "
        "pq.write_table(pa.table({'ids': [[5, 0, 7], [3, 4], [9, 9, 0]]}), sys.argv[1])",
        rows,
    )
    frozen = week.evalsentry(
        *("evalset", "freeze", rows, "--name", "chars", "--task", "language_modeling"),
        *("--target", "ids", "--tokens", "ids", "--pad-id", "0", "--max-length", "8"),
    )
    assert "note: the pad id 0 is a token inside 2 row(s) (first: row 0)" in frozen, frozen
