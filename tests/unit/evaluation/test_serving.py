"""One verdict for quality and cost (evaluation.serving.weigh): each branch, from its inputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalsentry.evaluation.serving import weigh
from evalsentry.evaluation.speed import PairedTiming
from evalsentry.evaluation.timing import ServingBill
from evalsentry.gate.verdicts import Comparison, Reference, Verdict

OWNER = {"evaluation_id": "e", "week": "2026-W49", "model": "digits", "version": 4, "evalset": "digits"}  # fmt: skip
LABEL = "digits@v4 (dynamic-int8 of v2)"


def quality(verdict: Verdict, delta: float = -0.002) -> list[Comparison]:
    """The variant's accuracy against production (and a non-gating slice that must not count)."""
    row = {**OWNER, "reference": Reference.PRODUCTION, "reason": ""}
    return [
        Comparison(**row, metric="accuracy", verdict=verdict, delta=delta, tolerance=0.01),
        Comparison(**row, metric="accuracy", slice="ink=light", verdict=Verdict.FAIL, gating=False),
    ]


def timed(*ratios: float) -> PairedTiming:
    """Rounds of 1 s for the parent and ``ratio`` s for the variant, over 1,000 examples."""
    return PairedTiming([1.0] * len(ratios), list(ratios), 1000, "cpu")


def test_held_and_faster_in_all_rounds_but_one_is_cheaper_with_the_bill() -> None:
    bill = ServingBill(requests_per_day=86_400_000, per_device_hour=3.0, currency="USD")
    row = weigh(LABEL, quality(Verdict.PASS), timed(0.6, 0.62, 0.61, 1.05, 0.63), OWNER, {}, bill)
    assert row.verdict == Verdict.PASS and not row.gating
    assert row.reason.startswith(
        "CHEAPER: digits@v4 (dynamic-int8 of v2): quality held (accuracy -0.20 pts vs "
        "production, margin 1.00 pts), 38% cheaper: at 86,400,000 requests/day: "
    )
    assert (
        "0.62x the time per example (median of 5 paired rounds, 0.60x to 1.05x, on cpu)"
        in row.reason
    )


def test_held_and_slower_is_costlier_a_warn() -> None:
    row = weigh(LABEL, quality(Verdict.WARN), timed(1.3, 1.4, 0.9, 1.5), OWNER, {})
    assert row.verdict == Verdict.WARN and row.reason.startswith("COSTLIER: ")
    assert (
        "quality held (accuracy -0.20 pts vs production" in row.reason
        and "35% costlier" in row.reason
    )


def test_rounds_that_disagree_hold_the_cost() -> None:
    row = weigh(LABEL, quality(Verdict.PASS), timed(0.9, 1.1, 0.95, 1.05), OWNER, {})
    assert row.verdict == Verdict.PASS and row.reason.startswith("COST HELD: ")


@pytest.mark.parametrize(
    ("verdict", "said"),
    [(Verdict.FAIL, "quality not held"), (Verdict.INCONCLUSIVE, "quality not shown to hold")],
)
def test_quality_not_held_is_the_quality_verdict_and_the_cost_is_not_weighed(
    verdict: Verdict, said: str
) -> None:
    """A damaged variant is a FAIL however much cheaper it is."""
    row = weigh(LABEL, quality(verdict, delta=-0.08), timed(0.3, 0.3, 0.3), OWNER, {})
    assert row.verdict == verdict and not row.gating
    assert (
        f"{said} (accuracy -8.00 pts vs production, margin 1.00 pts); cost not weighed: 0.30x"
        in row.reason
    )
    assert "CHEAPER" not in row.reason


def test_nothing_gated_is_never_cheaper() -> None:
    row = weigh(LABEL, [], timed(0.5, 0.5, 0.5), OWNER, {})
    assert row.verdict == Verdict.ERROR and "no gating quality comparison" in row.reason


def test_a_cheaper_lever_in_the_bill_says_what_a_month_saves(tmp_path: object) -> None:
    """At 86.4 M requests a day on a 3 USD/h device, 10 µs -> 6.2 µs per request saves
    0.0000038 s x 86.4e6 x 30.44 days / 3600 s x 3 USD = 8.33 USD a month."""
    from evalsentry.config import Config
    from evalsentry.reports.levers import Lever, lever_rows

    config = Config.model_validate(
        {
            "traffic": {"digits": {"requests_per_day": 86_400_000}},
            "cost": {"per_device_hour": {"cuda": 3.0}},
        }
    )
    reason = "CHEAPER: digits@v4 (fp16 of v2): quality held (...), 38% cheaper; 0.62x the time per example (...)"  # fmt: skip
    lever = Lever("digits", 4, 2, "fp16", "CHEAPER", "2026-W49", 10e-6, 6.2e-6, "cuda:0", reason)
    words = lever.in_words(config)
    assert words.startswith("digits: serving v4 (fp16) instead of v2 saves 8.3")
    assert words.endswith(" USD/month at the declared traffic (CHEAPER, 2026-W49)")
    ((variant, of, verdict, week, timing, month, saves),) = lever_rows([lever], config)
    assert (variant, of, verdict, week, timing) == ("digits@v4 (fp16)", "v2", "CHEAPER", "2026-W49", "10 µs -> 6.2 µs")  # fmt: skip
    assert month.endswith(" USD") and saves.startswith("8.3")


def test_the_weekly_markdown_and_html_carry_the_serving_table() -> None:
    """A bill with a weighed variant: both reports hold its row and its sentence, escaped."""
    import pandas as pd

    from evalsentry.gate.verdicts import GateReport
    from evalsentry.reports.bill import Lifetime
    from evalsentry.reports.html_report import _levers_section
    from evalsentry.reports.weekly import weekly_markdown

    row = ["digits@v4 (fp16)", "v2", "CHEAPER", "2026-W49", "10 -> 6.2", "13 -> 8.1 USD", "4.9 USD"]
    said = "digits: serving v4 (fp16) instead of v2 saves 4.9 USD/month at the declared traffic (CHEAPER, 2026-W49)"  # fmt: skip
    bill = Lifetime(pd.DataFrame(), [], [], [said], [row])
    markdown = weekly_markdown(GateReport("2026-W49", [], False), [], [], {}, bill=bill)
    assert "### Serving levers" in markdown and "| " + " | ".join(row) + " |" in markdown
    assert f"- {said}" in markdown
    html = "".join(_levers_section(bill))
    assert "<h3>Serving levers</h3>" in html and "<td>10 -&gt; 6.2</td>" in html and said in html


def test_a_cost_held_or_costlier_lever_claims_no_saving() -> None:
    """COST HELD says no difference was shown; COSTLIER says what it would add."""
    from evalsentry.config import Config
    from evalsentry.reports.levers import Lever, lever_rows

    config = Config.model_validate({"traffic": {"digits": {"requests_per_day": 1_000_000}}})
    held = Lever("digits", 4, 2, "bf16", "COST HELD", "2026-W49", 10e-6, 9.9e-6, "cpu", "COST HELD: ...")  # fmt: skip
    dear = Lever("digits", 5, 2, "dynamic-int8", "COSTLIER", "2026-W49", 10e-6, 30e-6, "cpu", "COSTLIER: ...")  # fmt: skip
    assert held.in_words(config).endswith(
        ": the paired rounds showed no difference in cost (2026-W49)"
    )
    assert " would add " in dear.in_words(config) and "saves" not in dear.in_words(config)
    rows = lever_rows([held, dear], config)
    assert rows[0][-1] == "no difference shown" and rows[1][-1].startswith("adds ")


def test_a_variant_is_weighed_against_its_parent_and_a_student_against_its_teachers_version(
    tmp_path: Path, pinned_git: str, train_data: Path
) -> None:
    """``save_checkpoint(teacher=...)`` records the teacher file's sha256; the student is then
    weighed against the line's version holding that file; the line is read for students only."""
    from evalsentry.checkpoints.checkpoint import save_checkpoint
    from evalsentry.checkpoints.registry import Registry
    from evalsentry.errors import CheckpointNotFound
    from evalsentry.evaluation.pipeline import Target
    from evalsentry.evaluation.serving import TeacherNotRegistered, weighed_against
    from evalsentry.storage import sha256_file
    from tests.conftest import _teacher
    from tests.models import TRUST

    def saved(name: str, teacher: Path | None = None) -> Path:
        return save_checkpoint(
            _teacher(), tmp_path / name, metrics={}, config={}, seed=1, data=train_data,  # type: ignore[arg-type]
            factory="tests.models:TinyNet", factory_kwargs={"features": 4, "classes": 3, "hidden": 8},
            teacher=teacher,
        )  # fmt: skip

    with pytest.raises(CheckpointNotFound):
        saved("lost.pt", teacher=tmp_path / "missing.pt")
    teacher = saved("teacher.pt")
    student = saved("student.pt", teacher=teacher)
    registry = Registry(str(tmp_path / "registry"))
    first = registry.register(teacher, "toy", stage="production", trust=TRUST)
    entry = registry.register(student, "toy", trust=TRUST)
    assert entry.lineage["teacher"] == {"sha256": sha256_file(teacher)[0]} == {"sha256": first.sha256}
    line = registry.list("toy")
    assert weighed_against(Target.from_entry(entry), lambda: line) == (1, "student")

    def unread() -> list[object]:
        raise AssertionError("the registry was read for a version that is no student")

    assert weighed_against(Target.from_entry(first), unread) is None  # a version of its own
    variant = Target("toy", "x", 3, "candidate", "s" * 64, {"variant_of": {"version": 1}, "model": {"factory": "f", "transform": "bf16"}})  # fmt: skip
    assert weighed_against(variant, unread) == (1, "bf16")  # type: ignore[arg-type]
    with pytest.raises(TeacherNotRegistered, match="is no registered version of toy"):
        weighed_against(Target.from_entry(entry), lambda: [entry])  # its teacher's entry is gone


def test_a_weighed_row_is_read_back_as_it_was_written() -> None:
    """The bill, the reports and the bench read weigh's reason through one reader beside it."""
    from evalsentry.evaluation.serving import Said, said_in

    cheaper = weigh(LABEL, quality(Verdict.PASS), timed(0.6, 0.62, 0.61, 1.05, 0.63), OWNER, {})
    assert said_in(cheaper.reason) == Said("CHEAPER", "dynamic-int8", 0.62, 0.60, 1.05)
    failed = weigh("digits@v5 (student of v1)", quality(Verdict.FAIL), timed(0.3, 0.3), OWNER, {})
    assert said_in(failed.reason) == Said(None, "student", 0.30, 0.30, 0.30)
