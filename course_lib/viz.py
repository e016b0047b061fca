"""Figures used across lessons: attention heatmaps, per-head grids, curves.

Every figure has a title that says what to look for and labelled axes.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from torch import Tensor

__all__ = ["attention_heatmap", "head_grid", "line_plot", "query_weights_bar"]


def as_float_tensor(values: Tensor | Sequence, name: str) -> Tensor:
    """`values` as a float CPU tensor for plotting, or a TypeError that names the argument."""
    try:
        return torch.as_tensor(values).detach().float().cpu()
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(
            f"{name} must be a tensor (or nested lists of numbers), got {type(values).__name__}"
        ) from None


def _as_2d(weights: Tensor | Sequence, name: str) -> Tensor:
    w = as_float_tensor(weights, name)
    if w.dim() != 2:
        raise ValueError(f"{name} must be 2-D (n_q, n_k), got shape {tuple(w.shape)}")
    return w


def _positive_number(value, name: str) -> float:
    if isinstance(value, (bool, str)):
        raise TypeError(f"{name} must be a number or None, got {type(value).__name__}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number or None, got {type(value).__name__}") from None
    if not number > 0:
        raise ValueError(f"{name} must be positive (the top of the colour scale), got {value!r}")
    return number


def attention_heatmap(
    weights: Tensor,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    title: str = "Attention weights (each row sums to 1)",
    ax: plt.Axes | None = None,
    annotate: bool | None = None,
    colorbar: bool = True,
    cmap: str = "Blues",
    vmax: float | None = None,
) -> plt.Axes:
    """Heatmap of an (n_q, n_k) weight matrix: rows are queries, columns are keys.

    The colours run from 0 to `vmax`; by default (None) to the largest weight in `weights`.
    Pass `vmax=1.0` to draw several heatmaps on one shared 0-1 scale.
    """
    w = _as_2d(weights, "weights")
    n_q, n_k = w.shape
    query_labels = list(query_labels) if query_labels is not None else [str(i) for i in range(n_q)]
    key_labels = list(key_labels) if key_labels is not None else [str(i) for i in range(n_k)]
    if len(query_labels) != n_q or len(key_labels) != n_k:
        raise ValueError(
            f"got {len(query_labels)} query labels and {len(key_labels)} key labels for weights "
            f"of shape ({n_q}, {n_k})"
        )
    if vmax is None:
        vmax = max(1e-9, float(w.max()))
    else:
        vmax = _positive_number(vmax, "vmax")
    if ax is None:
        _, ax = plt.subplots(figsize=(0.55 * n_k + 2.2, 0.5 * n_q + 1.4))
    image = ax.imshow(w, cmap=cmap, vmin=0.0, vmax=vmax, aspect="auto")
    ax.set_xticks(range(n_k), key_labels, rotation=45, ha="right")
    ax.set_yticks(range(n_q), query_labels)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    ax.set_title(title)
    ax.grid(False)
    if annotate is None:
        annotate = n_q * n_k <= 100
    if annotate:
        for i in range(n_q):
            for j in range(n_k):
                value = float(w[i, j])
                ax.text(
                    j,
                    i,
                    f"{value:.2f}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if value > 0.6 * vmax else "black",
                )
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="weight")
    return ax


def head_grid(
    weights: Tensor,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    title: str = "Attention weights per head",
    cols: int = 4,
    vmax: float | None = None,
    colorbar: bool = False,
) -> plt.Figure:
    """One heatmap per head for weights of shape (num_heads, n_q, n_k).

    By default (`vmax=None`, no colour bar) each panel's colours run from 0 to its own largest
    weight. Pass `vmax=1.0` for one shared 0-1 scale, and `colorbar=True` for one colour bar
    for the whole grid; with `colorbar=True` and no `vmax`, the panels share the scale 0 to the
    largest weight of any head, so that the one colour bar is true for every panel.
    """
    w = as_float_tensor(weights, "weights")
    if w.dim() != 3:
        raise ValueError(f"weights must be (num_heads, n_q, n_k), got shape {tuple(w.shape)}")
    num_heads = w.shape[0]
    if vmax is not None:
        vmax = _positive_number(vmax, "vmax")
    elif colorbar:
        vmax = max(1e-9, float(w.max()))  # one scale for all panels, so one colour bar fits all
    cols = min(cols, num_heads)
    rows = (num_heads + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.0 * rows), squeeze=False)
    for h, ax in enumerate(axes.flat):
        if h >= num_heads:
            ax.axis("off")
            continue
        attention_heatmap(
            w[h],
            query_labels,
            key_labels,
            ax=ax,
            title=f"head {h}",
            annotate=False,
            colorbar=False,
            vmax=vmax,
        )
        if h % cols:
            ax.set_ylabel("")
    fig.suptitle(title)
    fig.tight_layout()
    if colorbar:
        fig.colorbar(
            axes.flat[0].images[0],
            ax=axes.ravel().tolist(),
            fraction=0.025,
            pad=0.02,
            label="weight",
        )
    return fig


def line_plot(
    series: dict[str, Sequence[float]],
    *,
    x: Sequence[float] | None = None,
    xlabel: str,
    ylabel: str,
    title: str,
    logx: bool = False,
    logy: bool = False,
    ax: plt.Axes | None = None,
) -> plt.Axes:
    """Several named curves on one labelled axis (loss curves, schedules, measurements)."""
    if not isinstance(series, dict):
        raise TypeError(
            "series must be a dict of named curves, e.g. {'train': losses}, got "
            f"{type(series).__name__}"
        )
    x = None if x is None else list(x)
    for label, ys in series.items():
        if x is not None and len(x) != len(ys):
            raise ValueError(
                f"x has {len(x)} values but series[{label!r}] has {len(ys)}; give one x per value"
            )
    if ax is None:
        _, ax = plt.subplots()
    for label, ys in series.items():
        xs = x if x is not None else list(range(1, len(ys) + 1))
        ax.plot(xs, list(ys), label=label, marker="o" if len(ys) <= 20 else None)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    if len(series) > 1:
        ax.legend()
    return ax


def query_weights_bar(
    weights: Tensor | Sequence[float],
    key_labels: Sequence[str],
    *,
    query_label: str | None = None,
    title: str | None = None,
    ax: plt.Axes | None = None,
) -> plt.Axes:
    """Bar chart of one query's attention weights over the keys (one row of the heatmap)."""
    w = as_float_tensor(weights, "weights")
    if w.dim() != 1:
        raise ValueError(f"weights must be 1-D (n_k,), one query's row, got shape {tuple(w.shape)}")
    key_labels = list(key_labels)
    if len(key_labels) != w.shape[0]:
        raise ValueError(f"got {len(key_labels)} key labels for {w.shape[0]} weights")
    if ax is None:
        _, ax = plt.subplots(figsize=(0.55 * len(key_labels) + 2.5, 2.8))
    bars = ax.bar(range(len(key_labels)), w.tolist(), color="tab:blue")
    for bar, value in zip(bars, w.tolist(), strict=True):
        ax.text(
            bar.get_x() + bar.get_width() / 2,
            value,
            f"{value:.2f}",
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_xticks(range(len(key_labels)), key_labels, rotation=45, ha="right")
    ax.set_ylim(0, max(1e-9, float(w.max())) * 1.18)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("attention weight")
    if title is None:
        title = (
            f"Where {query_label!r} attends (weights sum to 1)"
            if query_label
            else ("Attention weights of one query (they sum to 1)")
        )
    ax.set_title(title)
    return ax
