"""The benchmark scripts run end to end and print the JSON line their issues ask for.

These are plumbing checks with tiny budgets (a few steps), not measurements: the figures
themselves come from running the scripts in full on a quiet machine (see their docstrings).
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


def run_benchmark(script: str, *args: str, timeout: float = 300) -> dict:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines, f"{script} printed nothing"
    return json.loads(lines[-1])  # the contract: the last line is the JSON result


def test_train_translator_prints_its_result_line():
    result = run_benchmark("train_translator.py", "--steps", "3", "--threads", "1")
    assert set(result) == {"exact_match", "train_seconds", "params", "threads"}
    assert 0.0 <= result["exact_match"] <= 1.0
    assert result["exact_match"] < 0.5  # three steps cannot have learned the task
    assert result["train_seconds"] > 0
    assert result["threads"] == 1
    from course_lib.datasets import date_tokenizer
    from course_lib.recipes import TRANSLATOR_RECIPE
    from course_lib.translator import Seq2SeqTransformer

    tokenizer = date_tokenizer()
    model = Seq2SeqTransformer(
        tokenizer.vocab_size, **TRANSLATOR_RECIPE["model"], pad_id=tokenizer.pad_id
    )
    assert result["params"] == model.num_parameters()  # the lesson's configuration, no other


def test_train_translator_schedule_flags_reach_the_config():
    """Lesson 08 quotes runs with --factor 1, 2 and 4 and with --cooldown 0."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "train_translator.py"), "--steps", "1"]
        + ["--threads", "1", "--factor", "2", "--cooldown", "0"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    config_line = next(line for line in done.stdout.splitlines() if line.startswith("config: "))
    config = json.loads(config_line.removeprefix("config: "))
    assert (config["factor"], config["cooldown"]) == (2.0, 0.0)


# -- train_gpt.py ------------------------------------------------------------------------------

GPT_KEYS = {
    "val_loss",
    "val_bits_per_char",
    "train_seconds",
    "steps",
    "tokens_seen",
    "tokens_per_second",
    "final_lr",
    "params",
    "vocab_size",
    "tokenizer",
    "corpus_chars",
    "val_chars",
    "val_tokens",
    "preset",
    "threads",
}


@pytest.fixture(scope="module")
def train_gpt():
    """benchmarks/train_gpt.py as a module (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location("train_gpt", ROOT / "benchmarks" / "train_gpt.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory) -> Path:
    """The first 40,000 characters of the shipped corpus: a 4,000-character validation split
    that evaluates in a fraction of a second."""
    from course_lib.datasets import load_shakespeare

    path = tmp_path_factory.mktemp("corpus") / "small.txt"
    path.write_text(load_shakespeare()[:40_000], encoding="utf-8")
    return path


def test_train_gpt_prints_its_result_line(small_corpus):
    result = run_benchmark(
        "train_gpt.py",
        "--corpus",
        str(small_corpus),
        "--steps",
        "2",
        "--threads",
        "1",
        "--no-progress",
    )
    assert set(result) == GPT_KEYS
    text = small_corpus.read_text(encoding="utf-8")
    assert result["steps"] == 2 and result["preset"] == "lesson"
    assert result["tokenizer"] == "char" and result["vocab_size"] == len(set(text))
    assert result["threads"] == 1
    assert result["corpus_chars"] == 40_000
    assert result["val_chars"] == result["val_tokens"] == 4_000  # the last 10 %, one per char
    assert result["tokens_seen"] == 2 * 8 * 128  # steps x batch x block of the lesson preset
    assert result["tokens_per_second"] == pytest.approx(
        result["tokens_seen"] / result["train_seconds"], rel=0.05
    )  # train_seconds is rounded
    assert 3.0 < result["val_loss"] < 5.0  # near ln(vocab) = 4.09 after two steps: untrained
    # one token per character: bits per character is the loss per token over ln 2
    assert result["val_bits_per_char"] == pytest.approx(result["val_loss"] / math.log(2), abs=2e-4)


def test_train_gpt_runs_with_bpe_on_the_same_validation_text(
    train_gpt, small_corpus, capsys, monkeypatch
):
    calls = []  # the arguments of the training loop, recorded on the way through
    monkeypatch.setattr(
        train_gpt,
        "train",
        lambda *args, train=train_gpt.train, **kwargs: (
            calls.append(kwargs) or train(*args, **kwargs)
        ),
    )
    result = train_gpt.main(
        [
            "--corpus",
            str(small_corpus),
            "--steps",
            "3",
            "--tokenizer",
            "bpe",
            "--vocab-size",
            "300",
            "--no-progress",
        ]
    )
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == result
    assert set(result) == GPT_KEYS
    assert result["tokenizer"] == "bpe" and result["vocab_size"] == 300
    assert result["steps"] == 3 and calls[0]["clip"] == 1.0  # the preset's gradient clipping
    assert result["val_chars"] == 4_000  # the same validation characters as the char run above
    assert result["val_tokens"] < 3_500  # 44 merges pack common pairs: fewer tokens than chars
    assert 4.5 < result["val_loss"] < 7.0  # near ln(300) = 5.7: untrained
    # per character = per token x tokens per character (the first token is not predicted)
    per_char = result["val_loss"] * (result["val_tokens"] - 1) / math.log(2) / 4_000
    assert result["val_bits_per_char"] == pytest.approx(per_char, rel=2e-3)


def test_train_gpt_defaults_to_the_shipped_corpus(train_gpt, monkeypatch):
    seen = {}
    monkeypatch.setattr(
        train_gpt, "run", lambda seconds, text, *a, **k: seen.setdefault("n", len(text))
    )
    train_gpt.main(["--steps", "1", "--no-progress"])
    assert seen["n"] > 1_000_000


def test_train_gpt_vocab_size_needs_bpe(train_gpt):
    with pytest.raises(SystemExit):
        train_gpt.main(["--vocab-size", "300"])


def test_nanogpt_fitted_preset_is_nanogpts_cpu_recipe(train_gpt):
    # nanoGPT's README for a CPU: --block_size=64 --batch_size=12 --n_layer=4 --n_head=4
    # --n_embd=128 --dropout=0.0 (bias False, tied embeddings, learned positions), and its
    # train_shakespeare_char config: lr 1e-3 to 1e-4, 100 warm-up steps, beta2 0.99, weight
    # decay 0.1, gradient clipping at 1.0
    recipe = train_gpt.PRESETS["nanogpt-fitted"]
    model = recipe["model"]
    assert model == {
        **dict(block_size=64, d_model=128, num_heads=4, num_layers=4, dropout=0.0),
        **dict(bias=False, tie_weights=True, positions="learned"),
    }
    assert {k: v for k, v in recipe.items() if k != "model"} == {
        **dict(batch_size=12, max_lr=1e-3, min_lr=1e-4, warmup_steps=100, schedule="cosine"),
        **dict(decay_steps=None, betas=(0.9, 0.99), weight_decay=0.1, clip=1.0, steps=None),
    }
    # nanogpt-cpu differs only by its fixed cosine (nanoGPT's --lr_decay_iters=2000)
    assert train_gpt.PRESETS["nanogpt-cpu"] == {
        **train_gpt.PRESETS["nanogpt-fitted"],
        "decay_steps": 2000,
    }

    recipe = train_gpt.PRESETS["nanogpt-fitted"]
    model, optimizer, schedule = train_gpt.build(recipe, vocab_size=65, seconds=10.0)
    config = model.config
    assert (config.num_layers, config.num_heads, config.d_model, config.block_size) == (
        4,
        4,
        128,
        64,
    )
    assert config.dropout == 0.0 and model.position_embedding is not None
    assert model.lm_head.weight is model.token_embedding.weight  # tied
    assert not [name for name, _ in model.named_parameters() if "bias" in name]
    decay, no_decay = optimizer.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and decay["params"]
    assert all(p.dim() < 2 for p in no_decay["params"]) and no_decay["params"]
    assert decay["betas"] == (0.9, 0.99)
    # fitted to the time budget...
    assert schedule.total_seconds == 10.0 and schedule.total_steps is None
    assert (schedule.max_lr, schedule.min_lr, schedule.warmup_steps) == (1e-3, 1e-4, 100)
    # ... or to --steps: the cosine reaches 1e-4 exactly at the last step
    _, _, schedule = train_gpt.build(recipe, vocab_size=65, seconds=10.0, steps=300)
    assert schedule.total_steps == 300 and schedule.total_seconds is None
    for _ in range(200):
        schedule.step()
    assert schedule.lr_now() == pytest.approx((1e-3 + 1e-4) / 2)  # half-way down the cosine
    for _ in range(100):
        schedule.step()
    assert schedule.lr_now() == pytest.approx(1e-4)
    _, _, fixed = train_gpt.build(train_gpt.PRESETS["nanogpt-cpu"], 65, 10.0, steps=300)
    assert fixed.total_steps == 2000


class UniformModel(torch.nn.Module):
    """Logits all zero: every prediction costs ln(vocab) nats, whatever the text."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.vocab_size = vocab_size
        self.unused = torch.nn.Parameter(torch.zeros(()))  # evaluate_loss asks for a device

    def forward(self, ids):
        return torch.zeros(*ids.shape, self.vocab_size)


def test_bits_per_char_by_hand(train_gpt):
    from course_lib.bpe import BPETokenizer

    # char tokens, 8 symbols, uniform: 3 bits per character exactly, over several windows
    tok = train_gpt.CharTokenizer.from_text("abcdefgh", specials=())
    ids = torch.tensor(tok.encode("abcdefghhgfedcba"))
    metrics = train_gpt.validation_metrics(UniformModel(8), ids, 4, tok)
    assert metrics["val_loss"] == pytest.approx(math.log(8))
    assert metrics["val_bits_per_char"] == pytest.approx(3.0)

    # BPE: "ab" is one token; "abababa" -> [ab, ab, ab, a]; the first token is context only,
    # so 3 predictions of ln(257) nats each cover the 5 characters "ababa"
    bpe = BPETokenizer([(ord("a"), ord("b"))])
    ids = torch.tensor(bpe.encode("abababa"))
    assert ids.tolist() == [256, 256, 256, ord("a")]
    metrics = train_gpt.validation_metrics(UniformModel(257), ids, 4, bpe)
    assert metrics["val_loss"] == pytest.approx(math.log(257))
    assert metrics["val_bits_per_char"] == pytest.approx(3 * math.log2(257) / 5)

    # a tiny real GPT, one window: the loss summed by hand
    from course_lib.gpt import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=257, block_size=8, d_model=8, num_heads=2, num_layers=1))
    metrics = train_gpt.validation_metrics(model, ids, 8, bpe)
    with torch.no_grad():
        logits = model(ids[:-1][None])[0]  # (3, 257): predictions for tokens 1..3
    total_nats = -sum(torch.log_softmax(logits[i], -1)[ids[i + 1]].item() for i in range(3))
    assert metrics["val_loss"] == pytest.approx(total_nats / 3, rel=1e-5)
    assert metrics["val_bits_per_char"] == pytest.approx(total_nats / math.log(2) / 5, rel=1e-5)


def test_text_is_split_before_tokenizing(train_gpt):
    text = "hello there " * 90 + "zzzz zzzz " * 12  # "z" occurs only in the last 10 %
    train_text, val_text = train_gpt.split_text(text)
    assert train_text + val_text == text
    assert len(train_text) == int(len(text) * 0.9) and "z" not in train_text
    bpe = train_gpt.make_tokenizer("bpe", text, train_text, vocab_size=270)
    assert all(b"z" not in bpe.vocab[256 + r] for r in range(len(bpe.merges)))  # train only
    assert bpe.decode(bpe.encode(val_text)) == val_text
    char = train_gpt.make_tokenizer("char", text, train_text)
    assert "z" in char.itos  # the char vocabulary is the whole text's, as nanoGPT's


def test_kv_cache_benchmark_checks_identical_tokens():
    result = run_benchmark("kv_cache.py", "--block-size", "32", "--repeats", "1")
    assert result["identical"] is True
    assert result["block_size"] == 32
    assert result["new_tokens"] == 31
    assert set(result["speedups"]) == {"5", "9", "17", "32"}
    assert all(value > 0 for value in result["speedups"].values())


def test_bpe_benchmark_prints_both_timings():
    result = run_benchmark("bpe.py", "--chars", "20000", "--vocab-size", "300")
    assert set(result) == {
        "train_seconds",
        "encode_seconds",
        "vocab_size",
        "corpus_chars",
        "corpus_bytes",
        "tokens",
        "bytes_per_token",
        "round_trip",
    }
    assert result["vocab_size"] == 300
    assert result["corpus_chars"] == 20000
    assert result["round_trip"] is True
    assert result["train_seconds"] > 0 and result["encode_seconds"] > 0
    assert 1.0 < result["bytes_per_token"] < 4.0  # 44 merges already pack common pairs


def test_attention_cost_prints_memory_time_and_slope():
    result = run_benchmark("attention_cost.py", "--lengths", "256", "512", "--repeats", "1")
    assert result["lengths"] == [256, 512] and result["d_head"] == 64
    assert len(result["full_peak_bytes"]) == len(result["tiled_seconds"]) == 2
    assert all(
        b >= n * n * 4 for b, n in zip(result["full_peak_bytes"], [256, 512], strict=True)
    )  # at least one (n, n) matrix
    assert 1.8 < result["full_memory_slope"] < 2.1
    assert result["max_abs_diff"] < 1e-4


def test_lesson_preset_is_nanogpts_model_with_the_ladders_changes(train_gpt):
    """The default recipe differs from nanoGPT's model only by what lesson 09's ladder measures
    (rotary positions, ReLU squared) and a 128-character context; a straight line to zero."""
    lesson, nanogpt = train_gpt.PRESETS["lesson"], train_gpt.PRESETS["nanogpt-fitted"]
    assert lesson["model"] == {
        **nanogpt["model"],
        "block_size": 128,
        "positions": "rope",
        "activation": "relu2",
    }
    assert (lesson["batch_size"], lesson["max_lr"], lesson["min_lr"]) == (8, 3e-3, 0.0)
    assert (lesson["warmup_steps"], lesson["schedule"]) == (20, "linear")
    model, optimizer, schedule = train_gpt.build(lesson, vocab_size=65, seconds=10.0, steps=120)
    assert model.position_embedding is None and model.layers[0].self_attn.rope
    assert model.layers[0].feed_forward.activation == "relu2"
    for _ in range(70):  # 20 warm-up steps, then 50 of the 100 down to zero
        schedule.step()
    assert schedule.lr_now() == pytest.approx(1.5e-3)
    for _ in range(50):
        schedule.step()
    assert schedule.lr_now() == pytest.approx(0.0)
