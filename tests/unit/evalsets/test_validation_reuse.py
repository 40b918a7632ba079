"""Reuse of a passed expectation-suite result on the candidate path, and when it must not happen."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalsentry.errors import EvalsetTampered
from evalsentry.evalsets import check, evalset, validation_cache
from evalsentry.evalsets.validation_cache import ValidationCache, check_evalset_reusing
from tests.models import TRUSTED_YAML

PASSED = {"success": True, "evaluated": 3, "failed": 0, "outcomes": []}


@pytest.fixture
def full_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each full validation's evalset folder; the suite itself is stubbed (GX is slow to import)."""
    runs: list[str] = []

    class Summary:
        def to_dict(self) -> dict[str, Any]:
            return dict(PASSED)

    def fake_check(name: str, evalsets_dir: str | None = None) -> Summary:
        folder = evalset.evalset_folder(name, evalsets_dir)
        evalset.verify_files(folder, evalset.read_spec(folder))
        runs.append(name)
        return Summary()

    monkeypatch.setattr(check, "check_evalset", fake_check)
    return runs


def _check(folder: Path, store: Path, run_id: str, **kwargs: Any) -> dict[str, Any]:
    return check_evalset_reusing(
        "toy",
        str(folder.parent),
        ValidationCache(str(store)),
        run_id=run_id,
        week="2026-W49",
        **kwargs,
    )


class TestReuse:
    def test_second_run_reuses_and_names_the_first(
        self, toy_evalset: Path, tmp_path: Path, full_runs: list[str]
    ) -> None:
        """A passed result is stored; the next run reuses it and records the run it came from."""
        first = _check(toy_evalset, tmp_path / "store", "run-1")
        second = _check(toy_evalset, tmp_path / "store", "run-2")
        assert len(full_runs) == 1
        assert "reused_from" not in first
        assert second["reused_from"]["run_id"] == "run-1"
        assert second["success"] is True

    def test_revalidate_forces_a_full_run(
        self, toy_evalset: Path, tmp_path: Path, full_runs: list[str]
    ) -> None:
        """``revalidate`` runs the suite even with a stored result, and stores the new one."""
        _check(toy_evalset, tmp_path / "store", "run-1")
        again = _check(toy_evalset, tmp_path / "store", "run-2", revalidate=True)
        assert len(full_runs) == 2
        assert "reused_from" not in again
        assert _check(toy_evalset, tmp_path / "store", "run-3")["reused_from"]["run_id"] == "run-2"

    def test_changed_suite_never_reuses(
        self, toy_evalset: Path, tmp_path: Path, full_runs: list[str]
    ) -> None:
        """Other suite bytes give another key: a full validation."""
        _check(toy_evalset, tmp_path / "store", "run-1")
        suite = toy_evalset / evalset.SUITE
        suite.write_text(suite.read_text() + "\n")
        assert "reused_from" not in _check(toy_evalset, tmp_path / "store", "run-2")
        assert len(full_runs) == 2

    def test_changed_manifest_never_reuses(
        self, toy_evalset: Path, tmp_path: Path, full_runs: list[str]
    ) -> None:
        """Another manifest (the evalset's identity and pinned hashes) gives a full validation."""
        _check(toy_evalset, tmp_path / "store", "run-1")
        manifest = toy_evalset / evalset.MANIFEST
        manifest.write_text(manifest.read_text() + "# edited\n")
        assert "reused_from" not in _check(toy_evalset, tmp_path / "store", "run-2")
        assert len(full_runs) == 2

    def test_changed_gx_version_never_reuses(
        self,
        toy_evalset: Path,
        tmp_path: Path,
        full_runs: list[str],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """A result stored under one Great Expectations version is not reused under another."""
        _check(toy_evalset, tmp_path / "store", "run-1")
        monkeypatch.setattr(validation_cache, "gx_version", lambda: "0.0.0-other")
        assert "reused_from" not in _check(toy_evalset, tmp_path / "store", "run-2")
        assert len(full_runs) == 2

    def test_changed_byte_fails_verification_despite_a_stored_result(
        self, toy_evalset: Path, tmp_path: Path, full_runs: list[str]
    ) -> None:
        """Files are re-hashed before any reuse: one flipped byte raises EvalsetTampered."""
        _check(toy_evalset, tmp_path / "store", "run-1")
        data = next((toy_evalset / evalset.DATA_DIR).glob("*.parquet"))
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        data.write_bytes(bytes(raw))
        with pytest.raises(EvalsetTampered):
            _check(toy_evalset, tmp_path / "store", "run-2")

    def test_failed_or_forged_entries_are_not_reused(self, tmp_path: Path) -> None:
        """Only passed results are stored, and an entry not matching its key is ignored."""
        cache = ValidationCache(str(tmp_path / "store"))
        cache.put("k1", {"success": False}, run_id="r", week="2026-W49")
        assert cache.get("k1") is None
        folder = tmp_path / "store" / validation_cache.FOLDER
        folder.mkdir(parents=True)
        entry = {"key": "other", "run_id": "r", "week": "w", "summary": PASSED}
        (folder / "k2.json").write_text(json.dumps(entry))
        assert cache.get("k2") is None


def test_candidate_evaluation_records_reuse_in_the_history(
    toy_evalset: Path,
    toy_checkpoints: dict[str, Path],
    tmp_path: Path,
    full_runs: list[str],
) -> None:
    """A second candidate run records the reused validation, naming the first run, in its row."""
    from evalsentry.config import load_config
    from evalsentry.evaluation.candidate import candidate_evalsets, evaluate_candidate
    from evalsentry.history.store import History

    config = tmp_path / "evalsentry.yaml"
    config.write_text(
        f"store: store\nregistry: registry\nevalsets: {toy_evalset.parent}\n{TRUSTED_YAML}"
    )
    settings = load_config(config)
    history = History(settings.store_url)
    names = candidate_evalsets("toy-model", settings, history, new_model=True)
    first = evaluate_candidate(toy_checkpoints["good"], "toy-model", names, settings, history)
    second = evaluate_candidate(toy_checkpoints["good"], "toy-model", names, settings, history)
    assert len(full_runs) == 1
    rows = history.evaluations(kind="candidate", include_superseded=True)
    recorded = [json.loads(v) for v in rows["validation_json"]]
    reused = [v["reused_from"]["run_id"] for v in recorded if "reused_from" in v]
    assert reused == [first.run_id]
    assert second.validations["toy"]["reused_from"]["run_id"] == first.run_id
