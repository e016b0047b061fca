"""Full vs tiled attention (lesson 10): peak tensor memory and time against sequence length.

    python benchmarks/attention_cost.py [--lengths 1024 2048 4096] [--d-head 64] [--repeats 3]

For each length n, random q, k, v of shape (n, d_head) (one head; seeded), course_lib's full
attention (lesson 02's `scaled_dot_product_attention`, which stores the n x n weights) and
`tiled_attention` (online softmax, blocks of 128). Memory is `course_lib.cost.peak_tensor_bytes`:
the most bytes of tensors alive at once during the call, counted from every tensor PyTorch
creates (inputs excluded). Time is the median of `repeats` calls after one warm-up call, on one
thread. Prints one line per length, then last-line JSON
{"lengths", "d_head", "full_peak_bytes", "tiled_peak_bytes", "memory_ratio", "full_seconds",
 "tiled_seconds", "full_memory_slope", "tiled_memory_slope", "max_abs_diff", "threads"}
where the slopes are least-squares fits of log(memory) against log(n) (2 = quadratic,
1 = linear), memory_ratio is full / tiled per length, and max_abs_diff is the largest
difference between the two outputs over all lengths.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from course_lib.attention import scaled_dot_product_attention  # noqa: E402
from course_lib.cost import loglog_slope, median_seconds, peak_tensor_bytes  # noqa: E402
from course_lib.efficient_attention import tiled_attention  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096])
    parser.add_argument("--d-head", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(0)
    result = {
        "lengths": args.lengths,
        "d_head": args.d_head,
        "full_peak_bytes": [],
        "tiled_peak_bytes": [],
        "memory_ratio": [],
        "full_seconds": [],
        "tiled_seconds": [],
        "max_abs_diff": 0.0,
        "threads": args.threads,
    }
    for n in args.lengths:
        q, k, v = (torch.randn(n, args.d_head, generator=generator) for _ in range(3))

        def full(q=q, k=k, v=v):
            return scaled_dot_product_attention(q, k, v)[0]

        def tiled(q=q, k=k, v=v):
            return tiled_attention(q, k, v)

        full_bytes, tiled_bytes = peak_tensor_bytes(full), peak_tensor_bytes(tiled)
        with torch.no_grad():
            diff = (full() - tiled()).abs().max().item()
            full_s = median_seconds(full, repeats=args.repeats)
            tiled_s = median_seconds(tiled, repeats=args.repeats)
        result["full_peak_bytes"].append(full_bytes)
        result["tiled_peak_bytes"].append(tiled_bytes)
        result["memory_ratio"].append(round(full_bytes / tiled_bytes, 2))
        result["full_seconds"].append(round(full_s, 5))
        result["tiled_seconds"].append(round(tiled_s, 5))
        result["max_abs_diff"] = max(result["max_abs_diff"], diff)
        print(
            f"n={n}: full {full_bytes / 2**20:.1f} MiB {full_s * 1000:.1f} ms | tiled "
            f"{tiled_bytes / 2**20:.2f} MiB {tiled_s * 1000:.1f} ms | max diff {diff:.1e}",
            file=sys.stderr,
        )
    if len(args.lengths) >= 2:
        result["full_memory_slope"] = round(
            loglog_slope(args.lengths, result["full_peak_bytes"]), 3
        )
        result["tiled_memory_slope"] = round(
            loglog_slope(args.lengths, result["tiled_peak_bytes"]), 3
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
