"""The models teams actually run, in one weekly flow beside the digits and tabular lines.

A language model of the text example on a perplexity evalset and a multiple-choice cloze, a
multi-label tagger with several named inputs, a digits CNN and a tabular classifier: all in the
same week, under a real Prefect API. A harmless retrain of the language model passes; a damaged
one fails the week on both of its evalsets, and `evalsentry gate` tells the same story.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evalsentry.checkpoints.registry import Registry
from evalsentry.cli import main
from evalsentry.config import load_config
from evalsentry.evalsets.freeze import freeze_evalset
from evalsentry.evalsets.inputs import InputsSpec
from evalsentry.flows.weekly_eval import weekly_eval
from evalsentry.history.store import History
from evalsentry.trust import Trust

REPO = Path(__file__).parents[2]
TRUSTED = (
    "examples.textlm.model",
    "examples.textlm.tagger",
    "examples.digits.model",
    "examples.tabular.model",
)
LINES = {
    "textlm": ["text", "cloze"],
    "tagger": ["tags"],
    "digits": ["digits"],
    "wine": ["wine"],
}


def estate(root: Path) -> tuple[Path, dict[str, Path]]:
    """The project: its five evalsets frozen, each line's v1 in production; v2 and v3 trained."""
    import pyarrow.parquet as pq
    from examples.textlm.evalsets import cloze_rows, lm_rows

    from examples.digits.train import train as train_digits
    from examples.tabular.train import DATASETS
    from examples.tabular.train import train as train_tabular
    from examples.textlm.model import PAD_ID
    from examples.textlm.tagger import train as train_tagger
    from examples.textlm.train import SMALL
    from examples.textlm.train import train as train_lm

    evalsets = root / "evalsets"
    tokens = {"pad_id": PAD_ID, "max_length": 256}
    freeze_evalset(
        lm_rows(),
        evalsets / "text",
        name="text",
        task="language_modeling",
        target="input_ids",
        id_column="id",
        slices=["topic"],
        inputs=InputsSpec(tokens="input_ids", **tokens),
    )
    freeze_evalset(
        cloze_rows(),
        evalsets / "cloze",
        name="cloze",
        task="multiple_choice",
        target="answer",
        id_column="id",
        slices=["topic"],
        inputs=InputsSpec(tokens="context", choices="choices", truncation="left", **tokens),
    )
    checkpoints = root / "checkpoints"
    paths = {
        "textlm-1": train_lm(checkpoints / "textlm-1.safetensors", seed=1, **SMALL),
        "textlm-2": train_lm(checkpoints / "textlm-2.safetensors", seed=2, **SMALL),
        "textlm-3": train_lm(checkpoints / "textlm-3.safetensors", seed=1, noise=0.3, **SMALL),
        "tagger-1": train_tagger(
            checkpoints / "tagger-1.safetensors",
            seed=1,
            steps=60,
            rows=root / "tagger_rows.parquet",
        ),
        "digits-1": train_digits(checkpoints / "digits-1.pt", epochs=2),
        "wine-1": train_tabular(
            REPO / "examples" / "tabular" / "wine.csv",
            DATASETS["wine"],
            checkpoints / "wine-1.pt",
            evalset="wine",
            evalsets_dir=str(evalsets),
            epochs=30,
        ),
    }
    freeze_evalset(
        pq.read_table(root / "tagger_rows.parquet"),
        evalsets / "tags",
        name="tags",
        task="multilabel",
        target="tags",
        id_column="id",
        slices=["part"],
        inputs=InputsSpec(tokens="input_ids", named={"stats": ["length", "spaces"]}, **tokens),
    )
    (evalsets / "digits").symlink_to(REPO / "evalsets" / "digits", target_is_directory=True)
    config = root / "evalsentry.yaml"
    bindings = "".join(f"  {m}: {{evalsets: [{', '.join(e)}]}}\n" for m, e in LINES.items())
    config.write_text(
        f"trusted_factories: [{', '.join(TRUSTED)}]\nevalsets: evalsets\nmodels:\n{bindings}"
    )
    registry = Registry(load_config(config).registry_url)
    for line in LINES:
        registry.register(paths[f"{line}-1"], line, stage="production", trust=Trust(TRUSTED))
    return config, paths


@pytest.mark.usefixtures("pinned_git")
def test_a_damaged_language_model_fails_its_week_on_both_evalsets(tmp_path: Path) -> None:
    """v2 (another seed) passes beside the other lines; v3 (noisy training data) fails both."""
    config, paths = estate(tmp_path)
    registry = Registry(load_config(config).registry_url)
    first = weekly_eval(week="2026-W45", config_path=str(config), return_state=True)
    assert first.is_completed(), first.message
    rows = History(load_config(config).store_url).evaluations()
    assert sorted(zip(rows["model"], rows["evalset"], rows["status"], strict=True)) == sorted(
        (m, e, "ok") for m, evalsets in LINES.items() for e in evalsets
    )
    text = rows[rows["evalset"] == "text"].iloc[0]
    assert text["input_tokens"] > 0  # the tokens it read are in the history, for the bill

    for week, version in (("2026-W46", 2), ("2026-W47", 3)):
        entry = registry.register(paths[f"textlm-{version}"], "textlm", trust=Trust(TRUSTED))
        registry.promote("textlm", entry.version, "production")
        state = weekly_eval(week=week, config_path=str(config), return_state=True)
        if version == 2:
            assert state.is_completed(), state.message
            assert main(["gate", "--week", week, "--config", str(config)]) == 0
    assert state.is_failed()
    message = state.message or ""
    assert message.startswith("2026-W47: FAIL textlm@v3")
    assert "on text: perplexity" in message or "on text: token_nll" in message
    assert "on cloze: accuracy" in message
    assert main(["gate", "--week", "2026-W47", "--config", str(config)]) == 1
