"""ex08.label_smoothing_loss: label-smoothed cross-entropy that ignores padding."""

from __future__ import annotations

import torch

from ...core import Case, GradingError, Task, compare_values, register
from ..common import randn

PADS_IN_SMOOTHING = (
    "the padded positions still count in the smoothing term: leave the whole loss of a position "
    "(both terms) out where target == ignore_index"
)
PAD_COLUMN = (
    "the smoothing goes on EVERY class, <pad> included: like F.cross_entropy, put smoothing / "
    "vocab on all the vocab classes (the pad column and the correct one too), so the smoothing "
    "term is smoothing * the mean of -log p over the whole vocabulary (the Annotated "
    "Transformer zeroes the pad column and spreads over vocab - 2 classes: another loss)"
)
MISTAKES = {
    "pads_counted": "you counted the padded positions: their loss must be left out, and the mean "
    "taken over the real tokens only (target != ignore_index); build that mask from the target "
    "as given, before any replacement of the ignored targets (after it, none equals "
    "ignore_index)",
    "wrong_count": "you zeroed the padded positions but divided by all positions; divide by the "
    "number of real tokens (target != ignore_index).sum()",
    "batch_count": "you divided by the batch size; the mean is over the real tokens, "
    "(target != ignore_index).sum()",
    "sum": "that is the sum; the loss is the mean over the real tokens",
    "other_classes": "you spread the smoothing over the vocab - 1 wrong classes; F.cross_entropy "
    "spreads smoothing / vocab over every class, the correct one included",
    "no_smoothing": "the smoothing is missing: mix in smoothing * the mean of "
    "-log p over the whole vocabulary",
    "probs_not_log": "use log-probabilities (log_softmax), not probabilities",
    "vocab_sum": "the smoothing term is the MEAN of -log p over the vocabulary (smoothing / vocab "
    "on every class), not its sum",
    "pad_zero": "use the ignore_index argument: the padding id is not always 0",
    "last_dim_two": "the logits may be (positions, vocab) as well as (batch, seq, vocab): take "
    "log_softmax over dim=-1, the last axis, whatever the number of axes (and gather along "
    "dim=-1 too, not dim=2)",
    "target_overwritten": "the correct class gets its smoothing / vocab share too: the target "
    "distribution is smoothing / vocab on every class plus 1 - smoothing on the target (add it, "
    "do not write it over), so the smoothing term is smoothing * the mean of -log p over "
    "ALL the classes",
    "target_unweighted": "the target's -log p is weighted by 1 - smoothing: per position "
    "(1 - smoothing) * (-log p_target) + smoothing * mean(-log p)",
    "plus_log_probs": "mind the sign of the smoothing term: it is smoothing * the mean of -log p "
    "(a positive number), not of log p",
    "pads_in_smoothing_term": PADS_IN_SMOOTHING,
    "pads_in_smoothing_mean": PADS_IN_SMOOTHING,  # (1 - s) * nll over the real + s * uniform.mean()
    "smoothed_probabilities": "you smoothed the model's probabilities (-log((1 - smoothing) p + "
    "smoothing / vocab)); label smoothing changes the TARGET distribution: (1 - smoothing) * "
    "(-log p_target) + smoothing * mean(-log p)",
    "log_softmax_dim_one": "log_softmax over dim=1 normalises over the positions when the logits "
    "are (batch, seq, vocab); take it over dim=-1, the vocabulary",
    "log_softmax_no_dim": "log_softmax without dim= picks an axis for you: dim 0 (the batch) "
    "for (batch, seq, vocab) logits, with a warning; pass dim=-1, the vocabulary",
    "mean_of_sequence_means": "you averaged the loss of each sequence, then the sequences; the "
    "mean is over all the real tokens together (a longer sequence counts for more)",
    "keep_inverted": "your mask is inverted: it keeps the padded positions and drops the real "
    "ones; the positions to keep are target != ignore_index",
    "weights_swapped": "the two weights are swapped: 1 - smoothing goes with -log p_target, "
    "smoothing with the mean of -log p over the vocabulary",
    "nll_from_logits": "the target's term is gathered from the raw logits; gather it from "
    "log_softmax(logits): -log p_target",
    "smoothing_from_logits": "the smoothing term is the mean of the raw logits; take the mean of "
    "-log_softmax(logits) over the vocabulary",
    "log_of_softmax": "a probability that underflows to 0 in softmax gives log(0) = -inf: take "
    "log_softmax(logits, dim=-1), which never forms the probabilities",
    "pad_column_zeroed": PAD_COLUMN,  # F.cross_entropy's target, its pad column set to 0
    "pad_column_spread": PAD_COLUMN,  # smoothing / (vocab - 1) on every class but <pad>
    "pad_column_annotated": PAD_COLUMN,  # 1 - smoothing on the answer, smoothing / (vocab - 2)
    "kl_div": "that is the KL divergence to the smoothed target (F.kl_div, nn.KLDivLoss, as in "
    "the Annotated Transformer): the cross-entropy minus the target's entropy. The task's loss "
    "is the cross-entropy itself, -(smoothed_target * log_probs).sum(-1) per position",
    "vocab_from_dim1": "logits.shape[1] is the sequence length of (batch, seq, vocab) logits, "
    "not the vocabulary: take vocab = logits.shape[-1] (or the mean of -log p over dim=-1)",
    "gather_no_unsqueeze": "gather takes an index with as many dimensions as the "
    "log-probabilities: pass target.unsqueeze(-1), (..., 1), and squeeze(-1) what it returns",
    # (1 - smoothing + smoothing / vocab) * nll - smoothing / vocab * log_probs.sum(-1): no hint
    "target_counted_twice": "the correct class got its smoothing / vocab share twice: the "
    "smoothed target puts 1 - smoothing + smoothing / vocab on it IN ALL, so write "
    "(1 - smoothing) * (-log p_target) + smoothing * mean(-log p) over every class (the mean "
    "already holds the target's share)",
    # smoothing * -log_probs.sum(-1) / (vocab - 1): no hint
    "spread_all_over_vocab_minus_one": "smoothing / (vocab - 1) on EVERY class puts more than "
    "smoothing in all; F.cross_entropy spreads smoothing / vocab over every class, the correct "
    "one included: smoothing * the mean of -log p over the vocabulary",
    # log_softmax written by hand: exp(logits) / its sum, shifted by nothing or by the maximum
    # of the whole tensor; both passed every case above (no logit past float32's exp range)
    "no_max": "exp of a large logit overflows (in float32, exp(89) is already inf), so your "
    "log-probabilities became -inf: subtract each position's maximum before exp, logits - "
    "logits.amax(dim=-1, keepdim=True), or use log_softmax(logits, dim=-1), which does",
    "global_max": "you subtracted the maximum of the whole tensor (logits.max() without dim): a "
    "position whose logits all lie far below it gets exp(...) = 0 on every class and log(0) = "
    "-inf; subtract each position's own maximum, logits.amax(dim=-1, keepdim=True), or use "
    "log_softmax(logits, dim=-1)",
    # per_token.sum() / keep.sum(): the right count, the pads' losses still in the sum
    "pads_not_zeroed": "you divided by the number of real tokens but summed the loss of every "
    "position, the padded ones too: leave them out of the sum as well, (per_token * "
    "keep).sum() / keep.sum(), or per_token[keep].mean()",
    "smoothing_detached": "a term of your loss is detached (.detach(), .item(), torch.no_grad()): "
    "its value is right, but no gradient flows through it, so training would not feel it; "
    "compute every term from the logits with tensor operations",
}


def wrong_label_smoothing(logits, target, smoothing, ignore_index, *, mistake=""):
    """Per real position (1 - smoothing) * -log p_target + smoothing * mean(-log p), averaged
    over the real positions, with one named mistake."""
    ignore_index = 0 if mistake == "pad_zero" else ignore_index
    smoothing = {"no_smoothing": 0.0, "weights_swapped": 1 - smoothing}.get(mistake, smoothing)
    if mistake == "last_dim_two":
        torch.log_softmax(logits, dim=2)  # written for (batch, seq, vocab) logits only
    vocab = logits.shape[-1]
    keep = target != ignore_index
    safe = target.masked_fill(~keep, 0)
    keep = ~keep if mistake == "keep_inverted" else keep
    if mistake in ("probs_not_log", "smoothed_probabilities"):
        probs = torch.softmax(logits, dim=-1)
        picked = probs.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
        if mistake == "probs_not_log":
            per = (1 - smoothing) * -picked + smoothing * -probs.mean(dim=-1)
        else:
            per = -torch.log((1 - smoothing) * picked + smoothing / vocab)
    else:
        dim = {"log_softmax_dim_one": 1, "log_softmax_no_dim": 0 if logits.dim() == 3 else -1}
        log_probs = torch.log_softmax(logits, dim=dim.get(mistake, -1))
        log_probs = logits.softmax(-1).log() if mistake == "log_of_softmax" else log_probs
        if mistake in ("no_max", "global_max"):  # by hand, shifted by 0 or the global maximum
            z = logits - (logits.max() if mistake == "global_max" else 0.0)
            log_probs = z - z.exp().sum(dim=-1, keepdim=True).log()
        picked = logits if mistake == "nll_from_logits" else log_probs
        index = safe if mistake == "gather_no_unsqueeze" else safe.unsqueeze(-1)  # (...) raises
        nll = -picked.gather(-1, index).squeeze(-1)
        total = -log_probs.sum(dim=-1)
        smooth = {
            "other_classes": (total - nll) / (vocab - 1),  # smoothing / (vocab - 1) on the others
            "no_smoothing": (total - nll) / (vocab - 1),
            "vocab_sum": total,
            "plus_log_probs": log_probs.mean(dim=-1),
            "target_overwritten": (total - nll) / vocab,
            "smoothing_from_logits": -logits.mean(dim=-1),
            "smoothing_detached": -log_probs.detach().mean(dim=-1),
            "vocab_from_dim1": total / logits.shape[1],
            "target_counted_twice": (total + nll) / vocab,
            "spread_all_over_vocab_minus_one": total / (vocab - 1),
        }.get(mistake, -log_probs.mean(dim=-1))
        if mistake.startswith("pad_column") and 0 <= ignore_index < vocab:  # no smoothing on pad
            rest = total + log_probs[..., ignore_index]  # -log p over every class but <pad>
            spread = {"pad_column_zeroed": rest / vocab, "pad_column_spread": rest / (vocab - 1)}
            smooth = spread.get(mistake, (rest - nll) / (vocab - 2))  # the answer left out too
        if mistake.startswith("pads_in_smoothing"):  # the term summed, or averaged, over all
            n = keep.sum()
            smoothed = smooth.sum() / n if mistake == "pads_in_smoothing_term" else smooth.mean()
            return (1 - smoothing) * nll.masked_fill(~keep, 0).sum() / n + smoothing * smoothed
        per = (1.0 if mistake == "target_unweighted" else 1 - smoothing) * nll + smoothing * smooth
        if mistake == "kl_div":  # the cross-entropy minus the smoothed target's entropy
            weights = [1 - smoothing + smoothing / vocab, smoothing / vocab]
            on, off = torch.tensor(weights, dtype=logits.dtype)
            per = per + torch.xlogy(on, on) + (vocab - 1) * torch.xlogy(off, off)
    if mistake == "pads_counted":
        return per.mean()
    per = per if mistake == "pads_not_zeroed" else per.masked_fill(~keep, 0)
    if mistake == "mean_of_sequence_means":
        return (per.sum(dim=-1) / keep.sum(dim=-1).clamp_min(1)).mean()
    if mistake == "sum":
        return per.sum()
    count = {"wrong_count": target.numel(), "batch_count": target.shape[0]}.get(mistake)
    return per.sum() / (keep.sum() if count is None else count)


_SHAPE_HINT = (
    "two tensors whose shapes do not line up were broadcast: gather(-1, ...) returns (..., 1), "
    "so squeeze(-1) it; a mean over the vocabulary is (...) without keepdim; only what is "
    "subtracted from the (..., vocab) logits keeps that axis (logsumexp(-1, keepdim=True)). "
    "Every per-position term has the shape of target"
)
_IGNORE_HINT = (
    "ignore_index need not be a class id (F.cross_entropy's default is -100): "
    "replace the ignored targets by a valid id (e.g. target.masked_fill(~keep, 0)) "
    "before gather, then leave those positions out"
)


_AGAIN = (
    "logits (4, 7, 10) again (the first case's shape), padded elsewhere, pad id 0, smoothing "
    "0.1: nothing may be kept from an earlier call"
)
_KEPT = (
    "this case has the first case's shape and other padded positions: where the first passed "
    "and this one fails, your function keeps something from an earlier call (a mask or a "
    "target in a global, a cache or a mutable default argument) and reads it again; compute "
    "everything from this call's arguments"
)


@register
class LabelSmoothingLoss(Task):
    id = "ex08.label_smoothing_loss"
    lesson = "lesson 08, section 'Label smoothing'"
    reference = "course_lib.train.label_smoothing_loss"
    mistake_table = MISTAKES
    wrong = staticmethod(wrong_label_smoothing)
    forbidden = (
        "torch.nn.functional.cross_entropy",
        "torch.nn.CrossEntropyLoss",
        "torch.nn.functional.nll_loss",
        "torch.nn.NLLLoss",
    )

    def cases(self, gen):
        def case(description, shape, vocab, smoothing, ignore_index, pads=0.3, dtype=torch.float32):
            logits = 2.0 * randn(gen, *shape, vocab, dtype=dtype)
            target = torch.randint(0, vocab, shape, generator=gen)
            if pads:
                padded = torch.rand(shape, generator=gen) < pads
                padded.view(-1)[0] = True  # at least one ignored position
                padded.view(-1)[-1] = False  # and at least one real one
                target = target.masked_fill(padded, ignore_index)
            return Case(description, (logits, target, smoothing, ignore_index))

        return [
            case("logits (4, 7, 10), padded targets (pad id 0), smoothing 0.1", (4, 7), 10, 0.1, 0),
            case("logits (12, 5) (flattened positions), no padding, ignore_index -100",
                 (12,), 5, 0.1, -100, pads=0),
            case("smoothing 0 (plain cross-entropy), logits (3, 6, 8), pad id 2",
                 (3, 6), 8, 0.0, 2),
            case("float64 logits (2, 9, 12), half of the targets padded, smoothing 0.25",
                 (2, 9), 12, 0.25, 0, pads=0.5, dtype=torch.float64),
            case("logits (5, 4, 7), pad id 6 (not 0), smoothing 0.1", (5, 4), 7, 0.1, 6),
            case("logits (3, 5, 9), padded targets with ignore_index -100 (F.cross_entropy's "
                 "default, not a valid id: replace the ignored targets by a valid id before "
                 "gathering, then leave them out)",
                 (3, 5), 9, 0.1, -100),
            Case("a logit 120 below the others, float32: softmax gives it probability 0, so "
                 "log(softmax) is -inf there; log_softmax stays finite",
                 (torch.tensor([[0.0, -120.0, 0.0], [0.0, 0.0, 0.0]]), torch.tensor([1, 0]),
                  0.1, -100)),
            # log_softmax by hand without the maximum subtracted (or with the whole tensor's
            # maximum) passed every case above: no logit was past float32's exp range
            Case("float32 logits with a 200 in the first position: exp(200) overflows to inf; "
                 "log_softmax (or each position's own maximum subtracted before exp) stays "
                 "finite",
                 (torch.tensor([[200.0, 0.0, 0.0, 1.0], [0.0, 2.0, 0.0, 0.0],
                                [1.0, 0.0, 200.0, 3.0]]),
                  torch.tensor([0, 1, 3]), 0.1, -100)),
            # a mask (or anything else) kept between calls, keyed by the shape, passed every
            # case above: no two had the same shape
            case(_AGAIN, (4, 7), 10, 0.1, 0),
        ]  # fmt: skip

    def diagnose(self, got, want, case):  # the right value, a gradient that differs: a detach
        if isinstance(got, tuple) and compare_values(got[0], want[0]) is None:
            return MISTAKES["smoothing_detached"]
        return _KEPT if case.description == _AGAIN else None

    def call(self, obj, case):
        logits, target, _, ignore_index = case.args
        logits.requires_grad_(True)  # the case's own copy: the loss must carry a gradient
        try:
            loss = obj(*case.args, **case.kwargs)
        except (IndexError, RuntimeError) as error:
            if "must match the size of tensor" in str(error):
                raise GradingError(
                    f"your code raised {type(error).__name__}: {error}. Hint: {_SHAPE_HINT}"
                ) from None
            ignored = bool((target == ignore_index).any())
            if isinstance(error, NotImplementedError) or 0 <= ignore_index < logits.shape[-1]:
                raise
            if not ignored:  # nothing to ignore in this case: the error has another cause
                raise
            raise GradingError(
                f"your code raised {type(error).__name__}: {error}. Hint: {_IGNORE_HINT}"
            ) from None
        if isinstance(loss, torch.Tensor) and not loss.requires_grad:
            raise GradingError(
                "your loss carries no gradient (it was computed under torch.no_grad(), "
                "detached, or rebuilt from plain numbers): backward() in the training step "
                "needs it, so compute it from the logits with tensor operations only"
            )
        if not isinstance(loss, torch.Tensor) or not loss.requires_grad:
            return loss, None
        return loss, torch.autograd.grad(loss.sum(), logits, allow_unused=True)[0]

    def compare(self, got, want, case):
        """The loss first (as before), then its gradient with respect to the logits."""
        got, got_grad = got if isinstance(got, tuple) else (got, None)
        if getattr(got, "dtype", None) == torch.float32 and want[0].dtype == torch.float64:
            return (  # the generic dtype hint speaks of tensors created without dtype=
                "your loss is float32 on float64 logits: compute it in the logits' dtype, "
                "with no .float() on the logits or the log-probabilities (and dtype=logits.dtype "
                "for a tensor you create)"
            )
        return compare_values(got, want[0]) or compare_values(
            got_grad, want[1], "your loss has the right value, but its gradient"
        )
