"""Freeze a held-out split as an evalset, train a TabularNet on the rest, save a checkpoint.

    python -m examples.tabular.train --dataset wine --out checkpoints/wine.pt
    python -m examples.tabular.train --dataset cancer --out checkpoints/cancer.pt --seed 1

The first run freezes the held-out rows (stratified, ``--holdout`` of each class) into
``evalsets/<dataset>`` of the project's evalsentry.yaml; later runs train on every row that
evalset does not hold, so no evaluation row is ever trained on. Rows keep their line number in
the CSV (``row``) as the evalset's id. A copy of this script and of model.py in your own
repository works the same way: pass ``--factory your_module:TabularNet``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch
from torch import nn

import evalsentry
from evalsentry.config import load_config
from evalsentry.errors import EvalsentryError, UsageError
from evalsentry.evalsets.evalset import InputsSpec
from evalsentry.sections import CostRates

HERE = Path(__file__).resolve().parent
ID_COLUMN = "row"
FACTORY = "examples.tabular.model:TabularNet"
VALIDATION_FRACTION = 0.15


@dataclass(frozen=True)
class Dataset:
    """One shipped CSV: its target column and what it is."""

    file: str
    target: str
    description: str


DATASETS = {
    "wine": Dataset(
        "wine.csv",
        "cultivar",
        "UCI Wine: 13 chemical measurements of wines from three cultivars (1, 2, 3)",
    ),
    "cancer": Dataset(
        "cancer.csv",
        "diagnosis",
        "UCI Breast Cancer Wisconsin (Diagnostic): 30 cell-nucleus features, malignant or benign",
    ),
}
PROVENANCE = "UCI Machine Learning Repository, via the copy bundled with scikit-learn"
LICENSE = "CC BY 4.0"


def read_rows(path: Path) -> pa.Table:
    """The CSV's rows with a ``row`` id column: the row's position in the file."""
    import pyarrow.csv as pcsv

    if not path.is_file():
        raise UsageError(f"{path}: data file not found; pass --data with the dataset's CSV")
    table = pcsv.read_csv(path)
    return table.add_column(0, ID_COLUMN, pa.array(np.arange(len(table), dtype=np.int64)))


def holdout_rows(labels: Sequence[Any], fraction: float, seed: int) -> np.ndarray:
    """Row positions held out for evaluation: ``fraction`` of each class, chosen by ``seed``."""
    rng = np.random.default_rng(seed)
    values = np.asarray(labels, dtype=object)
    chosen = []
    for label in sorted(set(labels), key=str):
        rows = np.flatnonzero(values == label)
        chosen.append(rng.permutation(rows)[: max(1, round(len(rows) * fraction))])
    return np.sort(np.concatenate(chosen))


def frozen_evalset(
    table: pa.Table,
    dataset: Dataset,
    source: Path,
    name: str,
    evalsets_dir: str,
    fraction: float,
    seed: int,
) -> tuple[set[int], list[Any]]:
    """Freeze the held-out split unless it is frozen already; its row ids and class list."""
    features = [c for c in table.column_names if c not in (ID_COLUMN, dataset.target)]
    folder = Path(evalsets_dir) / name
    if not folder.exists():
        held = holdout_rows(table.column(dataset.target).to_pylist(), fraction, seed)
        spec = evalsentry.freeze_evalset(
            table.take(pa.array(held)),
            folder,
            name=name,
            task="classification",
            target=dataset.target,
            inputs=InputsSpec(columns=features),
            id_column=ID_COLUMN,
            description=f"{dataset.description}; a {fraction:.0%} held-out split",
            provenance=PROVENANCE,
            license=LICENSE,
            source=str(source),
        )
        print(f"froze {spec.name} v{spec.version}: {spec.num_rows} rows -> {folder}")
    evalset = evalsentry.load_evalset(folder)  # verified against its manifest
    spec = evalset.spec
    if (spec.target, spec.id_column, spec.inputs.columns) != (dataset.target, ID_COLUMN, features):
        raise UsageError(
            f"{folder}: evalset {name!r} was not frozen by this script from {dataset.file} "
            f"(target {spec.target!r}, id {spec.id_column!r}); pass --evalset with another name"
        )
    return {int(i) for i in evalset.ids}, list(spec.classes or [])


def model_class(factory: str) -> Any:
    """The class ``module:Class`` names, imported as training code imports its own model."""
    module, _, attr = factory.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise UsageError(
            f"--factory {factory}: cannot import it ({exc}); run from the folder that holds "
            "the module (python -m examples.tabular.train from the repository root)"
        ) from None


def train(
    data: Path,
    dataset: Dataset,
    out: Path,
    *,
    evalset: str,
    evalsets_dir: str,
    factory: str = FACTORY,
    holdout: float = 0.3,
    split_seed: int = 0,
    seed: int = 0,
    epochs: int = 150,
    lr: float = 1e-2,
    hidden: int = 32,
    rates: CostRates | None = None,
) -> Path:
    """Freeze (once) the held-out split, fit on the other rows, save a lineage-carrying checkpoint.

    ``rates`` price the training run (default: ./evalsentry.yaml's ``cost``).
    """
    build = model_class(factory)  # before anything is frozen or trained
    table = read_rows(data)
    held, classes = frozen_evalset(table, dataset, data, evalset, evalsets_dir, holdout, split_seed)
    features = [c for c in table.column_names if c not in (ID_COLUMN, dataset.target)]
    index = {label: i for i, label in enumerate(classes)}
    rows = [i for i in table.column(ID_COLUMN).to_pylist() if i not in held]
    part = table.take(pa.array(rows))
    x = torch.from_numpy(
        np.stack([part.column(c).to_numpy() for c in features], axis=1).astype(np.float32)
    )
    y = torch.as_tensor([index[v] for v in part.column(dataset.target).to_pylist()])

    torch.manual_seed(seed)
    order = torch.randperm(len(y))
    n_val = max(1, int(len(y) * VALIDATION_FRACTION))
    val, fit = order[:n_val], order[n_val:]
    kwargs = {"features": len(features), "classes": len(classes), "hidden": hidden}
    model = build(**kwargs)
    model.fit_scaling(x[fit])
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    # The lineage records what training cost: time, energy, carbon, money.
    with evalsentry.track_training(device="cpu", rates=rates) as run:
        for _ in range(epochs):  # full batch: a few hundred rows
            model.train()
            optimizer.zero_grad()
            loss_fn(model(x[fit]), y[fit]).backward()
            optimizer.step()
    model.eval()
    with torch.inference_mode():
        logits = model(x[val])
        metrics = {
            "val_accuracy": float((logits.argmax(1) == y[val]).float().mean()),
            "val_loss": float(loss_fn(logits, y[val])),
        }
    return evalsentry.save_checkpoint(
        model,
        out,
        metrics=metrics,
        config={
            "dataset": dataset.file,
            "evalset": evalset,
            "epochs": epochs,
            "lr": lr,
            "optimizer": "adam",
            "holdout": holdout,
            "split_seed": split_seed,
        },
        seed=seed,
        data=data,
        optimizer=optimizer,
        factory=factory,
        factory_kwargs=kwargs,
        training=run,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; 0 when saved, 2 on unusable input (one line on stderr)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dataset", choices=sorted(DATASETS), required=True)
    parser.add_argument("--out", type=Path, required=True, help="checkpoint file to write")
    parser.add_argument("--data", type=Path, help="the dataset's CSV (default: the shipped one)")
    parser.add_argument("--evalset", help="evalset name (default: the dataset's name)")
    parser.add_argument("--config", type=Path, help="evalsentry.yaml (default: ./evalsentry.yaml)")
    parser.add_argument("--factory", default=FACTORY, help="module:Class that builds the model")
    parser.add_argument("--holdout", type=float, default=0.3, help="share of each class to freeze")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=150)
    parser.add_argument("--hidden", type=int, default=32)
    args = parser.parse_args(argv)
    dataset = DATASETS[args.dataset]
    if not 0 < args.holdout < 1:
        parser.error("--holdout: a share between 0 and 1, such as 0.3")
    try:
        config = load_config(args.config)
        path = train(
            args.data or HERE / dataset.file,
            dataset,
            args.out,
            evalset=args.evalset or args.dataset,
            evalsets_dir=config.evalsets_dir,
            factory=args.factory,
            holdout=args.holdout,
            seed=args.seed,
            epochs=args.epochs,
            hidden=args.hidden,
            rates=config.cost,
        )
    except EvalsentryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
