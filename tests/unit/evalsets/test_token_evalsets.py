"""Freezing token sequences: int64 lists, stated padding and length, checked at every load."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from evalsentry.cli import main
from evalsentry.errors import EvalsetError
from evalsentry.evalsets.check import check_evalset
from evalsentry.evalsets.evalset import InputsSpec, load_evalset
from evalsentry.evalsets.freeze import freeze_evalset
from evalsentry.evalsets.identity import EvalsetFieldChanged

IDS = [[5, 6, 7], [1, 2], [300000, 4, 5, 6]]  # an id far above 2**16: int64, not float


def freeze_lm(dest: Path, ids: list[list[int]] = IDS, **inputs: object) -> None:
    spec = InputsSpec(tokens="ids", pad_id=0, max_length=4, **inputs)  # type: ignore[arg-type]
    freeze_evalset(
        pa.table({"ids": ids}),
        dest,
        name=dest.name,
        task="language_modeling",
        target="ids",
        inputs=spec,
    )


def test_token_ids_round_trip_exactly_as_int64(tmp_path: Path) -> None:
    """Stored as list<int64> and read back as the very ids, whatever their size."""
    freeze_lm(tmp_path / "lm")
    evalset = load_evalset(tmp_path / "lm")
    tokens = evalset.token_inputs().tokens
    assert tokens.values.dtype == np.int64
    assert [
        tokens.values[a:b].tolist()
        for a, b in zip(tokens.offsets[:-1], tokens.offsets[1:], strict=True)
    ] == IDS
    manifest = yaml.safe_load((tmp_path / "lm" / "evalset.yaml").read_text())
    assert manifest["schema"]["ids"] == "list<element: int64>"
    assert manifest["inputs"] == {
        "dtype": "int64",
        "tokens": "ids",
        "keyword": "input_ids",
        "mask": "attention_mask",
        "pad_id": 0,
        "max_length": 4,
        "truncation": "error",
    }
    assert check_evalset(tmp_path / "lm").success


@pytest.mark.parametrize(
    ("field", "value"),
    [("pad_id", 1), ("max_length", 8), ("truncation", "left"), ("keyword", "ids")],
)
def test_padding_length_and_names_are_part_of_the_identity(
    tmp_path: Path, field: str, value: object
) -> None:
    """Editing how rows are padded, cut or passed after freeze is refused, naming the field."""
    freeze_lm(tmp_path / "lm")
    manifest_path = tmp_path / "lm" / "evalset.yaml"
    manifest = yaml.safe_load(manifest_path.read_text())
    manifest["inputs"][field] = value
    manifest_path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    with pytest.raises(EvalsetFieldChanged, match="inputs: changed since freeze"):
        load_evalset(tmp_path / "lm")


def test_fixed_inputs_keep_their_manifest_and_identity(tmp_path: Path) -> None:
    """The token fields are absent from a feature-column spec: older identities stay valid."""
    assert InputsSpec(columns=["a"]).model_dump(mode="json", exclude_none=True) == {
        "columns": ["a"],
        "dtype": "float32",
    }


@pytest.mark.parametrize(
    ("ids", "inputs", "message"),
    [
        (
            [[1, 2, 3, 4, 5], [1, 2]],
            {},
            "row 0 has 5 tokens, more than max_length 4; raise --max-length",
        ),
        ([[1, -2], [1, 2]], {}, "holds a negative token id"),
        ([[1.5, 2.0], [1.0, 2.0]], {}, "not lists of integer token ids"),
        ([[1], [1, 2]], {}, "row 0 of 'ids' has 1 tokens; each needs at least 2"),
    ],
)
def test_unusable_rows_are_refused_in_one_line(
    tmp_path: Path, ids: list[list[float]], inputs: dict[str, object], message: str
) -> None:
    """Each refusal names the row and the fix; nothing is written."""
    with pytest.raises(EvalsetError) as caught:
        freeze_lm(tmp_path / "lm", ids, **inputs)  # type: ignore[arg-type]
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert not (tmp_path / "lm").exists()


def test_multiple_choice_answers_must_index_a_choice(tmp_path: Path) -> None:
    """An answer past the row's continuations, or right truncation that would cut them: refused."""
    table = pa.table({"ctx": [[1, 2], [3]], "opts": [[[4], [5, 6]], [[7], [8]]], "answer": [1, 2]})
    spec = InputsSpec(tokens="ctx", choices="opts", pad_id=0, max_length=8)
    with pytest.raises(EvalsetError, match="row 1's answer 2 is not among its 2 choices"):
        freeze_evalset(
            table, tmp_path / "mc", name="mc", task="multiple_choice", target="answer", inputs=spec
        )
    spec = InputsSpec(tokens="ctx", choices="opts", pad_id=0, max_length=8, truncation="right")
    with pytest.raises(EvalsetError, match="truncation: right would cut the continuations"):
        freeze_evalset(
            table, tmp_path / "mc", name="mc", task="multiple_choice", target="answer", inputs=spec
        )


def test_the_suite_pins_row_lengths_and_id_range(tmp_path: Path) -> None:
    """Great Expectations sees each sequence's length and id range, pinned at freeze."""
    freeze_lm(tmp_path / "lm")
    suite = (tmp_path / "lm" / "expectations.json").read_text()
    assert '"column": "ids__len"' in suite and '"max_value": 300000.0' in suite


def test_cli_freezes_a_language_modelling_evalset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`evalset freeze --tokens ...` states the keyword contract it pins."""
    source = tmp_path / "text.parquet"
    pq.write_table(pa.table({"ids": [[1, 2, 3], [4, 5, 6, 7, 8, 9]]}), source)
    (tmp_path / "evalsentry.yaml").write_text("evalsets: evalsets\n")
    code = main(
        [
            "evalset",
            "freeze",
            str(source),
            "--name",
            "text",
            "--task",
            "language_modeling",
            "--target",
            "ids",
            "--tokens",
            "ids",
            "--pad-id",
            "0",
            "--max-length",
            "4",
            "--truncation",
            "left",
            "--config",
            str(tmp_path / "evalsentry.yaml"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "model(input_ids=int64 [N, T], attention_mask=[N, T])" in out
    assert "longer rows cut on the left" in out and "next-token logits [N, T, V]" in out
    assert load_evalset(tmp_path / "evalsets" / "text").token_inputs().tokens.lengths.tolist() == [
        3,
        4,
    ]
