"""A small estate for the binding tests: two evalsets of different widths, a model for each."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from evalsentry.checkpoints.checkpoint import save_checkpoint
from evalsentry.checkpoints.registry import Registry
from evalsentry.evalsets.evalset import InputsSpec
from evalsentry.evalsets.freeze import freeze_evalset
from tests.models import TRUST, TRUSTED_YAML, TinyNet

#: Evalset name -> number of feature columns; the model of the same name reads that many.
WIDTHS = {"narrow": 4, "wide": 6}
ROWS = 60


def freeze(folder: Path, name: str, width: int) -> None:
    """A 3-class evalset of ``width`` float features labelled by the model of that width."""
    rng = np.random.default_rng(width)
    features = rng.normal(size=(ROWS, width)).astype(np.float32)
    with torch.no_grad():
        labels = model(width)(torch.from_numpy(features)).argmax(1).numpy()
    labels[:3] = [0, 1, 2]  # every class has an example
    table = pa.table(
        {
            "x": pa.FixedSizeListArray.from_arrays(pa.array(features.reshape(-1)), width),
            "label": labels.astype(np.int64),
        }
    )
    freeze_evalset(
        table,
        folder / name,
        name=name,
        task="classification",
        target="label",
        inputs=InputsSpec(column="x", shape=[width]),
        classes=[0, 1, 2],
    )


def model(width: int) -> TinyNet:
    """The same network for a width, every time."""
    torch.manual_seed(width)
    return TinyNet(features=width, classes=3, hidden=8)


def estate(root: Path, models_yaml: str = "", *, train_data: Path) -> Path:
    """A project with both evalsets and both models in production; returns its config file."""
    for name, width in WIDTHS.items():
        freeze(root / "evalsets", name, width)
        checkpoint = save_checkpoint(
            model(width),
            root / "checkpoints" / f"{name}.pt",
            metrics={},
            config={"width": width},
            seed=width,
            data=train_data,
            factory="tests.models:TinyNet",
            factory_kwargs={"features": width, "classes": 3, "hidden": 8},
        )
        Registry(str(root / "registry")).register(checkpoint, name, stage="production", trust=TRUST)
    config = root / "evalsentry.yaml"
    config.write_text(
        "store: store\nregistry: registry\nevalsets: evalsets\n" + TRUSTED_YAML + models_yaml
    )
    return config


BOUND = "models:\n  narrow: {evalsets: [narrow]}\n  wide: {evalsets: [wide]}\n"
