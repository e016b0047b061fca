"""ex10, the family and the cost: tiled attention, the sliding-window mask, BERT's masking,
image patches.

`tiled_attention` runs under a memory check: in the cases where keys come in several blocks,
no tensor the learner's code creates may hold more than batch x n_q x block_size numbers,
one row of tiles (or the size of an input, when that is larger), and those alive at once may
not hold more than 8 times that together. The full (n_q, n_k) matrix of scores breaks the
first limit, and so do the scores of all keys for a block of queries when n_q is small; a
list of every tile breaks the second. At the check's longest length the full matrix is what
would not fit the grader's memory.

`mlm_mask` is random, so its check is statistical (as for ex09.sample_next): one call on about
200,000 positions with a seeded generator, and the proportions (chosen, <mask>, random,
unchanged, by position) compared with BERT's within a few standard errors; never a padding
position; the labels exactly the original ids at the chosen positions and -100 elsewhere.
"""

from __future__ import annotations

import math
import weakref

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from ..core import Case, GradingError, Task, register
from .common import randn

LESSON = "lesson 10"
MEMORY_HINT = (
    "your code builds a tensor as large as the full matrix of scores, which the "
    "tiles exist to avoid: compute the scores of one block of keys at a time, and with "
    "causal=True that block's mask too, from the positions of its keys (a full (n, n) mask "
    "is as large as the scores)"
)


# --------------------------------------------------------------------------------------------
# tiled_attention
# --------------------------------------------------------------------------------------------


# In the cases whose keys span at least 2 x ALIVE blocks, the tensors alive at once may hold
# ALIVE rows of tiles: a loop over key tiles keeps a few alive at a time, a list keeps them all.
ALIVE = 8


class _MemoryLimit(TorchFunctionMode):
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
                        f"limit here is {self.limit:,} numbers, one row of tiles)"
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
                        f"{self.total:,} numbers were alive together, more than {ALIVE} rows of "
                        f"tiles ({self.limit:,} numbers each); fold each tile into the running "
                        "maximum, sum and output, then let it go"
                    )
        return out


def _tiled_case(description, q, k, v, block_size, causal=False, raises=None):
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]).numel()
    n_q, n_k = q.shape[-2], k.shape[-2]
    limit = alive = None
    if raises is None and n_k > block_size:
        # one row of tiles, (n_q, block_size) per batch entry, or the size of an input
        row = batch * n_q * max(block_size, q.shape[-1], v.shape[-1])
        limit = max(row, *(batch * t.shape[-2] * t.shape[-1] for t in (q, k, v)))
        if n_k >= 2 * ALIVE * block_size:
            alive = ALIVE * limit
    return Case(
        description,
        (q, k, v),
        {"block_size": block_size, "causal": causal},
        data={"limit": limit, "alive": alive},
        raises=raises,
    )


def _tiles(
    q,
    k,
    v,
    block_size,
    causal,
    rescale_sum=True,
    rescale_out=True,
    subtract_max=True,
    scale=True,
    diagonal=True,
    buffer_dtype=None,
    mask_per_tile=True,
    partial_last=True,
):
    """The textbook loop over key blocks; the mistakes below switch one piece of it off."""
    buffer_dtype = q.dtype if buffer_dtype is None else buffer_dtype
    n_q, n_k = q.shape[-2], k.shape[-2]
    if scale:
        q = q / math.sqrt(q.shape[-1])
    shape = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    m = torch.full((*shape, n_q, 1), float("-inf"), dtype=q.dtype)
    total = torch.zeros(*shape, n_q, 1, dtype=buffer_dtype)
    out = torch.zeros(*shape, n_q, v.shape[-1], dtype=buffer_dtype)
    rows = torch.arange(n_q)[:, None]
    if causal and not mask_per_tile:  # one (n_q, n_k) mask, sliced for each tile
        full_mask = torch.arange(n_k) > rows
    last = n_k if partial_last else n_k - block_size + 1
    for start in range(0, last, block_size):
        s = q @ k[..., start : start + block_size, :].transpose(-2, -1)
        if causal:
            cols = torch.arange(start, start + s.shape[-1])
            blocked = cols > rows if diagonal else cols >= rows
            if not mask_per_tile:
                blocked = full_mask[:, start : start + s.shape[-1]]
            s = s.masked_fill(blocked, float("-inf"))
        if subtract_max:
            new_m = torch.maximum(m, s.amax(-1, keepdim=True))
        else:
            new_m = torch.zeros_like(m)
        safe = new_m.masked_fill(new_m == float("-inf"), 0.0)
        p = (s - safe).exp()
        correction = (m - safe).exp() if subtract_max else torch.ones_like(m)
        total = (total * correction if rescale_sum else total) + p.sum(-1, keepdim=True)
        out = (out * correction if rescale_out else out) + p @ v[..., start : start + block_size, :]
        m = new_m
    return out / total


@register
class TiledAttention(Task):
    id = "ex10.tiled_attention"
    lesson = f"{LESSON}, section 'Exact attention in tiles: the online softmax'"
    reference = "course_lib.efficient_attention.tiled_attention"
    forbidden = (
        "torch.nn.functional.scaled_dot_product_attention",
        "torch.nn.MultiheadAttention",
        "course_lib.attention.scaled_dot_product_attention",
    )

    def cases(self, gen):
        f64 = torch.float64
        return [
            _tiled_case(
                "q, k, v (2, 3, 10, 8), block_size=4 (10 is not a multiple of 4)",
                randn(gen, 2, 3, 10, 8),
                randn(gen, 2, 3, 10, 8),
                randn(gen, 2, 3, 10, 8),
                4,
            ),
            _tiled_case(
                "the same shapes with causal=True",
                randn(gen, 2, 3, 10, 8),
                randn(gen, 2, 3, 10, 8),
                randn(gen, 2, 3, 10, 8),
                4,
                causal=True,
            ),
            _tiled_case(
                "n_q=7 != n_k=13, d_v=5: q (2, 7, 6), k (2, 13, 6), v (2, 13, 5), block_size=4",
                randn(gen, 2, 7, 6),
                randn(gen, 2, 13, 6),
                randn(gen, 2, 13, 5),
                4,
            ),
            _tiled_case(
                "float64, large scores (the maximum moves from block to block), "
                "(3, 9, 6), block_size=3, causal=True",
                randn(gen, 3, 9, 6, dtype=f64, scale=4.0),
                randn(gen, 3, 9, 6, dtype=f64, scale=4.0),
                randn(gen, 3, 9, 6, dtype=f64),
                3,
                causal=True,
            ),
            _tiled_case(
                "scores near 900 (exp would overflow without subtracting the maximum), "
                "(1, 6, 4), block_size=2",
                randn(gen, 1, 6, 4, scale=30.0),
                randn(gen, 1, 6, 4, scale=30.0),
                randn(gen, 1, 6, 4),
                2,
            ),
            _tiled_case(
                "block_size=1 (every key its own block), (2, 6, 4), causal=True",
                randn(gen, 2, 6, 4, scale=2.0),
                randn(gen, 2, 6, 4, scale=2.0),
                randn(gen, 2, 6, 4),
                1,
                causal=True,
            ),
            _tiled_case(
                "block_size=16 larger than n=5: one block, (1, 5, 4)",
                randn(gen, 1, 5, 4),
                randn(gen, 1, 5, 4),
                randn(gen, 1, 5, 4),
                16,
            ),
            _tiled_case(
                "batch smaller than the other sizes: q, k, v (1, 40, 16), block_size=8, float64",
                randn(gen, 1, 40, 16, dtype=f64, scale=2.0),
                randn(gen, 1, 40, 16, dtype=f64, scale=2.0),
                randn(gen, 1, 40, 16, dtype=f64),
                8,
            ),
            _tiled_case(
                "a long sequence under a memory limit: q, k, v (2, 2048, 16), "
                "block_size=128 (the full 2048 x 2048 scores are not allowed)",
                randn(gen, 2, 2048, 16),
                randn(gen, 2, 2048, 16),
                randn(gen, 2, 2048, 16),
                128,
            ),
            _tiled_case(
                "few queries, many keys: q (2, 64, 8), k and v (2, 4096, 8), block_size=128 "
                "(the (64, 4096) scores of all keys at once are not allowed)",
                randn(gen, 2, 64, 8),
                randn(gen, 2, 4096, 8),
                randn(gen, 2, 4096, 8),
                128,
            ),
            _tiled_case(
                "the same limit with causal=True: q, k, v (1, 1024, 16), block_size=64",
                randn(gen, 1, 1024, 16),
                randn(gen, 1, 1024, 16),
                randn(gen, 1, 1024, 16),
                64,
                causal=True,
            ),
            _tiled_case(
                "bfloat16 q, k, v (2, 6, 8), block_size=2: the output keeps q's dtype",
                randn(gen, 2, 6, 8, dtype=torch.bfloat16),
                randn(gen, 2, 6, 8, dtype=torch.bfloat16),
                randn(gen, 2, 6, 8, dtype=torch.bfloat16),
                2,
            ),
            _tiled_case(
                "batch dimensions broadcast: q (3, 5, 4), k and v (2, 3, 9, 4), "
                "block_size=4, causal=True",
                randn(gen, 3, 5, 4),
                randn(gen, 2, 3, 9, 4),
                randn(gen, 2, 3, 9, 4),
                4,
                causal=True,
            ),
            _tiled_case(
                "block_size=0 must raise a ValueError",
                randn(gen, 1, 4, 4),
                randn(gen, 1, 4, 4),
                randn(gen, 1, 4, 4),
                0,
                raises=ValueError,
            ),
            _tiled_case(
                "block_size=-3 must raise a ValueError",
                randn(gen, 1, 4, 4),
                randn(gen, 1, 4, 4),
                randn(gen, 1, 4, 4),
                -3,
                raises=ValueError,
            ),
            _tiled_case(
                "block_size=-1 must raise a ValueError",
                randn(gen, 1, 4, 4),
                randn(gen, 1, 4, 4),
                randn(gen, 1, 4, 4),
                -1,
                raises=ValueError,
            ),
            _tiled_case(
                "block_size=2.5 (not an integer) must raise a ValueError",
                randn(gen, 1, 4, 4),
                randn(gen, 1, 4, 4),
                randn(gen, 1, 4, 4),
                2.5,
                raises=ValueError,
            ),
        ]

    def call(self, obj, case):
        if case.data.get("limit") is None:
            return obj(*case.args, **case.kwargs)
        with _MemoryLimit(case.data["limit"], case.data.get("alive")):
            return obj(*case.args, **case.kwargs)

    def mistakes(self):
        def sum_not_rescaled(q, k, v, block_size=128, causal=False):
            return _tiles(q, k, v, block_size, causal, rescale_sum=False)

        def output_not_rescaled(q, k, v, block_size=128, causal=False):
            return _tiles(q, k, v, block_size, causal, rescale_out=False)

        def nothing_rescaled(q, k, v, block_size=128, causal=False):
            return _tiles(q, k, v, block_size, causal, rescale_sum=False, rescale_out=False)

        def last_block_dropped(q, k, v, block_size=128, causal=False):
            return _tiles(q, k, v, block_size, causal, partial_last=False)

        def no_max(q, k, v, block_size=128, causal=False):
            return _tiles(q, k, v, block_size, causal, subtract_max=False)

        def unscaled(q, k, v, block_size=128, causal=False):
            return _tiles(q, k, v, block_size, causal, scale=False)

        def diagonal_blocked(q, k, v, block_size=128, causal=False):
            return _tiles(q, k, v, block_size, causal, diagonal=False)

        def causal_ignored(q, k, v, block_size=128, causal=False):
            return _tiles(q, k, v, block_size, False)

        def float32_buffers(q, k, v, block_size=128, causal=False):
            return _tiles(q, k, v, block_size, causal, buffer_dtype=torch.float32)

        def softmax_per_block(q, k, v, block_size=128, causal=False):
            parts = []
            for start in range(0, k.shape[-2], block_size):
                kb, vb = (
                    k[..., start : start + block_size, :],
                    v[..., start : start + block_size, :],
                )
                s = q @ kb.transpose(-2, -1) / math.sqrt(q.shape[-1])
                if causal:
                    cols = torch.arange(start, start + s.shape[-1])
                    s = s.masked_fill(cols > torch.arange(q.shape[-2])[:, None], float("-inf"))
                parts.append(torch.nan_to_num(s.softmax(-1)) @ vb)
            return sum(parts) / len(parts)

        def full_causal_mask(q, k, v, block_size=128, causal=False):
            return _tiles(q, k, v, block_size, causal, mask_per_tile=False)

        def full_matrix(q, k, v, block_size=128, causal=False):
            s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            if causal:
                n_q, n_k = s.shape[-2:]
                s = s.masked_fill(torch.ones(n_q, n_k, dtype=torch.bool).triu(1), float("-inf"))
            return s.softmax(-1) @ v

        return [
            (
                sum_not_rescaled,
                "the running sum is not rescaled: when a block brings a larger maximum m', the sum "
                "of exp(s - m) collected so far must be multiplied by exp(m - m') before the new "
                "block's terms are added",
            ),
            (
                output_not_rescaled,
                "the running output is not rescaled: when the maximum grows from m to m', multiply "
                "the weighted sum of values collected so far by exp(m - m'), as you do the sum",
            ),
            (
                nothing_rescaled,
                "neither the running sum nor the running output is rescaled: when a block brings "
                "a larger maximum m', multiply both by exp(m - m') before adding the new block's "
                "terms",
            ),
            (
                last_block_dropped,
                "the last keys are left out when n_k is not a multiple of block_size: the last "
                "tile is shorter, so loop with range(0, n_k, block_size) and slice to the end",
            ),
            (
                no_max,
                "exp of large scores overflows to inf: keep a running maximum and subtract it "
                "before exp, rescaling what was summed when it grows",
            ),
            (unscaled, "the scores are not divided by sqrt(d_k)"),
            (
                diagonal_blocked,
                "with causal=True a query may attend to itself: block keys j > i, not j >= i",
            ),
            (
                causal_ignored,
                "causal=True is ignored: query i may only attend to keys j <= i (mask the later "
                "keys of each tile with -inf)",
            ),
            (
                float32_buffers,
                "your output is not in q's dtype: torch.zeros makes float32 tensors unless told "
                "otherwise, so create the running sum and output (and maximum) with "
                "dtype=q.dtype",
            ),
            (
                softmax_per_block,
                "a softmax per block, then an average of the blocks, is not the softmax over all "
                "keys: keep one running maximum and one running sum across the blocks",
            ),
            (full_matrix, MEMORY_HINT),
            (full_causal_mask, MEMORY_HINT),
        ]

    def diagnose(self, got, want, case):
        if isinstance(got, torch.Tensor) and not torch.isfinite(got).all():
            return (
                "your output has inf or NaN: subtract the running maximum before exp, and "
                "rescale the sum and output when it grows"
            )
        return None


# --------------------------------------------------------------------------------------------
# sliding_window_mask
# --------------------------------------------------------------------------------------------


def _band(n, window, causal=False, width_offset=0, future=False, diagonal=True):
    offset = torch.arange(n)[:, None] - torch.arange(n)[None, :]  # i - j
    mask = offset.abs() <= window + width_offset
    if causal:
        mask &= (offset <= 0) if future else (offset >= 0 if diagonal else offset > 0)
    return mask


@register
class SlidingWindowMask(Task):
    id = "ex10.sliding_window_mask"
    lesson = f"{LESSON}, section 'Longformer: a sliding window'"
    reference = "course_lib.efficient_attention.sliding_window_mask"

    def cases(self, gen):
        return [
            Case("n=7, window=2", (7, 2)),
            Case("n=7, window=2, causal=True", (7, 2), {"causal": True}),
            Case("n=5, window=0 (each token sees only itself)", (5, 0)),
            Case("n=4, window=0, causal=True", (4, 0), {"causal": True}),
            Case("n=6, window=10 (wider than the sequence: everything allowed)", (6, 10)),
            Case("n=6, window=10, causal=True (the plain causal mask)", (6, 10), {"causal": True}),
            Case("n=1, window=3", (1, 3)),
            Case("n=12, window=3, causal=False given by keyword", (12, 3), {"causal": False}),
            Case("n=9, window=1, causal=True", (9, 1), {"causal": True}),
            Case("window=-1 must raise a ValueError", (5, -1), raises=ValueError),
            Case("n=0 must raise a ValueError", (0, 2), raises=ValueError),
        ]

    def mistakes(self):
        return [
            (
                lambda n, window, causal=False: _band(n, window, causal, width_offset=-1),
                "the window is one too narrow: key j is allowed when |i - j| <= window, so the "
                "band is 2 * window + 1 wide (use <=, not <)",
            ),
            (
                lambda n, window, causal=False: _band(n, window, causal, width_offset=1),
                "the window is one too wide: key j is allowed when |i - j| <= window, not "
                "<= window + 1",
            ),
            (
                lambda n, window, causal=False: _band(n, window, causal, future=True),
                "with causal=True the band keeps the past (j <= i), not the future",
            ),
            (
                lambda n, window, causal=False: _band(n, window, False),
                "causal=True is ignored: keep only the keys j with i - window <= j <= i",
            ),
            (
                lambda n, window, causal=False: _band(n, window, causal, diagonal=False),
                "with causal=True a token may still attend to itself: keep j <= i, not j < i",
            ),
            (
                lambda n, window, causal=False: ~_band(n, window, causal),
                "your mask is inverted: True means 'may attend' in this course",
            ),
            (
                lambda n, window, causal=False: _band(n, window, causal).float(),
                "the mask must be a bool tensor (True/False), not floats",
            ),
        ]


# --------------------------------------------------------------------------------------------
# mlm_mask
# --------------------------------------------------------------------------------------------

_MLM_SHAPE = (400, 500)  # 200,000 positions per case


def _mlm_ids(gen, vocab_size, pad_id=None, dtype=torch.int64):
    ids = torch.randint(0, vocab_size, _MLM_SHAPE, generator=gen, dtype=dtype)
    if pad_id is not None:
        ids[ids == pad_id] = (pad_id + 1) % vocab_size
        lengths = torch.randint(100, _MLM_SHAPE[1] + 1, (_MLM_SHAPE[0],), generator=gen)
        ids[torch.arange(_MLM_SHAPE[1]) >= lengths[:, None]] = pad_id
    return ids


def _mlm_stats(ids, inputs, labels, mask_id, vocab_size, pad_id):
    real = ids != pad_id if pad_id is not None else torch.ones_like(ids, dtype=torch.bool)
    chosen = labels != -100
    picked, original = inputs[chosen], ids[chosen]
    replaced = picked[(picked != mask_id) & (picked != original)]
    half = ids.shape[-1] // 2
    first_real = real.clone()
    first_real[..., half:] = False
    counts = torch.bincount(replaced.clamp(0, vocab_size), minlength=vocab_size + 1)
    return {
        "exact": {
            "padding positions whose label is not -100": int((chosen & ~real).sum()),
            "padding changed": int(((inputs != ids) & ~real).sum()),
            "labels of chosen positions that are not the original id": int(
                (labels[chosen] != original).sum()
            ),
            "positions changed although not chosen": int((inputs != ids)[~chosen].sum()),
            "random ids outside [0, vocab_size)": int(
                ((replaced < 0) | (replaced >= vocab_size)).sum()
            ),
        },
        "counts": {
            "real": int(real.sum()),
            "chosen": int(chosen.sum()),
            "first half real": int(first_real.sum()),
            "first half chosen": int((chosen & first_real).sum()),
            "masked": int((picked == mask_id).sum()),
            "unchanged": int((picked == original).sum()),
            "random": int(replaced.numel()),
        },
        "random histogram": counts[:vocab_size].double(),
    }


_MLM_WHAT = {
    "chosen": "the share of non-padding positions chosen",
    "first half": "the share chosen in the first half of each row",
    "masked": "the share of chosen positions that became <mask>",
    "unchanged": "the share of chosen positions left unchanged",
    "random": "the share of chosen positions given a random id",
}


def _mlm_shares(counts):
    """name -> (share, number of positions it is a share of)."""
    pairs = {
        "chosen": ("chosen", "real"),
        "first half": ("first half chosen", "first half real"),
        "masked": ("masked", "chosen"),
        "unchanged": ("unchanged", "chosen"),
        "random": ("random", "chosen"),
    }
    return {
        name: (counts[hits] / max(1, counts[total]), counts[total])
        for name, (hits, total) in pairs.items()
    }


def _mlm_compare(got, want, mask_prob, vocab_size):
    for name, value in want["exact"].items():
        # against a wrong implementation, only whether it makes this kind of error matters
        same = (
            got["exact"][name] == value
            if "expected" in want
            else (got["exact"][name] > 0) == (value > 0)
        )
        if not same:
            return f"{name}: {got['exact'][name]} (expected {value})"
    if "expected" in want:  # against BERT's probabilities
        targets = {
            "chosen": mask_prob,
            "first half": mask_prob,
            "masked": 0.8,
            "unchanged": 0.1 + 0.1 / vocab_size,
            "random": 0.1 * (vocab_size - 1) / vocab_size,
        }
    else:  # against a wrong implementation's own proportions
        targets = {name: share for name, (share, _) in _mlm_shares(want["counts"]).items()}
    for name, (share, total) in _mlm_shares(got["counts"]).items():
        if total == 0:
            return f"{_MLM_WHAT[name]}: there is no position to count"
        p = targets[name]
        tolerance = 5 * math.sqrt(max(p * (1 - p), 1e-12) / total) + 1e-3
        if abs(share - p) > tolerance:
            return f"{_MLM_WHAT[name]} is {share:.3f}, expected {p:.3f}"
    histogram = got["random histogram"]
    if histogram.sum() > 0:
        expected = histogram.sum() / vocab_size
        worst = (histogram - expected).abs().max().item()
        if worst > 6 * math.sqrt(expected) + 2:
            return (
                "the random ids are not uniform over [0, vocab_size): some id is drawn "
                f"{worst:.0f} times more or less than the {expected:.0f} expected"
            )
    return None


@register
class MlmMask(Task):
    id = "ex10.mlm_mask"
    lesson = f"{LESSON}, section 'BERT: fill in the blanks'"
    reference = "course_lib.family.mlm_mask"

    def cases(self, gen):
        return [
            Case(
                "ids (400, 500) with vocab_size=20, mask_id=20, pad_id=0 and padded rows",
                (_mlm_ids(gen, 20, pad_id=0), 20, 20),
                {"pad_id": 0},
            ),
            Case(
                "no padding (pad_id=None), vocab_size=50, mask_id=50", (_mlm_ids(gen, 50), 50, 50)
            ),
            Case(
                "mask_prob=0.3, pad_id=3 (padding need not be 0), vocab_size=10, mask_id=10",
                (_mlm_ids(gen, 10, pad_id=3), 10, 10),
                {"mask_prob": 0.3, "pad_id": 3},
            ),
            Case(
                "mask_prob=1.0: every non-padding position is chosen, int32 ids",
                (_mlm_ids(gen, 12, pad_id=0, dtype=torch.int32), 12, 12),
                {"mask_prob": 1.0, "pad_id": 0},
            ),
            Case(
                "mask_prob=0.05, vocab_size=4 (random ids often equal the original)",
                (_mlm_ids(gen, 4, pad_id=1), 4, 4),
                {"mask_prob": 0.05, "pad_id": 1},
            ),
            Case(
                "mask_prob=0 must raise a ValueError",
                (_mlm_ids(gen, 5)[:2], 5, 5),
                {"mask_prob": 0.0},
                raises=ValueError,
            ),
            Case(
                "mask_prob=1.5 must raise a ValueError",
                (_mlm_ids(gen, 5)[:2], 5, 5),
                {"mask_prob": 1.5},
                raises=ValueError,
            ),
        ]

    def call(self, obj, case):
        ids, mask_id, vocab_size = case.args
        if case.raises is not None:
            return obj(ids, mask_id, vocab_size, **case.kwargs)
        pad_id = case.kwargs.get("pad_id")

        def run(seed, given=None):
            return obj(
                ids.clone() if given is None else given,
                mask_id,
                vocab_size,
                **case.kwargs,
                generator=torch.Generator().manual_seed(seed),
            )

        first = run(1234, given=ids)  # the learner's own copy: the grader sees it changed
        if not (
            isinstance(first, (tuple, list))
            and len(first) == 2
            and all(isinstance(t, torch.Tensor) for t in first)
        ):
            raise GradingError("return a tuple (inputs, labels) of two tensors")
        inputs, labels = first
        for name, t in (("inputs", inputs), ("labels", labels)):
            if t.shape != ids.shape:
                raise GradingError(
                    f"{name} has shape {tuple(t.shape)}, expected the shape of "
                    f"ids {tuple(ids.shape)}"
                )
        for name, t in (("inputs", inputs), ("labels", labels)):
            if t.dtype != ids.dtype:
                raise GradingError(
                    f"{name} has dtype {str(t.dtype)[6:]}; keep the dtype of ids "
                    f"({str(ids.dtype)[6:]}): F.cross_entropy takes integer class labels"
                )
        again = run(1234)
        if not all(torch.equal(a, b) for a, b in zip(first, again, strict=True)):
            raise GradingError(
                "two calls with generators in the same state gave different "
                "results: pass `generator=generator` to every random draw "
                "(torch.rand, torch.randint)"
            )
        if all(torch.equal(a, b) for a, b in zip(first, run(99), strict=True)):
            raise GradingError(
                "two calls with different generator seeds gave the same "
                "result: draw the random numbers from `generator`"
            )
        return _mlm_stats(ids, inputs.long(), labels.long(), mask_id, vocab_size, pad_id)

    def expected(self, case):
        if case.raises is not None:
            return None
        ids, mask_id, vocab_size = case.args
        pad_id = case.kwargs.get("pad_id")
        # The exact counts are all zero; the proportions are BERT's, checked in `compare`.
        stats = _mlm_stats(ids, ids, torch.full_like(ids, -100), mask_id, vocab_size, pad_id)
        stats["expected"] = True
        return stats

    def compare(self, got, want, case):
        if want is None:
            return None
        if not isinstance(got, dict) or "counts" not in got:
            return "your function should return (inputs, labels)"
        return _mlm_compare(got, want, case.kwargs.get("mask_prob", 0.15), case.args[2])

    def mistakes(self):
        def make(pads=False, split=(0.8, 0.9), labels_everywhere=False, fixed_prob=None, high=0):
            def wrong(ids, mask_id, vocab_size, mask_prob=0.15, pad_id=None, generator=None):
                if not 0 < mask_prob <= 1:
                    raise ValueError("mask_prob")
                p = mask_prob if fixed_prob is None else fixed_prob
                chosen = torch.rand(ids.shape, generator=generator) < p
                if pad_id is not None and not pads:
                    chosen &= ids != pad_id
                labels = ids.clone() if labels_everywhere else ids.masked_fill(~chosen, -100)
                action = torch.rand(ids.shape, generator=generator)
                random_ids = torch.randint(
                    0, vocab_size + high, ids.shape, generator=generator, dtype=ids.dtype
                )
                inputs = ids.masked_fill(chosen & (action < split[0]), mask_id)
                swap = chosen & (action >= split[0]) & (action < split[1])
                return torch.where(swap, random_ids, inputs), labels

            return wrong

        def global_rng(ids, mask_id, vocab_size, mask_prob=0.15, pad_id=None, generator=None):
            return make()(ids, mask_id, vocab_size, mask_prob, pad_id, None)

        return [
            (
                make(pads=True),
                "padding positions get chosen: choose only among the positions where ids != pad_id",
            ),
            (
                make(split=(1.0, 1.0)),
                "every chosen position became <mask>: of the chosen positions, 80 % become <mask>, "
                "10 % a random id and 10 % stay unchanged",
            ),
            (
                make(split=(0.1, 0.9)),
                "the proportions are swapped: 80 % of the chosen positions become <mask> and 10 % "
                "a random id, not the other way round",
            ),
            (
                make(split=(0.8, 1.0)),
                "no chosen position stays unchanged: keep 10 % of them as they are (80 % <mask>, "
                "10 % random, 10 % unchanged)",
            ),
            (
                make(labels_everywhere=True),
                "labels must be -100 at the positions that were not chosen, so that the loss "
                "skips them; only the chosen positions keep their original id",
            ),
            (make(fixed_prob=0.15), "use the mask_prob argument (0.15 is only its default)"),
            (
                make(high=1),
                "the random ids include vocab_size, which is mask_id here: draw them from "
                "[0, vocab_size) (torch.randint's `high` is already excluded)",
            ),
            (global_rng, "pass `generator=generator` to every random draw"),
        ]


# --------------------------------------------------------------------------------------------
# patchify
# --------------------------------------------------------------------------------------------


def _patches(images, p, order=(0, 2, 4, 1, 3, 5)):
    b, c, h, w = images.shape
    x = images.reshape(b, c, h // p, p, w // p, p).permute(*order)
    return x.reshape(b, (h // p) * (w // p), c * p * p)


@register
class Patchify(Task):
    id = "ex10.patchify"
    lesson = f"{LESSON}, section 'ViT: an image is a sequence of patches'"
    reference = "course_lib.family.patchify"
    forbidden = ("torch.nn.functional.unfold", "torch.nn.Unfold")

    def cases(self, gen):
        return [
            Case(
                "images (2, 3, 8, 12), patch_size=4 (2 x 3 patches)", (randn(gen, 2, 3, 8, 12), 4)
            ),
            Case("images (1, 1, 4, 4), patch_size=2", (randn(gen, 1, 1, 4, 4), 2)),
            Case(
                "images (3, 2, 6, 6), patch_size=3, float64",
                (randn(gen, 3, 2, 6, 6, dtype=torch.float64), 3),
            ),
            Case(
                "images (2, 3, 4, 6), patch_size=1 (every pixel a patch)",
                (randn(gen, 2, 3, 4, 6), 1),
            ),
            Case("images (2, 2, 5, 5), patch_size=5 (one patch)", (randn(gen, 2, 2, 5, 5), 5)),
            Case(
                "images (1, 1, 4, 8), patch_size=2 (wider than tall)", (randn(gen, 1, 1, 4, 8), 2)
            ),
            Case(
                "images (1, 4, 9, 3), patch_size=3 (taller than wide)", (randn(gen, 1, 4, 9, 3), 3)
            ),
            Case(
                "H=10 is not a multiple of patch_size=4: must raise a ValueError",
                (randn(gen, 1, 1, 10, 8), 4),
                raises=ValueError,
            ),
            Case(
                "W=6 is not a multiple of patch_size=4: must raise a ValueError",
                (randn(gen, 1, 1, 8, 6), 4),
                raises=ValueError,
            ),
        ]

    def mistakes(self):
        return [
            (
                lambda images, p: images.reshape(images.shape[0], -1, images.shape[1] * p * p),
                "a reshape alone reads pixels in memory order, so a 'patch' is a strip of rows, "
                "not a square: split H and W into (H/p, p) and (W/p, p), then permute the "
                "patch-grid axes in front",
            ),
            (
                lambda images, p: _patches(images, p, (0, 4, 2, 1, 3, 5)),
                "the patches are read column by column: read them row by row (all patches of the "
                "top row, left to right, then the next row)",
            ),
            (
                lambda images, p: _patches(images, p, (0, 2, 4, 3, 5, 1)),
                "inside a patch the channels come last; flatten each patch as (channels, row, "
                "column), like a Conv2d kernel",
            ),
            (
                lambda images, p: _patches(images, p, (0, 2, 4, 1, 5, 3)),
                "each patch is transposed: flatten it row by row (the pixel row before the pixel "
                "column)",
            ),
        ]
