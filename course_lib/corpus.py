"""The Shakespeare corpus of lesson 09, and batches of random windows of a long text.

    load_shakespeare()     about 1.1 million characters of nine plays (dialogue only), shipped
                           compressed in course_lib/data (see SHAKESPEARE_PROVENANCE.md)
    train_val_split(ids)   the first 90 % for training, the last 10 % for validation (by
                           position, so no validation sentence leaks into training)
    random_windows(...)    a batch of windows at random positions: inputs x and targets y,
                           y = x shifted left by one (the next character at every position)

Nothing downloads: the corpus is read from the package with importlib.resources.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from importlib import resources

import torch
from torch import Tensor

from .validation import check_positive_int, check_tensor

__all__ = ["load_shakespeare", "train_val_split", "random_windows", "window_batches"]

_CORPUS = "shakespeare.txt.gz"


def load_shakespeare() -> str:
    """The lesson's corpus as one string (about 1.1 MB, 72 distinct characters)."""
    data = (resources.files("course_lib") / "data" / _CORPUS).read_bytes()
    return gzip.decompress(data).decode("utf-8")


def train_val_split(ids: Tensor, val_fraction: float = 0.1) -> tuple[Tensor, Tensor]:
    """ids (n,) -> (train (n - n_val,), val (n_val,)) with n_val = round(n * val_fraction).

    The split is by position: validation is the END of the text, never a random sample of
    windows that would overlap the training text.
    """
    check_tensor(ids, "ids", ndim=1, shape_hint="(n,)")
    if (
        isinstance(val_fraction, bool)
        or not isinstance(val_fraction, float)
        or not 0.0 < val_fraction < 1.0
    ):
        raise ValueError(f"val_fraction must be a float in (0, 1), got {val_fraction!r}")
    n_val = round(len(ids) * val_fraction)
    if n_val < 2 or len(ids) - n_val < 2:
        raise ValueError(
            f"ids has {len(ids)} tokens: too few to split into two parts with at "
            "least two tokens each"
        )
    return ids[: len(ids) - n_val], ids[len(ids) - n_val :]


def random_windows(
    ids: Tensor, block_size: int, batch_size: int, generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor]:
    """ids (n,) -> (x, y), both long (batch_size, block_size), from random start positions.

    y[b, i] = ids[start_b + i + 1] is the character that follows x[b, i] = ids[start_b + i]:
    one window gives block_size predictions, each with its own amount of context.
    """
    check_tensor(ids, "ids", ndim=1, shape_hint="(n,)", dtype=(torch.int64, torch.int32))
    check_positive_int(block_size, "block_size")
    check_positive_int(batch_size, "batch_size")
    if len(ids) < block_size + 1:
        raise ValueError(
            f"ids has {len(ids)} tokens, fewer than block_size + 1 = "
            f"{block_size + 1}: no window fits"
        )
    # Draw on the generator's own device (a CUDA generator cannot draw CPU numbers, nor the
    # reverse), then move the start positions to where the text is.
    draw_on = generator.device if generator is not None else torch.device("cpu")
    starts = torch.randint(
        len(ids) - block_size, (batch_size,), generator=generator, device=draw_on
    ).to(ids.device)  # (batch,)
    offsets = torch.arange(block_size + 1, device=ids.device)  # (block_size + 1,)
    windows = ids[starts[:, None] + offsets].long()  # (batch, block_size + 1)
    return windows[:, :-1], windows[:, 1:]  # x, y: (batch, block_size)


def window_batches(
    ids: Tensor, block_size: int, batch_size: int, generator: torch.Generator | None = None
) -> Iterator[tuple[Tensor, Tensor]]:
    """An endless stream of `random_windows` batches (for `course_lib.train.train`)."""
    check_tensor(ids, "ids", ndim=1, shape_hint="(n,)", dtype=(torch.int64, torch.int32))
    check_positive_int(block_size, "block_size")
    check_positive_int(batch_size, "batch_size")

    def stream() -> Iterator[tuple[Tensor, Tensor]]:
        while True:
            yield random_windows(ids, block_size, batch_size, generator)

    return stream()
