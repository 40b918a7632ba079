"""A serving variant through the weekly flow: registered, listed, evaluated, promoted, timed."""

from __future__ import annotations

import re
import shutil
from datetime import timedelta
from pathlib import Path

import pytest
import torch

from evalsentry.checkpoints.checkpoint import load_checkpoint
from evalsentry.checkpoints.registry import Registry
from evalsentry.cli import main
from evalsentry.history.store import History
from evalsentry.weeks import iso_week, now_utc
from tests.models import TRUST
from tests.unit.cli.test_cli_variants import project

__all__ = ["project"]  # the fixture: toy@v1 registered as production
ROOT = Path(__file__).resolve().parents[2]


def test_a_variant_is_built_from_its_parent_listed_under_it_and_evaluated(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """int8 of v1 becomes v2: the parent's lineage, the transform pinned, a copy kept; the
    variant evaluated against production (v1) holds its quality; promoted, it is timed."""
    assert main(["register", "--variant-of", "toy@v1", "--transform", "dynamic-int8"]) == 0
    said = capsys.readouterr().out
    assert re.match(
        r"registered toy@v2 \(candidate\): dynamic-int8 variant of toy@v1, sha256 ", said
    )
    registry = Registry(str(project / "registry"))
    parent, variant = registry.show("toy", 1), registry.show("toy", 2)
    assert variant.lineage["model"] == {**parent.lineage["model"], "transform": "dynamic-int8"}
    assert variant.lineage["variant_of"] == {"version": 1, "sha256": parent.sha256}
    for field in ("git_sha", "data_sha", "config", "seed", "timestamp_utc"):
        assert variant.lineage[field] == parent.lineage[field]
    assert variant.uri.startswith(str(project / "registry" / "toy" / "artifacts"))
    loaded = load_checkpoint(variant.uri, trust=TRUST, expected_sha256=variant.sha256)
    assert loaded.model.body[0].weight.qdata.dtype == torch.int8  # type: ignore[union-attr, index]

    # The transform is deterministic: asked again, the same file is found, nothing registered.
    assert main(["register", "--variant-of", "toy@v1", "--transform", "dynamic-int8"]) == 0
    assert capsys.readouterr().out.startswith(
        "toy@v2 is already the dynamic-int8 variant of toy@v1"
    )
    assert main(["register", "--variant-of", "toy@v1", "--transform", "bf16"]) == 0
    capsys.readouterr()

    assert main(["registry", "list"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if "toy@v" in line]
    assert [(r[0], r[1:3]) for r in rows[:1]] == [("toy@v1", ["production", "toy"])]
    assert [r[:3] for r in rows[1:]] == [
        ["toy@v2", "v1", "dynamic-int8"],
        ["toy@v3", "v1", "bf16"],
    ]

    # Production's week, then the variant as a candidate against it, named by its version.
    assert main(["run", "--week", "2026-W40"]) == 0
    capsys.readouterr()
    code = main(["evaluate", "--model", "toy", "--version", "2"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert re.search(r"toy@v2 +toy +accuracy +production \(2026-W40\)", out), out
    # One row weighs quality and cost: on 300 examples the evalset cannot show the int8
    # variant within the 1-point margin, so the cost is not weighed (and says what it measured).
    weighed = re.search(
        r"INCONCLUSIVE \(report only\) +toy@v2 +toy +microseconds_per_example +production .* "
        r"toy@v2 \(dynamic-int8 of v1\): quality not shown to hold \(accuracy -0\.33 pts vs "
        r"production, margin 1\.00 pts\); cost not weighed: \d+\.\d\dx the time per example \(median of "
        r"\d+ paired rounds",
        out,
    )
    assert weighed, out
    # The lifetime bill says what serving the variant would change, with the row's own number.
    assert main(["cost", "--lifetime"]) == 0
    said = capsys.readouterr().out
    ratio = re.search(r"cost not weighed: (\d+\.\d\d)x", out)
    assert ratio and re.search(
        r"toy: serving v2 \(dynamic-int8\) instead of v1: not weighed, its quality INCONCLUSIVE "
        rf"\(\d{{4}}-W\d\d; {ratio.group(1)}x the time per example\)",
        said,
    ), said
    evaluations = History(str(project / "store")).evaluations(include_superseded=True)
    row = evaluations[evaluations["version"] == 2].iloc[-1]
    assert row["status"] == "ok" and row["checkpoint_sha256"] == variant.sha256
    production = evaluations[evaluations["version"] == 1].iloc[-1]
    assert abs(row["examples_per_s"]) > 0 and production["status"] == "ok"

    weighed_again_without_its_parent(Path(parent.uri), capsys)

    # Promoted, the week's paired timing loads both in one child, the variant transformed.
    assert main(["registry", "promote", "toy", "2"]) == 0
    assert main(["run", "--week", "2026-W41"]) in (0, 1)  # a slower variant is a WARN
    capsys.readouterr()
    assert main(["gate", "--week", "2026-W41"]) in (0, 1)
    out = capsys.readouterr().out
    row_re = re.compile(r"toy@v2 +toy +microseconds_per_example +previous-week \(2026-W40\)")
    timed = [line for line in out.splitlines() if row_re.search(line)]
    assert len(timed) == 1, out
    assert re.search(r"\d+\.\d+x the time per example of v1 on cpu", timed[0]), timed[0]


def weighed_again_without_its_parent(parent: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Weighed again when its parent's file cannot be read: the newest weighing says the cost
    was not weighed, and the bill claims nothing from the older one."""
    parent.rename(parent.with_suffix(".away"))
    assert main(["evaluate", "--model", "toy", "--version", "2"]) == 0
    said = capsys.readouterr().out
    assert "toy@v2 (dynamic-int8 of v1): cost not weighed: paired timing against v1 could not run" in said  # fmt: skip
    assert main(["cost", "--lifetime"]) == 0
    assert "serving v2" not in capsys.readouterr().out
    parent.with_suffix(".away").rename(parent)


@pytest.fixture
def digits_students(
    tmp_path: Path, pinned_git: str, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Path]:
    """A digits project: the CNN as production, its distilled student and a damaged student.

    Trained with the example's own code as `make bench` trains them (the damaged one briefly).
    The team accepts a student's loss within half again of the teacher's (a narrower network is
    less sure of itself: nll +25%), and gates accuracy within the default point.
    """
    from examples.digits.distill import distill
    from examples.digits.train import train

    shutil.copytree(ROOT / "evalsets" / "digits", tmp_path / "evalsets" / "digits")
    (tmp_path / "evalsentry.yaml").write_text(
        "store: store\nregistry: registry\nevalsets: evalsets\n"
        "trusted_factories: [examples.digits.model]\n"
        "traffic:\n  digits: {requests_per_day: 1000000}\n"
        "gate:\n  evalsets:\n    digits: {nll: {max_drop: '50%'}, ece: {max_drop: 0.05}}\n"
    )
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "checkpoints"
    teacher = train(out / "teacher.pt", seed=1)
    return {
        "teacher": teacher,
        "student": distill(teacher, out / "student.pt", seed=1),
        "damaged": distill(teacher, out / "damaged.pt", seed=1, epochs=8, round_bits=2),
        "orphan": distill(train(out / "other.pt", seed=2, epochs=1), out / "orphan.pt", epochs=1),
    }


def test_a_distilled_student_reads_cheaper_and_its_damaged_copy_fails_though_as_cheap(
    digits_students: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The student's lineage names its teacher's file: listed under it, its quality gated
    against production and its cost timed against the teacher: CHEAPER; rounded to 2 bits it
    is as cheap and reads FAIL; one whose teacher is not registered says the cost was not
    weighed."""
    files = digits_students
    register = ["register", "--model", "digits"]
    assert main([*register, str(files["teacher"]), "--stage", "production", "--new-model"]) == 0
    for name in ("student", "damaged", "orphan"):
        assert main([*register, str(files[name])]) == 0
    week = iso_week(now_utc())
    assert main(["run", "--week", iso_week(now_utc() - timedelta(days=7))]) == 0
    capsys.readouterr()
    assert main(["registry", "list"]) == 0
    rows = [line.split()[:3] for line in capsys.readouterr().out.splitlines() if "digits@v" in line]
    assert rows[:3] == [
        ["digits@v1", "production", "digits"],
        ["digits@v2", "v1", "student"],
        ["digits@v3", "v1", "student"],
    ]
    assert rows[3][:3] == ["digits@v4", "student", "(teacher"]  # not registered: said so

    assert main(["evaluate", "--model", "digits", "--version", "3"]) == 1
    out = capsys.readouterr().out
    damaged = re.search(
        r"FAIL \(report only\) +digits@v3 +digits +microseconds_per_example .*digits@v3 "
        r"\(student of v1\): quality not held \(accuracy -\d+\.\d\d pts vs production, margin "
        r"1\.00 pts\); cost not weighed: (0\.\d\d)x the time per example",
        out,
    )
    assert damaged, out  # cheaper (a narrower network), and still a FAIL
    # The honest student: as accurate, its loss within what the team accepts, and cheaper in
    # all rounds but one (a narrower network is cheaper on any machine).
    assert main(["evaluate", "--model", "digits", "--version", "2"]) == 0
    out = capsys.readouterr().out
    cheaper = re.search(
        r"PASS \(report only\) +digits@v2 +digits +microseconds_per_example .*CHEAPER: digits@v2 "
        r"\(student of v1\): quality held \(.*\), \d+% cheaper: at 1,000,000 requests/day: "
        r".* USD/month; (0\.\d\d)x the time per example",
        out,
    )
    assert cheaper, out
    assert main(["evaluate", "--model", "digits", "--version", "4"]) == 1  # a poor model too
    out = capsys.readouterr().out
    assert re.search(
        r"WARN \(report only\) +digits@v4 .*digits@v4 \(student\): cost not weighed: its teacher "
        r"\(sha256 [0-9a-f]{12}\) is no registered version of digits; register the teacher",
        out,
    ), out

    # The week's report weighs each lever beside the bill: the damaged student saves nothing.
    assert main(["run"]) == 0
    report = (Path("store") / "reports" / f"weekly-eval-{week}.md").read_text()
    levers = report[report.index("### Serving levers") :]
    assert re.search(rf"\| digits@v3 \(student\) \| v1 \| FAIL \| {week} \| .* \| not weighed \|", levers)
    assert re.search(rf"\| digits@v2 \(student\) \| v1 \| CHEAPER \| {week} \| .* USD \|", levers)
    assert main(["cost", "--lifetime"]) == 0
    said = capsys.readouterr().out
    assert re.search(r"digits: serving v2 \(student\) instead of v1 saves [\d.]+ USD/month", said)
