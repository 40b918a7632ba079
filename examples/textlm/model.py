"""A small causal transformer over bytes: the language model of the text example.

Text is encoded as UTF-8 bytes (ids 0..255); id 256 pads. The model takes keyword inputs, as
sequence models do (``model(input_ids=..., attention_mask=...)``), and returns next-token
logits ``(N, T, 257)``.
"""

from __future__ import annotations

import torch
from torch import nn

PAD_ID = 256
VOCAB = 257
RECENT = 4  # bytes the convolution under the first block reads: the current one and three before


def encode(text: str) -> list[int]:
    """The token ids of ``text``: its UTF-8 bytes."""
    return list(text.encode("utf-8"))


def decode(ids: list[int]) -> str:
    """The text of token ids (padding dropped)."""
    return bytes(i for i in ids if i < PAD_ID).decode("utf-8", errors="replace")


class TinyCausalLM(nn.Module):
    """Embeddings, ``layers`` pre-norm transformer blocks with a causal mask, a tied head.

    About 340k parameters at the defaults; a minute of training on a CPU makes it a fair
    model of English prose and Python's documentation.
    """

    def __init__(self, dim: int = 96, layers: int = 3, heads: int = 4, context: int = 256) -> None:
        super().__init__()
        self.context = context
        self.tokens = nn.Embedding(VOCAB, dim, padding_idx=PAD_ID)
        self.positions = nn.Embedding(context, dim)
        self.recent = nn.Conv1d(dim, dim, RECENT)
        block = nn.TransformerEncoderLayer(
            dim, heads, 4 * dim, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, VOCAB, bias=False)
        # The head is not tied to the token embeddings: tied, a model this small spends its
        # minute of training at bigram-level loss (perplexity ~12); untied, it reaches ~4.
        for table in (self.tokens, self.positions):
            nn.init.normal_(table.weight, std=0.02)
        with torch.no_grad():
            self.tokens.weight[PAD_ID].zero_()

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Next-token logits ``(N, T, VOCAB)`` for ids ``(N, T)``; padded positions are masked."""
        length = input_ids.shape[1]
        if length > self.context:
            raise ValueError(
                f"sequence of {length} tokens; this model reads at most {self.context}"
            )
        positions = torch.arange(length, device=input_ids.device)
        hidden = self.tokens(input_ids)
        recent = self.recent(nn.functional.pad(hidden.transpose(1, 2), (RECENT - 1, 0)))
        hidden = hidden + recent.transpose(1, 2) + self.positions(positions)
        causal = torch.ones(length, length, dtype=torch.bool, device=input_ids.device).triu(1)
        padding = None if attention_mask is None else attention_mask == 0
        hidden = self.blocks(hidden, mask=causal, src_key_padding_mask=padding, is_causal=True)
        return self.head(self.norm(hidden))
