"""The ex08 grader: references pass, each mistake fails with its hint, shortcuts are caught."""

import copy
from functools import partial

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import task_statement
from torch import nn

from course_lib.decoding import greedy_decode
from course_lib.grading import NOTEBOOK_SEED, check_result, get_task
from course_lib.grading.core import judge, run_cases
from course_lib.grading.tasks import ex08
from course_lib.train import label_smoothing_loss, noam_lr, shift_right


def status(task_id, obj):
    result = check_result(task_id, obj)
    assert not isinstance(result, str), result
    return result


# ---- alternative correct implementations ----------------------------------------------------


def noam_lr_math(step, d_model, warmup):
    import math

    return math.pow(d_model, -0.5) * min(1 / math.sqrt(step), step / math.pow(warmup, 1.5))


def noam_lr_branches(step, d_model, warmup):
    if step < warmup:
        return d_model**-0.5 * step * warmup**-1.5
    return (d_model * step) ** -0.5


def label_smoothing_by_distribution(logits, target, smoothing, ignore_index):
    vocab = logits.shape[-1]
    keep = target != ignore_index
    log_probs = logits[keep].log_softmax(dim=-1)  # (n_real, vocab)
    wanted = torch.full_like(log_probs, smoothing / vocab)
    wanted[torch.arange(log_probs.shape[0]), target[keep]] += 1 - smoothing
    return -(wanted * log_probs).sum(dim=-1).mean()


def label_smoothing_float64(logits, target, smoothing, ignore_index):
    x = logits.double()
    log_probs = x - torch.logsumexp(x, dim=-1, keepdim=True)
    keep = (target != ignore_index).double()
    safe = torch.where(target == ignore_index, torch.zeros_like(target), target)
    nll = -torch.gather(log_probs, -1, safe.unsqueeze(-1)).squeeze(-1)
    per = (1 - smoothing) * nll - smoothing * log_probs.mean(-1)
    return ((per * keep).sum() / keep.sum()).to(logits.dtype)


def shift_right_roll(targets, bos_id):
    out = targets.roll(1, dims=1).clone()
    out[:, 0] = bos_id
    return out


def shift_right_new(targets, bos_id):
    out = torch.empty_like(targets)
    out[:, 0] = bos_id
    out[:, 1:] = targets[:, :-1]
    return out


def greedy_full_length(step_fn, batch_size, bos_id, eos_id, max_new_tokens):
    """Never stops early; forces eos on finished rows."""
    prefix = torch.full((batch_size, 1), bos_id, dtype=torch.long)
    done = torch.zeros(batch_size, dtype=torch.bool)
    for _ in range(max_new_tokens):
        token = step_fn(prefix)[:, -1, :].argmax(-1)
        token = torch.where(done, torch.full_like(token, eos_id), token)
        done = done | (token == eos_id)
        prefix = torch.cat([prefix, token.unsqueeze(-1)], dim=-1)
    return prefix[:, 1:]


def greedy_python_lists(step_fn, batch_size, bos_id, eos_id, max_new_tokens):
    rows = [[bos_id] for _ in range(batch_size)]
    for _ in range(max_new_tokens):
        logits = step_fn(torch.tensor(rows))
        for i, row in enumerate(rows):
            row.append(
                eos_id if row[-1] == eos_id and len(row) > 1 else int(logits[i, -1].argmax())
            )
    return torch.tensor([row[1:] for row in rows], dtype=torch.long)


REFERENCES = {
    "ex08.noam_lr": noam_lr,
    "ex08.label_smoothing_loss": label_smoothing_loss,
    "ex08.shift_right": shift_right,
    "ex08.greedy_decode": greedy_decode,
}
ALTERNATIVES = [
    ("ex08.noam_lr", noam_lr_math),
    ("ex08.noam_lr", noam_lr_branches),
    ("ex08.label_smoothing_loss", label_smoothing_by_distribution),
    ("ex08.label_smoothing_loss", label_smoothing_float64),
    ("ex08.shift_right", shift_right_roll),
    ("ex08.shift_right", shift_right_new),
    ("ex08.greedy_decode", greedy_full_length),
    ("ex08.greedy_decode", greedy_python_lists),
]


@pytest.mark.parametrize("task_id", sorted(REFERENCES))
def test_reference_passes(task_id):
    # The reference calling itself would count as "calls the reference": run it unwatched.
    task = get_task(task_id)
    unwatched = copy.copy(task)
    unwatched.reference = ""
    cases = task.cases(torch.Generator().manual_seed(NOTEBOOK_SEED))
    result = judge(task, cases, run_cases(unwatched, REFERENCES[task_id], cases))
    assert result.status == "passed", result.feedback
    assert result.score == result.max_score


@pytest.mark.parametrize(
    "task_id,impl", ALTERNATIVES, ids=[f"{t}-{f.__name__}" for t, f in ALTERNATIVES]
)
def test_alternative_correct_implementation_passes(task_id, impl):
    result = status(task_id, impl)
    assert result.status == "passed", result.feedback


def test_exercise_names_its_mistakes():
    """The mistakes EXERCISES.md names are among the graded ones."""
    hints = {
        task_id: " ".join(h for _, h in get_task(task_id).mistakes()) for task_id in REFERENCES
    }
    assert "min" in hints["ex08.noam_lr"] and "exponent" in hints["ex08.noam_lr"]
    assert "padded" in hints["ex08.label_smoothing_loss"]
    assert "divided by all positions" in hints["ex08.label_smoothing_loss"]
    assert "LAST" in hints["ex08.shift_right"]
    assert "keep emitting eos_id" in hints["ex08.greedy_decode"]
    assert "wrong axis" in hints["ex08.greedy_decode"]


# ---- forbidden calls ---------------------------------------------------------------------


def ls_with_cross_entropy(logits, target, smoothing, ignore_index):
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),
        target.reshape(-1),
        label_smoothing=smoothing,
        ignore_index=ignore_index,
    )


def ls_with_module(logits, target, smoothing, ignore_index):
    loss = nn.CrossEntropyLoss(label_smoothing=smoothing, ignore_index=ignore_index)
    return loss(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def ls_with_nll(logits, target, smoothing, ignore_index):
    log_probs = logits.log_softmax(-1).reshape(-1, logits.shape[-1])
    nll = F.nll_loss(log_probs, target.reshape(-1), ignore_index=ignore_index)
    keep = target.reshape(-1) != ignore_index
    return (1 - smoothing) * nll - smoothing * log_probs[keep].mean()


def ls_calling_reference(logits, target, smoothing, ignore_index):
    from course_lib import train

    return train.label_smoothing_loss(logits, target, smoothing, ignore_index)


def greedy_calling_reference(step_fn, batch_size, bos_id, eos_id, max_new_tokens):
    from course_lib import decoding

    return decoding.greedy_decode(step_fn, batch_size, bos_id, eos_id, max_new_tokens)


@pytest.mark.parametrize(
    "task_id,impl",
    [
        ("ex08.label_smoothing_loss", ls_with_cross_entropy),
        ("ex08.label_smoothing_loss", ls_with_module),
        ("ex08.label_smoothing_loss", ls_with_nll),
        ("ex08.label_smoothing_loss", ls_calling_reference),
        ("ex08.greedy_decode", greedy_calling_reference),
        ("ex08.noam_lr", lambda step, d_model, warmup: noam_lr(step, d_model, warmup)),
        ("ex08.shift_right", lambda targets, bos_id: shift_right(targets, bos_id)),
    ],
)
def test_forbidden_calls_are_caught(task_id, impl):
    result = status(task_id, impl)
    assert result.status == "forbidden", result.feedback


def test_nll_alternative_is_itself_correct():
    """So that the 'forbidden' verdict above is about the call, not a wrong value."""
    logits, target = torch.randn(3, 4, 6), torch.randint(0, 6, (3, 4))
    target[0, 0] = 0
    assert torch.allclose(
        ls_with_nll(logits, target, 0.1, 0), label_smoothing_loss(logits, target, 0.1, 0), atol=1e-6
    )


@pytest.mark.parametrize("task_id", sorted(REFERENCES))
def test_stub_is_not_implemented(task_id):
    def stub(*args, **kwargs):
        raise NotImplementedError()

    assert status(task_id, stub).status == "not implemented"


def test_table_step_fn_rejects_a_prefix_without_bos():
    table = torch.randn(2, 4, 5, 5)
    step_fn = ex08.TableStepFn(table, bos_id=1)
    assert step_fn(torch.ones(2, 3, dtype=torch.long)).shape == (2, 3, 5)
    with pytest.raises(ValueError, match="<bos>"):
        step_fn(torch.zeros(2, 1, dtype=torch.long))
    with pytest.raises(ValueError, match="max_new_tokens"):
        step_fn(torch.ones(2, 5, dtype=torch.long))


def test_greedy_cases_exercise_the_eos_rule():
    """A case has a row that finishes before max_new_tokens and would go on without eos."""
    task = get_task("ex08.greedy_decode")
    cases = task.cases(torch.Generator().manual_seed(0))
    finished_early = 0
    for case in cases:
        got = task.call(greedy_decode, case)
        eos = case.data["eos_id"]
        finished_early += int((got[:, :-1] == eos).any())
    assert finished_early >= 3


def test_gathering_at_an_out_of_range_ignore_index_gets_its_hint():
    def gathers_raw_targets(logits, target, smoothing, ignore_index):
        log_probs = logits.log_softmax(-1)
        keep = target != ignore_index
        nll = -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
        per_token = (1 - smoothing) * nll - smoothing * log_probs.mean(-1)
        return (per_token * keep).sum() / keep.sum()

    result = status("ex08.label_smoothing_loss", gathers_raw_targets)
    assert result.status == "failed" and 0 < result.score < result.max_score
    assert "ignore_index -100" in result.feedback
    assert "replace the ignored targets by a valid id" in result.feedback


# ---- found by a fresh reader: wrong answers that passed -------------------------------------


def _own(fn):
    """The reference's logic under a code object of its own (the grader does not see it)."""
    import types

    code = fn.__code__.replace(co_name=fn.__name__ + "_copy")
    return types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def test_a_loss_without_a_gradient_fails_with_its_reason():
    # passed 6/6 under torch.no_grad() or .detach(); it broke only train_step's backward()
    own = _own(label_smoothing_loss)
    for wrong in (torch.no_grad()(own), lambda *a: own(*a).detach()):
        result = status("ex08.label_smoothing_loss", wrong)
        assert result.status == "failed", result
        assert "your loss carries no gradient" in result.feedback, result


def test_a_train_step_that_leaves_the_model_in_eval_mode_fails():
    # passed 7/7: the graded model has no dropout, so eval mode changed no number
    from course_lib.train import train_step

    own = _own(train_step)

    def step_in_eval_mode(model, *args, **kwargs):
        out = own(model, *args, **kwargs)
        model.eval()
        return out

    result = status("ex08.train_step", step_in_eval_mode)
    assert result.passed == 0 and "leaves the model in eval mode" in result.feedback, result


def test_log_softmax_over_dim_2_is_not_told_about_ignore_index():
    # logits (12, 5) with ignore_index -100 and no padding: the IndexError comes from dim=2
    def dim_two(logits, target, smoothing, ignore_index):
        log_probs = torch.log_softmax(logits, dim=2)
        keep = target != ignore_index
        safe = target.masked_fill(~keep, 0)
        nll = -log_probs.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
        per = (1 - smoothing) * nll - smoothing * log_probs.mean(-1)
        return per.masked_fill(~keep, 0).sum() / keep.sum()

    result = status("ex08.label_smoothing_loss", dim_two)
    assert "ignore_index need not be a class id" not in result.feedback, result.feedback
    assert "log_softmax over dim=-1" in result.feedback, result.feedback


# ---- single mistakes that got "more than one thing may be wrong" (or no hint) ---------------
# Written here, differently from the listed mistakes that now explain them.


def greedy_writes_zero_after_eos(step_fn, batch_size, bos_id, eos_id, max_new_tokens):
    rows = [[bos_id] for _ in range(batch_size)]
    for _ in range(max_new_tokens):
        logits = step_fn(torch.tensor(rows))
        for i, row in enumerate(rows):
            row.append(0 if eos_id in row[1:] else int(logits[i, -1].argmax()))
    return torch.tensor([row[1:] for row in rows])


def greedy_pads_with_zero(step_fn, batch_size, bos_id, eos_id, max_new_tokens):
    out = torch.zeros(batch_size, max_new_tokens, dtype=torch.long)  # the rest stays 0
    prefix = torch.full((batch_size, 1), bos_id)
    done = torch.zeros(batch_size, dtype=torch.bool)
    step = 0
    while step < max_new_tokens and not bool(done.all()):
        token = torch.where(done, eos_id, step_fn(prefix)[:, -1, :].argmax(-1))
        out[:, step] = token
        done = done | (token == eos_id)
        prefix = torch.cat([prefix, token[:, None]], dim=-1)
        step += 1
    return out


def greedy_forced_one_step_late(step_fn, batch_size, bos_id, eos_id, max_new_tokens):
    prefix = torch.full((batch_size, 1), bos_id)
    for _ in range(max_new_tokens):
        token = step_fn(prefix)[:, -1, :].argmax(-1)
        if prefix.shape[1] > 2:  # a row is finished when its eos is behind the last token
            finished = (prefix[:, 1:-1] == eos_id).any(dim=1)
            token = torch.where(finished, eos_id, token)
        prefix = torch.cat([prefix, token[:, None]], dim=-1)
    return prefix[:, 1:]


def greedy_finished_from_the_model(step_fn, batch_size, bos_id, eos_id, max_new_tokens):
    prefix = torch.full((batch_size, 1), bos_id)
    just_ended = torch.zeros(batch_size, dtype=torch.bool)
    for _ in range(max_new_tokens):
        best = step_fn(prefix)[:, -1, :].argmax(-1)
        prefix = torch.cat([prefix, torch.where(just_ended, eos_id, best)[:, None]], dim=-1)
        just_ended = best == eos_id
    return prefix[:, 1:]


def greedy_stops_at_the_first_eos(step_fn, batch_size, bos_id, eos_id, max_new_tokens):
    tokens = []
    prefix = torch.full((batch_size, 1), bos_id)
    for _ in range(max_new_tokens):
        token = step_fn(prefix)[:, -1, :].argmax(-1)
        tokens.append(token)
        prefix = torch.cat([prefix, token[:, None]], dim=-1)
        if (token == eos_id).any():
            break
    tokens += [torch.full((batch_size,), eos_id)] * (max_new_tokens - len(tokens))
    return torch.stack(tokens, dim=1)


def greedy_not_forced_but_stopping(step_fn, batch_size, bos_id, eos_id, max_new_tokens):
    prefix = torch.full((batch_size, 1), bos_id)
    for _ in range(max_new_tokens):
        if (prefix[:, 1:] == eos_id).any(dim=1).all():
            break
        prefix = torch.cat([prefix, step_fn(prefix)[:, -1:, :].argmax(-1)], dim=-1)
    rest = torch.full((batch_size, max_new_tokens + 1 - prefix.shape[1]), eos_id)
    return torch.cat([prefix[:, 1:], rest], dim=-1)


def ls_scatter_overwrites_the_target(logits, target, smoothing, ignore_index):
    vocab = logits.shape[-1]
    keep = target != ignore_index
    log_probs = logits[keep].log_softmax(dim=-1)  # (n_real, vocab)
    wanted = torch.full_like(log_probs, smoothing / vocab)
    wanted.scatter_(-1, target[keep].unsqueeze(-1), 1 - smoothing)  # overwrites smoothing / V
    return -(wanted * log_probs).sum(dim=-1).mean()


def ls_full_weight_on_the_target(logits, target, smoothing, ignore_index):
    keep = target != ignore_index
    log_probs = logits[keep].log_softmax(dim=-1)
    picked = log_probs[torch.arange(log_probs.shape[0]), target[keep]]
    return (-picked - smoothing * log_probs.mean(dim=-1)).mean()


def ls_minus_sign_lost(logits, target, smoothing, ignore_index):
    keep = target != ignore_index
    log_probs = logits[keep].log_softmax(dim=-1)
    picked = log_probs[torch.arange(log_probs.shape[0]), target[keep]]
    return (-(1 - smoothing) * picked + smoothing * log_probs.mean(dim=-1)).mean()


def ls_smoothing_term_over_every_position(logits, target, smoothing, ignore_index):
    keep = target != ignore_index
    log_probs = logits.log_softmax(dim=-1)
    picked = torch.where(keep, target, torch.zeros_like(target))
    nll = -log_probs.gather(-1, picked[..., None])[..., 0] * keep
    smooth = -log_probs.mean(dim=-1)  # pads not masked here
    return ((1 - smoothing) * nll.sum() + smoothing * smooth.sum()) / keep.sum()


def ls_smoothed_model_probabilities(logits, target, smoothing, ignore_index):
    keep = target != ignore_index
    probs = logits[keep].softmax(dim=-1)
    mixed = (1 - smoothing) * probs + smoothing / probs.shape[-1]
    return -mixed[torch.arange(probs.shape[0]), target[keep]].log().mean()


def ls_log_softmax_over_dim_one(logits, target, smoothing, ignore_index, dim=1):
    keep = (target != ignore_index).to(logits.dtype)
    log_probs = F.log_softmax(logits, dim)
    safe = torch.where(target == ignore_index, 0, target)
    nll = -torch.gather(log_probs, -1, safe.unsqueeze(-1)).squeeze(-1)
    per = (1 - smoothing) * nll - smoothing * log_probs.mean(-1)
    return (per * keep).sum() / keep.sum()


def ls_mean_per_sequence(logits, target, smoothing, ignore_index):
    keep = (target != ignore_index).to(logits.dtype)
    log_probs = logits.log_softmax(-1)
    safe = torch.where(target == ignore_index, 0, target)
    nll = -torch.gather(log_probs, -1, safe.unsqueeze(-1)).squeeze(-1)
    per = ((1 - smoothing) * nll - smoothing * log_probs.mean(-1)) * keep
    if per.dim() == 1:
        return per.sum() / keep.sum()
    return (per.sum(-1) / keep.sum(-1).clamp(min=1)).mean()


def noam_lr_counting_from_zero(step, d_model, warmup):
    step = step + 1  # "the first step is step 0"
    return (d_model**-0.5) * min(step**-0.5, step / warmup**1.5)


def noam_lr_one_step_behind(step, d_model, warmup):
    n = step - 1
    return d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)


def noam_lr_minus_one_half(step, d_model, warmup):
    return d_model**-1 / 2 * min(step**-1 / 2, step * warmup**-3 / 2)


def train_step_scored_on_its_input(
    model, optimizer, scheduler, src, tgt, bos_id, pad_id, smoothing=0.1, clip=1.0
):
    model.train()
    tgt_in = torch.cat([torch.full_like(tgt[:, :1], bos_id), tgt[:, :-1]], dim=1)
    optimizer.zero_grad()
    logits = model(src, tgt_in)
    loss = F.cross_entropy(
        logits.flatten(0, 1), tgt_in.flatten(), ignore_index=pad_id, label_smoothing=smoothing
    )
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return loss.item()


def train_step_shifted_in_pad(
    model, optimizer, scheduler, src, tgt, bos_id, pad_id, smoothing=0.1, clip=1.0
):
    model.train()
    tgt_in = torch.full_like(tgt, pad_id)
    tgt_in[:, 1:] = tgt[:, :-1]
    optimizer.zero_grad()
    logits = model(src, tgt_in)
    loss = F.cross_entropy(
        logits.flatten(0, 1), tgt.flatten(), ignore_index=pad_id, label_smoothing=smoothing
    )
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return loss.item()


def ls_mask_of_the_pads(logits, target, smoothing, ignore_index):
    mask = target == ignore_index  # #33 hunt: True at the pads, then used as "keep"
    safe = target.masked_fill(~mask, 0)
    log_probs = logits.log_softmax(dim=-1)
    nll = -log_probs.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    per_token = (1 - smoothing) * nll + smoothing * -log_probs.mean(dim=-1)
    return (per_token * mask).sum() / mask.sum()


def _step_with_loss(loss_of, swapped=False, twice=False):
    """A learner's train_step whose loss line is `loss_of(logits, tgt, smoothing, pad_id)`;
    `swapped`: the model called as model(tgt_in, src); `twice`: the loss taken on a second
    forward pass."""

    def step(model, optimizer, scheduler, src, tgt, bos_id, pad_id, smoothing=0.1, clip=1.0):
        model.train()
        tgt_in = torch.cat([torch.full_like(tgt[:, :1], bos_id), tgt[:, :-1]], dim=1)
        logits = model(tgt_in, src) if swapped else model(src, tgt_in)
        logits = model(src, tgt_in) if twice else logits  # other dropout masks
        loss = loss_of(logits.flatten(0, 1), tgt.flatten(), smoothing, pad_id)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        return loss.item()

    return step


def test_a_step_that_runs_the_model_twice_is_named():
    # #hunt19: logits = model(...) then the loss of a second model(...) failed only in the
    # dropout case, with the bare "the loss returned by step 1 is ..., expected ..."
    def loss_of(logits, tgt, smoothing, pad_id):
        return F.cross_entropy(logits, tgt, ignore_index=pad_id, label_smoothing=smoothing)

    assert check_result("ex08.train_step", _step_with_loss(loss_of)).status == "passed"
    result = check_result("ex08.train_step", _step_with_loss(loss_of, twice=True))
    assert result.status == "failed", result.feedback
    assert f"Hint: {ex08.train_step.MISTAKES['two_forwards']}" in result.feedback, result.feedback


def ls_gather_along_dim_two(logits, target, smoothing, ignore_index):
    log_probs = logits.log_softmax(dim=-1)  # #33 hunt: the right axis here, dim=2 in gather
    keep = target != ignore_index
    nll = -log_probs.gather(2, target.masked_fill(~keep, 0).unsqueeze(-1)).squeeze(-1)
    per_token = (1 - smoothing) * nll + smoothing * -log_probs.mean(dim=-1)
    return (per_token * keep).sum() / keep.sum()


# #33 hunt: ignore_index=0 written in (passed the notebook: its only pad_id != 0 had no padding)
train_step_ignoring_id_0 = _step_with_loss(
    lambda logits, tgt, smoothing, pad_id: F.cross_entropy(
        logits, tgt, ignore_index=0, label_smoothing=smoothing
    )
)
# #33 hunt: the smoothing argument not passed on to the loss (0.1 written in)
train_step_smoothing_0_1 = _step_with_loss(
    lambda logits, tgt, smoothing, pad_id: F.cross_entropy(
        logits, tgt, ignore_index=pad_id, label_smoothing=0.1
    )
)


def shift_right_in_place_on_a_copy(targets, bos_id):
    out = targets.clone()
    out[:, 1:] = out[:, :-1]  # reads what it has just written
    out[:, 0] = bos_id
    return out


def ls_of_a_learner(slip):
    """#hunt2: a learner's label smoothing whose one slip is `slip`."""

    def loss(logits, target, smoothing, ignore_index, unsqueezed=True):
        keep = target != ignore_index
        log_probs = logits.log_softmax(dim=-1)
        log_probs = logits.softmax(-1).log() if slip == "log of softmax" else log_probs  # #hunt5
        picked = logits if slip == "gathered from the logits" else log_probs
        index = target.masked_fill(~keep, 0)
        nll = -picked.gather(-1, index.unsqueeze(-1) if unsqueezed else index)
        nll = nll if slip == "not squeezed" else nll.squeeze(-1)
        uniform = -(logits if slip == "mean of the logits" else log_probs).mean(dim=-1)
        uniform = -log_probs.mean(dim=-1, keepdim=True) if slip == "keepdim" else uniform
        uniform = uniform.detach() if slip == "detached" else uniform  # #hunt5: the value only
        weights = (smoothing, 1 - smoothing) if slip == "swapped" else (1 - smoothing, smoothing)
        if slip == "uniform over every position":  # #hunt3: the two terms averaged apart
            return weights[0] * (nll * keep).sum() / keep.sum() + weights[1] * uniform.mean()
        per_token = weights[0] * nll + weights[1] * uniform
        return (per_token * keep).sum() / keep.sum()

    return loss


def train_step_of_a_learner(slip):
    """#hunt2: a learner's train_step whose one slip is `slip`."""

    def step(model, optimizer, scheduler, src, tgt, bos_id, pad_id, smoothing=0.1, clip=1.0):
        if slip != "no train":  # the model may arrive in eval mode
            model.train()
        tgt_in = torch.cat([torch.full_like(tgt[:, :1], bos_id), tgt[:, :-1]], dim=1)
        if slip == "sliced":  # #hunt3: the other tutorials' convention, for a tgt with <bos>
            tgt_in, tgt = tgt[:, :-1], tgt[:, 1:]
        logits = model(src, tgt_in)
        if slip == "double shift":  # #hunt4: a language model's shift, on a shifted input
            logits, tgt = logits[:, :-1], tgt[:, 1:]
        if slip != "classes last":
            logits, tgt = logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1)
        if slip == "args swapped":  # #hunt4: their own loss, in train_step's (pad_id, smoothing)
            loss = label_smoothing_by_distribution(logits, tgt, pad_id, smoothing)
        else:
            loss = F.cross_entropy(logits, tgt, ignore_index=pad_id, label_smoothing=smoothing)
        if slip == "float32 loss":  # #hunt6: "2.70303, expected 2.70303" on a float64 model
            loss = F.cross_entropy(
                logits.float(), tgt, ignore_index=pad_id, label_smoothing=smoothing
            )
        optimizer.zero_grad()
        loss.backward()
        if slip == "by value":
            torch.nn.utils.clip_grad_value_(model.parameters(), clip)
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        if scheduler is not None or slip == "None stepped":
            scheduler.step()
        if slip == "loss after the step":  # #hunt5: the updated model's loss got no hint
            with torch.no_grad():
                out = model(src, tgt_in).reshape(-1, logits.shape[-1])
                loss = F.cross_entropy(out, tgt, ignore_index=pad_id, label_smoothing=smoothing)
        return loss.item()

    return step


def greedy_argmax_without_dim(step_fn, batch_size, bos_id, eos_id, max_new_tokens):  # #hunt6
    prefix = torch.full((batch_size, 1), bos_id, dtype=torch.long)
    finished = torch.zeros(batch_size, dtype=torch.bool)
    for _ in range(max_new_tokens):
        token = torch.where(finished, eos_id, step_fn(prefix)[:, -1].argmax())
        finished = finished | (token == eos_id)
        prefix = torch.cat([prefix, token[:, None]], dim=1)
    return prefix[:, 1:]


def greedy_of_one_row(step_fn, batch_size, bos_id, eos_id, max_new_tokens, *, row):
    """Eighth round: one row decoded and copied to the batch ('None of the usual' before);
    row None: the whole batch decoded, then row 0 of the result expanded."""
    prefix = torch.full((batch_size, 1), bos_id, dtype=torch.long)
    finished = torch.zeros(batch_size, dtype=torch.bool)
    for _ in range(max_new_tokens):
        logits = step_fn(prefix)
        token = logits[:, -1].argmax(dim=-1) if row is None else logits[row, -1].argmax()
        token = token.expand(batch_size).masked_fill(finished, eos_id)
        prefix = torch.cat([prefix, token[:, None]], dim=1)
        finished = finished | (token == eos_id)
    return prefix[:1, 1:].expand(batch_size, -1) if row is None else prefix[:, 1:]


def greedy_with_a_column_of_logits(step_fn, batch_size, bos_id, eos_id, max_new_tokens):
    prefix = torch.full((batch_size, 1), bos_id, dtype=torch.long)
    finished = torch.zeros(batch_size, dtype=torch.bool)
    for _ in range(max_new_tokens):
        token = step_fn(prefix)[:, -1:].argmax(dim=-1)  # (batch, 1): with keepdim's slice
        token = token.masked_fill(finished, eos_id)  # (batch, batch)
        prefix = torch.cat([prefix, token], dim=1)
        finished = finished | (token == eos_id)
    return prefix[:, 1:]


def shift_right_without_its_bos(targets, bos_id):
    out = targets.clone()
    out[:, 1:] = targets[:, :-1]
    return out


def train_step_summing_its_loss(
    model, optimizer, scheduler, src, tgt, bos_id, pad_id, smoothing=0.1, clip=1.0
):
    model.train()
    optimizer.zero_grad()
    logits = model(src, torch.cat([torch.full_like(tgt[:, :1], bos_id), tgt[:, :-1]], dim=1))
    loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),
        tgt.reshape(-1),
        ignore_index=pad_id,
        label_smoothing=smoothing,
        reduction="sum",
    )
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return loss.item()


def greedy_of_a_float_prefix(step_fn, batch_size, bos_id, eos_id, max_new_tokens, *, values=False):
    """torch.ones(...) * bos_id (float) as the prefix, or the scores of max(dim=-1)[0] cast to
    ids. #hunt-f08: the float prefix, cast to long at the end, passed 7/7 and then crashed in
    the model's embedding; the cast scores got "None of the usual single mistakes"."""
    prefix = torch.ones(batch_size, 1) * bos_id  # float32
    finished = torch.zeros(batch_size, dtype=torch.bool)
    for _ in range(max_new_tokens):
        scores = step_fn(prefix.long() if values else prefix)[:, -1]
        token = scores.max(dim=-1)[0].long() if values else scores.argmax(dim=-1)
        token = torch.where(finished, torch.full_like(token, eos_id), token)
        finished = finished | (token == eos_id)
        prefix = torch.cat([prefix, token[:, None]], dim=1)
    return prefix[:, 1:].long()


def greedy_counting_bos(step_fn, batch_size, bos_id, eos_id, max_new_tokens):
    prefix = torch.full((batch_size, 1), bos_id, dtype=torch.long)
    finished = torch.zeros(batch_size, dtype=torch.bool)
    while prefix.shape[1] < max_new_tokens:  # #hunt4: <bos> counted among the new tokens
        token = step_fn(prefix)[:, -1].argmax(dim=-1).masked_fill(finished, eos_id)
        prefix = torch.cat([prefix, token[:, None]], dim=1)
        finished = finished | (token == eos_id)
    return prefix[:, 1:]


def greedy_finished_from_the_whole_prefix(step_fn, batch_size, bos_id, eos_id, max_new_tokens):
    prefix = torch.full((batch_size, 1), bos_id, dtype=torch.long)
    for _ in range(max_new_tokens):  # #hunt7: <bos> read as a produced eos when bos_id == eos_id
        finished = (prefix == eos_id).any(dim=1)
        token = step_fn(prefix)[:, -1].argmax(dim=-1).masked_fill(finished, eos_id)
        prefix = torch.cat([prefix, token[:, None]], dim=1)
    return prefix[:, 1:]


FOUND_LATER = [
    ("ex08.greedy_decode", greedy_with_a_column_of_logits, "appends ONE token to every row"),
    ("ex08.greedy_decode", greedy_counting_bos, "one token short"),
    ("ex08.greedy_decode", greedy_writes_zero_after_eos, "keeps emitting eos_id itself, not 0"),
    ("ex08.greedy_decode", greedy_pads_with_zero, "fill the remaining positions with eos_id"),
    ("ex08.greedy_decode", greedy_forced_one_step_late, "one more of the model's tokens"),
    ("ex08.greedy_decode", greedy_finished_from_the_model, "went back to the model's tokens"),
    ("ex08.greedy_decode", greedy_stops_at_the_first_eos, "as soon as ONE row finished"),
    ("ex08.greedy_decode", greedy_not_forced_but_stopping, "it must keep emitting eos_id"),
    ("ex08.greedy_decode", greedy_finished_from_the_whole_prefix, "<bos> is not a generated"),
    ("ex08.label_smoothing_loss", ls_scatter_overwrites_the_target, "do not write it over"),
    ("ex08.label_smoothing_loss", ls_full_weight_on_the_target, "weighted by 1 - smoothing"),
    ("ex08.label_smoothing_loss", ls_minus_sign_lost, "mind the sign"),
    (
        "ex08.label_smoothing_loss",
        ls_smoothing_term_over_every_position,
        "still count in the smoothing term",
    ),
    ("ex08.label_smoothing_loss", ls_smoothed_model_probabilities, "model's probabilities"),
    ("ex08.label_smoothing_loss", ls_log_softmax_over_dim_one, "log_softmax over dim=1"),
    ("ex08.label_smoothing_loss", ls_mean_per_sequence, "averaged the loss of each sequence"),
    (
        "ex08.shift_right",
        lambda targets, bos_id: F.pad(targets[:, :-1], (1, 0)),
        "bos_id, not 0",
    ),
    ("ex08.shift_right", lambda targets, bos_id: torch.roll(targets, 1), "torch.roll moves"),
    (
        "ex08.shift_right",
        lambda targets, bos_id: torch.cat([torch.full_like(targets[:1], bos_id), targets[:-1]]),
        "along the batch axis",
    ),
    ("ex08.noam_lr", noam_lr_counting_from_zero, "one step ahead"),
    ("ex08.noam_lr", noam_lr_one_step_behind, "step - 1 is 0 at the first step"),
    ("ex08.noam_lr", noam_lr_minus_one_half, "** binds tighter than /"),
    ("ex08.train_step", train_step_scored_on_its_input, "against the decoder's input"),
    ("ex08.train_step", train_step_shifted_in_pad, "starts with bos_id, not pad_id"),
    ("ex08.label_smoothing_loss", ls_mask_of_the_pads, "your mask is inverted"),
    ("ex08.label_smoothing_loss", ls_gather_along_dim_two, "gather along dim=-1 too"),
    ("ex08.train_step", train_step_ignoring_id_0, "instead of the pad_id argument"),
    ("ex08.train_step", train_step_smoothing_0_1, "use the smoothing argument"),
    # a numpy scalar was shown as "{'__repr__': '<float32>'}"
    (
        "ex08.noam_lr",
        lambda step, d_model, warmup: np.float32(
            d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
        ),
        "is a float32, not a Python float",
    ),
    # #hunt2: warmup**1.5 (a positive exponent) was told it "left out the warm-up"
    (
        "ex08.noam_lr",
        lambda step, d_model, warmup: d_model**-0.5 * min(step**-0.5, step * warmup**1.5),
        "not warmup^1.5",
    ),
    ("ex08.label_smoothing_loss", ls_of_a_learner("swapped"), "the two weights are swapped"),
    ("ex08.label_smoothing_loss", ls_of_a_learner("gathered from the logits"), "raw logits; ga"),
    ("ex08.label_smoothing_loss", ls_of_a_learner("mean of the logits"), "mean of the raw logits"),
    ("ex08.label_smoothing_loss", ls_of_a_learner("not squeezed"), "squeeze(-1) it"),
    ("ex08.label_smoothing_loss", ls_of_a_learner("keepdim"), "is (...) without keepdim"),
    (
        "ex08.shift_right",
        lambda targets, bos_id: torch.cat(
            [torch.full_like(targets[:, :1], bos_id), targets[:, :-1]]
        ),
        "torch.cat joins along dim 0",
    ),
    ("ex08.train_step", train_step_of_a_learner("None stepped"), "scheduler may be None"),
    ("ex08.train_step", train_step_of_a_learner("classes last"), "reads the classes on dim 1"),
    # passed 8/8: every case handed over a model in training mode
    ("ex08.train_step", train_step_of_a_learner("no train"), "may arrive in eval mode"),
    ("ex08.train_step", train_step_of_a_learner("by value"), "clip_grad_value_ clips each entry"),
    (
        "ex08.label_smoothing_loss",
        ls_of_a_learner("uniform over every position"),
        "still count in the smoothing term",
    ),
    ("ex08.train_step", train_step_of_a_learner("sliced"), "tgt does not start with <bos>"),
    ("ex08.train_step", train_step_of_a_learner("double shift"), "you shifted twice"),
    ("ex08.train_step", train_step_of_a_learner("args swapped"), "pad_id and smoothing in tra"),
    # #hunt3: the lesson's formula copied with its factor (0.7, the recipe's) got no hint at all
    (
        "ex08.noam_lr",
        lambda step, d_model, warmup: 0.7 * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5),
        "the task's formula has no factor",
    ),
    # #hunt4: the lesson's d_model=64 hard-coded was told "the task's formula has no factor"
    (
        "ex08.noam_lr",
        lambda step, d_model, warmup: 64**-0.5 * min(step**-0.5, step * warmup**-1.5),
        "those of d_model=64, the lesson's",
    ),
    # #hunt4: F.log_softmax(logits) without dim= (dim 0 on 3-D logits) got no hint
    (
        "ex08.label_smoothing_loss",
        lambda logits, target, smoothing, ignore_index: ls_log_softmax_over_dim_one(
            logits, target, smoothing, ignore_index, dim=None
        ),
        "log_softmax without dim=",
    ),
    # #hunt5: a detached smoothing term (right value, wrong gradient) passed 6/6
    ("ex08.label_smoothing_loss", ls_of_a_learner("detached"), "no gradient flows through it"),
    # #hunt5: softmax(...).log() (-inf where a probability underflows) passed 6/6
    ("ex08.label_smoothing_loss", ls_of_a_learner("log of softmax"), "gives log(0) = -inf"),
    # #hunt5: d_model ** (-1 // 2) (that is d_model^-1) was told "the formula has no factor"
    (
        "ex08.noam_lr",
        lambda step, d_model, warmup: d_model ** (-1 // 2) * min(step**-0.5, step * warmup**-1.5),
        "not 1 / d_model",
    ),
    # #hunt5: a shift in place on a copy (out[:, 1:] = out[:, :-1]) got "None of the usual..."
    ("ex08.shift_right", shift_right_in_place_on_a_copy, "overlapping view of itself"),
    ("ex08.train_step", train_step_of_a_learner("loss after the step"), "not a loss computed"),
    ("ex08.train_step", train_step_of_a_learner("float32 loss"), "no .float() on the logits"),
    # #hunt6: argmax() without dim= got "None of the usual single mistakes"
    ("ex08.greedy_decode", greedy_argmax_without_dim, "argmax without dim= returns one index"),
    *(
        ("ex08.greedy_decode", partial(greedy_of_one_row, row=row), "decodes one row alone")
        for row in (0, -1, None)
    ),
    # #hunt-f08: d_model**-0.5 inside the min, on the decay term only, got no hint
    (
        "ex08.noam_lr",
        lambda step, d_model, warmup: min(d_model**-0.5 * step**-0.5, step * warmup**-1.5),
        "multiplies only one term inside your min",
    ),
    # #hunt-f08: a copy shifted without bos_id written in (its first column kept) got "None of..."
    ("ex08.shift_right", shift_right_without_its_bos, "put bos_id in the first column too"),
    # #hunt-f08: logits.float() was told "a tensor you create gets PyTorch's default dtype"
    (
        "ex08.label_smoothing_loss",
        lambda logits, target, smoothing, ignore_index: ls_of_a_learner("")(
            logits.float(), target, smoothing, ignore_index
        ),
        "with no .float() on the logits",
    ),
    # #hunt-f08: F.cross_entropy(..., reduction="sum") in the step got no hint
    ("ex08.train_step", train_step_summing_its_loss, "it is their mean"),
    # #hunt-f08: a float prefix passed 7/7 (the real model's embedding rejects float ids)
    ("ex08.greedy_decode", greedy_of_a_float_prefix, "step_fn takes token ids, a long tensor"),
    (
        "ex08.greedy_decode",
        partial(greedy_of_a_float_prefix, values=True),
        "is the largest score, not the token",
    ),
    # #hunt5: the lesson's warmup (100) hard-coded got no hint
    (
        "ex08.noam_lr",
        lambda step, d_model, warmup: d_model**-0.5 * min(step**-0.5, step * 100**-1.5),
        "warmup=100, the lesson's",
    ),
]


def test_the_learner_of_the_second_hunt_passes_without_a_slip():
    assert status("ex08.label_smoothing_loss", ls_of_a_learner("")).status == "passed"
    assert status("ex08.train_step", train_step_of_a_learner("")).status == "passed"


@pytest.mark.parametrize(
    ("task_id", "impl", "hint"),
    FOUND_LATER,
    ids=[f"{t}-{getattr(f, '__name__', 'lambda')}-{i}" for i, (t, f, _) in enumerate(FOUND_LATER)],
)
def test_single_mistakes_found_later_get_their_hint(task_id, impl, hint):
    result = status(task_id, impl)
    assert result.status == "failed", result.feedback
    assert hint in result.feedback, result.feedback
    assert "more than one thing" not in result.feedback


def test_greedy_tokens_after_eos_are_eos_by_the_statement():
    # "from then on it keeps emitting eos_id": not a pad id, not the model's tokens
    task = get_task("ex08.greedy_decode")
    for case in task.cases(torch.Generator().manual_seed(0)):
        got = task.call(greedy_decode, case)
        eos = case.data["eos_id"]
        seen = (got == eos).long().cummax(dim=1).values.bool()
        assert bool((got[seen] == eos).all())


# ---- hunt T10: every case is one the statement announces ----------------------------------------


def greedy_unfinished_rows_only(step_fn, batch_size, bos_id, eos_id, max_new_tokens):
    """Right for a real model: only the unfinished rows go through step_fn."""
    prefix = torch.full((batch_size, 1), bos_id, dtype=torch.long)
    finished = torch.zeros(batch_size, dtype=torch.bool)
    for _ in range(max_new_tokens):
        next_token = torch.full((batch_size,), eos_id, dtype=torch.long)
        if (~finished).any():
            next_token[~finished] = step_fn(prefix[~finished])[:, -1].argmax(dim=-1)
        prefix = torch.cat([prefix, next_token[:, None]], dim=1)
        finished |= next_token == eos_id
    return prefix[:, 1:]


def greedy_finished_from_the_prefix(step_fn, batch_size, bos_id, eos_id, max_new_tokens):
    """Finished rows read from the whole prefix, <bos> included."""
    prefix = torch.full((batch_size, 1), bos_id, dtype=torch.long)
    for _ in range(max_new_tokens):
        finished = (prefix == eos_id).any(dim=1)
        next_token = step_fn(prefix)[:, -1].argmax(dim=-1).masked_fill(finished, eos_id)
        prefix = torch.cat([prefix, next_token[:, None]], dim=1)
    return prefix[:, 1:]


def test_the_greedy_statement_announces_the_whole_batch_and_bos_equal_to_eos():
    # each lost checks the statement did not announce: the check's step_fn takes the whole
    # batch only (4 of 7), and one case has bos_id == eos_id (6 of 7)
    statement = task_statement("08_training_an_encoder_decoder.ipynb", "Task 4: greedy")
    result = status("ex08.greedy_decode", greedy_unfinished_rows_only)
    assert result.status == "failed" and "batch=4 rows, got 3" in result.feedback, result.feedback
    assert "Call it on the whole batch every time, finished rows too" in statement
    result = status("ex08.greedy_decode", greedy_finished_from_the_prefix)
    assert result.status == "failed" and "bos_id == eos_id" in result.feedback, result.feedback
    assert "`<bos>` is not produced: `bos_id` may equal `eos_id`" in statement


def _greedy_bos_in_the_first_row(step_fn, batch_size, bos_id, eos_id, max_new_tokens):
    """out[0] = bos_id: the first ROW of a preallocated output, not its first column."""
    out = torch.full((batch_size, max_new_tokens + 1), eos_id, dtype=torch.long)
    out[0] = bos_id
    finished = torch.zeros(batch_size, dtype=torch.bool)
    for t in range(max_new_tokens):
        next_token = step_fn(out[:, : t + 1])[:, -1].argmax(dim=-1).masked_fill(finished, eos_id)
        out[:, t + 1] = next_token
        finished |= next_token == eos_id
    return out[:, 1:]


def _noam_rise_swapped(step, d_model, warmup):
    return d_model**-0.5 * min(step**-0.5, warmup * step**-1.5)


@pytest.mark.parametrize(
    "task_id, impl, words",
    [
        ("ex08.greedy_decode", _greedy_bos_in_the_first_row, "out[0] = bos_id fills the first row"),
        ("ex08.noam_lr", _noam_rise_swapped, "warmup * step**-1.5 falls"),
        (
            "ex08.train_step",
            _step_with_loss(
                lambda logits, tgt, smoothing, pad_id: F.cross_entropy(
                    logits, tgt, ignore_index=pad_id, label_smoothing=smoothing
                ),
                swapped=True,
            ),
            "model(src, tgt_in): swapped",
        ),
    ],
)
def test_rarer_slips_get_their_own_hint(task_id, impl, words):
    """The rarer slips the last fresh learner left with a bare message or the generic one."""
    result = check_result(task_id, impl)
    assert result.status == "failed" and words in result.feedback, result.feedback
    assert ".. Hint" not in result.feedback  # an error's own full stop is not doubled


# ---- hunt R12: a greedy decoder that samples ----------------------------------------------


def _greedy_sampling(draw):
    def greedy_decode(step_fn, batch_size, bos_id, eos_id, max_new_tokens):
        prefix = torch.full((batch_size, 1), bos_id, dtype=torch.long)
        done = torch.zeros(batch_size, dtype=torch.bool)
        for _ in range(max_new_tokens):
            token = draw(step_fn(prefix)[:, -1, :]).masked_fill(done, eos_id)
            done = done | (token == eos_id)
            prefix = torch.cat([prefix, token[:, None]], dim=1)
        return prefix[:, 1:]

    return greedy_decode


@pytest.mark.parametrize(
    "draw",
    [
        lambda logits: torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)[:, 0],
        lambda logits: torch.distributions.Categorical(logits=logits).sample(),
    ],
)
def test_a_greedy_decoder_that_samples_is_named_the_same_on_every_run(draw):
    # R12 hunt: random tokens got 'None of the usual single mistakes' (and a score that
    # changed from run to run); the check now draws from a seeded global stream
    torch.manual_seed(123)
    first = status("ex08.greedy_decode", _greedy_sampling(draw))
    torch.manual_seed(456)
    second = status("ex08.greedy_decode", _greedy_sampling(draw))
    assert first.status == "failed" and "greedy decoding takes the most likely token" in (
        first.feedback
    ), first.feedback
    assert (first.score, first.feedback) == (second.score, second.feedback)
    assert status("ex08.greedy_decode", _greedy_sampling(lambda s: s.argmax(-1))).status == (
        "passed"
    )


# ---- second fresh reader of set 08 -------------------------------------------------------------


def _shift_right_bos_in_row_0(targets, bos_id, *, first):
    """out[0] = bos_id: the first ROW, set before or after the shift, on a clone or on zeros."""
    out = torch.zeros_like(targets) if first else targets.clone()
    if first:
        out[0] = bos_id
    out[:, 1:] = targets[:, :-1]
    if not first:
        out[0] = bos_id
    return out


def _greedy_prefix_never_grown(step_fn, batch_size, bos_id, eos_id, max_new_tokens):
    """torch.cat's result not assigned back: step_fn sees <bos> alone at every step."""
    prefix = torch.full((batch_size, 1), bos_id, dtype=torch.long)
    finished = torch.zeros(batch_size, dtype=torch.bool)
    tokens = []
    for _ in range(max_new_tokens):
        next_token = step_fn(prefix)[:, -1].argmax(dim=-1).masked_fill(finished, eos_id)
        finished |= next_token == eos_id
        tokens.append(next_token)
        torch.cat([prefix, next_token[:, None]], dim=1)
    return torch.stack(tokens, dim=1)


def _train_step_with(slip):
    """A learner's step with one slip: "train late" (model.train() after the forward pass, so a
    model that arrived in eval mode ran without dropout; passed 9/9, the graded models had no
    dropout), "bos 1" (the lesson's <bos> id written in; no hint), "no_grad" (the forward under
    torch.no_grad(): a bare RuntimeError with the traceback advice) or "per row" (the summed
    loss over the batch size, a loss per sequence: 'the loss returned is 12.6, expected 2.70',
    no hint); or the right "reads the rate" (scheduler.get_last_lr(), to print it)."""

    def step(model, optimizer, scheduler, src, tgt, bos_id, pad_id, smoothing=0.1, clip=1.0):
        if slip != "train late":
            model.train()
        first = torch.full_like(tgt[:, :1], 1 if slip == "bos 1" else bos_id)
        with torch.set_grad_enabled(slip != "no_grad"):
            logits = model(src, torch.cat([first, tgt[:, :-1]], dim=1))
        model.train()
        loss = F.cross_entropy(
            logits.flatten(0, 1),
            tgt.flatten(),
            ignore_index=pad_id,
            label_smoothing=smoothing,
            reduction="sum" if slip == "per row" else "mean",
        )
        loss = loss / tgt.shape[0] if slip == "per row" else loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
            if slip == "reads the rate":
                assert scheduler.get_last_lr()[0] == optimizer.param_groups[0]["lr"]
                assert scheduler.last_epoch >= 1
        return loss.item()

    return step


@pytest.mark.parametrize(
    "task_id, impl, words",
    [
        # d_model ** -1/2 alone was told "the task's formula has no factor"
        (
            "ex08.noam_lr",
            lambda step, d_model, warmup: d_model**-1 / 2 * min(step**-0.5, step * warmup**-1.5),
            "** binds tighter than /",
        ),
        # the same slip on one term of the min got no hint
        (
            "ex08.noam_lr",
            lambda step, d_model, warmup: d_model**-0.5 * min(step**-1 / 2, step * warmup**-1.5),
            "** binds tighter than /",
        ),
        (
            "ex08.noam_lr",
            lambda step, d_model, warmup: d_model**-0.5 * min(step**-0.5, step * warmup**-3 / 2),
            "** binds tighter than /",
        ),
        # out[0] = bos_id got "None of the usual single mistakes" in every form
        *(
            ("ex08.shift_right", partial(_shift_right_bos_in_row_0, first=first), "first ROW")
            for first in (True, False)
        ),
        (
            "ex08.shift_right",
            lambda targets, bos_id: targets.roll(1, dims=1).index_fill(
                0, torch.tensor([0]), bos_id
            ),
            "first ROW",
        ),
        # a prefix never grown was told it "used the logits of the first position"
        ("ex08.greedy_decode", _greedy_prefix_never_grown, "assign it back"),
        ("ex08.train_step", _train_step_with("train late"), "model.train() came after the forward"),
        ("ex08.train_step", _train_step_with("bos 1"), "use the bos_id argument"),
    ],
)
def test_slips_of_the_second_fresh_reader_get_their_hint(task_id, impl, words):
    result = check_result(task_id, impl)
    assert result.status == "failed" and words in result.feedback, result.feedback
    assert "no factor" not in result.feedback and "more than one thing" not in result.feedback


def test_a_train_step_that_writes_into_tgt_is_told_so():
    # tgt[tgt == pad_id] = -100 (for F.cross_entropy's default ignore_index) wrote into the
    # case's own tgt, and the reference that ran next crashed: "the checker could not run"
    def step(model, optimizer, scheduler, src, tgt, bos_id, pad_id, smoothing=0.1, clip=1.0):
        model.train()
        logits = model(src, torch.cat([torch.full_like(tgt[:, :1], bos_id), tgt[:, :-1]], dim=1))
        tgt[tgt == pad_id] = -100
        loss = F.cross_entropy(logits.flatten(0, 1), tgt.flatten(), label_smoothing=smoothing)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        return loss.item()

    result = check_result("ex08.train_step", step)
    assert not isinstance(result, str), result
    assert result.status == "failed" and "changed its input `tgt` in place" in result.feedback


# ---- #hunt-f08 (third reader): slips of order, of a name passed on, of the pad column ----------


def _ls_smoothed_target(logits, target, smoothing, ignore_index, *, pad_column="", kl=False):
    """A learner's label smoothing built as a target distribution. pad_column: "zeroed"
    (F.cross_entropy's target with the pad column set to 0, as the lesson says the Annotated
    Transformer does), "spread" (smoothing / (vocab - 1) on every class but <pad>) or
    "annotated" (the Annotated Transformer's: 1 - smoothing on the answer, smoothing /
    (vocab - 2) on the others, the pad column zeroed); kl: F.kl_div instead of the
    cross-entropy. Each got "None of the usual single mistakes"."""
    vocab = logits.shape[-1]
    keep = target != ignore_index
    safe = target.masked_fill(~keep, 0)
    log_probs = logits.log_softmax(dim=-1)
    off = {"spread": vocab - 1, "annotated": vocab - 2}.get(pad_column, vocab)
    dist = torch.full_like(log_probs, smoothing / off)
    on = 1 - smoothing + (0 if pad_column == "annotated" else smoothing / off)
    dist = dist.scatter(-1, safe.unsqueeze(-1), on)
    if pad_column and 0 <= ignore_index < vocab:
        dist[..., ignore_index] = 0
    if kl:
        per = F.kl_div(log_probs, dist, reduction="none").sum(dim=-1)
    else:
        per = -(dist * log_probs).sum(dim=-1)
    return per[keep].mean()


def _ls_vocab_from_dim_1(logits, target, smoothing, ignore_index):
    log_probs = logits.log_softmax(dim=-1)
    keep = target != ignore_index
    nll = -log_probs.gather(-1, target.masked_fill(~keep, 0).unsqueeze(-1)).squeeze(-1)
    uniform = -log_probs.sum(dim=-1) / logits.size(1)  # the sequence length of 3-D logits
    return ((1 - smoothing) * nll + smoothing * uniform)[keep].mean()


def _ls_nll_detached(logits, target, smoothing, ignore_index):
    log_probs = logits.log_softmax(dim=-1)
    keep = target != ignore_index
    picked = log_probs.detach().gather(-1, target.masked_fill(~keep, 0).unsqueeze(-1))
    per = (1 - smoothing) * -picked.squeeze(-1) - smoothing * log_probs.mean(dim=-1)
    return per[keep].mean()


def _ls_mask_after_the_replacement(logits, target, smoothing, ignore_index):
    """Two right steps in the wrong order: the ignored targets replaced by 0 first, the mask
    built after, so that it keeps every position; told 'their loss must be left out ...
    (target != ignore_index)', which the learner believed they had written."""
    target = target.masked_fill(target == ignore_index, 0)
    keep = target != ignore_index
    log_probs = logits.log_softmax(dim=-1)
    nll = -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    return ((1 - smoothing) * nll - smoothing * log_probs.mean(dim=-1))[keep].mean()


def _greedy_with(slip):
    """A learner's greedy decoder: "precedence" (finished | token == eos_id, which Python reads
    as (finished | token) == eos_id) or "bos forced" (finished rows forced to bos_id)."""

    def decode(step_fn, batch_size, bos_id, eos_id, max_new_tokens):
        prefix = torch.full((batch_size, 1), bos_id, dtype=torch.long)
        finished = torch.zeros(batch_size, dtype=torch.bool)
        for _ in range(max_new_tokens):
            token = step_fn(prefix)[:, -1].argmax(dim=-1)
            token = token.masked_fill(finished, bos_id if slip == "bos forced" else eos_id)
            if slip == "precedence":
                finished = finished | token == eos_id
            else:
                finished = finished | (token == eos_id)
            prefix = torch.cat([prefix, token[:, None]], dim=1)
        return prefix[:, 1:]

    return decode


HUNT_F08 = [
    # min(step, warmup) * warmup**-1.5: the rate stays at its peak (no hint)
    (
        "ex08.noam_lr",
        lambda step, d_model, warmup: d_model**-0.5 * min(step, warmup) * warmup**-1.5,
        "you left out the decay",
    ),
    # the linear rise written step / warmup (no hint)
    (
        "ex08.noam_lr",
        lambda step, d_model, warmup: d_model**-0.5 * min(step**-0.5, step / warmup),
        "not step / warmup",
    ),
    *(
        (
            "ex08.label_smoothing_loss",
            partial(_ls_smoothed_target, pad_column=pad_column),
            "the smoothing goes on EVERY class, <pad> included",
        )
        for pad_column in ("zeroed", "spread", "annotated")
    ),
    ("ex08.label_smoothing_loss", partial(_ls_smoothed_target, kl=True), "the KL divergence"),
    ("ex08.label_smoothing_loss", _ls_vocab_from_dim_1, "logits.shape[1] is the sequence"),
    ("ex08.label_smoothing_loss", _ls_mask_after_the_replacement, "before any replacement"),
    # gather(-1, target) without unsqueeze: a bare "Index tensor must have the same number of
    # dimensions as input tensor" and the traceback advice
    (
        "ex08.label_smoothing_loss",
        lambda logits, target, smoothing, ignore_index: ls_of_a_learner("")(
            logits, target, smoothing, ignore_index, unsqueezed=False
        ),
        "pass target.unsqueeze(-1)",
    ),
    # a detached NLL term was told "None of the usual" (only the smoothing term's had a row)
    ("ex08.label_smoothing_loss", _ls_nll_detached, "a term of your loss is detached"),
    # torch.cat([bos, targets], 1)[:, 1:] (or F.pad(targets, (1, 0))[:, 1:]) returns targets
    (
        "ex08.shift_right",
        lambda targets, bos_id: torch.cat([torch.full_like(targets[:, :1], bos_id), targets], 1)[
            :, 1:
        ],
        "your result is targets itself",
    ),
    ("ex08.greedy_decode", _greedy_with("precedence"), "| binds tighter than =="),
    ("ex08.greedy_decode", _greedy_with("bos forced"), "not bos_id"),
    ("ex08.train_step", _train_step_with("no_grad"), "ran under torch.no_grad()"),
    ("ex08.train_step", _train_step_with("per row"), "divided by the batch size"),
]


@pytest.mark.parametrize(
    ("task_id", "impl", "words"),
    HUNT_F08,
    ids=[f"{t}-{i}" for i, (t, _, _) in enumerate(HUNT_F08)],
)
def test_slips_of_the_third_fresh_reader_get_their_hint(task_id, impl, words):
    result = status(task_id, impl)
    assert result.status == "failed" and words in result.feedback, result.feedback
    assert "more than one thing" not in result.feedback
    assert "To see the line that fails" not in result.feedback


@pytest.mark.parametrize(
    "impl",
    [
        # the peak times min(step / warmup, sqrt(warmup / step))
        lambda step, d_model, warmup: (
            (d_model * warmup) ** -0.5 * min(step / warmup, (warmup / step) ** 0.5)
        ),
        # finished updated before the finished rows are forced (the same tokens)
        None,
    ],
)
def test_right_variants_of_the_third_fresh_reader_pass(impl):
    if impl is None:

        def impl(step_fn, batch_size, bos_id, eos_id, max_new_tokens):
            prefix = torch.full((batch_size, 1), bos_id, dtype=torch.long)
            finished = torch.zeros(batch_size, dtype=torch.bool)
            for _ in range(max_new_tokens):
                token = step_fn(prefix)[:, -1].argmax(dim=-1)
                finished = finished | (token == eos_id)
                prefix = torch.cat([prefix, token.masked_fill(finished, eos_id)[:, None]], 1)
            return prefix[:, 1:]

        assert status("ex08.greedy_decode", impl).status == "passed"
    else:
        assert status("ex08.noam_lr", impl).status == "passed"


def test_a_train_step_that_reads_the_scheduler_rate_passes():
    # scheduler.get_last_lr() (to print the rate) is right, and scored 1/9 on the grader's
    # stand-in scheduler with "'_InverseSchedule' object has no attribute 'get_last_lr'"
    step = _train_step_with("reads the rate")
    result = status("ex08.train_step", step)
    assert result.status == "passed", result.feedback


def _greedy_keeping(what):
    """A greedy decoder that keeps state between calls, keyed by its sizes: "finished" (the
    mask, updated in place) or "buffer" (the output, filled until every row has finished).
    Each passed all 7 cases: no two had the same sizes."""
    kept = {}

    def decode(step_fn, batch_size, bos_id, eos_id, max_new_tokens):
        prefix = torch.full((batch_size, 1), bos_id, dtype=torch.long)
        key = (batch_size, max_new_tokens)
        if what == "finished":
            finished = kept.setdefault(key, torch.zeros(batch_size, dtype=torch.bool))
        else:
            finished = torch.zeros(batch_size, dtype=torch.bool)
        out = kept.setdefault(key, torch.full(key, eos_id)) if what == "buffer" else None
        for i in range(max_new_tokens):
            token = step_fn(prefix)[:, -1].argmax(dim=-1).masked_fill(finished, eos_id)
            finished |= token == eos_id
            prefix = torch.cat([prefix, token[:, None]], dim=1)
            if out is not None:
                out[:, i] = token
                if finished.all():
                    break
        return prefix[:, 1:] if out is None else out.clone()

    return decode


@pytest.mark.parametrize("what", ["finished", "buffer"])
def test_a_greedy_decoder_keeping_state_between_calls_fails(what):
    result = status("ex08.greedy_decode", _greedy_keeping(what))
    assert result.status == "failed", result.feedback
    assert "keeps something from the first call" in result.feedback
    task = get_task("ex08.greedy_decode")
    for seed in range(30):  # the hidden seeds too: each suite in a fresh run of the decoder
        cases = task.cases(torch.Generator().manual_seed(seed))
        run = run_cases(task, _greedy_keeping(what), cases)
        assert judge(task, cases, run).status == "failed", (what, seed)


def _greedy_returning(cut):
    def decode(step_fn, batch_size, bos_id, eos_id, max_new_tokens):
        prefix = torch.full((batch_size, 1), bos_id, dtype=torch.long)
        finished = torch.zeros(batch_size, dtype=torch.bool)
        for _ in range(max_new_tokens):
            token = step_fn(prefix)[:, -1].argmax(dim=-1).masked_fill(finished, eos_id)
            finished = finished | (token == eos_id)
            prefix = torch.cat([prefix, token[:, None]], dim=1)
        return prefix[:, cut]

    return decode


def _train_step_mean_over_every_position(
    model, optimizer, scheduler, src, tgt, bos_id, pad_id, smoothing=0.1, clip=1.0
):
    model.train()
    logits = model(src, torch.cat([torch.full_like(tgt[:, :1], bos_id), tgt[:, :-1]], dim=1))
    per_position = F.cross_entropy(
        logits.flatten(0, 1),
        tgt.flatten(),
        ignore_index=pad_id,
        label_smoothing=smoothing,
        reduction="none",
    )
    loss = per_position.mean()  # the pads' zeros counted
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return loss.item()


HUNT_F8 = [
    # prefix[:, :-1], shift_right's slice: "None of the usual single mistakes"
    ("ex08.greedy_decode", _greedy_returning(slice(None, -1)), "prefix[:, :-1] cuts the wrong"),
    # reduction="none" then .mean(): no hint
    ("ex08.train_step", _train_step_mean_over_every_position, "the padded ones included"),
    # (step * warmup) ** -1.5 for step * warmup ** -1.5: no hint
    (
        "ex08.noam_lr",
        lambda step, d_model, warmup: d_model**-0.5 * min(step**-0.5, (step * warmup) ** -1.5),
        "raises step to the power too",
    ),
]


@pytest.mark.parametrize(
    ("task_id", "impl", "words"), HUNT_F8, ids=[f"{t}-{i}" for i, (t, _, _) in enumerate(HUNT_F8)]
)
def test_slips_of_the_fourth_fresh_reader_get_their_hint(task_id, impl, words):
    result = status(task_id, impl)
    assert result.status == "failed" and words in result.feedback, result.feedback
    assert "more than one thing" not in result.feedback


def test_a_train_step_keeping_its_first_loss_function_is_told_so():
    # nn.CrossEntropyLoss built at the first call and kept in a global: "use the smoothing
    # argument", which it did, at its first call
    kept = {}

    def step(model, optimizer, scheduler, src, tgt, bos_id, pad_id, smoothing=0.1, clip=1.0):
        if "loss" not in kept:
            kept["loss"] = nn.CrossEntropyLoss(ignore_index=pad_id, label_smoothing=smoothing)
        model.train()
        logits = model(src, torch.cat([torch.full_like(tgt[:, :1], bos_id), tgt[:, :-1]], 1))
        loss = kept["loss"](logits.flatten(0, 1), tgt.flatten())
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        return loss.item()

    result = status("ex08.train_step", step)
    assert result.status == "failed" and "kept between calls" in result.feedback, result.feedback


def test_a_greedy_decoder_passing_only_the_last_token_is_told_so():
    # step_fn(prefix[:, -1:]), as with a cache: told "every row of the prefix must start with
    # <bos> ... out[:, 0] = bos_id fills that column", which it did
    def decode(step_fn, batch_size, bos_id, eos_id, max_new_tokens):
        prefix = torch.full((batch_size, 1), bos_id, dtype=torch.long)
        finished = torch.zeros(batch_size, dtype=torch.bool)
        for _ in range(max_new_tokens):
            token = step_fn(prefix[:, -1:])[:, -1].argmax(dim=-1).masked_fill(finished, eos_id)
            finished = finished | (token == eos_id)
            prefix = torch.cat([prefix, token[:, None]], dim=1)
        return prefix[:, 1:]

    result = status("ex08.greedy_decode", decode)
    assert result.status == "failed" and "not its last column" in result.feedback, result.feedback


def test_a_loss_keeping_its_mask_between_calls_fails():
    # the padding mask kept in a dict keyed by the target's shape scored 7/7: no two cases had
    # the same shape
    kept = {}

    def loss(logits, target, smoothing, ignore_index):
        real = kept.setdefault(tuple(target.shape), target != ignore_index)
        log_probs = logits.log_softmax(-1)
        nll = -log_probs.gather(-1, target.masked_fill(~real, 0).unsqueeze(-1)).squeeze(-1)
        per_token = (1 - smoothing) * nll - smoothing * log_probs.mean(-1)
        return per_token[real].mean()

    result = status("ex08.label_smoothing_loss", loss)
    assert result.status == "failed", result.feedback
    assert "keeps something from an earlier call" in result.feedback


def _ls_weighted(logits, target, ignore_index, on_target, on_every_class):
    """on_target * -log p_target + on_every_class * -log p summed over the vocabulary, averaged
    over the real tokens."""
    keep = target != ignore_index
    log_probs = logits.log_softmax(-1)
    nll = -log_probs.gather(-1, target.masked_fill(~keep, 0).unsqueeze(-1)).squeeze(-1)
    per_token = on_target * nll - on_every_class * log_probs.sum(-1)
    return (per_token * keep).sum() / keep.sum()


HUNT_17 = [
    # every exponent written with floor division (-1 // 2 is -1, -3 // 2 is -2): no hint
    (
        "ex08.noam_lr",
        lambda step, d_model, warmup: (
            d_model ** (-1 // 2) * min(step ** (-1 // 2), step * warmup ** (-3 // 2))
        ),
        "// is floor division",
    ),
    # warmup ** (-3 // 2) alone (warmup^-2): no hint
    (
        "ex08.noam_lr",
        lambda step, d_model, warmup: d_model**-0.5 * min(step**-0.5, step * warmup ** (-3 // 2)),
        "-3 // 2 is -2",
    ),
    # a multiplier that peaks at 1 (LambdaLR's shape): told "the lesson's factor"
    (
        "ex08.noam_lr",
        lambda step, d_model, warmup: min(step / warmup, (warmup / step) ** 0.5),
        "your rate peaks at 1",
    ),  # the target's smoothing / vocab share counted twice: "None of the usual single mistakes"
    (
        "ex08.label_smoothing_loss",
        lambda logits, target, smoothing, ignore_index: _ls_weighted(
            logits,
            target,
            ignore_index,
            1 - smoothing + smoothing / logits.shape[-1],
            smoothing / logits.shape[-1],
        ),
        "got its smoothing / vocab share twice",
    ),
    # smoothing / (vocab - 1) on every class: "None of the usual single mistakes"
    (
        "ex08.label_smoothing_loss",
        lambda logits, target, smoothing, ignore_index: _ls_weighted(
            logits, target, ignore_index, 1 - smoothing, smoothing / (logits.shape[-1] - 1)
        ),
        "on EVERY class puts more than smoothing",
    ),
]


@pytest.mark.parametrize(
    ("task_id", "impl", "words"), HUNT_17, ids=[f"{t}-{i}" for i, (t, _, _) in enumerate(HUNT_17)]
)
def test_slips_of_hunt_17_get_their_hint(task_id, impl, words):
    result = status(task_id, impl)
    assert result.status == "failed" and words in result.feedback, result.feedback
    assert "more than one thing" not in result.feedback


def _ls_by_hand(shift):
    """label_smoothing_loss with log_softmax written by hand: exp(logits - shift(logits)) over
    its sum, the rest right."""

    def loss(logits, target, smoothing, ignore_index):
        z = logits - shift(logits)
        log_probs = z - z.exp().sum(dim=-1, keepdim=True).log()
        keep = target != ignore_index
        nll = -log_probs.gather(-1, target.masked_fill(~keep, 0).unsqueeze(-1)).squeeze(-1)
        per_token = (1 - smoothing) * nll - smoothing * log_probs.mean(-1)
        return (per_token * keep).sum() / keep.sum()

    return loss


@pytest.mark.parametrize(
    ("shift", "words"),
    [
        (lambda logits: 0.0, "exp of a large logit overflows"),  # no maximum subtracted
        (lambda logits: logits.max(), "the maximum of the whole tensor"),  # max without dim
    ],
    ids=["no_max", "global_max"],
)
def test_a_log_softmax_by_hand_that_overflows_fails_under_every_seed(shift, words):
    # both scored 8/8 in the notebook and under every hidden seed: no logit was past float32's
    # exp range (the -120 case catches log(softmax), not exp overflowing)
    loss = _ls_by_hand(shift)
    result = status("ex08.label_smoothing_loss", loss)
    assert result.status == "failed" and words in result.feedback, result.feedback
    task = get_task("ex08.label_smoothing_loss")
    for seed in range(10):
        cases = task.cases(torch.Generator().manual_seed(seed))
        assert judge(task, cases, run_cases(task, loss, cases)).status == "failed", seed
    # the same by hand with each position's own maximum is right
    right = _ls_by_hand(lambda logits: logits.amax(dim=-1, keepdim=True))
    assert status("ex08.label_smoothing_loss", right).status == "passed"


def _ls_pads_summed(logits, target, smoothing, ignore_index):
    keep = target != ignore_index
    log_probs = logits.log_softmax(-1)
    nll = -log_probs.gather(-1, target.masked_fill(~keep, 0).unsqueeze(-1)).squeeze(-1)
    per_token = (1 - smoothing) * nll - smoothing * log_probs.mean(-1)
    return per_token.sum() / keep.sum()  # the pads' losses summed, divided by the real count


HUNT_18 = [
    # the pads' losses summed, divided by the number of real tokens: "None of the usual"
    ("ex08.label_smoothing_loss", _ls_pads_summed, "summed the loss of every position"),
    # step and warmup swapped in the formula: no hint
    (
        "ex08.noam_lr",
        lambda step, d_model, warmup: d_model**-0.5 * min(warmup**-0.5, warmup * step**-1.5),
        "step and warmup are swapped",
    ),
]


@pytest.mark.parametrize(
    ("task_id", "impl", "words"), HUNT_18, ids=[f"{t}-{i}" for i, (t, _, _) in enumerate(HUNT_18)]
)
def test_slips_of_hunt_18_get_their_hint(task_id, impl, words):
    test_slips_of_the_fourth_fresh_reader_get_their_hint(task_id, impl, words)
