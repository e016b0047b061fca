"""ex08.shift_right: the decoder input of teacher forcing."""

from __future__ import annotations

import torch

from ...core import Case, Task, register

BOS_FIRST_ROW = (
    "out[0] = bos_id fills the first ROW (the first sequence) with bos_id; <bos> goes in the "
    "first COLUMN of every row: out[:, 0] = bos_id (or torch.cat a column of bos_id and "
    "targets[:, :-1] along dim=1)"
)
MISTAKES = {
    "drop_first": "you dropped the first target token; drop the LAST one: <bos> followed by "
    "targets[:, :-1]",
    "shift_left": "that shifts left; the decoder input starts with <bos>: <bos> then "
    "targets[:, :-1]",
    "bos_last": "<bos> goes at the start, not the end: <bos> then targets[:, :-1]",
    "too_long": "the decoder input has the same length as the targets: drop the last target token",
    "no_bos": "the decoder input starts with <bos> and has the same length as the targets: "
    "<bos> then targets[:, :-1]",
    "bos_1": "use the bos_id argument: <bos> is not always 1",
    "roll": "torch.roll moves the last target token to the front: put <bos> there instead "
    "(torch.cat of a column of bos_id and targets[:, :-1])",
    "zero_first": "the first column is bos_id, not 0 (0 is often the padding id)",
    "roll_flat": "torch.roll moves the last target token to the front (without dims, of the "
    "flattened tensor: the previous row's last token); put <bos> there instead "
    "(torch.cat of a column of bos_id and targets[:, :-1])",
    "cat_dim0": "torch.cat joins along dim 0 (the batch) unless told otherwise: the <bos> column "
    "goes before targets[:, :-1] along the sequence, torch.cat([...], dim=1)",
    "overlapping_copy": "out[:, 1:] = out[:, :-1] copies a tensor onto an overlapping view of "
    "itself, so values are overwritten before they are read: read from targets instead, "
    "out[:, 1:] = targets[:, :-1] (or torch.cat a column of bos_id and targets[:, :-1])",
    "first_kept": "the first column still holds the first target token: after out[:, 1:] = "
    "targets[:, :-1], put bos_id in the first column too, out[:, 0] = bos_id",
    "unchanged": "your result is targets itself, unshifted: after putting the <bos> column in "
    "front, cut the LAST column, torch.cat([bos_column, targets], dim=1)[:, :-1] ([:, 1:] cuts "
    "<bos> off again), or cat the <bos> column with targets[:, :-1]",
    "batch_axis": "you shifted along the batch axis (dim 0); a sequence runs along dim 1: bos_id "
    "in the first column, then targets[:, :-1]",
}


def wrong_shift_right(targets, bos_id, *, mistake=""):
    """<bos> then targets[:, :-1], with one named mistake."""
    if mistake in ("roll", "roll_flat"):
        return targets.roll(1, dims=1) if mistake == "roll" else targets.roll(1)
    if mistake in ("no_bos", "unchanged"):  # unchanged: cat([bos, targets], 1)[:, 1:]
        return targets[:, :-1] if mistake == "no_bos" else targets.clone()
    if mistake == "overlapping_copy":  # a shift in place, onto an overlapping view of itself
        out = targets.clone()
        out[:, 1:] = out[:, :-1]
        return out.index_fill(1, torch.tensor([0]), bos_id)
    if mistake == "batch_axis":
        return torch.cat([torch.full_like(targets[:1], bos_id), targets[:-1]], dim=0)
    first_id = {"bos_1": 1, "zero_first": 0}.get(mistake, bos_id)
    first = torch.full_like(targets[:, :1], first_id)
    if mistake == "first_kept":  # out = targets.clone(); out[:, 1:] = targets[:, :-1], no bos
        first = targets[:, :1]
    rest = {"drop_first": targets[:, 1:], "shift_left": targets[:, 1:], "too_long": targets}
    rest = rest.get(mistake, targets[:, :-1])
    pieces = [rest, first] if mistake in ("shift_left", "bos_last") else [first, rest]
    return torch.cat(pieces, dim=0 if mistake == "cat_dim0" else 1)


@register
class ShiftRight(Task):
    id = "ex08.shift_right"
    lesson = "lesson 08, section 'Teacher forcing and shifted targets'"
    reference = "course_lib.train.shift_right"
    mistake_table = MISTAKES
    wrong = staticmethod(wrong_shift_right)

    def cases(self, gen):
        def ids(*shape, high=20, dtype=torch.long):
            return torch.randint(3, high, shape, generator=gen).to(dtype)

        return [
            Case("targets (2, 5), bos_id 1", (ids(2, 5), 1)),
            Case("targets (4, 11) ending in <eos>=2 and padding 0, bos_id 1",
                 (torch.cat([ids(4, 8), torch.tensor([[2, 0, 0]] * 4)], dim=1), 1)),
            Case("targets (3, 1), a single token", (ids(3, 1), 1)),
            Case("targets (1, 6), bos_id 7", (ids(1, 6), 7)),
            Case("int32 targets (2, 4), bos_id 0 (keep the dtype)",
                 (ids(2, 4, dtype=torch.int32), 0)),
        ]  # fmt: skip

    def diagnose(self, got, want, case):
        """out[0] = bos_id, before or after the shift, on any copy: row 0 starts with bos_id (or
        is all bos_id) while another row's first column is not bos_id."""
        bos_id = case.args[1]
        if not (isinstance(got, torch.Tensor) and got.shape == want.shape and len(got) > 1):
            return None
        row_filled = bool((got[0] == bos_id).all()) and not bool((want[0] == bos_id).all())
        column_missed = bool(got[0, 0] == bos_id) and bool((got[1:, 0] != bos_id).any())
        return BOS_FIRST_ROW if row_filled or column_missed else None
