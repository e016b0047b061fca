"""What ex06's two attention tasks (cross_attention and attention_pool) share: the hints for a
softmax written by hand or taken in float32, for a scale of d_k ** 1/2 and for keys and
values kept between calls, attention with those softmax slips, and the call that first runs
the learner's code on negated weights."""

from __future__ import annotations

import torch

LOG_SOFTMAX = (
    "you took log_softmax: the weights are softmax(scores, dim=-1), probabilities between 0 and "
    "1 that sum to 1 over the keys (log_softmax gives their logarithms, negative numbers)"
)


SOFTMAX_SLIPS = ("float32_softmax", "no_max", "max_of_all")
OVERFLOW = "scores of 0 and +-300: exp(300) overflows float32, so each row's maximum is subtracted"
NO_MAX = (
    "exp of a score near 300 overflows float32 to inf, and inf / inf is NaN: subtract each row's "
    "maximum before exp, scores - scores.amax(dim=-1, keepdim=True) (as your softmax of exercise "
    "02 does), or use scores.softmax(dim=-1)"
)
MAX_OF_ALL = (
    "you subtracted the largest score of the whole tensor (scores.max(), no dim): a row whose "
    "scores all lie far below it underflows to exp = 0 everywhere, and 0 / 0 is NaN. Subtract "
    "each row's own maximum, scores.amax(dim=-1, keepdim=True), or use scores.softmax(dim=-1)"
)
# a projection cached between calls (functools.lru_cache, or a dict keyed by id(memory) or
# data_ptr()): the check calls first with w_k and w_v negated in place, then restores them
POWER_THEN_HALF = (
    "d_k ** 1/2 is (d_k ** 1) / 2, since ** binds tighter than /: you divided the scores by "
    "2 d_k. Write the root's exponent in parentheses, d_k ** (1/2), or d_k ** 0.5"
)
KV_KEPT = (
    "your keys and values are those of an earlier call on the same tensors (functools.lru_cache "
    "on a projection, or a cache keyed by id({read}) or {read}.data_ptr()): the check called "
    "once with w_k and w_v negated in place, then restored them, and your answer kept the first "
    "call's. A training step changes the weights in place just so: compute k = {read} @ w_k and "
    "v = {read} @ w_v on every call"
)


def _softmax_slip_attention(q, k, v, mask, mistake):
    """Attention whose softmax ran in float32, F.softmax(scores, -1, dtype=torch.float32), cast
    back to the scores' dtype (right to float32's digits only on float64 inputs), or was written
    by hand, exp(scores - shift) / sum: no shift ("no_max", inf / inf once a score passes 88) or
    the largest score of the whole tensor ("max_of_all", a row far below it underflows to 0 / 0)."""
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    scores = scores if mask is None else scores.masked_fill(~mask, float("-inf"))
    if mistake == "float32_softmax":
        weights = scores.softmax(-1, dtype=torch.float32).to(scores.dtype)
    else:
        e = (scores - (scores.max() if mistake == "max_of_all" else 0)).exp()
        weights = e / e.sum(-1, keepdim=True)
    return weights @ v, weights


def _after_a_call_on_other_weights(call, obj, case, weights):
    """`call(obj, case)`, after a first call, its result dropped, on the same tensors with the
    arguments at positions `weights` (w_k and w_v) negated in place, then restored: an answer
    that keeps its projections between calls (functools.lru_cache, a dict keyed by id) then
    returns the first call's, as after a training step that changed the weights in place."""
    negated = {id(w): w for w in (case.args[i] for i in weights)}.values()  # eye thrice: once
    with torch.no_grad():
        try:
            for w in negated:
                w.neg_()
            obj(*case.args, **case.kwargs)
        except Exception:  # noqa: BLE001, S110  (an error here is the real call's to report)
            pass
        finally:
            for w in negated:
                w.neg_()
    return call(obj, case)


FAR_BLOCKED = "the blocked memory position scores 300 above the allowed one"
