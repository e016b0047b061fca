"""Token ids to vectors, and vectors that mean something (lesson 01).

    one_hot(ids)        (...,)           -> (..., vocab_size)   a 1 at each id
    embed(ids, table)   one_hot @ table  -> (..., d)            = nn.Embedding, row look-up
    cosine similarity   u·v / (|u| |v|)                          1 same direction, 0 unrelated

The embeddings the lesson learns come from counting: which words appear near which
(`cooccurrence_matrix`), how much more often than chance (`ppmi`), compressed to a few dimensions
with an SVD (`svd_embeddings`). Word2vec's skip-gram with negative sampling learns, in effect, a
factorisation of a closely related matrix, the PMI before clipping shifted down by log k for k
negative samples (Levy and Goldberg, 2014); counting gives the same
kind of space, deterministically and in well under a second.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from torch import Tensor

from .validation import check_floating, check_positive_int, check_tensor, check_token_ids, is_int
from .viz import as_float_tensor

__all__ = [
    "one_hot",
    "embed",
    "cosine_similarity_matrix",
    "nearest_neighbours",
    "cooccurrence_matrix",
    "ppmi",
    "svd_embeddings",
    "count_embeddings",
    "project_2d",
    "plot_embeddings_2d",
]


def one_hot(ids: Tensor, vocab_size: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """(...,) integer ids -> (..., vocab_size) floats with a single 1 per row, at the id.

    Ids outside [0, vocab_size) raise ValueError: silently giving them an all-zero row (or,
    with negative indexing, someone else's row) would hide a bug in the tokenizer.
    """
    check_positive_int(vocab_size, "vocab_size")
    check_token_ids(ids, vocab_size)
    if not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point dtype, got {dtype}")
    vocabulary = torch.arange(vocab_size, device=ids.device)  # (vocab_size,)
    return (ids.unsqueeze(-1) == vocabulary).to(dtype)  # (..., vocab_size)


def embed(ids: Tensor, table: Tensor) -> Tensor:
    """(...,) ids and a (vocab_size, d) table -> (..., d), as one_hot(ids) @ table.

    Row i of `table` is the vector of token i, so the product picks one row per id: exactly
    what `nn.Embedding` does with a faster look-up.
    """
    check_tensor(table, "table", ndim=2, shape_hint="(vocab_size, d)")
    check_floating(table, "table")
    vocab_size = table.shape[0]
    check_tensor(ids, "ids", shape_hint="(...,) of token ids", allow_empty=True)
    hot = one_hot(ids, vocab_size, dtype=table.dtype)  # (..., vocab_size)
    return hot @ table  # (..., vocab_size) @ (vocab_size, d) -> (..., d)


def cosine_similarity_matrix(E: Tensor, eps: float = 1e-12) -> Tensor:
    """(n, d) vectors -> (n, n) cosine similarities, entry [i, j] = E_i·E_j / (|E_i| |E_j|).

    A zero vector has no direction: its similarity with everything (itself included) is 0,
    not the NaN that 0/0 would give.
    """
    check_tensor(E, "E", ndim=2, shape_hint="(n, d)")
    check_floating(E, "E")
    norms = E.norm(dim=-1, keepdim=True)  # (n, 1)
    unit = E / norms.clamp_min(eps)  # (n, d), zero rows stay zero
    return unit @ unit.T  # (n, n)


def nearest_neighbours(E: Tensor, index: int, k: int) -> Tensor:
    """The k rows of E most cosine-similar to row `index`, most similar first, itself excluded.

    E: (n, d). Returns a long tensor (k,) of row indices.
    """
    check_tensor(E, "E", ndim=2, shape_hint="(n, d)")
    check_floating(E, "E")
    n = E.shape[0]
    if isinstance(index, Tensor) and index.dim() == 0 and not index.is_floating_point():
        index = int(index)
    if not is_int(index) or not 0 <= index < n:
        raise ValueError(f"index must be an int in [0, n) = [0, {n}), got {index!r}")
    check_positive_int(k, "k")
    if k > n - 1:
        raise ValueError(f"k={k} neighbours asked for, but E has only n - 1 = {n - 1} other rows")
    similarity = cosine_similarity_matrix(E)[index].clone()  # (n,)
    similarity[index] = float("-inf")  # never one's own neighbour
    return similarity.topk(k).indices  # (k,), largest first


# ------------------------------------------------------------------------------------------
# Learning embeddings from a corpus by counting
# ------------------------------------------------------------------------------------------


def cooccurrence_matrix(
    sequences: Sequence[Sequence[int]], vocab_size: int, window: int = 2
) -> Tensor:
    """(vocab_size, vocab_size) float64 counts: [i, j] = how often j is within `window` of i."""
    check_positive_int(vocab_size, "vocab_size")
    check_positive_int(window, "window")
    if isinstance(sequences, str):
        raise TypeError("sequences must be a list of token-id lists (one per sentence), got a str")
    counts = torch.zeros(vocab_size, vocab_size, dtype=torch.float64)
    for i, seq in enumerate(sequences):
        if isinstance(seq, str) or getattr(seq, "ndim", 1) != 1 or not hasattr(seq, "__len__"):
            raise TypeError(
                f"sequences must be a list of token-id lists (one per sentence), but "
                f"sequences[{i}] is {seq!r}; to count one sequence ids, pass [ids]"
            )
        ids = torch.as_tensor(list(seq), dtype=torch.long)  # (seq_len,)
        check_token_ids(ids, vocab_size, "sequences")
        for offset in range(1, window + 1):
            left, right = ids[:-offset], ids[offset:]  # pairs `offset` apart
            ones = torch.ones(len(left), dtype=torch.float64)
            counts.index_put_((left, right), ones, accumulate=True)
            counts.index_put_((right, left), ones, accumulate=True)
    return counts


def ppmi(counts: Tensor, alpha: float = 0.75) -> Tensor:
    """Positive pointwise mutual information of a (V, V) count matrix.

    PMI(i, j) = log P(i, j) / (P(i) P(j)): how much more often i and j meet than if words were
    scattered at random. Negative values (met less than chance) are clipped to 0. `alpha`
    smooths the context distribution (P(j) ~ count^alpha), which stops rare contexts from
    giving huge PMI values.
    """
    check_tensor(counts, "counts", ndim=2, shape_hint="(vocab_size, vocab_size)")
    check_floating(counts, "counts")
    if bool((counts < 0).any()):
        raise ValueError("counts holds negative numbers; co-occurrence counts are >= 0")
    total = counts.sum()
    if total <= 0:
        raise ValueError("counts is all zeros; there is nothing to learn from")
    p_joint = counts / total  # (V, V)
    p_word = counts.sum(dim=1, keepdim=True) / total  # (V, 1)
    context = counts.sum(dim=0, keepdim=True) ** alpha  # (1, V)
    p_context = context / context.sum()
    with torch.no_grad():
        pmi = torch.log(p_joint / (p_word * p_context))
    return pmi.nan_to_num(0.0, posinf=0.0, neginf=0.0).clamp_min(0.0)


def svd_embeddings(matrix: Tensor, dim: int) -> Tensor:
    """The best rank-`dim` summary of a (V, V) matrix: rows of U_dim sqrt(S_dim), (V, dim).

    The sign of each singular vector is arbitrary (LAPACK may flip it); we fix it so that its
    largest entry is positive, which makes the plots identical on every machine.
    """
    check_tensor(matrix, "matrix", ndim=2, shape_hint="(V, V)")
    check_floating(matrix, "matrix")
    check_positive_int(dim, "dim")
    if dim > min(matrix.shape):
        raise ValueError(f"dim={dim} is larger than the matrix allows ({min(matrix.shape)})")
    U, S, _ = torch.linalg.svd(matrix, full_matrices=False)
    U, S = U[:, :dim], S[:dim]  # (V, dim), (dim,)
    signs = torch.sign(U.gather(0, U.abs().argmax(dim=0, keepdim=True)))  # (1, dim)
    return U * signs * S.sqrt()  # (V, dim)


def count_embeddings(
    sequences: Sequence[Sequence[int]], vocab_size: int, dim: int = 16, window: int = 2
) -> Tensor:
    """Count, PPMI, SVD: a (vocab_size, dim) float32 table of learned word vectors.

    Learned by counting, not by gradient descent (hence the name): the same corpus always gives
    the same table. A token that never occurs (e.g. `<pad>`) gets a zero vector.
    """
    counts = cooccurrence_matrix(sequences, vocab_size, window)
    return svd_embeddings(ppmi(counts), dim).float()


def project_2d(E: Tensor) -> Tensor:
    """(n, d) -> (n, 2): the two directions along which the rows vary most (PCA)."""
    check_tensor(E, "E", ndim=2, shape_hint="(n, d)")
    check_floating(E, "E")
    if E.shape[0] < 2 or E.shape[1] < 2:
        raise ValueError(
            f"E needs at least 2 rows and 2 columns to project, got shape {tuple(E.shape)}"
        )
    centred = (E - E.mean(dim=0, keepdim=True)).double()
    return _pca(centred).to(E.dtype)


def _pca(centred: Tensor) -> Tensor:
    U, S, _ = torch.linalg.svd(centred, full_matrices=False)
    U, S = U[:, :2], S[:2]
    signs = torch.sign(U.gather(0, U.abs().argmax(dim=0, keepdim=True)))
    return U * signs * S  # (n, 2), the coordinates along the two principal directions


def plot_embeddings_2d(
    points: Tensor,
    labels: Sequence[str],
    *,
    groups: Sequence[str] | None = None,
    title: str = "Word vectors in 2-D: similar words land close together",
    ax: plt.Axes | None = None,
) -> plt.Axes:
    """Scatter (n, 2) points with a text label each; `groups` colours them by family."""
    points = as_float_tensor(points, "points")
    if points.dim() != 2 or points.shape[1] != 2:
        raise ValueError(
            f"points must have shape (n, 2), got {tuple(points.shape)}; use project_2d first"
        )
    if len(labels) != points.shape[0]:
        raise ValueError(f"got {len(labels)} labels for {points.shape[0]} points")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 4.8))
    names = list(groups) if groups is not None else ["words"] * len(labels)
    for group in dict.fromkeys(names):
        rows = [i for i, g in enumerate(names) if g == group]
        ax.scatter(points[rows, 0], points[rows, 1], label=group, s=40)
    distances = torch.cdist(points, points).fill_diagonal_(float("inf"))  # (n, n)
    nearest = distances.argmin(dim=1) if len(labels) > 1 else torch.zeros(1, dtype=torch.long)
    for i, ((x, y), label) in enumerate(zip(points.tolist(), labels, strict=True)):
        # label above the point, or below it when its nearest neighbour is above, so that two
        # close points do not write their labels on top of each other
        below = len(labels) > 1 and y < float(points[nearest[i], 1])
        offset = (4, -11) if below else (4, 4)
        ax.annotate(label, (x, y), textcoords="offset points", xytext=offset, fontsize=9)
    ax.margins(x=0.1, y=0.12)  # room for the labels written below the lowest points
    ax.set_xlabel("first principal direction")
    ax.set_ylabel("second principal direction")
    ax.set_title(title)
    if groups is not None:
        ax.legend(loc="best", fontsize=8)
    return ax
