"""ex06.CrossAttentionSublayer."""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from ....multihead import MultiHeadAttention
from ...core import Case, GradingError, register
from .. import common
from ..common import lengths_mask as source_padding_mask
from ..ex07._layers import LAYER_NORM_EPS


def _random_state(gen, d_model, dtype):
    """Weights for every parameter of the sub-layer (the LayerNorm's too, so that its place
    matters)."""
    state = {}
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        weight = common.randn(gen, d_model, d_model, dtype=dtype)
        state[f"attn.{name}.weight"] = weight * d_model**-0.5
        state[f"attn.{name}.bias"] = common.randn(gen, d_model, dtype=dtype) * 0.1
    state["norm.weight"] = 1.0 + 0.5 * common.randn(gen, d_model, dtype=dtype)
    state["norm.bias"] = 0.5 * common.randn(gen, d_model, dtype=dtype)
    return state


SUBLAYER_MISTAKES = {
    "no_residual": "the residual connection is missing: the sub-layer returns x + attention "
    "(post-norm: norm(x + attn(x, memory)); pre-norm: x + attn(norm(x), memory))",
    "default_pre_norm": "built without norm_first, your sub-layer is pre-norm: the default is "
    "norm_first=False (post-norm, as in the original Transformer and nn.TransformerDecoderLayer); "
    "give __init__ norm_first=False as its default",
    "norm_swapped": "the LayerNorm is in the wrong place: post-norm (norm_first=False) "
    "normalises after the residual, norm(x + attn(x, memory)); pre-norm (norm_first=True) "
    "normalises only the attention's input, x + attn(norm(x), memory)",
    "memory_normalised": "memory was normalised: this sub-layer normalises only x (the encoder "
    "already normalised its output); pass memory to the attention as it is",
    "mask_ignored": "memory_mask was ignored: pass it on to self.attn so that padded source "
    "positions get zero weight",
    "mask_inverted": "the mask is inverted: course_lib's attention takes True = may attend, so "
    "pass memory_mask as it is (nn.MultiheadAttention, which takes True = blocked, is "
    "the one that needs ~memory_mask)",
    "residual_of_normed": "in pre-norm the residual adds the attention to x itself, not to "
    "norm(x): x + attn(norm(x), memory)",
    "self_attends": "the keys and values must come from memory: attn(x, memory, memory, "
    "memory_mask); attn(x, x, x) is self-attention and never reads the source",
    "queries_from_memory": "the queries come from x, the keys and values from memory: "
    "attn(x, memory, memory, memory_mask) (in pre-norm attn(norm(x), memory, memory, ...)), not "
    "attn(memory, x, x, ...), whose output has one row per source position",
    "pre_norm_output_normalised": "pre-norm normalises only the sub-layer's input: "
    "x + attn(norm(x), memory, memory); the sum is not normalised again (that is "
    "post-norm)",
    "output_tuple": "self.attn returns a pair (output, weights): add its first element to x, "
    "self.attn(...)[0] (or attended, _ = self.attn(...)), not the pair",
    "norm_eps": LAYER_NORM_EPS,
    "normed_sublayer": "you normalised the attention's output, x + norm(attn(x, memory)); "
    "post-norm normalises the sum, norm(x + attn(x, memory)), and pre-norm the attention's "
    "input, x + attn(norm(x), memory)",
    "memory_kept": common.KEPT_INPUTS,
    "key_padding_mask": "key_padding_mask is nn.MultiheadAttention's argument (True = blocked); "
    "course_lib's MultiHeadAttention takes the mask as its fourth argument, True = may attend: "
    "self.attn(x, memory, memory, memory_mask)",
    "post_norm_of_x": "post-norm normalises the sum, after the residual: norm(x + attn(x, "
    "memory)), not norm(x) + attn(x, memory)",
    "memory_detached": "no gradient reaches memory (.detach() or torch.no_grad() cut it): the "
    "encoder learns through this sub-layer, so memory must stay in the graph",
    "functional_norm": "F.layer_norm(x, (d_model,)) without weight and bias ignores self.norm's "
    "learned scale and shift (the check loads them into self.norm): call self.norm(x)",
    "post_norm_query_normed": "post-norm normalises only the sum, norm(x + attn(x, memory)): its "
    "attention reads x itself, not norm(x) (normalising the attention's input is pre-norm's, "
    "x + attn(norm(x), memory), which does not normalise the sum)",
    "pre_norm_of_x": "pre-norm adds the attention of norm(x) to x itself: x + attn(norm(x), "
    "memory), not norm(x) + attn(x, memory) (the attention reads the normalised copy, the "
    "residual carries x as it is)",
    "norm_sandwich": "you normalised before AND after the sub-layer, h = norm(x), then "
    "norm(h + attn(h, memory)): the sub-layer's one LayerNorm sits in one place, post-norm "
    "(norm_first=False) norm(x + attn(x, memory)), pre-norm (norm_first=True) "
    "x + attn(norm(x), memory)",
    "norm_of_normed_x": "you normalised x before adding it AND the sum, norm(norm(x) + "
    "attn(x, memory)): the sub-layer's one LayerNorm sits in one place, post-norm "
    "(norm_first=False) norm(x + attn(x, memory)) with x itself in the residual, pre-norm "
    "(norm_first=True) x + attn(norm(x), memory) with the sum left as it is",
    "pre_unnormed": "your pre-norm branch never calls self.norm: pre-norm normalises the "
    "attention's input, x + attn(norm(x), memory, memory, memory_mask), and adds it to x itself",
}


class WrongSublayer(nn.Module):
    """The right parts of the sub-layer, put together with one named mistake (`mistake`)."""

    mistake = ""

    def __init__(self, d_model, num_heads, norm_first=None):
        super().__init__()
        self.norm_first = self.mistake == "default_pre_norm" if norm_first is None else norm_first
        self.attn = MultiHeadAttention(d_model, num_heads)
        self.norm = nn.LayerNorm(d_model, 1e-6 if self.mistake == "norm_eps" else 1e-5)

    def forward(self, x, memory, memory_mask=None):
        mistake = self.mistake
        if mistake == "mask_ignored":
            memory_mask = None
        if mistake == "mask_inverted" and memory_mask is not None:
            memory_mask = ~memory_mask  # PyTorch's convention (True = blocked), as for nn.*
        if mistake == "memory_normalised":
            memory = self.norm(memory)
        if mistake == "memory_detached":  # "the encoder's output is fixed here"
            memory = memory.detach()
        if mistake == "memory_kept":  # the memory of the first call, kept for the next ones
            memory = self.__dict__.setdefault("kept", memory)

        def attend(h):
            if mistake == "self_attends":
                return self.attn(h, h, h)[0]
            if mistake == "key_padding_mask":  # the lesson's nn.MultiheadAttention call, copied
                return self.attn(h, memory, memory, key_padding_mask=memory_mask)[0]
            if mistake == "queries_from_memory":  # raises: memory's length is not x's
                return self.attn(memory, h, h, memory_mask)[0]
            pair = self.attn(h, memory, memory, memory_mask)
            return pair if mistake == "output_tuple" else pair[0]

        if mistake == "post_norm_of_x" and not self.norm_first:  # norm(x) + attn(x, memory)
            return self.norm(x) + attend(x)
        if mistake == "pre_norm_of_x" and self.norm_first:  # norm(x) + attn(x, memory)
            return self.norm(x) + attend(x)
        if mistake == "pre_unnormed" and self.norm_first:  # x + attn(x, memory): no norm at all
            return x + attend(x)
        if mistake == "norm_sandwich":  # h = norm(x); norm(h + attn(h)), in either mode
            return self.norm(self.norm(x) + attend(self.norm(x)))
        if mistake == "norm_of_normed_x":  # norm(norm(x) + attn(x)), in either mode
            return self.norm(self.norm(x) + attend(x))
        if mistake == "post_norm_query_normed" and not self.norm_first:  # h = norm(x) in both
            return self.norm(x + attend(self.norm(x)))
        slip = "pre_post_swapped" if mistake == "norm_swapped" else mistake
        norm_first = self.norm_first and mistake != "normed_sublayer"  # x + norm(attn) in both
        norm = self.norm
        if mistake == "functional_norm":  # F.layer_norm with no weight: the loaded ones unused
            norm = lambda h: nn.functional.layer_norm(h, h.shape[-1:])  # noqa: E731
        return common.residual_sublayers(x, [(norm, attend)], norm_first, slip)


@register
class CrossAttentionSublayerTask(common.ModuleTask):
    id = "ex06.CrossAttentionSublayer"
    lesson = "lesson 06, section 'Where cross-attention sits in the decoder'"
    reference = "course_lib.cross_attention.CrossAttentionSublayer"
    mistake_table = SUBLAYER_MISTAKES
    wrong = WrongSublayer

    def cases(self, gen):
        def case(description, sizes, norm_first, lengths=None, dtype=torch.float32, default=False):
            batch, n_q, n_kv, d_model, num_heads = sizes
            # x far from normalised, so LayerNorm before and after the residual differ
            x = 2.0 * common.randn(gen, batch, n_q, d_model, dtype=dtype) + 1.0
            memory = 1.5 * common.randn(gen, batch, n_kv, d_model, dtype=dtype) - 0.5
            kwargs = {} if lengths is None else {"memory_mask": source_padding_mask(lengths, n_kv)}
            data = {
                "sizes": (d_model, num_heads),
                "norm_first": norm_first,
                "default_norm_first": default,  # built without norm_first: its default, False
                "state_dict": _random_state(gen, d_model, dtype),
            }
            mode = "pre-norm (norm_first=True)" if norm_first else "post-norm (norm_first=False)"
            return Case(f"{mode}, {description}", (x, memory), kwargs, data)

        f64 = torch.float64
        # sizes: (batch, n_q, n_kv, d_model, num_heads)
        cases = [
            case("x (2, 3, 8), memory (2, 5, 8), 2 heads, no mask, built without norm_first (its "
                 "default is False)",
                 (2, 3, 5, 8, 2), False, default=True),
            case("x (2, 3, 8), memory (2, 5, 8), 2 heads, no mask", (2, 3, 5, 8, 2), True),
            case("x (3, 4, 8), memory (3, 6, 8), 4 heads, source padding lengths [6, 3, 1]",
                 (3, 4, 6, 8, 4), False, [6, 3, 1]),
            case("x (3, 4, 8), memory (3, 6, 8), 4 heads, source padding lengths [2, 6, 5]",
                 (3, 4, 6, 8, 4), True, [2, 6, 5]),
            case("x (1, 7, 12), memory (1, 2, 12), 3 heads", (1, 7, 2, 12, 3), True),
            case("float64, x (2, 5, 8), memory (2, 4, 8), 2 heads, padding lengths [4, 2]",
                 (2, 5, 4, 8, 2), False, [4, 2], f64),
            case("float64, x (2, 5, 8), memory (2, 4, 8), 2 heads, padding lengths [1, 4]",
                 (2, 5, 4, 8, 2), True, [1, 4], f64),
        ]  # fmt: skip
        # the default's case third, after both modes were asked for by name: a default of
        # norm_first=True then fails there first, and a swapped norm earlier (each its own hint)
        cases.insert(2, cases.pop(0))
        return cases

    def init_args(self, case):
        data = case.data
        return data["sizes"], {} if data["default_norm_first"] else {
            "norm_first": data["norm_first"]
        }

    def call(self, obj, case):  # memory_mask by position in every pass, whatever its name
        return super().call(obj, replace(case, args=(*case.args, *case.kwargs.values()), kwargs={}))

    def run(self, module, case):
        args = [*case.args, *case.kwargs.values()]  # x, memory and memory_mask if given
        memory = args[1] = args[1].detach().requires_grad_(True)  # the encoder learns through it
        common.call_on_other_inputs(module.eval(), args, {})
        out = module(*args)
        if isinstance(out, torch.Tensor) and (
            not out.requires_grad
            or torch.autograd.grad(out.sum(), memory, allow_unused=True)[0] is None
        ):
            with torch.no_grad():  # memory is read (its values matter), but cut from the graph
                moved = module(args[0], memory + 1, *args[2:])
            if moved.shape == out.shape and not torch.equal(moved, out.detach()):
                raise GradingError(SUBLAYER_MISTAKES["memory_detached"])
        args[1] = memory.detach()
        return common.without_dropout(module, args, {}, "sub-layer")
