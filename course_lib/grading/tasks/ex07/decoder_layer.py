"""ex07.DecoderLayer (transfer: the lesson shows it, the learner wires three sub-layers)."""

from __future__ import annotations

import torch

from ...core import register
from . import _layers as layers

WRONG_ORDER = (
    "the sub-layers are in the wrong order: self-attention over the target first, then "
    "the cross-attention to memory, then the feed-forward network"
)

MISTAKES = {  # "default_pre_norm" first: on its case "pre_post_swapped" gives the same
    "default_pre_norm": layers.DEFAULT_PRE_NORM,
    "always_post": layers.ALWAYS_POST_NORM,
    "cross_on_x": "the cross-attention takes its keys and values from the target "
    "x: that is a second self-attention. Queries come from x, keys and values from "
    "memory (the encoder's output): multihead_attn(x, memory, memory, "
    "mask=memory_mask)",
    "norms_swapped": "norm2 and norm3 are swapped: norm1 goes with self-attention, "
    "norm2 with cross-attention, norm3 with the feed-forward network (the names of "
    "nn.TransformerDecoderLayer)",
    "pre_post_swapped": layers.PRE_POST_SWAPPED,
    "masks_swapped": "self_mask belongs to the self-attention (target to target, "
    "causal) and memory_mask to the cross-attention (target to source padding); you "
    "swapped them",
    "no_self_mask": "the self-attention ignores self_mask: without the causal mask "
    "every target position sees the future tokens it must predict; pass it on, "
    "self_attn(h, h, h, mask=self_mask)",
    "causal_default": "with self_mask=None your self-attention is causal all the same: the layer "
    "masks only with the self_mask it is given (the model that calls it passes the causal "
    "one), so pass self_mask on as it is, None included",
    "no_memory_mask": "the cross-attention ignores memory_mask: the padding positions of the "
    "source must get zero weight, multihead_attn(x, memory, memory, mask=memory_mask)",
    "residual_of_normed": "in pre-norm the residual adds the sub-layer's output to x itself, "
    "x + sublayer(norm(x)), not to the normalised norm(x)",
    "memory_normed": "memory goes into the cross-attention as it is: norm2 normalises the target "
    "side only (in pre-norm, the queries; memory was already normalised by the "
    "encoder's final LayerNorm), as in lesson 06's cross-attention sub-layer",
    "memory_norm1": "memory goes into the cross-attention as it is: norm1 belongs to the "
    "self-attention's input (norm2 to the cross-attention's queries), and memory was already "
    "normalised by the encoder's final LayerNorm: multihead_attn(norm2(x), memory, memory, ...) "
    "in pre-norm",
    "masks_inverted": layers.MASK_INVERTED.replace("the mask is", "the masks are"),
    "self_mask_inverted": "self_mask is inverted (~causal is PyTorch's tgt_mask, True = "
    "blocked): here True means 'may attend', so pass the causal mask as it is, like memory_mask",
    "queries_from_memory": "the cross-attention takes its queries from memory: the queries come "
    "from the target x, the keys and values from memory, multihead_attn(x, memory, memory, "
    "mask=memory_mask)",
    "gelu": layers.RELU_ONLY,
    "norm1_everywhere": "norm1 is used for every sub-layer: norm1 goes with the self-attention, "
    "norm2 with the cross-attention, norm3 with the feed-forward network (each has its own "
    "weights)",
    "norm2_for_ffn": "the feed-forward sub-layer uses norm2 again: norm2 goes with the "
    "cross-attention, norm3 with the feed-forward network (each has its own weights)",
    "no_residual": "the residual connections are missing: add each sub-layer's input to its "
    "output (x + sublayer(...)) around all three sub-layers",
    "normed_sublayer": "the residual must carry x itself around the sub-layer: post-norm is "
    "norm(x + sublayer(x)), not x + norm(sublayer(x))",
    "no_final_norm": "the feed-forward sub-layer has no LayerNorm: in post-norm the last step is "
    "x = norm3(x + ffn(x))",
    "cross_first": WRONG_ORDER,  # the sub-layers moved, the norms left in place
    "norm_eps": layers.LAYER_NORM_EPS,
    "output_tuple": layers.OUTPUT_TUPLE,
    "cross_reads_input": "the cross-attention reads the layer's input x instead of the output "
    "of the self-attention sub-layer: the three sub-layers run one after the other, each on "
    "the x the previous one returned (keep assigning x = ...)",
    "lines_cross_first": WRONG_ORDER,  # whole lines moved: each sub-layer with its norm
    "lines_ff_before_cross": WRONG_ORDER,
    "pre_norm_output_normalised": layers.PRE_NORM_OUTPUT_NORMALISED,
    "pre_final_norm": layers.PRE_FINAL_NORM,
    "one_norm_module": layers.ONE_NORM_MODULE,
    "lesson_heads": layers.LESSON_HEADS,
    "kv_not_normed": layers.KV_NOT_NORMED,
    "pre_no_last_norm": layers.PRE_NO_LAST_NORM,
    "stale_residual": layers.STALE_RESIDUAL,
    "attns_swapped": "self_attn and multihead_attn are swapped: self_attn is the masked "
    "self-attention, multihead_attn the cross-attention to memory (nn.TransformerDecoderLayer's "
    "names, under which the check loads the weights)",
    "self_attn_twice": "the cross-attention runs self_attn again, with the self-attention's "
    "weights: it has its own module, multihead_attn(x, memory, memory, mask=memory_mask), "
    "whose weights the check loads apart",
    "norm1_for_cross": "the cross-attention uses norm1 again: it has its own LayerNorm, norm2 "
    "(norm1 goes with the self-attention, norm3 with the feed-forward network)",
    "pre_stale_query": "in pre-norm the cross-attention's queries are norm1(x) from before the "
    "self-attention: normalise the x it returned, h = norm2(x), then "
    "multihead_attn(h, memory, memory, mask=memory_mask)",
    "pre_cross_unnormed": "in pre-norm the cross-attention's queries are normalised too, "
    "x = x + multihead_attn(norm2(x), memory, memory, ...): only memory goes in as it is",
    "memory_mask_transposed": "memory_mask is transposed: its last axis is the source "
    "positions, the keys, so pass it as it comes, (batch, 1, n_src); transposed it masks "
    "target positions (and fails when n_src differs from n_tgt)",
    "no_attn_residual": "the residual connection around the self-attention is missing: add its "
    "input, x + self_attn(...), as around the other two sub-layers",
    "no_cross_residual": "the residual connection around the cross-attention is missing: add "
    "its input, x + multihead_attn(...), as around the other two sub-layers",
    "no_ff_residual": "the residual connection around the feed-forward network is missing: add "
    "its input, x + ffn(...), as around the two attention sub-layers",
    "output_unused": "the cross-attention sub-layer's output is never used: the feed-forward "
    "sub-layer reads and adds the x from before it (as after h = norm2(x + cross_attention(x)) "
    "followed by norm3(x + ffn(x))); assign each sub-layer's result to x, so that the next one "
    "works on it",
    "no_first_norm": "the self-attention sub-layer has no LayerNorm: in post-norm the first "
    "step is x = norm1(x + self_attn(x, x, x, ...)), as the others end in norm2 and norm3",
    "one_attn_module": "self_attn and multihead_attn are one and the same module (as after "
    "self.self_attn = self.multihead_attn = MultiHeadAttention(...)): loading the weights leaves "
    "both names with the last one's (multihead_attn's). Create two MultiHeadAttention modules, "
    "each with its own weights",
    "self_mask_in_cross": "the cross-attention got self_mask, the target's own (causal) mask: "
    "it takes memory_mask, which says which source positions are real, "
    "multihead_attn(x, memory, memory, mask=memory_mask)",
    "activation_after": "the ReLU belongs between linear1 and linear2, not after linear2: "
    "linear2(relu(linear1(x))), as in your FeedForward",
    "activation_both": layers.ACTIVATION_BOTH,
    "activation_on_sum": layers.ACTIVATION_ON_SUM,
    "norm_sandwich": layers.NORM_SANDWICH,
    "norm_of_normed_x": layers.NORM_OF_NORMED_X,
    "mode_mixed_attn": layers.mode_mixed("self-attention"),
    "mode_mixed_cross": layers.mode_mixed("cross-attention"),
    "mode_mixed_ffn": layers.mode_mixed("feed-forward"),
    "mask_kept": layers.MASK_KEPT,
    "self_mask_kept": layers.MASK_KEPT,
    "memory_kept": layers.MEMORY_KEPT,
    "post_residual_normed": layers.POST_RESIDUAL_NORMED,
    "post_attn_residual_normed": layers.POST_RESIDUAL_NORMED,
    "post_ffn_residual_normed": layers.POST_RESIDUAL_NORMED,
    "attn_residual_normed": layers.FIRST_RESIDUAL_NORMED,
    "ffn_residual_normed": layers.LAST_RESIDUAL_NORMED.replace("norm(x)", "norm3(x)", 1),
}


class WrongDecoderLayer(layers.WrongLayer):
    """A decoder layer with one named mistake (`mistake`); "" is a right one."""

    cross = True

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        return self.layer(x, memory, self_mask, memory_mask)


@register
class DecoderLayerTask(layers.LayerTask):
    id = "ex07.DecoderLayer"
    lesson = "lesson 07, section 'The decoder layer'"
    reference = "course_lib.blocks.DecoderLayer"
    mistake_table = MISTAKES
    wrong = WrongDecoderLayer
    forbidden = (
        "torch.nn.TransformerDecoderLayer",
        "torch.nn.TransformerDecoder",
        "torch.nn.Transformer",
    )

    def cases(self, gen):
        from ....blocks import DecoderLayer
        from ....masking import causal_mask

        def case(description, sizes, shape, norm_first, dtype=torch.float32, masks=(None, None)):
            batch, n_tgt, n_src = shape
            shapes = [(batch, n_tgt), (batch, n_src)]  # x, memory
            return layers.layer_case(
                gen, description, DecoderLayer, sizes, norm_first, shapes, dtype, tail=masks
            )

        src_pad = (torch.arange(6)[None, :] < torch.tensor([6, 2, 4])[:, None]).unsqueeze(1)
        f64 = torch.float64
        # shape: (batch, target length, source length); masks: (self_mask, memory_mask)
        return [
            case("post-norm (norm_first=False), d_model=8, 2 heads, x (2, 4, 8), memory "
                 "(2, 6, 8), no masks",
                 (8, 2, 16), (2, 4, 6), False),
            case("pre-norm (norm_first=True), d_model=8, 2 heads, x (2, 4, 8), memory (2, 6, 8)",
                 (8, 2, 16), (2, 4, 6), True),
            case("post-norm, built without norm_first (its default is False), with a causal "
                 "self_mask (6, 6) and a source padding memory_mask (3, 1, 6), x (3, 6, 8), "
                 "memory (3, 6, 8) (as long as the target), 2 heads",
                 (8, 2, 16), (3, 6, 6), None, masks=(causal_mask(6), src_pad)),
            case("post-norm with a causal self_mask (5, 5) and a source padding memory_mask "
                 "(3, 1, 6), x (3, 5, 12), memory (3, 6, 12), 3 heads",
                 (12, 3, 24), (3, 5, 6), False, masks=(causal_mask(5), src_pad)),
            case("pre-norm with a causal self_mask (3, 3) and a memory_mask (3, 1, 6), x (3, 3, "
                 "8), memory (3, 6, 8), 4 heads",
                 (8, 4, 32), (3, 3, 6), True, masks=(causal_mask(3), src_pad)),
            case("float64, post-norm, batch 1, x (1, 6, 6), memory (1, 2, 6), 1 head, causal "
                 "self_mask",
                 (6, 1, 12), (1, 6, 2), False, f64, (causal_mask(6), None)),
            case("pre-norm with per-sequence masks: self_mask (3, 5, 5) causal and padded "
                 "differently in each row, memory_mask (3, 5, 6) different for each query, "
                 "x (3, 5, 8), memory (3, 6, 8), 2 heads",
                 (8, 2, 16), (3, 5, 6), True,
                 masks=(causal_mask(5)
                        & (torch.arange(5)[None, None, :] < torch.tensor([5, 3, 4])[:, None, None]),
                        (torch.rand(3, 5, 6, generator=gen) > 0.4)
                        | (torch.arange(6) == 0)[None, None, :])),
            case("float64, pre-norm, x (2, 4, 8), memory (2, 3, 8), causal self_mask",
                 (8, 2, 8), (2, 4, 3), True, f64, (causal_mask(4), None)),
        ]  # fmt: skip
