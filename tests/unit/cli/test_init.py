"""`evalsentry init`: the starter project a team's own repository begins from."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalsentry.cli import main
from evalsentry.config import load_config

ROOT = Path(__file__).parents[3]
LOCK = "evalsentry-lock.txt"
NEXT_STEPS = (
    "evalsentry evalset freeze",
    "evalsentry.save_checkpoint(",
    "evalsentry register",
    "models:",
    "evalsentry run",
    "evalsentry gate",
    "prefect work-pool create gpu --type process",
    "prefect deploy --all",
    "prefect worker start --pool gpu",
)


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


class TestInit:
    def test_writes_a_starter_project_and_says_what_next(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """init writes evalsentry.yaml, prefect.yaml, evalsets/ and .gitignore, and prints the steps."""
        project = tmp_path / "team"
        assert main(["init", str(project)]) == 0
        out = capsys.readouterr().out
        written = ("evalsentry.yaml", "prefect.yaml", "evalsets/.gitkeep", ".gitignore", LOCK)
        for name in written:
            assert (project / name).is_file(), name
            assert f"wrote {project / name}" in out
        for step in NEXT_STEPS:
            assert step in out, step
        assert ".evalsentry/" in (project / ".gitignore").read_text().splitlines()

        config = load_config(project / "evalsentry.yaml")
        assert config.store_url == str(project / ".evalsentry")
        assert config.registry_url == str(project / ".evalsentry" / "registry")
        assert config.evalsets_dir == str(project / "evalsets")
        assert config.models == {} and config.trusted_factories == []

    def test_prefect_yaml_deploys_the_installed_flows(self, tmp_path: Path) -> None:
        """Every entrypoint names a module of the package (no file path) and imports to a flow."""
        from prefect import Flow

        assert main(["init", str(tmp_path)]) == 0
        document = _yaml(tmp_path / "prefect.yaml")
        deployments = {d["name"]: d for d in document["deployments"]}
        assert set(deployments) == {
            "weekly-eval",
            "import-results",
            "evaluate-candidate",
            "evaluate-one",
        }
        for deployment in deployments.values():
            module, _, attr = deployment["entrypoint"].partition(":")
            assert module.startswith("evalsentry.flows.") and ".py" not in module
            assert isinstance(getattr(importlib.import_module(module), attr), Flow)
            assert deployment["work_pool"]["name"] == "gpu"
            assert deployment["parameters"]["config_path"] == "evalsentry.yaml"
        (schedule,) = deployments["weekly-eval"]["schedules"]
        assert (schedule["cron"], schedule["timezone"]) == ("0 6 * * 1", "UTC")

    def test_templates_follow_the_repository_files(self, tmp_path: Path) -> None:
        """The starter's deployments, gate and cost settings are this repository's own."""
        assert main(["init", str(tmp_path)]) == 0
        ours, theirs = _yaml(ROOT / "prefect.yaml"), _yaml(tmp_path / "prefect.yaml")
        assert theirs["deployments"] == ours["deployments"]
        assert theirs["pull"] == ours["pull"]
        ours, theirs = _yaml(ROOT / "evalsentry.yaml"), _yaml(tmp_path / "evalsentry.yaml")
        for key in (
            "store",
            "registry",
            "evalsets",
            "gate",
            "cost",
            "traffic",
            "max_checkpoint_bytes",
        ):
            assert theirs[key] == ours[key], key

    @pytest.mark.parametrize("existing", ["evalsentry.yaml", "prefect.yaml"])
    def test_refuses_to_overwrite_and_writes_nothing(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], existing: str
    ) -> None:
        """An existing project file is named in one line, exit 2; no file is written or changed."""
        (tmp_path / existing).write_text("mine: true\n")
        assert main(["init", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(tmp_path / existing) in err
        assert "already exists" in err and "Traceback" not in err
        assert (tmp_path / existing).read_text() == "mine: true\n"
        assert sorted(p.name for p in tmp_path.iterdir()) == [existing]

    def test_keeps_an_existing_gitignore_and_evalsets(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A repository's .gitignore and evalsets/ are kept; init says what to add to the former."""
        (tmp_path / ".gitignore").write_text("*.pyc\n")
        (tmp_path / "evalsets" / "mine").mkdir(parents=True)
        assert main(["init", str(tmp_path)]) == 0
        out = capsys.readouterr().out
        assert (tmp_path / ".gitignore").read_text() == "*.pyc\n"
        assert "add .evalsentry/ to it" in out
        assert not (tmp_path / "evalsets" / ".gitkeep").exists()
        assert f"kept {tmp_path / 'evalsets'}" in out

    def test_the_lock_is_every_pin_ci_tested_and_the_workflow_installs_with_it(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """evalsentry-lock.txt is requirements/lock.txt under a header; `lock` prints the same;
        both generated checks install with it as constraints from the project's folder."""
        (tmp_path / ".git").mkdir()
        assert main(["init", str(tmp_path / "ml"), "--ci", "github"]) == 0
        assert main(["init", str(tmp_path / "ml"), "--ci", "gitlab"]) == 0
        capsys.readouterr()
        written = (tmp_path / "ml" / LOCK).read_text()
        assert written.startswith("# evalsentry 0.1.0 was tested with exactly these packages")
        lock = (ROOT / "requirements" / "lock.txt").read_text()
        assert lock.startswith("# This file was autogenerated by uv")  # make lock's, not theirs
        assert written.endswith(lock.split("\n", 2)[2]) and "make lock" not in written
        assert main(["lock"]) == 0
        assert capsys.readouterr().out == written
        for workflow in (".github/workflows/evalsentry.yml", ".gitlab/evalsentry.gitlab-ci.yml"):
            text = (tmp_path / workflow).read_text()
            assert f"pip install -c {LOCK} " in text and "requirements/lock.txt" not in text
            assert f'"ml/{LOCK}"' in text  # a change of pins runs the check
            assert 'working-directory: "ml"' in text or 'cd "ml"' in text

    def test_an_existing_lock_is_kept_and_a_stale_one_named(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """init never overwrites the lock; one that is not this evalsentry's says how to refresh."""
        (tmp_path / LOCK).write_text("torch==2.0.0\n")
        assert main(["init", str(tmp_path)]) == 0
        assert (tmp_path / LOCK).read_text() == "torch==2.0.0\n"
        out = capsys.readouterr().out
        assert (
            f"kept {tmp_path / LOCK} (not this evalsentry's pins: evalsentry lock > {LOCK})" in out
        )

    def test_a_file_is_not_a_project_folder(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """init on a file fails in one line naming it, exit 2."""
        (tmp_path / "notes.txt").write_text("x")
        assert main(["init", str(tmp_path / "notes.txt")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "notes.txt: a file, not a folder" in err

    def test_init_stays_light(self, tmp_path: Path) -> None:
        """init imports neither torch, pandas, pyarrow nor prefect: it starts in a blink."""
        script = (
            "import sys; from evalsentry.cli import main; rc = main(['init', sys.argv[1]]); "
            "print([m for m in ('torch', 'pandas', 'pyarrow', 'prefect') if m in sys.modules])"
        )
        result = subprocess.run(
            [sys.executable, "-c", script, str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert result.stdout.strip().splitlines()[-1] == "[]"


class TestInitCI:
    def test_a_new_project_gets_the_workflow_too(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`init --ci github` in a new repository writes the project and the workflow, and
        says what to set in each."""
        (tmp_path / ".git").mkdir()
        assert main(["init", str(tmp_path), "--ci", "github"]) == 0
        out = capsys.readouterr().out
        workflow = tmp_path / ".github" / "workflows" / "evalsentry.yml"
        assert (tmp_path / "evalsentry.yaml").is_file() and workflow.is_file()
        assert f"wrote {workflow}\n" in out  # at the repository's root: no note
        assert "evalsentry evalset freeze" in out and "EVALSENTRY_CHECKPOINT" in out
        document = _yaml(workflow)
        assert next(iter(document["jobs"].values()))["defaults"]["run"]["working-directory"] == "."
        assert "checkpoints/**" in document[True]["pull_request"]["paths"]

    def test_an_existing_project_gets_only_the_workflow(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A folder that holds a project: its files are left as they are, the workflow added."""
        (tmp_path / ".git").mkdir()
        (tmp_path / "evalsentry.yaml").write_text("store: s3://ml-evals/history\n")
        assert main(["init", str(tmp_path), "--ci", "github"]) == 0
        out = capsys.readouterr().out
        assert (tmp_path / "evalsentry.yaml").read_text() == "store: s3://ml-evals/history\n"
        assert sorted(p.name for p in tmp_path.iterdir()) == [
            ".git",
            ".github",
            LOCK,  # what the workflow installs with: a project older than init's lock has none
            "evalsentry.yaml",
        ]
        assert "evalset freeze" not in out and "pull request check" in out
        assert f"wrote {tmp_path / LOCK}" in out

    def test_an_existing_workflow_is_refused_and_nothing_is_written(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The workflow file in the way: one line naming it, exit 2, no project file written."""
        workflow = tmp_path / ".github" / "workflows" / "evalsentry.yml"
        workflow.parent.mkdir(parents=True)
        workflow.write_text("mine\n")
        (tmp_path / ".git").mkdir()
        assert main(["init", str(tmp_path), "--ci", "github"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{workflow}: already exists" in err
        assert workflow.read_text() == "mine\n"
        assert sorted(p.name for p in tmp_path.iterdir()) == [".git", ".github"]

    def test_a_project_below_the_repository_root_is_pointed_at(self, tmp_path: Path) -> None:
        """The workflow goes to the repository's root; its steps run in the project's folder
        and its paths are the project's."""
        (tmp_path / ".git").mkdir()
        assert main(["init", str(tmp_path / "ml" / "digits"), "--ci", "github"]) == 0
        document = _yaml(tmp_path / ".github" / "workflows" / "evalsentry.yml")
        job = next(iter(document["jobs"].values()))
        assert job["defaults"]["run"]["working-directory"] == "ml/digits"
        paths = document[True]["pull_request"]["paths"]
        assert "ml/digits/checkpoints/**" in paths and "ml/digits/evalsentry.yaml" in paths
        assert ".github/workflows/evalsentry.yml" in paths

    def test_outside_a_repository_it_says_where_the_file_belongs(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """No git repository above the folder: the workflow is written there, with a note."""
        assert main(["init", str(tmp_path), "--ci", "github"]) == 0
        assert "(not in a git repository: move it to its root)" in capsys.readouterr().out

    def test_gitlab_gets_a_job_and_an_include(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`--ci gitlab`: the job file, and a .gitlab-ci.yml including it where there is none;
        an existing .gitlab-ci.yml is kept, with a note saying what to add."""
        for repo, existing in ((tmp_path / "a", None), (tmp_path / "b", "stages: [test]\n")):
            (repo / ".git").mkdir(parents=True)
            if existing:
                (repo / ".gitlab-ci.yml").write_text(existing)
            assert main(["init", str(repo), "--ci", "gitlab"]) == 0
            job = _yaml(repo / ".gitlab" / "evalsentry.gitlab-ci.yml")["evalsentry"]
            assert job["artifacts"]["reports"]["junit"] == ".evalsentry-ci/junit.xml"
            assert job["rules"][0]["if"] == '$CI_PIPELINE_SOURCE == "merge_request_event"'
        out = capsys.readouterr().out
        assert _yaml(tmp_path / "a" / ".gitlab-ci.yml") == {
            "include": [{"local": ".gitlab/evalsentry.gitlab-ci.yml"}]
        }
        assert (tmp_path / "b" / ".gitlab-ci.yml").read_text() == "stages: [test]\n"
        assert "include the job: add `- local: .gitlab/evalsentry.gitlab-ci.yml`" in out

    def test_an_unknown_ci_is_refused(self, tmp_path: Path) -> None:
        """`--ci circle` is a usage error, exit 2, and writes nothing."""
        assert main(["init", str(tmp_path / "p"), "--ci", "circle"]) == 2
        assert not (tmp_path / "p").exists()
