"""Train the digits CNN and save a lineage-carrying checkpoint.

    python -m examples.digits.train --out checkpoints/digits.pt --seed 1
    python -m examples.digits.train --out bad.pt --corrupt-classes 3,5,8 --corrupt-fraction 0.6

``--corrupt-classes`` relabels a fraction of those classes' training examples at random: a
realistic data bug (a broken labelling batch) that yields a measurably worse model. The labels
it trained on are written beside the checkpoint (``<out>.labels.parquet``) and hashed into its
lineage's ``data_sha``: the data changed, and the lineage says so.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch import nn

import evalsentry
from evalsentry.sections import CostRates
from examples.digits.model import DigitsCNN

DATA = Path(__file__).parent / "data" / "train.parquet"
FACTORY = "examples.digits.model:DigitsCNN"
VALIDATION_FRACTION = 0.1


def load_train(path: Path = DATA) -> tuple[torch.Tensor, torch.Tensor]:
    """Images ``(N, 1, 8, 8)`` float32 and labels ``(N,)`` int64 from the shipped train split."""
    table = pq.read_table(path, columns=["pixels", "label"])
    pixels = table.column("pixels").combine_chunks().flatten().to_numpy()
    images = torch.from_numpy(pixels.reshape(-1, 1, 8, 8).copy())
    return images, torch.from_numpy(table.column("label").to_numpy().copy())


def split(
    rng: np.random.Generator,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Images, labels, and the shuffled indices to fit on and to hold out (10%) for validation."""
    images, labels = load_train()
    order = torch.from_numpy(rng.permutation(len(labels)))
    n_val = int(len(labels) * VALIDATION_FRACTION)
    return images, labels, order[n_val:], order[:n_val]


def validation(model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """``val_accuracy`` and ``val_loss`` of ``model`` (put in eval mode) on the held-out split."""
    model.eval()
    with torch.inference_mode():
        logits = model(images)
        loss = float(nn.functional.cross_entropy(logits, labels))
        return {
            "val_accuracy": float((logits.argmax(1) == labels).float().mean()),
            "val_loss": loss,
        }


def train(
    out: Path,
    *,
    seed: int = 0,
    epochs: int = 20,
    lr: float = 3e-3,
    batch_size: int = 64,
    channels: int = 16,
    corrupt_classes: Sequence[int] = (),
    corrupt_fraction: float = 0.0,
    rates: CostRates | None = None,
) -> Path:
    """Train on the shipped split (holding out 10% for validation) and save a checkpoint.

    ``rates`` price the training run (default: ./evalsentry.yaml's ``cost``).
    """
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    images, labels, fit, val = split(rng)
    fit_labels = labels[fit].clone()
    for cls in corrupt_classes:
        hit = torch.nonzero(fit_labels == cls).flatten()
        chosen = hit[torch.from_numpy(rng.random(len(hit)) < corrupt_fraction)]
        fit_labels[chosen] = torch.from_numpy(rng.integers(0, 10, len(chosen)))
    model = DigitsCNN(channels=channels)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    # The lineage records what training cost: time, energy, carbon, money.
    with evalsentry.track_training(device="cpu", rates=rates) as run:
        for _ in range(epochs):
            model.train()
            for batch in torch.randperm(len(fit)).split(batch_size):
                optimizer.zero_grad()
                loss = loss_fn(model(images[fit][batch]), fit_labels[batch])
                loss.backward()
                optimizer.step()
    config = {
        "epochs": epochs,
        "lr": lr,
        "batch_size": batch_size,
        "optimizer": "adam",
        "corrupt_classes": list(corrupt_classes),
        "corrupt_fraction": corrupt_fraction,
    }
    return evalsentry.save_checkpoint(
        model,
        out,
        metrics=validation(model, images[val], labels[val]),
        config=config,
        seed=seed,
        data=_data_seen(out, fit, fit_labels, labels),
        optimizer=optimizer,
        factory=FACTORY,
        factory_kwargs={"channels": channels},
        training=run,
    )


def _data_seen(
    out: Path, fit: torch.Tensor, fit_labels: torch.Tensor, labels: torch.Tensor
) -> Path | list[Path]:
    """The data the model was trained on, for its lineage's ``data_sha``.

    The shipped split, and where labels were changed in memory, the labels it trained on too
    (written beside the checkpoint): a lineage must not hide a data change.
    """
    if torch.equal(fit_labels, labels[fit]):
        return DATA
    seen = Path(out).with_suffix(".labels.parquet")
    seen.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"row": fit.numpy(), "label": fit_labels.numpy()}), seen)
    return [DATA, seen]


def main(argv: Sequence[str] | None = None) -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--corrupt-classes", default="", help="comma-separated class labels")
    parser.add_argument("--corrupt-fraction", type=float, default=0.0)
    args = parser.parse_args(argv)
    classes = [int(c) for c in args.corrupt_classes.split(",") if c]
    path = train(
        args.out,
        seed=args.seed,
        epochs=args.epochs,
        corrupt_classes=classes,
        corrupt_fraction=args.corrupt_fraction,
    )
    print(f"saved {path}")


if __name__ == "__main__":
    main()
