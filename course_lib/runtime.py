"""Seeding, device choice and the course's plotting style (used by every notebook)."""

from __future__ import annotations

import os
import platform
import random

import numpy as np
import torch

__all__ = [
    "seed_everything",
    "get_device",
    "use_course_style",
    "environment_report",
    "setup_notebook",
]


def seed_everything(seed: int = 0) -> torch.Generator:
    """Seed Python, NumPy and PyTorch so a notebook prints the same numbers on every run.

    Returns a `torch.Generator` seeded with `seed`, for code that wants its own stream.
    """
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def get_device(prefer: str | None = None) -> torch.device:
    """The device to compute on: `cuda` when a GPU is present, else `cpu`.

    `prefer` (or the environment variable COURSE_DEVICE) forces one, e.g. "cpu" to reproduce the
    committed outputs exactly on a machine that has a GPU.
    """
    choice = prefer or os.environ.get("COURSE_DEVICE")
    if choice is not None:
        if choice.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"device {choice!r} was asked for, but no CUDA GPU is available")
        return torch.device(choice)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


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
    }


def setup_notebook(seed: int = 0) -> torch.device:
    """What every notebook's setup cell calls: seed, plot style, device. Prints nothing."""
    seed_everything(seed)
    use_course_style()
    return get_device()
