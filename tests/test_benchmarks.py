"""The benchmark scripts run end to end and print the JSON line their issues ask for.

These are plumbing checks with tiny budgets (a few steps), not measurements: the figures
themselves come from running the scripts in full on a quiet machine (see their docstrings).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_benchmark(script: str, *args: str, timeout: float = 300) -> dict:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)
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
    from course_lib.models import TRANSLATOR_CONFIG, Seq2SeqTransformer
    from course_lib.tasks import date_tokenizer

    tokenizer = date_tokenizer()
    config = TRANSLATOR_CONFIG
    model = Seq2SeqTransformer(tokenizer.vocab_size, config["d_model"], config["num_heads"],
                               config["num_encoder_layers"], config["num_decoder_layers"],
                               config["d_ff"], pad_id=tokenizer.pad_id)
    assert result["params"] == model.num_parameters()  # the lesson's configuration, no other


def test_train_gpt_prints_its_result_line():
    result = run_benchmark("train_gpt.py", "--steps", "2", "--no-progress")
    assert {"val_loss", "train_seconds", "steps", "params", "corpus_chars", "preset"} <= set(result)
    assert result["steps"] == 2
    assert result["preset"] == "lesson"
    assert result["corpus_chars"] > 1_000_000  # the shipped Shakespeare corpus
    assert 3.0 < result["val_loss"] < 5.0  # near log(vocab) after two steps: untrained


def test_kv_cache_benchmark_checks_identical_tokens():
    result = run_benchmark("kv_cache.py", "--block-size", "32", "--repeats", "1")
    assert result["identical"] is True
    assert result["block_size"] == 32
    assert result["new_tokens"] == 31
    assert set(result["speedups"]) == {"5", "9", "17", "32"}
    assert all(value > 0 for value in result["speedups"].values())


def test_bpe_benchmark_prints_both_timings():
    result = run_benchmark("bpe.py", "--chars", "20000", "--vocab-size", "300")
    assert set(result) == {"train_seconds", "encode_seconds", "vocab_size", "corpus_chars",
                           "corpus_bytes", "tokens", "bytes_per_token", "round_trip"}
    assert result["vocab_size"] == 300
    assert result["corpus_chars"] == 20000
    assert result["round_trip"] is True
    assert result["train_seconds"] > 0 and result["encode_seconds"] > 0
    assert 1.0 < result["bytes_per_token"] < 4.0  # 44 merges already pack common pairs


def test_attention_cost_prints_memory_time_and_slope():
    result = run_benchmark("attention_cost.py", "--lengths", "256", "512", "--repeats", "1")
    assert result["lengths"] == [256, 512] and result["d_head"] == 64
    assert len(result["full_peak_bytes"]) == len(result["tiled_seconds"]) == 2
    assert all(b >= n * n * 4 for b, n in zip(result["full_peak_bytes"], [256, 512],
                                               strict=True))  # at least one (n, n) matrix
    assert 1.8 < result["full_memory_slope"] < 2.1
    assert result["max_abs_diff"] < 1e-4
