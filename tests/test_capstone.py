"""Exercise 09's capstone is the learner's code only: the solution's library (solutions/mine/,
what a learner who wrote every solution has) builds a GPT, trains, evaluates and samples with
course_lib's model modules unimportable to everyone, and none of them ever loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = r"""
import importlib.abc, json, sys
from pathlib import Path

import course_lib.mine as library

BLOCKED = tuple(f"course_lib.{name}" for name in library.MODEL_MODULES)


class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname in BLOCKED or fullname.startswith(tuple(b + "." for b in BLOCKED)):
            raise ImportError(f"{fullname} is blocked in this test")
        return None


sys.meta_path.insert(0, Refuse())
# The pieces' files, by name (mine() would check them with the grader, which imports the
# references; here nothing may import them, so the learner's pieces are taken as they are).
FILES = {"softmax": "attention", "split_heads": "multihead", "merge_heads": "multihead",
         "MultiHeadAttention": "multihead", "apply_rope": "positional",
         "causal_mask": "masking", "masked_attention": "masking", "LayerNorm": "blocks",
         "FeedForward": "blocks", "cached_attention_step": "kv_cache"}
folder = library.folder()


def strict_mine(task_id):
    name = task_id.split(".", 1)[1]
    return getattr(library._load(folder / f"{FILES[name]}.py"), name)


library.mine = strict_mine
import torch

from course_lib.datasets import load_shakespeare, train_val_split, window_batches
from course_lib.text import CharTokenizer

torch.manual_seed(0)
torch.set_num_threads(1)
gpt = library._load(folder / "gpt.py")
training = library._load(folder / "train.py")
sampling = library._load(folder / "sampling.py")
text = load_shakespeare()
tokenizer = CharTokenizer.from_text(text, specials=())
train_ids, val_ids = train_val_split(torch.tensor(tokenizer.encode(text)))
out = {}
for positions in ("learned", "rope"):
    torch.manual_seed(0)
    model = gpt.GPT(len(tokenizer.itos), 32, 32, 2, 2, positions=positions)
    before = training.evaluate(model, val_ids[:2000], 32)
    batches = window_batches(train_ids, 32, 8, torch.Generator().manual_seed(0))
    losses = training.train(model, batches, 40, max_lr=3e-3, warmup_steps=5)
    after = training.evaluate(model, val_ids[:2000], 32)
    prompt = torch.tensor([tokenizer.encode("\n")])
    sample = sampling.generate(model, prompt, 20, temperature=0.8,
                               generator=torch.Generator().manual_seed(1))
    with torch.no_grad():  # the cached path equals the plain one on the same tokens
        plain = model(sample[:, :-1])
    out[positions] = {"losses": losses, "before": before, "after": after,
                      "sample": sample.shape[1], "plain": list(plain.shape)}
out["loaded"] = sorted(m for m in sys.modules if m.startswith(BLOCKED))
out["classes"] = [type(model).__module__, type(model.layers[0].self_attn).__mro__[1].__module__]
print(json.dumps(out))
"""


def test_the_solution_capstone_trains_evaluates_and_samples_without_course_lib_model_modules():
    env = dict(os.environ, COURSE_MINE=str(ROOT / "solutions" / "mine"), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["loaded"] == []  # no course model module was ever imported
    assert out["classes"] == ["mine.gpt", "mine.multihead"]  # the learner's classes
    for positions in ("learned", "rope"):
        run = out[positions]
        assert len(run["losses"]) == 40
        assert run["after"] < run["before"] - 0.5, run  # it learned (from ln 72 ~ 4.3 nats)
        assert run["sample"] == 21 and run["plain"] == [1, 20, 72]
