"""The lifetime bill: each part from its source, exactly; the CLI table; the chart in Chromium."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from evalsentry.checkpoints.registry import Registry, RegistryEntry
from evalsentry.cli import main
from evalsentry.config import Config
from evalsentry.gate.week import gate_week
from evalsentry.history.store import History
from evalsentry.reports.bill import (
    DAYS_PER_MONTH,
    SHARED,
    WEEKS_PER_MONTH,
    Lifetime,
    lifetime,
    lifetime_table,
)
from evalsentry.reports.html_report import PART_COLOUR, render_report
from tests.synthetic import accuracy_mask, record_week
from tests.unit.reports.test_html_report import CHROMIUM, screenshot

N = 400
WEEKS = ("2026-W40", "2026-W41", "2026-W42")
PER_DEVICE_HOUR = 2.0
EXAMPLES_PER_S = 100.0
REQUESTS_PER_DAY = 36_000.0
TRAINING = {
    "device": "cpu",
    "wall_s": 7200.0,
    "device_hours": 2.0,
    "energy_kwh": 0.2,
    "co2_kg": 0.08,
    "cost": 4.0,
    "currency": "USD",
    "energy_method": "estimate: 100 W configured x wall time",
    "started_at": "2026-09-28T08:00:00+00:00",
    "ended_at": "2026-09-28T10:00:00+00:00",  # a Monday: week 2026-W40
}


def _entry(version: int, training: dict[str, object] | None) -> RegistryEntry:
    lineage: dict[str, object] = {"model": {"factory": "team_models:Net", "kwargs": {}}}
    if training is not None:
        lineage["training_cost"] = training
    return RegistryEntry(
        model="m",
        version=version,
        uri=f"/checkpoints/m-v{version}.pt",
        sha256=str(version) * 64,
        size=1,
        stage="production",
        lineage=lineage,
        registered_at="2026-09-28T11:00:00+00:00",
    )


@pytest.fixture
def project(tmp_path: Path) -> Config:
    """Three weeks of `m` (1.5 USD an evaluation, 100 examples/s), a registry, traffic, costs."""
    store = tmp_path / "store"
    history = History(str(store))
    correct = accuracy_mask(N, 0.9)
    for week in WEEKS:
        record_week(
            history,
            week,
            correct,
            wall_s=2700.0,
            examples_per_s=EXAMPLES_PER_S,
            energy_kwh=0.04,
            co2_kg=0.016,
            cost=1.5,
            currency="USD",
        )
    registry = tmp_path / "registry"
    entries = (
        _entry(1, TRAINING),
        _entry(2, {**TRAINING, "currency": "EUR"}),
        _entry(3, {**TRAINING, "cost": "a lot"}),  # lineage written by other code
    )
    for entry in entries:
        folder = registry / entry.model
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"v{entry.version:06d}.json").write_text(entry.model_dump_json())
    config = Config.model_validate(
        {
            "root": str(tmp_path),
            "store": str(store),
            "registry": str(registry),
            "traffic": {"m": {"requests_per_day": REQUESTS_PER_DAY}},
            "cost": {
                "per_device_hour": {"cpu": PER_DEVICE_HOUR},
                "carbon_kg_per_kwh": 0.4,
                "recurring": [
                    {"name": "labelling", "amount": 30.0, "per": "week", "model": "m"},
                    {"name": "monitoring", "amount": 100.0, "per": "month"},
                ],
            },
        }
    )
    (tmp_path / "evalsentry.yaml").write_text(
        f"store: {store}\nregistry: {registry}\n"
        f"traffic:\n  m:\n    requests_per_day: {REQUESTS_PER_DAY}\n"
        "cost:\n"
        f"  per_device_hour: {{cpu: {PER_DEVICE_HOUR}}}\n"
        "  recurring:\n"
        "    - {name: labelling, amount: 30, per: week, model: m}\n"
        "    - {name: monitoring, amount: 100, per: month}\n"
    )
    return config


def _bill(config: Config) -> Lifetime:
    assert len(Registry(config.registry_url).list()) == 3  # the registry reads the fixture's files
    return lifetime(History(config.store_url), config)


def test_each_part_comes_from_its_source(project: Config) -> None:
    """Training from lineage, evaluation from the history, serving from throughput x traffic."""
    bill = _bill(project)
    (line,) = [line for line in bill.lines if line.model == "m"]
    per_prediction = PER_DEVICE_HOUR / (EXAMPLES_PER_S * 3600)
    assert line.parts["training"] == pytest.approx(4.0)  # the EUR run is left out...
    assert any("m@v2" in note and "EUR" in note for note in bill.notes)  # ...and says so
    assert any(note.startswith("m@v3: training_cost unreadable (") for note in bill.notes)
    assert line.parts["evaluation"] == pytest.approx(3 * 1.5)
    assert line.parts["serving"] == pytest.approx(3 * 7 * REQUESTS_PER_DAY * per_prediction)
    assert line.parts["declared"] == pytest.approx(3 * 30.0)
    assert line.cost_per_million == pytest.approx(per_prediction * 1e6)
    assert line.serving_per_month == pytest.approx(
        per_prediction * REQUESTS_PER_DAY * DAYS_PER_MONTH
    )
    assert line.first_week == "2026-W40" and line.last_week == "2026-W42"
    (shared,) = [line for line in bill.lines if line.model == SHARED]
    assert shared.parts["declared"] == pytest.approx(3 * 100.0 / WEEKS_PER_MONTH)
    assert line.share("training") == pytest.approx(4.0 / line.total)
    words = line.in_words()
    assert (
        words.startswith("m: training is 4% of its bill to date (4.00 USD of 102.70 USD)")
        and "declared" in words
    )


def test_serving_energy_is_the_evaluations_energy_per_example(project: Config) -> None:
    rows = _bill(project).rows
    serving = rows[(rows["part"] == "serving") & (rows["week"] == "2026-W41")]
    assert serving["energy_kwh"].item() == pytest.approx(0.04 / N * 7 * REQUESTS_PER_DAY)
    assert serving["co2_kg"].item() == pytest.approx(0.4 * serving["energy_kwh"].item())


def test_a_declared_cost_of_an_unknown_line_is_a_note(tmp_path: Path, project: Config) -> None:
    config = project.model_copy(
        update={
            "cost": project.cost.model_copy(
                update={
                    "recurring": [
                        *project.cost.recurring,
                        *Config.model_validate(
                            {
                                "cost": {
                                    "recurring": [{"name": "gpu box", "amount": 5, "model": "x"}]
                                }
                            }
                        ).cost.recurring,
                    ]
                }
            )
        }
    )
    bill = _bill(config)
    assert "x" not in {line.model for line in bill.lines}
    assert any("'gpu box'" in note and "'x'" in note for note in bill.notes)


def test_cost_lifetime_prints_every_part_in_human_units(
    project: Config, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project.root)
    assert main(["cost", "--lifetime"]) == 0
    out = capsys.readouterr().out
    for row in ("training", "evaluation", "serving", "declared", "total to date"):
        assert re.search(rf"(?m)^{row} {{2,}}[\d.,]+ USD", out), row
    assert "m: training is 4% of its bill to date (4.00 USD of 102.70 USD)" in out
    assert "note: m@v2: training cost in 'EUR'" in out
    assert not re.search(r"\d[eE][+-]?\d", out)


def test_cost_lifetime_with_nothing_billed_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "evalsentry.yaml").write_text("# every setting at its default\n")
    assert main(["cost", "--lifetime"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: nothing to bill yet") and "\n" not in err


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed; `make test` installs Debian's chromium where it can",
)
def test_the_bill_chart_shows_every_part_in_a_real_browser(project: Config, tmp_path: Path) -> None:
    """Headless Chromium draws the stacked chart: each part's colour covers a bar, not a legend."""
    history = History(project.store_url)
    page = tmp_path / "report.html"
    page.write_text(
        render_report(history, gate_week(history, WEEKS[-1], project.gate), None, _bill(project))
    )
    pixels = screenshot(page, tmp_path / "profile", height=6000)
    for part, colour in PART_COLOUR.items():
        rgb = np.array([int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)])
        covered = (np.abs(pixels - rgb).max(axis=2) < 0.04).sum()
        assert covered > 400, f"{part}: {covered} pixels of its colour; its bars are not drawn"


TOKENS_PER_EXAMPLE = 48  # a token task's real tokens per example, input only (the engine's)


def test_a_token_line_bills_tokens_and_serving_per_1m_tokens(project: Config) -> None:
    """A token line's evaluation tokens, and serving per 1M tokens at its tokens per prediction.

    A line without tokens (``m``) shows none: no tokens, no cost per token, and no 0.
    """
    history = History(project.store_url)
    for week in WEEKS[1:]:
        record_week(
            history,
            week,
            accuracy_mask(N, 0.9),
            model="seq",
            wall_s=8.0,
            examples_per_s=EXAMPLES_PER_S,
            energy_kwh=0.001,
            co2_kg=0.0004,
            cost=0.25,
            currency="USD",
            input_tokens=N * TOKENS_PER_EXAMPLE,
        )
    config = project.model_copy(
        update={"traffic": {**project.traffic, "seq": project.traffic["m"]}}
    )
    bill = _bill(config)
    lines = {line.model: line for line in bill.lines}
    seq, m = lines["seq"], lines["m"]
    per_prediction = PER_DEVICE_HOUR / (EXAMPLES_PER_S * 3600)
    assert seq.evaluation_tokens == 2 * N * TOKENS_PER_EXAMPLE
    assert seq.tokens_per_prediction == pytest.approx(TOKENS_PER_EXAMPLE)
    assert seq.cost_per_million_tokens == pytest.approx(per_prediction / TOKENS_PER_EXAMPLE * 1e6)
    assert seq.cost_per_million == pytest.approx(per_prediction * 1e6)  # kept beside it
    assert m.evaluation_tokens is None and m.cost_per_million_tokens is None
    assert any(
        note.startswith("seq: serving per 1M tokens assumes each request is like an example")
        and f"in {WEEKS[-1]}: {TOKENS_PER_EXAMPLE:.1f} tokens" in note
        and "requests/day" in note
        for note in bill.notes
    )
    assert not any(note.startswith("m: serving per 1M tokens") for note in bill.notes)
    headers, rows = lifetime_table(bill.lines)
    table = {row[0]: dict(zip(headers, row, strict=True)) for row in rows}
    assert table["evaluation tokens"]["seq"] == f"{2 * N * TOKENS_PER_EXAMPLE:,}"
    assert table["evaluation tokens"]["m"] == "" and table["serving per 1M tokens"]["m"] == ""
    assert table["evaluation tokens"]["all lines"] == f"{2 * N * TOKENS_PER_EXAMPLE:,}"
    expected = per_prediction / TOKENS_PER_EXAMPLE * 1e6  # 0.1157... USD
    assert table["serving per 1M tokens"]["seq"] == f"{expected:.2f} USD"


def test_without_tokens_the_table_has_no_token_rows(project: Config) -> None:
    """A bill where no line counted tokens is the table it was: no blank token rows."""
    _, rows = lifetime_table(_bill(project).lines)
    assert not any("tokens" in row[0] for row in rows)
