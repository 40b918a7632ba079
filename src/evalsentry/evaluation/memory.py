"""What inference does when CUDA runs out of memory: retry the batch at half the size."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def halved(batch_size: int, done: int, on_cuda: bool) -> int:
    """The batch size to retry with after CUDA ran out of memory at example ``done``.

    Logged (the run's log says why it slowed down); the CUDA cache is emptied so the retry sees
    the memory the failed batch held.
    """
    import torch

    batch_size = max(1, batch_size // 2)
    log.warning("CUDA out of memory at example %d; retrying with batch size %d", done, batch_size)
    if on_cuda:
        torch.cuda.empty_cache()
    return batch_size
