"""`evalsentry cost`: tokens, tokens/s and money per 1M tokens, only from rows that counted tokens."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from evalsentry.cli import main
from evalsentry.history.store import History
from tests.models import TRUSTED_YAML
from tests.synthetic import accuracy_mask, record_week

N = 100


def cells(out: str, first: str) -> dict[str, str]:
    """The printed table's row starting with ``first``, by column name."""
    lines = out.splitlines()
    header = re.split(r" {2,}", lines[1].strip())
    (line,) = [line for line in lines if line.startswith(first + "  ")]
    return dict(zip(header, re.split(r" {2,}", line.strip()), strict=True))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """An empty project; the --config argument's file."""
    (tmp_path / "evalsentry.yaml").write_text("store: store\nevalsets: evalsets\n" + TRUSTED_YAML)
    return tmp_path / "evalsentry.yaml"


def record(project: Path, week: str, model: str, **fields: object) -> None:
    record_week(
        History(str(project.parent / "store")),
        week,
        accuracy_mask(N, 0.9),
        model=model,
        currency="USD",
        **fields,
    )


class TestTokensInTheLedger:
    def test_token_rows_are_counted_and_the_others_show_a_dash(
        self, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A token line's tokens, rate and price; an image line's cells are "-", never 0."""
        record(project, "2026-W40", "img", wall_s=5.0, inference_s=4.0, cost=0.5)
        # Engine style: input tokens only; then a harness run with both, and one priced in
        # nothing this project counts: its tokens and time count, not its missing money.
        record(project, "2026-W40", "seq", wall_s=12.0, inference_s=10.0, cost=0.03, input_tokens=20_000)  # fmt: skip
        record(project, "2026-W41", "seq", wall_s=6.0, inference_s=6.0, cost=0.006, input_tokens=3_000, output_tokens=1_000)  # fmt: skip
        record(project, "2026-W42", "seq", wall_s=4.0, inference_s=4.0, cost=None, input_tokens=2_000)  # fmt: skip
        assert main(["cost", "--by", "model", "--config", str(project)]) == 0
        out = capsys.readouterr().out
        seq, img, total = cells(out, "seq"), cells(out, "img"), cells(out, "total")
        tokens = 20_000 + 3_000 + 1_000 + 2_000
        assert seq["tokens"] == "26,000" == f"{tokens:,}"
        assert seq["tokens/s"] == f"{tokens / (10.0 + 6.0 + 4.0):,.0f}"  # 1,300
        per_million = (0.03 + 0.006) / (20_000 + 4_000) * 1e6  # the unpriced run left out
        assert seq["per 1M tokens"] == f"{per_million:,.2f} USD"  # 1.50 USD
        assert [img["tokens"], img["tokens/s"], img["per 1M tokens"]] == ["-", "-", "-"]
        assert total["tokens"] == "26,000" and total["per 1M tokens"] == seq["per 1M tokens"]
        assert img["money"] == "0.50 USD" and total["money"] == "0.54 USD"

    def test_a_week_without_tokens_is_a_dash_beside_one_with(
        self, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Grouped by week, a week of image evaluations shows "-" for tokens beside a token week."""
        record(project, "2026-W40", "img", wall_s=5.0, inference_s=4.0, cost=0.5)
        record(project, "2026-W41", "seq", wall_s=2.0, inference_s=2.0, cost=0.002, input_tokens=500)  # fmt: skip
        assert main(["cost", "--config", str(project)]) == 0
        out = capsys.readouterr().out
        assert cells(out, "2026-W40")["tokens"] == "-"
        assert cells(out, "2026-W41")["tokens/s"] == "250"
        assert cells(out, "2026-W41")["per 1M tokens"] == "4.00 USD"

    def test_a_history_without_tokens_shows_no_token_columns(
        self, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Where no evaluation counted tokens, the table is as before: no empty token columns."""
        record(project, "2026-W40", "img", wall_s=5.0, inference_s=4.0, cost=0.5)
        assert main(["cost", "--config", str(project)]) == 0
        out = capsys.readouterr().out
        assert "tokens" not in out and "0.50 USD" in out
