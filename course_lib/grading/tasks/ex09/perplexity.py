"""ex09.perplexity: exp of the mean cross-entropy, in nats."""

from __future__ import annotations

import math

import torch
from torch import nn

from ...core import Case, GradingError, Task, compare_values, register

MISTAKES = {
    "log_of_softmax": "a probability that underflows to 0 in softmax gives log(0) = -inf: take "
    "log_softmax(logits, dim=-1), which computes the log-probabilities without "
    "forming the probabilities",
    "base_2": "the cross-entropy of log_softmax is in nats (natural log), so the "
    "perplexity is e ** mean, not 2 ** mean",
    "log2_then_exp": "you measured the cross-entropy in bits (log base 2) but then "
    "took exp: use the natural log throughout (or 2 ** bits)",
    "mean_after_exp": "you averaged the per-token perplexities; take the MEAN of the "
    "cross-entropy first, then one exponential",
    "sum_not_mean": "you summed the cross-entropy over the positions; the perplexity is the "
    "exponential of its MEAN (per token), so it does not grow with the length",
    "sum_over_len": "you divided the summed cross-entropy by len(targets), the size of the "
    "first axis only: divide by the number of predictions, targets.numel() (or take .mean())",
    "no_minus": "the cross-entropy is MINUS the log-probability of the target: without the "
    "minus sign the perplexity comes out below 1",
    "cross_entropy_unflattened": "F.cross_entropy reads dim 1 as the classes, so (batch, seq, "
    "vocab) logits look like seq classes to it; flatten the positions first: "
    "F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))",
    "per_row": "you averaged one perplexity per sequence; the perplexity of the batch is one "
    "exponential of the mean cross-entropy over EVERY position of every sequence",
    "shifted": "the targets are already the next tokens: targets[..., i] is what logits[..., i, :] "
    "must predict, so compare every position with its own target, with no shift",
    "log_softmax_dim_one": "log_softmax over dim=1 normalises over the positions when the logits "
    "are (batch, seq, vocab); take it over dim=-1, the vocabulary",
    "log_softmax_dim_zero": "log_softmax over dim=0 normalises over the first axis (the "
    "sequences of the batch, or the positions of (seq, vocab) logits), not over the "
    "vocabulary: take it over dim=-1",
    "classes_transposed": "the logits may have any number of leading axes, (..., vocab), not only "
    "(batch, seq, vocab): moving the vocabulary to dim 1 for F.cross_entropy works for 3-D "
    "logits only; flatten instead, logits.reshape(-1, vocab) and targets.reshape(-1)",
}


# #hunt17: the shape checks that let a case with targets of the wrong shape through
_WHOLE_SHAPE = (
    "compare the whole shapes, targets.shape != logits.shape[:-1], and raise a ValueError when "
    "they differ"
)
_LAST_AXIS_ONLY = (
    "your shape check compares only the last axis of targets with the positions of the logits "
    "(or only the batch axis, or the number of targets): targets (2, 1, 5) passes it with one "
    f"axis too many; {_WHOLE_SHAPE}"
)
_AXES_COUNT_ONLY = (
    "your shape check compares only the number of axes (targets.dim() != logits.dim() - 1), "
    "perhaps with the last axis, but not the batch axes: targets (3, 2, 4) passes it for logits "
    f"(2, 3, 4, 7); {_WHOLE_SHAPE}"
)


def _call_partial_check(obj, case):
    """An error case that a partial shape check lets through: any error other than a
    ValueError, or none, is told which check is missing."""
    try:
        value = obj(*case.args)
    except (ValueError, NotImplementedError):
        raise
    except Exception as e:  # noqa: BLE001  (gather's RuntimeError past the partial check)
        hint = case.data["partial_check"]
        raise GradingError(
            f"expected a ValueError, but your code raised {type(e).__name__}: {e}. Hint: {hint}"
        ) from None
    raise GradingError(
        f"expected your code to raise a ValueError, but it returned {_shown(value)}. "
        f"Hint: {case.data['partial_check']}"
    )


def _shown(value) -> str:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return f"{float(value):.4g}"
    return f"a {type(value).__name__}"


def _nll(logits: torch.Tensor, targets: torch.Tensor, dim: int = -1) -> torch.Tensor:
    log_probs = logits - logits.logsumexp(dim, keepdim=True)
    return -log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def wrong_perplexity(logits, targets, *, mistake=""):
    """exp(mean cross-entropy) with one named mistake."""
    if mistake == "cross_entropy_unflattened":  # raises on (batch, seq, vocab)
        return torch.exp(nn.functional.cross_entropy(logits, targets))
    if mistake == "classes_transposed":  # (batch, vocab, seq) for F.cross_entropy: 3-D only
        logits = logits.transpose(1, -1) if logits.dim() > 2 else logits
        return torch.exp(nn.functional.cross_entropy(logits, targets))
    if mistake == "log_of_softmax":
        probs = torch.softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1))
        return torch.exp(-probs.log().mean())
    if mistake == "shifted":  # a language model's shift, applied to targets already shifted
        logits, targets = logits[..., :-1, :], targets[..., 1:]
    nll = _nll(
        logits, targets, {"log_softmax_dim_one": 1, "log_softmax_dim_zero": 0}.get(mistake, -1)
    )
    if mistake == "mean_after_exp":
        return torch.exp(nll).mean()
    if mistake == "per_row":  # one perplexity per sequence, then their mean
        return torch.exp(nll.mean(-1)).mean()
    mean = nll.sum() if mistake == "sum_not_mean" else nll.mean()
    mean = nll.sum() / len(targets) if mistake == "sum_over_len" else mean  # the batch only
    if mistake == "base_2":
        return 2.0**mean
    if mistake == "log2_then_exp":
        mean = mean / math.log(2)
    return torch.exp(-mean if mistake == "no_minus" else mean)


@register
class PerplexityTask(Task):
    id = "ex09.perplexity"
    lesson = "lesson 09, section 'The bigram baseline'"
    reference = "course_lib.sampling.perplexity"

    def cases(self, gen):
        def make(shape, vocab, scale=1.0, dtype=torch.float32, gen=gen):
            logits = torch.randn(*shape, vocab, generator=gen, dtype=torch.float64) * scale
            return logits.to(dtype), torch.randint(vocab, shape, generator=gen)

        uniform = torch.zeros(3, 4, 10)
        # fmt: off
        return [
            Case("logits (2, 5, 11) and targets (2, 5)", make((2, 5), 11)),
            Case("logits (7, 4) and targets (7,): no batch dimension", make((7,), 4)),
            Case("float64 logits (3, 6, 20)", make((3, 6), 20, dtype=torch.float64)),
            Case("confident logits (scale 6), (4, 9, 13)", make((4, 9), 13, scale=6.0)),
            Case("uniform logits over 10 tokens: perplexity 10",
                 (uniform, torch.randint(10, (3, 4), generator=gen))),
            Case("a target 120 nats below the best logit, float32 (softmax gives it probability "
                 "0, so log(softmax) is -inf; log_softmax stays exact)",
                 (torch.tensor([[0.0, -120.0], [0.0, 0.0]]), torch.tensor([1, 0]))),
            Case("logits (2, 3, 4, 7) and targets (2, 3, 4): two leading axes",
                 make((2, 3, 4), 7, gen=torch.Generator().manual_seed(4))),
            Case("targets (2, 6) for logits (2, 5, 11)",
                 (torch.randn(2, 5, 11, generator=gen), torch.zeros(2, 6, dtype=torch.long)),
                 raises=ValueError),
            Case("targets (10,) for logits (2, 5, 11): as many targets as positions, but not the "
                 "same shape",
                 (torch.randn(2, 5, 11, generator=gen), torch.zeros(10, dtype=torch.long)),
                 raises=ValueError),
            # #hunt17: a check of the last axis alone (or of the batch axis alone) let it through
            Case("targets (2, 1, 5) for logits (2, 5, 11): the same last axis and as many "
                 "targets as positions, but one axis too many",
                 (torch.randn(2, 5, 11, generator=gen), torch.zeros(2, 1, 5, dtype=torch.long)),
                 raises=ValueError, data={"partial_check": _LAST_AXIS_ONLY}),
            # #hunt17: a check of the number of axes (and of the last one) let it through
            Case("targets (3, 2, 4) for logits (2, 3, 4, 7): as many axes, the same last axis "
                 "and as many targets as positions, but the batch axes swapped",
                 (torch.randn(2, 3, 4, 7, generator=gen), torch.zeros(3, 2, 4, dtype=torch.long)),
                 raises=ValueError, data={"partial_check": _AXES_COUNT_ONLY}),
        ]
        # fmt: on

    def call(self, obj, case):
        if "partial_check" in case.data:  # #hunt17: no ValueError here names the check it lacks
            return _call_partial_check(obj, case)
        try:
            return obj(*case.args)
        except Exception as e:  # noqa: BLE001  (any error on 2-D or 4-D logits, ValueError too)
            if case.raises or case.args[0].dim() == 3 or isinstance(e, NotImplementedError):
                raise
            hint = MISTAKES["classes_transposed"]
            raise GradingError(f"your code raised {type(e).__name__}: {e}. Hint: {hint}") from None

    def compare(self, got, want, case):
        if getattr(got, "dtype", None) == torch.float32 and want.dtype == torch.float64:
            return (  # f09: the generic dtype hint speaks of tensors created without dtype=
                "your perplexity is float32 on float64 logits: compute it in the logits' dtype, "
                "with no .float() on the logits or the log-probabilities (torch.tensor(math.exp("
                "...)) is float32 too: .exp() of the tensor keeps its dtype)"
            )
        return compare_values(got, want)

    mistake_table, wrong = MISTAKES, staticmethod(wrong_perplexity)
