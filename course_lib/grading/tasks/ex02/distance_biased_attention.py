"""ex02.distance_biased_attention (transfer: a bias added to the scores, as in ALiBi):
attention whose scores are lowered by slope * |i - j|."""

from __future__ import annotations

import math

import torch

from ...core import Case, GradingError, Task, register
from ..common import all_close, randn, stable_softmax
from ._shared import (
    F64,
    FLOAT32_SCALE,
    NAN_SHIFT,
    SDPA_LESSON,
    _nan_where_none,
    crash_from_global_sizes,
    refuse_global_sizes,
)
from .scaled_dot_product_attention import POWER_HALF, ScaledDotProductAttention

_SDPA_HINTS = ScaledDotProductAttention.mistake_table

FLOAT32_BIAS = (
    "your bias was computed in float32, which loses digits against float64 scores: integer "
    "distances times a Python float give float32, as does torch.zeros(n_q, n_k) without dtype=, "
    "and torch.tensor(slope) is float32; build the distances in q's dtype "
    "(torch.arange(n, dtype=q.dtype)) and multiply by the number slope"
)


KEPT_SLOPE = (
    "your weights carry a penalty of {s:.4g} per step of distance, but this call's slope is "
    "{slope}: build the bias from the slope you are given, at every call. A bias kept from an "
    "earlier call (a dict cached by (n_q, n_k), a default argument, a global built once) keeps "
    "that call's slope; key a cache by the slope too, or rebuild the bias each time"
)


@register
class DistanceBiasedAttention(Task):
    id = "ex02.distance_biased_attention"
    lesson = SDPA_LESSON
    reference = "course_lib.attention.distance_biased_attention"
    backward = True  # q, k and v are learned: its gradients are judged too
    depends_on = ("softmax",)
    forbidden = ("torch.nn.functional.scaled_dot_product_attention",)
    mistake_table = {
        "plus": "the penalty must LOWER the scores of distant keys: add -slope * |i - j|, not "
        "+slope * |i - j|",
        "no_max": "exp of large scores overflows (inf / inf = NaN): use your stable softmax from "
        "task 1, which subtracts each row's maximum first",
        **dict.fromkeys(
            ("no_abs", "no_abs_reversed"),
            "use the distance |i - j|: without the absolute value the keys on one side of the "
            "query get a bonus instead of a penalty",
        ),
        "squared_distance": "that is the squared distance (i - j)²; the penalty grows linearly "
        "with the distance: slope * |i - j|",
        "bias_scaled": "add the bias after dividing q·k by sqrt(d_k): scores = q k^T / sqrt(d_k) "
        "- slope * |i - j|; the slope must not be divided too",
        "after_softmax": "the bias goes into the scores BEFORE the softmax, so the weights still "
        "sum to 1",
        "no_bias": "that is plain attention: add -slope * |i - j| to each score, with i the "
        "query's position (row) and j the key's (column), an (n_q, n_k) matrix: "
        "torch.arange(n_q)[:, None] - torch.arange(n_k) (two 1-D aranges subtract to zeros)",
        "no_scaling": "the scores are not scaled: divide q k^T by sqrt(d_k), then add the bias",
        "earlier_keys_only": "you penalised only the keys before the query (causal ALiBi, where "
        "the later keys are masked anyway); here every key is penalised by its distance on "
        "either side, slope * |i - j|",
        "keys_counted_as_queries": "your distance matrix does not have the scores' shape (n_q, "
        "n_k): i counts the queries (rows), torch.arange(n_q)[:, None], and j the keys "
        "(columns), torch.arange(n_k) with n_k = k.shape[-2]; n_q and n_k may differ",
        "lengths_from_shape_1": "you took the lengths from shape[1], which is n only for a 3-D "
        "q; count from the end: n_q = q.shape[-2], n_k = k.shape[-2]",
        "float32_bias": FLOAT32_BIAS,
        "float32_slope": FLOAT32_BIAS,  # as close to float32_bias as seeds make it
        "later_keys_only": "you penalised only the keys after the query; every key is penalised "
        "by its distance on either side, slope * |i - j|",
        "query_axis": ScaledDotProductAttention.mistake_table["query_axis"],
        "by_sqrt_n_k": ScaledDotProductAttention.mistake_table["by_sqrt_n_k"],
        "softmax_twice": "you added the bias to the weights of plain attention (already a "
        "softmax) and took a softmax again; add it to the scores q k^T / sqrt(d_k), before the "
        "one softmax",
        "by_sqrt_d_v": ScaledDotProductAttention.mistake_table["by_sqrt_d_v"],
        "queries_at_the_end": "you placed the queries at the last n_q positions (as decoding "
        "with a cache does); here query i is at position i, counted from 0 like the keys",
        "plain_output": "your weights carry the bias but your output does not (plain "
        "attention's, e.g. from scaled_dot_product_attention(q, k, v)): the output is the "
        "biased weights @ v",
        "plain_weights": "your output carries the bias but the weights you return do not (plain "
        "attention's): return the biased weights, the ones that made the output",
        "float32_scale": FLOAT32_SCALE,
        "keys_square_cut": "you cut the queries' rows from an (n_k, n_k) distance matrix, which "
        "has too few rows when n_q > n_k; build the (n_q, n_k) one from torch.arange(n_q)[:, "
        "None] and torch.arange(n_k)",
        "causal_mask": "you masked the keys after each query (a causal mask, as in a decoder); "
        "this task has no mask: every key keeps a weight, its score lowered by slope * |i - j|",
        # before dot_t: on the 4-D case both raise the same error, and only k.T fails earlier
        "transpose_1_2": _SDPA_HINTS["transpose_1_2"],
        "dot_t": ScaledDotProductAttention.mistake_table["dot_t"],
        "queries_counted_as_keys": "your distance matrix does not have the scores' shape (n_q, "
        "n_k): i counts the queries (rows), torch.arange(n_q)[:, None] with n_q = q.shape[-2], "
        "and j the keys (columns), torch.arange(n_k); n_q and n_k may differ",
        "queries_from_1": "you counted the queries' positions from 1 (torch.arange(1, n_q + 1)) "
        "and the keys' from 0: both count from 0, i = torch.arange(n_q), j = torch.arange(n_k), "
        "so query 0 and key 0 are at distance 0",
        # task 2's slips, written again here (#hunt19: 'None of the usual single mistakes')
        **{row: _SDPA_HINTS[row] for row in ("k_q_order", "by_d_k", "times_sqrt")},
        **dict.fromkeys(("half_d_k", "twice_d_k"), POWER_HALF),
        "scores_returned": "the second result is the weights, softmax(scores) (each row sums to "
        "1), not the scores q k^T / sqrt(d_k) - slope * |i - j| before the softmax: return the "
        "weights that made the output",
        "after_softmax_product": "you multiplied the weights by exp(-slope * |i - j|) after the "
        "softmax, so they no longer sum to 1; subtract slope * |i - j| from the scores before "
        "the softmax",
    }

    def cases(self, gen):
        def case(description, spec, dtype=torch.float32, scale=1.0):
            shape_q, n_k, d_v, slope = spec
            *batch, n_q, d_k = shape_q
            q = randn(gen, *shape_q, dtype=dtype, scale=scale)
            k = randn(gen, *batch, n_k, d_k, dtype=dtype, scale=scale)
            v = randn(gen, *batch, n_k, d_v, dtype=dtype)
            return Case(description, (q, k, v, slope))

        return [
            case("q, k, v (2, 5, 8), slope 0.5", ((2, 5, 8), 5, 8, 0.5)),
            case(
                "n_q=3 != n_k=6: q (2, 3, 4), k (2, 6, 4), v (2, 6, 5), slope 1.0",
                ((2, 3, 4), 6, 5, 1.0),
            ),
            case(
                "n_q=6 > n_k=2: q (1, 6, 4), k (1, 2, 4), v (1, 2, 3), slope 0.25",
                ((1, 6, 4), 2, 3, 0.25),
            ),
            case(
                "batch and heads: q, k, v (2, 3, 4, 16), slope 0.75 (d_k = 16)",
                ((2, 3, 4, 16), 4, 16, 0.75),
            ),
            case("float64 q (3, 5, 6), k, v (3, 7, 6), slope 2.0", ((3, 5, 6), 7, 6, 2.0), F64),
            case(
                "slope 0: plain scaled dot-product attention, q, k, v (2, 4, 8)",
                ((2, 4, 8), 4, 8, 0.0),
            ),
            case(
                "q, k, v (4, 4) without a batch dimension, slope 1 given as an int",
                ((4, 4), 4, 4, 1),
            ),
            case(
                "float64, large scores (q and k scaled by 40, scores in the thousands: exp "
                "overflows even in float64 without subtracting the maximum), q, k, v (2, 5, 8), "
                "slope 0.5",
                ((2, 5, 8), 5, 8, 0.5),
                F64,
                scale=40.0,
            ),
            case(
                "float64 q (2, 6, 8), k, v (2, 9, 8), slope 0.3 (not a power of two: the bias "
                "must be computed in float64 too)",
                ((2, 6, 8), 9, 8, 0.3),
                F64,
            ),
        ]

    def call(self, obj, case):
        try:
            value = Task.call(self, obj, case)
        except (NotImplementedError, GradingError):
            raise
        except Exception as error:  # noqa: BLE001  (a learner's code may raise anything)
            named = crash_from_global_sizes(obj, case, error)  # n = 5 from an earlier cell
            if named is None:
                raise
            raise named from None
        refuse_global_sizes(self, obj, case, value)  # d_k = 4 from an earlier cell
        return value

    def diagnose(self, got, want, case):
        """float64 inputs, right to float32's digits only: a bias made in float32 some other way
        than the rows (a torch.zeros filled in a loop, a float32 arange) rounds otherwise. Or
        weights biased by -s |i - j| with another s than this call's slope: a bias kept from an
        earlier call of the same shape (a cache by (n_q, n_k), a default argument)."""
        if case.args[0].dtype == F64 and all_close(got, want, 1e-5):
            return FLOAT32_BIAS
        if _nan_where_none(got, want):  # an inline softmax shifted by another number
            return NAN_SHIFT
        q, k, _, slope = case.args
        weights = got[1] if isinstance(got, (tuple, list)) and len(got) == 2 else None
        shape = (*q.shape[:-1], k.shape[-2])
        if not isinstance(weights, torch.Tensor) or tuple(weights.shape) != shape:
            return None
        with torch.no_grad():
            logs = weights.detach().double().log()  # = q k^T / sqrt(d_k) - s |i - j| + c_row
            raw = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
            distance = (torch.arange(shape[-2])[:, None] - torch.arange(shape[-1])).abs()
            rest, step = logs - raw, distance.double().expand(shape)
            rest, step = rest - rest.mean(-1, keepdim=True), step - step.mean(-1, keepdim=True)
            if not torch.isfinite(rest).all() or not step.abs().sum():
                return None
            s = -float((rest * step).sum() / (step * step).sum())  # least squares
            if (rest + s * step).abs().max() > 1e-3 or abs(s - slope) < 1e-3:
                return None
        return KEPT_SLOPE.format(s=s, slope=slope)

    def wrong(self, q, k, v, slope, *, mistake):
        n_q, n_k = {  # the lengths, from the wrong axis (a crash on a batch) or both from q
            "lengths_from_shape_1": (q.shape[1], k.shape[1]),
            "keys_counted_as_queries": (q.shape[-2], q.shape[-2]),
            "keys_square_cut": (min(q.shape[-2], k.shape[-2]), k.shape[-2]),  # [:n_q] of (n_k, n_k)
            "queries_counted_as_keys": (k.shape[-2], k.shape[-2]),
        }.get(mistake, (q.shape[-2], k.shape[-2]))
        i, j = torch.arange(n_q)[:, None], torch.arange(n_k)[None, :]
        # the queries aligned to the last keys, as with a KV cache, or counted from 1
        i = i + {"queries_at_the_end": n_k - n_q, "queries_from_1": 1}.get(mistake, 0)
        distance = {
            "no_abs": i - j,
            "no_abs_reversed": j - i,
            "squared_distance": (i - j) ** 2,
            "earlier_keys_only": (i - j).clamp_min(0),
            "later_keys_only": (j - i).clamp_min(0),
        }.get(mistake, (i - j).abs())
        sign = 1.0 if mistake == "plus" else -1.0
        if mistake == "float32_slope":  # torch.tensor(slope): float32
            slope = torch.tensor(slope, dtype=torch.float32).item()
        if mistake == "float32_bias":  # integer distances times a Python float: float32
            bias = (sign * slope * distance).to(q.dtype)
        else:
            bias = sign * slope * distance.to(q.dtype)
        k_t = k.transpose(*{"transpose_1_2": (1, 2)}.get(mistake, (-2, -1)))  # bmm's axes
        k_t = k.T if mistake == "dot_t" else k_t  # .T: a 2-D habit
        raw = k @ q.transpose(-2, -1) if mistake == "k_q_order" else q @ k_t  # square cases hide it
        d_k = q.shape[-1]
        scale = {
            "by_d_k": d_k,
            "half_d_k": d_k / 2,  # d_k ** 1/2
            "twice_d_k": 2 * d_k,  # scores / d_k ** 1/2
            "times_sqrt": 1 / math.sqrt(d_k),
            "no_scaling": 1.0,
            "by_sqrt_n_k": math.sqrt(k.shape[-2]),
            "by_sqrt_d_v": math.sqrt(v.shape[-1]),
            "float32_scale": torch.sqrt(torch.tensor(q.shape[-1], dtype=torch.float32)),
        }.get(mistake, math.sqrt(d_k))
        if mistake == "bias_scaled":  # bias added before dividing by sqrt(d_k)
            scores = (raw + bias) / scale
        elif mistake in ("no_bias", "after_softmax", "after_softmax_product"):
            scores = raw / scale
        elif mistake == "softmax_twice":  # the bias on plain attention's weights
            scores = stable_softmax(raw / scale) + bias
        else:
            scores = raw / scale + bias
        if mistake == "causal_mask":  # ALiBi as decoders use it, with the future masked
            scores = scores.masked_fill(j > i, float("-inf"))
        if mistake == "no_max":
            e = scores.exp()
            weights = e / e.sum(dim=-1, keepdim=True)
        else:
            weights = stable_softmax(scores, dim=-2 if mistake == "query_axis" else -1)
        if mistake == "after_softmax":
            weights = weights + bias
        elif mistake == "after_softmax_product":  # a decay factor on the weights
            weights = weights * bias.exp()
        if mistake in ("plain_output", "plain_weights"):  # the bias in one result only
            plain = stable_softmax(raw / scale)
            return (plain @ v, weights) if mistake == "plain_output" else (weights @ v, plain)
        return weights @ v, scores if mistake == "scores_returned" else weights
