"""The model contract: what a model receives, what it must return, and how labels are encoded.

Freeze states it (the CLI prints it, the manifest pins it); inference checks it, and a model built
for other inputs fails with one line naming the layer, what it takes and what the evalset gives.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from torch import nn

from evalsentry.cli import main
from evalsentry.evalsets.evalset import Evalset, InputsSpec, load_evalset, read_spec
from evalsentry.evalsets.freeze import freeze_evalset
from evalsentry.evaluation.contract import ForwardRaised, InputMismatch, OutputContractViolation
from evalsentry.evaluation.inference import run_inference
from tests.models import TinyNet

DIGITS = Path(__file__).parents[3] / "evalsets" / "digits"


def config(root: Path) -> Path:
    """A project config whose evalsets live under ``root / evalsets``."""
    path = root / "evalsentry.yaml"
    path.write_text("evalsets: evalsets\n")
    return path


def freeze_cli(root: Path, source: Path, *extra: str, target: str = "y") -> list[str]:
    """`evalset freeze` of ``source`` as the classification evalset 'set' over features a, b."""
    return [
        "evalset",
        "freeze",
        str(source),
        "--name",
        "set",
        "--task",
        "classification",
        "--target",
        target,
        "--inputs",
        "a,b",
        "--config",
        str(config(root)),
        *extra,
    ]


def rows(path: Path, labels: list[object]) -> Path:
    """A Parquet file of features a (the row number), b (its negative) and the label y."""
    n = len(labels)
    pq.write_table(
        pa.table({"a": np.arange(n, dtype=np.float64), "b": -np.arange(n), "y": labels}), path
    )
    return path


def features(root: Path, width: int, rows_: int = 40, name: str = "set") -> Evalset:
    """A frozen 2-class evalset of ``width`` feature columns f0.. (so ``[N, width]`` inputs)."""
    rng = np.random.default_rng(width)
    columns = {f"f{i}": rng.normal(size=rows_).astype(np.float32) for i in range(width)}
    table = pa.table({**columns, "y": np.arange(rows_) % 2})
    freeze_evalset(
        table,
        root / name,
        name=name,
        task="classification",
        target="y",
        inputs=InputsSpec(columns=list(columns)),
    )
    return load_evalset(root / name)


class TestLabelEncoding:
    def test_string_labels_default_to_natural_order_and_freeze_states_it(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """class_2 sorts before class_10; freeze prints the order, targets index into it."""
        source = rows(tmp_path / "r.parquet", ["class_10", "class_2", "class_1", "class_2"])
        assert main(freeze_cli(tmp_path, source)) == 0
        out = capsys.readouterr().out
        assert "one column per class in this order: class_1, class_2, class_10" in out
        assert "model input: float32 [N, 2] (2 feature columns): a, b" in out
        folder = tmp_path / "evalsets" / "set"
        assert read_spec(folder).classes == ["class_1", "class_2", "class_10"]
        assert load_evalset(folder).targets.tolist() == [2, 1, 0, 1]

    def test_integer_labels_default_to_numeric_order(self, tmp_path: Path) -> None:
        """Integer labels 10, 2, 1 are ordered 1, 2, 10 (not as text: 1, 10, 2)."""
        source = rows(tmp_path / "r.parquet", [10, 2, 1, 10])
        assert main(freeze_cli(tmp_path, source)) == 0
        assert read_spec(tmp_path / "evalsets" / "set").classes == [1, 2, 10]

    def test_classes_option_sets_the_order_and_keeps_integer_labels_integers(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--classes 10,1,2 is the logit column order; the manifest holds integers."""
        source = rows(tmp_path / "r.parquet", [10, 2, 1, 10])
        assert main(freeze_cli(tmp_path, source, "--classes", "10,1,2")) == 0
        assert "in this order: 10, 1, 2" in capsys.readouterr().out
        folder = tmp_path / "evalsets" / "set"
        manifest = yaml.safe_load((folder / "evalset.yaml").read_text())
        assert manifest["classes"] == [10, 1, 2]
        assert load_evalset(folder).targets.tolist() == [0, 2, 1, 0]

    @pytest.mark.parametrize(
        ("labels", "classes", "message"),
        [
            (
                ["cat", "dog", "eel"],
                "dog,cat",
                "target column 'y' has label(s) 'eel' not among the classes 'dog', 'cat'; "
                "add them to --classes",
            ),
            (
                ["cat", "dog"],
                "cat,dog,eel",
                "classes 'eel' have no example in target column 'y'",
            ),
            ([0, 1], "0,1,1", "classes: 1 listed more than once"),
            ([0, 1], "0,one", "classes: 'one' is not an integer"),
        ],
        ids=["unlisted-label", "class-without-example", "repeated", "not-an-integer"],
    )
    def test_a_class_list_that_is_not_the_labels_is_one_line_exit_2(
        self,
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
        labels: list[object],
        classes: str,
        message: str,
    ) -> None:
        """Every label must be listed once and every listed class seen: else exit 2, one line."""
        source = rows(tmp_path / "r.parquet", labels)
        assert main(freeze_cli(tmp_path, source, "--classes", classes)) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1 and "Traceback" not in err
        assert not (tmp_path / "evalsets" / "set").exists()

    def test_classes_for_a_regression_evalset_are_refused(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A regression evalset has no classes: --classes there is exit 2, not silently kept."""
        source = rows(tmp_path / "r.parquet", [0.5, 1.5])
        args = freeze_cli(tmp_path, source, "--classes", "0,1")
        args[args.index("classification")] = "regression"
        assert main(args) == 2
        assert "a regression evalset has no classes" in capsys.readouterr().err

    def test_the_shipped_digits_refrozen_keeps_its_classes_and_identity(
        self, tmp_path: Path
    ) -> None:
        """Integer labels keep their numeric order: refreezing digits gives the same sha256."""
        spec = read_spec(DIGITS)
        table = pq.read_table(DIGITS / "data" / "part-000.parquet")
        again = freeze_evalset(
            table,
            tmp_path / "digits",
            name="digits",
            task="classification",
            target="label",
            inputs=spec.inputs,
            id_column="id",
            slices=spec.slices,
        )
        assert again.classes == list(range(10))
        assert again.identity_version == 2  # refrozen under today's identity scheme
        assert again.files == spec.files  # same bytes: the data side of the identity is unchanged


class TestInputs:
    def test_feature_columns_arrive_in_the_listed_order_not_the_files(self, tmp_path: Path) -> None:
        """inputs b,a makes column 0 of the tensor b: the manifest's order is the contract."""
        table = pa.table({"a": [1.0, 2.0], "b": [10.0, 20.0], "y": [0, 1]})
        freeze_evalset(
            table,
            tmp_path / "s",
            name="s",
            task="classification",
            target="y",
            inputs=InputsSpec(columns=["b", "a"]),
        )
        loaded = load_evalset(tmp_path / "s")
        assert loaded.tensors()[0].dtype == torch.float32
        assert loaded.inputs.tolist() == [[10.0, 1.0], [20.0, 2.0]]

    def test_contract_states_dtype_shape_and_source(self) -> None:
        """One line: dtype, [N, ...] and where the values come from."""
        assert (
            InputsSpec(columns=["a", "b", "c"]).contract() == "float32 [N, 3] (3 feature columns)"
        )
        image = InputsSpec(column="pixels", shape=[1, 8, 8])
        assert (
            image.contract() == "float32 [N, 1, 8, 8] (list column 'pixels' reshaped to [1, 8, 8])"
        )


class Conv(nn.Module):
    """A small image classifier expecting ``channels`` input channels."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, 4, 3, padding=1)
        self.head = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.conv(x).mean((2, 3)))


class Scaled(nn.Module):
    """Standardises its inputs with per-feature buffers before its first layer (the tabular example)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(width))
        self.net = nn.Sequential(nn.Linear(width, 8), nn.ReLU(), nn.Linear(8, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x - self.mean)


class Counting(nn.Module):
    """Counts its forward calls."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner, self.calls = inner, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.inner(x)  # type: ignore[no-any-return]


class TestInputMismatch:
    def test_a_narrower_model_names_its_first_layer_and_the_evalsets_width(
        self, tmp_path: Path
    ) -> None:
        """A 13-feature model on 30 columns raising before its first layer: both shapes, one line."""
        evalset = features(tmp_path, 30, name="cancer")
        with pytest.raises(InputMismatch) as err:
            run_inference(Scaled(13), evalset, device="cpu", batch_size=16)
        assert str(err.value) == (
            "input shape mismatch: the model's first layer (Linear 'net.0') takes 13 features, "
            "got float32 [16, 30]; the evalset 'cancer' gives float32 [N, 30] (30 feature "
            "columns): bind the model to an evalset of the inputs it was built for (models: in "
            "evalsentry.yaml)"
        )
        assert isinstance(err.value.__cause__, RuntimeError)  # torch's own message is kept

    def test_a_refusal_inside_the_first_layer_is_found_by_its_hooks(self, tmp_path: Path) -> None:
        """A TinyNet for 4 features on 6 columns: the Linear that raised is named."""
        evalset = features(tmp_path, 6)
        with pytest.raises(InputMismatch) as err:
            run_inference(TinyNet(features=4, classes=2), evalset, device="cpu")
        assert err.value.layer == "the model's first layer (Linear 'body.0')"
        assert (err.value.expects, err.value.got) == ("4 features", "float32 [40, 6]")

    def test_a_conv_with_other_channels_names_them_and_the_images_shape(
        self, tmp_path: Path
    ) -> None:
        """A 3-channel conv on 1x4x4 images: its channels, the batch and the list column."""
        values = np.random.default_rng(0).normal(size=(10, 16)).astype(np.float32)
        table = pa.table(
            {
                "img": pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), 16),
                "y": np.arange(10) % 3,
            }
        )
        freeze_evalset(
            table,
            tmp_path / "img",
            name="img",
            task="classification",
            target="y",
            inputs=InputsSpec(column="img", shape=[1, 4, 4]),
        )
        with pytest.raises(InputMismatch) as err:
            run_inference(Conv(3), load_evalset(tmp_path / "img"), device="cpu")
        assert err.value.layer == "the model's first layer (Conv2d 'conv')"
        assert err.value.expects == "3 channels as [N, C, H, W]"
        assert err.value.got == "float32 [10, 1, 4, 4]"
        assert "list column 'img' reshaped to [1, 4, 4]" in err.value.gives

    def test_a_later_layer_is_named_with_the_batch_that_reached_the_model(
        self, tmp_path: Path
    ) -> None:
        """When an inner layer refuses, the batch is named too, and the model is not acquitted."""
        evalset = features(tmp_path, 4)
        model = nn.Sequential(nn.Linear(4, 5), nn.Linear(6, 2))
        with pytest.raises(InputMismatch) as err:
            run_inference(model, evalset, device="cpu")
        assert err.value.layer == "the model's layer (Linear '1')"
        assert err.value.got == "float32 [40, 5]"
        assert err.value.gives.endswith(", this batch float32 [40, 4]")
        assert "or its layers disagree" in str(err.value)

    def test_float_inputs_to_an_embedding_name_the_token_ids_it_takes(self, tmp_path: Path) -> None:
        """An embedding-first text model on float features: it wants integer token ids."""
        evalset = features(tmp_path, 4)
        model = nn.Sequential(nn.Embedding(100, 2), nn.Flatten(), nn.Linear(8, 2))
        with pytest.raises(InputMismatch) as err:
            run_inference(model, evalset, device="cpu")
        assert err.value.expects == "integer token ids 0..99"

    def test_a_forward_that_raises_for_another_reason_stays_forward_raised(
        self, tmp_path: Path
    ) -> None:
        """Inputs every layer accepts: the failure is the model's own, reported as it raised."""

        class Picky(TinyNet):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                self.body(x)
                raise ValueError("no")

        with pytest.raises(ForwardRaised, match="ValueError: no"):
            run_inference(Picky(features=4, classes=2), features(tmp_path, 4), device="cpu")

    def test_no_diagnosis_runs_when_the_forward_succeeds_and_no_hook_is_left(
        self, tmp_path: Path
    ) -> None:
        """A good model runs once per batch; a refused one keeps no hooks after the diagnosis."""
        evalset = features(tmp_path, 4)
        good = Counting(TinyNet(features=4, classes=2))
        run_inference(good, evalset, device="cpu", batch_size=16)
        assert good.calls == 3  # 40 rows in batches of 16: no extra forward
        bad = TinyNet(features=3, classes=2)
        with pytest.raises(InputMismatch):
            run_inference(bad, evalset, device="cpu")
        assert all(not m._forward_pre_hooks and not m._forward_hooks for m in bad.modules())


class TestOutputs:
    def test_wrong_logit_width_names_the_classes_in_order(self, tmp_path: Path) -> None:
        """Logits of the wrong width: expected [N, C] with the evalset's classes, and what came."""
        evalset = features(tmp_path, 4, name="pairs")
        with pytest.raises(OutputContractViolation) as err:
            run_inference(TinyNet(features=4, classes=3), evalset, device="cpu", batch_size=8)
        assert str(err.value) == (
            "model output breaks the contract: expected float logits of shape [8, 2] (one "
            "column per class of 'pairs', in order: 0, 1), got a float32 tensor of shape [8, 3]"
        )

    def test_many_classes_are_cut_to_the_first_ten_and_counted(self, tmp_path: Path) -> None:
        """A 12-class evalset's expectation lists ten classes and says how many there are."""
        table = pa.table({"a": np.arange(24, dtype=np.float32), "y": np.arange(24) % 12})
        freeze_evalset(
            table,
            tmp_path / "twelve",
            name="twelve",
            task="classification",
            target="y",
            inputs=InputsSpec(columns=["a"]),
        )
        with pytest.raises(OutputContractViolation) as err:
            run_inference(nn.Linear(1, 5), load_evalset(tmp_path / "twelve"), device="cpu")
        assert err.value.expected.endswith(
            "in order: 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, ... (12 in all))"
        )


class Softmaxed(nn.Module):
    """A classifier that ends in a softmax: it returns probabilities, not logits."""

    def __init__(self) -> None:
        super().__init__()
        self.net = TinyNet(features=4, classes=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.net(x), dim=1)


class TestProbabilityOutputs:
    def test_probabilities_where_logits_are_expected_are_refused(self, tmp_path: Path) -> None:
        """Rows that are non-negative and sum to 1 are a softmax's: nll and ECE would be wrong."""
        torch.manual_seed(0)
        evalset = features(tmp_path, 4)
        with pytest.raises(OutputContractViolation) as err:
            run_inference(Softmaxed(), evalset, device="cpu", batch_size=8)
        assert "got probabilities (every row non-negative and summing to 1)" in str(err.value)
        assert "freeze the evalset with --outputs probabilities" in str(err.value)

    def test_an_evalset_frozen_for_probabilities_scores_them_as_the_logits_would_be(
        self, tmp_path: Path
    ) -> None:
        """Declared at freeze, probabilities give the loss and predictions of their logits."""
        torch.manual_seed(0)
        model = Softmaxed().eval()
        rng = np.random.default_rng(4)
        columns = {f"f{i}": rng.normal(size=40).astype(np.float32) for i in range(4)}
        table = pa.table({**columns, "y": np.arange(40) % 2})
        spec = {"task": "classification", "target": "y", "inputs": InputsSpec(columns=[*columns])}
        freeze_evalset(table, tmp_path / "logits", name="logits", **spec)  # type: ignore[arg-type]
        freeze_evalset(
            table,
            tmp_path / "probs",
            name="probs",
            outputs="probabilities",
            **spec,  # type: ignore[arg-type]
        )
        as_probs = run_inference(model, load_evalset(tmp_path / "probs"), device="cpu")
        as_logits = run_inference(model.net, load_evalset(tmp_path / "logits"), device="cpu")
        assert np.array_equal(as_probs.columns["prediction"], as_logits.columns["prediction"])
        assert np.allclose(as_probs.columns["loss"], as_logits.columns["loss"], atol=1e-5)
        with pytest.raises(OutputContractViolation, match="rows that are not probabilities"):
            run_inference(model.net, load_evalset(tmp_path / "probs"), device="cpu")

    def test_outputs_is_part_of_the_identity_and_pinned(self, tmp_path: Path) -> None:
        """Frozen as probabilities, the manifest says so; editing it back is a changed field."""
        from evalsentry.evalsets.evalset import check_manifest
        from evalsentry.evalsets.identity import EvalsetFieldChanged

        features(tmp_path, 4, name="plain")
        rng = np.random.default_rng(4)
        table = pa.table({"f0": rng.normal(size=40).astype(np.float32), "y": np.arange(40) % 2})
        spec = freeze_evalset(
            table,
            tmp_path / "probs",
            name="probs",
            task="classification",
            target="y",
            inputs=InputsSpec(columns=["f0"]),
            outputs="probabilities",
        )
        plain = read_spec(tmp_path / "plain")
        assert "outputs" not in (plain.field_sha256 or {})  # older identities are unchanged
        manifest = tmp_path / "probs" / "evalset.yaml"
        assert yaml.safe_load(manifest.read_text())["outputs"] == "probabilities"
        assert spec.field_sha256 is not None and "outputs" in spec.field_sha256
        edited = yaml.safe_load(manifest.read_text())
        del edited["outputs"]
        manifest.write_text(yaml.safe_dump(edited, sort_keys=False))
        with pytest.raises(EvalsetFieldChanged, match="outputs: changed since freeze"):
            check_manifest(tmp_path / "probs", read_spec(tmp_path / "probs"))
