"""ex03.MultiHeadAttention: the module, its projections, heads and mask, with one wrong
module that takes the mistake's name. The hints of the slips that grouped_query_attention
shares with it come first; that task imports them from here."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...core import Case, GradingError, register
from ..common import (
    D_K_FROM_SHAPE_2,
    KEPT_INPUTS,
    RENORMALISED_HINT,
    ModuleTask,
    all_close,
    call_on_other_inputs,
    far_blocked_key,
    randn,
    wrong_attention,
)
from ..ex02 import FLOAT32_DIGITS, FLOAT32_SCALE, POWER_HALF, SCALED_AFTER_SOFTMAX
from ._shared import F64, PROJECTIONS, _attend_somewhere, _causal, _large_scores

# q.shape[1] of (batch, num_heads, n_q, d_head) and sqrt(num_heads) are the same number
D_K_FROM_HEADS = (
    "you took d_k from shape[1] of q, or divided by sqrt(num_heads): the same number, as the "
    "split q is (batch, num_heads, n_q, d_head); each head's dot products run over its d_head "
    "features: divide by sqrt(d_head), q.shape[-1]"
)
# three slips MultiHeadAttention and grouped_query_attention share
_OVER_QUERIES = (
    "the softmax runs over the keys (the last axis, dim=-1), so that each query's weights sum "
    "to 1: take it with dim=-1, not dim=-2 (the queries)"
)
_KEYS_TRANSPOSE_1_2 = (
    "with heads, k is (batch, heads, n_k, d_head): transpose its last "
    "two axes, k.transpose(-2, -1). transpose(1, 2), right for exercise 02's 3-D keys, "
    "swaps heads and keys here (and k.T reverses all four axes)"
)
_MASK_ADDED = (
    "you added the bool mask to the scores (scores + mask): True counts as 1 and False as 0, so "
    "the blocked keys keep their weight (and the allowed ones score 1 more); a True/False mask "
    "is not an additive one: fill the blocked scores, scores.masked_fill(~mask, float('-inf'))"
)
_OVER_HEADS = (
    "the softmax runs over dim=1, the heads of the (batch, num_heads, n_q, n_k) scores: take it "
    "over the keys, the last axis, dim=-1, so that each query's weights sum to 1"
)
_FLOAT32_PART = (  # float32 weights (scores.float().softmax(-1)) @ float64 values raise
    "part of your computation is float32 while the inputs are float64, so weights @ v mixes "
    "the two: a .float() (say scores.float() before the softmax, a mixed-precision habit) or a "
    "tensor made without dtype=; keep the inputs' dtype throughout, scores.softmax(dim=-1)"
)
_FILLED_AFTER = (
    "you filled the blocked weights with -inf AFTER the softmax, so -inf times a value makes "
    "the outputs NaN: the two steps go the other way round, fill the blocked SCORES with -inf, "
    "then take the softmax"
)
_NO_ROOT = (  # q and k each divided by sqrt(d_head) is the same slip
    "you divided the scores by d_head (dividing q and k each by sqrt(d_head) does that too); "
    "divide by its square root, math.sqrt(d_head), once"
)
_NO_MAX = (  # #h03: exp(scores) / its sum, as a softmax by hand
    "your weights are NaN where the scores are large: exp(200) overflows float32 (its largest "
    "is about exp(88)), and inf / inf = NaN. Take a stable softmax, scores.softmax(dim=-1) or "
    "your exercise 02 softmax, which subtracts each row's maximum before exp"
)
_BOOLEAN_INDEX = (
    "scores[~mask] = float('-inf') needs a mask of exactly the scores' "
    "shape (batch, num_heads, n_q, n_k): boolean indexing does not broadcast. Use "
    "scores.masked_fill(~mask, float('-inf'))"
)


class _WrongMultiHeadAttention(nn.Module):
    """A multi-head attention with one deliberate mistake, named by `mistake` ("": none)."""

    mistake = ""

    def __init__(self, d_model: int, num_heads: int, bias: bool = True):
        super().__init__()
        self.num_heads, self.d_head = num_heads, d_model // num_heads
        if self.mistake == "float_d_head":  # d_model / num_heads: a float, which reshape refuses
            self.d_head = d_model / num_heads
        for name in PROJECTIONS:
            setattr(self, name, nn.Linear(d_model, d_model, bias=bias))
        if self.mistake == "shared_projections":  # q_proj = k_proj = v_proj = nn.Linear(...)
            self.k_proj = self.v_proj = self.q_proj

    def load_state_dict(self, state_dict, strict=True, assign=False):
        if self.mistake == "weight_untransposed":  # x @ layer.weight, exercise 02's x @ w_q habit
            state_dict = {k: v.mT if k.endswith("weight") else v for k, v in state_dict.items()}
        return super().load_state_dict(state_dict, strict, assign)

    def _split(self, x: Tensor, n_q: int = 0) -> Tensor:
        batch, seq, _ = x.shape
        other = self.mistake.startswith(("keys_split_by_n_q", "queries_split_by_n_k"))
        seq = n_q if other and n_q else seq  # the query's length for the keys, or the reverse
        d_head = -1 if self.mistake == "keys_split_by_n_q_d_head_inferred" else self.d_head
        if self.mistake == "split_no_transpose":  # tokens mixed, as in split_heads
            return x.reshape(batch, self.num_heads, seq, self.d_head)
        if self.mistake == "strided_heads":  # head h of features h, h + num_heads, ...
            return x.reshape(batch, seq, self.d_head, self.num_heads).permute(0, 3, 1, 2)
        if self.mistake == "split_d_head_before_seq":  # (batch, heads, d_head, seq), swapped
            return x.reshape(batch, self.num_heads, self.d_head, seq).transpose(2, 3)
        if self.mistake == "split_by_d_head":  # split_heads(x, self.d_head): d_head heads
            return x.reshape(batch, seq, self.d_head, self.num_heads).transpose(1, 2)
        return x.reshape(batch, seq, self.num_heads, d_head).transpose(1, 2)

    def forward(self, query, key, value, mask=None):
        batch, n_q, d_model = query.shape
        mistake = self.mistake
        if mistake == "inputs_kept":  # a key/value cache filled on the first call
            key, value = self.__dict__.setdefault("kept", (key, value))
        n_k = key.shape[1] if mistake == "queries_split_by_n_k" else 0  # #h3: the keys' length
        q = self._split(self.q_proj(query), n_k)  # (batch, heads, n_q, d_head)
        k_proj = self.q_proj if mistake == "keys_through_q_proj" else self.k_proj  # a copied line
        from_query = ("keys_from_query", "kv_from_query")  # a self-attention habit
        swapped = ("keys_from_value", "kv_swapped")  # kv_swapped: v_proj(key) below as well
        k_in = query if mistake in from_query else value if mistake in swapped else key
        k = self._split(k_proj(k_in), n_q)
        v_proj = self.k_proj if mistake == "values_through_k_proj" else self.v_proj
        inputs = {"values_from_key": key, "kv_swapped": key, "values_from_query": query}
        inputs["kv_from_query"] = query
        v_full = v_proj(inputs.get(mistake, value))  # (batch, n_k, d_model)
        v = self._split(v_full)  # (batch, heads, n_k, d_head)
        if mistake == "keys_transpose_1_2":  # exercise 02's k.transpose(1, 2) on 4-D keys
            k = k.permute(0, 2, 3, 1)  # so that wrong_attention's k.transpose(-2, -1) is it
        if mistake == "mask_viewed" and mask is not None:  # #h3: a 4-D view, not a broadcast
            mask = mask.view(batch, 1, n_q, key.shape[1])
        unsqueeze = mask is not None and (mask.dim() == 3 or mistake == "always_unsqueezed")
        if mistake == "mask_kept" and mask is not None:  # the first call's mask, kept on self
            mask = self.__dict__.setdefault("kept_mask", mask)
        if mistake == "mask_by_batch" and mask is not None:  # per example if its first size is
            unsqueeze = mask.shape[0] == batch  # the batch's: so is a 2-D mask with n_q == batch
        if mistake == "mask_by_n_q" and mask is not None:  # 2-D if its first size is n_q (or if
            unsqueeze = mask.shape[0] != n_q  # square): so is a (batch, n, n) one, batch == n
        if unsqueeze and mistake != "mask_not_unsqueezed":  # (batch, 1, n_q or 1, n_k)
            mask = mask.unsqueeze({"mask_axis_2": 2, "mask_axis_last": -1}.get(mistake, 1))
        if mistake == "mask_tiled" and unsqueeze:  # heads folded into the batch, b * heads + h:
            tiled = mask[:, 0].repeat(self.num_heads, 1, 1)  # mask.repeat(num_heads, 1, 1)
            mask = tiled.view(batch, self.num_heads, *mask.shape[2:])  # gives it example i % batch
        if mistake == "boolean_index" and mask is not None:  # scores[~mask] = -inf: no broadcast
            (q @ k.transpose(-2, -1))[~mask] = float("-inf")
        heads, weights = wrong_attention(
            q,
            k,
            v,
            None if mistake in ("mask_ignored", "filled_after_softmax") else mask,
            scale={
                "scale_d_model": d_model,
                "split_by_d_head": self.d_head,  # the d_head it stored, not its heads' size
                "no_scale": 1,
                "scale_no_root": self.d_head**2,  # divided by d_head itself
                "d_k_from_shape_1": self.num_heads,  # q.shape[1] of (batch, heads, n_q, d_head)
                "d_k_from_shape_2": n_q,  # q.shape[2], right for exercise 02's 3-D q
                "half_d_k": (self.d_head / 2) ** 2,  # scale = d_head ** 1/2, d_head / 2
                "twice_d_k": (2 * self.d_head) ** 2,  # scores / d_head ** 1/2 divides by 2 d_head
                "scale_precedence": (d_model // self.num_heads**0.5) ** 2,  # ** before //
                "scale_precedence_division": (d_model / self.num_heads**0.5) ** 2,  # and before /
                "scale_inverted": 1 / self.d_head,  # divided by d_head ** -0.5
                "scaled_after_softmax": 1,  # the weights divided below
                "float32_scale": torch.tensor(self.d_head, dtype=torch.float32),
            }.get(mistake),
            fill=0.0 if mistake == "fill_zero" else float("-inf"),
            dim={"softmax_over_queries": -2, "softmax_over_heads": 1}.get(mistake, -1),
            inverted=mistake.startswith("flipped_mask"),  # True read as blocked
            zero_after=mistake in ("zero_after", "renormalised"),
            nan_to_zero=mistake == "flipped_mask_through_sdpa",  # lesson 02's guard: no key -> 0
            renormalised=mistake == "renormalised",
        )  # (batch, heads, n_q, d_head), (batch, heads, n_q, n_k)
        if mistake == "filled_after_softmax" and mask is not None:  # the two steps swapped
            weights = weights.masked_fill(~mask, float("-inf"))  # -inf weights: NaN outputs
            heads = weights @ v
        if mistake == "attention_dropout":  # nn.Dropout(0.1) on the weights, as tutorials do
            weights = F.dropout(weights, 0.1)  # (F.dropout without training=: in eval mode too)
            heads = weights @ v
        if mistake == "scaled_after_softmax":  # softmax(q k^T) / sqrt(d_head)
            weights = weights / self.d_head**0.5
            heads = weights @ v
        if mistake == "softmax_float32":  # F.softmax(scores.float(), -1): float32 weights
            heads = weights.float() @ v
        if mistake == "mask_added" and mask is not None:  # scores + mask: True adds 1, False 0
            weights = (q @ k.transpose(-2, -1) / self.d_head**0.5 + mask).softmax(-1)
            heads = weights @ v
        if mistake == "no_max":  # exp(scores) / its sum: NaN once a float32 score passes 88
            scores = q @ k.transpose(-2, -1) / self.d_head**0.5
            exp = (scores if mask is None else scores.masked_fill(~mask, float("-inf"))).exp()
            weights = exp / exp.sum(-1, keepdim=True)
            heads = weights @ v
        if mistake == "weights_detached":  # torch.no_grad() around the softmax: no q/k gradients
            heads = weights.detach() @ v
        if mistake == "averaged_heads":  # one averaged map applied to the full values
            merged = weights.mean(dim=1) @ v_full  # (batch, n_q, d_model)
        else:
            if mistake == "merge_reshape_first":  # split_heads' order: reshape, then transpose
                heads = heads.reshape(batch, n_q, self.num_heads, self.d_head)
            heads = heads if mistake == "merge_no_transpose" else heads.transpose(1, 2)
            merged = (heads.view if mistake == "merge_view" else heads.reshape)(batch, n_q, d_model)
            merged = merged.float() if mistake == "merged_float32" else merged  # torch.zeros(...)
        if self.mistake == "averaged_weights":
            weights = weights.mean(dim=1)  # (batch, n_q, n_k)
        elif mistake == "weights_heads_first":  # per-head maps torch.stack'ed on dim=0
            weights = weights.transpose(0, 1)  # (heads, batch, n_q, n_k)
        elif mistake == "scores_returned":  # `return output, scores`: before the softmax
            weights = q @ k.transpose(-2, -1) / self.d_head**0.5
        output = merged if self.mistake == "no_out_proj" else self.out_proj(merged)
        if mistake == "out_proj_untransposed":  # by hand, x @ weight + bias: weight not .T
            output = merged @ self.out_proj.weight + self.out_proj.bias
        output = query + output if mistake == "residual_added" else output  # a block's habit
        if mistake == "no_gradients":  # @torch.no_grad() on forward, or a .detach()
            output = output.detach()
        return output, weights


_DROPOUT_HINT = (
    "your module drops values at random (dropout): this MultiHeadAttention has none, in "
    "training mode either (exercise 07 puts dropout around the sub-layers). Remove it, or "
    "give it a dropout=0.0 default (F.dropout drops even in eval mode unless "
    "training=self.training)"
)


_NO_GRADIENTS = (
    "your output carries no gradients in training mode (torch.no_grad() or .detach() cut them), "
    "so the projections could not learn: your module is the attention of the GPT you train in "
    "exercise 09; compute the output with tensor operations only, without torch.no_grad() or "
    ".detach()"
)
_GRADIENTS_CUT = (  # the output has gradients, but not back to every projection
    "your output carries no gradients back to {0} in training mode (a torch.no_grad() or "
    ".detach() inside forward, around the softmax say, cuts them off), so {0} could not "
    "learn: your module is the attention of the GPT you train in exercise 09; "
    "compute the attention with tensor operations only, without torch.no_grad() or .detach()"
)


def _projections_cut_off(module: nn.Module, output: Tensor) -> list[str]:
    """The projections whose weights the output's gradient does not reach (a detached softmax)."""
    layers = [getattr(module, name, None) for name in PROJECTIONS]
    weights = [getattr(layer, "weight", None) for layer in layers]
    if not all(isinstance(w, Tensor) and w.requires_grad for w in weights):
        return []  # no usual projections to follow: the output's grad_fn is checked alone
    grads = torch.autograd.grad(output.sum(), weights, allow_unused=True)
    return [name for name, grad in zip(PROJECTIONS, grads, strict=True) if grad is None]


def _state_dict(gen: torch.Generator, d_model: int, dtype: torch.dtype, bias: bool) -> dict:
    state = {}
    for name in PROJECTIONS:
        state[f"{name}.weight"] = randn(gen, d_model, d_model, dtype=dtype) / math.sqrt(d_model)
        if bias:
            state[f"{name}.bias"] = 0.1 * randn(gen, d_model, dtype=dtype)
    return state


@register
class MultiHeadAttentionTask(ModuleTask):
    id = "ex03.MultiHeadAttention"
    lesson = "lesson 03, section 'Multi-head attention, step by step'"
    reference = "course_lib.multihead.MultiHeadAttention"
    depends_on = ("split_heads", "merge_heads")
    forbidden = (
        "torch.nn.MultiheadAttention",
        "torch.nn.functional.scaled_dot_product_attention",
        "torch.nn.functional.multi_head_attention_forward",
    )
    borrowable = (  # the pieces lesson 03's multi_head_attention_by_hand calls
        "course_lib.attention.scaled_dot_product_attention",
        "course_lib.multihead.split_heads",
        "course_lib.multihead.merge_heads",
    )
    wrong = _WrongMultiHeadAttention
    mistake_table = {
        "no_out_proj": "the merged heads must go through the output projection: "
        "output = out_proj(merge_heads(heads))",
        "averaged_heads": "you averaged the heads' attention maps into one; each head must "
        "weight its own slice of the values, and the head outputs are concatenated "
        "(merge_heads), not averaged",
        "averaged_weights": "return the weights of every head, shape (batch, num_heads, n_q, "
        "n_k), not their average over heads (nn.MultiheadAttention averages by default; this "
        "task does not)",
        "scale_d_model": "each head's scores are q·k over d_head features, so divide by "
        "sqrt(d_head), not sqrt(d_model)",
        "half_d_k": POWER_HALF,  # before no_scale: at d_head = 2, d_head / 2 is 1 as well
        "no_scale": "divide each head's scores by sqrt(d_head) before the softmax",
        "scale_no_root": _NO_ROOT,
        # d_head = query.shape[1] // num_heads gives num_heads as well on the first case
        "d_k_from_shape_1": D_K_FROM_HEADS + " (nor is query.shape[1] // num_heads or "
        "key.shape[1] // num_heads d_head: shape[1] of the unsplit inputs is their length, n_q "
        "or n_k, not d_model)",
        "d_k_from_shape_2": D_K_FROM_SHAPE_2,
        "twice_d_k": POWER_HALF,
        "mask_ignored": "the mask is ignored: blocked positions (False) must get weight 0; a "
        "(batch, n_q, n_k) mask needs unsqueeze(1) to reach every head",
        "softmax_over_queries": _OVER_QUERIES,
        **dict.fromkeys(
            ("flipped_mask_through_sdpa", "flipped_mask"),
            "your mask is read the other way round: in this course True means 'may attend' (as "
            "in F.scaled_dot_product_attention), so fill the scores with -inf where the mask is "
            "False (nn.MultiheadAttention's masks mean the opposite)",
        ),
        "split_no_transpose": "the heads are split by a reshape straight to (batch, num_heads, "
        "seq, d_head), which mixes tokens: reshape to (batch, seq, num_heads, d_head), then "
        "transpose(1, 2) (your split_heads)",
        "merge_no_transpose": "the heads are merged by a reshape without the transpose, which "
        "mixes tokens: transpose(1, 2) to (batch, n_q, num_heads, d_head) first, then reshape "
        "to (batch, n_q, d_model) (your merge_heads)",
        "merge_view": "the heads are merged with .view after transpose(1, 2): the transposed "
        "tensor is not contiguous, so .view cannot merge its axes: use .reshape (your "
        "merge_heads)",
        "fill_zero": "you filled the masked scores with 0, but exp(0) = 1: blocked keys still get "
        "weight. Fill them with float('-inf') before the softmax",
        "zero_after": "you zeroed the blocked weights AFTER the softmax, so the rows no longer "
        "sum to 1: fill the blocked SCORES with -inf before the softmax",
        "renormalised": RENORMALISED_HINT,
        "filled_after_softmax": _FILLED_AFTER,
        "strided_heads": "head h must hold the contiguous features h*d_head .. (h+1)*d_head - 1, "
        "x[..., h*d_head:(h+1)*d_head] (your split_heads); you gave it every num_heads-th "
        "feature, x[..., h::num_heads]",
        "weight_untransposed": "nn.Linear's weight is (out_features, in_features), applied as x "
        "@ weight.T + bias: x @ self.q_proj.weight multiplies by its transpose (exercise 02's "
        "w_q was (d_model, d_k)); call the layer itself, self.q_proj(query)",
        "mask_by_n_q": "a (batch, n_q, n_k) mask whose batch size equals n_q got no axis for "
        "the heads, so its examples were laid over the heads: you told a 2-D (n_q, n_k) mask by "
        "mask.shape[0] == n_q (or by its being square); tell a per-example mask by "
        "mask.dim() == 3 and give it mask.unsqueeze(1) (a 2-D mask broadcasts as it is)",
        "mask_not_unsqueezed": "a (batch, n_q or 1, n_k) mask must get an axis for the heads "
        "before it meets the (batch, num_heads, n_q, n_k) scores: mask.unsqueeze(1) (a 2-D "
        "(n_q, n_k) mask broadcasts as it is)",
        "shared_projections": "q_proj, k_proj and v_proj are one and the same layer (q = k = v = "
        "nn.Linear(...) makes one module with three names, so they share their weights): create "
        "a separate nn.Linear for each projection",
        **dict.fromkeys(  # with d_head the reshape raises; with -1 for it, the product does
            ("keys_split_by_n_q", "keys_split_by_n_q_d_head_inferred"),
            "the keys were split into heads with the query length n_q; key and value have their "
            "own length n_k = key.shape[1], which may differ: split each tensor by its own shape",
        ),
        "mask_viewed": "mask.view(batch, 1, n_q, n_k) (or reshape) needs a mask with batch * "
        "n_q * n_k entries: a (batch, 1, n_k) padding mask or a 2-D (n_q, n_k) one has fewer, "
        "they broadcast instead; give a 3-D mask the heads' axis with mask.unsqueeze(1) and use "
        "a 2-D one as it is",
        "queries_split_by_n_k": "the queries were split into heads with the keys' length n_k "
        "= key.shape[1]; query has its own length n_q = query.shape[1], which may differ "
        "(cross-attention): split each tensor by its own shape",
        "mask_by_batch": "a 2-D (n_q, n_k) mask whose n_q equals the batch size got an axis "
        "for the heads too: you told a per-example mask by mask.shape[0] == batch; tell it by "
        "mask.dim() == 3 (a 2-D mask broadcasts as it is)",
        **dict.fromkeys(  # mask.unsqueeze(2) or unsqueeze(-1): an axis, but not the heads'
            ("mask_axis_2", "mask_axis_last"),
            "the mask's new axis must stand for the heads, axis 1 of the (batch, num_heads, "
            "n_q, n_k) scores: mask.unsqueeze(1) makes (batch, 1, n_q or 1, n_k); unsqueeze(2) "
            "or unsqueeze(-1) puts the 1 among the query and key axes instead",
        ),
        "float_d_head": "d_model / num_heads is a float (8 / 2 = 4.0) even when it divides "
        "evenly, and a shape needs ints: d_head = d_model // num_heads",
        "merged_float32": "the merged heads reach out_proj as float32 while the inputs and "
        "weights are float64: a tensor made without dtype= (torch.zeros(batch, n_q, d_model) "
        "filled head by head, say) is float32, whatever is written into it; make it with the "
        "input's dtype (query.new_zeros(...), dtype=query.dtype), or torch.cat the heads",
        "always_unsqueezed": "a 2-D (n_q, n_k) mask already broadcasts over batch and heads; "
        "unsqueeze(1) only a 3-D (batch, n_q or 1, n_k) mask (if mask.dim() == 3)",
        "values_from_key": "the values are projected from `key`; they come from `value`: v = "
        "v_proj(value) (in self-attention the two are the same tensor, in cross-attention not)",
        "keys_from_value": "the keys are projected from `value`; they come from `key`: k = "
        "k_proj(key) (in self-attention the two are the same tensor, in cross-attention not)",
        "kv_swapped": "the keys are projected from `value` and the values from `key`: swap "
        "them back, k = k_proj(key), v = v_proj(value) (in self-attention the two are the same "
        "tensor, in cross-attention not)",
        "keys_from_query": "the keys are projected from `query`; they come from `key`: k = "
        "k_proj(key) (only in self-attention are the two the same tensor)",
        "kv_from_query": "the keys and values are projected from `query`, as in self-attention; "
        "they come from `key` and `value`: k = k_proj(key), v = v_proj(value), which may be "
        "another sequence (cross-attention)",
        "keys_through_q_proj": "the keys go through q_proj; they have their own layer: k = "
        "self.k_proj(key) (a copied line kept q_proj)",
        "values_through_k_proj": "the values go through k_proj; they have their own layer: v = "
        "self.v_proj(value) (a copied line kept k_proj)",
        "values_from_query": "weights (batch, heads, n_q, n_k) @ v needs the values of the n_k "
        "keys: v = v_proj(value), split by its own length n_k = value.shape[1] (not the "
        "query's tensor or length)",
        "keys_transpose_1_2": _KEYS_TRANSPOSE_1_2,
        "scale_precedence": "** binds tighter than // and /: d_model // num_heads ** 0.5 is "
        "d_model // sqrt(num_heads). Divide by (d_model // num_heads) ** 0.5, i.e. "
        "math.sqrt(d_head)",
        "scale_precedence_division": "** binds tighter than /: d_model / num_heads ** 0.5 is "
        "d_model / sqrt(num_heads). Divide by (d_model / num_heads) ** 0.5, i.e. "
        "math.sqrt(d_head)",
        "split_d_head_before_seq": "the heads are split by a reshape to (batch, num_heads, "
        "d_head, seq) and a transpose of the last two axes, which mixes tokens (the reshape "
        "reads each sequence token after token): reshape to (batch, seq, num_heads, d_head), "
        "then transpose(1, 2) (your split_heads)",
        "merge_reshape_first": "the heads are merged in split_heads' order (reshape to (batch, "
        "n_q, num_heads, d_head), then transpose), which mixes tokens: undo the split in reverse "
        "order, transpose(1, 2) first, then reshape to (batch, n_q, d_model) (your merge_heads)",
        "mask_kept": "your module kept the mask of an earlier call (on self, in a mutable "
        "default argument or in a global): each call must use the mask it is given, as a new "
        "batch brings new padding; keep no mask between calls",
        "scale_inverted": "you multiplied the scores by sqrt(d_head) (dividing by d_head ** -0.5 "
        "does that): divide by sqrt(d_head), or multiply by d_head ** -0.5",
        "attention_dropout": _DROPOUT_HINT,
        "split_by_d_head": "split_heads takes the number of heads: you passed d_head, so each "
        "token was cut into d_head heads of num_heads features; pass self.num_heads, "
        "split_heads(x, self.num_heads)",
        "mask_tiled": "a (batch, n_q, n_k) mask was tiled with .repeat(num_heads, 1, 1): with "
        "the heads folded into the batch axis (batch * num_heads), example b's heads are rows "
        "b * num_heads ... b * num_heads + num_heads - 1, so repeat each example's mask in a "
        "row, repeat_interleave(num_heads, dim=0), as lesson 03 does for nn.MultiheadAttention "
        "(or keep the heads' axis and use mask.unsqueeze(1))",
        "scores_returned": "the weights you return are the scores before the softmax: return "
        "the attention weights, softmax(scores) over the keys (each row sums to 1), the ones "
        "the values were averaged with",
        "residual_added": "you added the input to the output (query + ...): this module returns "
        "out_proj of the merged heads alone; the residual connection belongs to the layer "
        "around it (exercises 06 and 07), so remove it here",
        "scaled_after_softmax": SCALED_AFTER_SOFTMAX,
        "weights_heads_first": "your weights are (num_heads, batch, n_q, n_k); the batch axis "
        "comes first, (batch, num_heads, n_q, n_k): stack the heads' maps on dim=1",
        "boolean_index": _BOOLEAN_INDEX,
        "float32_scale": FLOAT32_SCALE,
        "no_gradients": _NO_GRADIENTS,
        "weights_detached": _GRADIENTS_CUT.format("q_proj and k_proj"),
        "inputs_kept": KEPT_INPUTS,
        "mask_added": _MASK_ADDED,
        "softmax_over_heads": _OVER_HEADS,
        "softmax_float32": _FLOAT32_PART,
        "no_max": _NO_MAX,
        "out_proj_untransposed": "the output projection by hand, merged @ out_proj.weight + "
        "out_proj.bias, multiplies by the weight untransposed: nn.Linear's weight is "
        "(out_features, in_features), applied as x @ weight.T + bias; call the layer itself, "
        "self.out_proj(merged)",
    }

    def cases(self, gen):
        def case(description, sizes, mask=None, dtype=torch.float32, bias=True, train=False):
            batch, n_q, n_k, d_model, num_heads = sizes  # n_k None: self-attention
            query = randn(gen, batch, n_q, d_model, dtype=dtype)
            key = query if n_k is None else randn(gen, batch, n_k, d_model, dtype=dtype)
            value = query if n_k is None else randn(gen, batch, n_k, d_model, dtype=dtype)
            state = _state_dict(gen, d_model, dtype, bias)
            data = {"d_model": d_model, "num_heads": num_heads, "state_dict": state, "bias": bias}
            data["train"] = train
            kwargs = {} if mask is None else {"mask": mask}
            return Case(description, (query, key, value), kwargs, data)

        lengths = torch.tensor([4, 2, 6])
        padding = (torch.arange(6) < lengths[:, None]).unsqueeze(1)  # (3, 1, 6)
        random_mask = _attend_somewhere(torch.rand(2, 4, 5, generator=gen) > 0.5)
        query, memory, keep = far_blocked_key()
        cases = [
            case("self-attention, x (2, 5, 8), num_heads=2", (2, 5, None, 8, 2)),
            case(
                "cross-attention, query (2, 3, 12), key/value (2, 6, 12), num_heads=3 (n_q != n_k)",
                (2, 3, 6, 12, 3),
            ),
            case(
                "self-attention with a causal mask (5, 5), x (1, 5, 16), num_heads=4",
                (1, 5, None, 16, 4),
                _causal(5),
            ),
            case(
                "cross-attention with a padding mask (3, 1, 6) (True = may attend), "
                "query (3, 2, 8), key/value (3, 6, 8), num_heads=4",
                (3, 2, 6, 8, 4),
                padding,
            ),
            case(
                "float64 cross-attention with a mask (2, 4, 5), query (2, 4, 6), "
                "key/value (2, 5, 6), num_heads=3",
                (2, 4, 5, 6, 3),
                random_mask,
                F64,
            ),
            case(
                "cross-attention with as many keys as queries: query (2, 4, 8), key/value "
                "(2, 4, 8) another sequence, num_heads=2",
                (2, 4, 4, 8, 2),
            ),
            case("one head: x (2, 3, 4), num_heads=1", (2, 3, None, 4, 1)),
            case(
                "bias=False (no projection has a bias): self-attention with a causal mask (4, 4), "
                "x (2, 4, 8), num_heads=2",
                (2, 4, None, 8, 2),
                _causal(4),
                bias=False,
            ),
            case(
                "bias=False, float64 cross-attention, query (3, 2, 6), key/value (3, 5, 6), "
                "num_heads=3",
                (3, 2, 5, 6, 3),
                dtype=F64,
                bias=False,
            ),
            Case(
                "one head, identity projections without biases: query (1, 1, 4) of 10s, "
                "key/value (1, 2, 4), mask (1, 2) = [True, False]: the blocked key scores 300 "
                "above the allowed one",
                (query, memory, memory),
                {"mask": keep},
                _large_scores()[2],  # identity projections, one head
            ),
            case(
                "training mode (module.train()), where it must give the same result (no "
                "dropout) and carry gradients: cross-attention, query (2, 4, 8), key/value "
                "(2, 6, 8), num_heads=2",
                (2, 4, 6, 8, 2),
                train=True,
            ),
        ]
        square_case = case(
            "self-attention with a causal mask (2, 2), x (2, 2, 8), num_heads=2: a 2-D mask "
            "whose n_q equals the batch size",
            (2, 2, None, 8, 2),
            _causal(2),
        )
        # the float64 cases above have d_head 2: a float32 root of 2 passed them under 1 seed
        # in 8; with d_head 6 and more entries, under none of the seeds tried
        irrational = case(
            "float64 self-attention, x (2, 6, 18), num_heads=3: d_head = 6, whose square root "
            "float32 cannot hold",
            (2, 6, None, 18, 3),
            dtype=F64,
        )
        # #h03: a mask told 2-D by mask.shape[0] == n_q (or by being square) passed every case
        per_example = _causal(3) & (torch.arange(3) < torch.tensor([3, 1, 2])[:, None, None])
        batch_is_n = case(
            "self-attention with a per-example mask (3, 3, 3) (causal and padding), x (3, 3, "
            "12), num_heads=3: a 3-D mask whose batch size equals n_q and n_k",
            (3, 3, None, 12, 3),
            per_example,
        )
        large_query, large_keys, identity = _large_scores()
        overflow = Case(  # #h03: exp(scores) / its sum passed every case above
            "one head, identity projections without biases: query (1, 2, 4) of 10s and -10s, "
            "key/value (1, 3, 4): scores of 200, where exp overflows float32",
            (large_query, large_keys, large_keys),
            {},
            identity,
        )
        # drawn last; training last
        return [*cases[:-1], square_case, irrational, batch_is_n, overflow, cases[-1]]

    def run(self, module, case):
        train = case.data["train"]
        module.train(train)
        call_on_other_inputs(module, case.args, case.kwargs)
        with torch.set_grad_enabled(train), torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)  # a dropout draws the same mask in a learner's module and a row
            got = module(*case.args, **case.kwargs)
        first = got[0] if isinstance(got, (tuple, list)) else got
        if train and isinstance(first, Tensor) and first.grad_fn is None:
            raise GradingError(_NO_GRADIENTS)
        cut = _projections_cut_off(module, first) if train and isinstance(first, Tensor) else []
        if cut:
            raise GradingError(_GRADIENTS_CUT.format(" and ".join(cut)))
        if isinstance(got, (tuple, list)):
            return type(got)(t.detach() if isinstance(t, Tensor) else t for t in got)
        return got.detach() if isinstance(got, Tensor) else got

    def init_args(self, case):
        kwargs = {} if case.data["bias"] else {"bias": False}
        return (case.data["d_model"], case.data["num_heads"]), kwargs

    def not_a_module(self, built):
        return (
            f"MultiHeadAttention(d_model, num_heads) should build a torch.nn.Module, got "
            f"{type(built).__name__}; subclass nn.Module and call super().__init__()"
        )

    def diagnose(self, got, want, case):
        if isinstance(got, Tensor):
            return (
                "forward must return a tuple (output, weights), with weights of shape "
                "(batch, num_heads, n_q, n_k)"
            )
        if case.args[0].dtype == F64 and all_close(got, want, 1e-5):  # e.g. a float32 buffer
            return FLOAT32_DIGITS
        # the last case, after every eval-mode one passed: dropout of any p, anywhere
        return _DROPOUT_HINT if case.data["train"] else None
