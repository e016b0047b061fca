"""What only a CUDA GPU can show (skipped without one; CI has none).

Run on a GPU machine beside `tools/gpu_notebooks.py`, which runs every notebook there:
`peak_tensor_bytes` against CUDA's own allocator statistics, FlashAttention's tiles against full
attention on the GPU, and a learner whose code computes on the GPU graded like one on the CPU.
"""

from __future__ import annotations

import pytest
import torch

from course_lib.attention import scaled_dot_product_attention
from course_lib.cost import peak_tensor_bytes
from course_lib.efficient_attention import tiled_attention
from course_lib.grading import check_result

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _inputs(n=2048, d=64, grad=False):
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, d_out = (torch.randn(n, d, device="cuda", generator=g) for _ in range(4))
    return [t.requires_grad_(grad) for t in (q, k, v)], d_out


def _attention(kind, q, k, v, causal=False):
    if kind == "full":
        return scaled_dot_product_attention(q, k, v, is_causal=causal)[0]
    return tiled_attention(q, k, v, causal=causal)


def _cuda_peak(fn):
    """What CUDA's caching allocator reports: the most bytes allocated during fn, above before."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


@pytest.mark.parametrize("kind", ["full", "tiled"])
@pytest.mark.parametrize("train", [False, True], ids=["forward", "forward+backward"])
def test_peak_tensor_bytes_is_what_cuda_reports(kind, train):
    # course_lib.cost's docstring says its count is, on a GPU, what max_memory_allocated reports
    (q, k, v), d_out = _inputs(grad=train)

    def fn():
        out = _attention(kind, q, k, v)
        return torch.autograd.grad(out, (q, k, v), d_out) if train else out

    fn()  # warm-up: cuBLAS's workspace and the kernels are allocated once, outside the count
    ours, cuda = peak_tensor_bytes(fn, grad=train), _cuda_peak(fn)
    print(
        f"{kind} {'train' if train else 'forward'}: ours {ours / 2**20:.2f} MiB, "
        f"CUDA {cuda / 2**20:.2f} MiB"
    )
    # CUDA rounds each block up to 512 bytes; one (2048, 64) float32 tensor is 512 KiB
    assert abs(ours - cuda) <= 0.02 * cuda + 64 * 512, (ours, cuda)


@pytest.mark.parametrize("causal", [False, True])
def test_tiled_attention_on_the_gpu_equals_full_attention_with_its_gradients(causal):
    (q, k, v), d_out = _inputs(n=1000, grad=True)  # not a multiple of the 128-row tiles
    outs, grads = {}, {}
    for kind in ("full", "tiled"):
        outs[kind] = _attention(kind, q, k, v, causal)
        grads[kind] = torch.autograd.grad(outs[kind], (q, k, v), d_out)
    assert outs["tiled"].device.type == "cuda"
    # TF32 may be on for matrix products on the GPU: float32 with a 10-bit mantissa
    torch.testing.assert_close(outs["tiled"], outs["full"], rtol=2e-3, atol=2e-3)
    for a, b in zip(grads["tiled"], grads["full"], strict=True):
        torch.testing.assert_close(a, b, rtol=2e-3, atol=2e-3)


def _softmax_on_the_gpu(x, dim=-1):
    x = x.to("cuda")  # a Colab learner's habit: everything on `device`
    e = (x - x.amax(dim=dim, keepdim=True)).exp()
    return e / e.sum(dim=dim, keepdim=True)


def test_a_learner_whose_code_computes_on_the_gpu_gets_full_marks():
    result = check_result("ex02.softmax", _softmax_on_the_gpu)
    assert result.score == result.max_score, result.feedback


def test_a_check_under_a_cuda_default_device_runs_on_the_cpu_and_gives_it_back():
    def softmax(x, dim=-1):
        e = (x - x.amax(dim=dim, keepdim=True)).exp()
        return e / e.sum(dim=dim, keepdim=True)

    torch.set_default_device("cuda")
    try:
        result = check_result("ex02.softmax", softmax)
        after = torch.get_default_device()
    finally:
        torch.set_default_device(None)
    assert result.score == result.max_score, result.feedback
    assert after.type == "cuda"


class _FeedForwardOnTheGpu(torch.nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu", bias=True):
        super().__init__()
        self.linear1 = torch.nn.Linear(d_model, d_ff, bias=bias)
        self.dropout = torch.nn.Dropout(dropout)
        self.linear2 = torch.nn.Linear(d_ff, d_model, bias=bias)
        self.to("cuda")  # the Colab habit, inside __init__

    def forward(self, x):
        return self.linear2(self.dropout(self.linear1(x).relu()))


def test_a_module_built_on_the_gpu_is_told_where_to_move_it():
    # before: "your code raised RuntimeError: Expected all tensors to be on the same device, but
    # got mat1 is on cpu, different from other tensors on cuda:0 ... To see the line that fails"
    result = check_result("ex07.FeedForward", _FeedForwardOnTheGpu)
    assert "same device" in result.feedback and "Hint: your code names a device" in result.feedback
