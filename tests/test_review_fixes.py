"""The check gaps of the review of 2026-11-23 (EX findings): each wrong answer fails with a hint
that names the mistake, and the grader prints no warning of its own."""

from __future__ import annotations

import warnings

import torch

from course_lib.grading import check_result
from course_lib.grading.core import compare_values

EXTENDED = [
    "ex00.pairwise_sq_distances",
    "ex01.cosine_similarity_matrix",
    "ex02.softmax",
    "ex03.MultiHeadAttention",
    "ex04.relative_shift_matrix",
    "ex06.cross_attention",
    "ex06.CrossAttentionSublayer",
    "ex07.EncoderLayer",
    "ex07.FeedForward",
    "ex08.noam_lr",
    "ex09.cached_attention_step",
]


def test_one_hot_rejects_bool_ids_and_names_a_bad_id():
    def lenient(ids, vocab_size):
        if ids.is_floating_point():
            raise TypeError("ids must be integers")
        if (ids < 0).any() or (ids >= vocab_size).any():
            raise ValueError("an id is out of range")
        return (ids.unsqueeze(-1) == torch.arange(vocab_size)).float()

    feedback = check_result("ex01.one_hot", lenient).feedback
    assert "bool ids" in feedback or "name the id" in feedback
    assert (
        check_result("ex01.one_hot", lenient).passed
        == check_result("ex01.one_hot", lenient).total - 2
    )


def test_embed_by_indexing_is_refused():
    def by_index(ids, table):
        if (ids < 0).any() or (ids >= table.shape[0]).any():
            raise ValueError(f"id {ids.max().item()} out of range")
        return table[ids]

    result = check_result("ex01.embed", by_index)
    assert result.status == "failed" and "one-hot matrix product" in result.feedback


def test_noam_lr_returning_a_tensor_is_refused():
    result = check_result(
        "ex08.noam_lr", lambda s, d, w: torch.tensor(d**-0.5 * min(s**-0.5, s * w**-1.5))
    )
    assert result.status == "failed" and "Python float" in result.feedback


def test_two_mistakes_at_once_are_named_as_such():
    def two_mistakes(q, k, v):
        weights = (q @ k.transpose(-2, -1) / q.shape[-1]).softmax(-2)
        return weights @ v, weights

    result = check_result("ex02.scaled_dot_product_attention", two_mistakes)
    assert "more than one thing may be wrong" in result.feedback


def test_a_dtype_mismatch_alone_is_named_as_one_mistake():
    def shift_right(targets, bos_id):  # lesson 08's cell: torch.full makes int64
        bos = torch.full((targets.shape[0], 1), bos_id)
        return torch.cat([bos, targets[:, :-1]], dim=1)

    result = check_result("ex08.shift_right", shift_right)
    assert result.status == "failed" and "dtype int64, expected int32" in result.feedback
    assert "full_like" in result.feedback and "more than one thing" not in result.feedback


def test_a_message_that_names_the_mistake_is_not_called_several_mistakes():
    def output_only(x, memory, w_q, w_k, w_v, memory_mask=None):  # forgets the weights
        q, k, v = x @ w_q, memory @ w_k, memory @ w_v
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        if memory_mask is not None:
            scores = scores.masked_fill(~memory_mask, float("-inf"))
        return scores.softmax(-1) @ v

    result = check_result("ex06.cross_attention", output_only)
    assert result.status == "failed" and "should be a tuple of 2 values" in result.feedback
    assert "more than one thing" not in result.feedback


def test_a_missing_bias_is_not_called_a_naming_problem():
    from torch import nn

    class NoBias(nn.Module):
        def __init__(self, d_model, num_heads):
            super().__init__()
            for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
                setattr(self, name, nn.Linear(d_model, d_model, bias=False))

        def forward(self, query, key, value, mask=None):
            return query, None

    feedback = check_result("ex03.MultiHeadAttention", NoBias).feedback
    assert "q_proj has no bias" in feedback and "Name the sub-modules" not in feedback


def test_the_verb_agrees_with_a_plural_subject():
    a, b = torch.zeros(3), torch.ones(3)
    assert "your tokens differ from" in compare_values(a, b, "your tokens")
    assert "your result differs from" in compare_values(a, b)
    assert "your result[0] differs from" in compare_values(a, b, "your result[0]")


def test_the_grader_prints_no_warning_of_its_own():
    def attention_with_2d_transpose(q, k, v):  # wrong: softmax over the queries
        weights = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).softmax(-2)
        return weights @ v, weights

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_result("ex02.scaled_dot_product_attention", attention_with_2d_transpose)
        check_result("ex07.rms_norm", lambda x, w, eps=1e-6: x)
    assert not [w for w in caught if "course_lib" in str(w.filename)], [
        (w.filename, str(w.message)) for w in caught
    ]
