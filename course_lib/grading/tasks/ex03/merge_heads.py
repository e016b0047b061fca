"""ex03.merge_heads: (batch, num_heads, seq, d_head) back to (batch, seq, d_model)."""

from __future__ import annotations

from ...core import Case, Task, register
from ..common import randn
from ._shared import F64


@register
class MergeHeads(Task):
    id = "ex03.merge_heads"
    lesson = "lesson 03, section 'Merging the heads back'"
    reference = "course_lib.multihead.merge_heads"
    backward = True  # MultiHeadAttention trains through it: its gradients are judged too
    mistake_table = {
        "no_transpose": "the reshape needs the heads next to d_head: transpose(1, 2) to "
        "(batch, seq, num_heads, d_head) first, then reshape to (batch, seq, d_model). Without "
        "the transpose the tokens get mixed, exactly the split_heads mistake",
        "last_axes_transposed": "you transposed the last two axes (seq and d_head), as for "
        "k.transpose(-2, -1) in attention; merging swaps the heads and seq axes back: "
        "transpose(1, 2) to (batch, seq, num_heads, d_head), then reshape to (batch, seq, d_model)",
        "interleaved": "the heads must be concatenated one after the other (all of head 0's "
        "d_head features, then head 1's, ...); you interleaved them. Transpose only axes 1 and 2",
        "view": "after transpose(1, 2) the tensor is a view that is not contiguous, so .view "
        "cannot merge its last two axes (lesson 03 shows this): use .reshape, which copies when "
        "it has to",
        "transpose_0_2": "transpose(0, 2) swaps the batch and seq axes, (seq, num_heads, batch, "
        "d_head), so the reshape mixes the sequences of the batch; merging swaps the heads and "
        "seq axes back: "
        "transpose(1, 2) to (batch, seq, num_heads, d_head), then reshape to (batch, seq, "
        "d_model)",
        "transpose_0_1": "transpose(0, 1) swaps the batch and heads axes, (num_heads, batch, "
        "seq, d_head), so the reshape mixes heads and sequences; merging swaps the heads and seq "
        "axes back: transpose(1, 2) to (batch, seq, num_heads, d_head), then reshape to (batch, "
        "seq, d_model)",
        "unpacked_as_input": "you unpacked x.shape as (batch, seq, num_heads, d_head), the "
        "order of split_heads' input; merge_heads gets split_heads' output, (batch, num_heads, "
        "seq, d_head), so your 'seq' is the number of heads: batch, num_heads, seq, d_head = "
        "x.shape",
        "reshape_first": "you repeated split_heads' steps in the same order (reshape to (batch, "
        "seq, num_heads, d_head), then transpose): a reshape of the (batch, num_heads, seq, "
        "d_head) heads reads them head after head, so it mixes tokens. Undo the split in reverse "
        "order: transpose(1, 2) first, then reshape to (batch, seq, d_model)",
    }

    def cases(self, gen):
        return [
            Case("x (2, 3, 5, 4): 3 heads of d_head 4", (randn(gen, 2, 3, 5, 4),)),
            Case("x (1, 2, 6, 3)", (randn(gen, 1, 2, 6, 3),)),
            Case("float64 x (3, 4, 2, 2)", (randn(gen, 3, 4, 2, 2, dtype=F64),)),
            Case("x (2, 1, 4, 8): one head", (randn(gen, 2, 1, 4, 8),)),
            Case("x (2, 8, 3, 1): d_head = 1", (randn(gen, 2, 8, 3, 1),)),
        ]

    def wrong(self, x, *, mistake):
        batch, num_heads, seq, d_head = x.shape
        if mistake == "unpacked_as_input":  # batch, seq, num_heads, d_head = x.shape: the names
            seq, num_heads = num_heads, seq  # of split_heads' input, on its output
        if mistake == "interleaved":
            x = x.permute(0, 2, 3, 1)  # (batch, seq, d_head, num_heads)
        elif mistake == "last_axes_transposed":  # attention's k.transpose(-2, -1) habit
            x = x.transpose(-2, -1)  # (batch, num_heads, d_head, seq)
        elif mistake == "reshape_first":  # split_heads' order: reshape, then transpose
            x = x.reshape(batch, seq, num_heads, d_head).transpose(1, 2)
        elif mistake != "no_transpose":  # (batch, seq, num_heads, d_head); 0, 2: (seq, ...)
            x = x.transpose(
                *{"transpose_0_2": (0, 2), "transpose_0_1": (0, 1)}.get(mistake, (1, 2))
            )
        return (x.view if mistake == "view" else x.reshape)(batch, seq, num_heads * d_head)
