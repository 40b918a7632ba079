"""The Parquet history: open formats, append-only writes, supersede on re-run, crash safety."""

from __future__ import annotations

import errno
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from evalsentry.errors import HistoryError
from evalsentry.history.schema import SCHEMA_VERSION
from evalsentry.history.store import History
from evalsentry.names import CANDIDATE_CHECK, RUN_KINDS, STAGES, WEEKLY_RUN
from evalsentry.weeks import iso_week
from tests.synthetic import accuracy_mask, pre_ledger, record_week

N = 200


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """The store root of a fresh history."""
    return tmp_path / "store"


def parquet_files(root: Path) -> list[Path]:
    """Every published (non-hidden) Parquet file under ``root``."""
    return sorted(p for p in root.rglob("*.parquet") if not p.name.startswith("."))


class TestFormat:
    def test_rows_round_trip_and_open_tools_read_them(self, store: Path) -> None:
        """What is appended reads back through evalsentry, pandas and DuckDB alike."""
        history = History(str(store))
        evaluation_id = record_week(history, "2026-W40", accuracy_mask(N, 0.9))
        frame = history.evaluations()
        assert frame["evaluation_id"].tolist() == [evaluation_id]
        assert frame["schema_version"].tolist() == [SCHEMA_VERSION]
        metrics = history.metrics([evaluation_id])
        overall = metrics[(metrics["metric"] == "accuracy") & (metrics["slice"] == "")]
        assert overall["value"].item() == pytest.approx(0.9)
        assert pd.read_parquet(store / "evaluations")["week"].tolist() == ["2026-W40"]
        rows = duckdb.sql(
            f"select count(*) from read_parquet('{store}/metrics/*.parquet')"
        ).fetchall()
        assert rows == [(len(metrics),)]
        predictions = history.predictions(evaluation_id)
        assert predictions is not None and len(predictions["example_id"]) == N

    def test_iso_week(self) -> None:
        """ISO weeks are formatted YYYY-Www."""
        from datetime import datetime

        assert iso_week(datetime(2026, 12, 2)) == "2026-W49"
        assert iso_week(datetime(2027, 1, 1)) == "2026-W53"


class TestRunKinds:
    def test_kinds_keep_the_values_histories_hold(self) -> None:
        """The run kinds are named in code only: rows on disk keep reading as they were written."""
        assert (WEEKLY_RUN, CANDIDATE_CHECK) == ("scheduled", "candidate")
        assert set(RUN_KINDS) == {WEEKLY_RUN, CANDIDATE_CHECK}

    def test_kind_and_stage_are_read_apart(self, store: Path) -> None:
        """A weekly row of a registry candidate and a candidate check differ by kind, not stage."""
        assert "candidate" in STAGES
        history = History(str(store))
        weekly = record_week(history, "2026-W40", accuracy_mask(N, 0.9), stage="candidate")
        check = record_week(
            history, "2026-W40", accuracy_mask(N, 0.9), stage="candidate", kind=CANDIDATE_CHECK
        )
        assert history.evaluations(kind=WEEKLY_RUN)["evaluation_id"].tolist() == [weekly]
        assert history.evaluations(kind=CANDIDATE_CHECK)["evaluation_id"].tolist() == [check]


class TestAppendOnly:
    def test_rerun_of_a_week_supersedes_in_the_read_view_and_keeps_the_files(
        self, store: Path
    ) -> None:
        """Re-running a week shows one result per key; both runs' files stay for audit."""
        history = History(str(store))
        record_week(history, "2026-W40", accuracy_mask(N, 0.9))
        files_before = parquet_files(store)
        second = record_week(history, "2026-W40", accuracy_mask(N, 0.8))
        view = history.evaluations()
        assert view["evaluation_id"].tolist() == [second]
        assert len(history.evaluations(include_superseded=True)) == 2
        assert set(files_before) < set(parquet_files(store))

    def test_append_cost_does_not_rewrite_earlier_files(self, store: Path) -> None:
        """Appending writes new files only; earlier files are byte-for-byte untouched."""
        history = History(str(store))
        record_week(history, "2026-W40", accuracy_mask(N, 0.9))
        before = {p: p.read_bytes() for p in parquet_files(store)}
        record_week(history, "2026-W41", accuracy_mask(N, 0.9))
        assert all(p.read_bytes() == data for p, data in before.items())

    def test_files_without_their_ledger_file_are_never_read(
        self, store: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A run that died before its ledger file (the commit) leaves nothing in the view."""
        from evalsentry.history.ledger import Ledger

        history = History(str(store))
        kept = record_week(history, "2026-W40", accuracy_mask(N, 0.9))

        def die(*args: object, **kwargs: object) -> None:
            raise SystemExit("killed before the commit")

        monkeypatch.setattr(Ledger, "record", die)
        with pytest.raises(SystemExit):
            record_week(History(str(store)), "2026-W41", accuracy_mask(N, 0.8))
        assert len(list((store / "evaluations").glob("*.parquet"))) == 2  # written, uncommitted
        assert History(str(store)).evaluations()["evaluation_id"].tolist() == [kept]

    def test_a_ledger_file_of_another_schema_is_read_and_a_damaged_one_refused_by_name(
        self, store: Path
    ) -> None:
        """A ledger file written without a column of today's schema (an older version's) reads
        with that column empty; a damaged one is refused naming it, never read around."""
        import pyarrow.parquet as pq

        from evalsentry.errors import HistoryError
        from evalsentry.history.ledger import LEDGER

        kept = record_week(History(str(store)), "2026-W40", accuracy_mask(N, 0.9))
        (commit,) = (store / LEDGER).glob("*.parquet")
        older = pq.read_table(commit).drop_columns(["etag", "schema_version"])
        pq.write_table(older, commit)
        history = History(str(store))
        assert history.evaluations()["evaluation_id"].tolist() == [kept]
        assert {p.etag for p in history.ledger.live().values()} == {None}
        commit.write_bytes(commit.read_bytes()[:-20])  # its footer cut off
        with pytest.raises(HistoryError, match=rf"{commit.name}: damaged ledger file \("):
            History(str(store)).evaluations()


WRITER = textwrap.dedent(
    """
    import sys
    from evalsentry.history.store import History
    from tests.synthetic import accuracy_mask, pre_ledger, record_week
    history = History(sys.argv[1])
    for i in range(int(sys.argv[3])):
        record_week(history, sys.argv[2], accuracy_mask(50, 0.9, seed=i), model=f"m{i}")
    """
)

STALLED_WRITER = textwrap.dedent(
    """
    import os, sys, time
    import evalsentry.storage as storage
    from evalsentry.history.store import History
    from tests.synthetic import accuracy_mask, pre_ledger, record_week
    def stall(fd):
        print("writing", flush=True)
        time.sleep(120)
    storage.os.fsync = stall
    record_week(History(sys.argv[1]), "2026-W41", accuracy_mask(50, 0.9), model="killed")
    """
)


def _python(code: str, *args: str) -> subprocess.Popen[str]:
    root = Path(__file__).parents[3]
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


class TestConcurrencyAndCrashes:
    def test_two_processes_writing_at_once_lose_nothing(self, store: Path) -> None:
        """Two writer processes appending the same week at once both land every row."""
        writers = [_python(WRITER, str(store), "2026-W40", "5") for _ in range(2)]
        for writer in writers:
            _, err = writer.communicate(timeout=120)
            assert writer.returncode == 0, err
        frame = History(str(store)).evaluations(include_superseded=True)
        assert len(frame) == 10
        assert len(History(str(store)).evaluations()) == 5  # one per key in the read view

    def test_writer_killed_mid_write_leaves_no_readable_partial_file(self, store: Path) -> None:
        """SIGKILL during a history write: nothing partial is read, earlier rows stay, next run works."""
        history = History(str(store))
        first = record_week(history, "2026-W40", accuracy_mask(N, 0.9))
        writer = _python(STALLED_WRITER, str(store))
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "writing"
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
        hidden = [p for p in store.rglob("*") if p.name.startswith(".") and p.is_file()]
        assert hidden, "the killed writer should have left its temporary file behind"
        assert history.evaluations()["evaluation_id"].tolist() == [first]
        second = record_week(history, "2026-W41", accuracy_mask(N, 0.9))
        assert history.evaluations()["evaluation_id"].tolist() == [first, second]

    def test_full_disk_leaves_no_partial_files_and_keeps_history(
        self, store: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A write failing with ENOSPC is a clear error; no file is left; old rows stay."""
        history = History(str(store))
        first = record_week(history, "2026-W40", accuracy_mask(N, 0.9))
        before = sorted(p for p in store.rglob("*") if p.is_file())
        from evalsentry import storage

        def full(fd: int) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(storage.os, "fsync", full)
        with pytest.raises(HistoryError, match="No space left on device"):
            record_week(history, "2026-W41", accuracy_mask(N, 0.9))
        monkeypatch.undo()
        assert sorted(p for p in store.rglob("*") if p.is_file()) == before
        assert history.evaluations()["evaluation_id"].tolist() == [first]


class TestBaselines:
    def test_set_baseline_requires_a_recorded_week(self, store: Path) -> None:
        """Only a week with a recorded evaluation can be pinned."""
        history = History(str(store))
        record_week(history, "2026-W40", accuracy_mask(N, 0.9))
        with pytest.raises(HistoryError, match="no evaluation"):
            history.set_baseline("m", "2026-W41")
        history.set_baseline("m", "2026-W40")
        assert history.baseline_week("m") == "2026-W40"

    def test_damaged_history_file_is_a_clear_error(self, store: Path) -> None:
        """A corrupt Parquet file of a history written before the ledger names what to do."""
        history = History(str(store))
        record_week(history, "2026-W40", accuracy_mask(N, 0.9))
        pre_ledger(store)
        (store / "evaluations" / "broken.parquet").write_bytes(b"PAR1 not really")
        with pytest.raises(HistoryError, match="move the damaged file aside"):
            history.evaluations()


class TestCompaction:
    def test_compaction_merges_files_and_keeps_every_row(self, store: Path) -> None:
        """After compaction each table is one file; the read views and the gate are unchanged."""
        from evalsentry.cli import main
        from evalsentry.gate.week import gate_week
        from evalsentry.sections import GatePolicy

        history = History(str(store))
        for week in range(40, 45):
            record_week(history, f"2026-W{week}", accuracy_mask(N, 0.9, seed=week))
        record_week(history, "2026-W44", accuracy_mask(N, 0.8))  # a re-run, superseding
        before = (history.evaluations(include_superseded=True), history.evaluations())
        metrics_before = history.metrics(before[0]["evaluation_id"])
        verdicts_before = [
            c.verdict for c in gate_week(history, "2026-W44", GatePolicy()).comparisons
        ]
        (store.parent / "evalsentry.yaml").write_text(f"store: {store}\n")
        assert main(["history", "compact", "--config", str(store.parent / "evalsentry.yaml")]) == 0
        for table in ("evaluations", "metrics"):
            assert len(list((store / table).glob("*.parquet"))) == 1
        assert len(history.evaluations(include_superseded=True)) == len(before[0]) == 6
        assert (
            history.evaluations()["evaluation_id"].tolist() == before[1]["evaluation_id"].tolist()
        )
        assert len(history.metrics(before[0]["evaluation_id"])) == len(metrics_before)
        assert [
            c.verdict for c in gate_week(history, "2026-W44", GatePolicy()).comparisons
        ] == verdicts_before

    def test_rows_present_in_two_files_are_read_once(self, store: Path) -> None:
        """A compaction interrupted before deleting the small files causes no duplicate rows."""
        import shutil

        history = History(str(store))
        evaluation_id = record_week(history, "2026-W40", accuracy_mask(N, 0.9))
        for table in ("evaluations", "metrics"):
            original = next((store / table).glob("*.parquet"))
            shutil.copy(original, store / table / "compact-copy.parquet")
        assert history.evaluations(include_superseded=True)["evaluation_id"].tolist() == [
            evaluation_id
        ]
        assert history.metrics([evaluation_id]).duplicated(["metric", "slice"]).sum() == 0


class TestWeekOrder:
    def test_weeks_order_as_dates_and_invalid_ones_are_left_out(self) -> None:
        """Weeks sort by their Monday across year ends; strings that are not weeks are dropped."""
        from evalsentry.weeks import latest_week, weeks_in_order

        full_width = "\uff12\uff10\uff12\uff16-W11"
        weeks = ["2026-W10", "2025-W52", full_width, "2026-W09", "2026-W01", "2026-W10"]
        assert weeks_in_order(weeks) == ["2025-W52", "2026-W01", "2026-W09", "2026-W10"]
        assert latest_week(weeks) == "2026-W10"
        assert latest_week([full_width]) is None and latest_week([]) is None

    def test_iso_week_of_a_year_with_53_weeks(self) -> None:
        """The last days of 2026 and the first of 2027 are week 53 of 2026, which is valid."""
        from datetime import datetime

        from evalsentry.weeks import check_week

        assert check_week(iso_week(datetime(2026, 12, 31))) == "2026-W53"
        assert iso_week(datetime(2027, 1, 4)) == "2027-W01"


class TestDamagedAndMisplacedStore:
    def test_damaged_file_is_named_not_only_its_folder(self, store: Path) -> None:
        """A truncated metrics file (no ledger) is named itself, to know which one to move aside."""
        history = History(str(store))
        evaluation_id = record_week(history, "2026-W40", accuracy_mask(N, 0.9))
        pre_ledger(store)
        damaged = next((store / "metrics").glob("*.parquet"))
        damaged.write_bytes(damaged.read_bytes()[:100])
        with pytest.raises(
            HistoryError, match=rf"^{re.escape(str(damaged))}: damaged history file \("
        ):
            history.metrics([evaluation_id])

    def test_damaged_predictions_file_is_named(self, store: Path) -> None:
        """A truncated predictions file (no ledger) is a HistoryError naming it, kept as it is."""
        history = History(str(store))
        evaluation_id = record_week(history, "2026-W40", accuracy_mask(N, 0.9))
        pre_ledger(store)
        damaged = store / "predictions" / f"{evaluation_id}.parquet"
        damaged.write_bytes(b"PAR1 cut short")
        with pytest.raises(
            HistoryError, match=rf"^{re.escape(str(damaged))}: damaged predictions file"
        ):
            history.predictions(evaluation_id)
        assert damaged.read_bytes() == b"PAR1 cut short"

    def test_compaction_refuses_columns_it_would_drop(self, store: Path) -> None:
        """A file with columns of a newer schema stops compaction; every file is kept."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        history = History(str(store))
        record_week(history, "2026-W40", accuracy_mask(N, 0.9))
        record_week(history, "2026-W41", accuracy_mask(N, 0.9))
        pre_ledger(store)  # a file placed by hand counts only where no ledger says otherwise
        newer = pq.read_table(next((store / "evaluations").glob("*.parquet")))
        newer = newer.append_column("gpu_hours", pa.array([1.0]))
        pq.write_table(newer, store / "evaluations" / "newer.parquet")
        before = sorted((store / "evaluations").iterdir())
        with pytest.raises(HistoryError, match="gpu_hours were written by a newer evalsentry"):
            history.compact("evaluations")
        assert sorted((store / "evaluations").iterdir()) == before

    def test_an_empty_list_of_ids_or_weeks_reads_nothing(self, store: Path) -> None:
        """No evaluation asked for: an empty frame, not a 'damaged history file'."""
        history = History(str(store))
        record_week(history, "2026-W40", accuracy_mask(N, 0.9))
        assert history.metrics([]).empty and history.evaluations(weeks=[]).empty
        assert not history.metrics(history.evaluations()["evaluation_id"]).empty

    def test_store_that_is_a_file_is_refused_up_front(self, store: Path) -> None:
        """check_root names the store (or the file above it) before any work; nothing is created."""
        store.write_text("not a folder")
        with pytest.raises(
            HistoryError, match=rf"^{re.escape(str(store))}: the store is a file, not a folder"
        ):
            History(str(store)).check_root()
        with pytest.raises(
            HistoryError, match=rf"cannot be a folder: {re.escape(str(store))} is a file"
        ):
            History(str(store / "deeper")).check_root()
        History(str(store.parent / "fresh" / "store")).check_root()
        assert not (store.parent / "fresh").exists()

    def test_writing_to_a_store_that_is_a_file_names_the_store(self, store: Path) -> None:
        """Without the up-front check, an append fails naming the store; the file is kept."""
        store.write_text("not a folder")
        with pytest.raises(
            HistoryError, match=rf"^{re.escape(str(store))}: the store is a file, not a folder"
        ):
            record_week(History(str(store)), "2026-W40", accuracy_mask(N, 0.9))
        assert store.read_text() == "not a folder"

    def test_reading_a_store_that_is_a_file_is_not_an_empty_history(self, store: Path) -> None:
        """A store that is a file is an error, not a history without results."""
        store.write_text("not a folder")
        with pytest.raises(HistoryError, match="the store is a file"):
            History(str(store)).evaluations()

    def test_fsspec_url_store_is_checked_without_side_effects_and_round_trips(self) -> None:
        """On an fsspec URL check_root creates nothing, and the history writes and reads back."""
        import uuid

        import fsspec

        root = f"memory://evalsentry-{uuid.uuid4().hex}/store"
        history = History(root)
        history.check_root()
        assert not fsspec.filesystem("memory").exists(root)
        evaluation_id = record_week(history, "2026-W40", accuracy_mask(N, 0.9))
        assert history.evaluations()["evaluation_id"].tolist() == [evaluation_id]
        assert history.predictions(evaluation_id) is not None

    def test_a_write_the_store_refuses_is_never_silent(self) -> None:
        """A store that refuses a new name (a file at the root of an fsspec store) is an error."""
        import uuid

        import fsspec

        root = f"memory://evalsentry-{uuid.uuid4().hex}/store"
        fsspec.filesystem("memory").pipe_file(root, b"an object, not a folder")
        with pytest.raises(HistoryError, match=r"cannot write the history .*not committed"):
            record_week(History(root), "2026-W40", accuracy_mask(N, 0.9))
