"""ex05, masking: the causal mask, padding masks, and attention that respects a mask."""

from __future__ import annotations

import torch

from ..core import Case, GradingError, Task, compare_values, register
from .common import (
    D_K_FROM_SHAPE_2,
    D_V_SCALE_HINT,
    RENORMALISED_HINT,
    lengths_mask,
    randn,
    randns,
    wrong_attention,
)
from .ex02 import D_K_FROM_SHAPE_1, POWER_HALF

LESSON = "lesson 05"


def padded_ids(gen, lengths: list[int], seq: int, pad_id: int, dtype=torch.int64) -> torch.Tensor:
    """(batch, seq) ids: random real ids (never pad_id) followed by padding."""
    ids = torch.randint(0, 20, (len(lengths), seq), generator=gen, dtype=dtype)
    ids[ids == pad_id] = pad_id + 1
    for row, length in enumerate(lengths):
        ids[row, length:] = pad_id
    return ids


def _around_pad(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """`ids` with its first two real ids set to pad_id - 1 and pad_id + 1 (both sides of it)."""
    ids = ids.clone()
    ids[0, 0], ids[0, 1] = pad_id - 1, pad_id + 1
    return ids


CAUSAL_MISTAKES = {
    "triu": "that is the upper triangle: position i would see the future. True must be on and below"
    " the diagonal (key j <= query i), which is tril",
    "no_diagonal": "the diagonal is missing: a position may attend to itself (tril, not "
    "tril(-1)); without it the first row has no key at all. As a complement: triu() holds the "
    "diagonal, so ~triu() drops it; the future alone is triu(1), and the mask ~triu(1)",
    "inverted": "your mask is inverted: in this course True means 'may attend' (the convention of "
    "F.scaled_dot_product_attention), not 'blocked' as in nn.MultiheadAttention: True on and "
    "below the diagonal (tril)",
    "float": "the mask must be a bool tensor (True/False), not 1.0/0.0 floats: a float mask is "
    "ADDED to the scores, so 1.0 and 0.0 would block nothing. Use dtype=torch.bool",
    "int": "the mask must be a bool tensor (True/False), not integers; use dtype=torch.bool",
    "tril_above": "tril(1) keeps one diagonal above the main one, so query i also sees key i + 1, "
    "the next token: the causal mask is tril() with the default diagonal=0 (key j <= query i)",
    "first_row_empty": "row 0 is all False, but query 0 may attend key 0, itself: a loop that "
    "fills m[i, :i + 1] must start at i = 0, not 1",
    "additive": "that is an additive float mask (0 where allowed, -inf above the diagonal, as "
    "nn.Transformer.generate_square_subsequent_mask makes); this course's masks are bool, True "
    "= may attend: torch.ones(n, n, dtype=torch.bool).tril()",
    "last_row_empty": "the last row is all False, but the last query may attend every key: a "
    "loop that fills m[i, :i + 1] must run over every row, for i in range(n), not range(n - 1)",
    "fixed_size": "your mask is cut from a table of a fixed size (a block_size table sliced "
    "[:n, :n]), too small for this n: build it for the n you are given",
}


def _not_bool(self, got, want, case):
    """The hint for a mask of another dtype than the listed ones (uint8, int32, float64...)."""
    if isinstance(got, torch.Tensor) and got.dtype != torch.bool:
        return (
            f"a mask is a bool tensor (True = may attend), not {str(got.dtype)[6:]}: build it "
            "from a comparison (ids != pad_id, j <= i) or with dtype=torch.bool"
        )
    return None


def wrong_causal_mask(n, *, mistake=""):
    """tril of ones, bool, with one named mistake."""
    dtype = {"float": torch.float32, "int": torch.int64}.get(mistake, torch.bool)
    ones = torch.ones(n, n, dtype=dtype)
    if mistake == "fixed_size":  # a (16, 16) table built once (a block_size), sliced [:n, :n]
        return wrong_causal_mask(16)[:n, :n]
    if mistake == "additive":  # 0 where allowed, -inf above the diagonal (PyTorch's float mask)
        return torch.full((n, n), float("-inf")).triu(1)
    mask = {
        "triu": ones.triu(),
        "no_diagonal": ones.tril(-1),
        "tril_above": ones.tril(1),
        "first_row_empty": ones.tril() * (torch.arange(n) > 0)[:, None],  # a loop from i = 1
        "last_row_empty": ones.tril() * (torch.arange(n) < n - 1)[:, None],  # range(n - 1)
    }.get(mistake, ones.tril())
    return ~mask if mistake == "inverted" else mask


@register
class CausalMask(Task):
    """True on and below the diagonal, (n, n) bool."""

    id = "ex05.causal_mask"
    lesson = f"{LESSON}, section 'The causal mask'"
    reference = "course_lib.masking.causal_mask"
    mistake_table = CAUSAL_MISTAKES
    wrong = staticmethod(wrong_causal_mask)

    def diagnose(self, got, want, case):
        size = got.shape[0] if isinstance(got, torch.Tensor) and got.dim() == 2 else None
        if size and got.shape == (size, size) and size != case.args[0]:  # any table size
            if torch.equal(got.bool(), torch.ones(size, size, dtype=torch.bool).tril()):
                return (
                    f"your mask is ({size}, {size}) for n={case.args[0]}: it comes from a table "
                    "of a fixed size (a block_size table, sliced [:n, :n] or not sliced): build "
                    "it for the n you are given, torch.ones(n, n, dtype=torch.bool).tril()"
                )
        return _not_bool(self, got, want, case)

    def cases(self, gen):
        return [Case(f"n={n}", (n,)) for n in (5, 2, 8, 1, 40)]


PADDING_MISTAKES = {
    "inverted": "your mask is inverted: True must mark the real tokens (may be attended to) and "
    "False the padding; use ids != pad_id",
    "from_lengths": "a mask built from each row's number of real tokens assumes the padding comes "
    "last; compare every id with pad_id instead (ids != pad_id), wherever it sits",
    "first_pad": "a mask that is True up to each row's first padding token assumes the padding "
    "comes last; compare every id with pad_id instead (ids != pad_id), wherever it sits",
    "no_middle": "the middle dimension is missing: return shape (batch, 1, seq), so that the mask "
    "broadcasts over the query axis of the (batch, n_q, n_k) scores (unsqueeze(1))",
    "wrong_axis": "the 1 is in the wrong place: (batch, seq, 1) would mask query ROWS; the "
    "padding tokens are keys, so the shape is (batch, 1, seq)",
    "front": "the 1 is in front: (1, batch, seq) would line up the batch with the query axis of "
    "the (batch, n_q, n_k) scores; it goes in the middle, (batch, 1, seq): unsqueeze(1)",
    "long": "the mask must be a bool tensor (True/False), not integers: ids != pad_id is one",
    "zero": "you compared with 0; compare with the pad_id argument",
    "greater": "a real id can be smaller than pad_id: mark the padding with ids != pad_id, not "
    "ids > pad_id",
    "lengths_le": "arange(seq) <= lengths is True at one position too many: with n real tokens "
    "the real positions are 0 .. n-1 (arange(seq) < n), so the first padding token was let in. "
    "Simpler, and right wherever the padding sits: ids != pad_id",
    "lengths_from_1": "arange(1, seq + 1) < lengths is True at one position too few: counted "
    "from 1, the real positions are 1 .. n (<= n), so the last real token was dropped. Simpler, "
    "and right wherever the padding sits: ids != pad_id",
    "expanded": "you expanded the mask to (batch, seq, seq): keep the 1 in the middle, (batch, 1, "
    "seq); broadcasting spreads it over the queries, whatever their number (cross-attention has "
    "n_q != n_k, so a mask expanded to seq queries would not fit)",
}


def wrong_padding_mask(ids, pad_id, *, mistake=""):
    """(ids != pad_id).unsqueeze(1) with one named mistake."""
    if mistake in ("from_lengths", "lengths_le", "lengths_from_1"):  # the padding assumed last
        lengths, positions = (ids != pad_id).sum(1, keepdim=True), torch.arange(ids.shape[1])
        real = {  # <= for <, or positions counted from 1 with <
            "lengths_le": positions <= lengths,
            "lengths_from_1": positions + 1 < lengths,
        }.get(mistake, positions < lengths)
    elif mistake == "first_pad":  # real up to the first pad (argmax of ids == pad_id), or all
        first = torch.where((ids == pad_id).any(1), (ids == pad_id).int().argmax(1), ids.shape[1])
        real = torch.arange(ids.shape[1]) < first[:, None]
    else:
        compare = {"inverted": ids == pad_id, "zero": ids != 0, "greater": ids > pad_id}
        real = compare.get(mistake, ids != pad_id)
    if mistake == "no_middle":
        return real
    mask = real.unsqueeze({"wrong_axis": -1, "front": 0}.get(mistake, 1))
    if mistake == "expanded":  # .expand(-1, seq, -1): one row per query, as the scores have
        return mask.expand(-1, ids.shape[1], -1)
    return mask.long() if mistake == "long" else mask


@register
class PaddingMask(Task):
    """True at the real tokens, False at the padding, shape (batch, 1, seq)."""

    id = "ex05.padding_mask"
    lesson = f"{LESSON}, section 'Padding masks'"
    reference = "course_lib.masking.padding_mask"
    mistake_table = PADDING_MISTAKES
    wrong = staticmethod(wrong_padding_mask)

    def cases(self, gen):
        return [
            Case("ids (3, 6), lengths [6, 4, 2], pad_id=0", (padded_ids(gen, [6, 4, 2], 6, 0), 0)),
            Case("ids (2, 5), lengths [3, 5], pad_id=5 (padding need not be 0; real ids on both "
                 "sides of it)",
                 (_around_pad(padded_ids(gen, [3, 5], 5, 5), 5), 5)),
            Case("ids (1, 4) without padding, pad_id=0", (padded_ids(gen, [4], 4, 0), 0)),
            Case("int32 ids (4, 7), lengths [7, 1, 3, 0] (the last sequence is all padding)",
                 (padded_ids(gen, [7, 1, 3, 0], 7, 0, dtype=torch.int32), 0)),
            Case("ids (3, 6) padded on the LEFT, lengths [4, 6, 2], pad_id=0 (some tokenizers "
                 "pad in front)",  # the first case's shape, other lengths: no cache by shape
                 (padded_ids(gen, [4, 6, 2], 6, 0).flip(-1), 0)),
        ]  # fmt: skip

    def diagnose(self, got, want, case):
        ids, pad_id = case.args  # the first case's shape: a mask kept from that call?
        first = lengths_mask([6, 4, 2], 6)  # the first case's mask (its ids are never pad_id)
        if ids.shape == (3, 6) and not torch.equal(want, first) and isinstance(got, type(ids)):
            if got.shape == first.shape and torch.equal(got.bool(), first):
                return (
                    "your mask is the one of an earlier call with ids of this shape (lengths "
                    "[6, 4, 2]), not this call's: a mask kept between calls (a cache keyed on the "
                    "shape, a default argument, a global) goes stale when the ids change; build "
                    "it from the ids you are given, (ids != pad_id).unsqueeze(1)"
                )
        return _not_bool(self, got, want, case)


def wrong_masked_attention(q, k, v, mask, *, mistake=""):
    """The textbook version, softmax(q k^T / sqrt(d_k) with -inf where masked) v, or one with a
    named mistake; "" leaves a fully masked row NaN (the mistake "nan_rows"), the other
    mistakes give such a row zero weights, as the task asks."""
    if mistake == "heads_axis":  # lesson 03's habit: an axis for the heads, (batch, 1, 1, n_k)
        mask = mask.unsqueeze(1)
    if mistake == "squeezed":  # (batch, 1, n_k) -> (batch, n_k), read as (n_q, n_k)
        mask = mask.squeeze(1) if mask.dim() > 2 else mask
    if mistake == "transposed_mask":  # mask.mT: query and key axes swapped
        mask = mask.transpose(-2, -1)
    if mistake == "any_blocked":  # (~mask).any(-1): one blocked key, not none allowed
        scores = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).masked_fill(~mask, float("-inf"))
        scores = scores.masked_fill((~mask).any(-1, keepdim=True), 0.0)
        weights = scores.softmax(-1).masked_fill(~mask, 0.0)
        return weights @ v, weights
    if mistake == "added_bool":  # scores + mask: the bool mask added as 0/1, blocking nothing
        weights = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5 + mask).softmax(-1)
        return weights @ v, weights
    if mistake == "no_keepdim":  # the finite-row guard from mask.any(-1) without keepdim=True
        scores = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).masked_fill(~mask, float("-inf"))
        weights = scores.masked_fill(~mask.any(-1), 0.0).softmax(-1).masked_fill(~mask, 0.0)
        return weights @ v, weights
    if mistake == "renormalised":  # softmax over every key, masked ones zeroed, rows rescaled
        weights = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).softmax(-1) * mask
        weights = weights / weights.sum(-1, keepdim=True).clamp_min(1e-30)
        return weights @ v, weights
    if mistake == "bool_index":  # boolean indexing does not broadcast the mask: it raises
        (q @ k.transpose(-2, -1))[~mask] = float("-inf")
    if mistake == "transpose_1_2":  # so that wrong_attention's k.transpose(-2, -1) is (1, 2)
        k = k.transpose(1, 2).transpose(-2, -1)
    if mistake == "dot_t":  # k.T, exercise 02's 2-D habit: every axis reversed
        k = k.permute(*reversed(range(k.dim()))).transpose(-2, -1)
    if mistake == "eps_in_sum":  # exp(s - max) * mask by hand, + 1e-9 for fully masked rows
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        e = (scores - scores.amax(-1, keepdim=True)).exp() * mask
        weights = e / (e.sum(-1, keepdim=True) + 1e-9)
        return weights @ v, weights
    if mistake == "float32_softmax":  # F.softmax(s, -1, dtype=torch.float32).to(q.dtype)
        scores = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).masked_fill(~mask, float("-inf"))
        weights = scores.softmax(-1, dtype=torch.float32).nan_to_num(0.0).to(q.dtype)
        return weights @ v, weights
    if mistake.startswith("no_max"):  # a softmax by hand, exp / (sum + eps), no max subtracted
        e = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).masked_fill(~mask, float("-inf")).exp()
        weights = e / (e.sum(-1, keepdim=True) + 1e-9)
        weights = weights.nan_to_num(0.0) if mistake == "no_max_nan_to_num" else weights
        return weights @ v, weights
    output, weights = wrong_attention(
        q,
        k,
        v,
        mask,
        scale={
            "unscaled": 1,
            "by_d_k": q.shape[-1] ** 2,  # scores / d_k: the root forgotten
            # torch.sqrt(torch.tensor(d_k, dtype=torch.float32)): a float32 root, squared here
            "float32_root": float(torch.tensor(float(q.shape[-1])).sqrt()) ** 2,
            "scaled_by_d_v": v.shape[-1],
            "half_d_k": (q.shape[-1] / 2) ** 2,
            "twice_d_k": (2 * q.shape[-1]) ** 2,
            "d_k_from_shape_1": q.shape[1],
            "d_k_from_shape_2": q.shape[2],
            "times_sqrt": 1 / q.shape[-1],  # scores * sqrt(d_k)
        }.get(mistake),
        fill={"fill_zero": 0.0, "large_negative": -1e9, "output_first": -1e9}.get(
            mistake, float("-inf")
        ),
        dim=-2 if mistake == "softmax_over_queries" else -1,
        inverted=mistake == "inverted",
        zero_after=mistake == "zero_after",
        nan_to_zero=mistake
        in (
            "inverted",
            "unscaled",
            "by_d_k",
            "float32_root",
            "scaled_by_d_v",
            "softmax_over_queries",
            "detached_weights",
            "swapped",
            "transposed_mask",
        ),
    )
    if mistake == "output_first":  # uniform rows already multiplied into the output
        weights = weights.masked_fill(~mask, 0.0)
    if mistake == "detached_weights":  # the weights cut from q and k: only v would learn
        weights = weights.detach()
        output = weights @ v
    return (weights, output) if mistake == "swapped" else (output, weights)


def _right_output(result, q, k, v, mask) -> bool:
    """The output is right and the weights hold no NaN (a learner who cleaned only the output
    is told about the NaN weights by `diagnose`, not that the outputs are right)."""
    out, weights = result[0], result[1] if len(result) > 1 else None
    if isinstance(weights, torch.Tensor) and weights.isnan().any():
        return False
    with torch.no_grad():  # not the course's function: the learner's call is being watched
        want = wrong_masked_attention(q, k, v, mask)[0].nan_to_num(0.0)
    return out.shape == want.shape and torch.allclose(out.detach(), want, rtol=1e-4, atol=1e-5)


NO_QK_GRADIENT = (
    "your weights carry no gradient back to q and k (torch.no_grad(), .detach() or a "
    "torch.tensor(...) cut them), so in a model the queries and keys could never learn: compute "
    "the weights with tensor operations on the scores, and replace the NaN of a fully masked row "
    "with torch.nan_to_num or masked_fill, which keep the gradient"
)


ATTENTION_MISTAKES = {  # "renormalised" first: on its case "zero_after" gives the same
    "renormalised": RENORMALISED_HINT,
    "zero_after": "you zeroed the masked weights AFTER the softmax without renormalising, so the "
    "rows no longer sum to 1. Fill the masked SCORES with -inf before the softmax",
    "fill_zero": "you filled the masked scores with 0 (scores * mask does that), but exp(0) = 1: "
    "masked keys still get weight. Fill them with -inf, whose exp is exactly 0: "
    "scores.masked_fill(~mask, float('-inf'))",
    "nan_rows": "a fully masked row is softmax of all -inf = 0/0 = NaN. Give such rows zero "
    "weights and a zero output (e.g. softmax of a finite row, then zero the masked weights)",
    "large_negative": "a large negative fill (-1e9) works for partly masked rows, but a fully "
    "masked row becomes uniform (1/n_k each); such a row must get zero weights and zero output: "
    "fill with -inf, then turn the NaN of a fully masked row into 0 (torch.nan_to_num)",
    "inverted": "your mask is inverted: True means 'may attend' here (as in "
    "F.scaled_dot_product_attention), not 'blocked' (as in nn.MultiheadAttention): fill the "
    "scores with -inf where the mask is False",
    "unscaled": "the scores are not divided by sqrt(d_k): divide q k^T by it before the softmax",
    "by_d_k": "you divided the scores by d_k; divide them by its square root, math.sqrt(d_k) "
    "(or d_k ** 0.5)",
    "swapped": "the return order is swapped: return (output, weights), the output first",
    "float32_root": "your sqrt(d_k) is a float32 number (torch.sqrt(torch.tensor(d_k, "
    "dtype=torch.float32)), or a .float() on it), so float64 scores are divided by a rounded "
    "scale and lose float64's precision: use a Python number, math.sqrt(d_k) or d_k ** 0.5",
    "float32_softmax": "your softmax ran in float32 (softmax(..., dtype=torch.float32), or "
    ".float() before it) and was cast back to q's dtype, so float64 weights keep only float32's "
    "precision (about 1e-7): run the softmax in q's dtype, with no dtype= and no .float()",
    "scaled_by_d_v": (D_V_SCALE_HINT),
    "softmax_over_queries": "the softmax runs over the keys, the last axis (dim=-1) of the "
    "(..., n_q, n_k) scores, so that each query's weights sum to 1; over dim=-2 each key's "
    "column sums to 1 instead",
    "output_first": "the weights of a fully masked row are zero, but the output was computed "
    "before they were: two right steps in the wrong order. Fix the weights first (zero for a "
    "row with no allowed key), then output = weights @ v",
    **{
        mistake: "exp of a score near 200 overflows float32 to inf, and inf / inf is NaN: "
        "subtract each row's maximum before exp (as your softmax of exercise 02 does), or use "
        f"that softmax{tail}"
        for mistake, tail in [
            ("no_max", ""),
            ("no_max_nan_to_num", " (nan_to_num turned those NaN into zero weights)"),
        ]
    },
    "eps_in_sum": "the 1e-9 added to the row sums keeps a fully masked row at 0 / 1e-9 = 0, but "
    "every other row then sums to a little less than 1, which float64 sees: fill the masked "
    "scores with -inf before the softmax, then turn a fully masked row's NaN into 0 (nan_to_num)",
    "half_d_k": POWER_HALF,
    "twice_d_k": POWER_HALF,
    "d_k_from_shape_1": D_K_FROM_SHAPE_1,
    "d_k_from_shape_2": D_K_FROM_SHAPE_2,
    "times_sqrt": "you multiplied the scores by sqrt(d_k); divide them: q k^T / sqrt(d_k) (or "
    "multiply by d_k ** -0.5)",
    "bool_index": "scores[~mask] = -inf needs a mask of exactly the scores' shape (boolean "
    "indexing does not broadcast): scores.masked_fill(~mask, float('-inf')) broadcasts it",
    "transpose_1_2": "k.transpose(1, 2) swaps the last two axes only when k is 3-D; with heads, "
    "(batch, heads, seq, d), it moves the heads axis: use k.transpose(-2, -1)",
    "dot_t": "k.T reverses every axis of a batch of keys (the batch axis ends up last): "
    "transpose only the last two, k.transpose(-2, -1)",
    "detached_weights": NO_QK_GRADIENT,
    "heads_axis": "the mask already lines up with the (..., n_q, n_k) scores from the right, as "
    "given: use it as it is; mask.unsqueeze(1) moves its axes onto other ones of the scores",
    "no_keepdim": "mask.any(dim=-1) drops the key axis, so it no longer lines up with the "
    "(..., n_q, n_k) scores: mask.any(dim=-1, keepdim=True) is (..., n_q, 1), one flag per "
    "query row",
    # after no_keepdim: on the heads case both raise the same broadcast error
    "squeezed": "you squeezed the mask's axis of size 1: a padding mask (batch, 1, n_k) becomes "
    "(batch, n_k), which lines up with the (n_q, n_k) axes of the scores, so query i reads "
    "sentence i's padding; use the mask as given: its 1 broadcasts over the queries",
    "transposed_mask": "you transposed the mask: its rows are the queries and its columns the "
    "keys, as in the (..., n_q, n_k) scores (mask[i, j] is True when query i may attend key j), "
    "so use it as given, without .T, .mT or transpose(-2, -1)",
    "any_blocked": "(~mask).any(-1) is True for every row with ONE blocked key, so you treated "
    "those rows as fully masked; a fully masked row is one with NO allowed key: ~mask.any(-1, "
    "keepdim=True) (any first, then ~), or (~mask).all(-1, keepdim=True)",
    "added_bool": "adding the bool mask to the scores adds 1 to the allowed ones and 0 to the "
    "blocked ones, which blocks nothing (only a float 0/-inf mask is meant to be added): fill "
    "the blocked scores with -inf, scores.masked_fill(~mask, float('-inf'))",
}


@register
class MaskedAttention(Task):
    id = "ex05.masked_attention"
    lesson = f"{LESSON}, sections '-inf before the softmax' and 'A fully masked row'"
    reference = "course_lib.attention.scaled_dot_product_attention"
    backward = True  # q, k and v are learned: its gradients are judged too
    mistake_table = ATTENTION_MISTAKES
    wrong = staticmethod(wrong_masked_attention)
    forbidden = (
        "torch.nn.functional.scaled_dot_product_attention",
        "torch.nn.functional.multi_head_attention_forward",
        "torch.nn.MultiheadAttention",
    )

    def cases(self, gen):
        f64 = torch.float64
        causal4 = torch.ones(4, 4, dtype=torch.bool).tril()
        some_rows_blocked = torch.ones(3, 5, dtype=torch.bool).tril(1)
        some_rows_blocked[1] = False  # query 1 may attend to nothing
        f64_causal = Case(
            "float64 q (2, 4, 6), k, v (2, 4, 6), causal mask (4, 4); in batch row 0 the output "
            "of query 1 is 0 (its two values cancel)",
            (*randns(gen, *[(2, 4, 6)] * 3, dtype=f64), causal4),
        )
        q, k, v = f64_causal.args[:3]  # query 1 scores keys 0 and 1 as exactly [1, 0], so a
        q[0, 1], k[0, :2] = 0.0, 0.0  # float32 sqrt(d_k) moves its zero output under every seed
        q[0, 1, 0], k[0, 0, 0] = 6**0.5, 1.0
        w = torch.tensor([1.0, 0.0], dtype=f64).softmax(0)
        v[0, 0], v[0, 1] = 10 * w[1], -10 * w[0]
        return [
            Case("q, k, v (2, 4, 8), a causal mask (4, 4)",
                 (*randns(gen, (2, 4, 8), (2, 4, 8), (2, 4, 8)), causal4)),
            Case("n_q=3 != n_k=6: q (3, 3, 8), k (3, 6, 8), v (3, 6, 5), "
                 "a padding mask (3, 1, 6) with lengths [6, 4, 2]",
                 (*randns(gen, (3, 3, 8), (3, 6, 8), (3, 6, 5)), lengths_mask([6, 4, 2], 6))),
            Case("heads: q, k, v (2, 3, 5, 4) (batch, heads, seq, d_head), mask (2, 1, 1, 5)",
                 (*randns(gen, *[(2, 3, 5, 4)] * 3), lengths_mask([5, 3], 5).unsqueeze(1))),
            f64_causal,
            Case("a fully masked row: q (2, 3, 4), k, v (2, 5, 4), mask (3, 5) whose row 1 is "
                 "all False",
                 (*randns(gen, (2, 3, 4), (2, 5, 4), (2, 5, 4)), some_rows_blocked)),
            Case("a sequence that is all padding: q, k, v (3, 4, 4), mask (3, 1, 4) with "
                 "lengths [4, 0, 2] (every row of the second sequence is fully masked)",
                 (*randns(gen, *[(3, 4, 4)] * 3), lengths_mask([4, 0, 2], 4))),
            Case("float64, padding & causal combined (2, 5, 5), lengths [5, 3]",
                 (*randns(gen, (2, 5, 8), (2, 5, 8), (2, 5, 3), dtype=f64),
                  lengths_mask([5, 3], 5) & torch.ones(5, 5, dtype=torch.bool).tril())),
            Case("large scores: q, k (2, 4, 4) near 10, so every score is about 200 (exp(200) "
                 "overflows float32), v (2, 4, 4), causal mask (4, 4)",
                 (*(10.0 + t for t in randns(gen, (2, 4, 4), (2, 4, 4))), randns(gen, (2, 4, 4))[0],
                  causal4)),
            Case("a blocked key scoring 300 above the allowed one: q (1, 2, 4) of 10s, keys 0 "
                 "and 15s, causal mask (2, 2) (query 0 may attend key 0 only)",
                 (torch.full((1, 2, 4), 10.0), torch.tensor([[[0.0] * 4, [15.0] * 4]]),
                  torch.arange(6.0).view(1, 2, 3), torch.ones(2, 2, dtype=torch.bool).tril())),
        ]  # fmt: skip

    def call(self, obj, case):
        q, k, v, mask = case.args  # the learner's own copies: gradients may flow into them
        for t in (q, k, v):
            t.requires_grad_(True)
        result = obj(q, k, v, mask)
        out = result[0] if isinstance(result, (tuple, list)) and result else None
        if isinstance(out, torch.Tensor) and out.is_floating_point() and not out.requires_grad:
            raise GradingError(
                "your output carries no gradient (torch.no_grad(), .detach() or .item() cut it "
                "from q, k and v): training back-propagates through this function"
            )
        if isinstance(out, torch.Tensor) and out.requires_grad and bool(out.isfinite().all()):
            try:
                out.sum().backward()
            except RuntimeError as error:  # weights[weights.isnan()] = 0 on the softmax's output
                if "modified by an inplace operation" not in str(error):
                    raise
                raise GradingError(
                    "your code changes in place a tensor that the backward pass still needs "
                    "(weights[...] = 0 or a method ending in _ on the softmax's output), so "
                    "training cannot back-propagate through it: build a new tensor instead, "
                    "torch.nan_to_num(weights) or weights.masked_fill(...)"
                ) from None
            if q.grad is None or k.grad is None:
                raise GradingError(NO_QK_GRADIENT)
            nan_grad = not all(
                bool(t.grad.isfinite().all()) for t in (q, k, v) if t.grad is not None
            )
            if nan_grad and _right_output(result, q, k, v, mask):
                raise GradingError(
                    "your outputs are right, but the gradients through a fully masked row are "
                    "NaN, so one such row would poison a whole training step: put the -inf in "
                    "with scores.masked_fill(~mask, -inf), whose backward gives the masked scores "
                    "no gradient (adding a 0/-inf mask to the scores, or log(mask), passes the "
                    "NaN back into q and k; so does a softmax over every key whose masked weights "
                    "are zeroed and whose rows are then rescaled, weights / weights.sum(-1), "
                    "0/0 in such a row even after nan_to_num), and replace the NaN of an all "
                    "-inf softmax before anything else uses it"
                )
        return self.learnable(obj, case, result)

    def diagnose(self, got, want, case):
        if not (isinstance(got, (tuple, list)) and len(got) == 2):
            return "return a tuple (output, weights)"
        weights = got[1]
        if not isinstance(weights, torch.Tensor) or weights.shape != want[1].shape:
            return None
        if want[1].dtype == torch.float64 and torch.float32 in (weights.dtype, got[0].dtype):
            return (  # the generic dtype hint speaks of tensors created without dtype=
                "your result is float32 on float64 q, k and v: compute in q's dtype, with no "
                ".float() or .to(torch.float32) (nor softmax(..., dtype=torch.float32)) on the "
                "scores or the weights, and dtype=q.dtype for a tensor you create"
            )
        mask = case.args[3].expand(weights.shape)
        if (weights.isnan() & mask.any(-1, keepdim=True)).any():  # not a fully masked row's
            return (
                "your weights contain NaN in a row that has an allowed key: exp of a large score "
                "overflows to inf (inf / inf, or inf * 0 where a mask multiplies it), or every "
                "allowed exp underflowed to 0 (0 / 0): fill the masked scores with -inf, then "
                "subtract each row's maximum before exp (as your softmax of exercise 02 does)"
            )
        if torch.isnan(weights).any():
            return (
                "your weights contain NaN: a fully masked row needs zero weights, not "
                "softmax of all -inf"
            )
        leaks = (weights.abs() > 1e-6) & ~mask
        if leaks.any() and not leaks[mask.any(-1)].any():  # mask | ~mask.any(-1): every key
            return (
                "only your fully masked rows give weight to blocked keys: such a row gets zero "
                "weights and a zero output, not weights over every key (fill -inf, then make "
                "that row's NaN 0)"
            )
        if leaks.any():
            return "some masked positions get non-zero weight: block them before the softmax"
        sums = weights.double().sum(-1)
        any_key = mask.any(-1)
        if not torch.allclose(sums[any_key], torch.ones_like(sums[any_key]), atol=1e-4):
            return (
                "the rows that have at least one allowed key must sum to 1 (zeroing the masked "
                "weights after the softmax, or multiplying them by the mask, leaves them short): "
                "fill the masked scores with -inf before the softmax"
            )
        if (sums[~any_key].abs() > 1e-6).any():
            return "a fully masked row must have all-zero weights"
        if compare_values(weights, want[1]) is None:  # the output came from other weights
            return (
                "your weights are right but your output is not: output = weights @ v, with "
                "these final weights (masked, zero for a fully masked row)"
            )
        return None


# --------------------------------------------------------------------------------------------
# ex05.prefix_lm_mask (transfer: a mask the lesson does not build)
# --------------------------------------------------------------------------------------------


def _prefix_variant(ids, prefix_lengths, pad_id, *, mistake=""):
    batch, seq = ids.shape
    if ((prefix_lengths < 0) | (prefix_lengths > seq)).any():
        raise ValueError("prefix length out of range")
    i = torch.arange(seq)[:, None]  # queries
    j = torch.arange(seq)[None, :]  # keys
    p = prefix_lengths[:, None, None]
    in_prefix = {
        "off_by_one": j <= p,
        "one_short": j < p - 1,
        "first_row": j < prefix_lengths[0],  # every row gets the first row's prefix
        "queries": i < p,  # a query in the prefix sees every key, also the future
        "one_axis_short": j < prefix_lengths[:, None],  # (batch, seq): meets (seq, seq) badly
        "no_prefix": torch.zeros(1, 1, 1, dtype=torch.bool),
        "tril_p": torch.zeros(1, 1, 1, dtype=torch.bool),
    }.get(mistake, j < p)
    causal = {"no_diagonal": j < i, "triu": j >= i, "tril_p": j <= i + p}.get(mistake, j <= i)
    allowed = (in_prefix & causal) if mistake == "and" else (in_prefix | causal)
    if mistake == "no_padding":
        return allowed
    real = ids != (0 if mistake == "pad_zero" else pad_id)  # (batch, seq)
    if mistake in ("from_lengths", "lengths_le"):  # the padding assumed last: the first keys
        lengths = real.sum(1, keepdim=True)
        real = (
            torch.arange(seq) <= lengths if mistake == "lengths_le" else torch.arange(seq) < lengths
        )
    if mistake == "or_padding":  # (prefix | causal) | real: every real key, the future too
        return allowed | real[:, None]
    if mistake == "padding_first":  # (causal & padding) | prefix: the prefix lets pads back in
        return (causal & real[:, None]) | in_prefix
    return allowed & (real[:, :, None] if mistake == "padding_on_queries" else real[:, None])


PREFIX_MISTAKES = {
    "off_by_one": "the prefix is one key too long: with prefix length P the prefix is keys 0 .. "
    "P-1, so key j is in it when j < P, not j <= P",
    "one_short": "the prefix is one key too short: with prefix length P the prefix is keys 0 .. "
    "P-1, so key j is in it when j < P, not j < P - 1",
    "no_diagonal": "after the prefix a query may still attend to itself: the causal part allows j "
    "<= i, not j < i",
    "and": "a key is allowed when it is in the prefix OR not in the future (j < P or j <= i): you "
    "combined the two with AND",
    "first_row": "every row has its own prefix length: compare the keys with prefix_lengths[:, "
    "None, None], not with one row's length. In a loop over the rows, one mask shared by them "
    "does the same: m = causal_mask(seq) cached (lru_cache) or sliced from one table, then m[:, "
    ":P] = True writes into it for every later row and call; edit a copy, .clone()",
    "no_padding": "padding is ignored: no query may attend a key that is padding; AND your mask "
    "with (ids != pad_id) over the key axis, shape (batch, 1, seq)",
    "queries": "you tested the query's position against the prefix, so a query inside the prefix "
    "sees every later key (the text it must predict); what is bidirectional is the prefix's keys: "
    "query i may attend key j when j < P or j <= i",
    "padding_on_queries": "the padding mask belongs on the key axis (the last one): (ids != "
    "pad_id) of shape (batch, 1, seq), not (batch, seq, 1), neither instead nor as well: a "
    "padded query keeps the keys the prefix and causal rule give it",
    "one_axis_short": "prefix_lengths[:, None] is (batch, 1), so key < P gives a (batch, seq) "
    "mask, which does not line up with the (seq, seq) causal one: give P a query axis as well, "
    "prefix_lengths[:, None, None] of shape (batch, 1, 1)",
    "pad_zero": "the padding is compared with 0; compare the ids with the pad_id argument "
    "(ids != pad_id), which need not be 0",
    "triu": "your causal part is the upper triangle (j >= i), so a query after the prefix sees "
    "the future: it may attend key j <= i (and the keys of the prefix)",
    "no_prefix": "that is the causal mask with padding; inside its prefix a row is bidirectional: "
    "every query may attend every key j < prefix_lengths[b]",
    "tril_p": "tril(diagonal=P) lets every query i see P keys past itself (j <= i + P), the "
    "future too, at every position: the prefix is the keys j < P, open to every query, and "
    "after them the causal rule j <= i: (j < P) | (j <= i)",
    "from_lengths": PADDING_MISTAKES["from_lengths"],
    "lengths_le": PADDING_MISTAKES["lengths_le"],
    "or_padding": "you combined the padding mask with | (OR), so every real key is let in, the "
    "future ones too: a key is allowed when it is real AND (in the prefix OR not in the future): "
    "((j < P) | (j <= i)) & (ids != pad_id), with & for the padding",
    "padding_first": "two right steps in the wrong order: the padding was blocked before the "
    "prefix was let in, so a prefix that covers padding (P longer than the real tokens) opens "
    "the padded keys again. Combine the prefix and causal parts first, (j < P) | (j <= i), then "
    "AND the padding mask (ids != pad_id) into the result, last (in one line, mind that & binds "
    "tighter than |: prefix | causal & real is prefix | (causal & real); write (prefix | causal) "
    "& real)",
}


@register
class PrefixLMMask(Task):
    id = "ex05.prefix_lm_mask"
    lesson = f"{LESSON}, section 'Combining padding and causal masks'"
    reference = "course_lib.masking.prefix_lm_mask"
    mistake_table = PREFIX_MISTAKES
    wrong = staticmethod(_prefix_variant)

    def diagnose(self, got, want, case):
        ids, lengths, pad_id = case.args  # the first case's shape, the first case's lengths?
        first = torch.tensor([3, 2])
        if ids.shape == (2, 6) and not torch.equal(lengths, first) and isinstance(got, type(ids)):
            if torch.equal(got, _prefix_variant(ids, first, pad_id)):
                return (
                    "your mask holds the prefix lengths [3, 2] of an earlier call with ids of "
                    "this shape, not this call's: a mask kept between calls (a cache keyed on the "
                    "shape, a default argument, a global) must not hold what depends on "
                    "prefix_lengths; build the prefix part from the prefix_lengths you are given"
                )
        return _not_bool(self, got, want, case)

    depends_on = ("causal_mask", "padding_mask")
    forbidden = (
        "course_lib.masking.causal_mask",
        "course_lib.masking.padding_mask",
        "course_lib.masking.combine_masks",
    )

    def call(self, obj, case):
        try:
            return super().call(obj, case)
        except ValueError:  # a check `P >= seq` for `P > seq` (or `P <= 0`): boundaries allowed
            ids, prefix_lengths, _ = case.args
            edges = (prefix_lengths == 0) | (prefix_lengths == ids.shape[1])
            if case.raises or not bool(edges.any()):
                raise
            raise GradingError(
                "your code raised a ValueError for an allowed prefix length: P = 0 (a causal row) "
                "and P = seq (the whole row is the prefix) are both allowed: raise only when "
                "P < 0 or P > seq"
            ) from None

    def cases(self, gen):
        p = torch.tensor
        return [
            Case("ids (2, 6), lengths [6, 6] (no padding), prefix_lengths [3, 2], pad_id=0",
                 (padded_ids(gen, [6, 6], 6, 0), p([3, 2]), 0)),
            Case("ids (3, 7), lengths [7, 5, 3], prefix_lengths [2, 4, 1], pad_id=0",
                 (padded_ids(gen, [7, 5, 3], 7, 0), p([2, 4, 1]), 0)),
            Case("ids (4, 5), lengths [5, 4, 5, 2], prefix_lengths [0, 5, 1, 2] (0 = causal, "
                 "5 = all bidirectional), pad_id=2",
                 (padded_ids(gen, [5, 4, 5, 2], 5, 2), p([0, 5, 1, 2]), 2)),
            Case("int32 ids (1, 8), length 6, prefix_lengths [7] (the prefix covers padding), "
                 "pad_id=1",
                 (padded_ids(gen, [6], 8, 1, dtype=torch.int32), p([7]), 1)),
            Case("ids (2, 1) (one token), lengths [1, 1], prefix_lengths [1, 0], pad_id=0",
                 (padded_ids(gen, [1, 1], 1, 0), p([1, 0]), 0)),
            Case("ids (2, 4), prefix_lengths [2, 5]: 5 > seq=4, so a ValueError",
                 (padded_ids(gen, [4, 4], 4, 0), p([2, 5]), 0), raises=ValueError),
            Case("ids (2, 4), prefix_lengths [-1, 2]: negative, so a ValueError",
                 (padded_ids(gen, [4, 4], 4, 0), p([-1, 2]), 0), raises=ValueError),
            Case("ids (2, 6) padded on the LEFT, lengths [4, 6], prefix_lengths [5, 1], "
                 "pad_id=0 (some tokenizers pad in front)",  # the first case's shape, other
                 (padded_ids(gen, [4, 6], 6, 0).flip(-1), p([5, 1]), 0)),  # P: no cache by shape
        ]  # fmt: skip


# --------------------------------------------------------------------------------------------
# ex05.dependency_matrix (transfer: the lesson's causality test, for every position at once)
# --------------------------------------------------------------------------------------------


class _Probe(torch.nn.Module):
    """A function for the learner's dependency_matrix to read: one attention head over x
    (batch, seq, d) -> (batch, seq, d_out) with a fixed bool mask, (seq, seq) or (batch, seq,
    seq), True = may attend. A query that may attend to nothing gives 0 (and a gradient of 0);
    with `skip_feature_0`, feature 0 of x is never read; with `centred`, only differences of
    features (x - x.flip(-1)), blind to adding one number to all; with `faint` (a position),
    that position is read at 1e-3 of its size, so its dependencies move outputs by less than 1e-2.
    A module, so cases pickle."""

    def __init__(self, mask, gen, d, d_out, dtype, skip_feature_0=False, centred=False, faint=None):
        super().__init__()
        self.faint = faint
        self.register_buffer("mask", mask)
        self.register_buffer("w_qkv", randn(gen, 3, d, d, dtype=dtype) * d**-0.5)
        self.register_buffer("w_out", randn(gen, d, d_out, dtype=dtype) * d**-0.5)
        self.skip_feature_0, self.centred = skip_feature_0, centred

    def forward(self, x):
        if self.mask.dim() == 3 and len(x) != len(self.mask):  # else it broadcasts silently
            n = len(self.mask)
            raise ValueError(f"this f holds a mask for each of {n} batch rows: call it on all {n}")
        if self.skip_feature_0:
            x = torch.cat((torch.zeros_like(x[..., :1]), x[..., 1:]), dim=-1)
        if self.centred:
            x = x - x.flip(-1)
        if self.faint is not None:
            p = self.faint
            x = torch.cat((x[:, :p], x[:, p : p + 1] * 1e-3, x[:, p + 1 :]), dim=1)
        q, k, v = x @ self.w_qkv[0], x @ self.w_qkv[1], x @ self.w_qkv[2]
        some = self.mask.any(-1, keepdim=True)  # a query that may attend to something
        scores = (q @ k.transpose(-2, -1)) * x.shape[-1] ** -0.5  # no near one-hot rows: an
        scores = scores.masked_fill(~(self.mask | ~some), float("-inf"))  # input matters clearly
        return (scores.softmax(-1) * some) @ v @ self.w_out


def _wrong_dependency_matrix(f, x, *, mistake=""):
    """Change one position at a time and see which outputs move, with one named mistake."""
    if x.dim() != 3:
        raise ValueError("x must be (batch, seq, d)")
    seq = x.shape[1]
    before = f(x)
    change = torch.randn(x.shape[0], x.shape[2], generator=torch.Generator().manual_seed(0))
    depends = torch.zeros(seq, seq, dtype=torch.bool)
    changed = x.clone()
    for j in range(seq):
        if mistake != "accumulated":  # each position's change starts again from x
            changed = x.clone()
        if mistake == "scaled":
            changed[:, j] *= 2
        elif mistake == "constant":
            changed[:, j] += 1
        elif mistake == "one_feature":
            changed[:, j, 0] += 1
        elif mistake == "first_row":
            changed[0, j] += change[0].to(x.dtype)
        else:
            changed[:, j] += change.to(x.dtype)
        after = f(changed)
        if mistake == "summed_features":  # one number per output position: features cancel
            after, before = after.sum(-1, keepdim=True), before.sum(-1, keepdim=True)
        moved = after != before  # (batch, seq, d_out)
        if mistake == "all_features":  # an output moves only when every feature of it moves
            moved = moved.all(-1, keepdim=True)
        if mistake == "first_row":
            moved = moved[:1]
        if mistake == "own_output_only":
            depends[j, j] = moved[:, j].any()
        else:
            depends[:, j] = moved.any(-1).any(0) | (mistake == "summed_outputs" and moved.any())
    if mistake == "diagonal_assumed":
        depends |= torch.eye(seq, dtype=torch.bool)
    if mistake == "lower_only":  # only the outputs i >= j tested, as if f were causal
        depends = depends.tril()
    return {"transposed": depends.T, "float": depends.float()}.get(mistake, depends)


DEPENDENCY_MISTAKES = {
    "transposed": "entry [i, j] says whether OUTPUT position i depends on INPUT position j (a "
    "row per output, a column per input); yours is the transpose: a causal f gives a lower "
    "triangle",
    "own_output_only": "after changing position j, compare every output position with its "
    "value before, not only output j: row i of column j is about output i",
    "summed_outputs": "compare each output position on its own: entry [i, j] is about output i "
    "alone, and asking whether any output moved marks the whole column",
    "accumulated": "each position's change must start again from the original x: yours pile up "
    "(the test of position j still holds the changes of positions 0..j-1), so an output seems "
    "to depend on positions it never reads",
    "all_features": "an output position moves when any one of its features moves (here output "
    "feature 0 is constant): reduce over the features with .any, not .all",
    "scaled": "multiplying position j by a number (or setting it to 0) changes nothing where x is "
    "0 (here position 2 is all zeros): add a change instead, such as x[:, j] + torch.randn(d)",
    "one_feature": "change every feature of position j, not one: f need not read every feature "
    "(this one never reads feature 0)",
    "constant": "add a different amount to each feature (torch.randn(d)): adding the same number "
    "to every feature of position j is invisible to an f that reads only differences of features "
    "(this one; LayerNorm, which subtracts the mean, too)",
    "first_row": "change position j in every batch row and compare every row: a position can "
    "matter in one row and not in another (here keys 3 and 4 are padding in row 0 only)",
    "diagonal_assumed": "an output does not always depend on its own input: test the diagonal "
    "as every other entry. Here position 0 may attend to nothing and gives 0, and position 1 "
    "reads key 0 alone, which gets weight 1 whatever position 1's query is",
    "float": "return a bool tensor, True = depends: build it from comparisons (!=) or with "
    "dtype=torch.bool",
    "lower_only": "you tested only the outputs at or after position j (the lower triangle), as "
    "if every f were causal: test every entry, the future too; here f reads later positions, so "
    "outputs depend on inputs after them (the tool exists to find a mask that leaks)",
    "summed_features": "compare every feature of an output, not their sum: here output feature 1 "
    "is minus feature 0, so the sum never moves (the gradient of y[:, i].sum() is 0 too); use "
    "!= or .abs() per feature, or one gradient per output feature",
}


@register
class DependencyMatrix(Task):
    id = "ex05.dependency_matrix"
    lesson = f"{LESSON}, section 'A causality test'"
    reference = "course_lib.masking.dependency_matrix"
    mistake_table = DEPENDENCY_MISTAKES
    wrong = staticmethod(_wrong_dependency_matrix)

    def call(self, obj, case):
        result = super().call(obj, case)
        if case.args[1].requires_grad:  # x.requires_grad_(): the caller's x now builds graphs
            raise GradingError(
                "your code set requires_grad on the x it was given (x.requires_grad_()), so the "
                "caller's x is changed: every later operation on it builds a graph, and .numpy() "
                "fails. Leave x as it was: take gradients on a copy, x.detach().clone()"
                ".requires_grad_()"
            )
        return result

    def diagnose(self, got, want, case):  # int32 too: this result is no mask
        if _not_bool(self, got, want, case):
            return DEPENDENCY_MISTAKES["float"]
        want = torch.as_tensor(want)
        missed_only = got.shape == want.shape and not (got & ~want).any()
        if case.args[0].centred and missed_only:
            return (  # x[:, j] += 0.1 (rounding noise), grad.sum(-1) != 0: dependencies missed
                "dependencies cancel on this f, which reads only differences of features: change "
                "each feature by its own amount (torch.randn(d)) and compare with != or .abs(), "
                "not a signed sum over features"
            )
        if case.args[0].faint is not None and missed_only:  # isclose(atol=1e-2), allclose
            return (
                "you missed faint dependencies: this f reads position 2 at 1e-3 of its size, so "
                "changing it moves the outputs by less than 1e-2, which a loose comparison "
                "(isclose or allclose with atol=1e-2, abs() > 1e-2) takes for no change. Any "
                "change counts: compare with != (or a gradient with != 0)"
            )
        if missed_only:  # (after - before) > tol: an output that moved down was not counted
            return (
                "you missed dependencies (and marked none too many): an output that moves in "
                "either direction counts, so compare with != or (after - before).abs() > tol"
            )
        return None

    def cases(self, gen):
        def case(description, mask, batch=2, d=8, d_out=8, dtype=torch.float32, **options):
            seq = mask.shape[-1]
            probe = _Probe(mask, gen, d, d_out, dtype, **options).eval()
            return Case(description, (probe, randn(gen, batch, seq, d, dtype=dtype)))

        def on_grid(c):  # x + 1 and each position's mean are exact: no rounding noise
            c.args[1].mul_(16).round_().div_(16)
            return c

        causal = torch.ones(6, 6, dtype=torch.bool).tril()
        padded = torch.ones(2, 5, 5, dtype=torch.bool)
        padded[0, :, 3:] = False  # keys 3 and 4 are padding in row 0 only
        zero_at_2 = case(
            "causal attention over x whose position 2 is all zeros, x (2, 6, 8)", causal
        )
        zero_at_2.args[1][:, 2] = 0
        position_wise = case(
            "each position reads only itself (position-wise), x (2, 4, 8), "
            "d_out 3, output feature 0 constant",
            torch.eye(4, dtype=torch.bool),
            d_out=3,
        )
        position_wise.args[0].w_out[:, 0] = 0  # output feature 0 reads nothing
        cases = [
            position_wise,
            case("causal attention, x (2, 6, 8)", causal),
            case("no mask: every position reads every other, x (1, 4, 8)",
                 torch.ones(4, 4, dtype=torch.bool), batch=1),
            case("a mask that leaks one step into the future (tril(1)), x (2, 5, 8)",
                 torch.ones(5, 5, dtype=torch.bool).tril(1)),
            zero_at_2,
            case("causal attention that never reads feature 0, x (2, 6, 8)", causal,
                 skip_feature_0=True),
            case("keys 3 and 4 are padding in batch row 0 only (no causal mask), x (2, 5, 8)",
                 padded),
            case("the strict past (tril(-1)): position 0 may attend to nothing and gives 0, "
                 "float64 x (3, 5, 6)",
                 torch.ones(5, 5, dtype=torch.bool).tril(-1), batch=3, d=6, dtype=torch.float64),
            on_grid(case("causal attention that reads only differences of features (x - "
                         "x.flip(-1)), x (2, 6, 8) on a grid of 1/16", causal, centred=True)),
            case("one position, x (2, 1, 8)", torch.ones(1, 1, dtype=torch.bool)),
            Case("x of shape (6, 8), 2-D: a ValueError", (torch.nn.Identity(),
                 torch.zeros(6, 8)), raises=ValueError),
        ]  # fmt: skip
        opposed = case(  # drawn last: the cases above keep their values
            "causal attention, x (2, 5, 8), d_out 2: output feature 1 is minus feature 0",
            causal[:5, :5],
            d_out=2,
        )
        opposed.args[0].w_out[:, 1] = -opposed.args[0].w_out[:, 0]  # features sum to exactly 0
        one_feature = case(  # drawn after `opposed`: each dependency moves one number, up or
            "causal attention with one output feature and one batch row, x (1, 6, 8), d_out 1",
            causal,  # down: (after - before) > tol misses about half of its 21 dependencies
            batch=1,
            d_out=1,
        )
        faint = case(  # drawn last: every dependency on position 2 moves outputs by < 1e-2
            "causal attention that reads position 2 at 1e-3 of its size, x (2, 6, 8): a "
            "dependency can be faint",
            causal,
            faint=2,
        )
        # faint before the centred case: a loose comparison misses dependencies there too, and
        # that case's hint speaks of signed sums
        return [*cases[:8], faint, *cases[8:-1], opposed, one_feature, cases[-1]]
