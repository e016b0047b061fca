"""ex09.sample_next: temperature, top-k and top-p, then one draw per row.

`sample_next` is random, so its check is statistical: each case draws thousands of tokens
from the learner's function (one call on a batch of identical rows, with a seeded generator)
and compares their frequencies with the exact filtered distribution: no token outside the
allowed set may appear, and every frequency must be within a few standard errors of its
probability.
"""

from __future__ import annotations

import torch

from ....sampling import sampling_distribution
from ...core import Case, GradingError, Task, changed_message, register
from ..common import stable_softmax
from ._shared import RESEEDS_GLOBAL_RNG, changes_global_rng

DRAWS = 6000  # per row of a case: a standard error of at most 0.0065 on every frequency
FEW_DRAWS = 100  # per row, for the checks that the draws come from the generator
# standard errors a frequency may stray from its probability (plus 0.002): a right answer fails
# one of the ~100 frequencies of the cases with probability below 1e-7 (#rand10; at 5 it was
# 5.3e-6, one learner's run in 190,000)
STANDARD_ERRORS = 6


def exact_tolerance(probs: torch.Tensor) -> torch.Tensor:
    """How far each frequency of DRAWS draws may stray from its exact probability."""
    return STANDARD_ERRORS * (probs * (1 - probs) / DRAWS).sqrt() + 2e-3


def _logits_from_probs(probs: list[float], order: list[int], dtype=torch.float32) -> torch.Tensor:
    """One row of logits whose softmax is `probs`, placed at the token ids in `order`."""
    row = torch.empty(len(probs), dtype=torch.float64)
    row[torch.tensor(order)] = torch.tensor(probs, dtype=torch.float64).log() + 1.7
    return row.to(dtype)


# Distinct probabilities, so that top-k and top-p sets are unambiguous.
_P8 = [0.34, 0.22, 0.15, 0.11, 0.08, 0.05, 0.03, 0.02]
_ORDER8 = [5, 2, 7, 0, 3, 6, 1, 4]
_P6 = [0.4, 0.25, 0.15, 0.1, 0.06, 0.04]
_ORDER6 = [3, 0, 5, 1, 4, 2]
_P4 = [0.5, 0.3, 0.15, 0.05]  # at temperature 2: 0.38, 0.29, 0.21, 0.12
_P5 = [0.5, 0.25, 0.125, 0.0625, 0.0625]  # powers of 2: softmax and cumsum are exact


MISTAKES = {
    "top_p_sorted_ids": "with top_p you drew a position in the SORTED probabilities, not a "
    "token id: map it back through the sort's order, order.gather(-1, drawn), or scatter "
    "the kept mask back to the vocabulary's order before drawing",
    "temperature_after_softmax": "temperature has no effect in your samples: divide the LOGITS "
    "by the temperature before the softmax (dividing the probabilities afterwards is undone "
    "when they are renormalised)",
    "top_k_keeps_k_minus_1": "you keep only k - 1 tokens: the k-th largest logit must stay "
    "(mask the logits strictly below it, `<` not `<=`)",
    "temperature_after_top_p": "divide the logits by the temperature first (step 2), then "
    "filter: top-p measures the mass of the TEMPERED distribution (at temperature 2 it keeps "
    "3 tokens here, at 1 only 2), so tempering after the filter keeps another set",
    "top_p_drops_crossing_token": "you drop the token that makes the total probability cross "
    "top_p: keep the smallest set of most likely tokens whose total REACHES top_p, crossing "
    "token included (keep a token when the mass BEFORE it is below top_p)",
    "top_k_after_top_p": "top-k comes before top-p (steps 3 and 5 of the statement): keep the "
    "top_k largest logits first, take the softmax of those, and only then keep the smallest set "
    "whose mass reaches top_p; the other order measures top_p on the unfiltered distribution "
    "and keeps other tokens (tempering the probabilities, softmax(logits) ** (1 / temperature), "
    "not renormalised, keeps the same set here: if you did that, divide the LOGITS by the "
    "temperature before the softmax, step 2; and so does top-k first, then top-p measured on "
    "the kept probabilities without renormalising them: divide them by their sum, or take the "
    "softmax of the filtered logits, before the cumulative sum)",
    "top_k_no_keepdim": "the k-th largest logit of each row must keep its axis to be compared "
    "with the (batch, vocab) logits: torch.topk(...).values[:, -1:], shape (batch, 1); "
    "values[:, -1] has shape (batch,), which PyTorch lines up with the vocabulary axis instead",
    "top_k_one_threshold": "each row has its own k-th largest logit: compare every row with "
    "its own, torch.topk(logits, k, dim=-1).values[:, -1:] of shape (batch, 1), not with one "
    "number for the whole batch (the .min() of those values)",
    "top_k_top1": "only the most likely token is ever kept: torch.topk's values come sorted "
    "from the largest, so the k-th largest is the LAST of them, values[:, -1:], not the first, "
    "values[:, :1]",
    "top_p_past_exact_total": "when the most likely tokens add up to top_p EXACTLY, the set "
    "ends there: keep a token while the mass before it is strictly below top_p (`<`, not `<=`)",
    "softmax_over_rows": "the softmax runs over each row's vocabulary, dim=-1: over dim=0 it "
    "normalises each token across the rows of the batch, so every token comes out about as "
    "likely as the others",
    "top_p_unsorted": "your top-p mask was computed on the SORTED probabilities but applied to "
    "the unsorted ones, so it keeps the first token ids instead of the most likely tokens: "
    "put it back in the tokens' order first, keep = torch.zeros_like(keep_sorted).scatter(-1, "
    "order, keep_sorted)",
    "temperature_twice": "the logits are divided by the temperature twice (logits / t / t, "
    "as at temperature t squared): divide them once, logits / temperature, before top-k and "
    "the softmax",
    "top_p_ascending": "top-p keeps the MOST likely tokens: sort the probabilities from the "
    "largest, probs.sort(dim=-1, descending=True); sort() alone sorts them from the smallest, so "
    "your set is built from the least likely tokens",
    "temperature_times": "you multiplied the logits by the temperature: divide them, logits / "
    "temperature, so that a temperature above 1 flattens the distribution and one below 1 "
    "sharpens it",
    "top_k_keeps_k_plus_1": "you keep k + 1 tokens: the k-th largest logit is at index k - 1 "
    "of the logits sorted from the largest (the last of torch.topk(logits, k).values, "
    "values[:, -1:]); mask the logits strictly below it",
    "no_greedy_branch": "temperature=0 means greedy (step 1): return logits.argmax(dim=-1) "
    "before dividing by the temperature; logits / 0 gives inf and NaN probabilities, which "
    "torch.multinomial refuses",
    "tiny_temperature_greedy": "only temperature=0 is greedy (step 1): any positive temperature, "
    "however small, still samples from softmax(logits / temperature), where tokens tied for "
    "the largest logit share the draws; the arg-max gives them all to one token",
    "top_k_drops_ties": "you keep exactly k tokens (torch.topk's indices): tokens tied with "
    "the k-th largest logit are kept too (step 3), so mask only the logits strictly below the "
    "k-th largest value, logits < torch.topk(logits, k, dim=-1).values[:, -1:]",
    "softmax_overflows": "your softmax overflows: at a small temperature the tempered logits are "
    "huge (3 / 1e-4 = 30000), exp gives inf, and inf / inf is NaN, which torch.multinomial "
    "refuses; subtract each row's largest logit before exp (logits - logits.amax(-1, "
    "keepdim=True)), or use torch.softmax(logits, dim=-1), which does",
}


SEEDED_WITHOUT_GENERATOR = (
    "two calls without a generator (generator=None) gave the same tokens: with no generator, "
    "draw from PyTorch's global random stream, torch.multinomial(probs, 1, generator=None). A "
    "seed of your own for that case (torch.manual_seed(0), or torch.Generator().manual_seed(0) "
    "as the default) makes every call, and every text that generate() samples without a "
    "generator, the same"
)


def _two_draws_alike(freq: torch.Tensor) -> float:
    """The chance that two independent calls on FEW_DRAWS copies of each row draw the same
    tokens, for the frequencies (rows, vocab) of the learner's draws."""
    return float(((freq**2).sum(-1).log().sum() * FEW_DRAWS).exp())


def wrong_sample_next(logits, temperature=1.0, top_k=None, top_p=None, generator=None, *,
                      mistake=""):  # fmt: skip
    """Greedy at temperature 0, else temperature, top-k, softmax, top-p and one draw, with one
    named mistake (no argument checks: the wrong versions only explain wrong values)."""
    if (temperature == 0 and mistake != "no_greedy_branch") or (
        mistake == "tiny_temperature_greedy" and temperature < 1e-3
    ):
        return logits.argmax(-1)
    if mistake != "temperature_after_softmax":
        logits = logits / temperature
    if mistake == "temperature_twice":  # logits / t / t
        logits = logits / temperature
    if mistake == "temperature_times":  # logits * t (after the division above)
        logits = logits * temperature**2
    if top_k is not None and mistake in ("top_k_no_keepdim", "top_k_one_threshold", "top_k_top1"):
        values = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values
        kth = values[:, :1] if mistake == "top_k_top1" else values[:, -1]  # :1, the largest
        kth = kth.min() if mistake == "top_k_one_threshold" else kth  # (batch,) or the lowest
        logits = logits.masked_fill(logits < kth, float("-inf"))
        top_k = None  # filtered here, not again below
    if top_k is not None and mistake == "top_k_drops_ties":  # k indices: one of a tie dropped
        kept = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).indices
        logits = logits.masked_fill(
            ~torch.zeros_like(logits, dtype=torch.bool).scatter(-1, kept, True), float("-inf")
        )
        top_k = None
    if top_k is not None and mistake == "top_k_keeps_k_plus_1":  # sorted[:, k] as the k-th
        top_k = top_k + 1
    if top_k is not None and mistake == "top_k_keeps_k_minus_1":
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits <= kth, float("-inf"))
        top_k = None
    probs = logits.softmax(0) if mistake == "softmax_over_rows" else stable_softmax(logits)
    if mistake == "softmax_overflows":  # exp(logits) / sum, no max subtracted
        probs = logits.exp() / logits.exp().sum(-1, keepdim=True)
    if mistake == "top_k_after_top_p":
        probs = _filter(_filter(probs, None, top_p), top_k, None)
    elif (
        mistake == "top_p_unsorted" and top_p is not None
    ):  # kept: the first ids, not the likeliest
        probs = _filter(probs, top_k, None)
        kept = (_filter(probs, None, top_p) > 0).sum(-1, keepdim=True)  # (batch, 1)
        probs = probs.masked_fill(torch.arange(probs.shape[-1]) >= kept, 0.0)
    elif mistake in ("top_p_drops_crossing_token", "top_p_past_exact_total") and top_p is not None:
        probs = _filter(probs, top_k, None)
        probs = probs / probs.sum(-1, keepdim=True)  # the softmax of the top-k logits
        sorted_probs, order = probs.sort(-1, descending=True)
        mass = sorted_probs.cumsum(-1)  # up to each token; past_exact_total: before it
        mass = mass if mistake == "top_p_drops_crossing_token" else mass - sorted_probs
        keep_sorted = mass <= top_p
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        probs = probs.masked_fill(~keep, 0.0)
    else:  # top_p_ascending: the set built from the least likely tokens
        probs = _filter(probs, top_k, top_p, descending=mistake != "top_p_ascending")
    if mistake == "temperature_after_top_p":  # the set of the untempered distribution
        kept = _filter(stable_softmax(logits * temperature), top_k, top_p) > 0
        probs = stable_softmax(logits).masked_fill(~kept, 0.0)
    if mistake == "temperature_after_softmax":
        probs = probs / temperature
    if mistake == "top_p_sorted_ids" and top_p is not None:  # drawn from the sorted order
        probs = probs.sort(-1, descending=True).values
    return torch.multinomial(probs.float(), 1, generator=generator).squeeze(-1)


def _filter(probs: torch.Tensor, top_k, top_p, descending: bool = True) -> torch.Tensor:
    """Correct top-k / top-p filtering of probabilities (used by the wrong implementations;
    descending=False builds the top-p set from the least likely tokens)."""
    if top_k is not None:
        kth = torch.topk(probs, min(top_k, probs.shape[-1]), dim=-1).values[..., -1:]
        probs = probs.masked_fill(probs < kth, 0.0)
    if top_p is not None:
        probs = probs / probs.sum(-1, keepdim=True)
        sorted_probs, order = probs.sort(-1, descending=descending)
        keep_sorted = (sorted_probs.cumsum(-1) - sorted_probs) < top_p
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        probs = probs.masked_fill(~keep, 0.0)
    return probs


@register
class SampleNextTask(Task):
    id = "ex09.sample_next"
    lesson = "lesson 09, section 'Sampling strategies'"
    reference = "course_lib.sampling.sample_next"
    forbidden = ("course_lib.sampling.sampling_distribution",)

    def cases(self, gen):
        row8 = _logits_from_probs(_P8, _ORDER8)
        row6 = _logits_from_probs(_P6, _ORDER6)
        row4 = _logits_from_probs(_P4, [2, 0, 3, 1])
        two = torch.stack([row8, row8.flip(0)])  # (2, 8)
        rand = torch.randn(2, 7, generator=gen)
        # fmt: off
        return [
            Case("temperature=1: plain sampling from softmax(logits), logits (1, 8)",
                 (row8[None],)),
            Case("temperature=0.5 (sharper), logits (2, 8), float64", (two.double(),),
                 {"temperature": 0.5}),
            Case("temperature=2.0 (flatter), random logits (2, 7)", (rand,), {"temperature": 2.0}),
            Case("top_k=3, logits (1, 8)", (row8[None],), {"top_k": 3}),
            Case("top_k=1 (only the most likely token), logits (2, 7)", (rand,), {"top_k": 1}),
            Case("top_k=2, two rows whose 2nd largest logits differ by 1, logits (2, 8)",
                 (torch.stack([row8, row8 - 1.0]),), {"top_k": 2}),
            # #hunt17: torch.topk's k indices (exactly k tokens) scored full marks
            Case("top_k=2 on logits (1, 4) [3, 2, 2, 0]: the 2nd and 3rd largest are tied, so "
                 "both are kept (3 tokens)", (torch.tensor([[3.0, 2.0, 2.0, 0.0]]),),
                 {"top_k": 2}),
            Case("top_p=0.7 with probabilities 0.4, 0.25, 0.15, ...: keeps 3 tokens",
                 (row6[None],), {"top_p": 0.7}),
            Case("top_p=0.5, logits (2, 8), float64", (two.double(),), {"top_p": 0.5}),
            Case("temperature=0.8, top_k=5, top_p=0.9 together, logits (1, 8)", (row8[None],),
                 {"temperature": 0.8, "top_k": 5, "top_p": 0.9}),
            Case("temperature=2.0 then top_p=0.75 with probabilities 0.5, 0.3, 0.15, 0.05: "
                 "keeps 3 tokens (at temperature 1 it would keep 2)", (row4[None],),
                 {"temperature": 2.0, "top_p": 0.75}),
            Case("top_p=0.75 with probabilities 0.5, 0.25, 0.125, 0.0625, 0.0625 (exact in "
                 "float32): the first two tokens reach 0.75 exactly, so only they are kept",
                 (_logits_from_probs(_P5, [3, 0, 4, 1, 2])[None],), {"top_p": 0.75}),
            Case("temperature=0 means greedy: the arg-max of each row", (rand,),
                 {"temperature": 0.0}),
            Case("temperature=0 (greedy) on one row, logits (1, 8): shape (1,)", (row8[None],),
                 {"temperature": 0.0}),
            Case("top_k=20, more than the 8 tokens of the vocabulary: every token is kept "
                 "(clamp k to the vocabulary size)", (row8[None],), {"top_k": 20}),
            Case("top_p=1.0 (allowed: top_p is in (0, 1]) keeps every token, logits (2, 8)",
                 (two,), {"top_p": 1.0}),
            # #f9: before the error cases, which the wrong versions (no checks) fail first
            Case("temperature=1e-4 (small, but not 0: still sampling) on logits (1, 4) whose "
                 "two largest are equal: each of the two is drawn half the time",
                 (torch.tensor([[0.0, 3.0, 3.0, 1.0]]),), {"temperature": 1e-4}),
            Case("a negative temperature", (rand,), {"temperature": -1.0}, raises=ValueError),
            Case("top_k=0", (rand,), {"top_k": 0}, raises=ValueError),
            Case("top_p=1.5", (rand,), {"top_p": 1.5}, raises=ValueError),
            Case("top_p=0 (top_p must be in (0, 1])", (rand,), {"top_p": 0.0}, raises=ValueError),
        ]
        # fmt: on

    def call(self, obj, case):
        logits = case.args[0]  # (rows, vocab)
        if case.raises is not None:
            return obj(logits, **case.kwargs)
        rows, vocab = logits.shape
        batch = logits.repeat(DRAWS, 1)  # (DRAWS * rows, vocab): row r repeats every `rows`
        try:
            first, reseeded = changes_global_rng(
                lambda: obj(batch, **case.kwargs, generator=torch.Generator().manual_seed(1234))
            )
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
            elif isinstance(error, ValueError) and case.kwargs.get("temperature") == 0:
                hint = (  # R12: `if temperature <= 0: raise ...`
                    "temperature=0 is allowed: it means greedy, logits.argmax(dim=-1) (step 1); "
                    "only a negative temperature raises, so test temperature < 0, not <= 0"
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
        one = obj(logits.clone(), **case.kwargs, generator=torch.Generator()) if rows == 1 else None
        if isinstance(one, torch.Tensor) and one.shape != (1,):  # #hunt5: the case's own row
            raise GradingError(
                f"for logits of shape (1, {vocab}) your function returned {tuple(one.shape)}; a "
                "batch of one row needs shape (1,): squeeze(-1), not squeeze(), which also drops "
                "the batch axis"
            )
        # the generator's checks draw FEW_DRAWS per row, not DRAWS: plenty to see a draw outside
        # the generator, and a loop over the rows answers in time
        few = logits.repeat(FEW_DRAWS, 1)
        again = obj(few.clone(), **case.kwargs, generator=torch.Generator().manual_seed(1234))
        seeded = obj(few.clone(), **case.kwargs, generator=torch.Generator().manual_seed(1234))
        if not (isinstance(again, torch.Tensor) and torch.equal(again, seeded)):
            raise GradingError(
                "two calls with generators in the same state gave different "
                "tokens: pass `generator=generator` to torch.multinomial so "
                "that sampling is reproducible"
            )
        if reseeded:  # #hunt8; after: drawing from the global stream changes it too (told above)
            raise GradingError(RESEEDS_GLOBAL_RNG)
        random = bool((first.reshape(DRAWS, rows) != first[:rows]).any())  # not one token a row
        if random and torch.equal(again, obj(few, **case.kwargs, generator=torch.Generator())):
            raise GradingError(  # torch.manual_seed(0) inside, or a generator of its own
                "two calls with generators seeded differently gave the same tokens: draw them "
                "from the `generator` you are given, not from a seed or generator of your own"
            )
        tokens = first.reshape(DRAWS, rows)  # (draws, rows)
        counts = torch.zeros(rows, vocab, dtype=torch.float64)
        counts.scatter_add_(1, tokens.T, torch.ones(rows, DRAWS, dtype=torch.float64))
        if _two_draws_alike(counts / DRAWS) < 1e-9:  # #h20: a seed of its own for generator=None
            alone = obj(few.clone(), **case.kwargs)
            if isinstance(alone, torch.Tensor) and torch.equal(alone, obj(few, **case.kwargs)):
                raise GradingError(SEEDED_WITHOUT_GENERATOR)
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
            tolerance = exact_tolerance(probs)
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

    mistake_table, wrong = MISTAKES, staticmethod(wrong_sample_next)
