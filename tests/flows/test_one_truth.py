"""One truth per week: the flow's state, its report and artifact, the gate and raw DuckDB agree.

Whatever runs recorded a week (full runs, partial re-runs, rollbacks, archived lines, broken
checkpoints), every view of it tells the same story: the Prefect run's final state, the week's
latest report, this run's report artifact, ``evalsentry gate --week`` and a raw DuckDB query of
the history.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import duckdb
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalsentry.checkpoints.registry import Registry
from evalsentry.cli import main
from evalsentry.config import load_config
from evalsentry.flows.runs import exit_code
from evalsentry.flows.weekly_eval import weekly_eval
from evalsentry.gate.week import GateReport, gate_week
from evalsentry.history.store import History
from tests.flows.api import wait_for_events
from tests.models import TRUST, TRUSTED_YAML
from tests.unit.test_one_truth import readme_block

BASELINE, WEEK = "2026-W39", "2026-W40"
MODELS = ("a", "b")
#: Each line's versions, registered in this order: v1 good, v2 degraded, v3 a broken file.
GOOD, DEGRADED, BROKEN = 1, 2, 3


def artifact_headline(flow_run_id: object) -> str | None:
    """The description of the report artifact this flow run published (its headline)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        ArtifactFilterKey,
    )

    async def read() -> list[Any]:
        async with get_client() as client:
            return await client.read_artifacts(
                artifact_filter=ArtifactFilter(
                    key=ArtifactFilterKey(any_=["weekly-eval-report"]),
                    flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]),
                )
            )

    found = asyncio.run(read())
    return found[0].description if found else None


def raw_current(store: str, week: str) -> list[tuple[Any, ...]]:
    """The week's current weekly rows by the README's DuckDB rule, straight from the files."""
    query = readme_block("history-query:duckdb").replace(".evalsentry", store)
    rows = duckdb.sql(query).fetchall()
    return sorted(
        {(r[2], r[3], r[4], r[5], r[11]) for r in rows if r[0] == week and r[1] == "scheduled"}
    )


def raw_verdicts(store: str, week: str) -> list[tuple[Any, ...]]:
    """The week's current verdicts by the README's DuckDB query, straight from the files."""
    query = readme_block("history-query:verdicts").replace(".evalsentry", store)
    return sorted(duckdb.sql(query.replace("2026-W40", week)).fetchall(), key=repr)


def gated_verdicts(report: GateReport) -> list[tuple[Any, ...]]:
    """The rows the gate's verdicts are, in the query's columns: those an evaluation stands behind."""
    return sorted(
        (
            (
                c.week,
                c.model,
                c.version,
                c.stage,
                c.evalset,
                str(c.reference),
                c.metric,
                c.slice,
                str(c.verdict),
                c.kind,
                c.checkpoint_sha256,
            )
            for c in report.comparisons
            if c.recorded
        ),
        key=repr,
    )


def build_estate(root: Path, toy_evalset: Path, checkpoints: dict[str, Path]) -> Path:
    """Two model lines on the toy evalset: v1 good in production; v2 degraded and v3 a broken
    file archived, each released when promoted.
    """
    config = root / "evalsentry.yaml"
    config.write_text(
        f"store: store\nregistry: registry\nevalsets: {toy_evalset.parent}\n" + TRUSTED_YAML
    )
    registry = Registry(str(root / "registry"))
    folder = root / "estate"
    folder.mkdir()
    for model in MODELS:
        for version, name in enumerate(("good", "degraded", "good"), start=1):
            # A file of its own per model and version (the same bytes would be one version).
            payload = torch.load(checkpoints[name], weights_only=True)
            payload["metrics"] = {"copy": float(version)}
            copy = folder / f"{model}-v{version}.pt"
            torch.save(payload, copy)
            stage = "production" if version == GOOD else "archived"  # released when promoted
            registry.register(copy, model, trust=TRUST, stage=stage)
        broken = folder / f"{model}-v{BROKEN}.pt"
        broken.write_bytes(broken.read_bytes()[:300])  # changed since registration: an ERROR
    return config


def check_one_story(config: Path, state: Any, week: str = WEEK) -> None:
    """Every view of ``week`` says what the gate of the history says."""
    settings_ = load_config(config)
    history = History(settings_.store_url)
    report = gate_week(
        history,
        week,
        settings_.gate,
        evalsets_dir=settings_.evalsets_dir,
        registry_url=settings_.registry_url,
    )
    headline = report.headline()
    # The Prefect run's final state.
    assert state.is_failed() == bool(report.problems), (state.message, headline)
    if state.is_failed():
        assert (state.message or "").split(" | ")[0] == headline
    else:
        assert state.result()["verdict"] == str(report.verdict)
    # `evalsentry gate --week` exits with the code `evalsentry run` gave the run.
    assert main(["gate", "--week", week, "--config", str(config)]) == report.exit_code
    assert exit_code(state) == report.exit_code
    # The week's latest report and this run's artifact lead with the same headline.
    latest = Path(settings_.store_url) / "reports" / f"weekly-eval-{week}.md"
    assert f"**{headline}**" in latest.read_text()
    assert artifact_headline(state.state_details.flow_run_id) == headline
    # A raw reader of the comparisons sees the gate's verdicts, one row each, owners filled.
    assert raw_verdicts(settings_.store_url, week) == gated_verdicts(report)
    # A raw reader of the files sees the rows the gate judged.
    ours = history.evaluations(weeks=[week], kind="scheduled")
    assert raw_current(settings_.store_url, week) == sorted(
        zip(
            ours["model"],
            ours["version"],
            ours["stage"],
            ours["evalset"],
            ours["status"],
            strict=True,
        )
    )


def test_a_partial_rerun_reports_the_whole_week(
    tmp_path: Path, toy_evalset: Path, toy_checkpoints: dict[str, Path]
) -> None:
    """a FAILs; re-running b alone says partial, and the week, its report and the gate still FAIL."""
    config = build_estate(tmp_path, toy_evalset, toy_checkpoints)
    assert weekly_eval(week=BASELINE, config_path=str(config), return_state=True).is_completed()
    Registry(str(tmp_path / "registry")).promote("a", DEGRADED, "production")
    first = weekly_eval(week=WEEK, config_path=str(config), return_state=True)
    assert first.is_failed() and (first.message or "").startswith(f"{WEEK}: FAIL a@v2")
    again = weekly_eval(week=WEEK, models=["b"], config_path=str(config), return_state=True)
    assert again.is_failed() and (again.message or "").startswith(f"{WEEK}: FAIL a@v2")
    check_one_story(config, again)
    (alert,) = wait_for_events(
        "evalsentry.week.failed",
        f"evalsentry.week.{WEEK}",
        flow_run_id=again.state_details.flow_run_id,
    )
    assert alert.payload["gate"] == "FAIL" and alert.payload["models"] == ["a"]
    assert alert.payload["worst"][0]["model"] == "a" and alert.payload["worst"][0]["version"] == 2
    reports = Path(load_config(config).store_url) / "reports"
    run_report = next(
        p
        for p in reports.glob(f"weekly-eval-{WEEK}-*.md")
        if "b@v1 on toy" in p.read_text() and "Partial run" in p.read_text()
    )
    assert "Partial run (model(s) b): it evaluated b@v1 on toy." in run_report.read_text()


def test_a_line_a_partial_run_left_out_is_the_week_s_error(
    tmp_path: Path, toy_evalset: Path, toy_checkpoints: dict[str, Path]
) -> None:
    """A first run of the week for b alone: a was never evaluated, which is an ERROR, not a PASS."""
    config = build_estate(tmp_path, toy_evalset, toy_checkpoints)
    state = weekly_eval(week=WEEK, models=["b"], config_path=str(config), return_state=True)
    assert state.is_failed()
    assert (state.message or "").startswith(f"{WEEK}: ERROR a@v1 (not evaluated: no run of {WEEK}")
    check_one_story(config, state)
    complete = weekly_eval(week=WEEK, models=["a"], config_path=str(config), return_state=True)
    assert complete.is_completed(), complete.message  # a's result replaces its ERROR
    check_one_story(config, complete)


STEPS = 5


class WeekStory:
    """Random registry changes and runs of one week; after every run, every view agrees.

    Each step changes the registry (a release or rollback, a retired line, or nothing), then runs
    the week in full or for one line only.
    """

    def __init__(self, root: Path, evalset: Path, checkpoints: dict[str, Path]) -> None:
        self.config = build_estate(root, evalset, checkpoints)
        self.registry = Registry(str(root / "registry"))
        state = weekly_eval(week=BASELINE, config_path=str(self.config), return_state=True)
        assert state.is_completed(), state.message
        self.told: list[str] = []

    def production(self) -> dict[str, int]:
        return {e.model: e.version for e in self.registry.list() if e.stage == "production"}

    def step(self, chance: random.Random) -> None:
        """One change of the registry, then a run of the week, then every view checked."""
        model = chance.choice(MODELS)
        change = chance.choice(["none", "release", "release", "retire"])
        if change == "release":
            version = chance.choice([GOOD, DEGRADED, BROKEN])
            self.registry.promote(model, version, "production")
            self.told.append(f"promote {model}@v{version}")
        elif change == "retire" and len(self.production()) == len(MODELS):
            self.registry.archive(model, self.production()[model])
            self.told.append(f"archive {model}")
        running = [line for line in MODELS if line in self.production()]
        only = chance.choice([None, *running])
        self.told.append(f"run {only or 'all'}")
        models = [only] if only is not None else None
        state = weekly_eval(
            week=WEEK, models=models, config_path=str(self.config), return_state=True
        )
        check_one_story(self.config, state)


# The evalset and checkpoints are only read: one copy serves every example.
@settings(
    max_examples=2,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_every_view_tells_one_story_after_any_sequence_of_runs(
    seed: int,
    tmp_path_factory: pytest.TempPathFactory,
    toy_evalset: Path,
    toy_checkpoints: dict[str, Path],
) -> None:
    """Seeded random stories: full and partial runs, rollbacks, broken releases, retired lines."""
    story = WeekStory(tmp_path_factory.mktemp("story"), toy_evalset, toy_checkpoints)
    chance = random.Random(seed)  # noqa: S311 - a seeded story, not a secret
    for _ in range(STEPS):
        try:
            story.step(chance)
        except AssertionError as exc:
            raise AssertionError(f"after {'; '.join(story.told)}: {exc}") from exc


def test_a_typo_d_line_fails_the_week_until_archived_and_the_week_run_again(
    tmp_path: Path, train_data: Path
) -> None:
    """`register --model fiar --new-model` binds nothing: an ERROR; archived, the re-run passes."""
    from tests.bindings import BOUND, estate

    config = estate(tmp_path, BOUND, train_data=train_data)
    narrow = tmp_path / "checkpoints" / "narrow.pt"
    copy = tmp_path / "fiar.pt"
    payload = torch.load(narrow, weights_only=True)
    payload["metrics"] = {"copy": 1.0}
    torch.save(payload, copy)
    argv = ["register", str(copy), "--model", "fiar", "--new-model", "--stage", "production"]
    assert main([*argv, "--config", str(config)]) == 0
    state = weekly_eval(week=WEEK, config_path=str(config), return_state=True)
    assert state.is_failed()
    assert (state.message or "").startswith(f"{WEEK}: ERROR fiar@v1 (not evaluated: model 'fiar'")
    assert main(["gate", "--week", WEEK, "--config", str(config)]) == 2
    assert main(["registry", "archive", "fiar", "1", "--config", str(config)]) == 0
    again = weekly_eval(week=WEEK, config_path=str(config), return_state=True)
    assert again.is_completed(), again.message
    assert main(["gate", "--week", WEEK, "--config", str(config)]) == 0
    rows = History(load_config(config).store_url).evaluations(weeks=[WEEK])
    assert sorted(rows["model"]) == ["narrow", "wide"]  # fiar's ERROR is retired, kept for audit


def test_a_line_gone_from_the_registry_is_missing_from_the_week(
    tmp_path: Path, train_data: Path
) -> None:
    """Both lines ran last week; `wide` is gone from the registry (not archived): this week's
    run fails naming it MISSING, as `gate` with and without --week and the report artifact do.
    """
    import shutil

    from tests.bindings import BOUND, estate

    config = estate(tmp_path, BOUND, train_data=train_data)
    assert weekly_eval(week=BASELINE, config_path=str(config), return_state=True).is_completed()
    shutil.rmtree(tmp_path / "registry" / "wide")
    state = weekly_eval(week=WEEK, config_path=str(config), return_state=True)
    assert state.is_failed()
    headline = f"{WEEK}: ERROR wide@v1 on wide (MISSING: no result in {WEEK} (last: {BASELINE} on"
    assert (state.message or "").startswith(headline)
    assert (artifact_headline(state.state_details.flow_run_id) or "").startswith(headline)
    for week in ([], ["--week", WEEK]):
        assert main(["gate", *week, "--config", str(config)]) == 2


def test_a_week_recorded_after_a_later_one_leaves_one_story(toy_project: Path) -> None:
    """W40 good, then a degraded release run as W42 (FAIL against W40), then W41 backfilled
    with it: W42's previous week is now W41, and its recorded verdicts say so, as the gate
    does; the backfill's log says W42 was gated again."""
    from tests.flows.api import run_logs

    settings_ = load_config(toy_project)
    registry = Registry(settings_.registry_url)
    assert weekly_eval(
        week="2026-W40", config_path=str(toy_project), return_state=True
    ).is_completed()
    degraded = registry.register(_degraded_checkpoint(toy_project), "toy-model", trust=TRUST)
    registry.promote("toy-model", degraded.version, "production")
    later = weekly_eval(week="2026-W42", config_path=str(toy_project), return_state=True)
    assert later.is_failed()
    before = raw_verdicts(settings_.store_url, "2026-W42")
    assert any(row[5] == "previous-week" and row[8] == "FAIL" for row in before)  # vs W40
    backfilled = weekly_eval(week="2026-W41", config_path=str(toy_project), return_state=True)
    report = gate_week(
        History(settings_.store_url),
        "2026-W42",
        settings_.gate,
        evalsets_dir=settings_.evalsets_dir,
        registry_url=settings_.registry_url,
    )
    previous = [c for c in report.comparisons if str(c.reference) == "previous-week" and c.recorded]
    assert previous and "FAIL" not in {str(c.verdict) for c in previous}  # the same model as W41
    assert raw_verdicts(settings_.store_url, "2026-W42") == gated_verdicts(report)
    assert main(["gate", "--week", "2026-W42", "--config", str(toy_project)]) == report.exit_code
    logs = [line for _, line in run_logs(backfilled.state_details.flow_run_id)]
    assert any(
        line.startswith("2026-W42 was gated before 2026-W41 was recorded; gated again against it: ")
        for line in logs
    ), logs


def _degraded_checkpoint(project: Path) -> Path:
    """The toy teacher with one class pushed up: worse on the toy evalset."""
    from evalsentry.checkpoints.checkpoint import save_checkpoint
    from tests.conftest import _teacher

    model = _teacher()
    with torch.no_grad():
        model.body[2].bias[0] += 2.0  # type: ignore[attr-defined,index]
    (project.parent / "train.txt").write_text("data\n")
    return save_checkpoint(
        model,  # type: ignore[arg-type]
        project.parent / "degraded.pt",
        metrics={},
        config={"lr": 0.01},
        seed=1,
        data=project.parent / "train.txt",
        factory="tests.models:TinyNet",
        factory_kwargs={"features": 4, "classes": 3, "hidden": 8},
    )
