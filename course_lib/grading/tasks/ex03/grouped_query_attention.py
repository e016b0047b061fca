"""ex03.grouped_query_attention (transfer: the lesson never shares k/v between heads): each
group of query heads attends with one kv head, repeated."""

from __future__ import annotations

import functools

import torch

from ...core import Case, GradingError, Task, _listed_hint, _raised_message, register
from ..common import (
    D_K_FROM_SHAPE_2,
    D_V_SCALE_HINT,
    RENORMALISED_HINT,
    all_close,
    far_blocked_key,
    randn,
    wrong_attention,
)
from ..ex02 import FLOAT32_DIGITS, FLOAT32_SCALE, SCALED_AFTER_SOFTMAX
from ._shared import F64, _attend_somewhere, _causal, _large_scores
from .multi_head_attention import (
    _BOOLEAN_INDEX,
    _FILLED_AFTER,
    _FLOAT32_PART,
    _KEYS_TRANSPOSE_1_2,
    _MASK_ADDED,
    _NO_MAX,
    _NO_ROOT,
    _OVER_HEADS,
    _OVER_QUERIES,
    D_K_FROM_HEADS,
)


@register
class GroupedQueryAttentionTask(Task):
    id = "ex03.grouped_query_attention"
    lesson = "lesson 03, section 'Multi-head attention, step by step'"
    reference = "course_lib.llama.grouped_query_attention"
    backward = True  # q, k and v are learned: its gradients are judged too
    forbidden = (
        "torch.nn.functional.scaled_dot_product_attention",
        "course_lib.multihead.repeat_kv",
        "course_lib.llama.GroupedQueryAttention",
    )
    mistake_table = {
        # a v left unrepeated raises the same error, so the hint names both
        "seq_axis": "repeat the kv heads of k and of v (both) along the head axis (dim=1 of "
        "(batch, num_kv_heads, n_k, d_head)), not along the keys: repeating the keys makes "
        "n_k * group keys, and a v not repeated keeps num_kv_heads heads",
        "tiled": "the heads are grouped wrongly: query head h must use kv head h // group "
        "(heads 0..group-1 share kv head 0), which is repeat_interleave(group, dim=1); "
        ".repeat(1, group, 1, 1) tiles the kv heads, so head h gets kv head h % num_kv_heads",
        "batch_axis": "repeat the kv heads along the head axis, dim=1 of (batch, num_kv_heads, "
        "n_k, d_head): dim=0 repeats the batch, so k and v no longer match q's batch",
        "scaled_by_d_v": D_V_SCALE_HINT,
        "scaled_after_softmax": SCALED_AFTER_SOFTMAX,
        "index_by_kv_heads": "query head h uses kv head h // group, group = num_heads // "
        "num_kv_heads; h // num_kv_heads is that only when num_kv_heads == group, and otherwise "
        "runs past the last kv head",
        "no_scale": "divide the scores by sqrt(d_head), the size of the queries and keys, "
        "before the softmax, as in your MultiHeadAttention",
        "mask_ignored": "the mask is ignored: where it is False the scores must become -inf "
        "before the softmax (scores.masked_fill(~mask, float('-inf')))",
        "mask_inverted": "your mask is read the other way round: True means 'may attend', so "
        "fill the scores with -inf where the mask is False (~mask)",
        "fill_zero": "you filled the masked scores with 0, but exp(0) = 1: blocked keys still get "
        "weight. Fill them with float('-inf') before the softmax",
        "renormalised": RENORMALISED_HINT,
        "d_k_from_shape_1": D_K_FROM_HEADS,
        "d_k_from_shape_2": D_K_FROM_SHAPE_2,
        "mask_unsqueezed": "the mask broadcasts to (batch, num_heads, n_q, n_k) as it is: a 3-D "
        "mask here is (num_heads or 1, n_q, n_k), one per query head, not MultiHeadAttention's "
        "(batch, n_q, n_k); do not unsqueeze(1) it",
        "values_tiled": "k and v are repeated differently: v.repeat(1, group, 1, 1) tiles the kv "
        "heads, so query head h reads the keys of kv head h // group but the values of kv head "
        "h % num_kv_heads; repeat v as k, repeat_interleave(group, dim=1)",
        "float32_scale": FLOAT32_SCALE,
        "keys_tiled": "k and v are repeated differently: k.repeat(1, group, 1, 1) tiles the kv "
        "heads, so query head h reads the values of kv head h // group but the keys of kv head "
        "h % num_kv_heads; repeat k as v, repeat_interleave(group, dim=1)",
        "softmax_over_queries": _OVER_QUERIES,
        "float_group": "num_heads / num_kv_heads is a float (4 / 2 = 2.0) even when it divides "
        "evenly, and repeat_interleave needs an int: group = num_heads // num_kv_heads",
        "group_inverted": "num_kv_heads // num_heads is 0 when there are fewer kv heads than "
        "query heads (1 // 4 = 0), so repeat_interleave(0) leaves no kv heads at all; the group "
        "is the number of query heads per kv head: group = num_heads // num_kv_heads",
        "mask_always_unsqueezed": "the mask broadcasts to (batch, num_heads, n_q, n_k) as it is, "
        "whatever its number of axes: use it without unsqueeze(1) (which puts an axis inside "
        "it, and a 4-D mask becomes 5-D)",
        # after the mask rows: on the causal case a 2-D mask unsqueezed (`if mask.dim() < 4`)
        # raises this row's broadcast error too, and this slip already failed an earlier case
        "repeat_by_kv_heads": "each kv head is repeated num_kv_heads times; it must be repeated "
        "group = num_heads // num_kv_heads times, so that there are num_heads of them",
        # #f9: also any other crash that only a mask brings (view, masked_fill_, ...): see call
        "mask_reshaped": "your code fails only when it is given a mask, so its mask handling "
        "breaks: the mask broadcasts to the scores' (batch, num_heads, n_q, n_k) as it comes, "
        "whatever its number of axes; use it as it is, scores.masked_fill(~mask, "
        "float('-inf')), without reshaping it as MultiHeadAttention's (batch, n_q, n_k) mask "
        "(unsqueeze(1), view, expand_as; an in-place masked_fill_ cannot grow the scores either)",
        # last: on the causal case k.transpose(1, 2) raises the broadcast error of a 2-D mask
        # unsqueezed (sizes 2 and 4 at dimension 1), and this slip fails the first case already
        "keys_transpose_1_2": _KEYS_TRANSPOSE_1_2,
        "boolean_index": _BOOLEAN_INDEX,
        "mask_added": _MASK_ADDED,
        "softmax_over_heads": _OVER_HEADS,
        "scale_no_root": _NO_ROOT,  # / q.shape[-1], or q and k each divided by sqrt(d_head)
        "filled_after_softmax": _FILLED_AFTER,
        "scaled_by_n_k": "the scores are divided by the root of the number of keys, k.shape[-2]; "
        "the scale is sqrt(d_head), the last axis of q and k: q.shape[-1]",
        "scores_returned": "the weights you return are the scores before the softmax: return "
        "the attention weights, softmax(scores) over the keys (each row sums to 1), the ones "
        "the values were averaged with",
        "softmax_float32": _FLOAT32_PART,
        # #h3: the first case is multi-query (1 kv head), the second has num_heads 4 again with
        # 2 kv heads: what the first call left behind, a group or an index table, shows there
        "group_kept": "your kv heads were repeated num_heads times, the group of the "
        "multi-query case (1 kv head, where it is right): a group kept from an earlier call (a "
        "dict keyed by num_heads, a mutable default argument, a global) or group = num_heads; "
        "compute group = num_heads // num_kv_heads from each call's own q and k",
        "index_kept": "every query head read kv head 0, as in the multi-query case (1 kv head, "
        "where it is right): an index table such as torch.arange(num_heads) // group kept from "
        "an earlier call (a dict keyed by num_heads, a mutable default argument, a global), or "
        "k[:, :1]; build it from each call's own shapes, group = num_heads // num_kv_heads",
        "no_max": _NO_MAX,
        "expand_heads": "k.expand(-1, num_heads, -1, -1) only repeats an axis of size 1, so it "
        "works for one kv head (multi-query) and fails with more: repeat each kv head group = "
        "num_heads // num_kv_heads times, k.repeat_interleave(group, dim=1) (or k[:, :, "
        "None].expand(batch, num_kv_heads, group, n_k, d_head).reshape(batch, num_heads, n_k, "
        "d_head))",
    }

    def wrong(self, q, k, v, mask=None, *, mistake):
        num_heads, num_kv_heads = q.shape[1], k.shape[1]
        if num_heads % num_kv_heads:
            raise ValueError("not a multiple")
        group = {  # kv heads per query head: 0 when there are fewer kv heads
            "float_group": num_heads / num_kv_heads,
            "group_inverted": num_kv_heads // num_heads,
            "group_kept": num_heads,  # the multi-query case's group, kept by num_heads
        }.get(mistake, num_heads // num_kv_heads)
        if mistake == "tiled":  # kv head h % num_kv_heads instead of h // group
            k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)
        elif mistake in ("seq_axis", "batch_axis"):  # along the keys or the batch: not the heads
            axis = 2 if mistake == "seq_axis" else 0
            k, v = k.repeat_interleave(group, dim=axis), v.repeat_interleave(group, dim=axis)
        elif mistake == "repeat_by_kv_heads":  # num_kv_heads copies instead of group
            k, v = k.repeat_interleave(num_kv_heads, 1), v.repeat_interleave(num_kv_heads, 1)
        elif mistake in ("index_kept", "expand_heads"):  # the multi-query case's table: all 0
            k, v = (  # or k.expand(-1, num_heads, -1, -1), which only a size 1 allows
                t.expand(-1, num_heads, -1, -1)
                if mistake == "expand_heads"
                else t[:, torch.arange(num_heads) // num_heads]
                for t in (k, v)
            )
        elif mistake == "index_by_kv_heads":  # head by head, kv head h // num_kv_heads
            k, v = (
                torch.stack([t[:, h // num_kv_heads] for h in range(num_heads)], 1) for t in (k, v)
            )
        else:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        if mistake == "values_tiled":  # the keys right, the values .repeat'ed
            v = v[:, ::group].repeat(1, group, 1, 1)
        if mistake == "keys_tiled":  # the values right, the keys .repeat'ed
            k = k[:, ::group].repeat(1, group, 1, 1)
        if mistake == "keys_transpose_1_2":  # exercise 02's k.transpose(1, 2) on 4-D keys
            k = k.permute(0, 2, 3, 1)  # so that wrong_attention's k.transpose(-2, -1) is it
        if mistake == "boolean_index" and mask is not None:  # scores[~mask] = -inf: no broadcast
            (q @ k.transpose(-2, -1))[~mask] = float("-inf")
        if mistake == "mask_reshaped" and mask is not None and mask.dim() == 3:  # expand_as
            mask = mask.unsqueeze(1).expand(*q.shape[:3], k.shape[2])
        if mask is not None and (  # MultiHeadAttention's unsqueeze(1), with or without its if
            mistake == "mask_always_unsqueezed"
            or (mistake == "mask_unsqueezed" and mask.dim() == 3)
        ):
            mask = mask.unsqueeze(1)
        output, weights = wrong_attention(
            q,
            k,
            v,
            None if mistake in ("mask_ignored", "filled_after_softmax") else mask,
            scale={
                "scaled_by_d_v": v.shape[-1],
                "no_scale": 1,
                "scaled_after_softmax": 1,  # the weights divided below
                "d_k_from_shape_1": q.shape[1],  # num_heads
                "d_k_from_shape_2": q.shape[2],  # n_q: exercise 02's 3-D habit
                "scaled_by_n_k": k.shape[-2],  # the keys' axis for their features'
                "scale_no_root": q.shape[-1] ** 2,  # divided by d_head itself
                "float32_scale": torch.tensor(q.shape[-1], dtype=torch.float32),
            }.get(mistake),
            fill=0.0 if mistake == "fill_zero" else float("-inf"),
            dim={"softmax_over_queries": -2, "softmax_over_heads": 1}.get(mistake, -1),
            inverted=mistake == "mask_inverted",
            zero_after=mistake == "renormalised",
            renormalised=mistake == "renormalised",
        )
        if mistake == "filled_after_softmax" and mask is not None:  # the two steps swapped
            weights = weights.masked_fill(~mask, float("-inf"))  # -inf weights: NaN outputs
            output = weights @ v
        if mistake == "scaled_after_softmax":  # softmax(q k^T) / sqrt(d_head)
            weights = weights / q.shape[-1] ** 0.5
            output = weights @ v
        if mistake == "softmax_float32":  # F.softmax(scores.float(), -1): float32 weights
            output = weights.float() @ v
        if mistake == "mask_added" and mask is not None:  # scores + mask: True adds 1, False 0
            weights = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5 + mask).softmax(-1)
            output = weights @ v
        if mistake == "scores_returned":  # `return output, scores`: before the softmax
            weights = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        if mistake == "no_max":  # exp(scores) / its sum: NaN once a float32 score passes 88
            scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
            exp = (scores if mask is None else scores.masked_fill(~mask, float("-inf"))).exp()
            weights = exp / exp.sum(-1, keepdim=True)
            output = weights @ v
        return output, weights

    def diagnose(self, got, want, case):
        if case.args[0].dtype == F64 and all_close(got, want, 1e-5):  # a .float() softmax
            return FLOAT32_DIGITS
        return None

    def call(self, obj, case):
        """The learner's function; a RuntimeError that only the mask brings (the same inputs
        without it run) and that no listed mistake explains gets the mask_reshaped hint."""
        try:
            return self.learnable(obj, case, obj(*case.args, **case.kwargs))
        except ValueError as error:  # #h3: the check read the other way round, kv % heads
            q, k = case.args[:2]
            if (
                case.raises is not None
                or isinstance(obj, functools.partial)  # a listed mistake itself
                or "to unpack" in str(error)  # `batch, h, n, d = k.shape` on another shape
            ):
                raise
            raise GradingError(
                f"your code raised ValueError: {error}, but num_heads={q.shape[1]} is a multiple "
                f"of num_kv_heads={k.shape[1]}. Hint: raise the ValueError only when num_heads "
                "% num_kv_heads != 0 (the query heads cannot be shared out among the kv heads); "
                "num_kv_heads % num_heads, or a condition without its != 0 negated, rejects the "
                "very cases grouped-query attention is for"
            ) from None
        except RuntimeError as error:
            mask = case.kwargs.get("mask")
            if (
                mask is None
                or isinstance(obj, functools.partial)  # a listed mistake itself
                or type(error) is NotImplementedError
                or "Boolean value of Tensor" in str(error)  # `if mask:`: core's TRUTH_HINT
                or _listed_hint(self, case, raised=_raised_message(error))
            ):
                raise
            try:
                obj(*case.args)
            except Exception:  # noqa: BLE001  (it fails without the mask too: no hint from this)
                raise error from None
            q, k = case.args[:2]
            raise GradingError(
                f"your code raised RuntimeError: {error}. Hint: "
                f"{self.mistake_table['mask_reshaped']} (here the mask is {tuple(mask.shape)}, "
                f"the scores {(*q.shape[:3], k.shape[2])})"
            ) from None

    def cases(self, gen):
        def case(description, sizes, mask=None, dtype=torch.float32, raises=None):
            batch, num_heads, num_kv_heads, n_q, n_k, d_head, d_v = sizes
            q = randn(gen, batch, num_heads, n_q, d_head, dtype=dtype)
            k = randn(gen, batch, num_kv_heads, n_k, d_head, dtype=dtype)
            v = randn(gen, batch, num_kv_heads, n_k, d_v, dtype=dtype)
            kwargs = {} if mask is None else {"mask": mask}
            return Case(description, (q, k, v), kwargs, raises=raises)

        padding = (torch.arange(5) < torch.tensor([5, 2])[:, None])[:, None, None, :]
        random_mask = _attend_somewhere(torch.rand(3, 1, 4, 6, generator=gen) > 0.5)
        per_head = _attend_somewhere(torch.rand(1, 6, 5, 3, generator=gen) > 0.4)
        query, memory, keep = far_blocked_key()
        cases = [
            case(
                "multi-query attention: q (2, 4, 3, 8), k/v (2, 1, 5, 8) "
                "(4 query heads, 1 kv head)",
                (2, 4, 1, 3, 5, 8, 8),
            ),
            case("q (2, 4, 4, 8), k/v (2, 2, 6, 8): groups of 2", (2, 4, 2, 4, 6, 8, 8)),
            case(
                "batch 1, q (1, 6, 5, 4), k (1, 2, 3, 4), v (1, 2, 3, 6): groups of "
                "3, d_v != d_head",
                (1, 6, 2, 5, 3, 4, 6),
            ),
            case(
                "q (2, 6, 2, 4), k/v (2, 3, 5, 4): groups of 2, with a padding mask (2, 1, 1, 5)",
                (2, 6, 3, 2, 5, 4, 4),
                padding,
            ),
            case(
                "q (3, 2, 4, 8), k/v (3, 2, 4, 8): as many kv heads as query heads "
                "(ordinary multi-head attention), causal mask (4, 4)",
                (3, 2, 2, 4, 4, 8, 8),
                _causal(4),
            ),
            case(
                "float64 q (3, 8, 4, 4), k/v (3, 2, 6, 4): groups of 4, with a mask (3, 1, 4, 6)",
                (3, 8, 2, 4, 6, 4, 4),
                random_mask,
                F64,
            ),
            case(
                "q (1, 6, 5, 4), k/v (1, 2, 3, 4) with a different mask per query "
                "head (1, 6, 5, 3)",
                (1, 6, 2, 5, 3, 4, 4),
                per_head,
            ),
            Case(
                "q (1, 2, 1, 4) of 10s, k (1, 1, 2, 4), v (1, 1, 2, 3), mask (1, 2) = "
                "[True, False]: the blocked key scores 300 above the allowed one",
                (query.expand(1, 2, 1, 4), memory[:, None], memory[:, None, :, :3]),
                {"mask": keep},
            ),
            case(
                "q (1, 4, 2, 4), k/v (1, 3, 2, 4): 4 query heads cannot be shared "
                "out among 3 kv heads, so a ValueError",
                (1, 4, 3, 2, 2, 4, 4),
                raises=ValueError,
            ),
        ]
        per_head_3d = _attend_somewhere(torch.rand(4, 3, 5, generator=gen) > 0.4)
        three_d = case(
            "q (2, 4, 3, 4), k/v (2, 2, 5, 4): groups of 2, a 3-D mask (4, 3, 5), one per "
            "query head, broadcast over the batch",
            (2, 4, 2, 3, 5, 4, 4),
            per_head_3d,
        )
        irrational = case(  # d_head 4 above has a root float32 holds exactly; 6 has not
            "float64 q (2, 4, 3, 6), k/v (2, 2, 5, 6): groups of 2, d_head = 6",
            (2, 4, 2, 3, 5, 6, 6),
            dtype=F64,
        )
        large_query, large_keys, _ = _large_scores()
        overflow = Case(  # #h03: exp(scores) / its sum passed every case above
            "q (1, 2, 1, 4) of 10s (head 0) and -10s (head 1), k/v (1, 1, 3, 4): scores of 200, "
            "where exp overflows float32",
            (large_query[:, :, None], large_keys[:, None], large_keys[:, None].clone()),
        )
        return [*cases[:-1], three_d, irrational, overflow, cases[-1]]  # the ValueError case last
