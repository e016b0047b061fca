"""course_lib.embeddings: one-hot, embedding look-up, cosine similarity, learned embeddings."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest
import torch
import torch.nn.functional as F

from course_lib.embeddings import (
    cooccurrence_matrix,
    cosine_similarity_matrix,
    count_embeddings,
    embed,
    nearest_neighbours,
    one_hot,
    plot_embeddings_2d,
    ppmi,
    project_2d,
    svd_embeddings,
)
from course_lib.text import WordTokenizer, embedding_corpus

TOL = {torch.float32: 1e-5, torch.float64: 1e-10}


def test_one_hot_equals_torch():
    ids = torch.randint(0, 7, (3, 4))
    out = one_hot(ids, 7)
    assert out.dtype == torch.float32 and out.shape == (3, 4, 7)
    assert torch.equal(out, F.one_hot(ids, 7).float())
    assert one_hot(ids, 7, dtype=torch.float64).dtype == torch.float64


@pytest.mark.parametrize(
    ("ids", "vocab_size", "error", "match"),
    [
        (torch.tensor([0, 5]), 5, ValueError, "ids contains 5"),
        (torch.tensor([-1, 2]), 5, ValueError, "ids contains -1"),
        (torch.tensor([0.0, 1.0]), 5, TypeError, "ids must hold integer"),
        ([0, 1], 5, TypeError, "ids must be a torch.Tensor"),
        (torch.tensor([0, 1]), 0, ValueError, "vocab_size"),
    ],
)
def test_one_hot_bad_inputs(ids, vocab_size, error, match):
    with pytest.raises(error, match=match):
        one_hot(ids, vocab_size)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_embed_equals_nn_embedding_and_gradients_flow(dtype):
    layer = torch.nn.Embedding(11, 6).to(dtype)
    ids = torch.randint(0, 11, (2, 5))
    table = layer.weight.detach().clone().requires_grad_(True)
    out = embed(ids, table)
    assert out.dtype == dtype and out.shape == (2, 5, 6)
    assert torch.allclose(out, layer(ids), atol=TOL[dtype], rtol=0)
    out.sum().backward()
    # each row's gradient counts how often its id was looked up
    counts = torch.bincount(ids.reshape(-1), minlength=11).to(dtype)
    assert torch.allclose(table.grad, counts[:, None].expand(11, 6))


def test_embed_bad_inputs():
    table = torch.randn(4, 3)
    with pytest.raises(ValueError, match="table must have 2 dimensions"):
        embed(torch.tensor([0]), torch.randn(4))
    with pytest.raises(TypeError, match="table must be a floating-point"):
        embed(torch.tensor([0]), torch.ones(4, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"outside \[0, vocab_size\)"):
        embed(torch.tensor([4]), table)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cosine_similarity_matrix_equals_torch(dtype):
    E = torch.randn(6, 5, dtype=dtype)
    ours = cosine_similarity_matrix(E)
    theirs = F.cosine_similarity(E.unsqueeze(1), E.unsqueeze(0), dim=-1)
    assert ours.dtype == dtype
    assert torch.allclose(ours, theirs, atol=TOL[dtype], rtol=0)
    assert torch.allclose(ours.diagonal(), torch.ones(6, dtype=dtype), atol=TOL[dtype])


def test_cosine_similarity_zero_vector_gives_zero_not_nan():
    E = torch.randn(4, 3)
    E[1] = 0.0
    S = cosine_similarity_matrix(E)
    assert not torch.isnan(S).any()
    assert torch.equal(S[1], torch.zeros(4)) and torch.equal(S[:, 1], torch.zeros(4))


def test_cosine_similarity_ignores_length_and_gradients_flow():
    E = torch.randn(3, 4, requires_grad=True)
    scaled = E * torch.tensor([[1.0], [100.0], [0.01]])
    assert torch.allclose(cosine_similarity_matrix(scaled), cosine_similarity_matrix(E), atol=1e-5)
    cosine_similarity_matrix(E)[0, 1].backward()
    assert E.grad is not None and E.grad.abs().sum() > 0


def test_cosine_similarity_bad_input():
    with pytest.raises(ValueError, match=r"E must have 2 dimensions \(n, d\)"):
        cosine_similarity_matrix(torch.randn(2, 3, 4))


def test_nearest_neighbours_order_and_exclusion():
    E = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [-1.0, 0.0], [0.7, 0.7]])
    result = nearest_neighbours(E, 0, 3)
    assert result.dtype == torch.long
    assert result.tolist() == [1, 4, 2]
    assert 0 not in nearest_neighbours(E, 0, 4).tolist()
    # length does not matter, direction does
    lengths = torch.tensor([[1.0], [1.0], [50.0], [1.0], [1.0]])
    assert nearest_neighbours(E * lengths, 0, 1).tolist() == [1]


@pytest.mark.parametrize(
    ("index", "k", "match"),
    [(5, 1, "index must be an int"), (-1, 1, "index"), (0, 5, "k=5"), (0, 0, "k must be")],
)
def test_nearest_neighbours_bad_inputs(index, k, match):
    with pytest.raises(ValueError, match=match):
        nearest_neighbours(torch.randn(5, 3), index, k)


def test_cooccurrence_counts_are_symmetric_and_windowed():
    counts = cooccurrence_matrix([[0, 1, 2], [2, 2]], vocab_size=4, window=1)
    expected = torch.zeros(4, 4, dtype=torch.float64)
    for a, b in [(0, 1), (1, 2)]:
        expected[a, b] += 1
        expected[b, a] += 1
    expected[2, 2] += 2
    assert torch.equal(counts, expected)
    assert cooccurrence_matrix([[0, 1, 2]], 4, window=2)[0, 2] == 1
    with pytest.raises(ValueError, match="sequences contains 9"):
        cooccurrence_matrix([[0, 9]], 4)
    # one flat sequence instead of a list of them: "'int' object is not iterable" before
    for flat in ([0, 1, 2], torch.tensor([0, 1, 2]), "the cat"):
        with pytest.raises(TypeError, match="sequences must be a list of token-id lists"):
            cooccurrence_matrix(flat, 4)
    rows = (torch.tensor([[0, 1, 2]]), [torch.tensor([0, 1, 2])], [(0, 1, 2)])  # right inputs
    assert all(
        torch.equal(cooccurrence_matrix(r, 4), cooccurrence_matrix([[0, 1, 2]], 4)) for r in rows
    )


def test_ppmi_is_nonnegative_and_finite():
    counts = cooccurrence_matrix([[0, 1, 2, 0, 1], [3, 3]], 5, window=2)
    values = ppmi(counts)
    assert torch.isfinite(values).all() and (values >= 0).all()
    assert values[4].abs().sum() == 0  # a word never seen has no associations
    with pytest.raises(ValueError, match="all zeros"):
        ppmi(torch.zeros(3, 3, dtype=torch.float64))
    # before: negative counts were told "counts is all zeros"
    with pytest.raises(ValueError, match="counts holds negative numbers"):
        ppmi(-counts)


def test_svd_embeddings_rank_and_sign_convention():
    matrix = torch.randn(6, 6, dtype=torch.float64)
    matrix = matrix @ matrix.T
    E = svd_embeddings(matrix, 6)
    assert torch.allclose(E @ E.T, matrix, atol=1e-8)  # symmetric PSD: U S U^T
    assert torch.allclose(svd_embeddings(matrix, 2), E[:, :2])  # the leading directions
    biggest = E.gather(0, E.abs().argmax(0, keepdim=True))
    assert (biggest > 0).all()
    with pytest.raises(ValueError, match="dim=7"):
        svd_embeddings(matrix, 7)


def test_learned_embeddings_put_related_words_together():
    corpus = embedding_corpus()
    tok = WordTokenizer.from_corpus(corpus)
    E = count_embeddings([tok.encode(s) for s in corpus], tok.vocab_size, dim=16, window=2)
    assert E.shape == (tok.vocab_size, 16) and E.dtype == torch.float32
    S = cosine_similarity_matrix(E)

    def sim(a, b):
        return S[tok.stoi[a], tok.stoi[b]].item()

    assert sim("cat", "dog") > 0.5 > abs(sim("cat", "apple"))
    assert sim("apple", "fruit") > 0.6 > abs(sim("apple", "dog"))
    assert "fruit" in [tok.itos[i] for i in nearest_neighbours(E, tok.stoi["apple"], 5)]
    assert E[tok.pad_id].abs().sum() == 0  # never seen, zero vector


def test_project_2d_and_plot():
    E = torch.randn(7, 5)
    points = project_2d(E)
    assert points.shape == (7, 2)
    assert torch.allclose(points.mean(0), torch.zeros(2), atol=1e-5)
    ax = plot_embeddings_2d(points, [str(i) for i in range(7)], groups=["a"] * 3 + ["b"] * 4)
    assert ax.get_xlabel() and ax.get_title()
    with pytest.raises(ValueError, match="labels"):
        plot_embeddings_2d(points, ["x"])
    with pytest.raises(ValueError, match=r"\(n, 2\)"):
        plot_embeddings_2d(E, [str(i) for i in range(7)])
