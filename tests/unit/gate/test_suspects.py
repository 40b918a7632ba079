"""Label-error suspects: planted label errors in a frozen evalset, found from real models' outputs.

Three small torch classifiers, trained on clean data with different seeds, are run over an
evalset whose labels were changed on 3% of its rows; their per-example outputs go into a real
history as an evaluation writes them. The suspects are then asked for through the library and
the command line.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch

from evalsentry.cli import main
from evalsentry.errors import UsageError
from evalsentry.evalsets.evalset import Evalset, InputsSpec, load_evalset
from evalsentry.evalsets.freeze import freeze_evalset
from evalsentry.evaluation.inference import run_inference
from evalsentry.gate.suspects import find_suspects, flipped_suspects
from evalsentry.history.store import History
from evalsentry.names import PROBABILITIES
from tests.models import TinyNet
from tests.synthetic import record_week

CLASSES, FEATURES, ROWS, PLANTED = 3, 4, 600, 18
CENTRES = np.array([[0, 0, 0, 0], [3, 3, 0, 0], [0, 3, 3, 0]], np.float32)


def _sample(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    labels = rng.integers(0, CLASSES, n)
    return (CENTRES[labels] + rng.normal(0, 0.8, (n, FEATURES))).astype(np.float32), labels


def _trained(seed: int, x: np.ndarray, y: np.ndarray) -> TinyNet:
    torch.manual_seed(seed)
    model = TinyNet(features=FEATURES, classes=CLASSES, hidden=16)
    optimiser = torch.optim.Adam(model.parameters(), lr=0.05)
    inputs, targets = torch.from_numpy(x), torch.from_numpy(y)
    for _ in range(150):
        optimiser.zero_grad()
        torch.nn.functional.cross_entropy(model(inputs), targets).backward()
        optimiser.step()
    return model.eval()


class Planted:
    def __init__(self, root: Path) -> None:
        rng = np.random.default_rng(7)
        x, truth = _sample(rng, ROWS)
        self.rows = rng.choice(ROWS, PLANTED, replace=False)
        given = truth.copy()
        given[self.rows] = (truth[self.rows] + rng.integers(1, CLASSES, PLANTED)) % CLASSES
        self.truth, self.given = truth, given
        table = pa.table(
            {
                **{f"f{i}": x[:, i] for i in range(FEATURES)},
                "label": [f"c{v}" for v in given],
            }
        )
        freeze_evalset(
            table,
            root / "evalsets" / "blobs",
            name="blobs",
            task="classification",
            target="label",
            inputs=InputsSpec(columns=[f"f{i}" for i in range(FEATURES)]),
            classes=[f"c{i}" for i in range(CLASSES)],
        )
        self.evalset = load_evalset(root / "evalsets" / "blobs")
        self.history = History(str(root / "store"))
        train_x, train_y = _sample(np.random.default_rng(8), 1500)
        for version in (1, 2, 3):
            record(self.history, self.evalset, _trained(version, train_x, train_y), version)
        (root / "evalsentry.yaml").write_text("store: store\nevalsets: evalsets\n")
        self.root = root


def record(history: History, evalset: Evalset, model: TinyNet, version: int, **kw: object) -> None:
    columns = run_inference(model, evalset, device="cpu").columns
    fields: dict[str, object] = {
        "checkpoint": str(version) * 64,
        "evalset": evalset.spec.name,
        "evalset_sha": evalset.sha256,
        **kw,
    }
    record_week(
        history,
        "2026-W40",
        columns["prediction"] == columns["target"],
        version=version,
        columns=columns,
        **fields,  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Planted:
    return Planted(tmp_path_factory.mktemp("suspects"))


def test_the_planted_label_errors_are_found(planted: Planted) -> None:
    found = find_suspects(planted.history, planted.evalset)
    rows = {s.row for s in found.suspects}
    caught = rows & set(planted.rows.tolist())
    assert len(caught) >= 0.8 * PLANTED  # recall
    assert len(caught) >= 0.6 * len(rows)  # precision
    assert found.checkpoints == ["m@v1", "m@v2", "m@v3"]
    for suspect in found.suspects:
        assert suspect.given == f"c{planted.given[suspect.row]}"
        assert suspect.example_id == planted.evalset.ids[suspect.row]
        assert suspect.confidence > suspect.given_probability
    for suspect in (s for s in found.suspects if s.row in caught):
        assert suspect.agreed == f"c{planted.truth[suspect.row]}"  # the label before planting
        assert suspect.agreeing == 3


def test_the_command_lists_them_as_a_table_and_as_json(
    planted: Planted, capsys: pytest.CaptureFixture[str]
) -> None:
    config = str(planted.root / "evalsentry.yaml")
    assert main(["evalset", "suspects", "blobs", "--config", config]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("label-error suspects in blobs: ")
    assert "of 600 examples" in table[0]
    assert "from 3 checkpoint(s) (m@v1, m@v2, m@v3); cleanlab 2.9.0" in table[0]
    header = "example row given p(given) agreed p(agreed) checkpoints agreeing"
    assert table[1].split() == header.split()
    assert main(["evalset", "suspects", "blobs", "--format", "json", "--config", config]) == 0
    document = json.loads(capsys.readouterr().out)
    assert len(document["suspects"]) == len(table) - 3  # title, header, rule
    assert {"example_id", "row", "given", "agreed", "confidence", "agreeing"} <= set(
        document["suspects"][0]
    )


def test_evaluations_of_other_content_or_without_probabilities_are_not_used(
    planted: Planted, tmp_path: Path
) -> None:
    history = History(str(tmp_path / "store"))
    model = _trained(1, *_sample(np.random.default_rng(8), 1500))
    record(history, planted.evalset, model, 1, checkpoint="a" * 64)
    record(history, planted.evalset, model, 2, checkpoint="b" * 64, evalset_sha="0" * 64)
    columns = run_inference(model, planted.evalset, device="cpu").columns
    del columns[PROBABILITIES]  # as evaluations recorded before they were kept
    record_week(
        history,
        "2026-W41",
        columns["prediction"] == columns["target"],
        version=3,
        checkpoint="c" * 64,
        columns=columns,
        evalset="blobs",
        evalset_sha=planted.evalset.sha256,
    )
    found = find_suspects(history, planted.evalset)
    assert found.checkpoints == ["m@v1"]
    assert found.without_probabilities == 1


def test_nothing_to_find_them_from_is_one_line(
    planted: Planted, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "evalsentry.yaml").write_text(
        f"store: store\nevalsets: {planted.root / 'evalsets'}\n"
    )
    code = main(["evalset", "suspects", "blobs", "--config", str(tmp_path / "evalsentry.yaml")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1
    assert "no evaluation of evalset 'blobs'" in err[0]
    assert "run the weekly evaluation" in err[0]


def test_a_regression_evalset_has_no_labels_to_doubt(tmp_path: Path) -> None:
    table = pa.table({"a": [1.0, 2.0, 3.0], "y": [0.5, 1.5, 2.5]})
    freeze_evalset(
        table,
        tmp_path / "reg",
        name="reg",
        task="regression",
        target="y",
        inputs=InputsSpec(columns=["a"]),
    )
    with pytest.raises(UsageError, match="a regression evalset: label-error suspects are found"):
        find_suspects(History(str(tmp_path / "store")), load_evalset(tmp_path / "reg"))


def test_a_fail_says_how_many_of_its_newly_wrong_examples_are_suspects(planted: Planted) -> None:
    evaluations = planted.history.evaluations(evalset="blobs", include_superseded=True)
    current = evaluations.sort_values("version").iloc[-1].to_dict()
    ids = planted.evalset.ids
    clean = np.setdiff1d(np.arange(ROWS), planted.rows)[:6]
    newly_wrong = ids[np.concatenate([planted.rows[:4], clean])]
    found = flipped_suspects(planted.history, current, newly_wrong)
    assert found is not None
    assert (found.hits, found.flips) == (4, 10)
    said = found.describe()
    assert said.startswith("4 of 10 newly wrong examples are label-error suspects (18 in blobs, ")
    assert said.endswith("evalsentry evalset suspects blobs)")


def test_a_fail_without_stored_probabilities_says_nothing_of_suspects(tmp_path: Path) -> None:
    history = History(str(tmp_path / "store"))
    evaluation_id = record_week(history, "2026-W40", np.ones(30, bool))
    row = history.evaluations().iloc[0].to_dict()
    assert row["evaluation_id"] == evaluation_id
    assert flipped_suspects(history, row, np.array(["ex-00001"])) is None


def test_multi_label_errors_are_found_and_shown_as_label_sets(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    labels = ["red", "round", "big"]

    def sample(n: int) -> tuple[np.ndarray, np.ndarray]:
        x = rng.normal(size=(n, 3)).astype(np.float32)
        return x, x > 0  # each label: one feature's sign

    x, truth = sample(500)
    planted = rng.choice(500, 15, replace=False)
    given = truth.copy()
    given[planted, rng.integers(0, 3, 15)] ^= True  # one label of each flipped
    far = np.abs(x).min(axis=1) > 0.5  # away from every boundary: a flip there is clear
    table = pa.table(
        {
            **{f"f{i}": x[:, i] for i in range(3)},
            "tags": [[labels[j] for j in range(3) if row[j]] for row in given],
        }
    )
    freeze_evalset(
        table,
        tmp_path / "tags",
        name="tags",
        task="multilabel",
        target="tags",
        inputs=InputsSpec(columns=["f0", "f1", "f2"]),
        classes=labels,
    )
    evalset = load_evalset(tmp_path / "tags")
    history = History(str(tmp_path / "store"))
    train_x, train_y = sample(1500)
    for version in (1, 2):
        torch.manual_seed(version)
        model = TinyNet(features=3, classes=3, hidden=16)
        optimiser = torch.optim.Adam(model.parameters(), lr=0.05)
        for _ in range(200):
            optimiser.zero_grad()
            torch.nn.functional.binary_cross_entropy_with_logits(
                model(torch.from_numpy(train_x)), torch.from_numpy(train_y).float()
            ).backward()
            optimiser.step()
        record(history, evalset, model.eval(), version)
    found = find_suspects(history, evalset)
    rows = {s.row for s in found.suspects}
    clear = set(planted[far[planted]].tolist())
    assert clear and clear <= rows  # every planted error away from a boundary
    assert len(rows - set(planted.tolist())) <= 3
    shown = next(s for s in found.suspects if s.row in clear)
    assert shown.given == "{" + ",".join(np.array(labels)[given[shown.row]]) + "}"
    assert shown.agreed == "{" + ",".join(np.array(labels)[truth[shown.row]]) + "}"


def test_a_verdict_without_excluded_examples_is_computed_on_the_rest(tmp_path: Path) -> None:
    """The history seen without some examples: a drop that sits on them is gone."""
    from evalsentry.gate.suspects import HistoryWithout
    from evalsentry.gate.week import gate_week
    from evalsentry.sections import GatePolicy, Tolerance

    history = History(str(tmp_path / "store"))
    record_week(history, "2026-W40", np.ones(1000, bool))
    current = np.ones(1000, bool)
    current[:60] = False  # 6 points lost, all on the first 60 examples
    record_week(history, "2026-W41", current, version=2, checkpoint="d" * 64)
    policy = GatePolicy(default=Tolerance(max_drop=0.01))
    assert gate_week(history, "2026-W41", policy).verdict == "FAIL"
    left_out = {f"ex-{i:05d}" for i in range(60)}
    without = HistoryWithout(str(tmp_path / "store"), {"toy": left_out})
    report = gate_week(without, "2026-W41", policy)
    assert report.verdict == "PASS"
    accuracy = next(c for c in report.comparisons if c.metric == "accuracy" and not c.slice)
    assert accuracy.n == 940 and accuracy.newly_wrong == 0
    assert gate_week(history, "2026-W41", policy).verdict == "FAIL"  # the store is untouched


def test_the_gate_prints_the_verdict_without_suspects_after_the_full_one(
    planted: Planted, capsys: pytest.CaptureFixture[str]
) -> None:
    config = str(planted.root / "evalsentry.yaml")
    full = main(["gate", "--config", config])
    alone = capsys.readouterr().out
    code = main(["gate", "--without-suspects", "--config", config])
    out = capsys.readouterr().out
    assert code == full  # the full verdict alone sets the exit code
    assert out.startswith(alone)  # printed first, as without the option
    after = out[len(alone) :].splitlines()
    assert after[0] == (
        "without label-error suspects: 18 of 600 examples of blobs left out "
        "(cleanlab 2.9.0 confident learning, from 3 checkpoint(s))"
    )
    assert after[1].startswith(
        "evalsentry gate 2026-W40 WITHOUT label-error suspects (the verdict above stands): "
    )
    assert after[-1].startswith("without label-error suspects: 2026-W40: ")


def test_every_week_s_report_has_a_section_of_the_suspects(planted: Planted) -> None:
    """The week's reports list each evalset's suspects: the same as the command finds, with the
    evalset's class names; an evalset without probabilities says why none were looked for."""
    from evalsentry.gate.suspects import week_suspects
    from evalsentry.gate.week import gate_week
    from evalsentry.reports.html_report import render_report
    from evalsentry.reports.weekly import weekly_markdown
    from evalsentry.sections import GatePolicy

    history = planted.history
    evaluations = history.evaluations().to_dict("records")
    found = week_suspects(history, evaluations, str(planted.root / "evalsets"))
    expected = find_suspects(history, planted.evalset)
    section = found["blobs"]
    assert not isinstance(section, str) and section.suspects == expected.suspects
    top = expected.suspects[0]

    report = gate_week(history, "2026-W40", GatePolicy())
    markdown = weekly_markdown(report, evaluations, [], {}, suspects=found)
    shown = markdown.split("### Label-error suspects\n", 1)[1]
    assert (
        shown.startswith(f"\n- **blobs**: {len(expected.suspects)} of {ROWS} examples (")
        and "`evalsentry evalset suspects blobs`" in shown
    )
    assert f"| {top.example_id} | {top.row} | {top.given} | {top.agreed} | " in shown
    assert f"{top.agreeing} of 3 |" in shown
    html = render_report(history, report, suspects=found)
    assert "<h2>Label-error suspects</h2>" in html and f"<td>{top.example_id}</td>" in html

    bare = [{**evaluations[0], "evaluation_id": "none-stored"}]
    (after,) = week_suspects(history, bare + evaluations, str(planted.root / "evalsets")).values()
    assert not isinstance(after, str) and after.suspects == expected.suspects
    (said,) = week_suspects(history, bare).values()
    assert said == (
        "not looked for: its evaluations hold no class probabilities (suspects are found for "
        "classification and multi-label evalsets)"
    )
