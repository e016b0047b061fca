"""ex05.masked_attention."""

from __future__ import annotations

import torch

from ...core import Case, GradingError, Task, compare_values, register
from ..common import (
    D_K_FROM_SHAPE_2,
    D_V_SCALE_HINT,
    RENORMALISED_HINT,
    lengths_mask,
    randns,
    wrong_attention,
)
from ..ex02 import D_K_FROM_SHAPE_1, POWER_HALF
from ._shared import LESSON


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
