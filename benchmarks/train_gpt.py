"""Train lesson 09's GPT for a fixed wall-clock budget and report its validation loss.

    python benchmarks/train_gpt.py --seconds 180                          # the lesson's default
    python benchmarks/train_gpt.py --seconds 180 --preset nanogpt-fitted  # nanoGPT's CPU recipe
    python benchmarks/train_gpt.py --seconds 60 --corpus input.txt        # any UTF-8 text file
    python benchmarks/train_gpt.py --seconds 180 --tokenizer bpe --vocab-size 512
    python benchmarks/train_gpt.py --preset lesson-09 --steps 700         # lesson 09's run

The last line printed is JSON:
    val_loss           mean cross-entropy in nats per TOKEN over the WHOLE validation split
    val_bits_per_char  the same loss in bits per CHARACTER (see below): comparable between the
                       char and the BPE tokenizer, and with any other model of the same text
    train_seconds, steps, tokens_seen, tokens_per_second (training tokens per second),
    final_lr (the learning rate of the last step), params, vocab_size, tokenizer, corpus_chars,
    val_chars, val_tokens, preset, threads
The loss is measured after training; neither the evaluation nor the tokenizer's training and
encoding is part of train_seconds.

The text is split FIRST, by characters: the first int(0.9 n) characters for training, the last
10 % for validation (the split of nanoGPT's data/shakespeare_char/prepare.py), and then each
part is tokenized. So both tokenizers are scored on exactly the same validation characters.
  --tokenizer char   one token per distinct character of the corpus (as nanoGPT's prepare.py)
  --tokenizer bpe    course_lib.bpe's byte-level BPE with --vocab-size tokens (default 512),
                     its merges learned from the training part only (nothing is cached on disk)

Bits per character. evaluate_loss predicts every validation token but the first (the first is
context only) and averages. Total nats = val_loss * (val_tokens - 1); those predicted tokens
decode to some number of characters, and
    val_bits_per_char = total nats / ln 2 / characters.
For the char tokenizer that is val_loss / ln 2. A BPE token stands for several characters, so
its loss per token is higher while its loss per character may be lower. (The model's context
is block_size TOKENS: a BPE model sees more characters of context.)

Presets (all run the same course_lib code, only the recipe differs; each is written once, in
course_lib.recipes.GPT_RECIPES, where lesson 09 and tools/train_checkpoint.py read theirs too):
  lesson-09       lesson 09's live run: nanoGPT's model, batch 16, AdamW lr 3e-3, 50 warm-up
                  steps, a cosine to 3e-4; `--preset lesson-09 --steps 700` is the lesson's run.
  checkpoint      the GPT shipped in course_lib/data: 6 blocks of width 192, context 256, batch
                  8, lr 2e-3, weight decay 0.3, a straight line to 0 (`--steps 3500` is its run;
                  tools/train_checkpoint.py also records a validation curve and saves it).
  nanogpt-fitted  nanoGPT's README recipe for a CPU: 4 layers, 4 heads, d_model 128, block 64,
                  batch 12, no dropout, no biases, tied embeddings, learned positions, AdamW
                  lr 1e-3, betas (0.9, 0.99), weight decay 0.1 on the matrices only, gradient
                  clipping at 1.0, 100 warm-up steps, then a cosine down to 1e-4 that ends
                  exactly when the time budget does (or at step --steps when it is given).
  nanogpt-cpu     the same, with nanoGPT's fixed cosine: down to 1e-4 at step 2000 (its
                  --lr_decay_iters=2000), constant afterwards, whatever the budget.
  lesson          (the default) nanoGPT's model with the two changes that lesson 09's ablation
                  ladder measures, rotary positions (positions="rope") and ReLU squared in the
                  feed-forward (activation="relu2"), and a context of 128 characters; batch 8
                  (the same 1,024 tokens a step as 16 x 64), a peak learning rate of 3e-3 (a
                  small model on a short budget takes a high one), 20 warm-up steps, then a
                  straight line down to 0 that ends with the budget (WarmupLinear).
                  Measured on this corpus, 60 s runs on two threads: rotary positions took
                  the old lesson recipe from 1.909 to 1.882 nats; on top of them, ReLU
                  squared gave -0.05, the straight line to zero instead of a cosine to 3e-4
                  -0.04, and 128 characters of context at batch 8 instead of 64 at batch 16
                  -0.03. They do not add up: all together 1.824 (-0.08). Each of these was
                  worse: a peak of 4e-3 or 5e-3, untied embeddings, zero-initialised output
                  projections, the Muon optimizer (slower steps), and at 180 s six layers
                  (1.724) or three of width 192 (1.743) against four of 128 (1.677).
Side by side on a quiet 2-core machine (180 s each, two threads, one run each, 2026-11-24):
  course corpus              lesson 1.682 (3,021 steps)   nanogpt-fitted 1.785 (3,916 steps)
  eight history plays        lesson 1.543 (2,946 steps)   nanogpt-fitted 1.685 (3,971 steps)
  (the second text, which the course never trains on, is written by
   tools/build_shakespeare_corpus.py --plays histories; see its docstring)
A time-fitted cosine runs on the clock from the first step; the warm-up counts steps, so on a
budget too short for the warm-up the cosine never starts (final_lr shows where it ended).

Side by side with another trainer (e.g. nanoGPT's train.py): a fair comparison needs
  * the same text: one file for both, here `--corpus input.txt`; for nanoGPT put it at
    data/shakespeare_char/input.txt and run its prepare.py (it downloads only when the file is
    missing). The shipped corpus is written out by
        python -c "from course_lib.datasets import load_shakespeare as s; \\
                   open('input.txt', 'w', encoding='utf-8').write(s())"
  * the same split: the last 10 %, split at int(0.9 n) characters by both (check val_chars
    against prepare.py's "val has ... tokens");
  * the same budget: nanoGPT stops at --max_iters, not at a time. Either run it with
    --max_iters=N --lr_decay_iters=N and this script with --steps N (the same work and the
    same schedule; compare the wall times too), or read nanoGPT's "time ...ms" per iteration,
    choose N so that N iterations fill the budget, and give this script --seconds of that
    budget. nanoGPT also evaluates inside its loop (at step 0 and every --eval_interval):
    set --eval_interval=N so that it does so only at the start and at the end;
  * the same machine, quiet (nothing else on the cores: another process slows two-thread
    training many times over), with a fixed thread count: `--threads 2` here and
    OMP_NUM_THREADS=2 for nanoGPT (torch's default thread count comes from it);
  * runs alternated A B A B (at least two of each), so a drift of the machine hits both;
    report every run, or the median of each side.
nanoGPT's recipe above, as its README gives it for a CPU:
    python train.py config/train_shakespeare_char.py --device=cpu --compile=False
        --eval_iters=20 --log_interval=1 --block_size=64 --batch_size=12 --n_layer=4
        --n_head=4 --n_embd=128 --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0
How the losses relate: both are the mean cross-entropy in nats per character-level token, with
every position of a 64-token window counting once, so they estimate the same quantity. But
nanoGPT's "val loss" is an ESTIMATE, the mean over --eval_iters random batches (20 x 12
windows x 64 = 15,360 predictions at random places, drawn with replacement: it changes from
one evaluation of the same model to the next), while val_loss here covers the WHOLE split,
every token predicted exactly once (the same figure every time for a given model).
Divide nanoGPT's loss by ln 2 = 0.693 for its bits per character.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from course_lib.blocks import count_parameters  # noqa: E402
from course_lib.bpe import BPETokenizer  # noqa: E402
from course_lib.datasets import load_shakespeare, window_batches  # noqa: E402
from course_lib.recipes import GPT_RECIPES, build_gpt  # noqa: E402
from course_lib.text import CharTokenizer  # noqa: E402
from course_lib.train import evaluate_loss, lm_loss, train  # noqa: E402

# the presets are course_lib.recipes.GPT_RECIPES: lesson 09 and tools/train_checkpoint.py read
# theirs from the same place (decay_steps: the step at which the schedule reaches min_lr; None
# fits it to the budget, the time or --steps when given)
PRESETS = GPT_RECIPES

VAL_FRACTION = 0.1
DEFAULT_BPE_VOCAB = 512


# ---------------------------------------------------------------------------------------------
# Text: split by characters, then tokenize each part
# ---------------------------------------------------------------------------------------------


def split_text(text: str) -> tuple[str, str]:
    """text -> (train, val): the first int(0.9 n) characters, and the rest (as nanoGPT does)."""
    n_train = int(len(text) * (1 - VAL_FRACTION))
    return text[:n_train], text[n_train:]


def make_tokenizer(
    kind: str, text: str, train_text: str, vocab_size: int | None = None
) -> CharTokenizer | BPETokenizer:
    """The char tokenizer sees the whole text (as nanoGPT's prepare.py: a character that occurs
    only in validation still gets an id); BPE learns its merges from the training part only."""
    if kind == "char":
        return CharTokenizer.from_text(text, specials=())  # lesson 09's: no <pad>, <bos>
    if kind == "bpe":
        return BPETokenizer.train(train_text, vocab_size or DEFAULT_BPE_VOCAB)
    raise ValueError(f"tokenizer must be 'char' or 'bpe', got {kind!r}")


# ---------------------------------------------------------------------------------------------
# Model, optimizer and schedule of a preset
# ---------------------------------------------------------------------------------------------


def build(recipe: dict, vocab_size: int, seconds: float, steps: int | None = None):
    """-> (model, optimizer, schedule) for one preset's recipe: its schedule fitted to --steps
    when given, else to the time (min_lr when the time is up), unless the recipe fixes it."""
    if steps is not None:
        return build_gpt(recipe, vocab_size, total_steps=steps)
    return build_gpt(recipe, vocab_size, total_seconds=seconds)


# ---------------------------------------------------------------------------------------------
# Validation: nats per token and bits per character
# ---------------------------------------------------------------------------------------------


def validation_metrics(
    model: torch.nn.Module,
    val_ids: Tensor,
    block_size: int,
    tokenizer: CharTokenizer | BPETokenizer,
) -> dict:
    """The loss over ALL of val_ids (n,): nats per token, and bits per character."""
    nats_per_token = evaluate_loss(model, val_ids, block_size)
    predicted = val_ids[1:].tolist()  # the first token is context only, never predicted
    total_nats = nats_per_token * len(predicted)
    chars = len(tokenizer.decode(predicted))  # the characters the predicted tokens stand for
    return {"val_loss": nats_per_token, "val_bits_per_char": total_nats / math.log(2) / chars}


# ---------------------------------------------------------------------------------------------
# One run
# ---------------------------------------------------------------------------------------------


def run(
    seconds: float,
    text: str,
    preset: str,
    seed: int = 0,
    progress: bool = True,
    steps: int | None = None,
    tokenizer: str = "char",
    vocab_size: int | None = None,
) -> dict:
    recipe = PRESETS[preset]
    start = time.perf_counter()
    train_text, val_text = split_text(text)
    tok = make_tokenizer(tokenizer, text, train_text, vocab_size)
    train_ids = torch.tensor(tok.encode(train_text), dtype=torch.long)
    val_ids = torch.tensor(tok.encode(val_text), dtype=torch.long)
    print(
        f"{tokenizer} tokenizer ({tok.vocab_size} tokens): {len(train_ids)} training and "
        f"{len(val_ids)} validation tokens in {time.perf_counter() - start:.1f} s",
        file=sys.stderr,
    )

    torch.manual_seed(seed)
    model, optimizer, schedule = build(recipe, tok.vocab_size, seconds, steps)
    block_size = model.config.block_size
    batches = window_batches(
        train_ids, block_size, recipe["batch_size"], torch.Generator().manual_seed(seed)
    )
    history = train(
        model,
        batches,
        lm_loss,
        optimizer,
        schedule,
        clip=recipe["clip"],
        progress=progress,
        desc=preset,
        log_every=50,
        steps=steps,
        max_seconds=seconds if steps is None else None,
    )

    start = time.perf_counter()
    metrics = validation_metrics(model, val_ids, block_size, tok)
    print(
        f"evaluated {len(val_ids)} validation tokens in {time.perf_counter() - start:.1f} s",
        file=sys.stderr,
    )
    tokens_seen = history.steps * recipe["batch_size"] * block_size
    return {
        "val_loss": round(metrics["val_loss"], 4),
        "val_bits_per_char": round(metrics["val_bits_per_char"], 4),
        "train_seconds": round(history.seconds, 2),
        "steps": history.steps,
        "tokens_seen": tokens_seen,
        "tokens_per_second": round(tokens_seen / history.seconds),
        "final_lr": float(f"{history.lrs[-1]:.4g}"),
        "params": count_parameters(model),
        "vocab_size": tok.vocab_size,
        "tokenizer": tokenizer,
        "corpus_chars": len(text),
        "val_chars": len(val_text),
        "val_tokens": len(val_ids),
        "preset": preset,
        "threads": torch.get_num_threads(),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=180.0, help="training time budget")
    parser.add_argument(
        "--corpus",
        type=Path,
        default=None,
        help="a UTF-8 text file (default: the course's Shakespeare corpus)",
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="lesson")
    parser.add_argument("--tokenizer", choices=["char", "bpe"], default="char")
    parser.add_argument(
        "--vocab-size",
        type=int,
        default=None,
        help=f"BPE vocabulary size, 256 bytes + merges (default "
        f"{DEFAULT_BPE_VOCAB}); only with --tokenizer bpe",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help="train for this many steps instead of --seconds (a comparison that "
        "does not depend on the load of the machine)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch's CPU threads (default: torch's own choice)",
    )
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if args.vocab_size is not None and args.tokenizer != "bpe":
        parser.error("--vocab-size needs --tokenizer bpe (the char vocabulary is the text's)")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    text = (
        args.corpus.read_text(encoding="utf-8") if args.corpus is not None else load_shakespeare()
    )
    result = run(
        args.seconds,
        text,
        args.preset,
        args.seed,
        progress=not args.no_progress,
        steps=args.steps,
        tokenizer=args.tokenizer,
        vocab_size=args.vocab_size,
    )
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
