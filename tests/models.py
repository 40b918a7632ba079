"""Tiny real torch models the tests build checkpoints from (importable as factories)."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from evalsentry.trust import Trust

#: What the test projects trust: the model classes of this module (and of the inference tests),
#: and this module's two function factories, which a module entry alone does not admit.
TRUSTED_FACTORIES = (
    "tests.models",
    "tests.models:tiny_net",
    "tests.models:exploding_factory",
    "tests.unit.evaluation.test_inference",
    "tests.token_models",
)
TRUST = Trust(TRUSTED_FACTORIES)
#: The same, as a line of evalsentry.yaml.
TRUSTED_YAML = f"trusted_factories: [{', '.join(TRUSTED_FACTORIES)}]\n"


class TinyNet(nn.Module):
    """A two-layer classifier over flat feature vectors."""

    def __init__(self, features: int = 4, classes: int = 3, hidden: int = 8) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x.flatten(1))


def tiny_net(features: int = 4, classes: int = 3) -> TinyNet:
    """A function factory, as opposed to a class factory."""
    return TinyNet(features=features, classes=classes)


class NotAModule:
    """A callable that builds something that is not a model."""


class Marker:
    """Pickles to a call that would create a file: what a malicious checkpoint does."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str]]:
        import os

        return (os.system, (f"touch {self.path}",))


# Broken models: each builds and loads like TinyNet (same weights), then fails in its forward.


class RaisingNet(TinyNet):
    """A forward that raises."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("boom: this forward is broken")


class FlatNet(TinyNet):
    """A 1-D output (one score per example) where a classifier's logits are due."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x.flatten(1))[:, 0]


class TupleNet(TinyNet):
    """A tuple (logits, features) where a tensor is due."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        return self.body(x.flatten(1)), x.flatten(1)


class SlowNet(TinyNet):
    """TinyNet's function, computed four times over: the same predictions, slower."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(3):
            self.body(x.flatten(1))
        return self.body(x.flatten(1))


class SleepingNet(TinyNet):
    """A forward that never returns."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import time

        time.sleep(10**6)
        return self.body(x.flatten(1))


class StuckInC(TinyNet):
    """A forward stuck in C code that holds the GIL: a catastrophically backtracking regex."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import re

        re.match(r"(a*)*b", "a" * 64)  # exponential in C, never releases the GIL
        return self.body(x.flatten(1))


class CrashingNet(TinyNet):
    """A forward that kills its own process, as a segfault in an extension would."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import os
        import signal

        os.kill(os.getpid(), signal.SIGSEGV)
        return self.body(x.flatten(1))


class MarkerNet(TinyNet):
    """Builds like TinyNet, and creates the file ``marker`` names: proof that it was built."""

    def __init__(self, marker: str = "", features: int = 4, classes: int = 3, hidden: int = 8):
        super().__init__(features=features, classes=classes, hidden=hidden)
        if marker:
            Path(marker).touch()


class HangsOnLiveData(TinyNet):
    """TinyNet on the frozen evalset; never returns on inputs far outside it (the live sample)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool(x.abs().max() > 100):
            import time

            time.sleep(10**6)
        return self.body(x.flatten(1))


class MutatingNet(TinyNet):
    """Scales its input in place before using it (``x.div_(16)``), as careless code might."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.div_(16)
        return self.body(x.flatten(1))


def exploding_factory(features: int = 4, classes: int = 3, hidden: int = 8) -> TinyNet:
    """A factory that raises while building the model."""
    raise ValueError(f"cannot build a {features}x{hidden}x{classes} net today")


class TiedNet(TinyNet):
    """A classifier whose last layer shares its weight with a second name (tied weights)."""

    def __init__(self, features: int = 4, classes: int = 3, hidden: int = 8) -> None:
        super().__init__(features, classes, hidden)
        self.tied = nn.Linear(hidden, classes, bias=False)
        self.tied.weight = self.body[2].weight  # type: ignore[index]


def retrained_checkpoints(
    folder: Path, count: int, data: Path, **factory_kwargs: int
) -> list[Path]:
    """``count`` checkpoints of one TinyNet line (seeds 0, 1, ...): each file other weights."""
    from evalsentry.checkpoints.checkpoint import save_checkpoint

    paths = []
    for seed in range(count):
        torch.manual_seed(seed)
        paths.append(
            save_checkpoint(
                TinyNet(**factory_kwargs),
                folder / f"{seed}.pt",
                metrics={},
                config={"seed": seed},
                seed=seed,
                data=data,
                factory_kwargs=factory_kwargs or None,
            )
        )
    return paths
