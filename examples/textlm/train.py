"""Train the byte-level language model and save a lineage-carrying safetensors checkpoint.

    python -m examples.textlm.train --out checkpoints/textlm-v1.safetensors --seed 1
    python -m examples.textlm.train --out bad.safetensors --noise 0.3
    python -m examples.textlm.train --out small.safetensors --small

``--noise`` replaces that fraction of the training bytes with random ones: a realistic data bug
(a broken decoding step upstream) that yields a measurably worse model. ``--small`` trains a
weaker model in a few seconds (for tests).
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
from examples.textlm.data import TOPICS, texts
from examples.textlm.model import TinyCausalLM, encode

FACTORY = "examples.textlm.model:TinyCausalLM"
WINDOW = 256  # the model's whole context, so every position it reads at evaluation is trained
SMALL = {"steps": 120, "batch_size": 8, "dim": 64, "layers": 2}


def training_bytes(noise: float, rng: np.random.Generator) -> torch.Tensor:
    """The training topics as one stream of byte ids, ``noise`` of them replaced at random."""
    stream = np.frombuffer("\n\n".join(texts(held_out=False)).encode("utf-8"), dtype=np.uint8)
    stream = stream.astype(np.int64)
    hit = rng.random(len(stream)) < noise
    stream[hit] = rng.integers(0, 256, int(hit.sum()))
    return torch.from_numpy(stream)


def train(
    out: Path,
    *,
    seed: int = 0,
    steps: int = 450,
    lr: float = 3e-3,
    batch_size: int = 16,
    dim: int = 96,
    layers: int = 3,
    noise: float = 0.0,
    rates: CostRates | None = None,
) -> Path:
    """Train on random windows of the training topics and save a checkpoint.

    ``rates`` price the training run (default: ./evalsentry.yaml's ``cost``).
    """
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    stream = training_bytes(noise, rng)
    architecture = {"dim": dim, "layers": layers, "context": WINDOW}
    model = TinyCausalLM(**architecture)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, lr, total_steps=steps, pct_start=0.1)
    loss_fn = nn.CrossEntropyLoss()
    with evalsentry.track_training(device="cpu", rates=rates) as run:
        model.train()
        for _ in range(steps):
            starts = torch.from_numpy(rng.integers(0, len(stream) - WINDOW - 1, batch_size))
            windows = stream[starts[:, None] + torch.arange(WINDOW + 1)]
            logits = model(input_ids=windows[:, :-1])
            loss = loss_fn(logits.flatten(0, 1), windows[:, 1:].flatten())
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
    model.eval()
    held_out = torch.tensor(encode("\n\n".join(texts(held_out=True)))[: 64 * WINDOW])
    with torch.inference_mode():
        windows = held_out.view(64, WINDOW)
        logits = model(input_ids=windows[:, :-1])
        val_nll = float(loss_fn(logits.flatten(0, 1), windows[:, 1:].flatten()))
    config = {"steps": steps, "lr": lr, "batch_size": batch_size, "window": WINDOW, "noise": noise}
    return evalsentry.save_checkpoint(
        model,
        out,
        metrics={"val_nll": val_nll, "val_perplexity": float(np.exp(val_nll))},
        config=config,
        seed=seed,
        data=TOPICS,
        factory=FACTORY,
        factory_kwargs=architecture,
        training=run,
    )


def main(argv: Sequence[str] | None = None) -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, help="training steps (default: 450, --small: 120)")
    parser.add_argument("--noise", type=float, default=0.0)
    parser.add_argument("--small", action="store_true", help="a weaker model in a few seconds")
    args = parser.parse_args(argv)
    options = dict(SMALL) if args.small else {}
    if args.steps is not None:
        options["steps"] = args.steps
    path = train(args.out, seed=args.seed, noise=args.noise, **options)
    print(f"saved {path}")


if __name__ == "__main__":
    main()
