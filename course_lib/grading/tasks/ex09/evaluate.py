"""ex09.evaluate: the mean cross-entropy of a language model over a whole text, every token
after the first predicted once (course_lib.train.evaluate_loss's protocol).

The model is a small course GPT with hidden weights and dropout, handed over in training mode
(so evaluation mode matters). Besides the number, the check watches the forward passes (a
forward pre-hook: training mode? gradients on? how many windows at once?), the mode the model
is left in, and whether two runs give the same number (random windows do not).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from course_lib.validation import is_number

from ...core import Case, Task, register
from ._shared import course_gpt, random_gpt_state

MISTAKES = {
    "tensor": "return a Python float: the total of the losses is a tensor until you take "
    ".item() (or float(...)) of it",
    "no_eval": "call model.eval() before the forward passes: in training mode dropout "
    "drops activations at random, so the loss comes out noisy and too high",
    "no_grad": "evaluation needs no gradients: run the forward passes inside "
    "torch.no_grad() (or decorate evaluate with @torch.no_grad()), or every activation is "
    "kept in memory for a backward pass that never comes",
    "one_batch": "feed the windows to the model at most batch_size at a time "
    "(for lo in range(0, n_windows, batch_size): x[lo:lo + batch_size]); a long text in "
    "one forward pass may not fit in memory",
    "stays_eval": "restore the model's mode at the end: remember was_training = "
    "model.training before model.eval(), and call model.train(was_training) before returning",
    "train_after": "leave the model in the mode it came in: model.train() at the end switches "
    "a model that was in eval mode to training mode; use model.train(was_training)",
    "random_windows": "read the text in consecutive windows (starting at 0, block_size, "
    "2 * block_size, ...), not at random offsets: every token after the first must be "
    "predicted exactly once, and the number must be the same on every run",
    "batch_means": "you averaged the mean loss of each batch, but the batches hold different "
    "numbers of tokens (the last batch and the last, shorter window): add up the "
    "per-token losses (reduction='sum') and divide once by the number of tokens predicted",
    "drop_last": "the last, shorter window is missing: after the full windows, the tokens "
    "left over (ids[n_full * block_size:], if there are at least two) form one more window "
    "whose targets count too",
    "padded_last": "the last window is shorter: run it as it is, ids[n_full * block_size:], "
    "without padding it to block_size + 1 tokens; padded, its made-up targets are counted and "
    "change the mean",
    "no_overlap": "windows of block_size + 1 tokens must overlap by one "
    "(ids[i * block_size : (i + 1) * block_size + 1]): cut into windows of block_size that "
    "do not overlap, each window's first token is never predicted",
    "unshifted": "the targets are the inputs shifted by one: the logits at position t "
    "predict token t + 1 (x = window[:-1], y = window[1:])",
    "disjoint_windows": "your windows of block_size + 1 tokens do not overlap: window i starts "
    "at i * (block_size + 1), so the first token of every window after the first is only ever "
    "an input, never a target (one token in every block_size + 1 is not predicted). Start "
    "window i at i * block_size, ids[i * block_size : (i + 1) * block_size + 1]: consecutive "
    "windows then share one token, the last target of one being the first input of the next, "
    "and every token after the first is predicted exactly once",
    "window_means": "you averaged the mean loss of each window, but the last window is shorter "
    "(fewer targets): add up the per-token losses (reduction='sum') and divide once by the "
    "number of tokens predicted",
    "bits": "return nats, as F.cross_entropy gives them (natural log): dividing by log(2) "
    "turns them into bits",
    "model_block_size": "cut the windows with the `block_size` you are given, not the "
    "model's own model.config.block_size: a caller may evaluate on shorter windows",
    "grad_left_off": "torch.set_grad_enabled(False) stays in force after evaluate returns, so "
    "the next training step's backward() fails: use `with torch.no_grad():` (or "
    "@torch.no_grad()), which turns gradients back on when it ends",
    "count_all_tokens": "divide by the number of predictions, len(ids) - 1, not by len(ids): the "
    "first token is never a target (nothing comes before it), every other token is one",
}


def _windows(ids, block_size, overlap=True, stride=None):
    """[(x, y)] of the text cut into consecutive windows, the last one shorter."""
    out = []
    for start in range(0, len(ids) - 1, stride or block_size):
        window = ids[start : start + block_size + (1 if overlap else 0)]
        if len(window) > 1:
            out.append((window[:-1], window[1:]))
    return out


def wrong_evaluate(model, ids, block_size, batch_size=64, *, mistake=""):
    """The mean cross-entropy over ALL of ids, with one named mistake ("" for none)."""
    was_training = model.training
    block_size = model.config.block_size if mistake == "model_block_size" else block_size
    if mistake != "no_eval":
        model.eval()
    if mistake == "grad_left_off":
        torch.set_grad_enabled(False)
    if mistake == "random_windows":
        n_full = (len(ids) - 1) // block_size
        high = max(len(ids) - block_size, 1)
        starts = torch.randint(0, high, (max(n_full, 1),)).tolist()
        windows = [(ids[s : s + block_size], ids[s + 1 : s + block_size + 1]) for s in starts]
    else:
        stride = block_size + 1 if mistake == "disjoint_windows" else block_size
        windows = _windows(ids, block_size, overlap=mistake != "no_overlap", stride=stride)
    width = block_size if mistake != "no_overlap" else block_size - 1
    full = [w for w in windows if len(w[0]) == width]
    rest = windows[len(full) :]
    if mistake == "drop_last":
        rest = []
    if mistake == "padded_last":  # token 0 appended to the last window, and its targets counted
        padded = [F.pad(torch.cat([x, y[-1:]]), (0, width - len(x))) for x, y in rest]
        rest = [(window[:-1], window[1:]) for window in padded]
    size = {"one_batch": max(len(full), 1), "window_means": 1}.get(mistake, batch_size)
    batches = [full[lo : lo + size] for lo in range(0, len(full), size)] + [[w] for w in rest]
    total, count, means = 0.0, 0, []
    with torch.set_grad_enabled(mistake == "no_grad"):
        for batch in batches:
            x = torch.stack([w[0] for w in batch])  # (b, window)
            y = x if mistake == "unshifted" else torch.stack([w[1] for w in batch])
            logits = model(x)  # (b, window, vocab)
            loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum")
            total += loss.item()
            count += y.numel()
            means.append(loss.item() / y.numel())
    if mistake == "train_after":
        model.train()
    elif mistake != "stays_eval":
        model.train(was_training)
    if mistake.endswith("_means"):  # batch_means, window_means
        return sum(means) / len(means)
    count += mistake == "count_all_tokens"  # len(ids), the first token counted as a target
    count *= math.log(2) if mistake == "bits" else 1
    return torch.tensor(total / count) if mistake == "tensor" else total / count


_SIZES = {"vocab_size": 11, "block_size": 8, "d_model": 16, "num_heads": 2, "num_layers": 1}
_SIZES["dropout"] = 0.3


def hidden_gpt_state(gen, sizes, dtype):
    """Random weights for a course GPT of these sizes (norms near 1, the rest 0.3 * N(0, 1)),
    drawn from `gen`, so the loss differs from window to window."""
    return random_gpt_state(gen, sizes, dtype, name=lambda key: key, near_1=lambda k: "norm" in k)


def _kind(value):
    if not is_number(value):
        if isinstance(value, torch.Tensor):
            return "a tensor"
        if isinstance(value, dict):
            return value.get("__repr__", "a dict")
        return f"a {type(value).__name__}"
    return "float"


def _same(a, b):
    """Two runs' numbers agree (two NaNs agree too: the value check reports those)."""
    return a == b or (isinstance(b, float) and math.isnan(a) and math.isnan(b))


@register
class EvaluateTask(Task):
    """The mean next-token cross-entropy over a whole text, watched while it runs."""

    id = "ex09.evaluate"
    lesson = "lesson 09, section 'Training, with train and validation curves' (evaluate_loss)"
    reference = "course_lib.train.evaluate_loss"
    forbidden = ("course_lib.train.lm_loss",)

    def cases(self, gen):
        def case(description, n, block_size, batch_size=None, dtype=torch.float32, training=True):
            state = hidden_gpt_state(gen, _SIZES, dtype)
            ids = torch.randint(0, _SIZES["vocab_size"], (n,), generator=gen)
            data = {"sizes": dict(_SIZES), "state": state, "ids": ids, "block_size": block_size}
            return Case(description, data=data | {"batch_size": batch_size, "training": training})

        # fmt: off
        return [
            case("45 tokens, block_size 8, batch_size 2: 5 full windows in batches of 2, 2 and 1, "
                 "then a last window of 5 tokens (4 targets); model in training mode, dropout 0.3",
                 45, 8, 2),
            case("float64 model, 60 tokens, block_size 6 (shorter than the model's 8), "
                 "batch_size 4: 9 full windows (batches of 4, 4, 1) and a last window of 6 tokens",
                 60, 6, 4, dtype=torch.float64),
            case("33 tokens, block_size 8, batch_size 3: exactly 4 full windows, no token left "
                 "over for a last window", 33, 8, 3),
            case("a text shorter than one window: 6 tokens, block_size 8, batch_size left at its "
                 "default (64): one window of 5 targets", 6, 8),
            case("a model handed over in eval mode (it must stay in eval mode), 30 tokens, "
                 "block_size 4, default batch_size: 7 full windows in one batch, then a last "
                 "window of 1 target", 30, 4, training=False),
            case("18 tokens, block_size 8, batch_size 1: 2 full windows, one per batch, then a "
                 "last window of 1 target", 18, 8, 1),
        ]
        # fmt: on

    def call(self, obj, case):
        d = case.data
        model = course_gpt(d["sizes"], d["state"])
        dtype = model.token_embedding.weight.dtype
        forward, logits = model.forward, torch.zeros(d["sizes"]["vocab_size"], dtype=dtype)
        model.forward = lambda ids, *a: (  # an empty batch (a split of no windows) is no error
            forward(ids, *a) if ids.numel() else logits.expand(*ids.shape, -1)
        )
        seen = []  # (windows, training, gradients on) of every forward pass

        def watch(module, args):
            x = args[0] if args else None
            rows = int(x.shape[0]) if isinstance(x, torch.Tensor) and x.dim() > 1 else 1
            seen.append((rows, module.training, torch.is_grad_enabled()))

        handle = model.register_forward_pre_hook(watch)
        kwargs = {} if d["batch_size"] is None else {"batch_size": d["batch_size"]}
        values, after, grad_on = [], [], torch.is_grad_enabled()
        try:
            for seed in (0, 1):  # twice: random windows or dropout give two different numbers
                model.train(d["training"])
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(seed)
                    values.append(obj(model, d["ids"].clone(), d["block_size"], **kwargs))
                after.append((model.training, torch.is_grad_enabled()))
        finally:
            handle.remove()
            torch.set_grad_enabled(grad_on)
        batch_size = 64 if d["batch_size"] is None else d["batch_size"]
        return {
            "value": values[0],
            "again": values[1],
            "training_after": after[0][0],
            "grad_left_off": after[0][1] != grad_on,
            "train_forward": any(training for _, training, _ in seen),
            "grad_forward": any(grad for _, _, grad in seen),
            "max_windows": max((rows for rows, _, _ in seen), default=0),
            "over_batch": any(rows > batch_size for rows, _, _ in seen),
        }

    def compare(self, got, want, case):
        """The first of these that differs between got and want is the verdict; when both fail
        the same way (a learner's result against a listed mistake's), they match."""
        d = case.data
        batch_size = 64 if d["batch_size"] is None else d["batch_size"]
        mode = "training" if d["training"] else "eval"

        def left(r):
            return "training" if r["training_after"] else "eval"

        checks = [  # (failed, its message)
            (lambda r: _kind(r["value"]) != "float",
             lambda r: f"evaluate should return a Python float, got {_kind(r['value'])}"),
            (lambda r: r["train_forward"],
             lambda r: "the model ran in training mode during your evaluation (dropout on)"),
            (lambda r: r["grad_forward"], lambda r: "the forward passes ran with gradients on"),
            (lambda r: r["grad_left_off"], lambda r: "gradients are still off after your evaluate"),
            (lambda r: r["over_batch"],
             lambda r: f"one forward pass got {r['max_windows']} windows, more than "
             f"batch_size={batch_size}"),
            (lambda r: r["training_after"] != d["training"],
             lambda r: f"the model came in {mode} mode but your evaluate leaves it in "
             f"{left(r)} mode"),
            (lambda r: _kind(r["again"]) == "float" and not _same(r["again"], r["value"]),
             lambda r: f"two runs on the same model and text gave two numbers "
             f"({r['value']:.6g}, then {r['again']:.6g})"),
        ]  # fmt: skip
        for failed, message in checks:
            if failed(got) != failed(want):
                return message(got) if failed(got) else "a different result"
            if failed(got):
                return None  # the same failure as `want` (a listed mistake's)
        rel = 1e-9 if d["state"]["token_embedding.weight"].dtype == torch.float64 else 2e-5
        g, w = got["value"], want["value"]
        if math.isfinite(g) and abs(g - w) <= rel * max(1.0, abs(w)):
            return None
        if abs(g - w) <= 1e-6 * max(1.0, abs(w)):  # the last digits: float32 sums of float64
            return (
                f"your loss is {g:.12g} nats per token, expected {w:.12g}: off in the last "
                "digits, as when the losses are added up in a float32 tensor; add them as "
                "Python floats (loss.item()), which keep the model's float64 precision"
            )
        return f"your loss is {g:.6g} nats per token, expected {w:.6g}"

    mistake_table, wrong = MISTAKES, staticmethod(wrong_evaluate)
