"""What ex05's tasks share: the lesson's name, padded ids for the mask cases, and the hint for
a mask of another dtype than bool."""

from __future__ import annotations

import torch

LESSON = "lesson 05"


def padded_ids(gen, lengths: list[int], seq: int, pad_id: int, dtype=torch.int64) -> torch.Tensor:
    """(batch, seq) ids: random real ids (never pad_id) followed by padding."""
    ids = torch.randint(0, 20, (len(lengths), seq), generator=gen, dtype=dtype)
    ids[ids == pad_id] = pad_id + 1
    for row, length in enumerate(lengths):
        ids[row, length:] = pad_id
    return ids


def _not_bool(self, got, want, case):
    """The hint for a mask of another dtype than the listed ones (uint8, int32, float64...)."""
    if isinstance(got, torch.Tensor) and got.dtype != torch.bool:
        return (
            f"a mask is a bool tensor (True = may attend), not {str(got.dtype)[6:]}: build it "
            "from a comparison (ids != pad_id, j <= i) or with dtype=torch.bool"
        )
    return None
