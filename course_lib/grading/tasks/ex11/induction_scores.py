"""ex11.induction_scores: how much each head attends from a repeated token to the one after
its earlier copy."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...core import register
from ..common import randint
from ._models import LESSON, ModelTask, circuit_spec, model_case, repeated
from .attention_patterns import wrong_patterns

_AXIS = (
    "scores averaged over the wrong axis: average over the batch and the queries (dims 1 and 3 "
    "of the (num_layers, batch, num_heads, queries) stripe), keeping one score per layer and "
    "head: shape (num_layers, num_heads)"
)
_BEFORE = (
    "off by one the other way: key i - T - 1 is the token BEFORE the earlier copy of "
    "query i's token; an induction head attends to the token AFTER it, key i - T + 1"
)
_SUM = "a score is a mean (between 0 and 1), not a sum"
_MATCHED = (
    "you found query i's earlier copy by looking for its token; a token can occur more than "
    "once in a copy (here it does), and then another earlier position holds it too. The "
    "earlier copy is a position, i - T: score key i - T + 1 whatever the tokens"
)
MISTAKES = {
    "duplicate": (
        "off by one: key i - T is the earlier copy of the SAME token (a duplicate-token "
        "head); an induction head attends to the token AFTER it, key i - T + 1"
    ),
    "previous_token": (
        "you scored key i - 1, the token just before (a previous-token head's stripe); an "
        "induction head attends to the token after the earlier copy of query i's token, key "
        "i - T + 1"
    ),
    "one_before": _BEFORE,
    "one_before_stripe": _BEFORE,  # diagonal(-(T + 1)): queries T + 1 .. 2T - 1 only
    "two_after": (
        "off by one: the token after the earlier copy of query i's token is at "
        "i - T + 1, not i - T + 2"
    ),
    "upper_stripe": (
        "your scores are all 0: the stripe you read lies ABOVE the diagonal, among the future "
        "keys that a causal model never attends to; rows are queries and columns keys, so "
        "query i's key i - T + 1 lies below it: patterns.diagonal(offset=-(T - 1), dim1=-2, "
        "dim2=-1)"
    ),
    "queries_off_by_one": (
        "the stripe diagonal(offset=-(T - 1)) holds T + 1 queries, T - 1 .. 2T - 1: the "
        "second copy's are its LAST T (stripe[..., -T:]); you took query T - 1, whose key 0 "
        "is no induction key, and dropped query 2T - 1"
    ),
    "last_query_dropped": (
        "the last query, 2T - 1, is missing: its induction key is T, in the second copy, so "
        "keys sliced to the first copy (patterns[..., T:, :T]) lose it; average over all T "
        "queries i = T .. 2T - 1, each at key i - T + 1"
    ),
    "stripe_as_queries": (
        "the stripe diagonal(offset=-(T - 1)) is indexed from ITS first query, T - 1, not from "
        "query 0: stripe[..., T - 1:] keeps only queries 2T - 2 and 2T - 1; the second copy's "
        "queries are the stripe's last T, stripe[..., 1:]"
    ),
    "first_query_dropped": (
        "the first query of the second copy, i = T, is missing (range(T + 1, 2T), or the "
        "stripe's last T - 1): its induction key is 1, the token after position 0; average "
        "over all T queries i = T .. 2T - 1"
    ),
    "all_queries": (
        "only the queries of the second copy (i = T .. 2T - 1) have an earlier copy to "
        "look back to; the first copy's queries must not be averaged in"
    ),
    "default_dims": (
        "patterns.diagonal(offset) without dim1 and dim2 reads a stripe of dims 0 and 1, the "
        "layers and the batch: pass the queries' and keys' dims, the last two, "
        "patterns.diagonal(-(T - 1), -2, -1)"
    ),
    "over_heads": _AXIS,
    "over_batch_only": _AXIS,
    "batch_row0": (
        "your scores come from the first sequence of the batch only (patterns[:, 0]): average "
        "over every sequence of the batch (dim 1) as well as over the queries of the second copy"
    ),
    "float_period": (
        "the period T must be an int: ids.shape[1] / 2 is a float (10.0), which diagonal's "
        "offset, range() and tensor indices refuse; use ids.shape[1] // 2"
    ),
    "batch_summed": (
        "the scores are summed over the sequences of the batch: a score is the MEAN over the "
        "batch as well as over the queries of the second copy, .mean(dim=(1, 3))"
    ),
    "period_from_batch": (
        "the period T is half the sequence LENGTH, ids.shape[1] // 2: len(ids) and "
        "ids.shape[0] are the batch size"
    ),
    "keys_axis": (
        "you averaged over the keys of each query row (which always sums to 1); the "
        "score is the weight on ONE key per query, i - T + 1"
    ),
    "sum": _SUM,
    "sum_queries": _SUM,  # summed over the queries, averaged over the batch
    "max": (
        "a score is the MEAN weight on key i - T + 1 over the batch and the queries, "
        "not its maximum"
    ),
    "over_t_minus_1": (
        "the second copy has T queries (i = T .. 2T - 1), not T - 1: average over all "
        "T of them (.mean(), not a sum divided by T - 1)"
    ),
    "stripe_over_t": (
        "the stripe i - j = T - 1 (diagonal(offset=-(T - 1)), or a mask of it) holds T + 1 "
        "queries, T - 1 .. 2T - 1: query T - 1, whose key 0 is no induction key, is summed in. "
        "Keep the second copy's T queries (stripe[..., -T:], or the mask with i >= T) and "
        "average them (.mean())"
    ),
    "token_match": _MATCHED,  # the first earlier position holding query i's token
    "token_match_last": _MATCHED,  # the latest one
}


def wrong_scores(model, ids, *, mistake):
    """(num_layers, num_heads) induction scores, with the named mistake."""
    if ids.shape[1] % 2:
        raise ValueError("ids must be a sequence repeated twice")
    period = (len(ids) if mistake == "period_from_batch" else ids.shape[1]) // 2
    if mistake == "float_period":  # / for //
        period = ids.shape[1] / 2
    patterns = wrong_patterns(model, ids)  # (layers, batch, heads, 2T, 2T)
    if mistake in ("token_match", "token_match_last"):  # the key after a same-token position
        positions = torch.arange(2 * period)
        same = (ids[:, period:, None] == ids[:, None, :]) & (positions < positions[period:, None])
        first = torch.where(same, positions, 2 * period).amin(dim=-1)  # (batch, T)
        found = torch.where(same, positions, -1).amax(dim=-1) if "last" in mistake else first
        keys = (found + 1)[None, :, None, :, None].expand(*patterns.shape[:3], period, 1)
        return patterns[..., period:, :].gather(-1, keys).squeeze(-1).mean(dim=(1, 3))
    offset = {
        "duplicate": period,
        "two_after": period - 2,
        "one_before": period + 1,
        "one_before_stripe": period + 1,
        "previous_token": 1,
    }.get(mistake, period - 1)
    sign = 1 if mistake == "upper_stripe" else -1  # +: above the diagonal, the future
    dims = (0, 1) if mistake == "default_dims" else (-2, -1)  # diagonal's defaults: 0 and 1
    stripe = patterns.diagonal(sign * offset, *dims)  # (layers, batch, heads, k)
    queries = {
        "all_queries": stripe,
        "queries_off_by_one": stripe[..., :period],
        "last_query_dropped": stripe[..., -period:-1],
        "first_query_dropped": stripe[..., 1 - period :],
        "stripe_as_queries": stripe[..., period - 1 :],
        # query T's key -1 is key 2T - 1, in its future: weight 0
        "one_before": F.pad(stripe, (1, 0)),
        "batch_row0": stripe[:, :1, :, -period:],  # the first sequence of the batch only
    }.get(
        mistake,
        stripe[..., -period:],  # i = T .. 2T - 1
    )
    if mistake == "over_heads":
        return queries.mean(dim=(2, 3))  # (layers, batch)
    if mistake == "over_batch_only":
        return queries.mean(dim=1)  # (layers, heads, T)
    if mistake == "sum":
        return queries.sum(dim=(1, 3))
    if mistake == "batch_summed":  # each sequence's mean over the queries, added up
        return queries.mean(dim=3).sum(dim=1)
    if mistake == "sum_queries":
        return queries.sum(dim=3).mean(dim=1)
    if mistake == "max":
        return queries.amax(dim=(1, 3))
    if mistake == "over_t_minus_1":  # the queries' sum divided by T - 1 instead of T
        return queries.sum(dim=3).mean(dim=1) / (period - 1)
    if mistake == "stripe_over_t":  # all T + 1 of the stripe's queries, T - 1 too, over T
        return stripe.sum(dim=3).mean(dim=1) / period
    if mistake == "keys_axis":  # all of each query row, not the induction key
        return patterns[..., period:, :].mean(dim=(1, 3, 4))
    return queries.mean(dim=(1, 3))


@register
class InductionScores(ModelTask):
    id = "ex11.induction_scores"
    lesson = f"{LESSON}, section 2 'Heads with a job'"
    reference = "course_lib.inspection.induction_scores"
    depends_on = ("attention_patterns",)
    forbidden = ("course_lib.inspection.attention_patterns",)
    mistake_table = MISTAKES
    wrong = staticmethod(wrong_scores)
    atol = 1e-5

    def cases(self, gen):
        cases = []
        for layers, heads, batch, period in ((2, 4, 4, 10), (3, 4, 2, 7), (2, 5, 3, 11)):
            spec = circuit_spec(gen, layers=layers, heads=heads)
            note = f": random tokens, period {period}"
            cases.append(model_case(spec, repeated(gen, batch, period, 24), note=note))
        spec = {"kind": "random", "seed": 4, "positions": "rope"}
        # in training mode (the only one here): a model.eval() left behind is caught
        # block_size 12, the ids' length: a length check of its own with >= raises
        training = {**spec, "training": True, "block": 12}
        cases.append(model_case(training, repeated(gen, 3, 6, 13), note=", period 6"))
        # a repeated sequence and one token more: a check of the halves alone does not raise
        odd = torch.cat([repeated(gen, 2, 4, 13), randint(gen, 13, 2, 1)], dim=1)
        note = ": an odd length is no repeated sequence, so a ValueError"
        cases.append(model_case(spec, odd, note=note, raises=ValueError, probe=odd))
        # 8 tokens of 4 kinds in each copy: a token's earlier copy is not its only occurrence
        first = randint(gen, 4, 3, 8)
        note = ": period 8, tokens repeating within each copy"
        return [*cases, model_case(spec, torch.cat([first, first], dim=1), note=note)]
