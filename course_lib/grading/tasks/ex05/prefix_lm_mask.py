"""ex05.prefix_lm_mask (transfer: a mask the lesson does not build)."""

from __future__ import annotations

import torch

from ...core import Case, GradingError, Task, register
from ._shared import LESSON, _not_bool, padded_ids
from .padding_mask import PADDING_MISTAKES


def _prefix_variant(ids, prefix_lengths, pad_id, *, mistake=""):
    batch, seq = ids.shape
    if ((prefix_lengths < 0) | (prefix_lengths > seq)).any():
        raise ValueError("prefix length out of range")
    i = torch.arange(seq)[:, None]  # queries
    j = torch.arange(seq)[None, :]  # keys
    p = prefix_lengths[:, None, None]
    in_prefix = {
        "off_by_one": j <= p,
        "one_short": j < p - 1,
        "first_row": j < prefix_lengths[0],  # every row gets the first row's prefix
        "queries": i < p,  # a query in the prefix sees every key, also the future
        "one_axis_short": j < prefix_lengths[:, None],  # (batch, seq): meets (seq, seq) badly
        "no_prefix": torch.zeros(1, 1, 1, dtype=torch.bool),
        "tril_p": torch.zeros(1, 1, 1, dtype=torch.bool),
    }.get(mistake, j < p)
    causal = {"no_diagonal": j < i, "triu": j >= i, "tril_p": j <= i + p}.get(mistake, j <= i)
    allowed = (in_prefix & causal) if mistake == "and" else (in_prefix | causal)
    if mistake == "no_padding":
        return allowed
    real = ids != (0 if mistake == "pad_zero" else pad_id)  # (batch, seq)
    if mistake in ("from_lengths", "lengths_le"):  # the padding assumed last: the first keys
        lengths = real.sum(1, keepdim=True)
        real = (
            torch.arange(seq) <= lengths if mistake == "lengths_le" else torch.arange(seq) < lengths
        )
    if mistake == "or_padding":  # (prefix | causal) | real: every real key, the future too
        return allowed | real[:, None]
    if mistake == "padding_first":  # (causal & padding) | prefix: the prefix lets pads back in
        return (causal & real[:, None]) | in_prefix
    return allowed & (real[:, :, None] if mistake == "padding_on_queries" else real[:, None])


PREFIX_MISTAKES = {
    "off_by_one": "the prefix is one key too long: with prefix length P the prefix is keys 0 .. "
    "P-1, so key j is in it when j < P, not j <= P",
    "one_short": "the prefix is one key too short: with prefix length P the prefix is keys 0 .. "
    "P-1, so key j is in it when j < P, not j < P - 1",
    "no_diagonal": "after the prefix a query may still attend to itself: the causal part allows j "
    "<= i, not j < i",
    "and": "a key is allowed when it is in the prefix OR not in the future (j < P or j <= i): you "
    "combined the two with AND",
    "first_row": "every row has its own prefix length: compare the keys with prefix_lengths[:, "
    "None, None], not with one row's length. In a loop over the rows, one mask shared by them "
    "does the same: m = causal_mask(seq) cached (lru_cache) or sliced from one table, then m[:, "
    ":P] = True writes into it for every later row and call; edit a copy, .clone()",
    "no_padding": "padding is ignored: no query may attend a key that is padding; AND your mask "
    "with (ids != pad_id) over the key axis, shape (batch, 1, seq)",
    "queries": "you tested the query's position against the prefix, so a query inside the prefix "
    "sees every later key (the text it must predict); what is bidirectional is the prefix's keys: "
    "query i may attend key j when j < P or j <= i",
    "padding_on_queries": "the padding mask belongs on the key axis (the last one): (ids != "
    "pad_id) of shape (batch, 1, seq), not (batch, seq, 1), neither instead nor as well: a "
    "padded query keeps the keys the prefix and causal rule give it",
    "one_axis_short": "prefix_lengths[:, None] is (batch, 1), so key < P gives a (batch, seq) "
    "mask, which does not line up with the (seq, seq) causal one: give P a query axis as well, "
    "prefix_lengths[:, None, None] of shape (batch, 1, 1)",
    "pad_zero": "the padding is compared with 0; compare the ids with the pad_id argument "
    "(ids != pad_id), which need not be 0",
    "triu": "your causal part is the upper triangle (j >= i), so a query after the prefix sees "
    "the future: it may attend key j <= i (and the keys of the prefix)",
    "no_prefix": "that is the causal mask with padding; inside its prefix a row is bidirectional: "
    "every query may attend every key j < prefix_lengths[b]",
    "tril_p": "tril(diagonal=P) lets every query i see P keys past itself (j <= i + P), the "
    "future too, at every position: the prefix is the keys j < P, open to every query, and "
    "after them the causal rule j <= i: (j < P) | (j <= i)",
    "from_lengths": PADDING_MISTAKES["from_lengths"],
    "lengths_le": PADDING_MISTAKES["lengths_le"],
    "or_padding": "you combined the padding mask with | (OR), so every real key is let in, the "
    "future ones too: a key is allowed when it is real AND (in the prefix OR not in the future): "
    "((j < P) | (j <= i)) & (ids != pad_id), with & for the padding",
    "padding_first": "two right steps in the wrong order: the padding was blocked before the "
    "prefix was let in, so a prefix that covers padding (P longer than the real tokens) opens "
    "the padded keys again. Combine the prefix and causal parts first, (j < P) | (j <= i), then "
    "AND the padding mask (ids != pad_id) into the result, last (in one line, mind that & binds "
    "tighter than |: prefix | causal & real is prefix | (causal & real); write (prefix | causal) "
    "& real)",
}


@register
class PrefixLMMask(Task):
    id = "ex05.prefix_lm_mask"
    lesson = f"{LESSON}, section 'Combining padding and causal masks'"
    reference = "course_lib.masking.prefix_lm_mask"
    mistake_table = PREFIX_MISTAKES
    wrong = staticmethod(_prefix_variant)

    def diagnose(self, got, want, case):
        ids, lengths, pad_id = case.args  # the first case's shape, the first case's lengths?
        first = torch.tensor([3, 2])
        if ids.shape == (2, 6) and not torch.equal(lengths, first) and isinstance(got, type(ids)):
            if torch.equal(got, _prefix_variant(ids, first, pad_id)):
                return (
                    "your mask holds the prefix lengths [3, 2] of an earlier call with ids of "
                    "this shape, not this call's: a mask kept between calls (a cache keyed on the "
                    "shape, a default argument, a global) must not hold what depends on "
                    "prefix_lengths; build the prefix part from the prefix_lengths you are given"
                )
        return _not_bool(self, got, want, case)

    depends_on = ("causal_mask", "padding_mask")
    forbidden = (
        "course_lib.masking.causal_mask",
        "course_lib.masking.padding_mask",
        "course_lib.masking.combine_masks",
    )

    def call(self, obj, case):
        try:
            return super().call(obj, case)
        except ValueError:  # a check `P >= seq` for `P > seq` (or `P <= 0`): boundaries allowed
            ids, prefix_lengths, _ = case.args
            edges = (prefix_lengths == 0) | (prefix_lengths == ids.shape[1])
            if not case.raises and not edges.any() and (prefix_lengths > len(ids)).any():
                raise GradingError(  # `seq = len(ids)` or ids.shape[0]: the batch size
                    f"your code raised a ValueError for prefix lengths {prefix_lengths.tolist()}, "
                    f"which all lie in [0, seq] (seq = ids.shape[1] = {ids.shape[1]}): len(ids) "
                    f"and ids.shape[0] are the batch size ({len(ids)}), not seq; compare with "
                    "ids.shape[1]"
                ) from None
            if case.raises or not bool(edges.any()):
                raise
            raise GradingError(
                "your code raised a ValueError for an allowed prefix length: P = 0 (a causal row) "
                "and P = seq (the whole row is the prefix) are both allowed: raise only when "
                "P < 0 or P > seq"
            ) from None

    def cases(self, gen):
        p = torch.tensor
        return [
            Case("ids (2, 6), lengths [6, 6] (no padding), prefix_lengths [3, 2], pad_id=0",
                 (padded_ids(gen, [6, 6], 6, 0), p([3, 2]), 0)),
            Case("ids (3, 7), lengths [7, 5, 3], prefix_lengths [2, 4, 1], pad_id=0",
                 (padded_ids(gen, [7, 5, 3], 7, 0), p([2, 4, 1]), 0)),
            Case("ids (4, 5), lengths [5, 4, 5, 2], prefix_lengths [0, 5, 1, 2] (0 = causal, "
                 "5 = all bidirectional), pad_id=2",
                 (padded_ids(gen, [5, 4, 5, 2], 5, 2), p([0, 5, 1, 2]), 2)),
            Case("int32 ids (1, 8), length 6, prefix_lengths [7] (the prefix covers padding), "
                 "pad_id=1",
                 (padded_ids(gen, [6], 8, 1, dtype=torch.int32), p([7]), 1)),
            Case("ids (2, 1) (one token), lengths [1, 1], prefix_lengths [1, 0], pad_id=0",
                 (padded_ids(gen, [1, 1], 1, 0), p([1, 0]), 0)),
            Case("ids (2, 4), prefix_lengths [2, 5]: 5 > seq=4, so a ValueError",
                 (padded_ids(gen, [4, 4], 4, 0), p([2, 5]), 0), raises=ValueError),
            Case("ids (2, 4), prefix_lengths [-1, 2]: negative, so a ValueError",
                 (padded_ids(gen, [4, 4], 4, 0), p([-1, 2]), 0), raises=ValueError),
            Case("ids (2, 6) padded on the LEFT, lengths [4, 6], prefix_lengths [5, 1], "
                 "pad_id=0 (some tokenizers pad in front)",  # the first case's shape, other
                 (padded_ids(gen, [4, 6], 6, 0).flip(-1), p([5, 1]), 0)),  # P: no cache by shape
        ]  # fmt: skip
