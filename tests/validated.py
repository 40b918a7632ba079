"""An evalset's passed validation in a project's store, as its first `evalsentry evaluate` leaves it.

A test of a broken candidate then runs `evaluate` as a project's later run does: the evalset's
files are hashed again and its stored Great Expectations result reused, so its process does not
import GX (3-4 CPU-seconds a run). The validation itself is real, run here in the test's
process (one GX import per worker); the first-run path is tested where it is the subject
(tests/unit/evalsets/test_validation_reuse.py, the CI workflows, a suite that breaks).
"""

from __future__ import annotations

from pathlib import Path

from evalsentry.config import load_config
from evalsentry.evalsets.validation_cache import ValidationCache, check_evalset_reusing


def validated(project: Path, evalset: str = "toy") -> None:
    """Validate ``evalset`` of the project in ``project`` (its evalsentry.yaml) into its store."""
    settings = load_config(project / "evalsentry.yaml")
    summary = check_evalset_reusing(
        evalset,
        settings.evalsets_dir,
        ValidationCache(settings.store_url),
        run_id="test-setup",
        week="2026-W01",
    )
    assert summary["success"] is True and "reused_from" not in summary, summary
