"""One truth per week: which rows are current, read the same by evalsentry, DuckDB and pandas."""

from __future__ import annotations

import io
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

from evalsentry.cli import main
from evalsentry.history.store import History
from evalsentry.names import CANDIDATE_CHECK, NO_EVALSET
from tests.synthetic import accuracy_mask, record_week

README = Path(__file__).parents[2] / "README.md"
N = 200
WEEK = "2026-W40"


def readme_block(marker: str) -> str:
    """The fenced code block the README puts right after ``<!-- marker -->``."""
    text = README.read_text(encoding="utf-8")
    match = re.search(rf"<!-- {re.escape(marker)} -->\s*```\w*\n(.*?)```", text, re.S)
    assert match, f"README has no block after <!-- {marker} -->"
    return match.group(1)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """The store root of a fresh history."""
    return tmp_path / ".evalsentry"


def current(history: History) -> list[tuple[str, int | None, str, str, str]]:
    """The current rows as (model, version, stage, evalset, status), sorted."""
    frame = history.evaluations()
    return sorted(
        (r.model, None if pd.isna(r.version) else int(r.version), r.stage, r.evalset, r.status)
        for r in frame.itertuples()
    )


class TestSupersede:
    def test_a_rollback_leaves_one_result_for_the_line(self, store: Path) -> None:
        """v3 degraded, rolled back to v2, the week re-run: only v2's row is current."""
        history = History(str(store))
        record_week(history, WEEK, accuracy_mask(N, 0.7), version=3, checkpoint="3" * 64)
        record_week(history, WEEK, accuracy_mask(N, 0.9), version=2, checkpoint="2" * 64)
        assert current(history) == [("m", 2, "production", "toy", "ok")]
        assert len(history.evaluations(include_superseded=True)) == 2

    def test_a_promotion_retires_the_line_s_stale_candidate_result(self, store: Path) -> None:
        """v3 was the candidate, then production: the re-run's production row replaces both."""
        history = History(str(store))
        record_week(history, WEEK, accuracy_mask(N, 0.9), version=2, checkpoint="2" * 64)
        record_week(
            history, WEEK, accuracy_mask(N, 0.9), version=3, checkpoint="3" * 64, stage="candidate"
        )
        record_week(history, WEEK, accuracy_mask(N, 0.9), version=3, checkpoint="3" * 64)
        assert current(history) == [("m", 3, "production", "toy", "ok")]

    def test_a_run_of_production_only_keeps_the_week_s_candidate(self, store: Path) -> None:
        """Rows are replaced only in the stages the run evaluates."""
        history = History(str(store))
        record_week(history, WEEK, accuracy_mask(N, 0.9), stage="candidate", version=2)
        history.append(
            [_row("m", 1, "production", "toy", started=pd.Timestamp.now(tz="UTC"))],
            stages=("production",),
        )
        assert current(history) == [
            ("m", 1, "production", "toy", "error"),
            ("m", 2, "candidate", "toy", "ok"),
        ]

    def test_a_line_level_error_and_a_result_of_the_line_replace_each_other(
        self, store: Path
    ) -> None:
        """Unbound (evalset *) replaces the line's rows; binding it and re-running replaces that."""
        history = History(str(store))
        record_week(history, WEEK, accuracy_mask(N, 0.9))
        history.append([_row("m", 1, "production", NO_EVALSET)])
        assert current(history) == [("m", 1, "production", NO_EVALSET, "error")]
        later = pd.Timestamp.now(tz="UTC") + pd.Timedelta(seconds=5)
        record_week(history, WEEK, accuracy_mask(N, 0.9), finished=later.to_pydatetime())
        assert current(history) == [("m", 1, "production", "toy", "ok")]

    def test_candidate_checks_replace_only_a_check_of_the_same_file(self, store: Path) -> None:
        """Two files checked in a week are two results; the same file checked again is one."""
        history = History(str(store))
        for sha in ("a" * 64, "b" * 64, "a" * 64):
            record_week(
                history,
                WEEK,
                accuracy_mask(N, 0.9),
                checkpoint=sha,
                kind=CANDIDATE_CHECK,
                stage="candidate",
                version=None,
            )
        frame = history.evaluations()
        assert sorted(frame["checkpoint_sha256"]) == ["a" * 64, "b" * 64]

    def test_an_older_run_publishing_after_a_newer_one_lists_itself(self, store: Path) -> None:
        """Two runs race: the one that started first and published last marks its own row."""
        history = History(str(store))
        later = pd.Timestamp.now(tz="UTC")
        record_week(history, WEEK, accuracy_mask(N, 0.9), finished=later.to_pydatetime())
        old = _row("m", 1, "production", "toy", started=later - pd.Timedelta(seconds=30))
        history.append([old])
        rows = history.evaluations(include_superseded=True)
        assert list(
            rows.loc[rows["evaluation_id"] == old["evaluation_id"], "supersedes"].iloc[0]
        ) == [old["evaluation_id"]]
        assert current(history) == [("m", 1, "production", "toy", "ok")]

    def test_metric_rows_say_whose_they_are(self, store: Path) -> None:
        """Each metric row carries its evaluation's version, stage and kind (schema 2)."""
        history = History(str(store))
        evaluation_id = record_week(history, WEEK, accuracy_mask(N, 0.9), version=4)
        metrics = history.metrics([evaluation_id])
        assert set(metrics["version"]) == {4}
        assert set(metrics["stage"]) == {"production"} and set(metrics["kind"]) == {"scheduled"}


def _row(
    model: str, version: int, stage: str, evalset: str, started: pd.Timestamp | None = None
) -> dict[str, object]:
    """An error evaluation row: what a run records for a pair that could not be evaluated."""
    now = started if started is not None else pd.Timestamp.now(tz="UTC")
    return {
        "evaluation_id": os.urandom(16).hex(),
        "run_id": os.urandom(16).hex(),
        "week": WEEK,
        "kind": "scheduled",
        "started_at": now.to_pydatetime(),
        "finished_at": now.to_pydatetime(),
        "status": "error",
        "error": "not evaluated: it is bound to no evalset",
        "model": model,
        "version": version,
        "stage": stage,
        "evalset": evalset,
    }


@pytest.fixture
def rerun_history(store: Path, tmp_path: Path) -> Iterator[Path]:
    """A project whose history holds re-runs, a rollback, an ERROR and two candidate checks."""
    (tmp_path / "evalsentry.yaml").write_text("store: .evalsentry\n")
    history = History(str(store))
    record_week(history, "2026-W39", accuracy_mask(N, 0.9))
    record_week(history, "2026-W39", accuracy_mask(N, 0.92))  # a re-run
    record_week(history, WEEK, accuracy_mask(N, 0.7), version=3, checkpoint="3" * 64)
    record_week(history, WEEK, accuracy_mask(N, 0.9), version=2, checkpoint="2" * 64)
    record_week(history, WEEK, accuracy_mask(N, 0.9), model="n", status="error")
    for sha in ("a" * 64, "b" * 64):
        record_week(
            history,
            WEEK,
            accuracy_mask(N, 0.85),
            checkpoint=sha,
            kind=CANDIDATE_CHECK,
            stage="candidate",
            version=None,
        )
    yield tmp_path


class TestRawReaders:
    def _cli_csv(self, project: Path, capsys: pytest.CaptureFixture[str]) -> pd.DataFrame:
        """`evalsentry history --format csv` run in ``project``, parsed."""
        assert (
            main(["history", "--format", "csv", "--config", str(project / "evalsentry.yaml")]) == 0
        )
        return pd.read_csv(io.StringIO(capsys.readouterr().out), keep_default_na=False)

    def test_the_readme_duckdb_query_returns_evalsentry_history_row_for_row(
        self,
        rerun_history: Path,
        capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """The README's SQL, run by DuckDB over the raw files, prints what `history` prints."""
        monkeypatch.chdir(rerun_history)
        cli = self._cli_csv(rerun_history, capsys)
        raw = duckdb.sql(readme_block("history-query:duckdb")).df()
        assert len(cli) == len(raw) == 2 * 2 + 1 + 2 * 2  # W39, W40's v2, n's error, 2 checks
        assert list(raw.columns) == list(cli.columns)
        for column in cli.columns:
            shown = ["" if pd.isna(v) else str(v) for v in raw[column]]
            if column in ("value", "ci_low", "ci_high"):
                assert np.allclose(
                    pd.to_numeric(cli[column].replace("", np.nan)),
                    pd.to_numeric(pd.Series(shown).replace("", np.nan)),
                    equal_nan=True,
                ), column
            else:
                assert cli[column].astype(str).tolist() == shown, column

    def test_the_readme_pandas_snippet_picks_the_same_rows(
        self, rerun_history: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The README's pandas snippet keeps exactly the evaluations evalsentry calls current."""
        monkeypatch.chdir(rerun_history)
        scope: dict[str, object] = {}
        exec(readme_block("history-query:pandas"), scope)  # noqa: S102 - the README's own snippet
        shown = scope["history"]
        assert isinstance(shown, pd.DataFrame)
        ours = History(str(rerun_history / ".evalsentry")).evaluations()
        assert set(shown["evaluation_id"]) == set(ours["evaluation_id"])

    def test_history_prints_versions_as_integers_and_keeps_errors_in_view(
        self,
        rerun_history: Path,
        capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """CSV versions read 2, not 2.0; a candidate file's is empty; an ERROR row has its reason."""
        monkeypatch.chdir(rerun_history)
        cli = self._cli_csv(rerun_history, capsys)
        assert set(cli["version"]) == {"1", "2", ""}
        error = cli[cli["status"] == "error"]
        assert error["model"].tolist() == ["n"] and error["error"].tolist() == [
            "checkpoint corrupt"
        ]


class TestUmask:
    @pytest.mark.parametrize(
        ("mask", "file_mode", "folder_mode"), [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700)]
    )
    def test_files_and_folders_follow_the_process_umask(
        self,
        tmp_path: Path,
        pinned_git: str,
        train_data: Path,
        mask: int,
        file_mode: int,
        folder_mode: int,
    ) -> None:
        """Checkpoints, registry entries, history files, reports and evalsets: a plain write's modes."""
        from evalsentry.checkpoints.checkpoint import save_checkpoint
        from evalsentry.checkpoints.registry import Registry
        from evalsentry.evalsets.evalset import InputsSpec
        from evalsentry.evalsets.freeze import freeze_evalset
        from evalsentry.storage import filesystem, write_atomic
        from tests.models import TRUST, TinyNet

        made = tmp_path / "made"
        old = os.umask(mask)
        try:
            checkpoint = save_checkpoint(
                TinyNet(),
                made / "ckpt" / "tiny.pt",
                metrics={},
                config={},
                seed=0,
                data=train_data,
                factory_kwargs={"features": 4, "classes": 3},
            )
            Registry(str(made / "registry")).register(checkpoint, "tiny", trust=TRUST)
            record_week(History(str(made / "store")), WEEK, accuracy_mask(N, 0.9))
            fs, root = filesystem(str(made / "reports"))
            write_atomic(fs, f"{root}/weekly.md", b"# report\n")
            freeze_evalset(
                pd.DataFrame({"x": [1.0, 2.0, 3.0], "y": [0, 1, 0]}),
                made / "evalsets" / "e",
                name="e",
                task="classification",
                target="y",
                inputs=InputsSpec(columns=["x"]),
            )
        finally:
            os.umask(old)
        paths = list(made.rglob("*"))
        assert {stat.S_IMODE(p.stat().st_mode) for p in paths if p.is_file()} == {file_mode}
        assert {stat.S_IMODE(p.stat().st_mode) for p in paths if p.is_dir()} == {folder_mode}
        kinds = {p.suffix for p in paths if p.is_file()}
        assert {".pt", ".json", ".parquet", ".md", ".yaml"} <= kinds


class TestProjectFound:
    @pytest.fixture
    def project(self, tmp_path: Path, tiny_checkpoint: Path) -> Path:
        """A project with one registered model line, 'tiny'."""
        from tests.models import TRUSTED_YAML

        (tmp_path / "evalsentry.yaml").write_text(TRUSTED_YAML)
        argv = ["register", str(tiny_checkpoint), "--model", "tiny", "--new-model"]
        argv += ["--config", str(tmp_path / "evalsentry.yaml")]
        assert main(argv) == 0
        return tmp_path

    def test_a_subfolder_finds_its_project(
        self, project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """From a folder inside the project, `registry list` lists the project's lines."""
        inner = project / "training" / "notebooks"
        inner.mkdir(parents=True)
        monkeypatch.chdir(inner)
        capsys.readouterr()
        assert main(["registry", "list"]) == 0
        assert "tiny@v1" in capsys.readouterr().out

    @pytest.mark.parametrize(
        "argv",
        [
            ["registry", "list"],
            ["history"],
            ["gate"],
            ["run"],
            ["register", "x.pt", "--model", "m"],
        ],
    )
    def test_outside_any_project_every_command_says_so_in_one_line(
        self,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
        argv: list[str],
    ) -> None:
        """No evalsentry.yaml here or above: exit 2 and one line; `--config` is not named."""
        empty = tmp_path / "elsewhere"
        empty.mkdir()
        monkeypatch.chdir(empty)
        assert main(argv) == 2
        captured = capsys.readouterr()
        (line,) = captured.err.strip().splitlines()
        assert f"evalsentry.yaml: not found in {empty} or any folder above it" in line
        assert "--config" not in line and captured.out == ""

    def test_a_config_option_naming_no_file_is_named(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--config pointing nowhere: the option and the path, in one line."""
        missing = tmp_path / "nope.yaml"
        assert main(["history", "--config", str(missing)]) == 2
        assert capsys.readouterr().err.strip() == (
            f"error: --config {missing}: file not found; give the project's evalsentry.yaml"
        )


class TestTyposRefused:
    def test_register_refuses_a_new_line_without_new_model(
        self, trusted_project: Path, tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`--model fiar` beside `fair`: exit 2 with a did-you-mean; nothing registered."""
        from evalsentry.checkpoints.registry import Registry

        assert main(["register", str(tiny_checkpoint), "--model", "fair", "--new-model"]) == 0
        capsys.readouterr()
        assert main(["register", str(tiny_checkpoint), "--model", "fiar"]) == 2
        err = capsys.readouterr().err
        assert "model 'fiar' is neither registered nor in the history. Did you mean 'fair'?" in err
        assert "--new-model" in err and err.count("\n") == 1
        assert Registry(str(trusted_project / ".evalsentry" / "registry")).models() == ["fair"]

    def test_re_registering_with_other_factory_kwargs_is_refused_naming_both(
        self, trusted_project: Path, tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The same file with different --factory-kwargs: exit 2 naming pinned and given kwargs."""
        assert main(["register", str(tiny_checkpoint), "--model", "tiny", "--new-model"]) == 0
        capsys.readouterr()
        argv = ["register", str(tiny_checkpoint), "--model", "tiny"]
        argv += ["--factory", "tests.models:TinyNet", "--factory-kwargs", '{"features": 4}']
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert (
            'pinned to model tests.models:TinyNet with kwargs {"classes": 3, "features": 4}' in err
        )
        assert 'with {"features": 4} differs and was not used' in err

    def test_re_registering_an_archived_file_names_the_command(
        self, trusted_project: Path, tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """An archived version asked for again as production: nothing registered, and how to."""
        assert main(["register", str(tiny_checkpoint), "--model", "tiny", "--new-model"]) == 0
        assert main(["registry", "archive", "tiny", "1"]) == 0
        capsys.readouterr()
        argv = ["register", str(tiny_checkpoint), "--model", "tiny", "--stage", "production"]
        assert main(argv) == 0
        assert (
            capsys.readouterr()
            .out.strip()
            .endswith(
                "nothing registered (v1 stays archived; make it production with: "
                "evalsentry registry promote tiny 1)"
            )
        )
