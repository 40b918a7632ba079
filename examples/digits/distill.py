"""Distil the digits CNN into a smaller student, whose lineage names its teacher.

    python -m examples.digits.distill --teacher checkpoints/digits.pt --out student.pt
    python -m examples.digits.distill --teacher checkpoints/digits.pt --out damaged.pt --round-bits 2

The student is the same architecture, narrower (``--channels 8 --hidden 32`` by default: about a
fifth of the teacher's parameters), trained on the teacher's softened outputs (temperature 2)
and the true labels, on the shipped training split less the 10% ``--seed`` holds out (the
teacher's own split when the seeds agree, as ``train.py`` draws it). Its lineage records the teacher's
sha256 (``lineage.teacher``), so ``evalsentry evaluate --version N`` of a registered student
weighs its quality and its cost against the teacher's registered version, as for a serving
variant.

``--round-bits B`` then rounds every weight tensor to ``2**B`` evenly spaced levels between its
own minimum and maximum: the naive low-bit quantization a hurried team might ship. It is just as
cheap to serve as the honest student, and the gate is there to say it is not as good.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

import evalsentry
from evalsentry.sections import CostRates
from examples.digits.model import DigitsCNN
from examples.digits.train import DATA, FACTORY, split, validation

TEMPERATURE = 2.0
SOFT_WEIGHT = 0.7  # the share of the loss on the teacher's outputs; the rest on the labels


def distill(
    teacher: Path,
    out: Path,
    *,
    seed: int = 0,
    epochs: int = 60,
    lr: float = 3e-3,
    batch_size: int = 64,
    channels: int = 8,
    hidden: int = 32,
    round_bits: int | None = None,
    rates: CostRates | None = None,
) -> Path:
    """Train a ``channels``/``hidden`` student of the checkpoint ``teacher`` and save it."""
    torch.manual_seed(seed)
    images, labels, fit, val = split(np.random.default_rng(seed))  # train.py's draw for seed
    loaded = evalsentry.load_checkpoint(
        teacher, trust=evalsentry.Trust([FACTORY.partition(":")[0]])
    )
    with torch.inference_mode():
        soft = nn.functional.log_softmax(loaded.model(images[fit]) / TEMPERATURE, dim=1)
    student = DigitsCNN(channels=channels, hidden=hidden)
    optimizer = torch.optim.Adam(student.parameters(), lr=lr)
    with evalsentry.track_training(device="cpu", rates=rates) as run:
        for _ in range(epochs):
            student.train()
            for batch in torch.randperm(len(fit)).split(batch_size):
                optimizer.zero_grad()
                logits = student(images[fit][batch])
                loss = _loss(logits, soft[batch], labels[fit][batch])
                loss.backward()
                optimizer.step()
    if round_bits is not None:
        _round_naively(student, round_bits)
    config = {
        "epochs": epochs,
        "lr": lr,
        "batch_size": batch_size,
        "optimizer": "adam",
        "distillation": {"temperature": TEMPERATURE, "soft_weight": SOFT_WEIGHT},
        "round_bits": round_bits,
    }
    return evalsentry.save_checkpoint(
        student,
        out,
        metrics=validation(student, images[val], labels[val]),
        config=config,
        seed=seed,
        data=DATA,
        factory=FACTORY,
        factory_kwargs={"channels": channels, "hidden": hidden},
        training=run,
        teacher=teacher,
    )


def _loss(logits: torch.Tensor, soft: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Hinton's distillation loss: KL to the teacher at the temperature (times T^2), plus CE."""
    log_p = nn.functional.log_softmax(logits / TEMPERATURE, dim=1)
    kl = nn.functional.kl_div(log_p, soft, log_target=True, reduction="batchmean")
    hard = nn.functional.cross_entropy(logits, labels)
    return SOFT_WEIGHT * TEMPERATURE**2 * kl + (1 - SOFT_WEIGHT) * hard


def _round_naively(model: nn.Module, bits: int) -> None:
    """Every parameter rounded to ``2**bits`` levels evenly spaced over its own range."""
    steps = 2**bits - 1
    with torch.no_grad():
        for weight in model.parameters():
            low, high = weight.min(), weight.max()
            scale = (high - low).clamp_min(1e-12) / steps
            weight.copy_(torch.round((weight - low) / scale) * scale + low)


def main(argv: Sequence[str] | None = None) -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--channels", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--round-bits", type=int, default=None, help="damage: 2**B levels")
    args = parser.parse_args(argv)
    if args.round_bits is not None and args.round_bits < 1:
        parser.error(f"--round-bits {args.round_bits}: give at least 1 (2 levels)")
    path = distill(
        args.teacher,
        args.out,
        seed=args.seed,
        epochs=args.epochs,
        channels=args.channels,
        hidden=args.hidden,
        round_bits=args.round_bits,
    )
    print(f"saved {path}")


if __name__ == "__main__":
    main()
