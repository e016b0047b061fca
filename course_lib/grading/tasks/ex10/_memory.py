"""The memory rule of ex10's tiled tasks, forward and backward, and their random inputs.

In the cases where keys come in several blocks, no tensor the learner's code creates may hold
more than batch x n_q x block_size numbers, one column of tiles (or the size of an input, when
that is larger), and those alive at once may not hold more than ALIVE times that together.
The course's own `tiled_attention` also splits the queries into blocks (128 x 128 tiles); a
column of tiles, all queries against one block of keys, is the simpler loop the exercise asks
for, and its memory also grows linearly with n.
"""

from __future__ import annotations

import weakref

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from ...core import Case, GradingError
from ..common import randn

MEMORY_HINT = (
    "your code builds a tensor as large as the full matrix of scores, which the "
    "tiles exist to avoid: compute the scores of one block of keys at a time (block_size "
    "keys, the argument you were given), and with "
    "causal=True that block's mask too, from the positions of its keys (a full (n, n) mask "
    "is as large as the scores). Slice the keys on their own axis, k[..., start : start + "
    "block_size, :]: with batch dimensions in front, k[:, start : ...] slices another axis"
)

# In the cases whose keys span at least 2 x ALIVE blocks, the tensors alive at once may hold
# ALIVE rows of tiles: a loop over key tiles keeps a few alive at a time, a list keeps them all.
# Besides, COPIES times the inputs: copies that grow with n, not n^2 (a cast to float64 and
# back, dk and dv built from a list of blocks, then cat).
ALIVE, COPIES = 8, 6


class MemoryLimit(TorchFunctionMode):
    """Raises GradingError as soon as a torch call returns a tensor whose storage holds more
    than `limit` elements (views of a smaller storage, e.g. expand, do not count), or when the
    tensors it created that are still alive hold more than `alive` together (every tile kept in
    a list is the full matrix again, one piece at a time)."""

    def __init__(self, limit: int, alive: int | None = None):
        super().__init__()
        self.limit, self.alive_limit = limit, alive
        self.alive: dict[int, list[int]] = {}  # storage address -> [numbers, live tensors]
        self.total = 0

    def _release(self, address: int) -> None:
        entry = self.alive.get(address)
        if entry is not None:
            entry[1] -= 1
            if entry[1] == 0:
                self.total -= entry[0]
                del self.alive[address]

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor) and leaf.element_size():
                storage = leaf.untyped_storage()
                stored = storage.nbytes() // leaf.element_size()
                if stored > self.limit:
                    raise GradingError(
                        f"{MEMORY_HINT} (a tensor of shape {tuple(leaf.shape)} appeared; the "
                        f"limit here is {self.limit:,} numbers, one column of tiles)"
                    )
                address = storage.data_ptr()
                if address not in self.alive:
                    self.alive[address] = [stored, 0]
                    self.total += stored
                self.alive[address][1] += 1
                weakref.finalize(leaf, self._release, address)
                if self.alive_limit is not None and self.total > self.alive_limit:
                    raise GradingError(
                        "your code keeps every tile of scores alive at once (in a list, say), "
                        "which stores the full matrix again, piece by piece: tensors of "
                        f"{self.total:,} numbers were alive together, more than "
                        f"{self.alive_limit:,} ({ALIVE} columns of tiles and a few copies of the "
                        "inputs); fold each tile into the running maximum, sum and output, then "
                        "let it go"
                    )
        return out


def draw_qkv(gen, shape_q, shape_k, d_v, dtype=torch.float32, scale=1.0):
    """q and k of these shapes times `scale`, v of k's shape but its last, d_v (unscaled)."""
    q = randn(gen, *shape_q, dtype=dtype, scale=scale)
    k = randn(gen, *shape_k, dtype=dtype, scale=scale)
    return q, k, randn(gen, *shape_k[:-1], d_v, dtype=dtype)


def limited_case(description, args, block_size, causal=False, raises=None):
    """A Case (args starting with q, k, v) whose run is under the memory rule when its keys
    come in several blocks."""
    q, k, v = args[:3]
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]).numel()
    n_q, n_k = q.shape[-2], k.shape[-2]
    limit = alive = None
    if raises is None and n_k > block_size:
        # one column of tiles, (n_q, block_size) per batch entry, or the size of an input
        row = batch * n_q * max(block_size, q.shape[-1], v.shape[-1])
        limit = max(row, *(batch * t.shape[-2] * t.shape[-1] for t in (q, k, v)))
        if n_k >= 2 * ALIVE * block_size:
            alive = ALIVE * row + COPIES * sum(t.numel() for t in args)
    kwargs = {"block_size": block_size, "causal": causal}
    return Case(description, args, kwargs, data={"limit": limit, "alive": alive}, raises=raises)


def call_limited(obj, case):
    if case.data.get("limit") is None:
        return obj(*case.args, **case.kwargs)
    with MemoryLimit(case.data["limit"], case.data.get("alive")):
        return obj(*case.args, **case.kwargs)
