"""``models:`` bindings: which evalsets each model line is evaluated on, and refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalsentry.cli import main
from evalsentry.config import Config, load_config
from evalsentry.errors import ConfigError, UsageError
from evalsentry.evaluation.pipeline import Target
from evalsentry.evaluation.planning import binding_text, check_bindings, evalsets_for, pair_targets
from tests.bindings import BOUND, estate

AVAILABLE = ["narrow", "wide"]


def _config(tmp_path: Path, models_yaml: str) -> Config:
    file = tmp_path / "evalsentry.yaml"
    file.write_text(models_yaml)
    return load_config(file)


def _targets(*models: str) -> list[Target]:
    return [Target(m, f"{m}.pt", 1, "production") for m in models]


def test_bound_models_pair_only_with_their_evalsets(tmp_path: Path) -> None:
    config = _config(tmp_path, BOUND)
    pairs, unbound = pair_targets(_targets("narrow", "wide"), config, AVAILABLE)
    assert [(t.model, e) for t, e in pairs] == [("narrow", "narrow"), ("wide", "wide")]
    assert unbound == {}
    assert binding_text("wide", config, AVAILABLE) == "wide"


def test_an_unbound_model_among_several_evalsets_is_an_error_saying_how_to_bind(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path, "models:\n  narrow: {evalsets: [narrow]}\n")
    pairs, unbound = pair_targets(_targets("narrow", "wide"), config, AVAILABLE)
    assert [(t.model, e) for t, e in pairs] == [("narrow", "narrow")]
    assert list(unbound) == ["wide"]
    assert "bound to no evalset" in unbound["wide"]
    assert "models: {wide: {evalsets: [wide]}}" in unbound["wide"]  # the closest name
    assert str(tmp_path / "evalsentry.yaml") in unbound["wide"]
    _, other = pair_targets(_targets("m"), config, AVAILABLE)
    assert "models: {m: {evalsets: [EVALSET]}}" in other["m"]
    assert binding_text("wide", config, AVAILABLE) == "unbound"


def test_an_unbound_model_uses_the_only_evalset(tmp_path: Path) -> None:
    config = _config(tmp_path, "")
    pairs, unbound = pair_targets(_targets("m"), config, ["only"])
    assert [(t.model, e) for t, e in pairs] == [("m", "only")]
    assert not unbound
    assert binding_text("m", config, ["only"]) == "only (the only evalset; unbound)"


def test_a_run_narrowed_to_an_evalset_keeps_each_model_to_its_binding(tmp_path: Path) -> None:
    config = _config(tmp_path, BOUND)
    pairs, _ = pair_targets(_targets("narrow", "wide"), config, AVAILABLE, ["wide"])
    assert [(t.model, e) for t, e in pairs] == [("wide", "wide")]


def test_a_binding_to_a_missing_evalset_names_file_field_and_the_closest(tmp_path: Path) -> None:
    config = _config(tmp_path, "models:\n  narrow: {evalsets: [narow]}\n")
    with pytest.raises(ConfigError) as caught:
        check_bindings(config, AVAILABLE)
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'evalsentry.yaml'}: models.narrow.evalsets: 'narow'")
    assert "Did you mean 'narrow'?" in message


def test_a_misspelt_drift_entry_is_refused_not_ignored(tmp_path: Path) -> None:
    """drift.live naming no evalset would never check drift: refused, with the closest name."""
    config = _config(tmp_path, "drift:\n  live:\n    wde: live.parquet\n")
    with pytest.raises(ConfigError) as caught:
        check_bindings(config, AVAILABLE)
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'evalsentry.yaml'}: drift.live.wde: 'wde'")
    assert "Did you mean 'wide'?" in message


def test_drift_features_for_named_columns_are_refused_before_a_run(tmp_path: Path) -> None:
    """Row summaries listed for an evalset with named columns: refused before any evaluation."""
    from tests.unit.gate.test_drift import freeze_tabular

    freeze_tabular(tmp_path / "evalsets")
    config = _config(tmp_path, "drift:\n  features:\n    tab: [mean]\n")
    with pytest.raises(ConfigError) as caught:
        check_bindings(config, ["tab"])
    assert str(caught.value) == (
        f"{tmp_path / 'evalsentry.yaml'}: drift.features.tab: tab's inputs are 2 named "
        "columns, which are its drift features; remove drift.features.tab"
    )


def test_live_drift_of_token_sequences_is_refused_before_a_run(tmp_path: Path) -> None:
    """drift.live for a token evalset (no input drift is measured for one): refused up front."""
    from tests.unit.evalsets.test_token_evalsets import freeze_lm

    freeze_lm(tmp_path / "evalsets" / "text")
    config = _config(tmp_path, "drift:\n  live:\n    text: live/*.parquet\n")
    with pytest.raises(ConfigError) as caught:
        check_bindings(config, ["text"])
    assert str(caught.value) == (
        f"{tmp_path / 'evalsentry.yaml'}: drift.live.text: the evalset holds token sequences, "
        "whose input drift is not measured; remove it"
    )


def test_an_empty_binding_is_refused_at_load(tmp_path: Path) -> None:
    (tmp_path / "evalsentry.yaml").write_text("models:\n  narrow: {evalsets: []}\n")
    with pytest.raises(ConfigError, match=r"models\.narrow\.evalsets"):
        load_config(tmp_path / "evalsentry.yaml")


def test_a_candidate_runs_on_its_binding_and_not_elsewhere(
    tmp_path: Path, train_data: Path
) -> None:
    config = load_config(estate(tmp_path, BOUND, train_data=train_data))
    assert evalsets_for("wide", config) == ["wide"]
    with pytest.raises(UsageError, match="'narrow' is not one of them"):
        evalsets_for("wide", config, ["narrow"])
    unbound = load_config(estate(tmp_path / "unbound", train_data=train_data))
    with pytest.raises(UsageError, match="bound to no evalset"):
        evalsets_for("wide", unbound)


def test_run_refuses_before_any_server_when_no_model_is_bound(
    tmp_path: Path, train_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Several evalsets and no binding: exit 2 and the fix, nothing started or recorded."""
    config = estate(tmp_path, train_data=train_data)
    assert main(["run", "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "bound to no evalset" in err[0] and "models:" in err[0]
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").rglob("*.parquet"))


@pytest.mark.parametrize(
    ("evalset", "says"),
    [
        ("narrow", "no registered model is bound to 'narrow'; bind one under models:"),
        ("wid", "--evalset 'wid': no such evalset under"),
    ],
)
def test_run_refuses_an_evalset_nothing_would_run_on(
    tmp_path: Path,
    train_data: Path,
    capsys: pytest.CaptureFixture[str],
    evalset: str,
    says: str,
) -> None:
    """--evalset naming one no model is bound to, or none at all: exit 2 before any server."""
    both_on_wide = "models:\n  narrow: {evalsets: [wide]}\n  wide: {evalsets: [wide]}\n"
    config = estate(tmp_path, both_on_wide, train_data=train_data)
    assert main(["run", "--config", str(config), "--evalset", evalset]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert says in line
    assert evalset != "wid" or "Did you mean 'wide'?" in line


def test_run_refuses_a_binding_to_a_missing_evalset(
    tmp_path: Path, train_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = estate(tmp_path, "models:\n  wide: {evalsets: [wider]}\n", train_data=train_data)
    assert main(["run", "--config", str(config)]) == 2
    assert "models.wide.evalsets: 'wider' is not an evalset" in capsys.readouterr().err


def test_run_refuses_a_tolerance_for_a_missing_evalset(
    tmp_path: Path, train_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A misspelt gate.evalsets entry would never apply: the run refuses it, naming the field."""
    tolerances = "gate:\n  evalsets:\n    wider: {accuracy: {max_drop: 0.05}}\n"
    config = estate(tmp_path, tolerances, train_data=train_data)
    assert main(["run", "--config", str(config)]) == 2
    assert "gate.evalsets.wider: 'wider' is not an evalset" in capsys.readouterr().err


def test_evaluate_refuses_an_evalset_outside_the_binding(
    tmp_path: Path, train_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = estate(tmp_path, BOUND, train_data=train_data)
    code = main(
        [
            "evaluate",
            "--checkpoint",
            str(tmp_path / "checkpoints" / "wide.pt"),
            "--model",
            "wide",
            "--evalset",
            "narrow",
            "--config",
            str(config),
        ]
    )
    assert code == 2
    assert "model 'wide' is evaluated on wide only" in capsys.readouterr().err
