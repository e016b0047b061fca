"""ex08, training an encoder-decoder: the warm-up schedule, label smoothing, teacher forcing's
shifted input and greedy decoding over a step function."""

from __future__ import annotations

import torch

from ..core import Case, GradingError, Task, compare_values, register
from .common import randn

# --------------------------------------------------------------------------------------------
# ex08.noam_lr
# --------------------------------------------------------------------------------------------


def _steps_for(warmup: int) -> list[int]:
    """Steps on both sides of the peak: early warm-up, just before/at/after warmup, the decay."""
    return sorted(
        {
            1,
            2,
            max(1, warmup // 2),
            max(1, warmup - 1),
            warmup,
            warmup + 1,
            3 * warmup,
            10 * warmup + 7,
        }
    )


@register
class NoamLr(Task):
    id = "ex08.noam_lr"
    lesson = "lesson 08, section 'The warm-up schedule'"
    reference = "course_lib.train.noam_lr"

    def cases(self, gen):
        return [
            Case(
                f"d_model={d_model}, warmup={warmup}, steps {_steps_for(warmup)}",
                data={"steps": _steps_for(warmup), "d_model": d_model, "warmup": warmup},
            )
            for d_model, warmup in ((512, 4000), (128, 100), (64, 1), (256, 30))
        ]

    def call(self, obj, case):
        d_model, warmup = case.data["d_model"], case.data["warmup"]
        values = []
        for step in case.data["steps"]:
            value = obj(step, d_model, warmup)
            values.append(float(value) if isinstance(value, torch.Tensor) else value)
        return values

    def compare(self, got, want, case):
        message = compare_values(got, want, "your learning rates")
        if message is None:
            return None
        if not isinstance(got, list) or len(got) != len(want):
            return message
        for step, g, w in zip(case.data["steps"], got, want, strict=True):
            if compare_values(g, w) is not None:
                shown = f"{g:.6g}" if isinstance(g, (int, float)) else repr(g)
                return f"at step {step} your learning rate is {shown}, expected {w:.6g}"
        return message

    def mistakes(self):
        return [
            (
                lambda step, d_model, warmup: d_model**-0.5 * step**-0.5,
                "you left out the warm-up: take the min of step^-0.5 (decay) and "
                "step * warmup^-1.5 (linear rise)",
            ),
            (
                lambda step, d_model, warmup: d_model**-0.5 * step * warmup**-1.5,
                "you left out the decay: take the min of step^-0.5 and step * warmup^-1.5",
            ),
            (
                lambda step, d_model, warmup: d_model**-0.5 * max(step**-0.5, step * warmup**-1.5),
                "that is the max of the two terms; the schedule is their min",
            ),
            (
                lambda step, d_model, warmup: d_model**-0.5 * min(step**-0.5, step * warmup**-0.5),
                "wrong exponent on warmup: the rising branch is step * warmup^-1.5, so that both "
                "branches meet at step = warmup",
            ),
            (
                lambda step, d_model, warmup: d_model**0.5 * min(step**-0.5, step * warmup**-1.5),
                "wrong exponent on d_model: the factor is d_model^-0.5 (bigger models, smaller "
                "steps)",
            ),
            (
                lambda step, d_model, warmup: d_model**-0.5 * min(step**-1.0, step * warmup**-1.5),
                "wrong exponent on step: after the warm-up the rate decays as step^-0.5, not "
                "1/step",
            ),
        ]


# --------------------------------------------------------------------------------------------
# ex08.label_smoothing_loss
# --------------------------------------------------------------------------------------------


def _per_token(logits, target, smoothing, ignore_index, spread=None):
    vocab = logits.shape[-1]
    if spread == "sum":  # smoothing times the SUM of -log p over the vocabulary
        log_probs = torch.log_softmax(logits, dim=-1)
        safe = target.masked_fill(target == ignore_index, 0)
        nll = -log_probs.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
        return (1 - smoothing) * nll + smoothing * -log_probs.sum(dim=-1)
    log_probs = torch.log_softmax(logits, dim=-1)
    safe = target.masked_fill(target == ignore_index, 0)
    nll = -log_probs.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    if spread is None:  # smoothing / vocab on every class (F.cross_entropy's convention)
        uniform = -log_probs.mean(dim=-1)
        return (1 - smoothing) * nll + smoothing * uniform
    # smoothing / (vocab - 1) on every class but the correct one
    others = (-log_probs.sum(dim=-1) - nll) / (vocab - 1)
    return (1 - smoothing) * nll + smoothing * others


def _ls_pads_counted(logits, target, smoothing, ignore_index):
    return _per_token(logits, target, smoothing, ignore_index).mean()


def _ls_wrong_count(logits, target, smoothing, ignore_index):
    per = _per_token(logits, target, smoothing, ignore_index)
    return per.masked_fill(target == ignore_index, 0).sum() / target.numel()


def _ls_batch_count(logits, target, smoothing, ignore_index):
    per = _per_token(logits, target, smoothing, ignore_index)
    return per.masked_fill(target == ignore_index, 0).sum() / target.shape[0]


def _ls_sum(logits, target, smoothing, ignore_index):
    per = _per_token(logits, target, smoothing, ignore_index)
    return per.masked_fill(target == ignore_index, 0).sum()


def _ls_other_classes(logits, target, smoothing, ignore_index):
    per = _per_token(logits, target, smoothing, ignore_index, spread="others")
    keep = target != ignore_index
    return per.masked_fill(~keep, 0).sum() / keep.sum()


def _ls_vocab_sum(logits, target, smoothing, ignore_index):
    per = _per_token(logits, target, smoothing, ignore_index, spread="sum")
    keep = target != ignore_index
    return per.masked_fill(~keep, 0).sum() / keep.sum()


def _ls_pad_zero(logits, target, smoothing, ignore_index):
    return _ls_right(logits, target, smoothing, 0)


def _ls_last_dim_two(logits, target, smoothing, ignore_index):
    torch.log_softmax(logits, dim=2)  # written for (batch, seq, vocab) logits only
    return _ls_right(logits, target, smoothing, ignore_index)


def _ls_right(logits, target, smoothing, ignore_index):
    per = _per_token(logits, target, smoothing, ignore_index)
    keep = target != ignore_index
    return per.masked_fill(~keep, 0).sum() / keep.sum()


def _ls_no_smoothing(logits, target, smoothing, ignore_index):
    return _ls_other_classes(logits, target, 0.0, ignore_index)


def _ls_probs_not_log(logits, target, smoothing, ignore_index):
    probs = torch.softmax(logits, dim=-1)
    keep = target != ignore_index
    safe = target.masked_fill(~keep, 0)
    picked = probs.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    per = (1 - smoothing) * -picked + smoothing * -probs.mean(dim=-1)
    return per.masked_fill(~keep, 0).sum() / keep.sum()


_IGNORE_HINT = (
    "ignore_index need not be a class id (F.cross_entropy's default is -100): "
    "replace the ignored targets by a valid id (e.g. target.masked_fill(~keep, 0)) "
    "before gather, then leave those positions out"
)


@register
class LabelSmoothingLoss(Task):
    id = "ex08.label_smoothing_loss"
    lesson = "lesson 08, section 'Label smoothing'"
    reference = "course_lib.train.label_smoothing_loss"
    forbidden = (
        "torch.nn.functional.cross_entropy",
        "torch.nn.CrossEntropyLoss",
        "torch.nn.functional.nll_loss",
        "torch.nn.NLLLoss",
    )

    def cases(self, gen):
        def case(
            description,
            shape,
            vocab,
            smoothing,
            ignore_index,
            pad_fraction=0.3,
            dtype=torch.float32,
        ):
            logits = 2.0 * randn(gen, *shape, vocab, dtype=dtype)
            target = torch.randint(0, vocab, shape, generator=gen)
            if pad_fraction:
                pads = torch.rand(shape, generator=gen) < pad_fraction
                pads.view(-1)[0] = True  # at least one ignored position
                pads.view(-1)[-1] = False  # and at least one real one
                target = target.masked_fill(pads, ignore_index)
            return Case(description, (logits, target, smoothing, ignore_index))

        return [
            case("logits (4, 7, 10), padded targets (pad id 0), smoothing 0.1", (4, 7), 10, 0.1, 0),
            case(
                "logits (12, 5) (flattened positions), no padding, ignore_index -100",
                (12,),
                5,
                0.1,
                -100,
                pad_fraction=0,
            ),
            case(
                "smoothing 0 (plain cross-entropy), logits (3, 6, 8), pad id 2", (3, 6), 8, 0.0, 2
            ),
            case(
                "float64 logits (2, 9, 12), half of the targets padded, smoothing 0.25",
                (2, 9),
                12,
                0.25,
                0,
                pad_fraction=0.5,
                dtype=torch.float64,
            ),
            case("logits (5, 4, 7), pad id 6 (not 0), smoothing 0.1", (5, 4), 7, 0.1, 6),
            case(
                "logits (3, 5, 9), padded targets with ignore_index -100 (F.cross_entropy's "
                "default, not a valid id: replace the ignored targets by a valid id before "
                "gathering, then leave them out)",
                (3, 5),
                9,
                0.1,
                -100,
            ),
        ]

    def call(self, obj, case):
        logits, target, _, ignore_index = case.args
        logits.requires_grad_(True)  # the case's own copy: the loss must carry a gradient
        try:
            loss = obj(*case.args, **case.kwargs)
        except (IndexError, RuntimeError) as error:
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
        return loss

    def mistakes(self):
        return [
            (
                _ls_pads_counted,
                "you counted the padded positions: their loss must be left out, and the mean taken "
                "over the real tokens only (target != ignore_index)",
            ),
            (
                _ls_wrong_count,
                "you zeroed the padded positions but divided by all positions; divide by the "
                "number of real tokens (target != ignore_index).sum()",
            ),
            (
                _ls_batch_count,
                "you divided by the batch size; the mean is over the real tokens, "
                "(target != ignore_index).sum()",
            ),
            (_ls_sum, "that is the sum; the loss is the mean over the real tokens"),
            (
                _ls_other_classes,
                "you spread the smoothing over the vocab - 1 wrong classes; F.cross_entropy "
                "spreads smoothing / vocab over every class, the correct one included",
            ),
            (
                _ls_no_smoothing,
                "the smoothing is missing: mix in smoothing * the mean of "
                "-log p over the whole vocabulary",
            ),
            (_ls_probs_not_log, "use log-probabilities (log_softmax), not probabilities"),
            (
                _ls_vocab_sum,
                "the smoothing term is the MEAN of -log p over the vocabulary (smoothing / vocab "
                "on every class), not its sum",
            ),
            (
                _ls_pad_zero,
                "use the ignore_index argument: the padding id is not always 0",
            ),
            (
                _ls_last_dim_two,
                "the logits may be (positions, vocab) as well as (batch, seq, vocab): take "
                "log_softmax over dim=-1, the last axis, whatever the number of axes",
            ),
        ]


# --------------------------------------------------------------------------------------------
# ex08.shift_right
# --------------------------------------------------------------------------------------------


@register
class ShiftRight(Task):
    id = "ex08.shift_right"
    lesson = "lesson 08, section 'Teacher forcing and shifted targets'"
    reference = "course_lib.train.shift_right"

    def cases(self, gen):
        def ids(*shape, high=20, dtype=torch.long):
            return torch.randint(3, high, shape, generator=gen).to(dtype)

        return [
            Case("targets (2, 5), bos_id 1", (ids(2, 5), 1)),
            Case(
                "targets (4, 11) ending in <eos>=2 and padding 0, bos_id 1",
                (torch.cat([ids(4, 8), torch.tensor([[2, 0, 0]] * 4)], dim=1), 1),
            ),
            Case("targets (3, 1), a single token", (ids(3, 1), 1)),
            Case("targets (1, 6), bos_id 7", (ids(1, 6), 7)),
            Case(
                "int32 targets (2, 4), bos_id 0 (keep the dtype)", (ids(2, 4, dtype=torch.int32), 0)
            ),
        ]

    def mistakes(self):
        def bos_first(targets, bos_id):
            return torch.full_like(targets[:, :1], bos_id)

        return [
            (
                lambda t, b: torch.cat([bos_first(t, b), t[:, 1:]], dim=1),
                "you dropped the first target token; drop the LAST one: <bos> followed by "
                "targets[:, :-1]",
            ),
            (
                lambda t, b: torch.cat([t[:, 1:], bos_first(t, b)], dim=1),
                "that shifts left; the decoder input starts with <bos>: <bos> then targets[:, :-1]",
            ),
            (
                lambda t, b: torch.cat([t[:, :-1], bos_first(t, b)], dim=1),
                "<bos> goes at the start, not the end: <bos> then targets[:, :-1]",
            ),
            (
                lambda t, b: torch.cat([bos_first(t, b), t], dim=1),
                "the decoder input has the same length as the targets: drop the last target token",
            ),
            (
                lambda t, b: t[:, :-1],
                "the decoder input starts with <bos> and has the same length as the targets",
            ),
            (
                lambda t, b: torch.cat([bos_first(t, 1), t[:, :-1]], dim=1),
                "use the bos_id argument: <bos> is not always 1",
            ),
            (
                lambda t, b: t.roll(1, dims=1),
                "torch.roll moves the last target token to the front: put <bos> there instead "
                "(torch.cat of a column of bos_id and targets[:, :-1])",
            ),
        ]


# --------------------------------------------------------------------------------------------
# ex08.greedy_decode
# --------------------------------------------------------------------------------------------


class TableStepFn:
    """A stand-in model for grading: the next token's logits are read from a random table
    indexed by (row, position, last token), so the result depends on the whole history."""

    def __init__(self, table: torch.Tensor, bos_id: int):
        self.table, self.bos_id = table, bos_id  # table (batch, max_new_tokens, vocab, vocab)

    def __call__(self, prefix):
        if not isinstance(prefix, torch.Tensor) or prefix.dim() != 2:
            raise ValueError(
                "step_fn expects prefix as a (batch, t) tensor of token ids, got "
                f"{getattr(prefix, 'shape', type(prefix).__name__)}"
            )
        batch, t = prefix.shape
        if batch != self.table.shape[0]:
            raise ValueError(
                f"step_fn expects a prefix with batch={self.table.shape[0]} rows, got {batch}"
            )
        if t > self.table.shape[1]:
            raise ValueError(
                f"step_fn got a prefix of length {t}, more than <bos> + max_new_tokens "
                f"tokens: stop after max_new_tokens steps"
            )
        if (prefix[:, 0] != self.bos_id).any():
            raise ValueError(f"every prefix must start with <bos> (id {self.bos_id})")
        vocab = self.table.shape[-1]
        if prefix.min() < 0 or prefix.max() >= vocab:
            raise ValueError(f"the prefix holds token ids outside the vocabulary [0, {vocab})")
        prefix = prefix.long()
        rows = torch.arange(batch).unsqueeze(1)  # (batch, 1)
        positions = torch.arange(t).unsqueeze(0)  # (1, t)
        return self.table[rows, positions, prefix]  # (batch, t, vocab)


def _greedy_no_stop(step_fn, batch_size, bos_id, eos_id, max_new_tokens):
    prefix = torch.full((batch_size, 1), bos_id, dtype=torch.long)
    for _ in range(max_new_tokens):
        token = step_fn(prefix)[:, -1].argmax(dim=-1)
        prefix = torch.cat([prefix, token[:, None]], dim=1)
    return prefix[:, 1:]


def _greedy_variant(pick, keep_bos=False, pad=True):
    def greedy(step_fn, batch_size, bos_id, eos_id, max_new_tokens):
        prefix = torch.full((batch_size, 1), bos_id, dtype=torch.long)
        done = torch.zeros(batch_size, dtype=torch.bool)
        for _ in range(max_new_tokens):
            if done.all():
                break
            token = pick(step_fn(prefix)).masked_fill(done, eos_id)
            prefix = torch.cat([prefix, token[:, None]], dim=1)
            done |= token == eos_id
        out = prefix if keep_bos else prefix[:, 1:]
        if pad:
            fill = torch.full((batch_size, max_new_tokens - prefix.shape[1] + 1), eos_id)
            out = torch.cat([out, fill], dim=1)
        return out

    return greedy


_GREEDY_NO_STOP_HINT = (
    "a row that has produced eos_id is finished: it must keep emitting eos_id (force it with "
    "masked_fill on a `finished` mask) instead of what the model says next"
)


@register
class GreedyDecode(Task):
    id = "ex08.greedy_decode"
    lesson = "lesson 08, section 'Greedy decoding and beam search'"
    reference = "course_lib.decoding.greedy_decode"

    def cases(self, gen):
        def case(
            description,
            batch,
            vocab,
            max_new_tokens,
            bos_id=1,
            eos_id=2,
            eos_bias=0.0,
            dtype=torch.float32,
        ):
            table = randn(gen, batch, max_new_tokens + 1, vocab, vocab, dtype=dtype)
            table[..., eos_id] += eos_bias
            table[:, :, eos_id, eos_id] -= 3.0  # after <eos> the table prefers other tokens
            return Case(
                description,
                data={
                    "table": table,
                    "batch_size": batch,
                    "bos_id": bos_id,
                    "eos_id": eos_id,
                    "max_new_tokens": max_new_tokens,
                },
            )

        return [
            case(
                "batch 4, vocab 12, max_new_tokens 8: rows end at different steps",
                4,
                12,
                8,
                eos_bias=1.0,
            ),
            case(
                "batch 6, vocab 13, max_new_tokens 10, bos 0 and eos 5",
                6,
                13,
                10,
                bos_id=0,
                eos_id=5,
                eos_bias=1.5,
            ),
            case(
                "batch 3, vocab 8, max_new_tokens 6: <eos> is never chosen",
                3,
                8,
                6,
                eos_bias=-100.0,
            ),
            case(
                "batch 5, vocab 15, max_new_tokens 12: every row ends early",
                5,
                15,
                12,
                eos_bias=4.0,
            ),
            case(
                "float64 logits, batch 2, vocab 8, max_new_tokens 5",
                2,
                8,
                5,
                eos_bias=1.0,
                dtype=torch.float64,
            ),
            case("batch 1, vocab 6, max_new_tokens 1", 1, 6, 1),
        ]

    def call(self, obj, case):
        d = case.data
        step_fn = TableStepFn(d["table"], d["bos_id"])
        return obj(step_fn, d["batch_size"], d["bos_id"], d["eos_id"], d["max_new_tokens"])

    def compare(self, got, want, case):
        if isinstance(got, torch.Tensor) and got.dtype in (torch.int32, torch.int16):
            return "your tokens should be a long (int64) tensor, got " + str(got.dtype)[6:]
        return compare_values(got, want, "your tokens")

    def mistakes(self):
        return [
            (_greedy_no_stop, _GREEDY_NO_STOP_HINT),
            (
                _greedy_variant(lambda logits: logits.argmax(dim=1)[:, -1]),
                "argmax over the wrong axis: pick the most likely token over the vocabulary, "
                "logits[:, -1].argmax(dim=-1)",
            ),
            (
                _greedy_variant(lambda logits: logits[:, 0].argmax(dim=-1)),
                "you used the logits of the first position; the next token is predicted by the "
                "last one, logits[:, -1]",
            ),
            (
                _greedy_variant(lambda logits: logits[:, -1].argmax(dim=-1), keep_bos=True),
                "return the generated tokens without the leading <bos> "
                "(shape (batch, max_new_tokens))",
            ),
            (
                _greedy_variant(lambda logits: logits[:, -1].argmax(dim=-1), pad=False),
                "when every row finishes early, fill the remaining positions with eos_id so that "
                "the result is (batch, max_new_tokens)",
            ),
        ]


# --------------------------------------------------------------------------------------------
# ex08.train_step (transfer: the lesson imports its training loop; here the learner writes it)
# --------------------------------------------------------------------------------------------

_SEQ2SEQ = {
    "vocab_size": 12,
    "d_model": 16,
    "num_heads": 2,
    "num_encoder_layers": 1,
    "num_decoder_layers": 1,
    "d_ff": 24,
}


def _wrong_step(
    model, optimizer, scheduler, src, tgt, bos_id, pad_id, smoothing=0.1, clip=1.0, *, mistake=""
):
    import torch.nn.functional as F

    if mistake == "unshifted":
        tgt_in = tgt
    elif mistake == "shift_drops_first":
        tgt_in = torch.cat([torch.full_like(tgt[:, :1], bos_id), tgt[:, 1:]], dim=1)
    else:
        first = pad_id if mistake == "shift_with_pad" else bos_id
        tgt_in = torch.cat([torch.full_like(tgt[:, :1], first), tgt[:, :-1]], dim=1)
    logits = model(src, tgt_in)
    ignore = -100 if mistake == "pads_in_loss" else pad_id
    smooth = 0.0 if mistake == "no_smoothing" else smoothing
    labels = tgt_in if mistake == "scored_on_input" else tgt
    loss = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),
        labels.reshape(-1),
        ignore_index=ignore,
        label_smoothing=smooth,
    )
    if mistake not in ("no_zero_grad", "zero_after_backward"):
        optimizer.zero_grad()
    loss.backward()
    if mistake == "zero_after_backward":
        optimizer.zero_grad()
    if mistake == "clip_per_parameter":
        for p in model.parameters():
            torch.nn.utils.clip_grad_norm_([p], clip)
    elif mistake != "no_clip":
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0 if mistake == "clip_1" else clip)
    if scheduler is not None and mistake == "schedule_first":
        scheduler.step()
    optimizer.step()
    if scheduler is not None and mistake not in ("no_schedule", "schedule_first"):
        scheduler.step()
    return loss.item()


def _mistake(name):
    def wrong(model, optimizer, scheduler, src, tgt, bos_id, pad_id, smoothing=0.1, clip=1.0):
        return _wrong_step(
            model, optimizer, scheduler, src, tgt, bos_id, pad_id, smoothing, clip, mistake=name
        )

    wrong.__name__ = f"train_step_{name}"
    return wrong


def _seq2seq_batch(gen, lengths_src, lengths_tgt, bos_id, eos_id, pad_id):
    """src (batch, max src len), tgt (batch, max tgt len + 1) ending in <eos>, padded."""
    vocab = _SEQ2SEQ["vocab_size"]
    special = {bos_id, eos_id, pad_id}
    ordinary = torch.tensor([i for i in range(vocab) if i not in special])

    def rows(lengths, eos):
        width = max(lengths) + (1 if eos else 0)
        out = torch.full((len(lengths), width), pad_id, dtype=torch.long)
        for r, n in enumerate(lengths):
            out[r, :n] = ordinary[torch.randint(len(ordinary), (n,), generator=gen)]
            if eos:
                out[r, n] = eos_id
        return out

    return rows(lengths_src, False), rows(lengths_tgt, True)


class _SGD:
    """SGD with momentum 0.9, duck-typed like torch.optim.SGD (zero_grad, step, param_groups).

    torch.optim.Optimizer's first construction in a process imports torch._dynamo (seconds);
    the grader builds a fresh optimizer for every case, so it uses this small stand-in.
    """

    def __init__(self, params, lr: float):
        self.param_groups = [{"params": list(params), "lr": lr}]
        self._velocity: dict[int, torch.Tensor] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.param_groups[0]["params"]:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        group = self.param_groups[0]
        for p in group["params"]:
            if p.grad is None:
                continue
            v = self._velocity.get(id(p))
            v = p.grad.clone() if v is None else v.mul_(0.9).add_(p.grad)
            self._velocity[id(p)] = v
            p.add_(v, alpha=-group["lr"])


class _InverseSchedule:
    """Like LambdaLR(optimizer, lambda i: 1 / (i + 1)): step() moves the rate to the next step."""

    def __init__(self, optimizer: _SGD, base_lr: float):
        self.optimizer, self.base_lr, self.count = optimizer, base_lr, 0

    def step(self) -> None:
        self.count += 1
        self.optimizer.param_groups[0]["lr"] = self.base_lr / (self.count + 1)


@register
class TrainStep(Task):
    id = "ex08.train_step"
    lesson = "lesson 08, sections 'Teacher forcing and shifted targets' and 'The training loop'"
    reference = "course_lib.train.train_step"
    depends_on = ("shift_right", "label_smoothing_loss")
    forbidden = ("course_lib.train.train",)

    def cases(self, gen):
        from ...translator import Seq2SeqTransformer

        def case(
            description,
            batches,
            *,
            bos_id=1,
            eos_id=2,
            pad_id=0,
            smoothing=0.1,
            clip=0.5,
            schedule=True,
            stale=False,
            dtype=torch.float64,
        ):
            seed = int(torch.randint(0, 2**31 - 1, (1,), generator=gen))
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                model = Seq2SeqTransformer(**_SEQ2SEQ, pad_id=pad_id)
            state = {
                k: v.to(dtype) if v.is_floating_point() else v
                for k, v in model.state_dict().items()
            }
            data = {
                "state": state,
                "pad_id": pad_id,
                "dtype": dtype,
                "schedule": schedule,
                "kwargs": {
                    "bos_id": bos_id,
                    "pad_id": pad_id,
                    "smoothing": smoothing,
                    "clip": clip,
                },
                "batches": [_seq2seq_batch(gen, s, t, bos_id, eos_id, pad_id) for s, t in batches],
            }
            if stale:  # gradients left over from an earlier backward pass
                data["stale"] = [randn(gen, *v.shape, dtype=dtype) for v in model.parameters()]
            return Case(description, data=data)

        return [
            case(
                "one step, batch 3, targets of lengths [4, 2, 5] padded with pad_id=0, "
                "smoothing 0.1, clip 0.5",
                [([5, 3, 4], [4, 2, 5])],
            ),
            case(
                "two steps in a row on two batches (batch 2 then batch 4): the second step "
                "must not reuse the first step's gradients",
                [([3, 4], [3, 1]), ([2, 5, 5, 1], [4, 4, 2, 3])],
            ),
            case(
                "one step on a model that arrives with gradients left over from an earlier "
                "backward pass",
                [([4, 2], [3, 5])],
                stale=True,
            ),
            case(
                "scheduler=None (no schedule to step), batch 2", [([4, 4], [2, 3])], schedule=False
            ),
            case(
                "smoothing 0.0 and clip 1e6 (clipping never acts), batch 3",
                [([3, 3, 2], [4, 1, 3])],
                smoothing=0.0,
                clip=1e6,
            ),
            case(
                "batch 1 without padding, bos_id=3, eos_id=4, pad_id=5, smoothing 0.2, clip 0.2",
                [([4], [3])],
                bos_id=3,
                eos_id=4,
                pad_id=5,
                smoothing=0.2,
                clip=0.2,
            ),
            case(
                "float32 model, three steps, batch 2, clip 1.0",
                [([3, 2], [2, 3]), ([4, 1], [1, 4]), ([2, 2], [3, 3])],
                clip=1.0,
                dtype=torch.float32,
            ),
        ]

    def call(self, obj, case):
        from ...translator import Seq2SeqTransformer

        d = case.data
        model = Seq2SeqTransformer(**_SEQ2SEQ, pad_id=d["pad_id"]).to(d["dtype"])
        model.load_state_dict(d["state"])
        for p, g in zip(model.parameters(), d.get("stale", []), strict=False):
            p.grad = g.clone()
        optimizer = _SGD(model.parameters(), lr=0.1)
        scheduler = _InverseSchedule(optimizer, 0.1) if d["schedule"] else None
        losses = [
            obj(model, optimizer, scheduler, src, tgt, **d["kwargs"]) for src, tgt in d["batches"]
        ]
        if not model.training:
            raise GradingError(
                "your train_step leaves the model in eval mode: a training step runs the model "
                "with model.train() (dropout on); keep model.eval() for evaluation"
            )
        params = torch.cat([p.detach().flatten() for p in model.parameters()])
        return losses, params, float(optimizer.param_groups[0]["lr"])

    def compare(self, got, want, case):
        losses, params, lr = got
        if not all(isinstance(x, float) for x in losses):
            kinds = ", ".join(
                sorted(
                    {
                        type(x).__name__ if not isinstance(x, dict) else x.get("__repr__", "?")
                        for x in losses
                    }
                )
            )
            return (
                f"train_step should return the loss as a Python float, got {kinds} (use "
                "loss.item())"
            )
        rel = 1e-5 if case.data["dtype"] == torch.float32 else 1e-9
        for step, (g, w) in enumerate(zip(losses, want[0], strict=True), start=1):
            if abs(g - w) > rel * max(1.0, abs(w)):
                return f"the loss returned by step {step} is {g:.6g}, expected {w:.6g}"
        message = compare_values(params, want[1], "the model's weights after your step(s)")
        if message:
            return message
        if abs(lr - want[2]) > 1e-12:
            return f"the learning rate after your step(s) is {lr:.6g}, expected {want[2]:.6g}"
        return None

    def mistakes(self):
        return [
            (
                _mistake("pads_in_loss"),
                "the padding positions count in your loss: pass "
                "ignore_index=pad_id so that only real target tokens are scored",
            ),
            (
                _mistake("unshifted"),
                "the decoder must read the targets shifted right "
                "(<bos> first, the last token dropped), shift_right(tgt, bos_id); fed tgt itself "
                "it sees the token it must predict",
            ),
            (
                _mistake("shift_drops_first"),
                "the shifted input drops the wrong end: it is <bos> followed by tgt[:, :-1]",
            ),
            (
                _mistake("no_zero_grad"),
                "gradients accumulate: call optimizer.zero_grad() "
                "before loss.backward(), or each step also applies the gradients of earlier ones",
            ),
            (
                _mistake("no_clip"),
                "the gradients are not clipped: call "
                "torch.nn.utils.clip_grad_norm_(model.parameters(), clip) after backward() and "
                "before optimizer.step()",
            ),
            (
                _mistake("no_schedule"),
                "the schedule never moves: call scheduler.step() after "
                "optimizer.step() (when scheduler is not None)",
            ),
            (
                _mistake("zero_after_backward"),
                "optimizer.zero_grad() after loss.backward() erases the gradients just computed, "
                "so the step changes nothing: call it before backward()",
            ),
            (
                _mistake("clip_1"),
                "use the clip argument as the largest gradient norm (1.0 is only its default)",
            ),
            (
                _mistake("clip_per_parameter"),
                "clip the norm of all the gradients together, "
                "clip_grad_norm_(model.parameters(), clip), not of each parameter on its own",
            ),
            (
                _mistake("schedule_first"),
                "scheduler.step() comes after optimizer.step(): stepped first, it gives this step "
                "the next step's learning rate",
            ),
            (
                _mistake("no_smoothing"),
                "the loss must use label smoothing with the given "
                "`smoothing` (label_smoothing=smoothing in F.cross_entropy, or your "
                "label_smoothing_loss)",
            ),
        ]


# --------------------------------------------------------------------------------------------
# Review 2026-11-23 (EX08-1, EX08-2), kept apart so that it merges with work on the cases above
# --------------------------------------------------------------------------------------------

from ..core import extend_task  # noqa: E402

_original_noam_call = NoamLr.call


def _noam_call_checks_the_type(self, obj, case):
    value = obj(1, case.data["d_model"], case.data["warmup"])
    if isinstance(value, torch.Tensor):
        raise GradingError(
            "noam_lr returns a tensor; the task asks for a Python float (use "
            "math and plain numbers, or float(...))"
        )
    return _original_noam_call(self, obj, case)


NoamLr.call = _noam_call_checks_the_type
extend_task(
    NoamLr,
    mistakes=[
        (
            lambda step, d_model, warmup: min(step**-0.5, step * warmup**-1.5),
            "the factor d_model^-0.5 is missing: lr = d_model^-0.5 * min(step^-0.5, "
            "step * warmup^-1.5)",
        ),
    ],
)


# --------------------------------------------------------------------------------------------
# Review 2026-11-25 (a fresh reader's single mistakes that got "more than one thing may be
# wrong"), kept apart like the block above
# --------------------------------------------------------------------------------------------


def _noam_one_step_ahead(step, d_model, warmup):  # counts the steps from 0
    return d_model**-0.5 * min((step + 1) ** -0.5, (step + 1) * warmup**-1.5)


def _noam_one_step_behind(step, d_model, warmup):  # step 1 becomes 0: 0 ** -0.5 raises
    return d_model**-0.5 * min((step - 1) ** -0.5, (step - 1) * warmup**-1.5)


def _noam_minus_one_half(step, d_model, warmup):  # x**-1/2 is (x**-1) / 2
    return d_model**-1 / 2 * min(step**-1 / 2, step * warmup**-3 / 2)


extend_task(
    NoamLr,
    mistakes=[
        (
            _noam_one_step_ahead,
            "your schedule is one step ahead: the steps count from 1 (the first step is "
            "step=1), so use step as it is given, not step + 1",
        ),
        (
            _noam_one_step_behind,
            "the steps already count from 1 (the first step is step=1): use step as it is "
            "given; step - 1 is 0 at the first step, and 0^-0.5 is infinite",
        ),
        (
            _noam_minus_one_half,
            "** binds tighter than /: x**-1/2 is (x**-1) / 2, not x^-0.5; write x**-0.5 and "
            "warmup**-1.5 (or x**(-1/2))",
        ),
    ],
)


def _ls_parts(logits, target, ignore_index):
    """log-probabilities, the kept positions, -log p of each target, -log p summed over V."""
    log_probs = torch.log_softmax(logits, dim=-1)
    keep = target != ignore_index
    safe = target.masked_fill(~keep, 0)
    nll = -log_probs.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    return log_probs, keep, nll, -log_probs.sum(dim=-1)


def _ls_mean_over_kept(per, keep):
    return per.masked_fill(~keep, 0).sum() / keep.sum()


def _ls_target_overwritten(logits, target, smoothing, ignore_index):
    # the target distribution filled with smoothing / V, then 1 - smoothing written over the
    # target's entry: the target loses its smoothing / V share
    _, keep, nll, total = _ls_parts(logits, target, ignore_index)
    vocab = logits.shape[-1]
    per = (1 - smoothing) * nll + smoothing / vocab * (total - nll)
    return _ls_mean_over_kept(per, keep)


def _ls_target_unweighted(logits, target, smoothing, ignore_index):
    _, keep, nll, total = _ls_parts(logits, target, ignore_index)
    return _ls_mean_over_kept(nll + smoothing * total / logits.shape[-1], keep)


def _ls_plus_log_probs(logits, target, smoothing, ignore_index):
    log_probs, keep, nll, _ = _ls_parts(logits, target, ignore_index)
    return _ls_mean_over_kept((1 - smoothing) * nll + smoothing * log_probs.mean(dim=-1), keep)


def _ls_pads_in_smoothing_term(logits, target, smoothing, ignore_index):
    _, keep, nll, total = _ls_parts(logits, target, ignore_index)
    uniform = total / logits.shape[-1]
    summed = (1 - smoothing) * nll.masked_fill(~keep, 0).sum() + smoothing * uniform.sum()
    return summed / keep.sum()


def _ls_smoothed_probabilities(logits, target, smoothing, ignore_index):
    keep = target != ignore_index
    probs = torch.softmax(logits, dim=-1)
    picked = probs.gather(-1, target.masked_fill(~keep, 0).unsqueeze(-1)).squeeze(-1)
    per = -torch.log((1 - smoothing) * picked + smoothing / logits.shape[-1])
    return _ls_mean_over_kept(per, keep)


def _ls_log_softmax_dim_one(logits, target, smoothing, ignore_index):
    log_probs = torch.log_softmax(logits, dim=1)
    keep = target != ignore_index
    nll = -log_probs.gather(-1, target.masked_fill(~keep, 0).unsqueeze(-1)).squeeze(-1)
    per = (1 - smoothing) * nll - smoothing * log_probs.mean(dim=-1)
    return _ls_mean_over_kept(per, keep)


def _ls_mean_of_sequence_means(logits, target, smoothing, ignore_index):
    _, keep, nll, total = _ls_parts(logits, target, ignore_index)
    per = ((1 - smoothing) * nll + smoothing * total / logits.shape[-1]).masked_fill(~keep, 0)
    return (per.sum(dim=-1) / keep.sum(dim=-1).clamp_min(1)).mean()


extend_task(
    LabelSmoothingLoss,
    mistakes=[
        (
            _ls_target_overwritten,
            "the correct class gets its smoothing / vocab share too: the target distribution "
            "is smoothing / vocab on every class plus 1 - smoothing on the target (add it, do "
            "not write it over), so the smoothing term is smoothing * the mean of -log p over "
            "ALL the classes",
        ),
        (
            _ls_target_unweighted,
            "the target's -log p is weighted by 1 - smoothing: per position "
            "(1 - smoothing) * (-log p_target) + smoothing * mean(-log p)",
        ),
        (
            _ls_plus_log_probs,
            "mind the sign of the smoothing term: it is smoothing * the mean of -log p (a "
            "positive number), not of log p",
        ),
        (
            _ls_pads_in_smoothing_term,
            "the padded positions still count in the smoothing term: leave the whole loss of "
            "a position (both terms) out where target == ignore_index",
        ),
        (
            _ls_smoothed_probabilities,
            "you smoothed the model's probabilities (-log((1 - smoothing) p + smoothing / "
            "vocab)); label smoothing changes the TARGET distribution: (1 - smoothing) * "
            "(-log p_target) + smoothing * mean(-log p)",
        ),
        (
            _ls_log_softmax_dim_one,
            "log_softmax over dim=1 normalises over the positions when the logits are "
            "(batch, seq, vocab); take it over dim=-1, the vocabulary",
        ),
        (
            _ls_mean_of_sequence_means,
            "you averaged the loss of each sequence, then the sequences; the mean is over all "
            "the real tokens together (a longer sequence counts for more)",
        ),
    ],
)


def _bos_column(targets, bos_id):
    return torch.full_like(targets[:, :1], bos_id)


extend_task(
    ShiftRight,
    mistakes=[
        (
            lambda t, b: torch.cat([torch.zeros_like(t[:, :1]), t[:, :-1]], dim=1),
            "the first column is bos_id, not 0 (0 is often the padding id)",
        ),
        (
            lambda t, b: t.roll(1),
            "torch.roll moves the last target token to the front (without dims, of the "
            "flattened tensor: the previous row's last token); put <bos> there instead "
            "(torch.cat of a column of bos_id and targets[:, :-1])",
        ),
        (
            lambda t, b: torch.cat([torch.full_like(t[:1], b), t[:-1]], dim=0),
            "you shifted along the batch axis (dim 0); a sequence runs along dim 1: bos_id in "
            "the first column, then targets[:, :-1]",
        ),
    ],
)


def _greedy_wrong(step_fn, batch_size, bos_id, eos_id, max_new_tokens, *, mistake):
    prefix = torch.full((batch_size, 1), bos_id, dtype=torch.long)
    finished = torch.zeros(batch_size, dtype=torch.bool)
    for _ in range(max_new_tokens):
        if (mistake == "stop_at_any" and finished.any()) or (
            mistake in ("zero_fill", "not_forced") and finished.all()
        ):
            break
        chosen = step_fn(prefix)[:, -1].argmax(dim=-1)
        token = chosen.masked_fill(finished, 0 if mistake == "zero_after_eos" else eos_id)
        if mistake == "not_forced":  # finished rows tracked (to stop early), never forced
            token = chosen
        if mistake == "one_step_late":  # finished from the token already in the prefix
            finished = finished | (prefix[:, -1] == eos_id)
        prefix = torch.cat([prefix, token[:, None]], dim=1)
        if mistake == "released":  # from the model's choice alone, forgetting earlier eos
            finished = chosen == eos_id
        elif mistake != "one_step_late":
            finished = finished | (token == eos_id)
    tokens = prefix[:, 1:]
    fill = 0 if mistake == "zero_fill" else eos_id
    rest = torch.full((batch_size, max_new_tokens - tokens.shape[1]), fill, dtype=torch.long)
    return torch.cat([tokens, rest], dim=1)


def _greedy_mistake(name):
    def greedy(step_fn, batch_size, bos_id, eos_id, max_new_tokens):
        return _greedy_wrong(step_fn, batch_size, bos_id, eos_id, max_new_tokens, mistake=name)

    greedy.__name__ = f"greedy_{name}"
    return greedy


extend_task(
    GreedyDecode,
    mistakes=[
        # _greedy_no_stop with an early stop once every row has finished: another result
        # whenever every row finishes before max_new_tokens
        (_greedy_mistake("not_forced"), _GREEDY_NO_STOP_HINT),
        (
            _greedy_mistake("zero_after_eos"),
            "after its eos_id a finished row keeps emitting eos_id itself, not 0 (or a pad "
            "id): everything after the first eos_id is eos_id, masked_fill(finished, eos_id)",
        ),
        (
            _greedy_mistake("zero_fill"),
            "when you stop early, fill the remaining positions with eos_id, not 0: a finished "
            "row keeps emitting eos_id",
        ),
        (
            _greedy_mistake("one_step_late"),
            "a finished row got one more of the model's tokens after its eos_id before eos_id "
            "was forced: mark it finished from the token just chosen, finished | "
            "(next_token == eos_id), not from the token before it",
        ),
        (
            _greedy_mistake("released"),
            "a finished row went back to the model's tokens after one forced eos_id: once a "
            "row has produced eos_id it stays finished, so update the mask as finished | "
            "(next_token == eos_id) with the forced token, not from the model's choice alone",
        ),
        (
            _greedy_mistake("stop_at_any"),
            "you stopped as soon as ONE row finished; stop early only when every row is "
            "finished (finished.all()): the others still have tokens to produce",
        ),
    ],
)

extend_task(
    TrainStep,
    mistakes=[
        (
            _mistake("scored_on_input"),
            "you scored the logits against the decoder's input (the shifted targets); score "
            "them against tgt itself: position t reads <bos> tgt[:, :t] and must predict "
            "tgt[:, t]",
        ),
        (
            _mistake("shift_with_pad"),
            "the shifted decoder input starts with bos_id, not pad_id: shift_right(tgt, bos_id)",
        ),
    ],
)
