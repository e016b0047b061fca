"""The number exercise 09's capstone sets beside the learner's validation loss.

    python tools/capstone_reference.py [--seed 0] [--threads 1]

Trains course_lib's own GPT (course_lib.gpt.gpt_from_sizes, the same architecture the capstone
asks for) with the solution's own training loop and evaluation (solutions/mine/train.py: the
`train` and `evaluate` of exercise 09's tasks 6 and 7), the same sizes, seed, batches, steps and
learning rates as the capstone's "Train it" cell, and prints its validation loss: the
notebook's COURSE_SAME_RECIPE. Only the model differs, so the two numbers differ by the
learner's implementation (and floating-point noise), not by the recipe.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from course_lib.datasets import load_shakespeare, train_val_split, window_batches  # noqa: E402
from course_lib.gpt import gpt_from_sizes  # noqa: E402
from course_lib.mine import _load  # noqa: E402
from course_lib.text import CharTokenizer  # noqa: E402

# the capstone's "Train it" cell (solutions/09_gpt_from_scratch.ipynb)
STEPS, BLOCK, BATCH, MAX_LR, WARMUP, CLIP = 700, 64, 16, 3e-3, 50, 1.0
SIZES = dict(block_size=BLOCK, d_model=128, num_heads=4, num_layers=4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    solution = _load(ROOT / "solutions" / "mine" / "train.py")
    text = load_shakespeare()
    tokenizer = CharTokenizer.from_text(text, specials=())
    train_ids, val_ids = train_val_split(torch.tensor(tokenizer.encode(text)))
    torch.manual_seed(args.seed)
    model = gpt_from_sizes(len(tokenizer.itos), **SIZES)
    batches = window_batches(train_ids, BLOCK, BATCH, torch.Generator().manual_seed(args.seed))
    start = time.perf_counter()
    solution.train(model, batches, STEPS, max_lr=MAX_LR, warmup_steps=WARMUP, clip=CLIP)
    seconds = time.perf_counter() - start
    loss = solution.evaluate(model, val_ids, BLOCK)
    print(
        f"course_lib's GPT, the capstone's loop: {STEPS} steps in {seconds:.0f} s "
        f"({args.threads} thread(s)), validation loss {loss:.4f} nats per character"
    )


if __name__ == "__main__":
    main()
