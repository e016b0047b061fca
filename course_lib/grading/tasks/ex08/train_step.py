"""ex08.train_step (transfer: the lesson imports its training loop; here the learner writes
one step of it)."""

from __future__ import annotations

import torch

from ...core import Case, GradingError, Task, changed_message, compare_values, register
from ..common import randn
from .shift_right import wrong_shift_right

MISTAKES = {
    # before pads_in_loss: where no real token is 0, ignoring 0 also counts every pad
    "pad_zero": "the loss ignores id 0 instead of the pad_id argument: the padding id is not "
    "always 0, so pass ignore_index=pad_id",
    "pads_in_loss": "the padding positions count in your loss: pass "
    "ignore_index=pad_id so that only real target tokens are scored",
    "unshifted": "the decoder must read the targets shifted right "
    "(<bos> first, the last token dropped), shift_right(tgt, bos_id); fed tgt itself "
    "it sees the token it must predict",
    "shift_drops_first": "the shifted input drops the wrong end: it is <bos> followed by "
    "tgt[:, :-1]",
    "no_zero_grad": "gradients accumulate: call optimizer.zero_grad() "
    "before loss.backward(), or each step also applies the gradients of earlier ones",
    "no_clip": "the gradients are not clipped (by their total norm): call "
    "torch.nn.utils.clip_grad_norm_(model.parameters(), clip) after backward() and "
    "before optimizer.step() (clip_grad_value_ clips each entry, not the norm)",
    "no_schedule": "the schedule never moves: call scheduler.step() after "
    "optimizer.step() (when scheduler is not None)",
    "zero_after_backward": "optimizer.zero_grad() after loss.backward() erases the gradients "
    "just computed, so the step changes nothing: call it before backward()",
    "loss_after_step": "return the loss of this step's forward pass, the one you "
    "back-propagated (loss.item()), not a loss computed again after optimizer.step()",
    "clip_1": "use the clip argument as the largest gradient norm (1.0 is only its default)",
    "clip_per_parameter": "clip the norm of all the gradients together, "
    "clip_grad_norm_(model.parameters(), clip), not of each parameter on its own",
    "schedule_first": "scheduler.step() comes after optimizer.step(): stepped first, it gives "
    "this step the next step's learning rate",
    "no_smoothing": "the loss must use label smoothing with the given "
    "`smoothing` (label_smoothing=smoothing in F.cross_entropy, or your "
    "label_smoothing_loss)",
    "scored_on_input": "you scored the logits against the decoder's input (the shifted "
    "targets); score them against tgt itself: position t reads <bos> tgt[:, :t] and must "
    "predict tgt[:, t]",
    "sliced": "tgt does not start with <bos>: tgt[:, :-1] in and tgt[:, 1:] scored is for "
    "targets that do, and here never scores the first token. Feed shift_right(tgt, bos_id) and "
    "score the logits on all of tgt",
    "double_shift": "you shifted twice: the decoder already reads shift_right(tgt, bos_id), so "
    "logits[:, t] predicts tgt[:, t]; score all the logits on all of tgt, not logits[:, :-1] "
    "on tgt[:, 1:] (that is for a decoder fed tgt itself)",
    "loss_args_swapped": "the loss got pad_id and smoothing in train_step's order: "
    "label_smoothing_loss(logits, tgt, smoothing, pad_id) takes smoothing first, so yours "
    "smoothed by pad_id and ignored no position (name them: smoothing=..., ignore_index=...)",
    "shift_with_pad": "the shifted decoder input starts with bos_id, not pad_id: "
    "shift_right(tgt, bos_id)",
    "bos_1": "use the bos_id argument: <bos> is not always 1 (the lesson's tokenizer's id); the "
    "decoder reads shift_right(tgt, bos_id)",
    "smoothing_fixed": "use the smoothing argument in the loss (0.1 is only its default): "
    "label_smoothing_loss(logits, tgt, smoothing, pad_id); a loss built once and kept between "
    "calls (an nn.CrossEntropyLoss in a global, made at the first call) keeps the first call's "
    "smoothing and pad_id: build it inside the step, from this call's arguments",
    "scheduler_none": "scheduler may be None (no schedule): step it only when there is one, "
    "if scheduler is not None: scheduler.step()",
    "loss_sum": "your loss is the sum over the real tokens (reduction='sum'); it is their mean: "
    "leave F.cross_entropy's reduction at its default, 'mean' (or use your "
    "label_smoothing_loss)",
    "loss_per_row": "your loss is the sum over the real tokens divided by the batch size (a loss "
    "per sequence); it is the mean over the real tokens: leave F.cross_entropy's reduction at "
    "its default, 'mean' (or use your label_smoothing_loss)",
    "loss_mean_all": "your loss is the mean over every position, the padded ones included as 0 "
    "(reduction='none' then .mean()); it is the mean over the real tokens: divide the sum by "
    "(tgt != pad_id).sum(), or leave F.cross_entropy's reduction at its default, 'mean'",
    "classes_last": "F.cross_entropy reads the classes on dim 1, so (batch, n_tgt, vocab) logits "
    "do not fit: flatten them to (batch * n_tgt, vocab) and tgt to (batch * n_tgt,), or pass "
    "logits.transpose(1, 2)",
    "train_late": "model.train() came after the forward pass: the model arrived in eval mode, so "
    "this step's forward ran without dropout; call model.train() first, before the forward",
    "no_grad_forward": "your loss carries no gradient: the forward pass ran under "
    "torch.no_grad() (or the logits or the loss were detached), so backward() has no graph to "
    "go through; run the forward and the loss with gradients on (no_grad is for evaluation)",
    "two_forwards": "your step runs the model twice on its batch: one forward pass per step, "
    "logits = model(src, tgt_in), and the loss of THOSE logits; a second pass draws other "
    "dropout masks (so the step's loss and gradients are not those of the first) and costs a "
    "second forward",
    "model_args_swapped": "the model reads the source first and the decoder's input second, "
    "model(src, tgt_in): swapped, the encoder reads the targets and the logits get the "
    "source's length",
}


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

    if mistake != "train_late":
        model.train()
    if mistake in ("unshifted", "sliced"):  # sliced: tgt[:, :-1] in, tgt[:, 1:] scored
        tgt_in = tgt if mistake == "unshifted" else tgt[:, :-1]
    else:  # shift_right's wrong version, dropping the first token or starting with pad_id
        first = {"shift_with_pad": pad_id, "bos_1": 1}.get(mistake, bos_id)
        slip = "drop_first" if mistake == "shift_drops_first" else ""
        tgt_in = wrong_shift_right(tgt, first, mistake=slip)
    with torch.set_grad_enabled(mistake != "no_grad_forward"):  # no graph for backward()
        logits = model(tgt_in, src) if mistake == "model_args_swapped" else model(src, tgt_in)
    if mistake == "two_forwards":  # the loss taken on a second pass: other dropout masks
        logits = model(src, tgt_in)
    model.train()  # a second time (train_late: the first time)
    ignore = {"pads_in_loss": -100, "pad_zero": 0, "loss_args_swapped": -100}.get(mistake, pad_id)
    # loss_args_swapped smooths by pad_id: F.cross_entropy takes at most 1 (first case: pad_id 0)
    swapped = min(float(pad_id), 1.0)
    smooth = {"no_smoothing": 0.0, "smoothing_fixed": 0.1, "loss_args_swapped": swapped}
    smooth = smooth.get(mistake, smoothing)
    labels = {"scored_on_input": tgt_in, "sliced": tgt[:, 1:], "double_shift": tgt[:, 1:]}
    labels = labels.get(mistake, tgt)
    logits = logits[:, :-1] if mistake == "double_shift" else logits
    shape = logits.shape if mistake == "classes_last" else (-1, logits.shape[-1])
    flat, labels = logits.reshape(shape), labels.reshape(shape[:-1])
    reduction = {"loss_sum": "sum", "loss_per_row": "sum", "loss_mean_all": "none"}
    reduction = reduction.get(mistake, "mean")
    loss = F.cross_entropy(flat, labels, ignore_index=ignore, label_smoothing=smooth,
                           reduction=reduction)  # fmt: skip
    loss = loss / len(tgt) if mistake == "loss_per_row" else loss  # summed, / the batch size
    loss = loss.mean()  # loss_mean_all: the pads' zeros counted (on a scalar, no change)
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
    stepped = scheduler is not None or mistake == "scheduler_none"
    if stepped and mistake not in ("no_schedule", "schedule_first"):
        scheduler.step()
    if mistake == "loss_after_step":  # the loss of the updated weights, computed once more
        loss = F.cross_entropy(model(src, tgt_in).reshape(shape), labels, ignore_index=ignore,
                               label_smoothing=smooth)  # fmt: skip
    return loss.item()


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
    """Like LambdaLR(optimizer, lambda i: 1 / (i + 1)): step() moves the rate to the next step;
    get_last_lr() and last_epoch as a scheduler has them (a step that reads the rate to print it
    is right, and crashed on this stand-in)."""

    def __init__(self, optimizer: _SGD, base_lr: float):
        self.optimizer, self.base_lr, self.last_epoch = optimizer, base_lr, 0

    def step(self) -> None:
        self.last_epoch += 1
        self.optimizer.param_groups[0]["lr"] = self.base_lr / (self.last_epoch + 1)

    def get_last_lr(self) -> list[float]:
        return [group["lr"] for group in self.optimizer.param_groups]


@register
class TrainStep(Task):
    """One or more steps on a small encoder-decoder, against the reference step."""

    id = "ex08.train_step"
    lesson = "lesson 08, sections 'Teacher forcing and shifted targets' and 'The training loop'"
    reference = "course_lib.train.train_step"
    mistake_table = MISTAKES
    wrong = staticmethod(_wrong_step)
    depends_on = ("shift_right", "label_smoothing_loss")
    forbidden = ("course_lib.train.train",)

    def cases(self, gen):
        from ....translator import Seq2SeqTransformer

        def case(description, batches, dtype=torch.float64, schedule=True, stale=False,
                 in_eval=False, dropout=0.0, **ids):  # fmt: skip
            # ids: bos_id, eos_id, pad_id (1, 2, 0 unless given), smoothing and clip (0.1, 0.5)
            kwargs = {"bos_id": 1, "pad_id": 0, "smoothing": 0.1, "clip": 0.5, **ids}
            bos_id, pad_id, eos_id = kwargs["bos_id"], kwargs["pad_id"], kwargs.pop("eos_id", 2)
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
                "in_eval": in_eval,
                "dropout": dropout,
                "kwargs": kwargs,
                "batches": [_seq2seq_batch(gen, s, t, bos_id, eos_id, pad_id) for s, t in batches],
            }
            if stale:  # gradients left over from an earlier backward pass
                data["stale"] = [randn(gen, *v.shape, dtype=dtype) for v in model.parameters()]
            return Case(description, data=data)

        return [
            case("one step, batch 3, targets of lengths [4, 2, 5] padded with pad_id=0, "
                 "smoothing 0.1, clip 0.5",
                 [([5, 3, 4], [4, 2, 5])]),
            case("two steps in a row on two batches (batch 2 then batch 4): the second step "
                 "must not reuse the first step's gradients",
                 [([3, 4], [3, 1]), ([2, 5, 5, 1], [4, 4, 2, 3])]),
            case("one step on a model that arrives with gradients left over from an earlier "
                 "backward pass",
                 [([4, 2], [3, 5])], stale=True),
            # with dropout, so that model.train() after the forward pass shows
            case("a model with dropout 0.3 that arrives in eval mode (as it is after an "
                 "evaluation), batch 2",
                 [([3, 5], [4, 2])], in_eval=True, dropout=0.3),
            case("scheduler=None (no schedule to step), batch 2",
                 [([4, 4], [2, 3])], schedule=False),
            case("smoothing 0.0 and clip 1e6 (clipping never acts), batch 3",
                 [([3, 3, 2], [4, 1, 3])], smoothing=0.0, clip=1e6),
            case("batch 1 without padding, bos_id=3, eos_id=4, pad_id=5, smoothing 0.2, clip 0.2",
                 [([4], [3])], bos_id=3, eos_id=4, pad_id=5, smoothing=0.2, clip=0.2),
            case("float32 model, three steps, batch 2, clip 1.0",
                 [([3, 2], [2, 3]), ([4, 1], [1, 4]), ([2, 2], [3, 3])], clip=1.0,
                 dtype=torch.float32),
            # the only other pad_id != 0 has no padding: ignore_index=0 passed by luck
            case("batch 3, targets of lengths [2, 4, 1] padded with pad_id=5 (not 0), bos_id=3, "
                 "eos_id=4",
                 [([3, 2, 4], [2, 4, 1])], bos_id=3, eos_id=4, pad_id=5),
        ]  # fmt: skip

    def call(self, obj, case):
        from ....translator import Seq2SeqTransformer

        d = case.data
        model = Seq2SeqTransformer(**_SEQ2SEQ, pad_id=d["pad_id"], dropout=d.get("dropout", 0.0))
        model = model.to(d["dtype"])
        model.load_state_dict(d["state"])
        model.train(not d["in_eval"])
        for p, g in zip(model.parameters(), d.get("stale", []), strict=False):
            p.grad = g.clone()
        optimizer = _SGD(model.parameters(), lr=0.1)
        scheduler = _InverseSchedule(optimizer, 0.1) if d["schedule"] else None
        batches = [(src.clone(), tgt.clone()) for src, tgt in d["batches"]]  # the case's stay
        with torch.random.fork_rng(devices=[]):  # the same dropout masks as the reference's
            torch.manual_seed(0)
            losses = [obj(model, optimizer, scheduler, *batch, **d["kwargs"]) for batch in batches]
        changed = [
            name
            for i, name in enumerate(("src", "tgt"))
            if any(not torch.equal(a[i], b[i]) for a, b in zip(d["batches"], batches, strict=True))
        ]
        if changed:  # e.g. tgt[tgt == pad_id] = -100 crashed the reference that came next
            raise GradingError(changed_message(changed))
        if not model.training:
            raise GradingError(
                "your train_step leaves the model in eval mode: a model may arrive in eval mode "
                "(after an evaluation), so call model.train() at the start of the step (dropout "
                "on while it learns); keep model.eval() for evaluation"
            )
        params = torch.cat([p.detach().flatten() for p in model.parameters()])
        return losses, params, float(optimizer.param_groups[0]["lr"])

    def compare(self, got, want, case):
        losses, params, lr = got
        if not all(isinstance(x, float) for x in losses):
            kinds = {
                x.get("__repr__", "?") if isinstance(x, dict) else type(x).__name__ for x in losses
            }
            return (
                f"train_step should return the loss as a Python float, got "
                f"{', '.join(sorted(kinds))} (use loss.item())"
            )
        rel = 1e-5 if case.data["dtype"] == torch.float32 else 1e-9
        for step, (g, w) in enumerate(zip(losses, want[0], strict=True), start=1):
            if abs(g - w) > rel * max(1.0, abs(w)):
                if abs(g - w) < 1e-5 * max(1.0, abs(w)):  # float32's precision on a float64 model
                    return (
                        f"the loss returned by step {step} is {g:.12g}, expected {w:.12g}: "
                        "float32's precision, on a float64 model; compute the loss in the "
                        "logits' dtype (no .float() on the logits or the loss)"
                    )
                return f"the loss returned by step {step} is {g:.6g}, expected {w:.6g}"
        message = compare_values(params, want[1], "the model's weights after your step(s)")
        if message:
            return message
        if abs(lr - want[2]) > 1e-12:
            return f"the learning rate after your step(s) is {lr:.6g}, expected {want[2]:.6g}"
        return None
