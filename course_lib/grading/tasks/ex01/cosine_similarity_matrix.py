"""ex01.cosine_similarity_matrix: every pair of rows, zero vectors at similarity 0."""

from __future__ import annotations

import torch

from ...core import Case, Task, register
from ..common import randn
from ._shared import LESSON, kept_result, repeated, unit_rows

_FLAT = ("no_keepdim", "columns_by_flat_norms", "squared_flat_norms")


@register
class CosineSimilarityMatrix(Task):
    id = "ex01.cosine_similarity_matrix"
    lesson = f"{LESSON}, section 'Cosine similarity'"
    reference = "course_lib.embeddings.cosine_similarity_matrix"
    forbidden = (
        "torch.nn.functional.cosine_similarity",
        "torch.cosine_similarity",
        "torch.nn.CosineSimilarity",
    )
    mistake_table = {
        "tiny_as_zero": "the tiny vectors (lengths about 1e-9) are not zero vectors: a threshold "
        "such as norm > 1e-6 treats them as zero; guard only the zero lengths, "
        "torch.where(norm > 0, ...) or norm.clamp_min(1e-12)",
        "raw_dot": "those are raw dot products; divide by the lengths |E_i| |E_j| (normalise "
        "every row to length 1 first)",
        "no_guard": "a zero vector has length 0 and 0/0 = NaN; clamp the lengths (e.g. "
        "norm.clamp_min(1e-12)) so a zero vector gets similarity 0",
        "clamp_too_large": "the similarities of tiny vectors (lengths about 1e-9, not zero) "
        "are wrong: clamp_min(1e-8) (F.cosine_similarity's eps), or a clamp of the squared "
        "lengths or of their product, changes every length below it; guard only the zeros, "
        "norm.clamp_min(1e-12) on the lengths (or torch.where(norm > 0, ...))",
        "one_length": "you divided by the length of only one of the two vectors; divide by "
        "|E_i| |E_j|",
        "squared_norms": "divide by the lengths |E_i| |E_j|, not by the squared lengths",
        "columns": "you normalised the columns (dim=0); each ROW is a vector: divide every row "
        "by its own length, E.norm(dim=-1, keepdim=True)",
        "whole_norm": "E.norm() without dim is the length of the whole matrix; divide every row "
        "by its own length, E.norm(dim=-1, keepdim=True) (norms.T @ norms, (1, n) @ (n, 1), is "
        "the same slip: one number, the squared length of the whole matrix; the product of the "
        "lengths |E_i| |E_j| is the outer product norms @ norms.T)",
        "no_keepdim": "the row lengths E.norm(dim=-1) have shape (n,), which lines up with the "
        "LAST axis of E (d); keep the axis, E.norm(dim=-1, keepdim=True) of shape (n, 1), so "
        "each row is divided by its own length",
        "columns_by_flat_norms": "(E @ E.T) / norms with 1-D norms (n,) divides column j by "
        "|E_j| only (the norms line up with the last axis); divide by both lengths, the outer "
        "product norms[:, None] * norms[None, :]",
        "squared_flat_norms": "norms * norms with 1-D norms is |E_j|² for column j, not "
        "|E_i| |E_j|; divide by the outer product norms[:, None] * norms[None, :]",
        "squared_row_norms": "norms * norms with norms of shape (n, 1) is |E_i|² for row i, "
        "not |E_i| |E_j|; multiply the column of lengths by its transpose, norms * norms.T "
        "(the outer product, (n, 1) * (1, n))",
        "distance": "that is 1 - cosine similarity (the cosine distance); return the similarity "
        "itself",
        "columns_gram": "E.T @ E compares the d columns (features) with each other; the "
        "vectors are the rows, so the (n, n) matrix is unit @ unit.T, (n, d) @ (d, n)",
        "diagonal_one": "a zero vector has no direction, so its similarity with itself is 0 too "
        "(not 1)",
        "unbracketed": "E @ E.T / norms * norms.T divides row i by |E_i| and then multiplies "
        "column j by |E_j|: / and * group from left to right; put the product of the lengths "
        "in brackets, (E @ E.T) / (norms * norms.T)",
        "float32": "your similarities are float32 for a float64 E: compute them in E's dtype, "
        "with no .float() on E or on the result (and dtype=E.dtype, or zeros_like(...), for a "
        "tensor you create)",
    }

    def cases(self, gen):
        with_zero = randn(gen, 5, 4)
        with_zero[2] = 0.0
        with_zero64 = randn(gen, 4, 6, dtype=torch.float64)
        with_zero64[0] = 0.0
        first = randn(gen, 4, 3)  # asked again, last
        scales = torch.tensor([[0.01], [1.0], [30.0], [500.0]])
        return [
            Case("E (4, 3)", (first,)),
            Case(
                "E (6, 10) whose rows have very different lengths (0.01 to 500)",
                (torch.cat([randn(gen, 4, 10) * scales, randn(gen, 2, 10)]),),
            ),
            Case("float64 E (5, 7)", (randn(gen, 5, 7, dtype=torch.float64),)),
            Case(
                "E (5, 4) whose row 2 is all zeros (its similarities must be 0, not NaN)",
                (with_zero,),
            ),
            Case("float64 E (4, 6) whose row 0 is all zeros", (with_zero64,)),
            Case("a single vector E (1, 5)", (randn(gen, 1, 5),)),
            Case(  # norm + 1e-8 moves these by 1e-5, far beyond float64's 7 digits
                "float64 E (4, 5) of short vectors (lengths about 0.002)",
                (randn(gen, 4, 5, dtype=torch.float64) * 1e-3,),
            ),
            Case(  # lengths about 2e-9 under every seed: any clamp from 1e-8 up changes them all
                "float64 E (3, 4) of tiny vectors (lengths about 1e-9: not zero, so their "
                "similarities are those of any vectors with these directions)",
                (randn(gen, 3, 4, dtype=torch.float64) * 1e-9,),
            ),
            repeated(  # unit rows cached by the shape of E passed
                "E (4, 3) again, other values: the first case's shape",
                (randn(gen, 4, 3),),
                "the first E (4, 3)",
                unit_rows(first) @ unit_rows(first).T,
            ),
        ]

    def wrong(self, E, *, mistake):
        if mistake == "float32":  # E.float(): float64's digits given up
            E = E.float()
        if mistake == "tiny_as_zero":  # before raw_dot: E @ E.T of tiny rows is about 0 too
            E = E * (E.norm(dim=-1, keepdim=True) > 1e-6)
        if mistake == "raw_dot":
            return E @ E.T
        if mistake == "whole_norm":
            norms = E.norm()
        else:
            norms = E.norm(dim=0 if mistake == "columns" else -1, keepdim=mistake not in _FLAT)
        if mistake not in ("no_guard", "squared_norms"):
            norms = norms.clamp_min(1e-8 if mistake == "clamp_too_large" else 1e-12)
        if mistake == "unbracketed":  # E @ E.T / norms * norms.T, read left to right
            return E @ E.T / norms * norms.T
        if mistake in ("one_length", "columns_by_flat_norms"):
            return (E @ E.T) / norms
        if mistake in ("squared_norms", "squared_flat_norms", "squared_row_norms"):
            squared = norms * norms  # each length squared, whatever the shape of norms
            return (E @ E.T) / (squared * squared.T if mistake == "squared_norms" else squared)
        unit = E / norms
        similarity = unit.T @ unit if mistake == "columns_gram" else unit @ unit.T
        if mistake == "distance":
            return 1 - similarity
        if mistake == "diagonal_one":  # "every vector is similar to itself", zero vectors included
            return similarity + torch.diag((E.norm(dim=-1) == 0).to(E.dtype))
        return similarity

    def diagnose(self, got, want, case):
        """Close, but not to the dtype's precision: an epsilon added to every length (1e-6 to
        float64 lengths, or to the product of short lengths) moves every similarity a little."""
        if kept_result(got, case):
            return kept_result(got, case)
        if isinstance(got, torch.Tensor) and got.dtype == want.dtype and got.shape == want.shape:
            if got.dtype == torch.float64 and got.equal(got.float().double()):
                return (  # float32's digits only: computed in float32, converted back
                    "your similarities have only float32's digits: you computed them in "
                    "float32 (.float()) and converted the result back; compute in E's dtype, "
                    "with no .float() on E"
                )
            if torch.allclose(got, want, rtol=1e-2, atol=1e-3):
                return (
                    "your similarities are close but not equal: an epsilon added to every length "
                    "(norm + eps, or to the product of the lengths) changes every one a little, "
                    "most for short vectors; clamp the lengths instead, norm.clamp_min(1e-12), "
                    "which changes only the zero ones"
                )
            if case.args[0].norm(dim=-1).amax() < 1e-6:  # the tiny vectors: any clamp above them
                return self.mistake_table["clamp_too_large"]
        return None
