"""The ex08 grader: references pass, each mistake fails with its hint, shortcuts are caught."""

import copy

import pytest
import torch
import torch.nn.functional as F
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
