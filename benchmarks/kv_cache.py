"""Generation with and without the KV cache of lesson 09: identical tokens, and the speed-up.

    python benchmarks/kv_cache.py [--block-size 256] [--repeats 3]

Builds the lesson's GPT (d_model 128, 4 layers, 4 heads; randomly initialised and seeded, since
the cost of a step does not depend on the weights), generates from a one-character prompt up to
several lengths, the longest being the model's full context (block_size), with a seeded
generator and top-k sampling, once re-running the model on the whole context at every step and
once with the cache. Prints one line per length, then last-line JSON
{"speedup", "identical", "new_tokens", "block_size", "speedups", "cpu_speedups"} where speedup
is the wall-clock speed-up at the full context, identical says whether every length gave the
same tokens both ways, and cpu_speedups are the same ratios in CPU time of this process (less
disturbed when other processes share the cores).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from course_lib.gpt import GPT, GPTConfig, generate  # noqa: E402


def best_time(fn, repeats: int) -> tuple[float, float, torch.Tensor]:
    """(best wall-clock seconds, best CPU seconds of this process, output) over `repeats` runs.

    The CPU time is less disturbed by other processes on a busy machine; the wall-clock time is
    what a user waits for and is the one reported as "speedup".
    """
    best_wall, best_cpu, out = float("inf"), float("inf"), None
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        out = fn()
        best_cpu = min(best_cpu, time.process_time() - cpu)
        best_wall = min(best_wall, time.perf_counter() - wall)
    return best_wall, best_cpu, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--block-size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    config = GPTConfig(
        vocab_size=72, block_size=args.block_size, d_model=128, num_heads=4, num_layers=4
    )
    model = GPT(config).eval()
    prompt = torch.zeros(1, 1, dtype=torch.long)  # (batch=1, 1)
    lengths = sorted(
        {args.block_size // 8, args.block_size // 4, args.block_size // 2, args.block_size - 1}
    )
    speedups, cpu_speedups, identical = {}, {}, True
    for new_tokens in lengths:

        def run(use_cache: bool, n: int = new_tokens) -> torch.Tensor:
            return generate(
                model,
                prompt,
                n,
                top_k=10,
                use_cache=use_cache,
                generator=torch.Generator().manual_seed(0),
            )

        plain_s, plain_cpu, plain = best_time(lambda: run(False), args.repeats)
        cached_s, cached_cpu, cached = best_time(lambda: run(True), args.repeats)
        same = torch.equal(plain, cached)
        identical = identical and same
        speedups[str(new_tokens + 1)] = round(plain_s / cached_s, 2)
        cpu_speedups[str(new_tokens + 1)] = round(plain_cpu / cached_cpu, 2)
        print(
            f"{new_tokens + 1:4d} tokens in context: {plain_s * 1000:8.1f} ms without cache, "
            f"{cached_s * 1000:8.1f} ms with: {plain_s / cached_s:5.2f}x "
            f"(CPU time {plain_cpu / cached_cpu:5.2f}x), identical={same}",
            flush=True,
        )
    full = str(lengths[-1] + 1)
    print(
        json.dumps(
            {
                "speedup": speedups[full],
                "identical": identical,
                "new_tokens": lengths[-1],
                "block_size": args.block_size,
                "speedups": speedups,
                "cpu_speedups": cpu_speedups,
            }
        )
    )


if __name__ == "__main__":
    main()
