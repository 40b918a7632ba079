"""The pull request checks `evalsentry init --ci` writes, linted and run here step by step.

GitHub's and GitLab's runners cannot run here, so a small harness (``tests.github_runner`` for
GitHub's) plays their part for the generated files: it reads the YAML, runs each step's own shell commands with bash as the
runner does, with the runner's variables (GITHUB_STEP_SUMMARY, GITHUB_OUTPUT, RUNNER_TEMP, the
CI_* of GitLab) pointing at temporary files, and a fake `gh` or `curl` on PATH standing in for
the services that cannot be reached (each records its calls and keeps the comments in a JSON
file). The steps that need the network are not run: checkout (the test lays out the
repository), setup-python (this interpreter), the install step (this environment has
evalsentry; tests/integration/test_installed.py runs it) and upload-artifact (the test checks the files it would upload exist).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalsentry.cli import main
from evalsentry.config import load_config
from evalsentry.evalsets.evalset import load_evalset
from evalsentry.evaluation.pipeline import Target, evaluate_checkpoint, record
from evalsentry.history.store import History
from tests.github_runner import run_github_job
from tests.models import TRUSTED_YAML

ROOT = Path(__file__).parents[3]
BIN = Path(sys.executable).parent
ACTIONLINT = BIN / "actionlint"
MODEL = "toy-model"
MARKER = f"<!-- evalsentry:{MODEL} -->"
needs_jq = pytest.mark.skipif(
    shutil.which("jq") is None, reason="the fake gh applies gh's --jq filter with jq, not found"
)

FAKE_GH = """#!{python}
\"\"\"A stand-in for `gh api` on the issue-comments endpoints, keeping comments in a JSON file.\"\"\"
import json, os, subprocess, sys

state_file = os.environ["FAKE_SERVICE_STATE"]
state = json.load(open(state_file))
args = sys.argv[1:]
state["calls"].append(args)
assert args[0] == "api", args
method, jq, body, url = "GET", None, None, None
rest = args[1:]
while rest:
    arg = rest.pop(0)
    if arg == "--method":
        method = rest.pop(0)
    elif arg == "--jq":
        jq = rest.pop(0)
    elif arg == "-F":
        key, _, value = rest.pop(0).partition("=")
        assert key == "body" and value.startswith("@"), arg
        body = open(value[1:], encoding="utf-8").read()
    elif arg == "--paginate":
        pass
    else:
        url = arg
path = url.split("?")[0]
if method == "GET" and path.endswith("/comments"):
    output = json.dumps(state["comments"])
    if jq is not None:
        output = subprocess.run(["jq", "-r", jq], input=output, capture_output=True, text=True,
                                check=True).stdout
elif method == "PATCH":
    comment_id = int(path.rsplit("/", 1)[1])
    (comment,) = [c for c in state["comments"] if c["id"] == comment_id]
    comment["body"] = body
    output = json.dumps(comment)
elif method == "POST":
    comment = {{"id": 1000 + len(state["comments"]), "body": body,
               "user": {{"login": "github-actions[bot]"}}}}
    state["comments"].append(comment)
    output = json.dumps(comment)
else:
    sys.exit(f"fake gh: no {{method}} {{url}}")
json.dump(state, open(state_file, "w"))
sys.stdout.write(output)
"""

FAKE_CURL = """#!{python}
\"\"\"A stand-in for `curl` on GitLab's merge request notes API, keeping notes in a JSON file.\"\"\"
import json, os, sys

state_file = os.environ["FAKE_SERVICE_STATE"]
state = json.load(open(state_file))
args = sys.argv[1:]
state["calls"].append(args)
method, body, url, token = "GET", None, None, None
rest = args[:]
while rest:
    arg = rest.pop(0)
    if arg == "--request":
        method = rest.pop(0)
    elif arg == "--header":
        name, _, value = rest.pop(0).partition(": ")
        token = value if name == "PRIVATE-TOKEN" else token
    elif arg == "--data-urlencode":
        key, _, value = rest.pop(0).partition("@")
        assert key == "body", arg
        body = open(value, encoding="utf-8").read()
    elif arg.startswith("--"):
        pass
    else:
        url = arg
assert token == "glpat-test", token
path = url.split("?")[0]
if method == "GET":
    output = json.dumps(state["comments"])
elif method == "PUT":
    note_id = int(path.rsplit("/", 1)[1])
    (note,) = [n for n in state["comments"] if n["id"] == note_id]
    note["body"] = body
    output = json.dumps(note)
elif method == "POST":
    note = {{"id": 500 + len(state["comments"]), "body": body}}
    state["comments"].append(note)
    output = json.dumps(note)
json.dump(state, open(state_file, "w"))
sys.stdout.write(output)
"""


@pytest.fixture
def team_repo(tmp_path: Path, toy_evalset: Path, toy_checkpoints: dict[str, Path]) -> Path:
    """A team's repository (its project at the root) and the team's store, outside it.

    The store stands for the object store the workflow says to use: its history holds one
    production result of the good toy checkpoint, as the weekly run would have written.
    """
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)  # what init looks for: the repository's root
    (repo / "evalsentry.yaml").write_text(
        f"store: {tmp_path / 'team-store'}\nevalsets: {toy_evalset.parent}\n" + TRUSTED_YAML
    )
    settings = load_config(repo / "evalsentry.yaml")
    outcome = evaluate_checkpoint(
        Target(MODEL, str(toy_checkpoints["good"]), 1, "production"),
        load_evalset(toy_evalset),
        config=settings,
        run_id="r1",
        week="2026-W40",
    )
    record(History(settings.store_url), [outcome])
    assert main(["init", str(repo), "--ci", "github"]) == 0
    return repo


def configure(path: Path, **variables: str) -> None:
    """Set variables in the file as a team does after init: its line ``NAME: value # why``."""
    text = path.read_text()
    for name, value in variables.items():
        text, found = re.subn(rf"^(\s+{name}: )\S+", rf"\g<1>{value}", text, flags=re.MULTILINE)
        assert found == 1, name
    path.write_text(text)


def push(repo: Path, checkpoint: Path) -> None:
    """The pull request's head commit: ``checkpoint`` as the repository's candidate file."""
    target = repo / "checkpoints" / "candidate.pt"
    target.parent.mkdir(exist_ok=True)
    shutil.copyfile(checkpoint, target)


@pytest.fixture
def fake_gh(tmp_path: Path) -> tuple[Path, Path]:
    """A `gh` on PATH that serves one pull request's comments from a JSON file.

    The pull request already has a reviewer's comment quoting the marker and another bot's
    comment: neither may be taken for evalsentry's own.
    """
    folder = tmp_path / "fake-bin"
    folder.mkdir()
    gh = folder / "gh"
    gh.write_text(FAKE_GH.format(python=sys.executable))
    gh.chmod(0o755)
    state = tmp_path / "github-state.json"
    others = [
        {"id": 1, "body": f"{MARKER}\nquoting the bot", "user": {"login": "alice"}},
        {"id": 2, "body": "<!-- other-tool -->\nhi", "user": {"login": "github-actions[bot]"}},
    ]
    state.write_text(json.dumps({"comments": others, "calls": []}))
    return folder, state


def pr_event(repository: str = "acme/models") -> dict[str, Any]:
    """The parts of a pull_request event the workflow reads."""
    return {"pull_request": {"number": 7, "head": {"repo": {"full_name": repository}}}}


def job_env(fake_bin: Path, state: Path) -> dict[str, str]:
    """PATH with the fake service first, this environment's programs next; the trusted models."""
    return {
        "PATH": os.pathsep.join([str(fake_bin), str(BIN), os.environ["PATH"]]),
        "PYTHONPATH": str(ROOT),  # tests.models, listed in trusted_factories
        "FAKE_SERVICE_STATE": str(state),
    }


class TestGitHubWorkflow:
    def test_actionlint_passes_the_generated_workflow(self, tmp_path: Path) -> None:
        """actionlint (a test dependency; it runs shellcheck on the scripts where installed)
        finds nothing in the workflow, at the root of a repository or for a project below it."""
        for project in (tmp_path / "a", tmp_path / "b" / "ml" / "project"):
            repo = project if project.name == "a" else tmp_path / "b"
            (repo / ".git").mkdir(parents=True)
            assert main(["init", str(project), "--ci", "github"]) == 0
            result = subprocess.run(
                [str(ACTIONLINT), "-no-color", ".github/workflows/evalsentry.yml"],
                cwd=repo,
                capture_output=True,
                text=True,
            )
            assert (result.returncode, result.stdout) == (0, ""), result.stdout

    def test_actionlint_would_catch_a_broken_workflow(self, tmp_path: Path) -> None:
        """The lint is real: a misspelt step output and an unknown key are reported."""
        (tmp_path / ".git").mkdir()
        assert main(["init", str(tmp_path), "--ci", "github"]) == 0
        workflow = tmp_path / ".github" / "workflows" / "evalsentry.yml"
        text = workflow.read_text().replace("timeout-minutes:", "timeout-minute:")
        workflow.write_text(text.replace("steps.gate.outputs", "steps.gates.outputs"))
        result = subprocess.run(
            [str(ACTIONLINT), "-no-color", str(workflow)], capture_output=True, text=True
        )
        assert result.returncode == 1
        assert 'unexpected key "timeout-minute"' in result.stdout
        assert 'property "gates" is not defined' in result.stdout

    def test_the_workflow_triggers_on_model_changes_and_fails_on_exit_1_and_2(
        self, team_repo: Path
    ) -> None:
        """On pull requests touching checkpoints, code, config or evalsets; may comment; the
        last step exits with evaluate's code (0 passes, 1 and 2 fail the check)."""
        document = yaml.safe_load((team_repo / ".github/workflows/evalsentry.yml").read_text())
        trigger = document[True]  # YAML 1.1 reads the key `on` as true
        assert "checkpoints/**" in trigger["pull_request"]["paths"]
        assert "**/*.py" in trigger["pull_request"]["paths"]
        assert document["permissions"] == {"contents": "read", "pull-requests": "write"}
        steps = next(iter(document["jobs"].values()))["steps"]
        assert steps[-1]["env"] == {"CODE": "${{ steps.gate.outputs.exit-code }}"}
        assert 'exit "${CODE:-2}"' in steps[-1]["run"]
        upload = next(s for s in steps if str(s.get("uses", "")).startswith("actions/upload"))
        assert "report.html" in upload["with"]["path"] and "junit.xml" in upload["with"]["path"]

    @needs_jq
    def test_a_worse_head_fails_the_check_and_one_comment_follows_each_push(
        self,
        team_repo: Path,
        tmp_path: Path,
        toy_checkpoints: dict[str, Path],
        fake_gh: tuple[Path, Path],
    ) -> None:
        """Push 1, a degraded checkpoint: the check fails (exit 1), the job summary (under
        1 MiB) leads with the verdict, errors are annotated, the report and JUnit are there to
        upload, and one comment is posted. Push 2, the production checkpoint: the check passes
        and the same comment is replaced, not a second one added."""
        workflow = team_repo / ".github" / "workflows" / "evalsentry.yml"
        configure(
            workflow, EVALSENTRY_MODEL=MODEL, EVALSENTRY_CHECKPOINT="checkpoints/candidate.pt"
        )
        fake_bin, state = fake_gh
        env = job_env(fake_bin, state)

        push(team_repo, toy_checkpoints["degraded"])
        first = run_github_job(workflow, team_repo, tmp_path / "run1", pr_event(), env)
        gate = first.step("Evaluate")
        assert gate.outputs == {"exit-code": "1"}
        assert first.failed and first.step("Fail the check").code == 1
        assert 0 < len(gate.summary.encode()) < 1024 * 1024
        assert gate.summary.startswith("## ❌ FAIL · evalsentry: toy-model candidate candidate.pt")
        assert "vs production (v1, 2026-W40)" in gate.summary
        errors = [line for line in gate.out.splitlines() if line.startswith("::error ")]
        sha = hashlib.sha256(toy_checkpoints["degraded"].read_bytes()).hexdigest()[:8]
        assert errors and all(f"toy-model (candidate {sha}) on toy" in e for e in errors)
        out = team_repo / ".evalsentry-ci"
        assert "<testsuites" in (out / "junit.xml").read_text()
        assert ">FAIL</span>" in (out / "report.html").read_text()
        assert first.step("Post or update").out.strip() == "posted the comment"
        comments = json.loads(state.read_text())["comments"]
        (ours,) = [c for c in comments if c["id"] >= 1000]
        assert ours["body"].startswith(f"{MARKER}\n## ❌ FAIL")
        assert (
            "[HTML report and JUnit](https://github.com/acme/models/actions/runs/4242#artifacts)"
            in ours["body"]
        )

        push(team_repo, toy_checkpoints["good"])
        second = run_github_job(workflow, team_repo, tmp_path / "run2", pr_event(), env)
        assert second.step("Evaluate").outputs == {"exit-code": "0"} and not second.failed
        assert second.step("Post or update").out.strip() == f"updated comment {ours['id']}"
        comments = json.loads(state.read_text())["comments"]
        assert [c["id"] for c in comments] == [1, 2, ours["id"]]  # the others untouched
        assert comments[2]["body"].startswith(f"{MARKER}\n## ✅ PASS")
        assert comments[0]["body"] == f"{MARKER}\nquoting the bot"

    @needs_jq
    def test_a_head_that_cannot_be_evaluated_fails_with_2_and_says_so_in_the_comment(
        self, team_repo: Path, tmp_path: Path, fake_gh: tuple[Path, Path]
    ) -> None:
        """No checkpoint at the configured path: exit 2 fails the check, an error is
        annotated, and the comment says ERROR."""
        workflow = team_repo / ".github" / "workflows" / "evalsentry.yml"
        configure(workflow, EVALSENTRY_MODEL=MODEL, EVALSENTRY_CHECKPOINT="checkpoints/missing.pt")
        fake_bin, state = fake_gh
        job = run_github_job(
            workflow, team_repo, tmp_path / "run", pr_event(), job_env(fake_bin, state)
        )
        assert job.step("Evaluate").outputs == {"exit-code": "2"}
        assert job.step("Fail the check").code == 2
        assert "::error title=evalsentry ERROR%3A toy-model candidate missing.pt::" in (
            job.step("Evaluate").out
        )
        (ours,) = [c for c in json.loads(state.read_text())["comments"] if c["id"] >= 1000]
        assert ours["body"].startswith(f"{MARKER}\n## ⛔ ERROR")
        assert "missing.pt" in ours["body"]

    @needs_jq
    def test_strict_fails_the_check_on_an_inconclusive_verdict(
        self,
        team_repo: Path,
        tmp_path: Path,
        toy_checkpoints: dict[str, Path],
        fake_gh: tuple[Path, Path],
    ) -> None:
        """300 rows cannot show the production checkpoint within half a point: the check
        passes (exit 0) unless EVALSENTRY_STRICT is "true", then it fails (exit 1)."""
        config = team_repo / "evalsentry.yaml"
        config.write_text(
            config.read_text() + "gate:\n  metrics:\n    accuracy: {max_drop: 0.005}\n"
        )
        workflow = team_repo / ".github" / "workflows" / "evalsentry.yml"
        configure(
            workflow, EVALSENTRY_MODEL=MODEL, EVALSENTRY_CHECKPOINT="checkpoints/candidate.pt"
        )
        push(team_repo, toy_checkpoints["good"])
        fake_bin, state = fake_gh
        env = job_env(fake_bin, state)
        lenient = run_github_job(workflow, team_repo, tmp_path / "run1", pr_event(), env)
        assert lenient.step("Evaluate").outputs == {"exit-code": "0"} and not lenient.failed
        assert "INCONCLUSIVE" in lenient.step("Evaluate").summary
        configure(workflow, EVALSENTRY_STRICT='"true"')
        strict = run_github_job(workflow, team_repo, tmp_path / "run2", pr_event(), env)
        assert strict.step("Evaluate").outputs == {"exit-code": "1"}
        assert strict.step("Fail the check").code == 1

    @needs_jq
    def test_a_crash_before_the_comment_replaces_the_last_verdict_with_an_error(
        self, team_repo: Path, tmp_path: Path, fake_gh: tuple[Path, Path]
    ) -> None:
        """evalsentry dies without writing the comment (here a stand-in that crashes): the
        comment step still replaces the last push's PASS, under the same marker."""
        workflow = team_repo / ".github" / "workflows" / "evalsentry.yml"
        configure(workflow, EVALSENTRY_MODEL=MODEL)
        fake_bin, state = fake_gh
        crash = fake_bin / "evalsentry"
        crash.write_text("#!/bin/sh\necho 'Traceback (most recent call last): ...' >&2\nexit 1\n")
        crash.chmod(0o755)
        earlier = json.loads(state.read_text())
        earlier["comments"].append(
            {"id": 1002, "body": f"{MARKER}\n## ✅ PASS", "user": {"login": "github-actions[bot]"}}
        )
        state.write_text(json.dumps(earlier))
        job = run_github_job(
            workflow, team_repo, tmp_path / "run", pr_event(), job_env(fake_bin, state)
        )
        assert job.failed and job.step("Post or update").out.strip() == "updated comment 1002"
        body = json.loads(state.read_text())["comments"][2]["body"]
        assert body.startswith(f"{MARKER}\n## ⛔ ERROR · evalsentry did not run: see [the run]")

    def test_a_fork_gets_no_comment_step(
        self, team_repo: Path, tmp_path: Path, fake_gh: tuple[Path, Path]
    ) -> None:
        """A fork's pull request skips the comment step: its token may not comment."""
        workflow = team_repo / ".github" / "workflows" / "evalsentry.yml"
        configure(workflow, EVALSENTRY_MODEL=MODEL, EVALSENTRY_CHECKPOINT="checkpoints/x.pt")
        fake_bin, state = fake_gh
        job = run_github_job(
            workflow,
            team_repo,
            tmp_path / "run",
            pr_event("someone/fork"),
            job_env(fake_bin, state),
        )
        assert job.step("Evaluate").ran and not job.step("Post or update").ran
        assert json.loads(state.read_text())["calls"] == []


class TestGitLabJob:
    @pytest.fixture
    def gitlab_repo(self, team_repo: Path) -> Path:
        """The team's repository with the GitLab job, its model line and checkpoint set."""
        assert main(["init", str(team_repo), "--ci", "gitlab"]) == 0
        configure(
            team_repo / ".gitlab" / "evalsentry.gitlab-ci.yml",
            EVALSENTRY_MODEL=MODEL,
            EVALSENTRY_CHECKPOINT="checkpoints/candidate.pt",
        )
        return team_repo

    def run_job(self, repo: Path, fake_bin: Path, state: Path) -> subprocess.CompletedProcess[str]:
        """The job's before_script (but the install) and script, in one shell as GitLab runs them."""
        job = yaml.safe_load((repo / ".gitlab" / "evalsentry.gitlab-ci.yml").read_text())
        job = job["evalsentry"]
        commands = [c for c in job["before_script"] if "pip install" not in c] + job["script"]
        ci = {
            "CI_PROJECT_DIR": str(repo),
            "CI_JOB_URL": "https://gitlab.example/acme/models/-/jobs/99",
            "CI_API_V4_URL": "https://gitlab.example/api/v4",
            "CI_PROJECT_ID": "12",
            "CI_MERGE_REQUEST_IID": "7",
            "EVALSENTRY_GITLAB_TOKEN": "glpat-test",
        }
        variables = {
            k: re.sub(r"\$(\w+)", lambda m: ci.get(m.group(1), m.group(0)), str(v))
            for k, v in job["variables"].items()
        }
        return subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", "\n".join(commands)],
            cwd=repo,
            env={**os.environ, **job_env(fake_bin, state), **ci, **variables},
            capture_output=True,
            text=True,
            timeout=300,
        )

    def test_the_job_reports_junit_and_updates_one_merge_request_note(
        self,
        gitlab_repo: Path,
        tmp_path: Path,
        toy_checkpoints: dict[str, Path],
        fake_gh: tuple[Path, Path],
    ) -> None:
        """A degraded checkpoint fails the job (1) with the JUnit report as its artifact and a
        note posted; the next push passes (0) and replaces that note."""
        fake_bin, state = fake_gh
        curl = fake_bin / "curl"
        curl.write_text(FAKE_CURL.format(python=sys.executable))
        curl.chmod(0o755)
        state.write_text(json.dumps({"comments": [], "calls": []}))
        job = yaml.safe_load((gitlab_repo / ".gitlab" / "evalsentry.gitlab-ci.yml").read_text())
        assert job["evalsentry"]["artifacts"]["reports"]["junit"] == ".evalsentry-ci/junit.xml"
        assert (gitlab_repo / ".gitlab-ci.yml").read_text() == (
            "include:\n  - local: .gitlab/evalsentry.gitlab-ci.yml\n"
        )

        push(gitlab_repo, toy_checkpoints["degraded"])
        first = self.run_job(gitlab_repo, fake_bin, state)
        assert first.returncode == 1, first.stdout + first.stderr
        assert "posted the note" in first.stdout
        assert "<testsuites" in (gitlab_repo / ".evalsentry-ci" / "junit.xml").read_text()
        (note,) = json.loads(state.read_text())["comments"]
        assert note["body"].startswith(f"{MARKER}\n## ❌ FAIL")

        push(gitlab_repo, toy_checkpoints["good"])
        second = self.run_job(gitlab_repo, fake_bin, state)
        assert second.returncode == 0, second.stdout + second.stderr
        assert f"updated note {note['id']}" in second.stdout
        (note,) = json.loads(state.read_text())["comments"]
        assert note["body"].startswith(f"{MARKER}\n## ✅ PASS")
