"""A harness log too large or too packed is refused before any reader inflates it."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pytest

from evalsentry.harnesses.limits import MAX_RATIO, check_log_size
from evalsentry.harnesses.run import HarnessLogInvalid
from tests.unit.harnesses.test_import import history, import_inspect, inspect_log

#: A deflated run of zeros: 8 MiB inflated from about 8 KiB stored (about 1,000:1).
BOMB_BYTES = 8 * 2**20


def _with_bomb(log: Path, into: Path) -> str:
    """A copy of the Inspect log ``log`` with one more sample member: a run of zeros."""
    shutil.copy(log, into)
    member = "samples/q999_epoch_1.json"
    with zipfile.ZipFile(into, "a", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(member, b"0" * BOMB_BYTES)
    return member


def test_a_packed_inspect_log_is_refused_unread(
    harness_logs: Path, project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A member inflating about 1,000 times its stored size: one line naming file and member,
    exit 2, nothing recorded (Inspect's reader never opens it)."""
    bomb = tmp_path / "bomb.eval"
    member = _with_bomb(Path(inspect_log(harness_logs, "good")), bomb)
    code, _, err = import_inspect(capsys, project, str(bomb), "2026-W40")
    assert code == 2 and err.count("\n") == 1, err
    assert f"{bomb}: {member}: " in err and f"at most {MAX_RATIO}:1" in err
    assert "(8.0 MiB" in err and "nothing was recorded" in err
    assert history(project).evaluations().empty


def test_a_log_over_the_size_limit_is_refused(tmp_path: Path) -> None:
    """On disk and inflated, against the limit given; an archive within it passes."""
    plain = tmp_path / "results_x.json"
    plain.write_bytes(b"{}" + b" " * 4096)
    with pytest.raises(
        HarnessLogInvalid, match=r"4098 bytes \(4\.0 KiB\) on disk, more than 1024 bytes"
    ):
        check_log_size(plain, max_bytes=1024)
    check_log_size(plain, max_bytes=8192)
    archive = tmp_path / "log.eval"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as out:
        out.writestr("header.json", "x" * 500_000)  # packs small; under PACKED_FROM: no ratio
    with pytest.raises(
        HarnessLogInvalid, match=r"members inflate to 500000 bytes \(488\.3 KiB\), more than 100000"
    ):
        check_log_size(archive, max_bytes=100_000)
    check_log_size(archive, max_bytes=1_000_000)
