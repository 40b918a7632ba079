"""Checking an evalset before use: its files against the manifest, then its expectation suite.

``validate_evalset`` reports what failed; ``check_evalset`` raises ``EvalsetInvalid`` when
anything did. Tampered files are refused before Great Expectations runs on them.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from evalsentry.errors import EvalsetInvalid
from evalsentry.evalsets.evalset import (
    SUITE,
    evalset_folder,
    read_spec,
    read_suite,
    read_table,
    verify_files,
)
from evalsentry.evalsets.identity import identity_gaps
from evalsentry.storage import join

if TYPE_CHECKING:
    from evalsentry.evalsets.validation import ValidationSummary


log = logging.getLogger(__name__)


def validate_evalset(
    name_or_path: str | Path, evalsets_dir: str | Path | None = None
) -> ValidationSummary:
    """Verify the files, then run the expectation suite over the data's scalar view.

    Raises:
        EvalsetTampered: a file changed since freeze (checked first: no GX run on bad bytes).
    """
    from evalsentry.evalsets.validation import list_columns, run_suite, validation_frame

    folder = evalset_folder(name_or_path, evalsets_dir)
    spec = read_spec(folder)
    verify_files(folder, spec)
    for gap in identity_gaps(spec):
        log.warning(
            "evalset %s: %s not pinned (identity version 1); `evalsentry evalset seal %s` pins it",
            spec.name,
            gap,
            spec.name,
        )
    frame = validation_frame(read_table(folder, spec), list_columns(spec))
    return run_suite(frame, read_suite(folder), join(str(folder), SUITE))


def check_evalset(
    name_or_path: str | Path, evalsets_dir: str | Path | None = None
) -> ValidationSummary:
    """``validate_evalset`` that raises ``EvalsetInvalid`` when an expectation fails."""
    summary = validate_evalset(name_or_path, evalsets_dir)
    if not summary.success:
        raise EvalsetInvalid(
            str(name_or_path),
            [
                {
                    "expectation": f.expectation,
                    "column": f.column,
                    "unexpected_count": f.unexpected_count,
                }
                for f in summary.failures
            ],
        )
    return summary
