"""Every model the course trains, written once: lesson 08's translator and lesson 09's GPTs
(the lessons, the benchmarks, the shipped checkpoint).

A recipe is a dict in one style for every model: `model` holds the model's arguments (GPTConfig's
fields for a GPT, Seq2SeqTransformer's for the translator); the other keys describe the run.

    TRANSLATOR_RECIPE  lesson 08's date translator: its sizes, the batch, the Noam schedule
    GPT_RECIPES    name -> a recipe: the model's sizes, the batch, the optimizer and the schedule
    gpt_optimizer  AdamW with weight decay on the matrices only, as nanoGPT
    gpt_schedule   the recipe's warm-up and fall (`course_lib.train.WarmupCosine` or Linear)
    build_gpt      -> (model, optimizer, schedule) as a recipe says

`course_lib.train` holds the generic loop, losses and schedules and knows no model; this module
joins them to `course_lib.gpt`.
"""

from __future__ import annotations

import torch
from torch import nn

from .gpt import GPT, GPTConfig
from .train import WarmupCosine, WarmupLinear
from .validation import check_choice

__all__ = [
    "TRANSLATOR_RECIPE",
    "NANOGPT_CPU_MODEL",
    "NANOGPT_CPU_RECIPE",
    "GPT_RECIPES",
    "gpt_optimizer",
    "gpt_schedule",
    "build_gpt",
]


# Lesson 08's date translator, sized for a 2-core laptop CPU (benchmarks/train_translator.py
# trains exactly this):
#   model         Seq2SeqTransformer's arguments, all but vocab_size and pad_id
#   batch_size, bucket
#                 dates a step, and how many batches' worth are drawn at once and sorted by
#                 length (`datasets.date_batches`)
#   steps, warmup, factor, cooldown
#                 the run's length and its Noam schedule (`train.noam_scheduler`), with a
#                 linear cool-down to 0 over the last `cooldown` of the run
#   smoothing, clip
#                 the label smoothing and the gradient-norm clipping
TRANSLATOR_RECIPE = dict(
    model=dict(
        d_model=64,
        num_heads=4,
        num_encoder_layers=2,
        num_decoder_layers=2,
        d_ff=256,
        dropout=0.0,
    ),
    batch_size=64,
    bucket=8,
    steps=700,
    warmup=100,
    factor=0.7,
    cooldown=0.3,
    smoothing=0.1,
    clip=1.0,
)

# A GPT recipe, as a dict:
#   model         GPTConfig's fields, all but vocab_size
#   batch_size    windows of block_size tokens a step
#   max_lr, min_lr, warmup_steps, schedule, decay_steps
#                 a linear warm-up to max_lr, then a "cosine" or a "linear" fall to min_lr that
#                 ends at step decay_steps, or (None) with the run's budget (`gpt_schedule`)
#   betas, weight_decay
#                 AdamW's, the decay on the matrices only (`gpt_optimizer`)
#   clip          the gradient-norm clipping
#   steps         the length of the run where the recipe fixes it (None: the caller's budget)
# nanoGPT's recipe for a CPU (its README): a small model with no dropout, no biases, tied
# embeddings and learned positions; its cosine here ends with the run's budget.
NANOGPT_CPU_RECIPE = dict(
    model=dict(
        block_size=64,
        d_model=128,
        num_heads=4,
        num_layers=4,
        dropout=0.0,
        bias=False,
        tie_weights=True,
        positions="learned",
    ),
    batch_size=12,
    max_lr=1e-3,
    min_lr=1e-4,
    warmup_steps=100,
    schedule="cosine",
    decay_steps=None,
    betas=(0.9, 0.99),
    weight_decay=0.1,
    clip=1.0,
    steps=None,
)
NANOGPT_CPU_MODEL = NANOGPT_CPU_RECIPE["model"]

# the benchmark's default: nanoGPT's model with the two changes that lesson 09's ablation
# ladder measures (rotary positions, ReLU squared), twice the context at half the batch, a
# higher peak and a straight line to zero
_LESSON_RECIPE = dict(
    NANOGPT_CPU_RECIPE,
    model=dict(NANOGPT_CPU_MODEL, block_size=128, positions="rope", activation="relu2"),
    batch_size=8,
    max_lr=3e-3,
    min_lr=0.0,
    warmup_steps=20,
    schedule="linear",
)

# Every GPT the course trains, each written as how it differs from another: lesson 09,
# benchmarks/train_gpt.py (its --preset) and tools/train_checkpoint.py read theirs from here.
GPT_RECIPES = {
    "nanogpt-fitted": NANOGPT_CPU_RECIPE,
    # nanoGPT's own fixed cosine (its --lr_decay_iters=2000), whatever the budget
    "nanogpt-cpu": dict(NANOGPT_CPU_RECIPE, decay_steps=2000),
    # lesson 09's live run: 700 steps of 16 windows (about a minute) at a higher peak
    "lesson-09": dict(
        NANOGPT_CPU_RECIPE,
        batch_size=16,
        max_lr=3e-3,
        min_lr=3e-4,
        warmup_steps=50,
        steps=700,
    ),
    "lesson": _LESSON_RECIPE,
    # the GPT shipped in course_lib/data (lesson 09's last section): the benchmark's model, wider,
    # deeper and with a context of 256, 3,500 steps at weight decay 0.3 (tools/train_checkpoint.py
    # says why these)
    "checkpoint": dict(
        _LESSON_RECIPE,
        model=dict(_LESSON_RECIPE["model"], block_size=256, d_model=192, num_heads=6, num_layers=6),
        max_lr=2e-3,
        warmup_steps=100,
        weight_decay=0.3,
        steps=3500,
    ),
}


def _check_recipe(recipe: object, *keys: str) -> None:
    """A recipe dict holding `keys` (before: a hand-made dict without one raised KeyError)."""
    if not isinstance(recipe, dict):
        given = f"the name {recipe!r}" if isinstance(recipe, str) else type(recipe).__name__
        name = recipe if isinstance(recipe, str) and recipe in GPT_RECIPES else "lesson-09"
        raise TypeError(
            f"recipe must be a dict such as GPT_RECIPES[{name!r}], got {given} (the recipes: "
            f"{', '.join(GPT_RECIPES)})"
        )
    missing = [key for key in keys if key not in recipe]
    if missing:
        raise ValueError(
            f"recipe lacks {', '.join(map(repr, missing))}; start from a course recipe and "
            "change what differs, e.g. dict(GPT_RECIPES['lesson-09'], max_lr=1e-3)"
        )


def gpt_optimizer(model: nn.Module, recipe: dict) -> torch.optim.AdamW:
    """AdamW with the recipe's weight decay on the matrices only, as nanoGPT: the embeddings
    and the linear layers' weights decay; biases and LayerNorm gains (vectors) do not."""
    _check_recipe(recipe, "weight_decay", "max_lr", "betas")
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": recipe["weight_decay"]},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=recipe["max_lr"], betas=recipe["betas"])


def gpt_schedule(
    optimizer: torch.optim.Optimizer,
    recipe: dict,
    total_steps: int | None = None,
    total_seconds: float | None = None,
) -> WarmupCosine:
    """The recipe's warm-up and fall; it ends at recipe["decay_steps"] when the recipe fixes
    that step, otherwise with the run: after `total_steps` steps or `total_seconds` seconds."""
    _check_recipe(recipe, "schedule", "decay_steps", "max_lr", "min_lr", "warmup_steps")
    check_choice(recipe["schedule"], 'recipe["schedule"]', ("cosine", "linear"))
    shape = {"cosine": WarmupCosine, "linear": WarmupLinear}[recipe["schedule"]]
    if recipe["decay_steps"] is not None:
        total_steps, total_seconds = recipe["decay_steps"], None
    return shape(
        optimizer,
        recipe["max_lr"],
        recipe["min_lr"],
        recipe["warmup_steps"],
        total_steps=total_steps,
        total_seconds=total_seconds,
    )


def build_gpt(
    recipe: dict,
    vocab_size: int,
    total_steps: int | None = None,
    total_seconds: float | None = None,
) -> tuple[GPT, torch.optim.AdamW, WarmupCosine]:
    """-> (model, optimizer, schedule) as `recipe` says, for a run of `total_steps` steps or
    `total_seconds` seconds (the schedule's budget); seed torch first for a repeatable model."""
    _check_recipe(recipe, "model")
    model = GPT(GPTConfig(vocab_size=vocab_size, **recipe["model"]))
    optimizer = gpt_optimizer(model, recipe)
    return model, optimizer, gpt_schedule(optimizer, recipe, total_steps, total_seconds)
