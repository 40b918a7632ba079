"""The weekly flow under a real Prefect API: states, messages, artifacts, failure isolation."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Any

import duckdb
import pytest
import torch
from prefect.client.orchestration import get_client

from evalsentry.checkpoints.checkpoint import save_checkpoint
from evalsentry.checkpoints.registry import Registry
from evalsentry.config import load_config
from evalsentry.flows.evaluate_candidate import evaluate_candidate
from evalsentry.flows.weekly_eval import weekly_eval
from evalsentry.history.store import History
from evalsentry.tasks.evaluate import evaluate_checkpoint, on_device
from evalsentry.tasks.events import WEEK_DRIFTED
from evalsentry.weeks import iso_week
from tests.flows.api import alerts_of, run_logs, run_name, run_tags, task_runs, wait_for_events
from tests.flows.test_s3_store import s3_endpoint, s3_project  # noqa: F401 - fixtures, moto on loopback
from tests.models import TRUST, SlowNet
from tests.unit.evalsets.test_evalsets import edit


def history(config: Path) -> History:
    """The history the project writes to."""
    return History(load_config(config).store_url)


async def _artifacts(flow_run_id: object) -> dict[str, list[Any]]:
    """The run's artifacts by key (by type for unkeyed ones, like progress)."""
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    async with get_client() as client:
        artifacts = await client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    found: dict[str, list[Any]] = {}
    for artifact in artifacts:
        found.setdefault(artifact.key or str(artifact.type), []).append(artifact)
    return found


def test_inference_is_tagged_gpu_only_on_cuda() -> None:
    """A CUDA device gets the ``gpu`` tag (for a tag concurrency limit); the CPU gets none."""
    assert on_device(evaluate_checkpoint, "cuda:1").tags == {"gpu"}
    assert on_device(evaluate_checkpoint, "cpu").tags == set()
    assert on_device(evaluate_checkpoint, "auto").tags == (
        {"gpu"} if torch.cuda.is_available() else set()
    )


class TestWeeklyEval:
    def test_weeks_pass_then_a_promoted_regression_fails_the_run(
        self, toy_project: Path, toy_checkpoints: dict[str, Path]
    ) -> None:
        """Baseline, same model (Completed), then a degraded promotion: Failed, naming the drop."""
        first = weekly_eval(week="2026-W40", config_path=str(toy_project), return_state=True)
        second = weekly_eval(week="2026-W41", config_path=str(toy_project), return_state=True)
        registry = Registry(load_config(toy_project).registry_url)
        entry = registry.register(toy_checkpoints["degraded"], "toy-model", trust=TRUST)
        registry.promote("toy-model", entry.version, "production")
        third = weekly_eval(week="2026-W42", config_path=str(toy_project), return_state=True)
        assert (first.is_completed(), second.is_completed(), third.is_failed()) == (
            True,
            True,
            True,
        )
        # Each run carries its week and lines as tags, to find it by in the UI.
        assert run_tags(third.state_details.flow_run_id) == {"week:2026-W42", "model:toy-model"}
        assert first.name == "Completed"
        assert third.message.startswith("2026-W42: FAIL toy-model@v2 accuracy -")
        assert "\n" not in third.message  # the run log shows it as one line, not escaped ones
        assert "toy-model@v2 on toy: accuracy vs previous-week" in third.message
        assert "flips -" in third.message and "p=" in third.message
        frame = history(toy_project).evaluations()
        assert frame["week"].tolist() == ["2026-W40", "2026-W41", "2026-W42"]

    def test_a_slower_checkpoint_is_a_warn_with_its_numbers(
        self, toy_project: Path, toy_checkpoints: dict[str, Path], train_data: Path
    ) -> None:
        """Same predictions, four times the work: the week is a WARN naming the slowdown."""
        weekly_eval(week="2026-W40", config_path=str(toy_project), return_state=True)
        slow = SlowNet()
        state = torch.load(toy_checkpoints["good"], weights_only=True)["model_state_dict"]
        slow.load_state_dict(state)
        path = save_checkpoint(
            slow,
            toy_checkpoints["good"].parent / "slow.pt",
            metrics={},
            config={"variant": "slow"},
            seed=7,
            data=train_data,
        )
        registry = Registry(load_config(toy_project).registry_url)
        entry = registry.register(path, "toy-model", trust=TRUST)
        registry.promote("toy-model", entry.version, "production")
        second = weekly_eval(week="2026-W41", config_path=str(toy_project), return_state=True)
        assert second.is_completed()
        result = second.result()
        assert result["verdict"] == "WARN"
        (warning,) = result["warnings"]
        assert re.search(r"toy-model@v2 on toy: microseconds_per_example vs previous-week", warning)
        assert re.search(r"[2-9]\.\d\dx the time per example of v1 on cpu", warning)
        rows = history(toy_project).comparisons()
        timed = rows[rows["metric"] == "microseconds_per_example"]
        assert timed["verdict"].tolist() == ["WARN"] and timed["value"].item() > 0
        # The raw table, as a DuckDB query reads it: the run recorded its timing verdict once,
        # saying whose it is like every other comparison of the week.
        raw = duckdb.sql(
            "select kind, stage, checkpoint_sha256, verdict from read_parquet("
            f"'{load_config(toy_project).store_url}/comparisons/*.parquet', union_by_name = true)"
            " where metric = 'microseconds_per_example'"
        ).fetchall()
        assert raw == [("scheduled", "production", entry.sha256, "WARN")]

    def test_run_is_named_after_the_week_and_publishes_artifacts(self, toy_project: Path) -> None:
        """The run name carries week, kind and id; report, table, link and progress artifacts exist.

        Progress is throttled to one update a second, but every inference's ends at 100%. The
        inference task takes a ``gpu`` slot only on CUDA. The table is rounded; the link opens
        this run's HTML report over HTTP (the report server), never as a file:// URL.
        """
        state = weekly_eval(week="2026-W40", config_path=str(toy_project), return_state=True)
        flow_run_id = state.state_details.flow_run_id
        name = run_name(flow_run_id)
        assert re.fullmatch(r"weekly-eval-2026-W40-backfill-[0-9a-f]{6}", name)
        assert name.endswith(str(flow_run_id).replace("-", "")[-6:])  # the random end of the id
        artifacts = asyncio.run(_artifacts(flow_run_id))
        assert {
            "weekly-eval-report",
            "weekly-eval-details",
            "weekly-eval-metrics",
            "weekly-eval-report-file",
            "weekly-eval-lifetime-bill",
            "progress",
        } <= set(artifacts)
        assert {a.data for a in artifacts["progress"]} == {100.0}
        inference = [r for r in task_runs(flow_run_id) if r.name.startswith("evaluate-")]
        assert len(inference) == 1
        assert set(inference[0].tags) == ({"gpu"} if torch.cuda.is_available() else set())
        reports = Path(load_config(toy_project).store_url) / "reports"
        assert "### Lineage and cost" in (reports / f"{name}.md").read_text()
        (link,) = artifacts["weekly-eval-report-file"]
        assert link.data == (
            f"[HTML report of {name} (open it while `evalsentry serve-reports` runs where the "
            f"store is)](http://127.0.0.1:8470/{name}.html)"
        )
        (table,) = artifacts["weekly-eval-metrics"]
        rows = json.loads(table.data) if isinstance(table.data, str) else table.data
        assert rows and {row["checkpoint"] for row in rows} == {"toy-model@v1"}
        assert all(len(repr(row["value"]).partition(".")[2]) <= 7 for row in rows)

    def test_with_reports_url_the_run_points_at_its_report_over_http(
        self, toy_project: Path
    ) -> None:
        """`reports_url:` set: the log's `report:` line, the run's result and the link artifact
        all give the http link; the file itself is in the store's reports folder."""
        toy_project.write_text(
            toy_project.read_text() + "reports_url: http://reports.example:8765/weekly/\n"
        )
        state = weekly_eval(week="2026-W40", config_path=str(toy_project), return_state=True)
        name = run_name(state.state_details.flow_run_id)
        link = f"http://reports.example:8765/weekly/{name}.html"
        assert state.result()["report"] == link
        assert (logging.INFO, f"report: {link}") in run_logs(state.state_details.flow_run_id)
        reports = Path(load_config(toy_project).store_url) / "reports"
        assert (reports / f"{name}.html").is_file()

    def test_each_run_keeps_its_report_and_the_week_points_at_the_latest(
        self, toy_project: Path
    ) -> None:
        """Two manual runs of this week: two names, two report files, the week's copy the second's."""
        first = weekly_eval(config_path=str(toy_project), return_state=True)
        second = weekly_eval(config_path=str(toy_project), return_state=True)
        names = [run_name(s.state_details.flow_run_id) for s in (first, second)]
        pattern = rf"weekly-eval-{re.escape(iso_week())}-manual-[0-9a-f]{{6}}"
        assert all(re.fullmatch(pattern, n) for n in names) and names[0] != names[1]
        reports = Path(load_config(toy_project).store_url) / "reports"
        latest = reports / f"weekly-eval-{iso_week()}"
        for suffix in (".md", ".html"):
            assert (reports / f"{names[0]}{suffix}").is_file()
            second_file = (reports / f"{names[1]}{suffix}").read_bytes()
            assert latest.with_suffix(suffix).read_bytes() == second_file
        assert second.result()["report"] == (reports / f"{names[1]}.html").as_uri()

    def test_invalid_evalset_fails_before_any_inference(
        self, toy_project: Path, toy_evalset: Path
    ) -> None:
        """A tampered evalset ends the run Failed, names the file; the line's ERROR row, no result."""
        data = toy_evalset / "data" / "part-000.parquet"
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 2] ^= 0x01
        data.write_bytes(bytes(raw))
        state = weekly_eval(week="2026-W40", config_path=str(toy_project), return_state=True)
        assert state.is_failed()
        assert "the evalset is invalid" in state.message and "part-000.parquet" in state.message
        assert state.message.startswith("2026-W40: ERROR toy-model@v1 (not evaluated")
        assert "more" not in state.message.split(" | ")[0]  # one problem, not repeated
        _assert_nothing_ran(toy_project)

    @pytest.mark.parametrize(
        ("field", "value"), [("classes", [1, 0, 2]), ("metrics", ["top5_accuracy"])]
    )
    def test_an_edited_manifest_field_fails_the_run_naming_it(
        self, toy_project: Path, toy_evalset: Path, field: str, value: object
    ) -> None:
        """Swapped classes or narrowed metrics, data untouched: Failed, naming the field; no rows."""
        edit(toy_evalset, **{field: value})
        state = weekly_eval(week="2026-W40", config_path=str(toy_project), return_state=True)
        assert state.is_failed()
        assert f"evalset.yaml: {field}: changed since freeze" in state.message
        _assert_nothing_ran(toy_project)

    def test_corrupt_checkpoint_is_an_error_row_and_the_others_complete(
        self, toy_project: Path, toy_checkpoints: dict[str, Path], tmp_path: Path
    ) -> None:
        """One broken checkpoint fails itself: an ERROR naming it, the other model still evaluated."""
        broken = tmp_path / "broken.pt"
        broken.write_bytes(toy_checkpoints["good"].read_bytes())
        Registry(load_config(toy_project).registry_url).register(
            broken, "other-model", stage="production", trust=TRUST
        )
        broken.write_bytes(broken.read_bytes()[:200])
        state = weekly_eval(week="2026-W40", config_path=str(toy_project), return_state=True)
        assert state.is_failed()
        assert "other-model" in state.message and "evaluation failed" in state.message
        frame = history(toy_project).evaluations().set_index("model")
        assert frame.loc["toy-model", "status"] == "ok"
        assert frame.loc["other-model", "status"] == "error"
        assert "changed since registration" in frame.loc["other-model", "error"]


class TestEvaluateCandidate:
    def test_candidate_flow_gates_against_production(
        self, toy_project: Path, toy_checkpoints: dict[str, Path]
    ) -> None:
        """The flow twin of `evalsentry evaluate`: a worse candidate fails, a good one passes."""
        weekly_eval(week="2026-W40", config_path=str(toy_project), return_state=True)
        bad = evaluate_candidate(
            checkpoint=str(toy_checkpoints["degraded"]),
            model="toy-model",
            config_path=str(toy_project),
            return_state=True,
        )
        good = evaluate_candidate(
            checkpoint=str(toy_checkpoints["good"]),
            model="toy-model",
            config_path=str(toy_project),
            return_state=True,
        )
        assert bad.is_failed() and "vs production" in bad.message
        bad_sha = hashlib.sha256(toy_checkpoints["degraded"].read_bytes()).hexdigest()[:8]
        assert bad.message.startswith(
            f"{iso_week()}: FAIL toy-model (candidate {bad_sha}) accuracy -"
        )
        assert good.is_completed()
        assert good.message.startswith(f"{iso_week()}: PASS")  # the verdict, not only "Completed"
        sha = hashlib.sha256(toy_checkpoints["good"].read_bytes()).hexdigest()[:8]
        name = run_name(good.state_details.flow_run_id)
        assert re.fullmatch(rf"evaluate-candidate-toy-model-{sha}-[0-9a-f]{{6}}", name)
        reports = Path(load_config(toy_project).store_url) / "reports"
        assert (reports / f"{name}.md").is_file() and (reports / f"{name}.html").is_file()
        assert (reports / f"evaluate-candidate-{iso_week()}.md").is_file()
        assert (reports / f"evaluate-candidate-{iso_week()}.html").is_file()
        kinds = history(toy_project).evaluations()["kind"].value_counts().to_dict()
        assert kinds == {"scheduled": 1, "candidate": 2}


class TestNothingToEvaluate:
    def test_a_mistyped_model_fails_the_run_with_a_did_you_mean(self, toy_project: Path) -> None:
        """`models=["toy-modle"]`: Failed, naming the model and the closest one; nothing recorded."""
        state = weekly_eval(
            week="2026-W40", models=["toy-modle"], config_path=str(toy_project), return_state=True
        )
        assert state.is_failed()
        assert state.message.startswith("2026-W40: ERROR nothing to evaluate | ")
        assert "model 'toy-modle' is not registered. Did you mean 'toy-model'?" in state.message
        assert history(toy_project).evaluations().empty

    def test_a_project_that_only_imports_completes_and_sends_nothing(
        self, toy_project: Path
    ) -> None:
        """imports: and no checkpoint: the run says nothing is configured for it, Completed and
        quiet; once the history holds a line of its own that the registry lost, it fails."""
        from tests.synthetic import accuracy_mask, record_week

        text = toy_project.read_text().replace("registry: registry", "registry: none")
        toy_project.write_text(text + "imports:\n  chat: {harness: lm-eval, results: runs}\n")
        state = weekly_eval(week="2026-W40", config_path=str(toy_project), return_state=True)
        assert state.is_completed(), state.message
        assert state.message == (
            "2026-W40: nothing configured: no checkpoint is registered or bound, and the "
            "results are imported (imports:); import-results gates them"
        )
        assert alerts_of(state, "2026-W40", expect=False) == []

        settings = load_config(toy_project)
        record_week(History(settings.store_url), "2026-W39", accuracy_mask(200, 0.9), model="m")
        lost = weekly_eval(week="2026-W40", config_path=str(toy_project), return_state=True)
        assert lost.is_failed() and lost.message.startswith("2026-W40: ERROR nothing to evaluate")

    def test_an_empty_registry_fails_the_run_saying_how_to_register(
        self, toy_project: Path, tmp_path: Path
    ) -> None:
        """No checkpoint registered: Failed with the register command, never an empty PASS."""
        toy_project.write_text(
            toy_project.read_text().replace("registry: registry", "registry: none")
        )
        state = weekly_eval(week="2026-W40", config_path=str(toy_project), return_state=True)
        assert state.is_failed()
        assert "the registry holds no checkpoint; register one with `evalsentry register" in (
            state.message
        )


def test_a_store_that_is_a_file_fails_the_run_before_any_inference(toy_project: Path) -> None:
    """`store:` naming a file: Failed in seconds, naming it; no inference task ran.

    evalsentry.yaml is refused as it loads (`History.check_writable` would name it next)."""
    (toy_project.parent / "store").write_text("not a folder")
    state = weekly_eval(week="2026-W40", config_path=str(toy_project), return_state=True)
    assert state.is_failed()
    store = toy_project.parent / "store"
    assert state.message.startswith(f"2026-W40: ERROR {store}: the store is a file, not a folder")
    assert not [
        r for r in task_runs(state.state_details.flow_run_id) if r.name.startswith("evaluate-")
    ]


@pytest.mark.parametrize("week", ["2026-49", "W49"])
def test_malformed_week_is_refused(toy_project: Path, week: str) -> None:
    """A backfill week that is not an ISO week is refused before anything runs."""
    state = weekly_eval(week=week, config_path=str(toy_project), return_state=True)
    assert state.is_failed() and "ISO week" in state.message


def test_a_backfill_runs_its_weeks_one_after_another_in_week_order(
    toy_project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`evalsentry backfill 2026-W40..2026-W42`: three runs, in week order, each gated against
    the week recorded just before it; one verdict line each, exit 0."""
    from evalsentry.cli import main

    assert main(["backfill", "2026-W40..2026-W42", "--config", str(toy_project)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("flow run")]
    assert [line.split(": ")[1] for line in lines] == ["2026-W40", "2026-W41", "2026-W42"]
    assert lines[0].startswith("flow run Completed: 2026-W40: BASELINE")
    assert all("PASS" in line for line in lines[1:])
    rows = history(toy_project).evaluations().sort_values("finished_at")
    assert rows["week"].tolist() == ["2026-W40", "2026-W41", "2026-W42"]
    comparisons = history(toy_project).comparisons()
    previous = comparisons[(comparisons["reference"] == "previous-week")]
    assert set(previous["week"]) == {"2026-W41", "2026-W42"}


def test_a_week_not_begun_is_refused_and_nothing_recorded(toy_project: Path) -> None:
    """`week=` next week (a typo, or a run form filled in ahead): Failed in one line."""
    from datetime import timedelta

    from evalsentry.weeks import now_utc

    next_week = iso_week(now_utc() + timedelta(days=7))
    state = weekly_eval(week=next_week, config_path=str(toy_project), return_state=True)
    assert state.is_failed()
    assert state.message.startswith(f"{next_week}: ERROR week {next_week} has not begun (it is ")
    assert history(toy_project).evaluations().empty


class TestDrift:
    @staticmethod
    def shifted_live_sample(toy_evalset: Path, tmp_path: Path) -> Path:
        """The toy inputs moved by +1.5 on every feature: drift that cannot be missed."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        from evalsentry.evalsets.evalset import load_evalset

        values = load_evalset(toy_evalset).inputs.reshape(-1) + 1.5
        path = tmp_path / "live.parquet"
        pq.write_table(
            pa.table(
                {"x": pa.FixedSizeListArray.from_arrays(pa.array(values.astype(np.float32)), 4)}
            ),
            path,
        )
        return path

    def test_drift_is_recorded_reported_and_does_not_fail_by_default(
        self, toy_project: Path, toy_evalset: Path, tmp_path: Path
    ) -> None:
        """A shifted live sample yields drift rows and an HTML report; the run completes, a WARN:
        drift leads its state message and its log, one WARNING line per drifted feature."""
        live = self.shifted_live_sample(toy_evalset, tmp_path)
        toy_project.write_text(toy_project.read_text() + f"drift:\n  live:\n    toy: {live}\n")
        state = weekly_eval(week="2026-W40", config_path=str(toy_project), return_state=True)
        assert state.is_completed()
        headline = "2026-W40: WARN drift in 4 feature(s): toy mean PSI"
        assert (state.message or "").startswith(headline)
        logs = run_logs(state.state_details.flow_run_id)
        assert logs[0][0] == logging.WARNING and logs[0][1] == state.message
        features = [message for _, message in logs[1:5]]
        assert [level for level, _ in logs[1:5]] == [logging.WARNING] * 4
        assert [m.split(":")[0] for m in features] == [
            "FAIL drift toy mean",
            "FAIL drift toy max",
            "FAIL drift toy min",
            "FAIL drift toy predicted_class of toy-model",
        ]
        assert alerts_of(state, "2026-W40", expect=False) == []  # no failed-week alert, but
        (drifted,) = wait_for_events(  # one drift alert of its own, routable apart
            WEEK_DRIFTED, "evalsentry.week.2026-W40", flow_run_id=state.state_details.flow_run_id
        )
        payload = drifted.payload
        assert payload["alert"] == "drift" and payload["gate"] == "WARN"
        assert payload["headline"] == state.message.split(" | ")[0]
        assert payload["counts"]["DRIFT"] == 4 and payload["worst"] == []
        first = payload["drift"][0]
        assert (first["feature"], first["verdict"]) == ("mean", "FAIL")
        assert all(row["psi"] > 0.25 and row["p"] is not None for row in payload["drift"][:3])
        drift = history(toy_project).drift()
        assert set(drift["kind"]) == {"input", "prediction"}
        assert (drift["verdict"] == "FAIL").any()
        reports = Path(load_config(toy_project).store_url) / "reports"
        assert "Live-data drift" in (reports / "weekly-eval-2026-W40.html").read_text()
        assert (reports / "weekly-eval-2026-W40.md").read_text().count("### Live-data drift") == 1

    def test_drift_can_fail_the_run(
        self, toy_project: Path, toy_evalset: Path, tmp_path: Path
    ) -> None:
        """With drift.fail_run, FAIL-level drift ends the run Failed, naming the feature, and its
        alert's text leads with that headline and lists the drifted features."""
        live = self.shifted_live_sample(toy_evalset, tmp_path)
        toy_project.write_text(
            toy_project.read_text() + f"drift:\n  fail_run: true\n  live:\n    toy: {live}\n"
        )
        state = weekly_eval(week="2026-W40", config_path=str(toy_project), return_state=True)
        assert state.is_failed()
        assert state.message.startswith("2026-W40: FAIL drift in 4 feature(s): toy mean PSI")
        (alert,) = alerts_of(state, "2026-W40")  # its one alert says why, drift first
        run = state.state_details.flow_run_id
        assert wait_for_events(WEEK_DRIFTED, "evalsentry.week.2026-W40", 0, run) == []
        text = alert.payload["text"].splitlines()
        assert text[0] == "evalsentry: " + state.message.split(" | ")[0]
        assert alert.payload["gate"] == "FAIL" and alert.payload["counts"]["DRIFT"] == 4
        assert any(line.startswith("FAIL drift toy mean: PSI") for line in text)
        drift_lines = [
            level
            for level, line in run_logs(state.state_details.flow_run_id)
            if line.startswith("FAIL drift toy")
        ]
        assert drift_lines and set(drift_lines) == {logging.ERROR}  # what failed the run

    def test_a_misspelt_drift_entry_fails_the_run_before_evaluating(
        self, toy_project: Path
    ) -> None:
        """drift.live naming no evalset ends the run Failed, naming the field; nothing recorded."""
        toy_project.write_text(toy_project.read_text() + "drift:\n  live:\n    tyo: live.parquet\n")
        state = weekly_eval(week="2026-W40", config_path=str(toy_project), return_state=True)
        assert state.is_failed()
        assert "ERROR the config does not fit the evalsets" in state.message
        assert "drift.live.tyo: 'tyo' is not an evalset" in state.message
        assert "Did you mean 'toy'?" in state.message
        assert history(toy_project).evaluations().empty


def test_an_s3_store_links_a_signed_url_a_browser_can_open(
    s3_project: Path,  # noqa: F811 - the fixture imported above
    toy_checkpoints: dict[str, Path],
) -> None:
    """On an object store the link artifact is a presigned URL that serves this run's HTML report."""
    import urllib.request

    Registry(load_config(s3_project).registry_url).register(
        toy_checkpoints["good"], "toy-model", stage="production", trust=TRUST
    )
    state = weekly_eval(week="2026-W40", config_path=str(s3_project), return_state=True)
    assert state.is_completed(), state.message
    (link,) = asyncio.run(_artifacts(state.state_details.flow_run_id))["weekly-eval-report-file"]
    match = re.fullmatch(
        r"\[HTML report of (.+) \(signed link, valid until .+ UTC\)\]\((.+)\)", link.data
    )
    assert match, link.data
    url = match.group(2)
    assert url.startswith("http") and "Signature" in url and f"{match.group(1)}.html" in url
    with urllib.request.urlopen(url, timeout=30) as reply:  # noqa: S310 - the test's moto server
        assert b"<html" in reply.read().lower()


def test_a_verdict_is_one_state_line_and_one_log_record_per_detail() -> None:
    """A flow ending on `fail` is Failed with a capped one-line message; each line is its own log."""
    from prefect import flow
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogWorker

    from evalsentry.flows.runs import fail

    @flow
    def judged() -> object:
        notes = [(logging.WARNING, "d"), (logging.INFO, "e")]  # beside the failure, not it
        return fail("2026-W41: FAIL m@v2 accuracy -5.0 pts (p=0.002) and 4 more", [*"abc", *notes])

    state = judged(return_state=True)
    assert state.is_failed()
    assert state.message == (
        "2026-W41: FAIL m@v2 accuracy -5.0 pts (p=0.002) and 4 more"
        " | a | b | c | 2 more in the run's log and report"
    )
    APILogWorker.drain_all(timeout=30)  # the run's logs reach the API in batches

    async def messages() -> list[tuple[str, int]]:
        async with get_client() as client:
            logs = await client.read_logs(
                LogFilter(flow_run_id=LogFilterFlowRunId(any_=[state.state_details.flow_run_id]))
            )
        return [(log.message, log.level) for log in logs]

    levels = dict(asyncio.run(messages()))
    assert [levels[line] for line in "abcde"] == [logging.ERROR] * 3 + [
        logging.WARNING,
        logging.INFO,
    ]


def _assert_nothing_ran(project: Path) -> None:
    """The week holds the line's ERROR row only: no metric, no prediction."""
    rows = history(project).evaluations()
    assert rows["status"].tolist() == ["error"]
    assert history(project).metrics(rows["evaluation_id"]).empty
    assert history(project).predictions(rows["evaluation_id"].iloc[0]) is None
