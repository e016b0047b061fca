"""ex11.direct_logit_attribution: the logits split into what the embeddings, each head and each
feed-forward wrote, through the final norm's fixed divisor."""

from __future__ import annotations

import torch

from ...core import GradingError, register
from ..common import randint
from ._models import (
    KEPT,
    LESSON,
    NO_FINALLY,
    ModelTask,
    build,
    circuit_spec,
    close,
    model_case,
    raising_case,
    repeated,
)

MISTAKES = {
    "no_finally": NO_FINALLY,  # first: every wrong below leaves its hooks when the forward raises
    "no_scale": (
        "the final norm's scale is missing: the parts must be divided by the norm's "
        "divisor sqrt(var + eps) of the WHOLE final stream (computed once, from the "
        "input of model.norm), or they do not sum to the logits"
    ),
    "full_norm": (
        "each part went through the whole LayerNorm, so each was divided by its own "
        "standard deviation: fix the divisor to the one of the whole final stream, "
        "then centre, divide and multiply by norm.weight each part"
    ),
    "no_norm": (
        "the final LayerNorm is left out: centre each part, divide by the final "
        "stream's sqrt(var + eps) and multiply by model.norm.weight before lm_head"
    ),
    "no_centre": (
        "each part must be centred (minus its mean over d_model) as the LayerNorm "
        "centres the stream"
    ),
    "no_weight": "the final norm's weight (gamma, model.norm.weight) is missing: multiply "
    "each part by it after centring and dividing",
    "weight_twice": (
        "the final norm's weight (model.norm.weight) is applied twice (once on each part and "
        "again, say, folded into the unembedding): multiply each part by it once, after "
        "centring and dividing, then apply model.lm_head as it is"
    ),
    "ff_first": (
        "the order of the parts: embeddings, then for each layer its heads 0 .. H-1 and "
        "THEN its feed-forward"
    ),
    "eps_fixed": (
        "the final norm's eps is hard-coded: use the model's own, model.norm.eps (a "
        "model may be built with another layer_norm_eps)"
    ),
    "unbiased": (
        "the divisor uses the UNBIASED variance (or .std()): LayerNorm divides by "
        "sqrt(var + eps) with the biased variance, var(-1, unbiased=False)"
    ),
    "no_keepdim": (
        "the divisor lost its last axis: var(-1, unbiased=False) without keepdim=True is "
        "(batch, seq), which cannot divide a (batch, seq, d_model) part; keep it, "
        "var(-1, unbiased=False, keepdim=True), (batch, seq, 1)"
    ),
    "no_sqrt": (
        "the divisor is the square ROOT of var + eps, the standard deviation: you divided by "
        "var + eps itself (or by the divisor twice); take (var + eps).sqrt() and divide once"
    ),
    "var_over_seq": (
        "the variance is over d_model, the LAST axis of the (batch, seq, d_model) stream: "
        "var(-1, unbiased=False, keepdim=True), one divisor per position (dim 1 is the "
        "positions)"
    ),
    "eps_outside": (
        "eps is added outside the square root: the divisor is sqrt(var + eps), as in "
        "LayerNorm, not std + eps (the two differ where the stream's variance is small)"
    ),
    "token_only": (
        "the first part is the input of model.layers[0], the token AND position embeddings "
        "(read it with a forward pre-hook on model.layers[0]), not token_embedding(ids) alone"
    ),
    "ff_input": (
        "the feed-forward's part is its OUTPUT (a forward hook on layer.feed_forward, reading "
        "`output`); a pre-hook sees its input, the normed stream going in"
    ),
    "last_layer_input": (
        "the divisor comes from the stream AFTER the last layer, the input of model.norm (a "
        "forward pre-hook on model.norm); a pre-hook on model.layers[-1] reads the stream "
        "before the last layer, without what that layer added"
    ),
    "norm_output": (
        "the divisor comes from the INPUT of model.norm (a forward pre-hook), the stream before "
        "the norm; its output is already normalised"
    ),
    "weight_first": (
        "you multiplied by model.norm.weight BEFORE centring: centre each part (minus "
        "its mean over d_model), divide by the divisor, THEN multiply by the weight"
    ),
    "stream_mean": (
        "each part is centred by ITS OWN mean over d_model, part - part.mean(-1): the stream's "
        "mean subtracted from every part is subtracted once per part in the sum"
    ),
    "rms_divisor": (
        "the divisor is LayerNorm's, sqrt(var + eps) of the stream with its mean subtracted "
        "(var(-1, unbiased=False)), not RMSNorm's root mean square sqrt(mean(x**2) + eps)"
    ),
    "kept": KEPT,  # module-level lists: zip(strict=True) meets the earlier calls' entries
    "rows": (
        "head h writes through the COLUMNS h*d_head .. (h+1)*d_head - 1 of "
        "out_proj.weight, transposed (out_proj computes z @ W.T); you took its rows"
    ),
}
ORDER = (  # the right parts in another order: no single listed slip, so `diagnose` finds it
    "each part is right, but the parts are in another order: the embeddings first, then layer "
    "by layer its heads 0 .. H-1 followed by its feed-forward (layer 0's heads, layer 0's "
    "feed-forward, layer 1's heads, ...)"
)
UNEMBEDDING = (  # lm_head.weight (vocab, d_model) used without its transpose
    "the unembedding is model.lm_head(x), or x @ model.lm_head.weight.T: lm_head.weight is "
    "(vocab, d_model), so x @ model.lm_head.weight does not fit"
)
HEAD_PRODUCT = (  # for a product whose shapes do not fit: rows, or columns not transposed
    "head h's part is its slice of out_proj's input, (..., d_head), times the matching COLUMNS "
    "of out_proj.weight, transposed: w[:, h * d_head : (h + 1) * d_head].T, (d_head, d_model)"
)


_KEPT: tuple = ([], [], [], [])  # "kept": what every call so far recorded


def wrong_attribution(model, ids, *, mistake):
    """(parts, batch, seq, vocab), with the named mistake."""
    config = model.config
    d_head = config.d_model // config.num_heads
    embed, z, ff, final = _KEPT if mistake == "kept" else ([], [], [], [])
    handles = [model.layers[0].register_forward_pre_hook(lambda m, a: embed.append(a[0]))]
    for layer in model.layers:
        handles.append(
            layer.self_attn.out_proj.register_forward_pre_hook(lambda m, a: z.append(a[0]))
        )
        ff_hook = (lambda m, a, o: ff.append(a[0])) if mistake == "ff_input" else None
        handles.append(
            layer.feed_forward.register_forward_hook(ff_hook or (lambda m, a, o: ff.append(o)))
        )
    if mistake == "norm_output":  # the norm's output, already normalised
        handles.append(model.norm.register_forward_hook(lambda m, a, o: final.append(o)))
    elif mistake == "last_layer_input":  # the stream before the last layer
        handles.append(model.layers[-1].register_forward_pre_hook(lambda m, a: final.append(a[0])))
    else:
        handles.append(model.norm.register_forward_pre_hook(lambda m, a: final.append(a[0])))
    with torch.no_grad():
        model(ids)
    for handle in handles:
        handle.remove()
    parts = [model.token_embedding(ids) if mistake == "token_only" else embed[0]]
    for layer, z_l, ff_l in zip(model.layers, z, ff, strict=True):
        w_o = layer.self_attn.out_proj.weight  # (d_model, num_heads * d_head)
        heads = [
            z_l[..., h * d_head : (h + 1) * d_head]
            @ (
                w_o[h * d_head : (h + 1) * d_head, :]  # rows: the wrong slice, no transpose
                if mistake == "rows"
                else w_o[:, h * d_head : (h + 1) * d_head].T
            )
            for h in range(config.num_heads)
        ]
        parts += [ff_l, *heads] if mistake == "ff_first" else [*heads, ff_l]
    norm = model.norm
    eps = 1e-5 if mistake == "eps_fixed" else norm.eps
    keep = mistake != "no_keepdim"  # (batch, seq) without it: no axis to broadcast over d_model
    axis = 1 if mistake == "var_over_seq" else -1  # dim 1: the positions
    scale = (final[0].var(axis, unbiased=mistake == "unbiased", keepdim=keep) + eps).sqrt()
    if mistake == "no_sqrt":  # var + eps, not its square root
        scale = scale**2
    if mistake == "eps_outside":
        scale = final[0].var(-1, unbiased=False, keepdim=True).sqrt() + eps
    if mistake == "rms_divisor":  # no mean subtracted
        scale = (final[0].pow(2).mean(-1, keepdim=True) + eps).sqrt()
    out = []
    for part in parts:
        if mistake == "full_norm":
            normed = norm(part)
        elif mistake == "no_norm":
            normed = part
        elif mistake == "weight_first":  # gamma before centring: the mean of part * gamma
            weighted = part * norm.weight
            normed = (weighted - weighted.mean(-1, keepdim=True)) / scale
        else:
            mean = (final[0] if mistake == "stream_mean" else part).mean(-1, keepdim=True)
            centred = part if mistake == "no_centre" else part - mean
            divided = centred if mistake == "no_scale" else centred / scale
            weight = norm.weight * norm.weight if mistake == "weight_twice" else norm.weight
            normed = divided if mistake == "no_weight" else divided * weight
        out.append(model.lm_head(normed))
    with torch.no_grad():
        return torch.stack(out).detach()


@register
class DirectLogitAttribution(ModelTask):
    id = "ex11.direct_logit_attribution"
    lesson = f"{LESSON}, section 6 'Direct logit attribution'"
    reference = "course_lib.inspection.direct_logit_attribution"
    forbidden = ("course_lib.inspection.head_inputs", "course_lib.inspection.residual_stream")
    mistake_table = MISTAKES
    wrong = staticmethod(wrong_attribution)
    atol = 1e-4

    def call(self, obj, case):
        try:
            return super().call(obj, case)
        except RuntimeError as error:
            if "cannot be multiplied" not in str(error):
                raise
            config = build(case.data["model"]).config
            unembedding = f"and {config.vocab_size}x{config.d_model})" in str(error)
            hint = UNEMBEDDING if unembedding else HEAD_PRODUCT
            message = f"your code raised RuntimeError: {error}. Hint: {hint}"
            raise GradingError(message) from None

    def diagnose(self, got, want, case):
        got, want = got[0], want[0]  # (the result, the model's state afterwards)
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            return None
        found = [  # for each of the learner's parts, the first expected part it equals
            next((j for j, w in enumerate(want) if close(g, w, self.atol) is None), None)
            for g in got
        ]
        in_order = [*range(len(want))]
        shuffled = None not in found and found != in_order and sorted(found) == in_order
        return ORDER if shuffled else None

    def cases(self, gen):
        specs = (
            ({"kind": "random", "seed": 7, "block": 6}, (2, 6)),
            ({"kind": "random", "seed": 8, "layers": 3, "heads": 2, "positions": "rope"}, (1, 8)),
            ({"kind": "random", "seed": 9, "layers": 1, "heads": 4, "d_model": 16}, (3, 5)),
            ({"kind": "random", "seed": 13, "quiet": True}, (2, 5)),
            ({"kind": "random", "seed": 17, "quiet": True, "norm_eps": 1e-3}, (2, 5)),
        )
        cases = [model_case(spec, randint(gen, 13, *shape)) for spec, shape in specs]
        spec = circuit_spec(gen)
        # last, so that the cases above stay as they were
        return [*cases, model_case(spec, repeated(gen, 2, 8, 24)), raising_case(gen, "ids")]
