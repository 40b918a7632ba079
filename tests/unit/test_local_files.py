"""The local disk without fsspec answers as fsspec's own LocalFileSystem does, call for call."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fsspec.implementations.local import LocalFileSystem

from evalsentry.local_files import LocalFiles, strip
from evalsentry.storage import filesystem, for_arrow, is_local


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A folder with a file, a subfolder, a link to the file and a dangling link."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.bin").write_bytes(b"0123456789")
    (tmp_path / "sub" / "b.txt").write_text("b")
    (tmp_path / ".hidden").write_text("h")
    (tmp_path / "link").symlink_to(tmp_path / "a.bin")
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    return tmp_path


def test_every_answer_is_fsspec_s(tree: Path) -> None:
    """info, ls (both kinds), exists, isfile, isdir, cat_file and URLs equal fsspec's."""
    ours, theirs = LocalFiles(), LocalFileSystem()
    names = ["a.bin", "sub", "sub/b.txt", ".hidden", "link", "dangling", "missing", ""]
    for name in names:
        path = str(tree / name) if name else str(tree) + "/"
        for method in ("exists", "isfile", "isdir", "unstrip_protocol"):
            assert getattr(ours, method)(path) == getattr(theirs, method)(path), (method, name)
        if theirs.exists(path):
            assert ours.info(path) == theirs.info(path), name
            for detail in (False, True):
                key = (lambda e: e["name"]) if detail else None
                assert sorted(ours.ls(path, detail=detail), key=key) == sorted(
                    theirs.ls(path, detail=detail), key=key
                ), name
    for start, end in [(None, None), (2, None), (2, 5), (-3, None), (1, -2)]:
        assert ours.cat_file(str(tree / "a.bin"), start, end) == theirs.cat_file(
            str(tree / "a.bin"), start, end
        )
    with ours.open(str(tree / "a.bin"), "rb", block_size=4) as handle:
        assert handle.read() == b"0123456789"
    with pytest.raises(FileNotFoundError):
        ours.info(str(tree / "dangling"))
    # What is not defined here is fsspec's: the same folders' globs.
    assert ours.glob(str(tree / "*")) == theirs.glob(str(tree / "*"))
    assert ours.find(str(tree), detail=True) == theirs.find(str(tree), detail=True)


@pytest.mark.parametrize("written", ["store", "./store", ".", "~/x", "file:///tmp/a/", "/tmp/a//"])
def test_paths_are_named_as_fsspec_names_them(
    written: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert strip(written) == LocalFileSystem._strip_protocol(written)


def test_a_plain_path_is_local_without_fsspec_and_a_url_is_fsspec_s(tmp_path: Path) -> None:
    """`filesystem` of a path is the local disk (pyarrow reads it natively); of a URL, fsspec's."""
    fs, path = filesystem(str(tmp_path / "store"))
    assert isinstance(fs, LocalFiles) and is_local(fs) and for_arrow(fs) is None
    assert path == str(tmp_path / "store")
    remote, _ = filesystem("memory://bucket/store")
    assert not is_local(remote) and for_arrow(remote) is remote
    url, _ = filesystem(f"file://{tmp_path}")
    assert is_local(url) and isinstance(url, LocalFileSystem)
    code = (
        "import sys; from evalsentry.storage import filesystem; "
        f"fs, _ = filesystem({str(tmp_path)!r}); fs.exists({str(tmp_path)!r}); "
        "print('fsspec' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_a_windows_path_is_left_to_fsspec(monkeypatch: pytest.MonkeyPatch) -> None:
    """Drive letters and backslashes are fsspec's to read: off POSIX every path goes to it."""
    monkeypatch.setattr(os, "sep", "\\")
    fs, _ = filesystem("store")
    assert isinstance(fs, LocalFileSystem) and is_local(fs)
