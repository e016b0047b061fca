"""Seeding, device choice and the course's plotting style (used by every notebook)."""

from __future__ import annotations

import os
import platform
import random

import numpy as np
import torch

from .validation import check_non_negative_int, check_positive_int

__all__ = [
    "seed_everything",
    "get_device",
    "use_course_style",
    "environment_report",
    "setup_notebook",
    "set_threads",
]


def seed_everything(seed: int = 0) -> torch.Generator:
    """Seed Python, NumPy and PyTorch so a notebook prints the same numbers on every run.

    Returns a `torch.Generator` seeded with `seed`, for code that wants its own stream.
    """
    check_non_negative_int(seed, "seed")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def get_device(prefer: str | torch.device | None = None) -> torch.device:
    """The device to compute on: `cuda` when a GPU is present, else `cpu`.

    `prefer` (or the environment variable COURSE_DEVICE) forces one, e.g. "cpu" to reproduce the
    committed outputs exactly on a machine that has a GPU: "cpu", "cuda" (or "cuda:1", ...),
    "mps" (an Apple GPU) or a torch.device.
    """
    if prefer is not None and not isinstance(prefer, (str, torch.device)):
        raise TypeError(
            f"prefer must be a device name such as 'cpu' or 'cuda', got {prefer!r} "
            f"({type(prefer).__name__})"
        )
    source = "prefer" if prefer else "COURSE_DEVICE"
    choice = str(prefer or os.environ.get("COURSE_DEVICE") or "")
    if not choice:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(choice)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda", "mps"):
        raise ValueError(
            f"{source}={choice!r} is not a device the course runs on: use 'cpu', 'cuda' (or "
            "'cuda:1', ...) or 'mps' (an Apple GPU)"
        )
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {choice!r} was asked for, but no CUDA GPU is available")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise ValueError(
            f"device {choice!r} was asked for, but this machine has "
            f"{torch.cuda.device_count()} CUDA GPU(s), numbered from cuda:0"
        )
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {choice!r} was asked for, but no Apple GPU (MPS) is available")
    return device


def use_course_style() -> None:
    """One consistent look for every figure in the course (sizes, fonts, grid, colormap)."""
    import matplotlib as mpl

    mpl.rcParams.update(
        {
            "figure.figsize": (6.4, 4.0),
            "figure.dpi": 90,
            "savefig.dpi": 90,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.titlesize": 11,
            "axes.labelsize": 10,
            "legend.frameon": False,
            "image.cmap": "viridis",
        }
    )


def environment_report() -> dict[str, str]:
    """What this notebook runs on: versions, device and thread count (lesson 00's check)."""
    import matplotlib

    import course_lib

    device = get_device()
    return {
        "python": platform.python_version(),
        "torch": torch.__version__.split("+")[0],
        "numpy": np.__version__,
        "matplotlib": matplotlib.__version__,
        "course_lib": course_lib.__version__,
        "device": device.type,
        "threads": str(torch.get_num_threads()),
    }


def set_threads(threads: int | None = None) -> int:
    """Fix how many CPU threads PyTorch uses: `threads`, else $COURSE_THREADS, else 1.

    One thread is the course's default, for two reasons. The models are small, so their many
    small operations gain little from a second thread. And a parallel operation waits for its
    slowest thread: when other programs keep the cores busy, every operation waits for a
    thread the system has paused, and training can become ten times slower (measured on a
    2-core machine: 11.5 steps/s on one thread, 1.5 on two, while other jobs ran). With one
    thread, a busy machine makes the course slower, never stuck, and the numbers a lesson
    prints do not depend on how many cores the machine has. Set COURSE_THREADS=4 (say)
    before starting Jupyter to use more.
    """
    if threads is None:
        raw = os.environ.get("COURSE_THREADS", "1")
        try:
            threads = int(raw)
        except ValueError:
            raise ValueError(f"COURSE_THREADS must be a positive integer, got {raw!r}") from None
    check_positive_int(threads, "threads")
    torch.set_num_threads(threads)
    return threads


def setup_notebook(seed: int = 0) -> torch.device:
    """What every notebook's setup cell calls: seed, threads, plot style, device.

    Prints nothing; returns the device to compute on.
    """
    seed_everything(seed)
    set_threads()
    use_course_style()
    return get_device()
