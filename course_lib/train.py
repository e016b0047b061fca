"""Training a Transformer (lesson 08; lesson 09 reuses the loop): the pieces around the model.

    shift_right           targets (batch, seq) -> decoder input <bos> t0 t1 ... (teacher forcing)
    label_smoothing_loss  cross-entropy against (1 - eps) * one-hot + eps / vocab, pads ignored
    lm_loss               a language model's next-token cross-entropy on a batch (lesson 09)
    perplexity            exp of that mean cross-entropy: "as unsure as a fair die with this
                          many faces" (`course_lib.sampling` names it too)
    evaluate_loss         that cross-entropy over a whole split, every token predicted once
    noam_lr               the warm-up schedule of "Attention Is All You Need":
                          lr = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
    noam_scheduler        that schedule as a torch LambdaLR (optimizer built with lr=1.0),
                          optionally with a linear cool-down to 0 over the end of a short run
    WarmupCosine          lesson 09's schedule: linear warm-up, then a cosine down to min_lr at
                          the end of a step or a time budget (WarmupLinear: a straight line)
    train                 a generic loop: batch -> loss_fn(model, batch) -> backward -> step,
                          with a tqdm progress bar, optional clipping, a step or time budget,
                          returning a `TrainHistory` (loss and learning rate per step)

`train` knows nothing about translation: `loss_fn(model, batch)` says what one step computes,
so the same loop trains lesson 08's encoder-decoder and lesson 09's GPT. It imports no model:
the GPT recipes (sizes, batch, optimizer and schedule of every GPT the course trains) are in
`course_lib.recipes`.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .validation import (
    check_flag,
    check_ids,
    check_logits_target,
    check_non_negative_int,
    check_number,
    check_positive_int,
    check_smoothing,
    check_tensor,
    check_token_id,
    is_number,
)

__all__ = [
    "noam_lr",
    "noam_scheduler",
    "cooldown_factor",
    "shift_right",
    "label_smoothing_loss",
    "smoothed_targets",
    "TrainHistory",
    "train",
    "train_step",
    "lm_loss",
    "perplexity",
    "evaluate_loss",
    "WarmupCosine",
    "WarmupLinear",
]


# --------------------------------------------------------------------------------------------
# The learning-rate schedule
# --------------------------------------------------------------------------------------------


def noam_lr(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """The learning rate at `step` (>= 1) of the original Transformer's schedule.

        lr = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)

    It rises linearly for `warmup` steps, peaks at step = warmup with
    factor / sqrt(d_model * warmup), then decays as 1 / sqrt(step).
    """
    check_positive_int(step, "step")
    check_positive_int(d_model, "d_model")
    check_positive_int(warmup, "warmup")
    factor = check_number(factor, "factor")
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def cooldown_factor(step: int, total_steps: int, cooldown: float) -> float:
    """1 until the last `cooldown` fraction of `total_steps`, then a linear fall to 0 at the end.

    The paper's schedule never reaches 0 (it was meant for 100,000 steps); a short run ends
    better when the last steps are small, so the weights settle instead of jittering.
    """
    check_positive_int(step, "step")
    check_positive_int(total_steps, "total_steps")
    if not is_number(cooldown) or not 0 <= cooldown <= 1:
        raise ValueError(f"cooldown must be a fraction in [0, 1], got {cooldown!r}")
    start = total_steps * (1.0 - cooldown)
    if step <= start:
        return 1.0
    return max(0.0, (total_steps - step + 1) / (total_steps - start + 1))


def noam_scheduler(
    optimizer: torch.optim.Optimizer,
    d_model: int,
    warmup: int,
    factor: float = 1.0,
    total_steps: int | None = None,
    cooldown: float = 0.0,
) -> torch.optim.lr_scheduler.LambdaLR:
    """A LambdaLR following `noam_lr`; build the optimizer with lr=1.0 (the lambda is the lr).

    Call `scheduler.step()` after every `optimizer.step()`: the first update uses step 1.
    With `total_steps` and `cooldown` > 0 the rate is also multiplied by `cooldown_factor`:
    the last `cooldown` fraction of the run falls linearly towards 0.
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(
            f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}"
        )
    noam_lr(1, d_model, warmup, factor)  # validates the arguments now, not at the first step
    if cooldown and total_steps is None:
        raise ValueError("cooldown needs total_steps, the length of the run")
    if total_steps is not None:
        cooldown_factor(1, total_steps, cooldown)

    def rate(index: int) -> float:
        step = index + 1
        lr = noam_lr(step, d_model, warmup, factor)
        if total_steps is not None and cooldown:
            lr *= cooldown_factor(min(step, total_steps), total_steps, cooldown)
        return lr

    return torch.optim.lr_scheduler.LambdaLR(optimizer, rate)


class WarmupCosine:
    """Learning rate: linear warm-up to max_lr over warmup_steps, then a cosine to min_lr.

    The cosine runs over total_steps, or over total_seconds of wall-clock time from the first
    step() (a schedule fitted to a time budget: it reaches min_lr when the time is up). Call
    step() after every optimizer step, as with a torch scheduler (`course_lib.train.train`
    does). `lr_at(progress)` is the curve itself, for plots.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        max_lr: float,
        min_lr: float,
        warmup_steps: int,
        total_steps: int | None = None,
        total_seconds: float | None = None,
    ):
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(
                f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}"
            )
        if not 0 <= min_lr <= max_lr:
            raise ValueError(f"need 0 <= min_lr <= max_lr, got min_lr={min_lr}, max_lr={max_lr}")
        check_non_negative_int(warmup_steps, "warmup_steps")
        if (total_steps is None) == (total_seconds is None):
            raise ValueError("give exactly one of total_steps and total_seconds")
        if total_steps is not None:
            check_positive_int(total_steps, "total_steps")
        elif not total_seconds > 0:
            raise ValueError(f"total_seconds must be positive, got {total_seconds!r}")
        self.optimizer, self.max_lr, self.min_lr = optimizer, max_lr, min_lr
        self.warmup_steps, self.total_steps, self.total_seconds = (
            warmup_steps,
            total_steps,
            total_seconds,
        )
        self.steps_done = 0
        self._start: float | None = None
        self._set(self.lr_now())

    def lr_at(self, progress: float) -> float:
        """The cosine part at progress in [0, 1]: max_lr at 0, min_lr at 1 and after."""
        progress = min(max(progress, 0.0), 1.0)
        return self.min_lr + 0.5 * (self.max_lr - self.min_lr) * (1 + math.cos(math.pi * progress))

    def lr_now(self) -> float:
        step = self.steps_done
        if step < self.warmup_steps:
            return self.max_lr * (step + 1) / self.warmup_steps
        if self.total_steps is not None:
            span = max(self.total_steps - self.warmup_steps, 1)
            return self.lr_at((step - self.warmup_steps) / span)
        elapsed = 0.0 if self._start is None else time.perf_counter() - self._start
        return self.lr_at(elapsed / self.total_seconds)

    def _set(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def step(self) -> None:
        if self._start is None:
            self._start = time.perf_counter()
        self.steps_done += 1
        self._set(self.lr_now())


class WarmupLinear(WarmupCosine):
    """The same warm-up, then a straight line down to min_lr (usually 0) instead of a cosine.

    On a short budget a straight line to zero spends more of the run at a useful learning rate
    than a cosine to a floor, and ends lower (lesson 09 measures it). Same arguments as
    `WarmupCosine`; `lr_at(progress)` is max_lr at 0 and min_lr at 1 and after.
    """

    def lr_at(self, progress: float) -> float:
        progress = min(max(progress, 0.0), 1.0)
        return self.max_lr + (self.min_lr - self.max_lr) * progress


# --------------------------------------------------------------------------------------------
# Teacher forcing and the loss
# --------------------------------------------------------------------------------------------


def shift_right(targets: Tensor, bos_id: int) -> Tensor:
    """targets (batch, seq) -> decoder input (batch, seq): `<bos>` then targets[:, :-1].

    With teacher forcing the decoder reads the correct previous tokens and predicts the next:
    input  <bos> 2  0  2  1     (shift_right(targets))
    target  2    0  2  1 <eos>  (targets)
    The last target token is dropped from the input: nothing comes after it to predict.
    """
    check_tensor(
        targets, "targets", ndim=2, shape_hint="(batch, seq)", dtype=(torch.int64, torch.int32)
    )
    check_token_id(bos_id, "bos_id", "the id of the <bos> token")
    bos = torch.full_like(targets[:, :1], bos_id)  # (batch, 1)
    return torch.cat([bos, targets[:, :-1]], dim=1)  # (batch, seq)


def smoothed_targets(target: Tensor, vocab_size: int, smoothing: float) -> Tensor:
    """target (...) -> the smoothed distribution (..., vocab_size), float32.

    Each row is (1 - smoothing) on the correct token plus smoothing / vocab_size everywhere
    (the convention of `F.cross_entropy(label_smoothing=)`): the correct token gets
    1 - smoothing + smoothing / vocab_size, every other token smoothing / vocab_size.
    """
    check_tensor(target, "target", shape_hint="(...)", dtype=(torch.int64, torch.int32))
    check_positive_int(vocab_size, "vocab_size")
    smoothing = check_smoothing(smoothing)
    if target.numel() and (target.min() < 0 or target.max() >= vocab_size):
        raise ValueError(f"target holds ids outside [0, {vocab_size}) (vocab_size={vocab_size})")
    one_hot = torch.nn.functional.one_hot(target.long(), vocab_size).float()  # (..., vocab)
    return (1.0 - smoothing) * one_hot + smoothing / vocab_size


def label_smoothing_loss(
    logits: Tensor, target: Tensor, smoothing: float = 0.1, ignore_index: int = -100
) -> Tensor:
    """Mean cross-entropy against label-smoothed targets, skipping positions equal to ignore_index.

    logits (..., vocab) and target (...) -> a scalar with the dtype of logits. Per position:
        (1 - smoothing) * (-log p[target]) + smoothing * mean over the vocab of (-log p[v]),
    averaged over the positions whose target is not `ignore_index` (usually the pad id).
    Equal to F.cross_entropy(logits.reshape(-1, vocab), target.reshape(-1),
    label_smoothing=smoothing, ignore_index=ignore_index); NaN when every position is ignored,
    as there.
    """
    check_logits_target(logits, target)
    smoothing = check_smoothing(smoothing)
    check_token_id(ignore_index, "ignore_index", "usually the pad id")
    vocab = logits.shape[-1]
    keep = target != ignore_index  # (...) True = a real token that counts
    if keep.any() and (target[keep].min() < 0 or target[keep].max() >= vocab):
        raise ValueError(
            f"target holds ids outside [0, {vocab}) that are not ignore_index={ignore_index}"
        )
    log_probs = torch.log_softmax(logits, dim=-1)  # (..., vocab)
    safe_target = target.long().masked_fill(~keep, 0)  # any valid id; these rows are dropped
    nll = -log_probs.gather(-1, safe_target.unsqueeze(-1)).squeeze(-1)  # (...)
    uniform = -log_probs.mean(dim=-1)  # (...) cross-entropy against the uniform distribution
    per_token = (1.0 - smoothing) * nll + smoothing * uniform  # (...)
    per_token = per_token.masked_fill(~keep, 0.0)
    return per_token.sum() / keep.sum().to(logits.dtype)  # mean over the real tokens only


def lm_loss(model: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
    """Mean next-token cross-entropy (nats) of `model` on a batch (x, y), both (batch, seq)."""
    x, y = batch
    logits = model(x)  # (batch, seq, vocab)
    check_logits_target(logits, y, "y", allow_empty=False)
    check_ids(y, "y", vocab_size=logits.shape[-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def perplexity(logits: Tensor, targets: Tensor) -> Tensor:
    """exp(mean cross-entropy): logits (..., vocab), targets (...) long -> a scalar tensor.

    The cross-entropy is in nats (natural log) and averaged over every position BEFORE the
    exponential; a model that spreads its probability evenly over V tokens has perplexity V.
    """
    check_logits_target(logits, targets, "targets", allow_empty=False)
    vocab = logits.shape[-1]
    if targets.min() < 0 or targets.max() >= vocab:
        raise ValueError(f"targets holds ids outside [0, {vocab}) (vocab={vocab})")
    log_probs = torch.log_softmax(logits, dim=-1)  # (..., vocab), natural log
    nll = -log_probs.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)  # (...)
    return torch.exp(nll.mean())


@torch.no_grad()
def evaluate_loss(model: nn.Module, ids: Tensor, block_size: int, batch_size: int = 64) -> float:
    """Mean cross-entropy in nats per character over ALL of `ids` (n,).

    The text is cut into consecutive windows of block_size + 1 tokens that overlap by one, so
    every token after the first is predicted exactly once, from the context of its window.
    """
    check_tensor(ids, "ids", ndim=1, shape_hint="(n,)", dtype=(torch.int64, torch.int32))
    check_positive_int(block_size, "block_size")
    check_positive_int(batch_size, "batch_size")
    context = getattr(getattr(model, "config", None), "block_size", None)
    if is_number(context) and block_size > context:
        raise ValueError(
            f"block_size={block_size} is longer than the model's context, block_size={context}: "
            f"evaluate with windows the model can read, block_size <= {context}"
        )
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    ids = ids.long().to(device)
    n_full = (len(ids) - 1) // block_size
    total, count = 0.0, 0
    full = ids[: n_full * block_size + 1]
    x_all = full[:-1].reshape(n_full, block_size)  # (windows, block_size)
    y_all = full[1:].reshape(n_full, block_size)
    for lo in range(0, n_full, batch_size):
        logits = model(x_all[lo : lo + batch_size])  # (b, block_size, vocab)
        total += F.cross_entropy(
            logits.flatten(0, 1), y_all[lo : lo + batch_size].flatten(), reduction="sum"
        ).item()
        count += y_all[lo : lo + batch_size].numel()
    rest = ids[n_full * block_size :]  # the last, shorter window
    if len(rest) > 1:
        logits = model(rest[:-1].unsqueeze(0))
        total += F.cross_entropy(logits[0], rest[1:], reduction="sum").item()
        count += len(rest) - 1
    model.train(was_training)
    return total / count


# --------------------------------------------------------------------------------------------
# The training loop
# --------------------------------------------------------------------------------------------


@dataclass
class TrainHistory:
    """What `train` records: one entry per optimizer step.

    losses[i] and lrs[i] are the loss and the learning rate of step i + 1; `seconds` is the
    wall-clock time of the whole loop and `stopped_by` says why it ended ("steps", "time",
    "data").
    """

    losses: list[float] = field(default_factory=list)
    lrs: list[float] = field(default_factory=list)
    grad_norms: list[float] = field(default_factory=list)
    seconds: float = 0.0
    stopped_by: str = ""

    @property
    def steps(self) -> int:
        return len(self.losses)

    def smoothed(self, window: int = 20) -> list[float]:
        """The losses averaged over a trailing window (a readable loss curve)."""
        check_positive_int(window, "window")
        out, total = [], 0.0
        for i, loss in enumerate(self.losses):
            total += loss
            if i >= window:
                total -= self.losses[i - window]
            out.append(total / min(i + 1, window))
        return out


def train(
    model: nn.Module,
    batches: Iterable,
    loss_fn: Callable[[nn.Module, object], Tensor],
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    steps: int | None = None,
    max_seconds: float | None = None,
    clip: float | None = None,
    log_every: int = 10,
    progress: bool = True,
    desc: str = "training",
) -> TrainHistory:
    """Train `model` and return its `TrainHistory`; the model is left in eval mode.

    Each step takes the next batch from `batches` (any iterable: a list, a generator, a
    DataLoader), computes `loss = loss_fn(model, batch)` (a scalar tensor), back-propagates,
    clips the gradient norm to `clip` if given, steps the optimizer, then the scheduler.
    The loop ends after `steps` steps, after `max_seconds` of wall-clock time, or when
    `batches` runs out, whichever comes first (at least one of steps/max_seconds or a finite
    iterable is needed). The progress bar shows the loss every `log_every` steps.
    A time budget makes the number of steps, and so the result, depend on the machine: use
    `steps` where a run must be reproducible.
    """
    from tqdm.auto import tqdm

    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if not callable(loss_fn):
        raise TypeError(
            f"loss_fn must be a function loss_fn(model, batch) -> scalar tensor, "
            f"got {type(loss_fn).__name__}"
        )
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(
            f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}"
        )
    if steps is not None:
        check_positive_int(steps, "steps")
    if max_seconds is not None:
        max_seconds = check_number(max_seconds, "max_seconds")
    if clip is not None:
        clip = check_number(clip, "clip")
    check_positive_int(log_every, "log_every")
    check_flag(progress, "progress")
    if not isinstance(batches, Iterable):
        raise TypeError(f"batches must be an iterable of batches, got {type(batches).__name__}")

    history = TrainHistory()
    model.train()
    iterator = iter(batches)
    # At most one refresh a second: a notebook's progress bar is a widget, and every refresh is a
    # message; a long cell that sends thousands overflows the kernel's output queue, and tools
    # that read the queue after the cell (nbval) then lose its end.
    bar = tqdm(total=steps, desc=desc, disable=not progress, leave=True, mininterval=1.0)
    start = time.perf_counter()
    counter = itertools.count(1) if steps is None else range(1, steps + 1)
    history.stopped_by = "steps"
    try:
        for step in counter:
            if max_seconds is not None and time.perf_counter() - start >= max_seconds:
                history.stopped_by = "time"
                break
            try:
                batch = next(iterator)
            except StopIteration:
                history.stopped_by = "data"
                break
            loss = loss_fn(model, batch)
            if not isinstance(loss, Tensor) or loss.dim() != 0:
                raise ValueError(
                    "loss_fn must return a scalar tensor (the mean loss of the "
                    f"batch), got {type(loss).__name__} "
                    f"{tuple(loss.shape) if isinstance(loss, Tensor) else ''}"
                )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if clip is not None:
                norm = nn.utils.clip_grad_norm_(model.parameters(), clip)
                history.grad_norms.append(float(norm))
            history.lrs.append(float(optimizer.param_groups[0]["lr"]))
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            history.losses.append(float(loss.detach()))
            bar.update(1)
            if step % log_every == 0:
                bar.set_postfix(loss=f"{history.losses[-1]:.3f}", refresh=False)
    finally:
        history.seconds = time.perf_counter() - start
        bar.close()
        model.eval()
    return history


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler,
    src: Tensor,
    tgt: Tensor,
    bos_id: int,
    pad_id: int,
    smoothing: float = 0.1,
    clip: float = 1.0,
) -> float:
    """One optimisation step of an encoder-decoder with teacher forcing; returns the loss.

    src (batch, n_src) and tgt (batch, n_tgt) token ids, tgt ending in <eos> and padded with
    pad_id; `model(src, tgt_in)` -> logits (batch, n_tgt, vocab). The decoder reads
    shift_right(tgt, bos_id) and is scored on tgt with label smoothing, pads ignored; the
    gradients are cleared first, clipped to a total norm of `clip` after backward, then the
    optimizer and the scheduler (if not None) step. Returns the loss as a Python float.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    clip = check_number(clip, "clip")
    model.train()
    tgt_in = shift_right(tgt, bos_id)  # (batch, n_tgt): <bos> + tgt[:, :-1]
    logits = model(src, tgt_in)  # (batch, n_tgt, vocab)
    loss = label_smoothing_loss(logits, tgt, smoothing, ignore_index=pad_id)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return float(loss.detach())
