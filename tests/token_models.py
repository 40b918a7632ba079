"""Tiny real token models the sequence tests build checkpoints from (importable as factories).

Each is causal or masked so that padding never changes a row's result: evaluating rows one by
one, unpadded, must give what the engine's padded, length-sorted batches give.
"""

from __future__ import annotations

import torch
from torch import nn

VOCAB, PAD = 257, 256


class BagLM(nn.Module):
    """Next-token logits from the running mean of the embeddings so far (causal by design)."""

    def __init__(self, vocab: int = VOCAB, dim: int = 16, context: int = 512) -> None:
        super().__init__()
        self.context = context
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(context, dim)
        self.head = nn.Linear(dim, vocab)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``[N, T]`` ids to ``[N, T, vocab]`` logits; position t sees tokens 0..t only."""
        length = input_ids.shape[1]
        if length > self.context:
            raise ValueError(
                f"sequence of {length} tokens; this model reads at most {self.context}"
            )
        hidden = self.tokens(input_ids) + self.positions(torch.arange(length))
        counts = torch.arange(1, length + 1, dtype=hidden.dtype)[None, :, None]
        return self.head(torch.tanh(hidden.cumsum(dim=1) / counts))  # type: ignore[no-any-return]


class OOMAboveLM(BagLM):
    """Raises CUDA out-of-memory for batches of more than ``limit`` rows, as a full GPU would."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """BagLM's logits, or out of memory."""
        if len(input_ids) > self.limit:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return super().forward(input_ids, attention_mask)


class PositionsFirstLM(BagLM):
    """BagLM with its position table declared before its token table, as many models do."""

    def __init__(self, vocab: int = VOCAB, context: int = 512) -> None:
        super().__init__(vocab, context=context)
        tokens = self.tokens
        del self.tokens
        self.tokens = tokens  # registered again: now after ``positions``


class SlowBagLM(BagLM):
    """BagLM's function, computed eight times over: the same logits, slower."""

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """BagLM's logits, the eighth time."""
        for _ in range(7):
            super().forward(input_ids, attention_mask)
        return super().forward(input_ids, attention_mask)


class PooledClassifier(nn.Module):
    """A classifier over token ids (masked mean of embeddings) and a named feature input."""

    def __init__(self, vocab: int = VOCAB, dim: int = 8, classes: int = 2, extra: int = 2) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.features = nn.Linear(extra, dim)
        self.out = nn.Linear(dim, classes)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, extra: torch.Tensor
    ) -> torch.Tensor:
        """Logits ``[N, classes]``; padded positions weigh nothing."""
        mask = attention_mask[..., None].float()
        pooled = (self.tokens(input_ids) * mask).sum(dim=1) / mask.sum(dim=1)
        return self.out(torch.tanh(pooled + self.features(extra)))  # type: ignore[no-any-return]


class NoMaskLM(BagLM):
    """A language model whose forward takes no attention mask."""

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """Logits without a mask."""
        return super().forward(input_ids)


class NeedsSegment(PooledClassifier):
    """A classifier that needs a ``segment`` input no evalset gives."""

    def forward(  # type: ignore[override]
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        extra: torch.Tensor,
        segment: torch.Tensor,
    ) -> torch.Tensor:
        """Never reached: the contract check refuses it first."""
        return super().forward(input_ids, attention_mask, extra) + segment


class LastPositionLM(BagLM):
    """Returns only the last position's logits ``[N, V]``: the wrong shape for scoring tokens."""

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``[N, vocab]``."""
        return super().forward(input_ids, attention_mask)[:, -1]


class LabelNet(nn.Module):
    """A multi-label model: one independent logit per label over feature columns."""

    def __init__(self, features: int = 3, labels: int = 4) -> None:
        super().__init__()
        self.linear = nn.Linear(features, labels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``[N, labels]``."""
        return self.linear(x)  # type: ignore[no-any-return]


class ShiftedLM(BagLM):
    """A language model that also takes a per-row ``shift`` added to every logit of its row."""

    def forward(  # type: ignore[override]
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        shift: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``[N, T, vocab]``; ``shift`` must hold one value per sequence given."""
        logits = super().forward(input_ids, attention_mask)
        if shift is None or shift.shape[0] != input_ids.shape[0]:
            raise ValueError(f"shift {None if shift is None else tuple(shift.shape)} for {input_ids.shape[0]} sequences")  # fmt: skip
        return logits + shift.reshape(-1, 1, 1) * torch.arange(logits.shape[-1]) / logits.shape[-1]
