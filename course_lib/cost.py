"""Measuring what a computation costs (lesson 10): time, peak tensor memory, growth rate.

    median_seconds(fn)      warm-up calls first (caches, lazy initialisation), then the median
                            of several timed calls: one slow call (another program, a page
                            fault) does not move it
    peak_tensor_bytes(fn)   the most bytes of tensors alive at once while fn runs, counted from
                            every tensor PyTorch creates during the call: on a GPU, what
                            torch.cuda.max_memory_allocated reports after
                            reset_peak_memory_stats, minus what was allocated before the call.
                            Inputs that existed before the call are not counted; scratch
                            space that a kernel allocates outside tensors (e.g. inside a
                            matrix multiply) is not seen. grad=True runs fn with autograd on,
                            so a fn that calls .backward() is measured forward + backward
                            (the tensors autograd saves, the gradients, the backward's
                            temporaries).
    minor_page_faults(fn)   how many fresh memory pages the operating system handed the process
                            while fn ran (resource.getrusage's ru_minflt): each is a 4 KiB page
                            zero-filled on first touch, the cost the C allocator adds when a
                            buffer is too large to be reused
    loglog_slope(ns, ys)    the exponent p of the best fit y ~ c * n^p (a straight line on
                            log-log axes): 1 for linear cost, 2 for quadratic

Python's tracemalloc does not see PyTorch's memory, and the process's resident size mixes in
the allocator's cached pages, so `peak_tensor_bytes` does its own accounting: a
TorchDispatchMode sees each new tensor's storage, adds its size, and a finaliser subtracts it
when the storage is freed.
"""

from __future__ import annotations

import math
import statistics
import time
import weakref
from collections.abc import Callable, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from .validation import check_callable, check_flag, check_non_negative_int, check_positive_int

__all__ = [
    "median_seconds",
    "peak_tensor_bytes",
    "minor_page_faults",
    "loglog_slope",
    "TensorMemoryCounter",
]


def median_seconds(fn: Callable[[], object], repeats: int = 5, warmup: int = 1) -> float:
    """Median wall-clock seconds of `repeats` calls of fn(), after `warmup` untimed calls."""
    check_callable(fn)
    check_positive_int(repeats, "repeats")
    check_non_negative_int(warmup, "warmup")
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


class TensorMemoryCounter(TorchDispatchMode):
    """Counts the bytes of tensor storage created inside `with` and alive at once (`.peak`)."""

    def __init__(self):
        super().__init__()
        self.current = 0
        self.peak = 0
        self._alive: dict[int, int] = {}  # storage address -> bytes

    def _release(self, address: int) -> None:
        self.current -= self._alive.pop(address, 0)

    def _track(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        address = storage.data_ptr()
        if address == 0 or address in self._alive:  # empty, or a view of a counted storage
            return
        self._alive[address] = storage.nbytes()
        self.current += storage.nbytes()
        self.peak = max(self.peak, self.current)
        # the storage's Python object lives exactly as long as the storage itself
        weakref.finalize(storage, self._release, address)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        # a view or an in-place result shares an input's storage: nothing new was allocated
        # (this is also what keeps slices of the caller's inputs from being counted)
        inputs = {
            leaf.untyped_storage().data_ptr()
            for leaf in tree_leaves((args, kwargs))
            if isinstance(leaf, torch.Tensor)
        }
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor) and leaf.untyped_storage().data_ptr() not in inputs:
                self._track(leaf)
        return out


def peak_tensor_bytes(fn: Callable[[], object], grad: bool = False) -> int:
    """The peak bytes of tensors created by fn() and alive at the same time (fn's result too).

    grad=False runs fn under torch.no_grad() (inference: autograd keeps nothing); grad=True
    with autograd on, for a fn that runs a forward and a backward pass. Gradients that fn
    leaves in `.grad` stay alive after it and are counted; set them to None inside fn to
    measure only the peak.
    """
    check_callable(fn)
    check_flag(grad, "grad")
    counter = TensorMemoryCounter()
    with torch.set_grad_enabled(grad), counter:
        result = fn()
    del result
    return counter.peak


def minor_page_faults(fn: Callable[[], object]) -> int:
    """The minor page faults of this process while fn() runs (Unix; resource.getrusage).

    A minor fault is a page of memory the operating system maps in and zero-fills on its first
    touch. A buffer the allocator reuses costs none; a large one that it returns to the system
    after each call (glibc does so above its mmap threshold, at most 32 MiB) costs one per
    4 KiB page, on every call.
    """
    import resource  # Unix only: imported here so that the module loads everywhere

    check_callable(fn)

    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    fn()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def loglog_slope(ns: Sequence[float], ys: Sequence[float]) -> float:
    """The least-squares slope of log(y) against log(n): y ~ c * n^slope."""
    if len(ns) != len(ys) or len(ns) < 2:
        raise ValueError(
            f"ns and ys must be two sequences of the same length >= 2, got {len(ns)} and {len(ys)}"
        )
    if min(ns) <= 0 or min(ys) <= 0:
        raise ValueError("ns and ys must be positive to be put on a log scale")
    xs = [math.log(n) for n in ns]
    ls = [math.log(y) for y in ys]
    x_mean, y_mean = sum(xs) / len(xs), sum(ls) / len(ls)
    num = sum((x - x_mean) * (y - y_mean) for x, y in zip(xs, ls, strict=True))
    den = sum((x - x_mean) ** 2 for x in xs)
    if den == 0:
        raise ValueError("ns must hold at least two different values")
    return num / den
