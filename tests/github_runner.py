"""A GitHub Actions runner played here: a workflow's one job, its ``run:`` steps in bash.

It reads the YAML and runs each step's own shell commands as the runner does, with the
runner's variables (GITHUB_STEP_SUMMARY, GITHUB_OUTPUT, RUNNER_TEMP, ...) pointing at temporary
files and ``${{ name }}`` expressions filled in from the context. The steps that need the network
are not run: checkout (the test lays out the repository), setup-python (the test's python),
upload-artifact (the test checks the files it would upload exist), and the install step unless
asked for (``tests/integration/test_installed.py`` runs it against the built wheel).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


@dataclass
class Step:
    """What one step did: its exit code, output, job summary and outputs."""

    name: str
    ran: bool
    code: int = 0
    out: str = ""
    summary: str = ""
    outputs: dict[str, str] = field(default_factory=dict)


@dataclass
class Job:
    """What a job did, step by step."""

    steps: list[Step]

    @property
    def failed(self) -> bool:
        """Whether a step that ran failed: the check's red cross."""
        return any(s.ran and s.code for s in self.steps)

    def step(self, start: str) -> Step:
        """The step whose name starts with ``start``."""
        (found,) = [s for s in self.steps if s.name.startswith(start)]
        return found


def _lookup(expression: str, context: Mapping[str, Any]) -> Any:
    """A dotted name (``github.event.pull_request.number``) in ``context``; else the test fails."""
    value: Any = context
    head, _, name = expression.partition(".")
    if head in ("secrets", "vars"):
        return context[head].get(name, "")  # "" as GitHub reads one nobody set
    for part in expression.split("."):
        assert isinstance(value, Mapping) and part in value, f"unknown context: {expression}"
        value = value[part]
    return value


def _substitute(text: str, context: Mapping[str, Any]) -> str:
    """``${{ name }}`` expressions replaced by their context values (names only, no operators)."""

    def value(match: re.Match[str]) -> str:
        expression = match.group(1).strip()
        assert re.fullmatch(r"[\w.-]+", expression), (
            f"the harness evaluates names only: {expression}"
        )
        return str(_lookup(expression, context))

    return re.sub(r"\$\{\{(.*?)\}\}", value, text)


#: The ``if:`` conditions of the generated workflow, as the runner decides them.
CONDITIONS: dict[str, Callable[[Mapping[str, Any], bool], bool]] = {
    "${{ !cancelled() }}": lambda context, failed: True,
    "${{ !cancelled() && github.event.pull_request.head.repo.full_name == github.repository }}": (
        lambda context, failed: (
            _lookup("github.event.pull_request.head.repo.full_name", context)
            == _lookup("github.repository", context)
        )
    ),
}
#: Steps that need the network, or that the test does itself: see the module's docstring.
NOT_RUN = ("actions/checkout@", "actions/setup-python@", "actions/upload-artifact@")


def run_github_job(
    workflow: Path,
    repo: Path,
    runner: Path,
    event: Mapping[str, Any],
    env: Mapping[str, str],
    *,
    install: bool = False,
) -> Job:
    """Run the workflow's one job's ``run:`` steps in ``repo`` as a runner would.

    The install step runs only with ``install``: ``env`` then puts the runner's python first
    on PATH and says where pip finds packages.
    """
    document = yaml.safe_load(workflow.read_text())
    (job,) = document["jobs"].values()
    temp = runner / "temp"
    temp.mkdir(parents=True, exist_ok=True)
    context: dict[str, Any] = {
        "github": {
            "workspace": str(repo),
            "repository": "acme/models",
            "token": "ghs-test",
            "event": event,
        },
        "secrets": {},
        "vars": {},
        "steps": {},
    }
    context["env"] = {k: _substitute(str(v), context) for k, v in document["env"].items()}
    shell = job["defaults"]["run"]
    assert shell["shell"] == "bash"
    steps: list[Step] = []
    for index, spec in enumerate(job["steps"]):
        name = spec.get("name") or spec.get("uses")
        condition = spec.get("if")
        failed = any(s.ran and s.code for s in steps)
        go = CONDITIONS[condition](context, failed) if condition else not failed
        skipped = spec.get("id") == "install" and not install
        if not go or skipped or str(spec.get("uses", "")).startswith(NOT_RUN):
            steps.append(Step(name, ran=False))
            continue
        assert "${{" not in spec["run"], "a run: script takes expressions through env: only"
        summary, output = runner / f"summary-{index}.md", runner / f"output-{index}"
        summary.touch()
        output.touch()
        variables = {
            **os.environ,
            **env,
            **context["env"],
            **{k: _substitute(str(v), context) for k, v in spec.get("env", {}).items()},
            "GITHUB_ACTIONS": "true",
            "CI": "true",
            "GITHUB_STEP_SUMMARY": str(summary),
            "GITHUB_OUTPUT": str(output),
            "RUNNER_TEMP": str(temp),
            "GITHUB_WORKSPACE": str(repo),
            "GITHUB_REPOSITORY": "acme/models",
            "GITHUB_SERVER_URL": "https://github.com",
            "GITHUB_RUN_ID": "4242",
        }
        script = runner / f"step-{index}.sh"
        script.write_text(spec["run"])
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
            cwd=repo / spec.get("working-directory", shell["working-directory"]),
            env=variables,
            capture_output=True,
            text=True,
            timeout=300,
        )
        outputs = dict(
            line.split("=", 1) for line in output.read_text().splitlines() if "=" in line
        )
        if "id" in spec:
            context["steps"][spec["id"]] = {"outputs": outputs}
        steps.append(
            Step(
                name, True, done.returncode, done.stdout + done.stderr, summary.read_text(), outputs
            )
        )
    return Job(steps)
