"""Full vs tiled attention (lesson 10): peak tensor memory and time against sequence length,
for the forward pass alone (inference) and for forward + backward (training).

    python benchmarks/attention_cost.py [--lengths 1024 2048 4096] [--d-head 64] [--repeats 3]

For each length n, random q, k, v of shape (n, d_head) (one head; seeded), course_lib's full
attention (lesson 02's `scaled_dot_product_attention`, which stores the n x n weights) and
`tiled_attention` (FlashAttention's algorithm: online softmax in blocks of 128, saves only
q, k, v, the output and one log-sum-exp per query, recomputes the tiles in the backward pass).
Memory is `course_lib.cost.peak_tensor_bytes`: the most bytes of tensors alive at once during
the call, counted from every tensor PyTorch creates (inputs excluded); for forward + backward
it includes what autograd saves, the gradients and the backward's temporaries. Time is the
median of `repeats` calls after one warm-up call, on one thread. Prints one line per length,
then last-line JSON
{"lengths", "d_head", "full_peak_bytes", "tiled_peak_bytes", "memory_ratio", "full_seconds",
 "tiled_seconds", "full_train_peak_bytes", "tiled_train_peak_bytes", "train_memory_ratio",
 "full_train_seconds", "tiled_train_seconds", "full_memory_slope", "tiled_memory_slope",
 "full_train_memory_slope", "tiled_train_memory_slope", "max_abs_diff", "max_grad_diff",
 "threads"}
where the slopes are least-squares fits of log(memory) against log(n) (2 = quadratic,
1 = linear), the ratios are full / tiled per length, and max_abs_diff and max_grad_diff are
the largest differences between the two outputs and the two sets of gradients (dq, dk, dv)
over all lengths.
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

KINDS = ("full", "tiled")


def attention(kind, q, k, v):
    if kind == "full":
        return scaled_dot_product_attention(q, k, v)[0]
    return tiled_attention(q, k, v)


def train_step(kind, q, k, v, d_out):
    """Forward + backward; returns (dq, dk, dv) and leaves no .grad behind."""
    out = attention(kind, q, k, v)
    return torch.autograd.grad(out, (q, k, v), d_out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096])
    parser.add_argument("--d-head", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(0)
    keys = ("peak_bytes", "seconds", "train_peak_bytes", "train_seconds")
    result = {"lengths": args.lengths, "d_head": args.d_head}
    result.update({f"{kind}_{key}": [] for key in keys for kind in KINDS})
    result.update({"memory_ratio": [], "train_memory_ratio": []})
    result.update({"max_abs_diff": 0.0, "max_grad_diff": 0.0, "threads": args.threads})
    for n in args.lengths:
        q, k, v, d_out = (torch.randn(n, args.d_head, generator=generator) for _ in range(4))
        for t in (q, k, v):
            t.requires_grad_(True)
        outs, grads = {}, {}
        for kind in KINDS:

            def forward(kind=kind, q=q, k=k, v=v):
                return attention(kind, q, k, v)

            def step(kind=kind, q=q, k=k, v=v, d_out=d_out):
                return train_step(kind, q, k, v, d_out)

            result[f"{kind}_peak_bytes"].append(peak_tensor_bytes(forward))
            result[f"{kind}_train_peak_bytes"].append(peak_tensor_bytes(step, grad=True))
            with torch.no_grad():
                outs[kind] = forward()
                result[f"{kind}_seconds"].append(round(median_seconds(forward, args.repeats), 5))
            grads[kind] = step()
            result[f"{kind}_train_seconds"].append(round(median_seconds(step, args.repeats), 5))
        diff = (outs["full"] - outs["tiled"]).abs().max().item()
        grad_diff = max(
            (a - b).abs().max().item() for a, b in zip(grads["full"], grads["tiled"], strict=True)
        )
        result["max_abs_diff"] = max(result["max_abs_diff"], diff)
        result["max_grad_diff"] = max(result["max_grad_diff"], grad_diff)
        for prefix in ("", "train_"):
            full, tiled = (
                result[f"full_{prefix}peak_bytes"][-1],
                result[f"tiled_{prefix}peak_bytes"][-1],
            )
            result[f"{prefix}memory_ratio"].append(round(full / tiled, 2))
        print(
            f"n={n}: forward: full {result['full_peak_bytes'][-1] / 2**20:.1f} MiB "
            f"{result['full_seconds'][-1] * 1000:.1f} ms | tiled "
            f"{result['tiled_peak_bytes'][-1] / 2**20:.2f} MiB "
            f"{result['tiled_seconds'][-1] * 1000:.1f} ms || forward + backward: full "
            f"{result['full_train_peak_bytes'][-1] / 2**20:.1f} MiB "
            f"{result['full_train_seconds'][-1] * 1000:.1f} ms | tiled "
            f"{result['tiled_train_peak_bytes'][-1] / 2**20:.2f} MiB "
            f"{result['tiled_train_seconds'][-1] * 1000:.1f} ms "
            f"({result['train_memory_ratio'][-1]:.0f}x less memory) | max diff {diff:.1e}, "
            f"gradients {grad_diff:.1e}",
            file=sys.stderr,
        )
    if len(args.lengths) >= 2:
        for kind in KINDS:
            for prefix in ("", "train_"):
                slope = loglog_slope(args.lengths, result[f"{kind}_{prefix}peak_bytes"])
                result[f"{kind}_{prefix}memory_slope"] = round(slope, 3)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
