"""ex11.attention_patterns: every layer's attention weights, read with hooks."""

from __future__ import annotations

import torch

from ...core import register
from ..common import randint
from ._models import (
    KEPT,
    LESSON,
    MODE_NO_FINALLY,
    ModelTask,
    circuit_spec,
    model_case,
    raising_case,
    repeated,
)

MISTAKES = {
    "no_finally": (
        "your hooks stay on the model when the forward raises: handle.remove() runs "
        "only after a forward that succeeded; register the hooks and run the forward "
        "inside `try:`, and remove every handle in `finally:`"
    ),
    "hooks_left": (
        "your hooks are still registered after the call: keep the handles that "
        "register_forward_hook returns and call handle.remove() on each, in a `finally`"
    ),
    "record_flag": (
        "you switched on the layers' own recording (layer.record_attention = True) and "
        "read layer.attention: the task asks for hooks, and the model must be left as it "
        "was (the flags off)"
    ),
    "mode_no_finally": MODE_NO_FINALLY,
    "eval_left": (
        "you called model.eval() and left the model in eval mode: a model given in "
        "training mode must come back in training mode; torch.no_grad() is enough here "
        "(or restore the mode with model.train(was_training))"
    ),
    "transposed": (
        "the query and key axes are swapped: [l, b, h, i, j] is how much QUERY i "
        "attends to KEY j (each row i sums to 1, and the future j > i is 0); self_attn's "
        "weights are already in that order, do not transpose them"
    ),
    "batch_first": (
        "the layers must be the FIRST axis: (num_layers, batch, num_heads, seq, seq); "
        "stack the per-layer patterns along dim 0"
    ),
    "heads_averaged": (
        "keep every head: each layer's pattern is (batch, num_heads, seq, seq), not an "
        "average over the heads"
    ),
    "last_layer_only": (
        "every layer's pattern is needed, one hook per layer in model.layers (a hook made in "
        "a loop that stores into patterns[i] reads i when it runs, after the loop: every layer "
        "then writes the last layer's slot; append in order, or bind it, lambda m, a, o, i=i:)"
    ),
    "weights_not_asked": (
        "the layers call self_attn with need_weights=False, so its second output is "
        "None: a forward pre-hook registered with with_kwargs=True must set "
        "kwargs['need_weights'] = True. If yours does, a slot of a list made first "
        "([None] * num_layers) was never filled: a hook made in a loop that writes patterns[i] "
        "reads i when it runs, after the loop, so every layer writes the last slot; append in "
        "order, or bind it, lambda m, a, o, i=i:"
    ),
    "late_slot": (
        "only the last layer's pattern is filled, every other layer's is still 0: a hook made "
        "in a loop that writes result[i] reads i when it runs, after the loop, so every layer "
        "writes the last layer's slot; bind it (lambda m, a, o, i=i: ...), or append each "
        "pattern to a list in order and torch.stack it"
    ),
    "kwargs_dropped": (
        "your pre-hook returns only {'need_weights': True}: the layer's other keyword "
        "arguments (its mask, is_causal) are dropped, so every token also attends to the "
        "future; keep them: return args, {**kwargs, 'need_weights': True}"
    ),
    "swallowed": (
        "the forward raised ValueError (the ids are longer than block_size) and your function "
        "caught it and returned: let the error propagate, so the caller learns their ids do "
        "not fit; `try:` ... `finally:` removes the hooks without an `except`"
    ),
    "kept": KEPT,  # a module-level list: the next call stacks this call's patterns with its own
    "list": "return one tensor (torch.stack of the per-layer patterns), not a list",
    "cat": (
        "torch.cat joins the layers' patterns along their batch axis, (num_layers * batch, "
        "num_heads, seq, seq): torch.stack(patterns) puts them on a NEW first axis, "
        "(num_layers, batch, num_heads, seq, seq)"
    ),
    "average_kwarg": (
        "the course's self_attn is not nn.MultiheadAttention and takes no "
        "average_attn_weights: its weights already come per head, (batch, num_heads, seq, "
        "seq); set only kwargs['need_weights'] = True"
    ),
}


_KEPT: list = []  # "kept": the patterns of every call so far


def wrong_patterns(model, ids, *, mistake=""):
    """(num_layers, batch, num_heads, seq, seq), with the named mistake ("": none)."""
    patterns, handles = (_KEPT if mistake == "kept" else []), []
    was = model.training
    if mistake in ("eval_left", "mode_no_finally"):
        model.eval()

    def ask(module, args, kwargs):
        kept = {} if mistake == "kwargs_dropped" else kwargs  # the mask, is_causal, ...
        if mistake == "average_kwarg":  # nn.MultiheadAttention's keyword, unknown here
            kept = {**kwargs, "average_attn_weights": False}
        return args, {**kept, "need_weights": mistake != "weights_not_asked"}

    def keep(module, args, output):
        patterns.append(output[1])

    if mistake == "record_flag":  # the layers' own recording instead of hooks, left on
        for layer in model.layers:
            layer.record_attention = True
        with torch.no_grad():
            model(ids)
        return torch.stack([layer.attention for layer in model.layers])
    layers = model.layers[-1:] if mistake == "last_layer_only" else model.layers
    try:
        for layer in layers:
            handles.append(layer.self_attn.register_forward_pre_hook(ask, with_kwargs=True))
            handles.append(layer.self_attn.register_forward_hook(keep))
        with torch.no_grad():
            model(ids)
        if mistake == "no_finally":  # removed after the forward, so never when it raises
            for handle in handles:
                handle.remove()
        if mistake == "mode_no_finally":  # put back after the forward, so never when it raises
            model.train(was)
    except ValueError:  # the ids do not fit: "swallowed" returns instead of raising
        if mistake != "swallowed":
            raise
        return None
    finally:
        if mistake not in ("hooks_left", "no_finally"):
            for handle in handles:
                handle.remove()
    if mistake == "late_slot":  # a tensor made first, every hook writing the last layer's slot
        stacked = torch.stack(patterns)
        return torch.cat([torch.zeros_like(stacked[:-1]), stacked[-1:]])
    if mistake == "cat":  # the layers end to end along the batch axis
        return torch.cat(patterns)
    if mistake == "batch_first":
        return torch.stack(patterns, dim=1)
    if mistake == "heads_averaged":
        return torch.stack(patterns).mean(2)
    if mistake == "transposed":
        return torch.stack(patterns).transpose(-2, -1)
    return patterns if mistake == "list" else torch.stack(patterns)


@register
class AttentionPatterns(ModelTask):
    id = "ex11.attention_patterns"
    lesson = f"{LESSON}, section 1 'Reading activations without changing code: hooks'"
    reference = "course_lib.inspection.attention_patterns"
    forbidden = ("course_lib.blocks.record_attention",)
    mistake_table = MISTAKES
    wrong = staticmethod(wrong_patterns)

    def diagnose(self, got, want, case):
        got, want = got[0], want[0]  # (the result, the model's state afterwards)
        if not (isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor)):
            return None
        more = got.dim() == want.dim() and got.shape[0] > want.shape[0]
        return KEPT if more and got.shape[1:] == want.shape[1:] else None  # earlier calls' too

    def cases(self, gen):
        specs = [
            ({"kind": "random", "seed": 1, "block": 7}, (2, 7)),
            ({"kind": "random", "seed": 2, "layers": 3, "heads": 2, "positions": "rope"}, (3, 5)),
            ({"kind": "random", "seed": 3, "layers": 1, "heads": 4, "d_model": 16}, (1, 9)),
            (circuit_spec(gen), None),  # repeated tokens
            ({"kind": "random", "seed": 14, "training": True}, (2, 6)),
        ]
        cases = [
            model_case(spec, randint(gen, 13, *shape) if shape else repeated(gen, 2, 8, 24))
            for spec, shape in specs
        ]
        return [*cases, raising_case(gen, "ids")]
