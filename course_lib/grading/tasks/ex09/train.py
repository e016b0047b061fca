"""ex09.train: the learner's own training loop, judged on its behaviour, not against one recipe.

The recipe is the learner's within stated bounds (an Adam-family optimizer, a linear warm-up
to max_lr, a decay to at most max_lr / 2 by the last step, the gradients zeroed every step and
clipped before the optimizer's step, the cross-entropy over every position). The check trains
a tiny course GPT on hidden, learnable sequences and watches the loop from outside through
hooks (`_Watch`): every optimizer step (its optimizer, learning rate, gradient norm, and the
loss of its batch recomputed at its weights), every new gradient (was an old one left on
.grad?) and every forward pass (the model's mode). A listed mistake (`wrong_train`, the model
answer `train` with one named mistake) matches a learner's run that fails the same check first.
"""

from __future__ import annotations

import contextlib
import math
from unittest import mock

import torch
import torch.nn.functional as F
from torch.optim.optimizer import register_optimizer_step_pre_hook

from ...core import Case, GradingError, Task, register
from ._shared import course_gpt

MISTAKES = {
    "tensors": "append loss.item() (a Python float), not the loss tensor: a list of tensors "
    "keeps every step's computation graph alive",
    "one_too_few": "the loop must run exactly `steps` steps: for step in range(steps)",
    "one_too_many": "the loop must run exactly `steps` steps: for step in range(steps), "
    "one optimizer step and one loss each",
    "sgd": "use an Adam-family optimizer as the task asks: "
    "torch.optim.AdamW(model.parameters(), lr=max_lr, weight_decay=0.1) (plain SGD needs a "
    "far larger learning rate and many more steps on a Transformer)",
    "optimizer_in_loop": "build the optimizer once, before the loop: a new AdamW at every step "
    "forgets its running averages of the gradients (its momentum), so every step is as crude "
    "as the first",
    "no_train_mode": "call model.train() before the loop: the model may come from an "
    "evaluation in eval mode, and then dropout would stay off while it trains",
    "no_zero_grad": "call optimizer.zero_grad() every step before loss.backward(): "
    "backward() ADDS to .grad, so without it each step also applies the gradients of every "
    "earlier step (and of any left on the model before the loop)",
    "zero_after_backward": "optimizer.zero_grad() after loss.backward() erases the gradients "
    "just computed, so the step has nothing to apply: zero them before backward()",
    "summed_loss": "the loss of a step is the MEAN cross-entropy over every position of the "
    "batch (F.cross_entropy's default reduction), not the sum",
    "last_position": "the loss of a step is the mean cross-entropy over EVERY position of the "
    "batch, not only the last one (logits[:, -1]): a GPT predicts the next token at each of "
    "the seq positions of a sequence at once, and each of those predictions is a lesson for "
    "it; flatten the positions: F.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))",
    "unflattened": "F.cross_entropy reads dim 1 as the classes, so (batch, seq, vocab) logits "
    "look like seq classes to it; flatten the positions first: "
    "F.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))",
    "no_clip": "clip the gradients: torch.nn.utils.clip_grad_norm_(model.parameters(), clip) "
    "after loss.backward() and before optimizer.step() (call model.parameters() there: a "
    "`params = model.parameters()` generator that the optimizer has already read is empty, "
    "and clipping it clips nothing)",
    "clip_after_step": "clip the gradients BEFORE optimizer.step(): clipped after it, the "
    "step has already applied the unclipped gradients",
    "clip_1": "use the clip argument as the largest gradient norm (1.0 is only its default), "
    "the norm of all the gradients together: clip_grad_norm_(model.parameters(), clip), not of "
    "a part of them (one parameter group, the matrices only)",
    "groups_from_generator": "every parameter must be in the optimizer: two parameter groups "
    "(weight decay on the matrices only) read from one `params = model.parameters()` leave the "
    "second group empty, since a generator is used up by the first list; take "
    "list(model.parameters()) once, or call model.parameters() for each group",
    "no_warmup": "start with a warm-up: the learning rate rises linearly from near 0 to max_lr "
    "over the first warmup_steps steps (max_lr * (step + 1) / warmup_steps)",
    "no_scheduler_step": "the learning rate never moves: set it every step (for group in "
    "optimizer.param_groups: group['lr'] = lr), or call scheduler.step() after every "
    "optimizer.step()",
    "no_decay": "after the warm-up the learning rate must decay, to at most max_lr / 2 by the "
    "last step (a cosine down to min_lr = max_lr / 10, say: min_lr + 0.5 * (max_lr - min_lr) * "
    "(1 + cos(pi * progress)))",
    "first_group_only": "set the learning rate of EVERY parameter group each step, for group "
    "in optimizer.param_groups: group['lr'] = lr; optimizer.param_groups[0] is only the first "
    "group, and the others keep the lr the optimizer was built with (0 here: their parameters "
    "never train)",
    "warmup_one_step_long": "the warm-up runs one step too long: it covers steps 0 to "
    "warmup_steps - 1 (counting from 0), the last of them at max_lr * warmup_steps / "
    "warmup_steps = max_lr; test step < warmup_steps, not <=, or step warmup_steps gets "
    "max_lr * (warmup_steps + 1) / warmup_steps, above max_lr",
    "abrupt_drop": "after the warm-up the learning rate must decay steadily, not fall at once: "
    "progress = (step - warmup_steps) / (steps - warmup_steps) runs from 0 to 1 over the decay, "
    "and the cosine of pi * progress starts at max_lr (no step lowers it by more than a quarter "
    "of max_lr)",
}

# Optimizers of the Adam family (the statement's bound on the recipe).
ADAM_FAMILY = ("Adam", "AdamW", "NAdam", "RAdam", "Adamax")


def _lr_at(step, steps, max_lr, warmup_steps):
    """Linear warm-up to max_lr over warmup_steps, then a cosine down to max_lr / 10 at the
    last step (step counts from 0)."""
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    min_lr = max_lr / 10
    progress = (step - warmup_steps) / max(1, steps - 1 - warmup_steps)
    return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * progress))


def train(model, batches, steps, max_lr, warmup_steps, clip=1.0):
    """The task's model answer: AdamW, a linear warm-up, a cosine decay, clipping.

    batches yields (x, y), both long (batch, seq), y the next tokens of x. Returns the loss
    (mean cross-entropy, nats per token) of each of the `steps` steps, as Python floats.
    """
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=max_lr, betas=(0.9, 0.95), weight_decay=0.1
    )
    model.train()
    losses = []
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = _lr_at(step, steps, max_lr, warmup_steps)
        x, y = next(batches)
        logits = model(x)  # (batch, seq, vocab)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        losses.append(loss.item())
    return losses


def wrong_train(model, batches, steps, max_lr, warmup_steps, clip=1.0, *, mistake=""):
    """`train` with one named mistake ("" for none)."""

    def new_optimizer():
        if mistake == "sgd":
            return torch.optim.SGD(model.parameters(), lr=max_lr, momentum=0.9)
        if mistake == "groups_from_generator":  # the vectors' group reads a used-up generator
            params = model.parameters()
            matrices, vectors = [p for p in params if p.dim() >= 2], [p for p in params]
            groups = [{"params": matrices}, {"params": vectors, "weight_decay": 0.0}]
            return torch.optim.AdamW(groups, lr=max_lr, betas=(0.9, 0.95), weight_decay=0.1)
        if mistake == "first_group_only":  # two groups built at lr=0, the schedule sets one
            matrices = [p for p in model.parameters() if p.dim() >= 2]
            groups = [
                {"params": matrices},
                {"params": [p for p in model.parameters() if p.dim() < 2]},
            ]
            return torch.optim.AdamW(groups, lr=0.0, betas=(0.9, 0.95), weight_decay=0.1)
        return torch.optim.AdamW(model.parameters(), lr=max_lr, betas=(0.9, 0.95), weight_decay=0.1)

    optimizer = new_optimizer()
    if mistake != "no_train_mode":
        model.train()
    losses = []
    count = {"one_too_few": steps - 1, "one_too_many": steps + 1}.get(mistake, steps)
    for step in range(count):
        if mistake == "optimizer_in_loop":
            optimizer = new_optimizer()
        if mistake == "no_warmup":
            lr = _lr_at(step + warmup_steps, steps + warmup_steps, max_lr, warmup_steps)
        elif mistake == "no_scheduler_step":
            lr = _lr_at(0, steps, max_lr, warmup_steps)
        elif mistake == "no_decay":
            lr = _lr_at(min(step, warmup_steps - 1), steps, max_lr, warmup_steps)
        elif mistake == "abrupt_drop" and step >= warmup_steps:  # the floor at once
            lr = max_lr / 10
        elif mistake == "warmup_one_step_long" and step == warmup_steps:  # step <= warmup_steps
            lr = max_lr * (step + 1) / warmup_steps
        else:
            lr = _lr_at(step, steps, max_lr, warmup_steps)
        for group in optimizer.param_groups[: 1 if mistake == "first_group_only" else None]:
            group["lr"] = lr
        x, y = next(batches)
        logits = model(x)  # (batch, seq, vocab)
        if mistake == "unflattened":
            loss = F.cross_entropy(logits, y)
        elif mistake == "last_position":
            loss = F.cross_entropy(logits[:, -1], y[:, -1])
        else:
            reduction = "sum" if mistake == "summed_loss" else "mean"
            loss = F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction=reduction
            )
        if mistake not in ("no_zero_grad", "zero_after_backward"):
            optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if mistake == "zero_after_backward":
            optimizer.zero_grad(set_to_none=True)
        if mistake not in ("no_clip", "clip_after_step"):
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0 if mistake == "clip_1" else clip)
        optimizer.step()
        if mistake == "clip_after_step":
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        losses.append(loss if mistake == "tensors" else loss.item())
    return losses


# --------------------------------------------------------------------------------------------
# The hidden data and model
# --------------------------------------------------------------------------------------------

_SIZES = {"vocab_size": 8, "block_size": 16, "d_model": 32, "num_heads": 2, "num_layers": 1}
_BATCH = 6  # sequences per batch (not the vocabulary's size: a reshape by the wrong one fails)


def cyclic_batches(gen, vocab_size, batch, seq, count):
    """`count` batches (x, y) of `batch` sequences of `seq` tokens in which every token is
    followed by the same next one (a hidden random permutation of the vocabulary), each row
    from a random first token: learnable in a few dozen steps."""
    following = torch.randperm(vocab_size, generator=gen)  # token t is followed by following[t]
    out = []
    for _ in range(count):
        rows = [torch.randint(0, vocab_size, (batch,), generator=gen)]
        for _ in range(seq):
            rows.append(following[rows[-1]])
        tokens = torch.stack(rows, dim=1)  # (batch, seq + 1)
        out.append((tokens[:, :-1], tokens[:, 1:]))
    return out


def _grad_norm(params):
    """The total norm of the gradients of `params` (0.0 when none has one)."""
    grads = [p.grad.detach().double() for p in params if p.grad is not None]
    return math.sqrt(sum(float((g * g).sum()) for g in grads)) if grads else 0.0


@contextlib.contextmanager
def _no_progress_bars():
    """A learner's tqdm bars (welcome in their notebook) stay out of the check's output: every
    tqdm made meanwhile is disabled (tqdm.auto's notebook bar included, a subclass)."""
    try:
        from tqdm import std
    except ImportError:
        yield
        return
    original = std.tqdm.__init__

    def disabled(self, *args, **kwargs):
        original(self, *args, **{**kwargs, "disable": True})

    with mock.patch.object(std.tqdm, "__init__", disabled):
        yield


class _Watch:
    """What a training loop did, seen through a forward pre-hook, a hook on every parameter's
    gradient and a global optimizer step pre-hook (removed after the case)."""

    def __init__(self, model, batches):
        self.model, self.data = model, batches
        self.yielded = []  # the batches handed out so far
        self.quiet = False  # True while the watch itself runs the model
        self.step = 0
        self.x = None  # the model's input in its latest forward pass
        self.record = {k: [] for k in ("optimizers", "lrs", "norms", "recomputed", "last_position")}
        self.record |= {"entries": [], "shifted": []}  # the largest |gradient entry|; see below
        self.record |= {"distinct_optimizers": 0, "all_params": True, "group_lrs": []}
        self.record |= {"stale_at": -1, "no_grad_at": -1, "eval_at": -1}
        self.params = {id(p) for p in model.parameters()}
        self.optimizers = []  # every optimizer seen stepping (kept, so that ids stay unique)

    def batches(self):
        """The case's batches, two more than `steps` (a loop over all of them runs too long,
        and stops)."""
        for x, y in self.data:
            self.yielded.append((x, y))
            yield x.clone(), y.clone()

    def forward_pre(self, module, args):
        if self.quiet:
            return
        self.x = args[0] if args else None
        if not module.training and self.record["eval_at"] < 0:
            self.record["eval_at"] = self.step

    def new_gradient(self, param):
        def hook(grad):
            old = param.grad
            if not self.quiet and self.record["stale_at"] < 0 and old is not None:
                if bool((old != 0).any()):
                    self.record["stale_at"] = self.step

        return hook

    def optimizer_pre(self, optimizer, args, kwargs):
        if self.quiet:
            return
        r = self.record
        params = [p for group in optimizer.param_groups for p in group["params"]]
        r["optimizers"].append(type(optimizer).__name__)
        if not any(optimizer is seen for seen in self.optimizers):
            self.optimizers.append(optimizer)
            r["distinct_optimizers"] = len(self.optimizers)
        r["lrs"].append(max(float(group["lr"]) for group in optimizer.param_groups))
        r["group_lrs"].append([float(g["lr"]) for g in optimizer.param_groups if g["params"]])
        r["all_params"] = r["all_params"] and self.params <= {id(p) for p in params}
        norm = _grad_norm(params)
        r["norms"].append(norm)
        grads = [float(p.grad.abs().max()) for p in params if p.grad is not None and p.grad.numel()]
        r["entries"].append(max(grads, default=0.0))
        if norm == 0.0 and r["no_grad_at"] < 0:
            r["no_grad_at"] = self.step
        loss, last, shifted = self._loss_now()
        r["recomputed"].append(loss)
        r["last_position"].append(last)
        r["shifted"].append(shifted)
        self.step += 1

    def _loss_now(self):
        """The loss of the latest forward pass's batch at the weights of this step, over every
        position, at the last position only, and with y shifted once more (NaNs when that input
        is not one of the batches handed out)."""
        x = self.x
        if not isinstance(x, torch.Tensor):
            return math.nan, math.nan, math.nan
        for bx, by in reversed(self.yielded):
            if bx.shape == x.shape and torch.equal(bx, x):
                self.quiet = True
                try:
                    with torch.no_grad():
                        logits = self.model(bx)
                    every = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), by.reshape(-1))
                    twice = F.cross_entropy(logits[:, :-1].flatten(0, 1), by[:, 1:].flatten())
                    last = F.cross_entropy(logits[:, -1], by[:, -1])
                    return float(every), float(last), float(twice)
                finally:
                    self.quiet = False
        return math.nan, math.nan, math.nan


_MARKER = {"the reference": "passes every check"}
_RUNS: dict = {}  # (mistake, case seed, case description) -> that mistake's run of the case


@register
class TrainTask(Task):
    """The learner's training loop on a tiny GPT and learnable hidden data, watched."""

    id = "ex09.train"
    lesson = "lesson 09, section 'Training, with train and validation curves'"
    reference = "course_lib.grading.tasks.ex09.train.train"
    forbidden = tuple(
        "course_lib.train.train course_lib.train.train_step course_lib.train.WarmupCosine "
        "course_lib.train.WarmupLinear course_lib.recipes.gpt_optimizer "
        "course_lib.recipes.gpt_schedule".split()
    )

    def cases(self, gen):
        def case(description, steps, max_lr, warmup_steps, clip=None, training=True, **flags):
            seed = int(torch.randint(0, 2**31 - 1, (1,), generator=gen))
            batches = cyclic_batches(gen, _SIZES["vocab_size"], _BATCH, 16, steps + 2)
            data = {"seed": seed, "batches": batches, "steps": steps, "max_lr": max_lr}
            data |= {"warmup_steps": warmup_steps, "clip": clip, "training": training}
            return Case(description, data=data | {"stale": False, "learns": False} | flags)

        # fmt: off
        return [
            case("a tiny GPT (vocab 8, d_model 32, 1 layer) trained 30 steps on batches of 6 "
                 "sequences of 16 tokens in which each token is always followed by the same "
                 "next one; max_lr 1e-2, warmup_steps 5, clip 0.05 (below the gradients' norm, "
                 "so clipping acts)", 30, 1e-2, 5, clip=0.05),
            case("40 steps, max_lr 1e-2, warmup_steps 8, clip left at its default (1.0): the "
                 "mean loss of the last 5 steps must be below half the first step's",
                 40, 1e-2, 8, learns=True),
            case("12 steps, max_lr 3e-3, warmup_steps 4, clip 0.5, on a model handed over in "
                 "eval mode with gradients left on it by earlier work",
                 12, 3e-3, 4, clip=0.5, training=False, stale=True),
        ]
        # fmt: on

    def call(self, obj, case):
        # A listed mistake's run is deterministic: it is kept, as the hint search runs every
        # mistake on a failing learner's case (only the task's own wrong versions are kept).
        if getattr(obj, "func", None) is not wrong_train:
            return self._run(obj, case)
        key = (obj.keywords["mistake"], case.data["seed"], case.description)
        if key not in _RUNS:
            _RUNS[key] = self._run(obj, case)
        return _RUNS[key]

    def _run(self, obj, case):
        d = case.data
        model = course_gpt(_SIZES, seed=d["seed"])
        model.train(d["training"])
        if d["stale"]:
            gen = torch.Generator().manual_seed(d["seed"])
            for p in model.parameters():
                p.grad = torch.randn(p.shape, generator=gen)
        watch = _Watch(model, d["batches"])
        handles = [model.register_forward_pre_hook(watch.forward_pre)]
        handles += [p.register_hook(watch.new_gradient(p)) for p in model.parameters()]
        handles.append(register_optimizer_step_pre_hook(watch.optimizer_pre))
        kwargs = {} if d["clip"] is None else {"clip": d["clip"]}
        try:
            with torch.random.fork_rng(devices=[]), _no_progress_bars():
                torch.manual_seed(d["seed"])
                losses = obj(
                    model, watch.batches(), d["steps"], d["max_lr"], d["warmup_steps"], **kwargs
                )
        except StopIteration:  # next(batches) past the last: more than one batch a step
            raise GradingError(
                f"your code asked for a batch after all {len(d['batches'])} were used, in "
                f"steps={d['steps']}. Hint: take exactly one batch per step, x, y = "
                "next(batches), and use that pair for both the forward pass and the loss"
            ) from None
        finally:
            for handle in handles:
                handle.remove()
        return {"losses": losses, **watch.record, "final_norm": _grad_norm(model.parameters())}

    def expected(self, case):
        # The recipe is the learner's: there is no one right list of losses. The right answer
        # is a loop that passes every check of `verdict` (the reference does).
        return _MARKER

    def compare(self, got, want, case):
        mine = verdict(got, case.data)
        if want == _MARKER:
            return None if mine is None else mine[1]
        theirs = verdict(want, case.data)  # a listed mistake's run: the same failure matches
        if mine is not None and theirs is not None and mine[0] == theirs[0]:
            return None
        return mine[1] if mine is not None else "passes the check that this mistake fails"

    mistake_table, wrong = MISTAKES, staticmethod(wrong_train)


def verdict(run, d):
    """The first check a training run fails, as (code, message), or None when it passes all."""
    losses, steps, max_lr, warmup = run["losses"], d["steps"], d["max_lr"], d["warmup_steps"]
    clip = 1.0 if d["clip"] is None else d["clip"]
    if not isinstance(losses, (list, tuple)) or not all(
        isinstance(x, float) and not isinstance(x, bool) for x in losses
    ):
        kinds = (
            sorted({"tensors" if isinstance(x, torch.Tensor) else type(x).__name__ for x in losses})
            if isinstance(losses, (list, tuple))
            else [type(losses).__name__ if not isinstance(losses, dict) else "no list"]
        )
        return "not_floats", (
            f"train should return a list of Python floats (loss.item() of each step), got "
            f"{', '.join(kinds)}"
        )
    if len(losses) != steps:
        code = "too_few" if len(losses) < steps else "too_many"
        return code, f"train returned {len(losses)} losses for steps={steps}; expected one per step"
    optimizers, lrs, norms = run["optimizers"], run["lrs"], run["norms"]
    if not optimizers:
        return "no_optimizer", (
            "no torch.optim optimizer stepped: build one (torch.optim.AdamW(model.parameters(), "
            "lr=max_lr)) and call optimizer.step() every step"
        )
    if len(optimizers) != steps:
        return "step_count", (
            f"the optimizer stepped {len(optimizers)} times in {steps} steps; expected once per "
            "step"
        )
    other = sorted({name for name in optimizers if name not in ADAM_FAMILY})
    if other:
        return "not_adam", f"the optimizer is {', '.join(other)}, not one of the Adam family"
    if run["distinct_optimizers"] > 1:
        return "new_optimizer", (
            f"{run['distinct_optimizers']} different optimizers stepped in {steps} steps; build "
            "one before the loop"
        )
    if not run["all_params"]:
        return "params", "the optimizer does not update every parameter of the model"
    if run["eval_at"] == 0:
        return "eval_mode", "the model ran in eval mode at step 1"
    if run["eval_at"] > 0:
        return "eval_later", (
            f"the model ran in eval mode at step {run['eval_at'] + 1}: a model.eval() inside "
            "the loop (an evaluation, a sample) left it there; call model.train() after it"
        )
    if run["stale_at"] >= 0:
        return "accumulated", (
            f"at step {run['stale_at'] + 1} a new gradient arrived while .grad still held an "
            "old one (gradients accumulate across steps)"
        )
    if run["no_grad_at"] >= 0:
        return "no_gradient", (
            f"at step {run['no_grad_at'] + 1} the optimizer stepped with no gradient to apply"
        )

    def close(got, want):
        return abs(got - want) <= 1e-4 * max(1.0, abs(want))

    recomputed = zip(losses, run["recomputed"], run["last_position"], run["shifted"], strict=True)
    for step, (got, want, last, twice) in enumerate(recomputed, start=1):
        if not math.isnan(want) and not close(got, want):
            summed = close(got, want * d["batches"][0][1].numel())  # every position's, added
            code = "last_position" if close(got, last) else "summed" if summed else "loss_value"
            return code, (
                f"the loss returned for step {step} is {got:.6g}, but the mean cross-entropy "
                f"over every position of that step's batch, at that step's weights, is {want:.6g}"
                + (
                    ": y is already x shifted by one token, compare model(x) with y as it is"
                    if close(got, twice)
                    else ""
                )
            )
    worst = max(norms)
    if worst > clip * (1 + 1e-3):
        at = next(i for i, n in enumerate(norms, start=1) if n > clip * (1 + 1e-3))
        if norms[-1] > clip * (1 + 1e-3) and abs(run["final_norm"] - clip) <= 1e-3 * clip:
            code = "clipped_after_step"  # the last step's gradients, clipped after the step
        elif clip < 1.0 and worst <= 1.0 + 1e-3:
            code = "clip_ignored"
        else:
            code = "not_clipped"
        by_value = code == "not_clipped" and run["entries"][at - 1] <= clip * (1 + 1e-3)
        return "by_value" if by_value else code, (
            f"the gradients' total norm at step {at}'s optimizer step is {norms[at - 1]:.4g}, "
            f"above clip={clip:g}"
            + (
                ", though no entry is: clip_grad_value_ caps each entry; clip the total norm, "
                "torch.nn.utils.clip_grad_norm_(model.parameters(), clip)"
                if by_value
                else ""
            )
        )
    for step, lr in enumerate(lrs, start=1):
        if lr < 0:
            return "negative_lr", f"the learning rate of step {step} is {lr:.4g}, below 0"
    counts = {len(rates) for rates in run["group_lrs"]}
    rates = run["group_lrs"] if len(counts) == 1 else []  # each step: each group's rate
    by_group = list(zip(*rates, strict=True))
    fixed = [i for i, rates in enumerate(by_group) if len(set(rates)) == 1]
    if fixed and len(fixed) < len(by_group):  # #hunt19: only param_groups[0] set
        return "group_not_scheduled", (
            f"the learning rate of parameter group {fixed[0]} stays {by_group[fixed[0]][0]:.4g} "
            "at every step while another group's follows the schedule"
        )
    for step, lr in enumerate(lrs, start=1):
        if lr > max_lr * (1 + 1e-6):  # #hunt18: `step <= warmup_steps` was told no more
            one_long = step == warmup + 1 and math.isclose(lr, max_lr * (warmup + 1) / warmup)
            return "warmup_one_long" if one_long else "above_max", (
                f"the learning rate of step {step} is {lr:.4g}, above max_lr"
            )
    if max(lrs) - min(lrs) <= 1e-12 * max_lr:
        return "constant_lr", f"the learning rate is {lrs[0]:.4g} at every step"
    if lrs[0] > max_lr / 2:
        late = warmup > 2 and lrs[1] <= max_lr / 2  # the warm-up starts one step late
        return "lr_set_late" if late else "no_warmup", (
            f"the learning rate of the first step is {lrs[0]:.4g}, already near "
            f"max_lr={max_lr:g}: no warm-up"
            + (
                f" there, though step 2's is {lrs[1]:.4g}: the first step ran at the "
                "optimizer's starting lr; set each step's rate before its optimizer.step()"
                if late
                else ""
            )
        )
    if max(lrs) <= max_lr * max_lr * (1 + 1e-6) < max_lr:  # LambdaLR given the rate
        return "rate_squared", (
            f"the learning rate never goes above {max(lrs):.4g}, max_lr * max_lr: LambdaLR "
            "multiplies the optimizer's lr (max_lr) by what your function returns; return the "
            "factor, (step + 1) / warmup_steps, not the rate"
        )
    for i in range(warmup):  # linear: step i + 1 of the warm-up at about (i + 1) / warmup
        low, high = max(0.0, max_lr * (i - 1) / warmup), max_lr * (i + 2) / warmup
        if not low <= lrs[i] <= high:
            return "warmup_not_linear", (
                f"during the warm-up the learning rate of step {i + 1} is {lrs[i]:.4g}, "
                f"not near max_lr * {i + 1} / warmup_steps = {max_lr * (i + 1) / warmup:.4g}"
            )
    if max(lrs[warmup - 1 : warmup + 2]) < 0.9 * max_lr:
        return "no_peak", (
            f"the learning rate does not reach max_lr={max_lr:g} at the end of the warm-up "
            f"(step {warmup} or {warmup + 1})"
        )
    for step in range(warmup, steps):
        if lrs[step] < lrs[step - 1] - max_lr / 4:
            return "abrupt_drop", (
                f"after the warm-up the learning rate falls from {lrs[step - 1]:.4g} at step "
                f"{step} to {lrs[step]:.4g} at step {step + 1}, more than max_lr / 4 at once"
            )
        if step > warmup and lrs[step] > lrs[step - 1] * (1 + 1e-9):
            return "not_decaying", (
                f"after the warm-up the learning rate rises again, from {lrs[step - 1]:.4g} "
                f"at step {step} to {lrs[step]:.4g} at step {step + 1}"
            )
    if lrs[-1] > max_lr / 2:
        return "no_decay", (
            f"the learning rate of the last step is {lrs[-1]:.4g}, above max_lr / 2"
        )
    middle = warmup + (steps - 1 - warmup) // 2
    if lrs[middle] > 0.9 * max_lr:
        return "decays_late", (
            f"halfway through the decay (step {middle + 1}) the learning rate is still "
            f"{lrs[middle]:.4g}, above 0.9 * max_lr: decay steadily from the end of the warm-up "
            "(a cosine or a straight line)"
        )
    if d["learns"] and sum(losses[-5:]) / 5 >= losses[0] / 2:
        return "no_learning", (
            f"the loss does not fall enough: {losses[0]:.3f} at the first step, "
            f"{sum(losses[-5:]) / 5:.3f} on average over the last 5 (expected below half)"
        )
    return None
