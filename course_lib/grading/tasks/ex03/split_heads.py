"""ex03.split_heads: (batch, seq, d_model) to (batch, num_heads, seq, d_head)."""

from __future__ import annotations

from ...core import Case, Task, register
from ..common import randn
from ._shared import F64

_FLOAT_D_HEAD_HINT = (
    "d_model / num_heads is a float (12 / 3 = 4.0) even when it divides evenly, and a shape "
    "needs ints: use d_model // num_heads"
)


@register
class SplitHeads(Task):
    id = "ex03.split_heads"
    lesson = "lesson 03, section 'Splitting d_model into heads'"
    reference = "course_lib.multihead.split_heads"
    backward = True  # MultiHeadAttention trains through it: its gradients are judged too
    mistake_table = {
        "no_transpose": "a reshape straight to (batch, num_heads, seq, d_head) mixes tokens: it "
        "cuts the flat memory of each sequence into num_heads blocks, so one 'token' row of head "
        "0 holds features of several tokens. Reshape to (batch, seq, num_heads, d_head) first, "
        "then transpose(1, 2)",
        "interleaved": "head h must get the contiguous block of features h*d_head ... "
        "(h+1)*d_head - 1; you gave it every num_heads-th feature. Reshape to (batch, seq, "
        "num_heads, d_head)",
        "float_d_head": _FLOAT_D_HEAD_HINT,
        "view_float_d_head": _FLOAT_D_HEAD_HINT,
        "transpose_first": "the two steps are in the wrong order: transposing x first puts "
        "d_model before seq, and the reshape then cuts that memory into pieces of other tokens. "
        "Reshape to (batch, seq, num_heads, d_head) first, then transpose(1, 2)",
        "d_head_before_seq": "a reshape to (batch, num_heads, d_head, seq) followed by "
        "transpose(2, 3) has the right shape but mixes tokens: the reshape reads x token after "
        "token, so its 'seq' axis holds features, not tokens. Reshape to (batch, seq, "
        "num_heads, d_head) first, then transpose(1, 2)",
    }

    def cases(self, gen):
        return [
            Case("x (2, 5, 12) with num_heads=3", (randn(gen, 2, 5, 12), 3)),
            Case("x (1, 4, 8) with num_heads=2", (randn(gen, 1, 4, 8), 2)),
            Case("float64 x (3, 6, 8) with num_heads=4", (randn(gen, 3, 6, 8, dtype=F64), 4)),
            Case("x (2, 3, 6) with num_heads=6 (d_head = 1)", (randn(gen, 2, 3, 6), 6)),
            Case("x (2, 7, 4) with num_heads=1 (one wide head)", (randn(gen, 2, 7, 4), 1)),
            Case(  # a d_head or shape cached by num_heads or by x.shape passed the cases above
                "x (2, 5, 12) with num_heads=2 (d_head = 6): the first case's shape and the "
                "second case's num_heads again, so a d_head or shape kept from an earlier call "
                "fails here",
                (randn(gen, 2, 5, 12), 2),
            ),
            Case(
                "x (2, 3, 10) with num_heads=4: 10 is not divisible by 4, so a ValueError",
                (randn(gen, 2, 3, 10), 4),
                raises=ValueError,
            ),
        ]

    def call(self, obj, case):
        """Its gradients are taken on x + 0, not a leaf: in MultiHeadAttention x is a
        projection's output, where an in-place transpose_ of the reshaped view is right."""
        value = obj(*case.args, **case.kwargs)
        return self.learnable(lambda x, *rest, **kw: obj(x + 0, *rest, **kw), case, value)

    def wrong(self, x, num_heads, *, mistake):
        batch, seq, d_model = x.shape
        float_d_head = mistake in ("float_d_head", "view_float_d_head")
        d_head = d_model / num_heads if float_d_head else d_model // num_heads  # a float raises
        if mistake == "no_transpose":
            return x.reshape(batch, num_heads, seq, d_head)
        if mistake == "transpose_first":  # transpose, then reshape: the right steps reversed
            return x.transpose(1, 2).reshape(batch, num_heads, seq, d_head)
        if mistake == "d_head_before_seq":  # (batch, heads, d_head, seq), then the last two swapped
            return x.reshape(batch, num_heads, d_head, seq).transpose(2, 3)
        if mistake == "interleaved":  # (batch, seq, d_head, heads): head h gets every h-th feature
            return x.reshape(batch, seq, d_head, num_heads).permute(0, 3, 1, 2)
        if mistake == "view_float_d_head":  # view words its error differently from reshape
            return x.view(batch, seq, num_heads, d_head).transpose(1, 2)
        return x.reshape(batch, seq, num_heads, d_head).transpose(1, 2)
