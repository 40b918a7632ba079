"""The HTML report: self-contained, charts drawn, and looked at for real in headless Chromium."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from evalsentry.config import Config
from evalsentry.cost.meter import ledger
from evalsentry.gate.week import Comparison, GateReport, Verdict, gate_week
from evalsentry.history.store import History
from evalsentry.reports.html_report import render_report
from tests.synthetic import accuracy_mask, record_week

N = 500
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
BROWSER_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def screenshot(page: Path, profile: Path, *, height: int) -> np.ndarray:
    """Headless Chromium's screenshot of ``page``, 1280 wide, as RGB values in [0, 1]."""
    from matplotlib.image import imread

    shot = profile.parent / "shot.png"
    subprocess.run(
        [
            CHROMIUM,
            *BROWSER_FLAGS,
            f"--user-data-dir={profile}",
            f"--screenshot={shot}",
            f"--window-size=1280,{height}",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return np.asarray(imread(shot)[..., :3])


@pytest.fixture
def weeks(tmp_path: Path) -> tuple[History, Config]:
    """Four weeks of one model: steady, a new version, then a regression."""
    history = History(str(tmp_path / "store"))
    before = accuracy_mask(N, 0.9)
    after = before.copy()
    after[np.flatnonzero(before)[:40]] = False
    costs = {"wall_s": 3600.0, "energy_kwh": 0.5, "co2_kg": 0.2, "cost": 3.0, "currency": "USD"}
    for week, correct, version in (
        ("2026-W40", before, 1),
        ("2026-W41", before, 1),
        ("2026-W42", before, 2),
        ("2026-W43", after, 3),
    ):
        record_week(
            history,
            week,
            correct,
            version=version,
            checkpoint=str(version) * 64,
            git_sha="abc123",
            seed=version,
            **costs,
        )
    return history, Config(root=str(tmp_path), store=str(tmp_path / "store"))


def test_report_is_self_contained_with_trend_charts(weeks: tuple[History, Config]) -> None:
    """One HTML file with an inline SVG per metric plus the cost chart, no external resources."""
    history, config = weeks
    html = render_report(history, gate_week(history, "2026-W43", config.gate))
    assert html.count("<svg") == 3  # accuracy, nll, cost
    assert not re.search(r"""(src|href)=["']https?://""", html)
    assert "FAIL" in html and "baseline 2026-W40" in html
    assert "m@v3 on toy: accuracy vs previous-week" in html
    assert "Flips against the previous week" in html and "ex-" in html
    assert "This week: 1 h of device time, 500 Wh, 200 g CO2, 3.00 USD." in html  # not 4 weeks


def test_report_renders_the_gate_report_it_is_given(
    weeks: tuple[History, Config], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The HTML shows the flow's own verdicts (an invalid evalset's ERROR too) and gates nothing."""
    import evalsentry.gate.week

    history, config = weeks
    report = gate_week(history, "2026-W43", config.gate)
    invalid = Comparison(
        "", "2026-W43", "*", None, "other", "none", "*", Verdict.ERROR, "evalset invalid: x"
    )
    given = GateReport("2026-W43", [invalid, *report.comparisons])

    def no_second_gate(*args: object, **kwargs: object) -> None:
        raise AssertionError("the HTML report ran a gate of its own")

    monkeypatch.setattr(evalsentry.gate.week, "gate_week", no_second_gate)
    html = render_report(history, given)
    assert ">ERROR</span>" in html and "every checkpoint on other" in html
    assert "4 regression(s), 1 error(s)" in html


def test_cost_ledger_sums(weeks: tuple[History, Config]) -> None:
    """The ledger sums device-hours, energy, carbon and money per group, with a total row."""
    history, _ = weeks
    bill = ledger(history.evaluations(), "week").set_index("week")
    assert bill.loc["2026-W40", "device_hours"] == pytest.approx(1.0)
    assert bill.loc["total", "cost"] == pytest.approx(12.0)
    assert bill.loc["total", "kwh"] == pytest.approx(2.0)
    assert bill.loc["total", "evaluations"] == 4
    assert ledger(history.evaluations(), "model").set_index("model").loc[
        "m", "co2_kg"
    ] == pytest.approx(0.8)


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed; `make test` installs Debian's chromium where it can",
)
def test_report_renders_in_a_real_browser(weeks: tuple[History, Config], tmp_path: Path) -> None:
    """Headless Chromium draws the report: the screenshot is not blank and the charts are in the DOM."""
    history, config = weeks
    page = tmp_path / "report.html"
    page.write_text(render_report(history, gate_week(history, "2026-W43", config.gate)))
    profile = tmp_path / "profile"
    pixels = screenshot(page, profile, height=2000)
    non_white = (pixels < 0.95).any(axis=2).mean()
    assert pixels.std() > 0.05 and non_white > 0.02, "the screenshot is (nearly) blank"
    dom = subprocess.run(
        [CHROMIUM, *BROWSER_FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert dom.count("<svg") == 3 and dom.count("<path") > 20


def test_flip_lists_say_how_many_more_there_are(weeks: tuple[History, Config]) -> None:
    """Forty newly wrong examples: eight ids are listed, and "and 32 more" says the rest."""
    history, config = weeks
    html = render_report(history, gate_week(history, "2026-W43", config.gate))
    assert re.search(r"<td>40</td><td>(ex-\d+, ){7}ex-\d+ and 32 more</td>", html)


def test_a_report_of_an_earlier_week_shows_nothing_after_it(
    weeks: tuple[History, Config], monkeypatch: pytest.MonkeyPatch
) -> None:
    """W41's report, rendered once W42 and W43 exist, charts and bills W40 and W41 only."""
    from evalsentry.reports import html_report

    history, config = weeks
    charted: list[list[str]] = []
    for name in ("trend_chart", "cost_chart"):
        drawn = getattr(html_report, name)

        def spy(frame: object, *args: object, _drawn: object = drawn) -> str:
            charted.append(sorted(set(frame["week"])))  # type: ignore[index]
            return _drawn(frame, *args)  # type: ignore[operator]

        monkeypatch.setattr(html_report, name, spy)
    html = render_report(history, gate_week(history, "2026-W41", config.gate))
    assert charted and all(weeks == ["2026-W40", "2026-W41"] for weeks in charted)
    assert "This week: 1 h of device time" in html


def test_a_week_failing_only_against_the_baseline_is_no_green_dot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same as last week (no FAIL) but far below the baseline (FAIL): the week's dot is the FAIL."""
    from evalsentry.reports import html_report

    history = History(str(tmp_path / "store"))
    good = accuracy_mask(N, 0.9)
    worse = good.copy()
    worse[np.flatnonzero(good)[:40]] = False
    record_week(history, "2026-W40", good)
    record_week(history, "2026-W41", worse, version=2, checkpoint="2" * 64)
    record_week(history, "2026-W42", worse, version=2, checkpoint="2" * 64)
    report = gate_week(history, "2026-W42", Config(root=str(tmp_path)).gate)
    against = {c.reference: c.verdict for c in report.comparisons if c.metric == "accuracy"}
    assert against["baseline"] == Verdict.FAIL and against["previous-week"] != Verdict.FAIL
    dots: dict[str, dict[str, str]] = {}
    drawn = html_report.trend_chart

    def spy(
        line: object, metrics: object, metric: str, verdicts: dict[str, str], *rest: object
    ) -> str:
        dots[metric] = dict(verdicts)
        return drawn(line, metrics, metric, verdicts, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(html_report, "trend_chart", spy)
    render_report(history, report)
    assert dots["accuracy"]["2026-W42"] == "FAIL"
