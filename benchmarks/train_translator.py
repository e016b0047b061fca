"""Benchmark: train lesson 08's date translator from scratch on the CPU, then score it.

    python benchmarks/train_translator.py [--threads 2] [--steps N] [--seed 0]
                                          [--factor F] [--cooldown C]

Trains the recipe of lesson 08 (`course_lib.recipes.TRANSLATOR_RECIPE`, which the
notebook uses too) on seeded random dates of the training split, then greedy-decodes the 1,000
held-out test dates, which the model has never seen in any style. The last line printed is JSON:

    {"exact_match": float, "train_seconds": float, "params": int, "threads": int}

Target (issue 7): exact_match >= 0.995 with train_seconds <= 60 on the course's 2-core CPU.
train_seconds counts the training loop only (not building the model or the evaluation).
Other processes on the machine slow it down: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from course_lib.datasets import date_batches, date_pairs, date_splits, date_tokenizer  # noqa: E402
from course_lib.decoding import exact_match, translate  # noqa: E402
from course_lib.recipes import TRANSLATOR_RECIPE as RECIPE  # noqa: E402
from course_lib.train import label_smoothing_loss, noam_scheduler, shift_right, train  # noqa: E402
from course_lib.translator import Seq2SeqTransformer  # noqa: E402


def build(config: dict, vocab_size: int, pad_id: int, seed: int = 0):
    """The model, its AdamW optimizer and the warm-up schedule of the original paper."""
    torch.manual_seed(seed)
    model = Seq2SeqTransformer(vocab_size, **config["model"], pad_id=pad_id)
    # fused: one kernel updates all parameters (many small tensors here), same maths
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0, fused=True
    )
    scheduler = noam_scheduler(
        optimizer,
        config["model"]["d_model"],
        config["warmup"],
        config["factor"],
        total_steps=config["steps"],
        cooldown=config["cooldown"],
    )
    return model, optimizer, scheduler


def make_loss_fn(tokenizer, smoothing: float):
    """loss_fn(model, (src, tgt)) for `train`: teacher forcing with label smoothing."""

    def loss_fn(model, batch):
        src, tgt = batch  # (batch, n_src), (batch, n_tgt) ending in <eos>, padded
        logits = model(src, shift_right(tgt, tokenizer.bos_id))  # (batch, n_tgt, vocab)
        return label_smoothing_loss(logits, tgt, smoothing, ignore_index=tokenizer.pad_id)

    return loss_fn


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=RECIPE["steps"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--factor",
        type=float,
        default=RECIPE["factor"],
        help="height of the learning-rate schedule (lesson 08 compares 0.7, 1, 2 and 4)",
    )
    parser.add_argument(
        "--cooldown",
        type=float,
        default=RECIPE["cooldown"],
        help="fraction of the run at the end whose rate falls linearly to 0 (0: none)",
    )
    parser.add_argument("--progress", action="store_true", help="show a progress bar")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    config = {**RECIPE, "steps": args.steps, "factor": args.factor, "cooldown": args.cooldown}

    tokenizer = date_tokenizer()
    splits = date_splits(seed=0)
    model, optimizer, scheduler = build(config, tokenizer.vocab_size, tokenizer.pad_id, args.seed)
    batches = date_batches(
        splits.train, tokenizer, config["batch_size"], seed=args.seed, bucket=config["bucket"]
    )
    history = train(
        model,
        batches,
        make_loss_fn(tokenizer, config["smoothing"]),
        optimizer,
        scheduler,
        steps=config["steps"],
        clip=config["clip"],
        progress=args.progress,
    )

    test = date_pairs(splits.test, seed=1)
    predictions = translate(model, tokenizer, [source for source, _ in test], max_new_tokens=12)
    result = {
        "exact_match": exact_match(predictions, [target for _, target in test]),
        "train_seconds": round(history.seconds, 2),
        "params": model.num_parameters(),
        "threads": torch.get_num_threads(),
    }
    print(f"config: {json.dumps(config)}")
    print(
        f"final loss {history.losses[-1]:.4f} after {history.steps} steps; "
        f"{history.steps / history.seconds:.1f} steps/s"
    )
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
