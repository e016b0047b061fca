"""ex07.EncoderLayer: self-attention and the feed-forward network, post-norm or pre-norm, with
a choice of activation and of biases (the learner builds it from their own MultiHeadAttention,
LayerNorm and activation)."""

from __future__ import annotations

import torch

from ...core import register
from . import _layers as layers

MISTAKES = {  # "default_pre_norm" first: on its case "pre_post_swapped" gives the same
    "default_pre_norm": layers.DEFAULT_PRE_NORM,
    "always_post": layers.ALWAYS_POST_NORM,
    "pre_post_swapped": layers.PRE_POST_SWAPPED,
    "residual_normed": "the residual must carry x itself around the sub-layer: "
    "post-norm is norm1(x + attention(x)), not x + norm1(attention(x)); pre-norm is "
    "x + attention(norm1(x)), not norm1(x) + attention(norm1(x))",
    "no_residual": "the residual connections are missing: add the sub-layer's input "
    "to its output (x + sublayer(...)) around both attention and feed-forward",
    "residual_outside": "each sub-layer needs its own residual connection: one "
    "around self-attention and one around the feed-forward network, not a single one "
    "around the whole layer",
    "mask_ignored": "the mask is ignored: pass it to the self-attention, "
    "self_attn(h, h, h, mask=mask)",
    "gelu": layers.RELU_NOT_GELU,
    "relu2_as_relu": layers.RELU2_AS_RELU,
    "gelu_tanh_as_gelu": layers.GELU_TANH_AS_GELU,
    "gelu_as_tanh": layers.GELU_AS_TANH,
    "activation_ignored": layers.ACTIVATION_IGNORED,
    "norm1_twice": "norm1 is used twice: norm1 goes with the attention, norm2 with the "
    "feed-forward network (each has its own weights)",
    "mask_inverted": layers.MASK_INVERTED,
    "norms_swapped": "norm1 and norm2 are swapped: norm1 goes with the self-attention, norm2 "
    "with the feed-forward network",
    "ff_on_input": "the feed-forward sub-layer reads the layer's input x instead of the output "
    "of the attention sub-layer: the two run one after the other, x = x + attention(...), then "
    "the feed-forward network on that new x",
    "no_attn_residual": "the residual connection around the self-attention is missing: add its "
    "input, x + attention(...), as you did around the feed-forward network",
    "no_ff_residual": "the residual connection around the feed-forward network is missing: add "
    "its input, x + ffn(...), as you did around the self-attention",
    "norm_eps": layers.LAYER_NORM_EPS,
    "output_tuple": layers.OUTPUT_TUPLE,
    "relu2_square_first": layers.RELU2_SQUARE_FIRST,
    "pre_norm_output_normalised": layers.PRE_NORM_OUTPUT_NORMALISED,
    "pre_final_norm": layers.PRE_FINAL_NORM,
    "pre_stale_h": "in pre-norm the feed-forward network reads norm1(x) from before the "
    "attention: normalise the x the attention sub-layer returned, x = x + ffn(norm2(x))",
    "one_norm_module": layers.ONE_NORM_MODULE,
    "lesson_heads": layers.LESSON_HEADS,
    "kv_not_normed": layers.KV_NOT_NORMED,
    "pre_no_last_norm": layers.PRE_NO_LAST_NORM,
    "stale_residual": layers.STALE_RESIDUAL,
    "output_unused": "the attention sub-layer's output is never used: the feed-forward "
    "sub-layer reads and adds the layer's input x (as after h = norm1(x + attention(x)) "
    "followed by norm2(x + ffn(x))), so the layer computes as if it had no attention; assign "
    "its result to x, so that the feed-forward network works on it",
    "no_final_norm": "the feed-forward sub-layer has no LayerNorm: in post-norm the last step is "
    "x = norm2(x + ffn(x)), as the attention's is x = norm1(x + attention(x))",
    "no_first_norm": "the attention sub-layer has no LayerNorm: in post-norm the first step is "
    "x = norm1(x + attention(x)), its result the input of the feed-forward sub-layer",
    "activation_after": "the activation belongs between linear1 and linear2, not after linear2: "
    "linear2(activate(linear1(x), activation)), as in your FeedForward",
    "activation_both": layers.ACTIVATION_BOTH,
    "activation_on_sum": layers.ACTIVATION_ON_SUM,
    "norm_sandwich": layers.NORM_SANDWICH,
    "norm_of_normed_x": layers.NORM_OF_NORMED_X,
    "mode_mixed_attn": layers.mode_mixed("self-attention"),
    "mode_mixed_ffn": layers.mode_mixed("feed-forward"),
    "mask_kept": layers.MASK_KEPT,
    "post_residual_normed": layers.POST_RESIDUAL_NORMED,
    "post_attn_residual_normed": layers.POST_RESIDUAL_NORMED,
    "post_ffn_residual_normed": layers.POST_RESIDUAL_NORMED,
    "attn_residual_normed": layers.FIRST_RESIDUAL_NORMED,
    "ffn_residual_normed": layers.LAST_RESIDUAL_NORMED.replace("norm(x)", "norm2(x)", 1),
    "ffn_first": "the sub-layers are in the wrong order: the self-attention first, then the "
    "feed-forward network, each with its own LayerNorm (norm1, then norm2), as in "
    "nn.TransformerEncoderLayer",
}


class WrongEncoderLayer(layers.WrongLayer):
    """An encoder layer with one named mistake (`mistake`); "" is a right one."""

    def forward(self, x, mask=None):
        return self.layer(x, None, mask, None)


@register
class EncoderLayerTask(layers.LayerTask):
    id = "ex07.EncoderLayer"
    lesson = "lesson 07, sections 'Post-norm and pre-norm' and 'The encoder layer'"
    reference = "course_lib.blocks.EncoderLayer"
    mistake_table = MISTAKES
    wrong = WrongEncoderLayer
    forbidden = (
        "torch.nn.TransformerEncoderLayer",
        "torch.nn.TransformerEncoder",
        "torch._transformer_encoder_layer_fwd",
    )
    # norms that are not the learner's own LayerNorm (task 1), as the statement asks: half marks
    borrowable = ("torch.nn.LayerNorm", "course_lib.norms.LayerNorm")

    def cases(self, gen):
        from ....blocks import EncoderLayer
        from ....masking import causal_mask

        def case(description, sizes, shape, norm_first, dtype=torch.float32, **options):
            return layers.layer_case(
                gen, description, EncoderLayer, sizes, norm_first, [shape], dtype, **options
            )

        lengths = torch.tensor([6, 3, 1])
        pad = (torch.arange(6)[None, :] < lengths[:, None]).unsqueeze(1)  # (3, 1, 6)
        f64 = torch.float64
        # sizes: (d_model, num_heads, d_ff); shape: x's shape before d_model
        return [
            case("post-norm (norm_first=False), d_model=8, 2 heads, x (2, 5, 8)",
                 (8, 2, 16), (2, 5), False),
            case("pre-norm (norm_first=True), d_model=8, 2 heads, x (2, 5, 8)",
                 (8, 2, 16), (2, 5), True),
            case("post-norm, built without norm_first (its default is False), with a causal "
                 "mask (4, 4), d_model=12, 3 heads",
                 (12, 3, 24), (2, 4), None, mask=causal_mask(4)),
            case("pre-norm with a padding mask (3, 1, 6), lengths [6, 3, 1]",
                 (8, 4, 32), (3, 6), True, mask=pad),
            case("float64, post-norm, with a padding mask (3, 1, 6)",
                 (8, 2, 8), (3, 6), False, f64, mask=pad),
            case("float64, pre-norm, d_model=6, 1 head, x (1, 3, 6)",
                 (6, 1, 12), (1, 3), True, f64),
            case("post-norm, activation='gelu' (as nn.TransformerEncoderLayer(activation='gelu')), "
                 "d_model=8, 2 heads, x (2, 5, 8)",
                 (8, 2, 16), (2, 5), False, activation="gelu"),
            case("pre-norm, activation='gelu_tanh' (GPT-2's), float64, d_model=8, 4 heads, "
                 "x (2, 4, 8)",
                 (8, 4, 32), (2, 4), True, f64, activation="gelu_tanh"),
            case("pre-norm, activation='relu2', bias=False (no bias anywhere: attention, "
                 "linears, norms), causal mask (5, 5), d_model=8, 2 heads, x (2, 5, 8)",
                 (8, 2, 32), (2, 5), True, mask=causal_mask(5), activation="relu2", bias=False),
            case("post-norm, bias=False, float64, with a padding mask (3, 1, 6)",
                 (8, 2, 16), (3, 6), False, f64, mask=pad, bias=False),
        ]  # fmt: skip
