"""How large a harness log may be before anything reads it: on disk, inflated, and how packed.

A harness log is data from outside, like a checkpoint: its size is checked before a reader
allocates for it. A file (an lm-eval results or samples file, an Inspect ``.json`` log) may be
at most :data:`MAX_LOG_BYTES`; an Inspect ``.eval`` log is a zip archive whose central directory
declares each member's sizes, which are checked without inflating anything: the members
together at most :data:`MAX_LOG_BYTES` inflated, and no member larger than
:data:`PACKED_FROM` inflated more than :data:`MAX_RATIO` times its stored size (real logs
pack about 4:1; a deflated run of zeros packs 1,000:1).
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

from evalsentry.errors import readable_bytes
from evalsentry.harnesses.run import HarnessLogInvalid

#: The largest log file, and the most an ``.eval`` archive's members may inflate to together.
MAX_LOG_BYTES = 2 * 2**30
#: The most a member larger than :data:`PACKED_FROM` may inflate, relative to its stored size.
MAX_RATIO = 100
PACKED_FROM = 2**20
_FIX = "import a log the harness wrote; a log this large or this packed is refused unread"


def check_log_size(path: str | os.PathLike[str], max_bytes: int = MAX_LOG_BYTES) -> None:
    """Refuse a local log file over ``max_bytes``, or a zip archive that inflates past it.

    A remote (fsspec) path is not checked here: its reader streams it.

    Raises:
        HarnessLogInvalid: naming the file, the size found and the limit.
    """
    file = Path(path)
    if not file.is_file():
        return
    size = file.stat().st_size
    if size > max_bytes:
        raise HarnessLogInvalid(
            file, "", f"{readable_bytes(size)} on disk, more than {readable_bytes(max_bytes)}", _FIX
        )
    if not zipfile.is_zipfile(file):
        return
    try:
        with zipfile.ZipFile(file) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError):
        return  # not an archive after all: the harness's own reader says what it is
    inflated = sum(member.file_size for member in members)
    if inflated > max_bytes:
        raise HarnessLogInvalid(
            file,
            "",
            f"its members inflate to {readable_bytes(inflated)}, more than {readable_bytes(max_bytes)}",
            _FIX,
        )
    for member in members:
        ratio = member.file_size / max(member.compress_size, 1)
        if member.file_size > PACKED_FROM and ratio > MAX_RATIO:
            raise HarnessLogInvalid(
                file, member.filename,
                f"{readable_bytes(member.compress_size)} inflating to {readable_bytes(member.file_size)} "
                f"({ratio:,.0f}:1; at most {MAX_RATIO}:1)", _FIX,
            )  # fmt: skip
