"""ex05.padding_mask."""

from __future__ import annotations

import torch

from ...core import Case, Task, register
from ..common import lengths_mask
from ._shared import LESSON, _not_bool, padded_ids


def _around_pad(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """`ids` with its first two real ids set to pad_id - 1 and pad_id + 1 (both sides of it)."""
    ids = ids.clone()
    ids[0, 0], ids[0, 1] = pad_id - 1, pad_id + 1
    return ids


PADDING_MISTAKES = {
    "inverted": "your mask is inverted: True must mark the real tokens (may be attended to) and "
    "False the padding; use ids != pad_id",
    "from_lengths": "a mask built from each row's number of real tokens assumes the padding comes "
    "last; compare every id with pad_id instead (ids != pad_id), wherever it sits",
    "first_pad": "a mask that is True up to each row's first padding token assumes the padding "
    "comes last; compare every id with pad_id instead (ids != pad_id), wherever it sits",
    "no_middle": "the middle dimension is missing: return shape (batch, 1, seq), so that the mask "
    "broadcasts over the query axis of the (batch, n_q, n_k) scores (unsqueeze(1))",
    "wrong_axis": "the 1 is in the wrong place: (batch, seq, 1) would mask query ROWS; the "
    "padding tokens are keys, so the shape is (batch, 1, seq)",
    "front": "the 1 is in front: (1, batch, seq) would line up the batch with the query axis of "
    "the (batch, n_q, n_k) scores; it goes in the middle, (batch, 1, seq): unsqueeze(1)",
    "long": "the mask must be a bool tensor (True/False), not integers: ids != pad_id is one",
    "zero": "you compared with 0; compare with the pad_id argument",
    "greater": "a real id can be smaller than pad_id: mark the padding with ids != pad_id, not "
    "ids > pad_id",
    "lengths_le": "arange(seq) <= lengths is True at one position too many: with n real tokens "
    "the real positions are 0 .. n-1 (arange(seq) < n), so the first padding token was let in. "
    "Simpler, and right wherever the padding sits: ids != pad_id",
    "lengths_from_1": "arange(1, seq + 1) < lengths is True at one position too few: counted "
    "from 1, the real positions are 1 .. n (<= n), so the last real token was dropped. Simpler, "
    "and right wherever the padding sits: ids != pad_id",
    "expanded": "you expanded the mask to (batch, seq, seq): keep the 1 in the middle, (batch, 1, "
    "seq); broadcasting spreads it over the queries, whatever their number (cross-attention has "
    "n_q != n_k, so a mask expanded to seq queries would not fit)",
}


def wrong_padding_mask(ids, pad_id, *, mistake=""):
    """(ids != pad_id).unsqueeze(1) with one named mistake."""
    if mistake in ("from_lengths", "lengths_le", "lengths_from_1"):  # the padding assumed last
        lengths, positions = (ids != pad_id).sum(1, keepdim=True), torch.arange(ids.shape[1])
        real = {  # <= for <, or positions counted from 1 with <
            "lengths_le": positions <= lengths,
            "lengths_from_1": positions + 1 < lengths,
        }.get(mistake, positions < lengths)
    elif mistake == "first_pad":  # real up to the first pad (argmax of ids == pad_id), or all
        first = torch.where((ids == pad_id).any(1), (ids == pad_id).int().argmax(1), ids.shape[1])
        real = torch.arange(ids.shape[1]) < first[:, None]
    else:
        compare = {"inverted": ids == pad_id, "zero": ids != 0, "greater": ids > pad_id}
        real = compare.get(mistake, ids != pad_id)
    if mistake == "no_middle":
        return real
    mask = real.unsqueeze({"wrong_axis": -1, "front": 0}.get(mistake, 1))
    if mistake == "expanded":  # .expand(-1, seq, -1): one row per query, as the scores have
        return mask.expand(-1, ids.shape[1], -1)
    return mask.long() if mistake == "long" else mask


@register
class PaddingMask(Task):
    """True at the real tokens, False at the padding, shape (batch, 1, seq)."""

    id = "ex05.padding_mask"
    lesson = f"{LESSON}, section 'Padding masks'"
    reference = "course_lib.masking.padding_mask"
    mistake_table = PADDING_MISTAKES
    wrong = staticmethod(wrong_padding_mask)

    def cases(self, gen):
        return [
            Case("ids (3, 6), lengths [6, 4, 2], pad_id=0", (padded_ids(gen, [6, 4, 2], 6, 0), 0)),
            Case("ids (2, 5), lengths [3, 5], pad_id=5 (padding need not be 0; real ids on both "
                 "sides of it)",
                 (_around_pad(padded_ids(gen, [3, 5], 5, 5), 5), 5)),
            Case("ids (1, 4) without padding, pad_id=0", (padded_ids(gen, [4], 4, 0), 0)),
            Case("int32 ids (4, 7), lengths [7, 1, 3, 0] (the last sequence is all padding)",
                 (padded_ids(gen, [7, 1, 3, 0], 7, 0, dtype=torch.int32), 0)),
            Case("ids (3, 6) padded on the LEFT, lengths [4, 6, 2], pad_id=0 (some tokenizers "
                 "pad in front)",  # the first case's shape, other lengths: no cache by shape
                 (padded_ids(gen, [4, 6, 2], 6, 0).flip(-1), 0)),
        ]  # fmt: skip

    def diagnose(self, got, want, case):
        ids, pad_id = case.args  # the first case's shape: a mask kept from that call?
        first = lengths_mask([6, 4, 2], 6)  # the first case's mask (its ids are never pad_id)
        if ids.shape == (3, 6) and not torch.equal(want, first) and isinstance(got, type(ids)):
            if got.shape == first.shape and torch.equal(got.bool(), first):
                return (
                    "your mask is the one of an earlier call with ids of this shape (lengths "
                    "[6, 4, 2]), not this call's: a mask kept between calls (a cache keyed on the "
                    "shape, a default argument, a global) goes stale when the ids change; build "
                    "it from the ids you are given, (ids != pad_id).unsqueeze(1)"
                )
        if isinstance(got, type(ids)) and got.shape == want.shape and got.dtype == want.dtype:
            if (got.int().diff(dim=-1) <= 0).all() and not (want.int().diff(dim=-1) <= 0).all():
                return (  # True up to each row's last real token, or any other cut: pads last
                    "each row of your mask is True up to one position and False after it, as if "
                    "the padding always came last; here it comes first: compare every id with "
                    "pad_id instead (ids != pad_id), wherever it sits"
                )
        return _not_bool(self, got, want, case)
