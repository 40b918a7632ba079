"""The margin test's critical values and the sign flips kept on disk: the same numbers, a bad
file never trusted."""

from __future__ import annotations

import json
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from evalsentry.gate import critical_cache, resampling
from evalsentry.gate.margin import MarginTest, _detectable_drop, detectable_drop, margin_test
from evalsentry.gate.metrics import default_metrics, get_metric
from evalsentry.gate.resampling import SwapValues, swap_values
from tests.synthetic import simulated_pair

N, ALLOWED, LEVEL = 400, Fraction(4), 0.01


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A cache folder of this test's own; the in-memory caches emptied before and after."""
    monkeypatch.setenv(critical_cache.CACHE_ENV, str(tmp_path / "cache"))
    _forget()
    yield tmp_path / "cache"
    _forget()


def _forget(results: Path | None = None) -> None:
    """Empty the in-memory caches (a new process), and the kept results in ``results``."""
    margin_test.cache_clear()
    _detectable_drop.cache_clear()
    critical_cache._KEPT.clear()
    critical_cache._LINES.clear()
    for path in [] if results is None else results.glob("margin-results-*.jsonl"):
        path.unlink()


def _computed(monkeypatch: pytest.MonkeyPatch) -> tuple[np.ndarray, float | None]:
    """The critical values and a detectable drop with the cache off (computed here)."""
    monkeypatch.setenv(critical_cache.CACHE_ENV, "")
    test = MarginTest(N, ALLOWED)
    values = test._critical_upto(LEVEL, test.grid.size - 1)
    margin_test.cache_clear()
    _detectable_drop.cache_clear()
    drop = detectable_drop(N, 8, ALLOWED, LEVEL)
    margin_test.cache_clear()
    _detectable_drop.cache_clear()
    return values, drop


def test_values_read_back_are_the_values_computed(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = str(cache)
    values, drop = _computed(monkeypatch)
    monkeypatch.setenv(critical_cache.CACHE_ENV, folder)
    assert detectable_drop(N, 8, ALLOWED, LEVEL) == drop  # computed, and written
    (written,) = cache.glob("margin-critical-*.npy")
    assert written.name.startswith(f"margin-critical-{critical_cache.code_key()}-{N}-4_1-")
    _forget(cache)
    # Read, not computed: a process that builds no tail table states the same drop.
    monkeypatch.setattr("evalsentry.gate.margin.TailTable", None)
    fresh = MarginTest(N, ALLOWED)
    kept = fresh._critical_upto(LEVEL, 0)
    assert kept.size > 1 and np.array_equal(kept, values[: kept.size])
    assert detectable_drop(N, 8, ALLOWED, LEVEL) == drop


@pytest.mark.parametrize(
    "bad",
    [b"not a numpy file", "nan", "out of range", "two rows"],
)
def test_a_bad_file_is_computed_again_and_rewritten(
    cache: Path, monkeypatch: pytest.MonkeyPatch, bad: bytes | str
) -> None:
    values, drop = _computed(monkeypatch)
    monkeypatch.setenv(critical_cache.CACHE_ENV, str(cache))
    detectable_drop(N, 8, ALLOWED, LEVEL)
    (written,) = cache.glob("margin-critical-*.npy")
    if isinstance(bad, bytes):
        written.write_bytes(bad)
    else:
        broken = {"nan": np.full(5, np.nan), "out of range": np.full(5, -99.0),
                  "two rows": np.zeros((2, 3))}[bad]  # fmt: skip
        np.save(written, broken)
    _forget(cache)  # the drop itself is kept too: without it the critical values are read
    assert detectable_drop(N, 8, ALLOWED, LEVEL) == drop
    reread = np.load(written)
    assert reread.ndim == 1 and np.array_equal(reread, values[: reread.size])


def test_off_or_unwritable_the_values_are_computed_all_the_same(
    cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _, drop = _computed(monkeypatch)
    monkeypatch.setenv(critical_cache.CACHE_ENV, "")
    assert critical_cache.cache_dir() is None
    assert detectable_drop(N, 8, ALLOWED, LEVEL) == drop
    margin_test.cache_clear()
    _detectable_drop.cache_clear()
    blocked = tmp_path / "a-file"
    blocked.write_text("in the way")
    monkeypatch.setenv(critical_cache.CACHE_ENV, str(blocked / "cache"))
    assert detectable_drop(N, 8, ALLOWED, LEVEL) == drop
    assert not list(tmp_path.rglob("*.npy*"))  # off, then unwritable: nothing written anywhere
    assert not list(tmp_path.rglob("margin-results-*"))


def test_the_default_folder_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(critical_cache.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert critical_cache.cache_dir() == tmp_path / "evalsentry"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert critical_cache.cache_dir() == Path.home() / ".cache" / "evalsentry"


def test_without_its_sources_to_key_the_files_the_cache_is_off(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Installed without the .py files, no file could be told from another version's."""
    monkeypatch.setenv(critical_cache.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(critical_cache, "_SOURCES", ("no-such-module.py",))
    critical_cache.code_key.cache_clear()
    try:
        assert critical_cache.code_key() == "" and critical_cache.cache_dir() is None
    finally:
        monkeypatch.undo()
        critical_cache.code_key.cache_clear()


def test_results_are_kept_read_back_identical_and_never_trusted_blindly(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A p-value and a detectable drop are computed once; a later process reads them (no tail
    is summed); an entry out of range, or a file that is not JSON, is computed again."""
    from evalsentry.gate.margin import margin_p

    _, drop = _computed(monkeypatch)
    monkeypatch.setenv(critical_cache.CACHE_ENV, "")
    p = margin_p(12, 3, N, ALLOWED)
    monkeypatch.setenv(critical_cache.CACHE_ENV, str(cache))
    _forget()
    assert (margin_p(12, 3, N, ALLOWED), detectable_drop(N, 8, ALLOWED, LEVEL)) == (p, drop)
    (results,) = cache.glob(f"margin-results-{critical_cache.code_key()}.jsonl")
    _forget()
    with monkeypatch.context() as never:
        never.setattr("evalsentry.gate.margin.margin_test", None)  # nothing may be computed
        assert (margin_p(12, 3, N, ALLOWED), detectable_drop(N, 8, ALLOWED, LEVEL)) == (p, drop)
    kept = results.read_text()
    keys = [json.loads(line)[0] for line in kept.splitlines()]
    results.write_text("".join(json.dumps([k, 7.5]) + "\n" for k in keys))  # no probability
    _forget()
    assert (margin_p(12, 3, N, ALLOWED), detectable_drop(N, 8, ALLOWED, LEVEL)) == (p, drop)
    assert results.read_text().endswith(kept)  # computed again, appended: the newest line wins
    results.write_text('["p 400 4/1 12 3", 0.5')  # a line cut short by a crash
    _forget()
    assert margin_p(12, 3, N, ALLOWED) == p
    results.write_text('["p 400 4/1 12 3", null]\n')  # a p-value is never "no answer"
    _forget()
    assert margin_p(12, 3, N, ALLOWED) == p


def test_only_the_newest_results_are_kept(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Appended line by line; at twice the limit the file is rewritten with the newest."""
    monkeypatch.setattr(critical_cache, "MAX_RESULTS", 2)
    for i in range(4):
        critical_cache.remembered(f"k{i}", lambda i=i: i / 10, lambda _: True)  # type: ignore[misc]
    (results,) = cache.glob("margin-results-*.jsonl")
    assert [json.loads(line) for line in results.read_text().splitlines()] == [
        ["k0", 0.0],
        ["k1", 0.1],
        ["k2", 0.2],
        ["k3", 0.3],
    ]
    critical_cache.remembered("k4", lambda: 0.4, lambda v: True)
    assert results.read_text() == '["k3", 0.3]\n["k4", 0.4]\n'
    _forget()
    assert critical_cache.remembered("k3", lambda: 9.0, lambda v: True) == 0.3  # read back


def _flips(**changes: object) -> list[SwapValues]:
    """Every default metric's sign flips of one simulated pair, overall and on a slice."""
    ref, cur = simulated_pair(np.random.default_rng(1), 500, 0.05, 0.02)
    ref = {**ref, **changes}
    metrics = [get_metric(n) for n in default_metrics("classification", 10)]
    half = ref["target"] < 5
    return swap_values(metrics, ref, cur, num_classes=10, masks=[None, half], n_swaps=300)


def _same(left: list[SwapValues], right: list[SwapValues]) -> bool:
    return all(
        np.array_equal(a.reference, b.reference, equal_nan=True)
        and np.array_equal(a.current, b.current, equal_nan=True)
        and a.n == b.n
        for a, b in zip(left, right, strict=True)
    )


def test_sign_flips_are_kept_read_back_identical_and_never_trusted_blindly(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kept, the flips read back bit for bit without computing; a damaged file, or one of other
    shapes, is computed again and rewritten; other data is another file."""
    folder = str(cache)
    monkeypatch.setenv(critical_cache.CACHE_ENV, "")
    computed = _flips()
    monkeypatch.setenv(critical_cache.CACHE_ENV, folder)
    assert _same(_flips(), computed)  # computed, and written
    (kept,) = cache.glob(f"swaps-{critical_cache.swaps_key()}-*.npz")
    with monkeypatch.context() as patched:
        patched.setattr(resampling, "_swapped", lambda *_: pytest.fail("computed again"))
        assert _same(_flips(), computed)
    for damage in (kept.read_bytes()[:100], b""):
        kept.write_bytes(damage)
        assert _same(_flips(), computed) and kept.stat().st_size > 1000  # rewritten whole
    with kept.open("wb") as handle:
        np.savez(handle, reference0=np.zeros((3, 4)), current0=np.zeros((3, 4)), n0=np.int64(1))
    assert _same(_flips(), computed)
    other = _flips(loss=np.zeros(500))
    assert not _same(other, computed) and len(list(cache.glob("swaps-*.npz"))) == 2


def test_only_the_newest_sign_flips_are_kept(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(critical_cache, "MAX_SWAP_FILES", 2)
    for seed in range(5):
        _flips(loss=np.random.default_rng(seed).random(500))
        assert len(list(cache.glob("swaps-*.npz"))) <= 4
    assert len(list(cache.glob("swaps-*.npz"))) == 2
