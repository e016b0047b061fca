"""ex09, a GPT from scratch: sampling the next token, perplexity, one step with a KV cache.

`sample_next` is random, so its check is statistical: each case draws thousands of tokens
from the learner's function (one call on a batch of identical rows, with a seeded generator)
and compares their frequencies with the exact filtered distribution: no token outside the
allowed set may appear, and every frequency must be within a few standard errors of its
probability.
"""

from __future__ import annotations

import math
import types

import torch
from torch import nn

from ...sampling import sampling_distribution
from ..core import (
    Case,
    GradingError,
    Task,
    changed_message,
    compare_values,
    exercise_state,
    register,
)
from .common import D_V_SCALE_HINT, ModuleTask, OpRecorder, randn, stable_softmax

DRAWS = 6000  # per row of a case: a standard error of at most 0.0065 on every frequency


def _logits_from_probs(probs: list[float], order: list[int], dtype=torch.float32) -> torch.Tensor:
    """One row of logits whose softmax is `probs`, placed at the token ids in `order`."""
    row = torch.empty(len(probs), dtype=torch.float64)
    row[torch.tensor(order)] = torch.tensor(probs, dtype=torch.float64).log() + 1.7
    return row.to(dtype)


# --------------------------------------------------------------------------------------------
# sample_next
# --------------------------------------------------------------------------------------------

# Distinct probabilities, so that top-k and top-p sets are unambiguous.
_P8 = [0.34, 0.22, 0.15, 0.11, 0.08, 0.05, 0.03, 0.02]
_ORDER8 = [5, 2, 7, 0, 3, 6, 1, 4]
_P6 = [0.4, 0.25, 0.15, 0.1, 0.06, 0.04]
_ORDER6 = [3, 0, 5, 1, 4, 2]


@register
class SampleNextTask(Task):
    id = "ex09.sample_next"
    lesson = "lesson 09, section 'Sampling strategies'"
    reference = "course_lib.sampling.sample_next"
    forbidden = ("course_lib.sampling.sampling_distribution",)

    def cases(self, gen):
        row8 = _logits_from_probs(_P8, _ORDER8)
        row6 = _logits_from_probs(_P6, _ORDER6)
        two = torch.stack([row8, row8.flip(0)])  # (2, 8)
        rand = torch.randn(2, 7, generator=gen)
        return [
            Case(
                "temperature=1: plain sampling from softmax(logits), logits (1, 8)", (row8[None],)
            ),
            Case(
                "temperature=0.5 (sharper), logits (2, 8), float64",
                (two.double(),),
                {"temperature": 0.5},
            ),
            Case("temperature=2.0 (flatter), random logits (2, 7)", (rand,), {"temperature": 2.0}),
            Case("top_k=3, logits (1, 8)", (row8[None],), {"top_k": 3}),
            Case("top_k=1 (only the most likely token), logits (2, 7)", (rand,), {"top_k": 1}),
            Case(
                "top_p=0.7 with probabilities 0.4, 0.25, 0.15, ...: keeps 3 tokens",
                (row6[None],),
                {"top_p": 0.7},
            ),
            Case("top_p=0.5, logits (2, 8), float64", (two.double(),), {"top_p": 0.5}),
            Case(
                "temperature=0.8, top_k=5, top_p=0.9 together, logits (1, 8)",
                (row8[None],),
                {"temperature": 0.8, "top_k": 5, "top_p": 0.9},
            ),
            Case(
                "temperature=0 means greedy: the arg-max of each row", (rand,), {"temperature": 0.0}
            ),
            Case(
                "top_k=20, more than the 8 tokens of the vocabulary: every token is kept "
                "(clamp k to the vocabulary size)",
                (row8[None],),
                {"top_k": 20},
            ),
            Case(
                "top_p=1.0 (allowed: top_p is in (0, 1]) keeps every token, logits (2, 8)",
                (two,),
                {"top_p": 1.0},
            ),
            Case("a negative temperature", (rand,), {"temperature": -1.0}, raises=ValueError),
            Case("top_k=0", (rand,), {"top_k": 0}, raises=ValueError),
            Case("top_p=1.5", (rand,), {"top_p": 1.5}, raises=ValueError),
            Case("top_p=0 (top_p must be in (0, 1])", (rand,), {"top_p": 0.0}, raises=ValueError),
        ]

    def call(self, obj, case):
        logits = case.args[0]  # (rows, vocab)
        if case.raises is not None:
            return obj(logits, **case.kwargs)
        rows, vocab = logits.shape
        batch = logits.repeat(DRAWS, 1)  # (DRAWS * rows, vocab): row r repeats every `rows`
        try:
            first = obj(batch, **case.kwargs, generator=torch.Generator().manual_seed(1234))
        except (RuntimeError, ValueError) as error:
            hint = None
            if isinstance(error, RuntimeError) and (case.kwargs.get("top_k") or 0) > vocab:
                hint = (
                    f"top_k={case.kwargs['top_k']} is more than the {vocab} tokens of the "
                    "vocabulary, which keeps them all: clamp k, "
                    "torch.topk(logits, min(top_k, vocab))"
                )
            elif isinstance(error, ValueError) and case.kwargs.get("top_p") == 1.0:
                hint = (
                    "top_p=1.0 is allowed (top_p lies in (0, 1], 1 included) and keeps every token"
                )
            if hint is None or isinstance(error, NotImplementedError):
                raise
            raise GradingError(
                f"your code raised {type(error).__name__}: {error}. Hint: {hint}"
            ) from None
        if not isinstance(first, torch.Tensor) or tuple(first.shape) != (DRAWS * rows,):
            shape = tuple(first.shape) if isinstance(first, torch.Tensor) else type(first).__name__
            raise GradingError(
                f"for logits of shape {(DRAWS * rows, vocab)} your function "
                f"returned {shape}; it should return one token id per row, "
                f"shape ({DRAWS * rows},)"
            )
        if first.dtype != torch.long:
            raise GradingError(
                f"your tokens have dtype {str(first.dtype)[6:]}; token ids are "
                "long (int64), as torch.multinomial and argmax return them"
            )
        if first.min() < 0 or first.max() >= vocab:
            raise GradingError(f"your tokens include ids outside [0, {vocab})")
        if not torch.equal(batch, logits.repeat(DRAWS, 1)):
            raise GradingError(changed_message(["logits"]))
        again = obj(batch, **case.kwargs, generator=torch.Generator().manual_seed(1234))
        if not torch.equal(first, again):
            raise GradingError(
                "two calls with generators in the same state gave different "
                "tokens: pass `generator=generator` to torch.multinomial so "
                "that sampling is reproducible"
            )
        tokens = first.reshape(DRAWS, rows)  # (draws, rows)
        counts = torch.zeros(rows, vocab, dtype=torch.float64)
        counts.scatter_add_(1, tokens.T, torch.ones(rows, DRAWS, dtype=torch.float64))
        return {"freq": counts / DRAWS}  # (rows, vocab)

    def expected(self, case):
        if case.raises is not None:
            return None
        return {"exact": sampling_distribution(case.args[0], **case.kwargs).double()}

    def compare(self, got, want, case):
        if want is None:
            return None
        if not isinstance(got, dict) or "freq" not in got:
            return "your function should return a tensor of token ids"
        freq = got["freq"]
        if "exact" in want:
            probs = want["exact"]
            outside = (freq > 0) & (probs == 0)
            if outside.any():
                row, token = (int(i) for i in outside.nonzero()[0])
                return (
                    f"token {token} was sampled {freq[row, token]:.1%} of the time in row "
                    f"{row}, but it must never be (it is outside the allowed set)"
                )
            tolerance = 5 * (probs * (1 - probs) / DRAWS).sqrt() + 2e-3
        else:  # comparing with a wrong implementation's own frequencies
            probs = want["freq"]
            tolerance = 5 * (2 * probs * (1 - probs) / DRAWS).sqrt() + 3e-3
        bad = (freq - probs).abs() > tolerance
        if bad.any():
            row, token = (int(i) for i in bad.nonzero()[0])
            return (
                f"the frequencies of your samples do not match the distribution (row {row}, "
                f"token {token}: sampled {freq[row, token]:.3f} of the time, expected "
                f"{probs[row, token]:.3f})"
            )
        return None

    def mistakes(self):
        def _temperature_after_softmax(
            logits, temperature=1.0, top_k=None, top_p=None, generator=None
        ):
            if temperature == 0:
                return logits.argmax(-1)
            probs = _filter(stable_softmax(logits), top_k, top_p) / temperature
            return torch.multinomial(probs.float(), 1, generator=generator).squeeze(-1)

        def _top_k_keeps_k_minus_1(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
            if temperature == 0:
                return logits.argmax(-1)
            logits = logits / temperature
            if top_k is not None:
                kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
                logits = logits.masked_fill(logits <= kth, float("-inf"))
            probs = _filter(stable_softmax(logits), None, top_p)
            return torch.multinomial(probs.float(), 1, generator=generator).squeeze(-1)

        def _top_p_drops_crossing_token(
            logits, temperature=1.0, top_k=None, top_p=None, generator=None
        ):
            if temperature == 0:
                return logits.argmax(-1)
            probs = _filter(stable_softmax(logits / temperature), top_k, None)
            if top_p is not None:
                sorted_probs, order = probs.sort(-1, descending=True)
                keep_sorted = sorted_probs.cumsum(-1) <= top_p
                keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
                probs = probs.masked_fill(~keep, 0.0)
            return torch.multinomial(probs.float(), 1, generator=generator).squeeze(-1)

        def _top_k_after_top_p(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
            if temperature == 0:
                return logits.argmax(-1)
            probs = _filter(_filter(stable_softmax(logits / temperature), None, top_p), top_k, None)
            return torch.multinomial(probs.float(), 1, generator=generator).squeeze(-1)

        return [
            (
                _temperature_after_softmax,
                "temperature has no effect in your samples: divide the LOGITS by the temperature "
                "before the softmax (dividing the probabilities afterwards is undone when they are "
                "renormalised)",
            ),
            (
                _top_k_keeps_k_minus_1,
                "you keep only k - 1 tokens: the k-th largest logit must stay (mask the logits "
                "strictly below it, `<` not `<=`)",
            ),
            (
                _top_p_drops_crossing_token,
                "you drop the token that makes the total probability cross top_p: keep the "
                "smallest set of most likely tokens whose total REACHES top_p, crossing token "
                "included (keep a token when the mass BEFORE it is below top_p)",
            ),
            (
                _top_k_after_top_p,
                "top-k comes before top-p (steps 3 and 5 of the statement): keep the top_k "
                "largest logits first, take the softmax of those, and only then keep the "
                "smallest set whose mass reaches top_p; the other order measures top_p on the "
                "unfiltered distribution and keeps other tokens",
            ),
        ]


def _filter(probs: torch.Tensor, top_k, top_p) -> torch.Tensor:
    """Correct top-k / top-p filtering of probabilities (used by the wrong implementations)."""
    if top_k is not None:
        kth = torch.topk(probs, top_k, dim=-1).values[..., -1:]
        probs = probs.masked_fill(probs < kth, 0.0)
    if top_p is not None:
        probs = probs / probs.sum(-1, keepdim=True)
        sorted_probs, order = probs.sort(-1, descending=True)
        keep_sorted = (sorted_probs.cumsum(-1) - sorted_probs) < top_p
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        probs = probs.masked_fill(~keep, 0.0)
    return probs


# --------------------------------------------------------------------------------------------
# perplexity
# --------------------------------------------------------------------------------------------


def _nll(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    log_probs = logits - logits.logsumexp(-1, keepdim=True)
    return -log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


@register
class PerplexityTask(Task):
    id = "ex09.perplexity"
    lesson = "lesson 09, section 'The bigram baseline'"
    reference = "course_lib.sampling.perplexity"

    def cases(self, gen):
        def make(shape, vocab, scale=1.0, dtype=torch.float32):
            logits = torch.randn(*shape, vocab, generator=gen, dtype=torch.float64) * scale
            return logits.to(dtype), torch.randint(vocab, shape, generator=gen)

        uniform = torch.zeros(3, 4, 10)
        return [
            Case("logits (2, 5, 11) and targets (2, 5)", make((2, 5), 11)),
            Case("logits (7, 4) and targets (7,): no batch dimension", make((7,), 4)),
            Case("float64 logits (3, 6, 20)", make((3, 6), 20, dtype=torch.float64)),
            Case("confident logits (scale 6), (4, 9, 13)", make((4, 9), 13, scale=6.0)),
            Case(
                "uniform logits over 10 tokens: perplexity 10",
                (uniform, torch.randint(10, (3, 4), generator=gen)),
            ),
            Case(
                "a target 120 nats below the best logit, float32 (softmax gives it probability "
                "0, so log(softmax) is -inf; log_softmax stays exact)",
                (torch.tensor([[0.0, -120.0], [0.0, 0.0]]), torch.tensor([1, 0])),
            ),
            Case(
                "targets (2, 6) for logits (2, 5, 11)",
                (torch.randn(2, 5, 11, generator=gen), torch.zeros(2, 6, dtype=torch.long)),
                raises=ValueError,
            ),
            Case(
                "targets (10,) for logits (2, 5, 11): as many targets as positions, but not the "
                "same shape",
                (torch.randn(2, 5, 11, generator=gen), torch.zeros(10, dtype=torch.long)),
                raises=ValueError,
            ),
        ]

    def mistakes(self):
        def _base_2(logits, targets):
            return 2.0 ** _nll(logits, targets).mean()

        def _log2_then_exp(logits, targets):
            return torch.exp(_nll(logits, targets).mean() / math.log(2))

        def _mean_after_exp(logits, targets):
            return torch.exp(_nll(logits, targets)).mean()

        def _sum_not_mean(logits, targets):
            return torch.exp(_nll(logits, targets).sum())

        def _no_minus(logits, targets):
            return torch.exp(-_nll(logits, targets).mean())

        def _cross_entropy_unflattened(logits, targets):  # raises on (batch, seq, vocab)
            return torch.exp(nn.functional.cross_entropy(logits, targets))

        def _per_row(logits, targets):  # one perplexity per sequence, then their mean
            return torch.exp(_nll(logits, targets).mean(-1)).mean()

        def _log_of_softmax(logits, targets):
            probs = torch.softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1))
            return torch.exp(-probs.log().mean())

        return [
            (
                _log_of_softmax,
                "a probability that underflows to 0 in softmax gives log(0) = -inf: take "
                "log_softmax(logits, dim=-1), which computes the log-probabilities without "
                "forming the probabilities",
            ),
            (
                _base_2,
                "the cross-entropy of log_softmax is in nats (natural log), so the "
                "perplexity is e ** mean, not 2 ** mean",
            ),
            (
                _log2_then_exp,
                "you measured the cross-entropy in bits (log base 2) but then "
                "took exp: use the natural log throughout (or 2 ** bits)",
            ),
            (
                _mean_after_exp,
                "you averaged the per-token perplexities; take the MEAN of the "
                "cross-entropy first, then one exponential",
            ),
            (
                _sum_not_mean,
                "you summed the cross-entropy over the positions; the perplexity is the "
                "exponential of its MEAN (per token), so it does not grow with the length",
            ),
            (
                _no_minus,
                "the cross-entropy is MINUS the log-probability of the target: without the "
                "minus sign the perplexity comes out below 1",
            ),
            (
                _cross_entropy_unflattened,
                "F.cross_entropy reads dim 1 as the classes, so (batch, seq, vocab) logits "
                "look like seq classes to it; flatten the positions first: "
                "F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))",
            ),
            (
                _per_row,
                "you averaged one perplexity per sequence; the perplexity of the batch is one "
                "exponential of the mean cross-entropy over EVERY position of every sequence",
            ),
        ]


# --------------------------------------------------------------------------------------------
# cached_attention_step
# --------------------------------------------------------------------------------------------

_AXIS_HINT = (
    "append the new key and value along the sequence axis (dim=2 of "
    "(batch, heads, t, d_head)), so the cache grows by one token per step"
)
_STALE_HINT = (
    "return the caches WITH the new key and value appended; returning the old "
    "ones (a stale cache) makes the next step forget this token"
)


_ATTEND_BEFORE_APPEND_HINT = (
    "the newest token must attend to itself too: append k_t and v_t to the cache BEFORE "
    "computing the attention (attending over the old cache, then appending, is the classic "
    "off-by-one of a KV cache)"
)
_CONCATENATIONS = (torch.cat, torch.concat, torch.concatenate)


def _appends_off_axis(args: tuple, kwargs: dict, pairs: tuple) -> bool:
    """Whether a torch.cat call joined a cache and the new token along another axis than dim 2.

    Judged by what the call was given (a cache and the step's k_t or v_t, in that order, and a
    dim), not by the error it raised.
    """
    tensors = args[0] if args else kwargs.get("tensors", ())
    dim = args[1] if len(args) > 1 else kwargs.get("dim", kwargs.get("axis", 0))
    if not isinstance(dim, int) or not isinstance(tensors, (tuple, list)):
        return False
    shapes = tuple(tuple(t.shape) for t in tensors if isinstance(t, torch.Tensor))
    return dim % 4 != 2 and shapes in {(tuple(c.shape), tuple(n.shape)) for c, n in pairs}


@register
class CachedAttentionStepTask(Task):
    id = "ex09.cached_attention_step"
    lesson = "lesson 09, section 'A KV cache'"
    reference = "course_lib.kv_cache.cached_attention_step"

    def cases(self, gen):
        def qkv(batch, heads, n, d, d_v=None, dtype=torch.float32):
            d_v = d_v or d
            return tuple(
                torch.randn(batch, heads, n, size, generator=gen, dtype=dtype)
                for size in (d, d, d_v)
            )

        seq = {"mode": "sequence"}
        cache_k = torch.randn(2, 2, 6, 4, generator=gen)
        cache_v = torch.randn(2, 2, 6, 4, generator=gen)
        q1, k1, v1 = qkv(2, 2, 1, 4)
        return [
            Case(
                "5 steps from an empty cache, q, k, v (2, 3, 5, 4): each step's output must "
                "equal that row of full causal attention",
                qkv(2, 3, 5, 4),
                data=seq,
            ),
            Case(
                "7 steps, float64, batch 1, one head, d_v=3 != d_k=5",
                qkv(1, 1, 7, 5, 3, dtype=torch.float64),
                data=seq,
            ),
            Case(
                "one step after a cache of 6 tokens, (2, 2, 6, 4)", (q1, k1, v1, cache_k, cache_v)
            ),
            Case(
                "q_t with 2 tokens",
                (torch.randn(2, 2, 2, 4, generator=gen), k1, v1, cache_k, cache_v),
                raises=ValueError,
            ),
        ]

    def _step(self, obj, q_t, k_t, v_t, k_cache, v_cache):
        t = k_cache.shape[2]
        recorder = OpRecorder(watch=_CONCATENATIONS)
        try:
            with recorder:
                out = obj(q_t, k_t, v_t, k_cache, v_cache)
        except Exception as error:
            if isinstance(error, (NotImplementedError, GradingError)):
                raise
            if isinstance(error, RuntimeError) and any(
                _appends_off_axis(args, kwargs, ((k_cache, k_t), (v_cache, v_t)))
                for _, args, kwargs in recorder.calls
            ):
                raise GradingError(
                    f"your code raised RuntimeError: {error}. Hint: {_AXIS_HINT}"
                ) from None
            if t == 0:
                self._attends_before_appending(obj, error, q_t, k_t, v_t)
            raise
        if not isinstance(out, (tuple, list)) or len(out) != 3:
            raise GradingError(
                "cached_attention_step should return a tuple (output_t, k_cache, v_cache)"
            )
        output_t, new_k, new_v = out
        for name, cache, old in (("k_cache", new_k, k_cache), ("v_cache", new_v, v_cache)):
            want = (*old.shape[:2], t + 1, old.shape[3])
            if not isinstance(cache, torch.Tensor):
                raise GradingError(f"the returned {name} should be a tensor")
            if tuple(cache.shape) == tuple(old.shape):
                raise GradingError(
                    f"after a step with a cache of {t} tokens your {name} still "
                    f"has shape {tuple(cache.shape)}: {_STALE_HINT}"
                )
            if tuple(cache.shape) != want:
                raise GradingError(
                    f"after a step with a cache of {t} tokens your {name} has "
                    f"shape {tuple(cache.shape)}, expected {want}: {_AXIS_HINT}"
                )
        return output_t, new_k, new_v

    @staticmethod
    def _attends_before_appending(obj, error, q_t, k_t, v_t):
        """Raise the named hint when a step that failed on an empty cache attends over the old
        cache alone once the cache holds a token (so attending before appending crashed)."""
        k_old, v_old = k_t + 1.0, v_t - 1.0  # one earlier token
        try:
            with torch.no_grad():
                output = obj(q_t, k_t, v_t, k_old, v_old)[0]
        except Exception:  # noqa: BLE001  (it fails anyway: no hint from this)
            return
        if isinstance(output, torch.Tensor) and output.shape == v_old.shape:
            if torch.allclose(output, v_old, atol=1e-5) and not torch.allclose(v_old, v_t):
                raise GradingError(
                    f"your code raised {type(error).__name__}: {error} on the first step, with "
                    f"an empty cache. Hint: {_ATTEND_BEFORE_APPEND_HINT}"
                ) from None

    def call(self, obj, case):
        if case.raises is not None or case.data.get("mode") != "sequence":
            if case.raises is not None:
                return obj(*case.args)
            return self._step(obj, *case.args)
        q, k, v = case.args  # (batch, heads, n, d)
        batch, heads, n, _ = q.shape
        k_cache = k.new_zeros(batch, heads, 0, k.shape[-1])
        v_cache = v.new_zeros(batch, heads, 0, v.shape[-1])
        outputs = []
        for i in range(n):
            output_t, k_cache, v_cache = self._step(
                obj, q[:, :, i : i + 1], k[:, :, i : i + 1], v[:, :, i : i + 1], k_cache, v_cache
            )
            outputs.append(output_t)
        return torch.cat(outputs, dim=2), k_cache, v_cache  # (batch, heads, n, d_v), caches

    def compare(self, got, want, case):
        if isinstance(got, (tuple, list)) and len(got) == 3 and isinstance(want, (tuple, list)):
            names = ("your outputs", "your final k_cache", "your final v_cache")
            for g, w, name in zip(got, want, names, strict=True):
                message = compare_values(g, w, name)
                if message:
                    return message
            return None
        return compare_values(got, want)

    def mistakes(self):
        def _stale_cache(q_t, k_t, v_t, k_cache, v_cache):
            keys, values = torch.cat([k_cache, k_t], 2), torch.cat([v_cache, v_t], 2)
            return _attend(q_t, keys, values), k_cache, v_cache

        def _without_the_new_token(q_t, k_t, v_t, k_cache, v_cache):
            output = (
                _attend(q_t, k_cache, v_cache)
                if k_cache.shape[2]
                else torch.zeros_like(q_t[..., :1].expand(*q_t.shape[:3], v_t.shape[-1]))
            )
            return output, torch.cat([k_cache, k_t], 2), torch.cat([v_cache, v_t], 2)

        def _scaled_by_d_v(q_t, k_t, v_t, k_cache, v_cache):
            keys, values = torch.cat([k_cache, k_t], 2), torch.cat([v_cache, v_t], 2)
            weights = stable_softmax(q_t @ keys.transpose(-2, -1) / math.sqrt(v_t.shape[-1]))
            return weights @ values, keys, values

        def _softmax_over_queries(q_t, k_t, v_t, k_cache, v_cache):
            keys, values = torch.cat([k_cache, k_t], 2), torch.cat([v_cache, v_t], 2)
            weights = stable_softmax(q_t @ keys.transpose(-2, -1) / math.sqrt(q_t.shape[-1]), -2)
            return weights @ values, keys, values

        def _prepended(q_t, k_t, v_t, k_cache, v_cache):
            keys, values = torch.cat([k_t, k_cache], 2), torch.cat([v_t, v_cache], 2)
            return _attend(q_t, keys, values), keys, values

        def _wrong_axis(q_t, k_t, v_t, k_cache, v_cache):
            keys, values = torch.cat([k_cache, k_t], -1), torch.cat([v_cache, v_t], -1)
            return _attend(q_t, keys, values), keys, values

        return [
            (_stale_cache, _STALE_HINT),
            (_without_the_new_token, _ATTEND_BEFORE_APPEND_HINT),
            (
                _softmax_over_queries,
                "the softmax runs over the keys, the last axis (dim=-1) of the (batch, heads, 1, "
                "t + 1) scores; over dim=-2, which holds the one query, every weight is 1",
            ),
            (
                _prepended,
                "the new key and value go at the END of the caches, torch.cat([k_cache, k_t], "
                "dim=2): the cache keeps the tokens in their order (position t is row t); "
                "prepending gives the same output but caches in reverse order",
            ),
            (_wrong_axis, _AXIS_HINT),
            (
                _scaled_by_d_v,
                D_V_SCALE_HINT,
            ),
        ]


def _attend(q, k, v):
    weights = stable_softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]))
    return weights @ v


# --------------------------------------------------------------------------------------------
# ex09.generate (transfer: the lesson imports its generation loop; the learner writes it, cached)
# --------------------------------------------------------------------------------------------

_GPT_SIZES = {"vocab_size": 11, "block_size": 16, "d_model": 16, "num_heads": 2, "num_layers": 2}


def _cache_only_gpt_class():
    from ...gpt import GPT

    class CacheOnlyGPT(GPT):
        """The course's GPT, but its full forward is switched off and cached positions counted."""

        positions_computed = 0
        calls = 0

        def forward(self, ids):
            raise GradingError(
                "this check's model runs only with its KV cache: call "
                "model.forward_cached(new_ids, cache, start) and feed each new token once, not "
                "model(ids) on the whole sequence"
            )

        def forward_cached(self, ids, cache=None, start=None):
            self.positions_computed += ids.shape[1]
            self.calls += 1
            return super().forward_cached(ids, cache, start)

    return CacheOnlyGPT


def _build_gpt(cls, state, dtype):
    from ...gpt import GPTConfig

    with torch.random.fork_rng(devices=[]):  # GPT's own init draws from the global generator
        model = cls(GPTConfig(**_GPT_SIZES))
    model = model.to(dtype)
    model.load_state_dict(state)
    return model.eval()


def _own_sample_next():
    """course_lib's sample_next under a code object of its own: generate may not call the
    finished version, and the listed mistakes stand for a learner who wrote their own."""
    from ...sampling import sample_next

    code = sample_next.__code__.replace(co_name="sample_next_of_a_learner")
    return types.FunctionType(
        code, sample_next.__globals__, "sample_next", sample_next.__defaults__
    )


def _wrong_generate(
    model, ids, max_new_tokens, temperature=1.0, top_k=None, generator=None, *, mistake=""
):
    sample_next = _own_sample_next()
    with torch.no_grad():
        if mistake == "no_prompt":  # the prompt is never fed; only its last token
            logits, cache = model.forward_cached(ids[:, -1:], None, ids.shape[1] - 1)
        else:
            logits, cache = model.forward_cached(ids, None, 0)
        for _ in range(max_new_tokens):
            row = logits[:, 0] if mistake == "first_position" else logits[:, -1]
            temp = 1.0 if mistake == "no_temperature" else temperature  # sample_next's default
            k = None if mistake == "no_top_k" else top_k
            next_id = sample_next(row, temp, k, None, generator)  # (batch,)
            ids = torch.cat([ids, next_id[:, None]], dim=1)
            start = {"restart": 0, "off_by_one": ids.shape[1]}.get(mistake, ids.shape[1] - 1)
            if ids.shape[1] >= model.config.block_size:
                start = min(start, model.config.block_size - 1)
            logits, new_cache = model.forward_cached(ids[:, -1:], cache, start)
            if mistake != "stale":
                cache = new_cache
    return ids


def _wrong(name):
    def wrong(model, ids, max_new_tokens, temperature=1.0, top_k=None, generator=None):
        return _wrong_generate(
            model, ids, max_new_tokens, temperature, top_k, generator, mistake=name
        )

    wrong.__name__ = f"generate_{name}"
    return wrong


@register
class Generate(Task):
    id = "ex09.generate"
    lesson = "lesson 09, sections 'Sampling strategies' and 'A KV cache'"
    reference = "course_lib.gpt.generate_with_cache"
    depends_on = ("sample_next",)
    forbidden = ("course_lib.gpt.generate", "course_lib.sampling.sample_next")

    def cases(self, gen):
        from ...gpt import GPT, GPTConfig

        def case(
            description, batch, prompt, new, *, temperature=1.0, top_k=None, dtype=torch.float64
        ):
            with torch.random.fork_rng(devices=[]):
                model = GPT(GPTConfig(**_GPT_SIZES))
            state = {
                k: (0.5 * randn(gen, *v.shape, dtype=torch.float64)).to(dtype)
                for k, v in model.state_dict().items()
            }
            ids = torch.randint(0, _GPT_SIZES["vocab_size"], (batch, prompt), generator=gen)
            seed = int(torch.randint(0, 2**31 - 1, (1,), generator=gen))
            kwargs = {"temperature": temperature, "top_k": top_k}
            return Case(
                description,
                data={
                    "state": state,
                    "dtype": dtype,
                    "ids": ids,
                    "new": new,
                    "kwargs": kwargs,
                    "seed": seed,
                },
            )

        return [
            case(
                "greedy (temperature 0), batch 2, a prompt of 3 tokens, 6 new tokens",
                2,
                3,
                6,
                temperature=0.0,
            ),
            case(
                "sampling at temperature 1.0, batch 3, a prompt of 1 token, 8 new tokens", 3, 1, 8
            ),
            case(
                "top_k=3 at temperature 0.8, batch 1, a prompt of 5 tokens, 5 new tokens",
                1,
                5,
                5,
                temperature=0.8,
                top_k=3,
            ),
            case("max_new_tokens=1, batch 2, a prompt of 4 tokens", 2, 4, 1),
            case("max_new_tokens=0: the prompt comes back unchanged", 2, 3, 0),
            case(
                "a prompt of 10 and 6 new tokens: exactly the context of 16 (block_size)",
                2,
                10,
                6,
                temperature=0.7,
            ),
            case(
                "float32 model, greedy, batch 4, a prompt of 2 tokens, 7 new tokens",
                4,
                2,
                7,
                temperature=0.0,
                dtype=torch.float32,
            ),
        ]

    def _run(self, obj, case, cls):
        d = case.data
        model = _build_gpt(cls, d["state"], d["dtype"])
        generator = torch.Generator().manual_seed(d["seed"])
        tokens = obj(model, d["ids"].clone(), d["new"], generator=generator, **d["kwargs"])
        return model, tokens

    def call(self, obj, case):
        model, tokens = self._run(obj, case, _cache_only_gpt_class())
        d = case.data
        if d["kwargs"]["temperature"] != 0 and d["new"] > 0:  # a draw: is it the generator's?
            _, again = self._run(obj, case, _cache_only_gpt_class())
            if isinstance(tokens, torch.Tensor) and not torch.equal(tokens, again):
                raise GradingError(
                    "two runs with generators in the same state gave different tokens: pass "
                    "`generator` on to your sample_next (which passes it to torch.multinomial); "
                    "without it the draws come from PyTorch's global random state"
                )
        # the prompt once, then each new token once (the last one may be fed or not)
        if model.positions_computed > d["ids"].shape[1] + d["new"]:
            return tokens, "positions"
        if model.calls > 1 + d["new"]:
            return tokens, "calls"
        return tokens, True

    def expected(self, case):
        from ...gpt import GPT, generate

        _, tokens = self._run(generate, case, GPT)  # the lesson's cache-free loop
        return tokens, True

    def compare(self, got, want, case):
        message = compare_values(got[0], want[0], "your tokens")
        if message:
            return message
        if got[1] == "calls":
            return (
                "your tokens are right, but the model was called more often than once for the "
                "prompt and once per new token: feed the whole prompt in one call "
                "(forward_cached(ids, None, 0)), not token by token"
            )
        if got[1] is not True:
            return (
                "your tokens are right, but the model computed more positions than the "
                "prompt plus one per new token: feed only the newest token at each step, "
                "with the cache"
            )
        return None

    def mistakes(self):
        return [
            (
                _wrong("stale"),
                "the cache is stale: forward_cached returns the cache with the "
                "new token's keys and values appended; keep it (logits, cache = "
                "model.forward_cached(...)) or the next step forgets the tokens generated so far",
            ),
            (
                _wrong("restart"),
                "the positions restart at 0: the newest token sits at position "
                "(number of tokens so far) - 1, so pass start = ids.shape[1] - 1 after appending "
                "it",
            ),
            (
                _wrong("off_by_one"),
                "the new token's position is off by one: after appending it, "
                "it sits at position ids.shape[1] - 1 (positions count from 0)",
            ),
            (
                _wrong("first_position"),
                "sample from the logits of the LAST position, "
                "logits[:, -1]: they predict the next token",
            ),
            (
                _wrong("no_temperature"),
                "temperature is not passed on to sample_next, which then samples at its default "
                "1.0: at temperature 0 (greedy) the tokens must be the arg-max; pass "
                "temperature, top_k and generator on",
            ),
            (
                _wrong("no_top_k"),
                "top_k is not passed on to sample_next, so every token may be drawn: pass "
                "temperature, top_k and generator on",
            ),
            (
                _wrong("no_prompt"),
                "feed the whole prompt first (start 0, an empty cache): its "
                "keys and values are what the new tokens attend to",
            ),
        ]


# --------------------------------------------------------------------------------------------
# ex09.GPT, the capstone: the learner's own GPT with course_lib.gpt.GPT's parameter names.
# Graded without training: forward, one optimisation step and generation against the reference.
# --------------------------------------------------------------------------------------------


def _reference_gpt(sizes: dict):
    from ...gpt import GPT, GPTConfig

    with torch.random.fork_rng(devices=[]):
        return GPT(GPTConfig(**sizes))


def _gpt_state(gen, sizes, dtype):
    model = _reference_gpt(sizes)
    state = {}
    for name, value in exercise_state(model.state_dict()).items():
        if name == "lm_head.weight":
            continue  # tied: the same tensor as token_embedding.weight
        noise = torch.randn(value.shape, generator=gen, dtype=torch.float64)
        state[name] = (1.0 + 0.2 * noise if "norm" in name else 0.3 * noise).to(dtype)
    state["lm_head.weight"] = state["token_embedding.weight"]
    return state


def _mistake_gpt(kind: str):
    """A learner-style GPT with one deliberate error (built lazily: needs torch.nn)."""
    import torch.nn.functional as F
    from torch import nn

    from ...multihead import MultiHeadAttention

    class Block(nn.Module):
        def __init__(self, d_model, num_heads):
            super().__init__()
            self.self_attn = MultiHeadAttention(d_model, num_heads, bias=False)
            self.linear1 = nn.Linear(d_model, 4 * d_model, bias=False)
            self.linear2 = nn.Linear(4 * d_model, d_model, bias=False)
            self.norm1 = nn.LayerNorm(d_model, bias=False)
            self.norm2 = nn.LayerNorm(d_model, bias=False)

        def forward(self, x):
            n = x.shape[1]
            mask = None if kind == "no_causal" else torch.ones(n, n, dtype=torch.bool).tril()
            if kind == "torch_mask":  # nn.MultiheadAttention's convention: True = blocked
                mask = torch.ones(n, n, dtype=torch.bool).triu(1)
            if kind == "triu":  # the upper triangle with its diagonal: the future and itself
                mask = torch.ones(n, n, dtype=torch.bool).triu()
            if kind == "attend_raw":  # the attention reads x, only the residual is normalised
                x = x + self.self_attn(x, x, x, mask=mask)[0]
                return x + self.linear2(F.gelu(self.linear1(self.norm2(x))))
            if kind == "post_norm":
                x = self.norm1(x + self.self_attn(x, x, x, mask=mask)[0])
                return self.norm2(x + self.linear2(F.gelu(self.linear1(x))))
            h = self.norm1(x)
            x = x + self.self_attn(h, h, h, mask=mask)[0]
            act = {"relu": F.relu, "tanh_gelu": _tanh_gelu}.get(kind, F.gelu)
            return x + self.linear2(act(self.linear1(self.norm2(x))))

    class WrongGPT(nn.Module):
        def __init__(self, vocab_size, block_size, d_model, num_heads, num_layers):
            super().__init__()
            self.token_embedding = nn.Embedding(vocab_size, d_model)
            self.position_embedding = nn.Embedding(block_size, d_model)
            self.layers = nn.ModuleList(Block(d_model, num_heads) for _ in range(num_layers))
            self.norm = nn.LayerNorm(d_model, bias=False)
            self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
            if kind != "untied":
                self.lm_head.weight = self.token_embedding.weight
            for param in self.parameters():  # GPT-2's init, which the statement asks for
                if param.dim() == 2:
                    nn.init.normal_(param, std=0.02)

        def forward(self, ids):
            if kind == "lesson_positions":  # lesson 09's module that adds positions, copied
                x = self.position_embedding(self.token_embedding(ids))
            else:
                x = self.token_embedding(ids)
            if kind not in ("no_positions", "lesson_positions"):
                x = x + self.position_embedding(torch.arange(ids.shape[1]))
            for layer in self.layers:
                x = layer(x)
            if kind != "no_final_norm":
                x = self.norm(x)
            return self.lm_head(x)

    WrongGPT.__name__ = f"GPT_{kind}"
    return WrongGPT


def _tanh_gelu(x):
    return torch.nn.functional.gelu(x, approximate="tanh")


def _sgd_step(model, ids, lr=0.5):
    """One plain SGD step on the next-token loss; returns (loss, parameters after, by name)."""
    import torch.nn.functional as F

    model.train()
    x, y = ids[:, :-1], ids[:, 1:]
    logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    model.zero_grad(set_to_none=True)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():  # parameters() lists a tied matrix once
            if p.grad is not None:
                p -= lr * p.grad
    state = exercise_state(model.state_dict())  # the exercise's names, in the same order
    return float(loss.detach()), torch.cat([state[k].flatten() for k in sorted(state)])


def _check_gpt2_init(model: nn.Module) -> None:
    """The statement asks for GPT-2's N(0, 0.02^2) init of the token embedding and of the
    feed-forward's first layer (the layers writing into the residual stream may be smaller)."""
    for name, param in model.named_parameters():
        if name == "token_embedding.weight" or name.endswith("linear1.weight"):
            std = float(param.detach().double().std())
            if not 0.015 <= std <= 0.025:
                raise GradingError(
                    f"your {name} starts with standard deviation {std:.3g}: initialise every "
                    "weight matrix (nn.Linear and nn.Embedding) from N(0, 0.02^2), GPT-2's "
                    "init (nn.init.normal_(weight, std=0.02)); PyTorch's defaults start the "
                    "tied logits far too large"
                )


@register
class CapstoneGPT(ModuleTask):
    id = "ex09.GPT"
    lesson = "lesson 09, section 'The GPT: the same blocks, a causal mask, no cross-attention'"
    reference = "course_lib.gpt.gpt_from_sizes"
    forbidden = (
        "course_lib.gpt.GPT",
        "course_lib.blocks.EncoderLayer",
        "torch.nn.TransformerEncoderLayer",
        "torch.nn.TransformerEncoder",
        "torch.nn.TransformerDecoderLayer",
    )

    def cases(self, gen):
        def case(description, kind, sizes, batch, seq, dtype=torch.float32, new=0):
            ids = torch.randint(0, sizes["vocab_size"], (batch, seq), generator=gen)
            seed = int(torch.randint(0, 2**31 - 1, (1,), generator=gen))
            return Case(
                description,
                data={
                    "kind": kind,
                    "sizes": sizes,
                    "ids": ids,
                    "state": _gpt_state(gen, sizes, dtype),
                    "new": new,
                    "seed": seed,
                },
            )

        small = {"vocab_size": 13, "block_size": 8, "d_model": 16, "num_heads": 2, "num_layers": 1}
        deeper = {"vocab_size": 9, "block_size": 6, "d_model": 12, "num_heads": 3, "num_layers": 2}
        return [
            case(
                "forward: vocab 13, block_size 8, d_model 16, 2 heads, 1 layer, ids (2, 5)",
                "forward",
                small,
                2,
                5,
            ),
            case(
                "forward: 2 layers, 3 heads, ids (1, 6) filling block_size, float64",
                "forward",
                deeper,
                1,
                6,
                dtype=torch.float64,
            ),
            case("forward on a single token, ids (3, 1)", "forward", small, 3, 1),
            case(
                "one SGD step (lr 0.5) on the next-token loss of ids (3, 7), then the loss and "
                "every parameter compared",
                "step",
                small,
                3,
                7,
            ),
            case(
                "one SGD step, 2 layers, float64, ids (2, 7)",
                "step",
                deeper,
                2,
                7,
                dtype=torch.float64,
            ),
            case(
                "generation with course_lib.gpt.generate: prompt (2, 3), 8 new tokens "
                "(beyond block_size, so the window slides), temperature 1.0, same seed",
                "generate",
                deeper,
                2,
                3,
                dtype=torch.float64,
                new=8,
            ),
            case(
                "GPT-2's init: right after GPT(...) is built (before any weights are loaded), "
                "token_embedding.weight and every linear1.weight have standard deviation 0.02",
                "init",
                small,
                1,
                1,
            ),
        ]

    def init_args(self, case):
        sizes = case.data["sizes"]
        names = ("vocab_size", "block_size", "d_model", "num_heads", "num_layers")
        return tuple(sizes[name] for name in names), {}

    def build(self, obj, case):
        with torch.random.fork_rng(devices=[]):  # a model's own init draws from the global RNG
            torch.manual_seed(0)
            return super().build(obj, case)

    def call(self, obj, case):
        if case.data["kind"] != "init":
            return super().call(obj, case)
        _check_gpt2_init(self.build(obj, case))  # the model's own weights, none loaded
        return "GPT-2's init"

    def weights(self, case):
        return case.data["state"]

    def not_a_module(self, built):
        return f"GPT(...) should build a torch.nn.Module, got {type(built).__name__}"

    def run(self, model, case):
        d = case.data
        if d["kind"] == "forward":
            model.eval()
            with torch.no_grad():
                return model(d["ids"])
        if d["kind"] == "step":
            return _sgd_step(model, d["ids"])
        from ...gpt import generate

        tokens = generate(
            _AsGPT(model, d["sizes"]["block_size"]),
            d["ids"],
            d["new"],
            generator=torch.Generator().manual_seed(d["seed"]),
        )
        return tokens

    def compare(self, got, want, case):
        if case.data["kind"] == "step":
            if not isinstance(got, tuple):
                return "the step could not run"
            if abs(got[0] - want[0]) > 1e-4 * max(1.0, abs(want[0])):
                return f"the loss before the step is {got[0]:.6g}, expected {want[0]:.6g}"
            return compare_values(got[1], want[1], "your parameters after one step")
        return compare_values(
            got, want, "your logits" if case.data["kind"] == "forward" else "your generated tokens"
        )

    def mistakes(self):
        return [
            (
                _mistake_gpt("no_causal"),
                "a position sees the future: the self-attention needs "
                "the causal mask (True on and below the diagonal)",
            ),
            (
                _mistake_gpt("post_norm"),
                "the GPT's blocks are pre-norm: x = x + attn(norm1(x)), "
                "then x = x + ffn(norm2(x)); you normalised after adding (post-norm)",
            ),
            (
                _mistake_gpt("torch_mask"),
                "the causal mask is inverted: here True means 'may attend' (True on and below "
                "the diagonal, tril); PyTorch's nn.MultiheadAttention uses True = blocked",
            ),
            (
                _mistake_gpt("attend_raw"),
                "the self-attention must read the normalised input: h = norm1(x), then "
                "x = x + self_attn(h, h, h, ...)",
            ),
            (_mistake_gpt("relu"), "the GPT's feed-forward uses GELU (F.gelu), not ReLU"),
            (
                _mistake_gpt("triu"),
                "the causal mask is the upper triangle (triu): each position would see the "
                "future and not the past. True must be on and below the diagonal (key j <= "
                "query i): torch.ones(n, n, dtype=torch.bool).tril()",
            ),
            (
                _mistake_gpt("tanh_gelu"),
                "this GELU is the tanh approximation (approximate='tanh'), which GPT-2's own code "
                "used; the task asks for the exact GELU, F.gelu(x), as course_lib's GPT uses: "
                "the two differ by up to about 1e-3, more than the check allows",
            ),
            (
                _mistake_gpt("lesson_positions"),
                "lesson 09's position_embedding is a module that ADDS positions to its input; "
                "here position_embedding is an nn.Embedding of the positions 0 .. seq-1, so "
                "look them up and add them: token_embedding(ids) + "
                "position_embedding(torch.arange(seq))",
            ),
            (
                _mistake_gpt("no_positions"),
                "add the position embedding of positions 0 .. seq-1 to the token embedding",
            ),
            (
                _mistake_gpt("no_final_norm"),
                "apply the final LayerNorm `norm` to the last block's output before lm_head",
            ),
            (
                _mistake_gpt("untied"),
                "the output layer must share its matrix with the token "
                "embedding: self.lm_head.weight = self.token_embedding.weight (the forward pass "
                "agrees, but one step of training updates the two copies separately)",
            ),
        ]


class _AsGPT(nn.Module):
    """Any model that maps ids to logits, fed the last block_size tokens, for generate."""

    def __init__(self, model, block_size):
        super().__init__()
        self.model, self.block_size = model, block_size

    def forward(self, ids):
        return self.model(ids[:, -self.block_size :])


# --------------------------------------------------------------------------------------------
# Review 2026-11-23 (EX09-1), kept apart so that it merges with work on the cases above
# --------------------------------------------------------------------------------------------

from ..core import extend_task  # noqa: E402


def _cached_step_unscaled(q_t, k_t, v_t, k_cache, v_cache):
    if q_t.shape[-2] != 1:
        raise ValueError("q_t must hold one token")
    k_cache = torch.cat([k_cache, k_t], dim=-2)
    v_cache = torch.cat([v_cache, v_t], dim=-2)
    weights = (q_t @ k_cache.transpose(-2, -1)).softmax(dim=-1)
    return weights @ v_cache, k_cache, v_cache


extend_task(
    CachedAttentionStepTask,
    mistakes=[
        (
            _cached_step_unscaled,
            "the scores are not scaled: divide q_t·k by sqrt(d_head), as in full attention",
        ),
    ],
)
