"""ex10.tiled_attention: the online softmax, one block of keys at a time, under the memory
rule of `_memory`. Data: the cases, the named mistakes (FAULTS) and one wrong loop that takes
a mistake's name."""

from __future__ import annotations

import math

import torch

from course_lib.validation import check_positive_int

from ...core import Task, register
from ..common import D_V_SCALE_HINT, randn
from ._memory import MEMORY_HINT, call_limited, draw_qkv, limited_case

LESSON = "lesson 10"

CAUSAL_RULE = (
    "query i is token n_k - n_q + i of the sequence (the newest tokens when there are fewer "
    "queries than keys, as with is_causal=True) and may attend to the keys up to that token"
)
SHIFT_REVERSED = (
    f"the queries' shift has its sign reversed: {CAUSAL_RULE}, i + n_k - n_q, not i + n_q - n_k "
    "(with fewer queries than keys, your first queries see no key at all: 0 / 0 = NaN)"
)

SEQ_FROM_SHAPE_1 = (
    "q.shape[1] and k.shape[1] are the numbers of queries and keys only for 3-D inputs: with "
    "more batch dimensions in front, (..., n, d), axis 1 is a batch axis; count from the end, "
    "n_q, n_k = q.shape[-2], k.shape[-2]"
)

FAULTS = {
    "sum_not_rescaled": (
        "the running sum is not rescaled: when a block brings a larger maximum m', the sum "
        "of exp(s - m) collected so far must be multiplied by exp(m - m') before the new "
        "block's terms are added"
    ),
    "output_not_rescaled": (
        "the running output is not rescaled: when the maximum grows from m to m', multiply "
        "the weighted sum of values collected so far by exp(m - m'), as you do the sum"
    ),
    "nothing_rescaled": (
        "neither the running sum nor the running output is rescaled: when a block brings "
        "a larger maximum m', multiply both by exp(m - m') before adding the new block's "
        "terms (computed after m = m', the factor exp(m - m') is always 1)"
    ),
    "sum_as_mean": (
        "the running sum adds each block's MEAN of exp(s - m), not its sum: the softmax divides "
        "by the sum over all the keys, so add weights.sum(dim=-1, keepdim=True) (a mean divides "
        "each block by its own width)"
    ),
    # #h10b: before no_keepdim, whose crash on (2, 3, 10, 8) is the same (sizes 3, 10, dim 2)
    "seq_from_shape_1": SEQ_FROM_SHAPE_1,
    "keys_from_shape_1": SEQ_FROM_SHAPE_1,  # k.shape[1] alone: only the causal shift and loop
    "no_keepdim": (
        "a maximum or sum over the keys without keepdim=True has shape (..., n_q), which lines "
        "up with the last axis, not with the queries: keep the running maximum and sum as "
        "columns (..., n_q, 1), with amax(-1, keepdim=True) and sum(-1, keepdim=True)"
    ),
    "block_max": (
        "each block's own maximum is used instead of the running one: the new maximum is "
        "max(m, the block's maximum), so that exp(m - m') never exceeds 1; with the block's "
        "own maximum, a block of small scores after a large one overflows exp"
    ),
    "block_max_unrescaled": (
        "each block's exp(s - m) is taken against that block's own maximum m, and the blocks' "
        "sums and outputs are added as they are: terms measured against different maxima do "
        "not add up. Keep one running maximum; when a block raises it from m to m', multiply "
        "the sum and output collected so far by exp(m - m') before adding the block's terms"
    ),
    "key_offset_missing": (
        "the causal mask compares the query positions with the key positions inside the tile "
        "(0 .. block_size - 1): key j of the block that starts at `start` is key start + j, so "
        "build the tile's key positions with torch.arange(start, start + tile width)"
    ),
    "offset_negated": (
        "the causal mask's offsets have the wrong sign: key j of the tile that starts at "
        "`start` is key start + j and query i is token i + n_k - n_q, so block the keys with "
        "start + j > i + n_k - n_q (with triu on a tile: diagonal n_k - n_q - start + 1, not "
        "start - (n_k - n_q) + 1)"
    ),
    "query_pos_flat": (
        "the query positions must be a column, (n_q, 1): compared with the tile's key "
        "positions (block,), they then give the (n_q, block) mask; torch.arange(n_q) alone "
        "lines up with the keys (use .unsqueeze(-1) or [:, None])"
    ),
    "key_pos_full_block": (
        "the last block is shorter when n_k is not a multiple of block_size: build each "
        "tile's key positions from its own width, torch.arange(start, start + "
        "scores.shape[-1]), not from block_size"
    ),
    "top_left": (
        "with fewer queries than keys, causal=True aligns the queries with the last keys: "
        f"{CAUSAL_RULE}; your mask lets query i see keys j <= i only"
    ),
    "out_like_q": (
        "the output has v's last size, d_v, which may differ from q's d_k: create the "
        "running output as (..., n_q, d_v), torch.zeros(..., v.shape[-1]), not zeros_like(q)"
    ),
    # #f10: before last_block_dropped, which drops the same keys when n_k - n_q >= block_size
    "stopped_at_n_q": (
        "with causal=True your loop stops at the block that starts at n_q, as if the last query "
        "were token n_q - 1: with fewer queries than keys it is token n_k - 1 and sees every "
        "key, so no block can be skipped here; loop over all of range(0, n_k, block_size)"
    ),
    # #h17: the lesson's loop, queries split into blocks too, k_end = q_start + rows
    "query_blocks_unshifted": (
        "with the queries split into blocks as well, each query block's loop over the keys "
        "stops at q_start + rows, as if its last query were token q_start + rows - 1: it is "
        "token q_start + rows - 1 + n_k - n_q, so loop up to k_end = min(n_k, q_start + rows + "
        "n_k - n_q) (or over every block of keys and let the mask do the rest)"
    ),
    # #h19: the lesson's loop, a key block skipped once it starts after the query block's FIRST
    # query (k_start > q_start + n_k - n_q): right when n_k - n_q is a multiple of block_size
    "query_blocks_first_query": (
        "with the queries split into blocks as well, a block of keys is skipped once it starts "
        "after the query block's FIRST query, token q_start + n_k - n_q: the block's later "
        "queries, up to token q_start + rows - 1 + n_k - n_q, may still see its keys; stop only "
        "after the LAST one, k_end = min(n_k, q_start + rows + n_k - n_q) (or loop over every "
        "block of keys and let the mask do the rest)"
    ),
    "last_block_dropped": (
        "the last keys are left out when n_k is not a multiple of block_size: the last "
        "tile is shorter, so loop with range(0, n_k, block_size) and slice to the end"
    ),
    "max_starts_at_zero": (
        "the running maximum starts at 0: a query whose scores are all far below 0 keeps "
        "m = 0, and exp(s - 0) underflows to 0 for every key, so o / l is 0 / 0 = NaN; start "
        "it at -inf (torch.full(..., float('-inf'))) so that the first block sets it"
    ),
    "no_max": (
        "exp of large scores overflows to inf: keep a running maximum and subtract it "
        "before exp, rescaling what was summed when it grows"
    ),
    "rescale_after_add": (
        "the running sum and output are rescaled AFTER the block's terms are added: those "
        "terms are already measured against the new maximum m', so multiply only what was "
        "collected before by exp(m - m'), then add the block's terms"
    ),
    "max_not_kept": (
        "the running maximum is never updated: end each block with m = m' (running_max = "
        "new_max); left at -inf, the factor exp(m - m') is 0 on every block and wipes out all "
        "that was collected before, so only the last block's keys count"
    ),
    "inverted_rescale": (  # also the weights exp(s - m) taken before m' = max(m, ...): NaN alike
        "the first block already gives inf, then NaN: the running maximum m starts at -inf, so "
        "exp(m' - m) and exp(s - m) are inf. Either the rescaling factor is inverted: what was "
        "summed relative to the old maximum m is brought to the new maximum m' by exp(m - m') "
        "(at most 1), not exp(m' - m); or the block's weights use the maximum from before the "
        "block: first m' = max(m, the block's maximum), then the weights exp(s - m')"
    ),
    "shift_reversed": SHIFT_REVERSED,
    # after top_left: with n_k - n_q = block_size the two masks are the same
    "key_pos_late": (
        "the tile's key positions start one block late: key j of the block that starts at "
        "`start` is key start + j, so move `start` on after the block, not before building "
        "its positions; with every key a block later, the first queries see no key at all "
        "and give 0 / 0 = NaN"
    ),
    "slice_to_block_size": (
        "k[..., start : block_size] is empty once start >= block_size: a block of keys ends at "
        "start + block_size, k[..., start : start + block_size, :] (and the same for v)"
    ),
    "slice_last_axis": (  # #h18: k[..., start : end] with no `, :` after it
        "k[..., start : start + block_size] slices the LAST axis, d_k, not the keys: `...` "
        "stands for the axes in front of the ones you name, so name the keys' axis and keep "
        "d_k whole, k[..., start : start + block_size, :] (and the same for v)"
    ),
    "max_pair": (
        "scores.max(dim=-1, keepdim=True) returns a pair (values, indices), not a tensor: take "
        "its .values, or use scores.amax(dim=-1, keepdim=True)"
    ),
    "power_half": (
        "`d_k ** 1/2` is `(d_k ** 1) / 2`: ** binds tighter than /, so `q / d_k ** 1/2` divides "
        "by 2 d_k; write d_k ** 0.5 or math.sqrt(d_k)"
    ),
    "unscaled": "the scores are not divided by sqrt(d_k): divide q k^T by it before the softmax",
    "scaled_by_d": "the scores are divided by d_k: divide them by sqrt(d_k)",
    "scaled_by_d_v": D_V_SCALE_HINT,
    "diagonal_blocked": (
        "with causal=True a query may attend to itself: block keys j > i, not j >= i"
    ),
    "max_before_mask": (
        "the tile's maximum is taken before the causal mask: a later key's large score then "
        "sets the running maximum, exp(s - m) underflows to 0 for every key the query may see, "
        "and o / l is 0 / 0 = NaN; mask the tile first, then take its maximum"
    ),
    "tile_max": (
        "scores.max() without a dim is ONE number for the whole tile, all queries (and the "
        "batch) together: a query whose scores are far below another's underflows to 0 / 0; "
        "keep a maximum per query, scores.amax(dim=-1, keepdim=True)"
    ),
    "causal_ignored": (
        "causal=True is ignored: query i may only attend to keys j <= i (mask the later "
        "keys of each tile with -inf)"
    ),
    "masked_with_zero": (
        "the causal mask fills the later keys' scores with 0, not -inf: exp(0 - m) is not 0, "
        "so the keys a query may not see still get weight; fill them with float('-inf'), "
        "whose exp is 0"
    ),
    "sum_overwritten": (
        "the running sum is overwritten by each block: it must collect every block's terms, "
        "running_sum = running_sum * exp(m - m') + the block's sum (only the last block's "
        "keys are left in your normaliser)"
    ),
    "output_overwritten": (
        "the running output is overwritten by each block: it must collect every block's "
        "weighted values, out = out * exp(m - m') + weights @ v_block (only the last block's "
        "keys are left in your output)"
    ),
    "times_sqrt": "you multiplied the scores by sqrt(d_k); divide them by it",
    "not_divided": (
        "the running output is returned as it is: o is the sum of exp(s - m) v, not yet "
        "divided by the softmax's normaliser; at the end return o / l (the running output "
        "divided by the running sum)"
    ),
    "float32_buffers": (
        "your output is not in q's dtype: torch.zeros makes float32 tensors unless told "
        "otherwise, so create the running sum and output (and maximum) with "
        "dtype=q.dtype"
    ),
    "max_float32": (
        "your running maximum is float32 (torch.full's default) while q is not: the weights "
        "exp(s - m) become float32 and cannot multiply v; create the maximum with "
        "dtype=q.dtype too"
    ),
    "softmax_per_block": (
        "a softmax per block, then an average of the blocks, is not the softmax over all "
        "keys: keep one running maximum and one running sum across the blocks"
    ),
    "full_matrix": MEMORY_HINT,
    "transpose_12": (
        "k.transpose(1, 2) swaps the wrong axes when k has batch dimensions in front, "
        "(..., n_k, d_k): transpose the last two, k.transpose(-2, -1) (or k.mT)"
    ),
    "full_causal_mask": MEMORY_HINT,
    "stopped_early": (
        "with causal=True your loop stops too early: a block of keys may be skipped only when "
        "EVERY query comes before it, and your column of tiles holds all the queries, the last "
        "of them token n_k - 1, which sees every key: no block can be skipped here (the "
        "lesson's version skips tiles because it splits the queries too)"
    ),
}


def wrong_tiled(q, k, v, block_size=128, causal=False, *, mistake):
    """The exercise's loop over key blocks (all queries against one block of keys), with the
    named mistake where it bites."""
    check_positive_int(block_size, "block_size")
    dtype = torch.float32 if mistake == "float32_buffers" else q.dtype
    n_q, n_k = q.shape[-2], k.shape[-2]
    if mistake in ("seq_from_shape_1", "keys_from_shape_1"):  # 3-D inputs assumed
        n_q, n_k = q.shape[1 if mistake == "seq_from_shape_1" else -2], k.shape[1]
    if mistake == "full_matrix":
        block_size = n_k  # one tile: the whole (n_q, n_k) matrix
    if mistake in ("power_half", "scaled_by_d"):  # q / d ** 1/2 is q / d / 2
        q = q / q.shape[-1] ** 1 / (2 if mistake == "power_half" else 1)
    elif mistake == "times_sqrt":
        q = q * math.sqrt(q.shape[-1])
    elif mistake != "unscaled":
        q = q / math.sqrt((v if mistake == "scaled_by_d_v" else q).shape[-1])
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    start_max = 0.0 if mistake == "max_starts_at_zero" else float("-inf")
    m_dtype = torch.float32 if mistake == "max_float32" else q.dtype
    m = torch.full((*batch, n_q, 1), start_max, dtype=m_dtype)
    total = torch.zeros((*batch, n_q, 1), dtype=dtype)
    out = torch.zeros((*batch, n_q, v.shape[-1]), dtype=dtype)
    if mistake == "out_like_q":
        out = torch.zeros_like(q)
    shift = {"top_left": 0, "shift_reversed": n_q - n_k, "offset_negated": n_q - n_k}.get(
        mistake, n_k - n_q
    )
    query_pos = torch.arange(n_q)[:, None] + shift  # (n_q, 1)
    if mistake == "query_pos_flat":
        query_pos = query_pos[:, 0]  # (n_q,): lines up with the keys
    if mistake == "full_causal_mask":
        full_mask = torch.arange(n_k) > query_pos  # (n_q, n_k), sliced for each tile
    parts = []
    last = n_k - block_size + 1 if mistake == "last_block_dropped" else n_k
    for start in range(0, last, block_size):
        if causal and mistake == "stopped_at_n_q" and start >= n_q:  # n_k - n_q forgotten
            break
        if causal and mistake == "stopped_early" and start > n_k - n_q:  # the first query's
            break
        end = block_size if mistake == "slice_to_block_size" else start + block_size
        axes = (1, 2) if mistake == "transpose_12" else (-2, -1)  # (1, 2): 3-D k only
        s = q @ k[..., start:end, :].transpose(*axes)  # (..., n_q, bk)
        v_block = v[..., start:end, :]
        if mistake == "slice_last_axis":  # k[..., start:end]: d_k cut, not the keys
            s = q @ k[..., start:end].transpose(-2, -1)
        unmasked = s
        if causal and mistake != "causal_ignored":
            first = {
                "key_offset_missing": 0,
                "key_pos_late": start + block_size,
                "offset_negated": -start,  # triu(start - (n_k - n_q) + 1) on the tile
            }.get(mistake, start)
            width = block_size if mistake == "key_pos_full_block" else s.shape[-1]
            key_pos = torch.arange(first, first + width)
            blocked = key_pos >= query_pos if mistake == "diagonal_blocked" else key_pos > query_pos
            if mistake == "full_causal_mask":
                blocked = full_mask[:, start : start + s.shape[-1]]
            if mistake == "query_blocks_unshifted":  # each query block's own end, n_k - n_q lost
                rows_end = ((torch.arange(n_q) // block_size + 1) * block_size).clamp(max=n_q)
                blocked = blocked | (start >= rows_end[:, None])
            if mistake == "query_blocks_first_query":  # skipped after the block's first query
                first_token = torch.arange(n_q) // block_size * block_size + n_k - n_q
                blocked = blocked | (start > first_token[:, None])
            s = s.masked_fill(blocked, 0.0 if mistake == "masked_with_zero" else float("-inf"))
        if mistake == "softmax_per_block":
            parts.append(torch.nan_to_num(s.softmax(-1)) @ v_block)
            continue
        if mistake == "no_max":
            new_m = torch.zeros_like(m)
        elif mistake in ("block_max", "block_max_unrescaled"):
            new_m = s.amax(-1, keepdim=True)
        else:
            tile = unmasked if mistake == "max_before_mask" else s
            tile_max = tile.amax() if mistake == "tile_max" else tile.amax(-1, keepdim=True)
            if mistake == "max_pair":  # (values, indices): torch.maximum refuses it
                tile_max = tile.max(-1, keepdim=True)
            new_m = torch.maximum(m, tile_max)
        safe = new_m.masked_fill(new_m == float("-inf"), 0.0)
        p = (s - safe).exp()
        correction = (safe - m).exp() if mistake == "inverted_rescale" else (m - safe).exp()
        if mistake in ("no_max", "block_max_unrescaled"):
            correction = torch.ones_like(m)
        if mistake == "rescale_after_add":  # (l + sum p) * c = l * c + sum(p * c)
            p = p * correction
        keep_sum = mistake in ("sum_not_rescaled", "nothing_rescaled")
        keep_out = mistake in ("output_not_rescaled", "nothing_rescaled")
        reduce = p.mean if mistake == "sum_as_mean" else p.sum
        if mistake in ("sum_overwritten", "output_overwritten"):  # `=` where `+=` was meant
            total, out = (0, out) if mistake == "sum_overwritten" else (total, 0)
        total = (total if keep_sum else total * correction) + reduce(
            -1, keepdim=mistake != "no_keepdim"
        )
        out = (out if keep_out else out * correction) + p @ v_block
        m = {"block_max": safe, "max_not_kept": m}.get(mistake, new_m)
    if mistake == "softmax_per_block":
        return sum(parts) / len(parts)
    return out if mistake == "not_divided" else out / total


@register
class TiledAttention(Task):
    id = "ex10.tiled_attention"
    lesson = f"{LESSON}, section 'Exact attention in tiles: the online softmax'"
    reference = "course_lib.efficient_attention.tiled_attention"
    forbidden = tuple(
        "torch.nn.functional.scaled_dot_product_attention torch.nn.MultiheadAttention "
        "course_lib.attention.scaled_dot_product_attention".split()
    )

    def cases(self, gen):
        def case(description, shape_q, shape_k, d_v, block_size, causal=False, **draw):
            raises = draw.pop("raises", None)
            qkv = draw_qkv(gen, shape_q, shape_k, d_v, **draw)
            return limited_case(description, qkv, block_size, causal, raises)

        f64, bf16 = torch.float64, torch.bfloat16
        bad = [(0, ""), (-3, ""), (-1, ""), (2.5, " (not an integer)")]
        # fmt: off
        cases = [  # q's shape, k's shape, d_v, block_size, causal
            case("q, k, v (2, 3, 10, 8), block_size=4 (10 is not a multiple of 4)",
                 (2, 3, 10, 8), (2, 3, 10, 8), 8, 4),
            case("the same shapes with causal=True", (2, 3, 10, 8), (2, 3, 10, 8), 8, 4, True),
            case("n_q=7 != n_k=13, d_v=5: q (2, 7, 6), k (2, 13, 6), v (2, 13, 5), block_size=4",
                 (2, 7, 6), (2, 13, 6), 5, 4),
            case("float64, large scores (the maximum moves from block to block), "
                 "(3, 9, 6), block_size=3, causal=True",
                 (3, 9, 6), (3, 9, 6), 6, 3, True, dtype=f64, scale=4.0),
            case("scores near 900 (exp would overflow without subtracting the maximum), "
                 "(1, 6, 4), block_size=2", (1, 6, 4), (1, 6, 4), 4, 2, scale=30.0),
            limited_case(
                "float32, every score below -200 (a maximum that starts at 0 instead of -inf "
                "makes every exp(s - m) underflow to 0), (2, 5, 4), block_size=2",
                (1.0 + torch.rand(2, 5, 4, generator=gen),  # q in [1, 2)
                 -50.0 * (2.0 + torch.rand(2, 5, 4, generator=gen)),  # k in (-150, -100]
                 randn(gen, 2, 5, 4)),
                2),
            limited_case(
                "causal=True, float32, the last key scoring at least 196 above every other key "
                "with every query (a key a query may not see must not set its maximum), "
                "(2, 6, 4), block_size=2",
                (1.0 + torch.rand(2, 6, 4, generator=gen),  # q in [1, 2)
                 torch.cat(  # k in [-1, 1), the last key 100 everywhere: scores >= 200 vs < 4
                     [2.0 * torch.rand(2, 5, 4, generator=gen) - 1.0, torch.full((2, 1, 4), 100.0)],
                     dim=-2),
                 randn(gen, 2, 6, 4)),
                2, True),
            # d = 1: a tile of more keys than block_size (the lesson's 4, say) is over the limit
            case("block_size=1 (every key its own block), q, k, v (2, 6, 1), causal=True",
                 (2, 6, 1), (2, 6, 1), 1, 1, True, scale=2.0),
            case("block_size=16 larger than n=5: one block, (1, 5, 4)",
                 (1, 5, 4), (1, 5, 4), 4, 16),
            case("batch smaller than the other sizes: q, k, v (1, 40, 16), block_size=8, float64",
                 (1, 40, 16), (1, 40, 16), 16, 8, dtype=f64, scale=2.0),
            case("a long sequence under a memory limit: q, k, v (2, 2048, 16), "
                 "block_size=128 (the full 2048 x 2048 scores are not allowed)",
                 (2, 2048, 16), (2, 2048, 16), 16, 128),
            case("few queries, many keys: q (2, 64, 8), k and v (2, 4096, 8), block_size=128 "
                 "(the (64, 4096) scores of all keys at once are not allowed)",
                 (2, 64, 8), (2, 4096, 8), 8, 128),
            case("the same limit with causal=True: q, k, v (1, 1024, 16), block_size=64",
                 (1, 1024, 16), (1, 1024, 16), 16, 64, True),
            case("bfloat16 q, k, v (2, 6, 8), block_size=2: the output keeps q's dtype",
                 (2, 6, 8), (2, 6, 8), 8, 2, dtype=bf16),
            case("batch dimensions broadcast, fewer queries than keys: q (3, 5, 4), k and v "
                 "(2, 3, 9, 4), block_size=4, causal=True (query i is token 4 + i)",
                 (3, 5, 4), (2, 3, 9, 4), 4, 4, True),
            case("one new query after 7 cached keys: q (2, 1, 8), k and v (2, 8, 8), "
                 "block_size=3, causal=True (the query sees all 8 keys)",
                 (2, 1, 8), (2, 8, 8), 8, 3, True),
            # #h19: n_k - n_q = 5 is no multiple of block_size, and a block holds several queries
            case("fewer queries than keys, n_k - n_q = 5 not a multiple of block_size: q (2, 6, "
                 "4), k and v (2, 11, 4), block_size=4, causal=True (query i is token 5 + i)",
                 (2, 6, 4), (2, 11, 4), 4, 4, True),
            *(case(f"block_size={size}{why} must raise a ValueError",
                   (1, 4, 4), (1, 4, 4), 4, size, raises=ValueError) for size, why in bad),
        ]
        # fmt: on
        # #h10b: a 3-D case is checked first (its data drawn as before): on (2, 3, 10, 8), a
        # q.shape[1] for n_q and a sum without keepdim crash alike, on 3-D inputs only the latter
        return [cases[2], *cases[:2], *cases[3:]]

    def call(self, obj, case):
        return call_limited(obj, case)

    def diagnose(self, got, want, case):
        if isinstance(got, torch.Tensor) and not torch.isfinite(got).all():
            return (
                "your output has inf or NaN: subtract the running maximum before exp, and "
                "rescale the sum and output when it grows"
            )
        return None

    mistake_table, wrong = FAULTS, staticmethod(wrong_tiled)
