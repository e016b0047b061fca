"""course_lib.train: the schedule, label smoothing, shift_right and the training loop."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_lib.train import (
    TrainHistory,
    cooldown_factor,
    label_smoothing_loss,
    noam_lr,
    noam_scheduler,
    shift_right,
    smoothed_targets,
    train,
)

# ---- noam_lr ---------------------------------------------------------------------------------


def test_noam_lr_matches_the_paper_formula():
    for step in (1, 50, 3999, 4000, 4001, 100000):
        expected = 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
        assert math.isclose(noam_lr(step, 512, 4000), expected, rel_tol=1e-12)
    assert math.isclose(noam_lr(10, 64, 5, factor=0.5), 0.5 * noam_lr(10, 64, 5))


def test_noam_lr_rises_linearly_then_decays_with_peak_at_warmup():
    lrs = [noam_lr(s, 128, 100) for s in range(1, 1001)]
    peak = max(range(1000), key=lambda i: lrs[i]) + 1
    assert peak == 100
    assert math.isclose(lrs[49] / lrs[24], 2.0, rel_tol=1e-9)  # linear: step 50 vs step 25
    assert math.isclose(lrs[399] / lrs[99], 0.5, rel_tol=1e-9)  # 1/sqrt: step 400 vs step 100
    assert math.isclose(lrs[99], 1 / math.sqrt(128 * 100), rel_tol=1e-12)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(step=0, d_model=64, warmup=10), "step"),
        (dict(step=1.5, d_model=64, warmup=10), "step"),
        (dict(step=1, d_model=0, warmup=10), "d_model"),
        (dict(step=1, d_model=64, warmup=-1), "warmup"),
    ],
)
def test_noam_lr_rejects_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        noam_lr(**kwargs)


def test_noam_lr_rejects_bad_factor():
    with pytest.raises(ValueError, match="factor"):
        noam_lr(1, 64, 10, factor=0.0)
    with pytest.raises(TypeError, match="factor"):
        noam_lr(1, 64, 10, factor="1")


def test_noam_scheduler_first_step_uses_step_one():
    param = nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=1.0)
    scheduler = noam_scheduler(optimizer, 64, 10, factor=2.0)
    seen = []
    for _ in range(20):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert seen == pytest.approx([noam_lr(s, 64, 10, 2.0) for s in range(1, 21)])
    with pytest.raises(TypeError, match="optimizer"):
        noam_scheduler("adam", 64, 10)
    with pytest.raises(ValueError, match="warmup"):
        noam_scheduler(optimizer, 64, 0)


# ---- label smoothing -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype,atol", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
@pytest.mark.parametrize("smoothing,ignore_index", [(0.0, 0), (0.1, 0), (0.3, 4), (0.1, -100)])
def test_label_smoothing_loss_equals_cross_entropy(dtype, atol, smoothing, ignore_index):
    gen = torch.Generator().manual_seed(0)
    logits = 3 * torch.randn(4, 7, 9, generator=gen, dtype=dtype)
    target = torch.randint(0, 9, (4, 7), generator=gen)
    if ignore_index >= 0:
        target[:, 5:] = ignore_index
        target[0, 0] = ignore_index
    ours = label_smoothing_loss(logits, target, smoothing, ignore_index)
    theirs = F.cross_entropy(
        logits.reshape(-1, 9),
        target.reshape(-1),
        label_smoothing=smoothing,
        ignore_index=ignore_index,
    )
    assert ours.dtype == dtype and ours.shape == ()
    assert torch.allclose(ours, theirs, atol=atol, rtol=0)


def test_label_smoothing_loss_gradient_matches_and_ignores_pads():
    logits = torch.randn(3, 5, 6, requires_grad=True)
    target = torch.randint(1, 6, (3, 5))
    target[:, -2:] = 0
    label_smoothing_loss(logits, target, 0.1, 0).backward()
    ours = logits.grad.clone()
    logits.grad = None
    F.cross_entropy(
        logits.reshape(-1, 6), target.reshape(-1), label_smoothing=0.1, ignore_index=0
    ).backward()
    assert torch.allclose(ours, logits.grad, atol=1e-6)
    assert ours[:, -2:].abs().max() == 0  # padded positions get no gradient


def test_label_smoothing_all_ignored_is_nan_like_torch():
    logits, target = torch.randn(2, 3, 4), torch.zeros(2, 3, dtype=torch.long)
    assert torch.isnan(label_smoothing_loss(logits, target, 0.1, 0))


def test_label_smoothing_loss_rejects_bad_input():
    logits, target = torch.randn(2, 3, 5), torch.randint(0, 5, (2, 3))
    with pytest.raises(ValueError, match="target"):
        label_smoothing_loss(logits, target[:, :2], 0.1, 0)
    with pytest.raises(TypeError, match="logits"):
        label_smoothing_loss(logits.long(), target, 0.1, 0)
    with pytest.raises(TypeError, match="target"):
        label_smoothing_loss(logits, target.float(), 0.1, 0)
    with pytest.raises(ValueError, match="smoothing"):
        label_smoothing_loss(logits, target, 1.5, 0)
    with pytest.raises(TypeError, match="ignore_index"):
        label_smoothing_loss(logits, target, 0.1, None)
    with pytest.raises(ValueError, match="outside"):
        label_smoothing_loss(logits, target + 5, 0.1, 0)


def test_smoothed_targets_is_the_distribution_cross_entropy_uses():
    target = torch.tensor([[3, 0]])
    dist = smoothed_targets(target, 5, 0.1)  # (1, 2, 5)
    assert dist.shape == (1, 2, 5)
    assert torch.allclose(dist.sum(-1), torch.ones(1, 2))
    assert dist[0, 0, 3].item() == pytest.approx(0.9 + 0.02)
    assert dist[0, 0, 1].item() == pytest.approx(0.02)
    logits = torch.randn(1, 2, 5)
    by_hand = -(dist * logits.log_softmax(-1)).sum(-1).mean()
    assert torch.allclose(by_hand, label_smoothing_loss(logits, target, 0.1, -100), atol=1e-6)
    with pytest.raises(ValueError, match="outside"):
        smoothed_targets(target, 3, 0.1)


# ---- shift_right -----------------------------------------------------------------------------


def test_shift_right_prepends_bos_and_drops_the_last_token():
    targets = torch.tensor([[5, 6, 7, 2], [8, 2, 0, 0]])
    assert shift_right(targets, 1).tolist() == [[1, 5, 6, 7], [1, 8, 2, 0]]
    assert shift_right(targets.int(), 1).dtype == torch.int32
    assert shift_right(targets[:, :1], 9).tolist() == [[9], [9]]


def test_shift_right_rejects_bad_input():
    with pytest.raises(ValueError, match="targets"):
        shift_right(torch.tensor([1, 2, 3]), 1)
    with pytest.raises(TypeError, match="targets"):
        shift_right(torch.zeros(2, 3), 1)
    with pytest.raises(TypeError, match="bos_id"):
        shift_right(torch.zeros(2, 3, dtype=torch.long), 1.0)


# ---- the training loop -----------------------------------------------------------------------


def _regression_problem():
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    x = torch.randn(64, 3)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.3
    batches = [(x[i : i + 16], y[i : i + 16]) for i in range(0, 64, 16)] * 50

    def loss_fn(model, batch):
        inputs, targets = batch
        return F.mse_loss(model(inputs), targets)

    return model, batches, loss_fn


def test_train_reduces_the_loss_and_records_history():
    model, batches, loss_fn = _regression_problem()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=50, gamma=0.5)
    history = train(
        model, batches, loss_fn, optimizer, scheduler, steps=120, clip=10.0, progress=False
    )
    assert isinstance(history, TrainHistory)
    assert history.steps == 120 and len(history.lrs) == 120 and len(history.grad_norms) == 120
    assert history.stopped_by == "steps"
    assert history.losses[-1] < 0.01 * history.losses[0]
    assert history.lrs[0] == 0.1 and history.lrs[60] == 0.05
    assert not model.training
    assert len(history.smoothed(10)) == 120 and history.smoothed(1) == history.losses


def test_train_stops_when_the_data_or_the_time_runs_out():
    model, batches, loss_fn = _regression_problem()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    history = train(model, batches[:7], loss_fn, optimizer, progress=False)
    assert history.steps == 7 and history.stopped_by == "data"
    history = train(model, iter(batches), loss_fn, optimizer, max_seconds=1e-9, progress=False)
    assert history.stopped_by == "time" and history.steps <= 1


def test_train_is_deterministic():
    runs = []
    for _ in range(2):
        model, batches, loss_fn = _regression_problem()
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
        runs.append(train(model, batches, loss_fn, optimizer, steps=30, progress=False).losses)
    assert runs[0] == runs[1]


def test_train_clips_the_gradient():
    model, batches, loss_fn = _regression_problem()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    train(
        model,
        batches,
        lambda m, b: 1000 * loss_fn(m, b),
        optimizer,
        steps=1,
        clip=0.5,
        progress=False,
    )
    norm = torch.cat([p.grad.flatten() for p in model.parameters()]).norm()
    assert norm.item() == pytest.approx(0.5, rel=1e-4)


def test_train_rejects_bad_input():
    model, batches, loss_fn = _regression_problem()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with pytest.raises(TypeError, match="model"):
        train("model", batches, loss_fn, optimizer)
    with pytest.raises(TypeError, match="loss_fn"):
        train(model, batches, None, optimizer)
    with pytest.raises(TypeError, match="optimizer"):
        train(model, batches, loss_fn, "sgd")
    with pytest.raises(ValueError, match="steps"):
        train(model, batches, loss_fn, optimizer, steps=0)
    with pytest.raises(TypeError, match="batches"):
        train(model, 5, loss_fn, optimizer)
    with pytest.raises(ValueError, match="scalar"):
        train(model, batches, lambda m, b: m(b[0]), optimizer, steps=2, progress=False)


# ---- the cool-down -------------------------------------------------------------------------


def test_cooldown_factor_is_one_then_falls_linearly():
    factors = [cooldown_factor(s, 10, 0.3) for s in range(1, 11)]
    assert factors == pytest.approx([1, 1, 1, 1, 1, 1, 1, 0.75, 0.5, 0.25])
    assert all(cooldown_factor(s, 10, 0.0) == 1.0 for s in range(1, 11))
    with pytest.raises(ValueError, match="cooldown"):
        cooldown_factor(1, 10, 1.5)
    with pytest.raises(ValueError, match="total_steps"):
        cooldown_factor(1, 0, 0.3)


def test_noam_scheduler_with_cooldown():
    param = nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=1.0)
    scheduler = noam_scheduler(optimizer, 64, 10, total_steps=40, cooldown=0.5)
    seen = []
    for _ in range(40):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    expected = [noam_lr(s, 64, 10) * cooldown_factor(s, 40, 0.5) for s in range(1, 41)]
    assert seen == pytest.approx(expected)
    assert seen[19] == pytest.approx(noam_lr(20, 64, 10)) and seen[-1] < 0.1 * seen[19]
    with pytest.raises(ValueError, match="total_steps"):
        noam_scheduler(optimizer, 64, 10, cooldown=0.3)


def test_a_recipes_name_in_place_of_the_recipe_is_named():
    # before: "string indices must be integers, not 'str'" from recipe["model"]
    from course_lib.recipes import build_gpt, gpt_optimizer, gpt_schedule

    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for call in (
        lambda: build_gpt("lesson-09", 65),
        lambda: gpt_optimizer(model, "lesson-09"),
        lambda: gpt_schedule(optimizer, "lesson-09", total_steps=10),
    ):
        with pytest.raises(
            TypeError, match=r"a dict such as GPT_RECIPES\['lesson-09'\], got the name"
        ):
            call()
    with pytest.raises(TypeError, match="got list"):
        build_gpt(["lesson-09"], 65)


def test_a_hand_made_recipe_names_the_keys_it_lacks():
    # before: KeyError: 'weight_decay' (or 'model', or 'cos' for a misspelt schedule)
    from course_lib.recipes import GPT_RECIPES, build_gpt, gpt_optimizer, gpt_schedule

    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="recipe lacks 'weight_decay', 'betas'; start from"):
        gpt_optimizer(model, {"max_lr": 1e-3})
    with pytest.raises(ValueError, match="recipe lacks 'model'"):
        build_gpt({"max_lr": 1e-3}, 65)
    with pytest.raises(ValueError, match="schedule.* must be 'cosine' or 'linear', got 'cos'"):
        gpt_schedule(optimizer, dict(GPT_RECIPES["lesson-09"], schedule="cos"), total_steps=10)


def test_gpt_recipes_build_the_optimizer_and_schedule_they_write():
    from course_lib.gpt import GPT, GPTConfig
    from course_lib.recipes import GPT_RECIPES, build_gpt, gpt_optimizer, gpt_schedule
    from course_lib.train import WarmupCosine, WarmupLinear

    recipe = GPT_RECIPES["lesson-09"]
    model = GPT(GPTConfig(vocab_size=65, **recipe["model"]))
    optimizer = gpt_optimizer(model, recipe)
    decay, no_decay = optimizer.param_groups
    assert (decay["weight_decay"], no_decay["weight_decay"]) == (0.1, 0.0)
    assert all(p.dim() >= 2 for p in decay["params"])  # embeddings and weight matrices
    assert all(p.dim() < 2 for p in no_decay["params"])  # LayerNorm gains
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))
    assert (optimizer.defaults["lr"], optimizer.defaults["betas"]) == (3e-3, (0.9, 0.99))
    schedule = gpt_schedule(optimizer, recipe, total_steps=recipe["steps"])
    assert type(schedule) is WarmupCosine
    for _ in range(recipe["steps"]):
        schedule.step()
    assert schedule.lr_now() == pytest.approx(3e-4)  # a tenth of the peak at the last step
    # a recipe that fixes its decay step keeps it whatever the budget (nanoGPT's 2000)
    cpu = GPT_RECIPES["nanogpt-cpu"]
    fixed = gpt_schedule(gpt_optimizer(model, cpu), cpu, total_seconds=5.0)
    assert (fixed.total_steps, fixed.total_seconds) == (2000, None)
    shipped = GPT_RECIPES["checkpoint"]
    model, optimizer, schedule = build_gpt(shipped, vocab_size=65, total_steps=7)
    assert (model.config.d_model, model.config.num_layers, model.config.block_size) == (192, 6, 256)
    assert optimizer.param_groups[0]["weight_decay"] == 0.3
    assert type(schedule) is WarmupLinear and schedule.total_steps == 7


def test_the_training_loop_imports_no_model():
    """course_lib.train is lesson 08's generic loop: the GPT recipes that join it to a model
    live in course_lib.recipes, so train sits below the models it trains."""
    import ast
    from pathlib import Path

    source = (Path(__file__).resolve().parents[1] / "course_lib" / "train.py").read_text()
    imported = {
        node.module
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and node.module
    }
    models = {"gpt", "translator", "family", "blocks", "multihead", "recipes"}
    assert not imported & models, imported & models


def test_lesson_09_trains_its_recipe_from_gpt_recipes():
    """The notebook reads its model and training settings from GPT_RECIPES, not a copy."""
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "notebooks" / "09_gpt_from_scratch.ipynb"
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    assert 'recipe = GPT_RECIPES["lesson-09"]' in code
    assert 'GPTConfig(vocab_size=vocab_size, **recipe["model"])' in code
    assert "lr=3e-3" not in code and 'weight_decay": 0.1' not in code  # no second copy
