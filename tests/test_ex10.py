"""ex10 (the family and the cost): the references pass, every named mistake fails with its hint,
alternative correct implementations pass, shortcuts and stubs are recognised."""

from __future__ import annotations

import math
import types
from functools import partial
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import binomial_tail

from course_lib.efficient_attention import (
    sliding_window_mask,
    tiled_attention,
    tiled_attention_backward,
)
from course_lib.family import mlm_mask, patchify
from course_lib.grading import check_result
from course_lib.grading.core import Case, get_task
from course_lib.grading.tasks.ex10.mlm_mask import share_tolerance

TASKS = [
    "ex10.tiled_attention",
    "ex10.tiled_attention_backward",
    "ex10.sliding_window_mask",
    "ex10.mlm_mask",
    "ex10.patchify",
]
REFERENCES = {
    "ex10.tiled_attention": tiled_attention,
    "ex10.tiled_attention_backward": tiled_attention_backward,
    "ex10.sliding_window_mask": sliding_window_mask,
    "ex10.mlm_mask": mlm_mask,
    "ex10.patchify": patchify,
}


def _copy(fn):
    """The reference's logic under a code object of its own (the grader does not see it)."""
    code = fn.__code__.replace(co_name=fn.__name__ + "_copy")
    return types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


@pytest.mark.parametrize("task_id", TASKS)
def test_reference_logic_passes(task_id):
    result = check_result(task_id, _copy(REFERENCES[task_id]))
    assert result.status == "passed", result.feedback


@pytest.mark.parametrize("task_id", TASKS)
def test_calling_the_reference_is_forbidden(task_id):
    assert check_result(task_id, REFERENCES[task_id]).status == "forbidden"


@pytest.mark.parametrize("task_id", TASKS)
def test_stub_is_not_implemented(task_id):
    def stub(*args, **kwargs):
        raise NotImplementedError()

    assert check_result(task_id, stub).status == "not implemented"


# Alternative correct implementations, as a learner might write them.
def tiled_query_and_key_blocks(q, k, v, block_size=128, causal=False):
    if not isinstance(block_size, int) or block_size < 1:
        raise ValueError("block_size must be a positive int")
    n_q, n_k = q.shape[-2], k.shape[-2]
    rows_out = []
    for qs in range(0, n_q, block_size):
        qb = q[..., qs : qs + block_size, :] / math.sqrt(q.shape[-1])
        m = total = acc = None
        for ks in range(0, n_k, block_size):
            s = torch.einsum("...qd,...kd->...qk", qb, k[..., ks : ks + block_size, :])
            if causal:
                qi = torch.arange(qs, qs + qb.shape[-2]).unsqueeze(-1) + n_k - n_q
                kj = torch.arange(ks, ks + s.shape[-1])
                s = torch.where(kj <= qi, s, torch.tensor(-math.inf, dtype=s.dtype))
            block_max = s.amax(-1, keepdim=True)
            new_m = block_max if m is None else torch.maximum(m, block_max)
            new_m = torch.where(torch.isinf(new_m), torch.zeros_like(new_m), new_m)
            p = torch.exp(s - new_m)
            pv = p @ v[..., ks : ks + block_size, :]
            if m is None:
                total, acc = p.sum(-1, keepdim=True), pv
            else:
                c = torch.exp(m - new_m)
                total, acc = total * c + p.sum(-1, keepdim=True), acc * c + pv
            m = new_m
        rows_out.append(acc / total)
    return torch.cat(rows_out, dim=-2)


def window_by_loop(n, window, causal=False):
    if n < 1 or window < 0:
        raise ValueError("bad arguments")
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        lo, hi = max(0, i - window), i if causal else min(n - 1, i + window)
        mask[i, lo : hi + 1] = True
    return mask


def window_by_triangles(n, window, causal=False):
    if not isinstance(n, int) or n <= 0 or window < 0:
        raise ValueError("bad arguments")
    ones = torch.ones(n, n, dtype=torch.bool)
    return ones.tril(0 if causal else window) & ones.triu(-window)


def mlm_by_multinomial(ids, mask_id, vocab_size, mask_prob=0.15, pad_id=None, generator=None):
    if not 0 < mask_prob <= 1:
        raise ValueError("mask_prob must be in (0, 1]")
    chosen = torch.bernoulli(torch.full(ids.shape, mask_prob), generator=generator).bool()
    if pad_id is not None:
        chosen = chosen & (ids != pad_id)
    what = torch.multinomial(
        torch.tensor([0.8, 0.1, 0.1]), ids.numel(), replacement=True, generator=generator
    ).reshape(ids.shape)
    inputs = ids.clone()
    inputs[chosen & (what == 0)] = mask_id
    swap = chosen & (what == 1)
    inputs[swap] = torch.randint(
        vocab_size, (int(swap.sum()),), generator=generator, dtype=ids.dtype
    )
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    return inputs, labels


def patchify_by_loop(images, patch_size):
    b, c, h, w = images.shape
    if h % patch_size or w % patch_size:
        raise ValueError("H and W must be multiples of patch_size")
    out = []
    for r in range(0, h, patch_size):
        for col in range(0, w, patch_size):
            out.append(images[:, :, r : r + patch_size, col : col + patch_size].reshape(b, -1))
    return torch.stack(out, dim=1)


def patchify_by_tensor_unfold(images, patch_size):
    b, c, h, w = images.shape
    if h % patch_size or w % patch_size:
        raise ValueError("H and W must be multiples of patch_size")
    x = images.unfold(2, patch_size, patch_size).unfold(3, patch_size, patch_size)
    return x.permute(0, 2, 3, 1, 4, 5).reshape(b, -1, c * patch_size * patch_size)


@pytest.mark.parametrize(
    "task_id,impl",
    [
        ("ex10.tiled_attention", tiled_query_and_key_blocks),
        ("ex10.sliding_window_mask", window_by_loop),
        ("ex10.sliding_window_mask", window_by_triangles),
        ("ex10.mlm_mask", mlm_by_multinomial),
        ("ex10.patchify", patchify_by_loop),
        ("ex10.patchify", patchify_by_tensor_unfold),
    ],
)
def test_alternative_correct_implementations_pass(task_id, impl):
    result = check_result(task_id, impl)
    assert result.status == "passed", result.feedback


def full_attention(q, k, v, block_size=128, causal=False):
    if block_size < 1:
        raise ValueError("block_size")
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        n_q, n_k = scores.shape[-2:]
        keep = torch.ones(n_q, n_k, dtype=torch.bool).tril(n_k - n_q)
        scores = scores.masked_fill(~keep, -math.inf)
    return scores.softmax(-1) @ v


def test_full_attention_fails_only_the_memory_limited_cases():
    result = check_result("ex10.tiled_attention", full_attention)
    assert result.status == "failed"
    assert "as large as the full matrix of scores" in result.feedback
    limited = [
        c
        for c in get_task("ex10.tiled_attention").cases(torch.Generator().manual_seed(0))
        if c.data.get("limit")
    ]
    assert result.passed <= result.total - 2 and len(limited) >= 2


def test_torch_attention_and_unfold_are_forbidden():
    def with_torch(q, k, v, block_size=128, causal=False):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def with_unfold(images, patch_size):
        return F.unfold(images, patch_size, stride=patch_size).transpose(1, 2)

    assert check_result("ex10.tiled_attention", with_torch).status == "forbidden"
    assert check_result("ex10.patchify", with_unfold).status == "forbidden"


def test_memory_limit_lets_one_row_of_tiles_through():
    gen = torch.Generator().manual_seed(0)
    cases = get_task("ex10.tiled_attention").cases(gen)
    biggest = max(cases, key=lambda c: c.args[1].shape[-2])
    q, k, _ = biggest.args
    n = k.shape[-2]
    assert n >= 2048 and biggest.data["limit"] < q.shape[0] * n * n


def attention_by_query_blocks(q, k, v, block_size=128, causal=False):
    # exact softmax over ALL keys for each block of queries: no online softmax, and with few
    # queries each block's scores are the full matrix (found by a fresh reader: it passed)
    if not isinstance(block_size, int) or block_size < 1:
        raise ValueError("block_size")
    n_q, n_k = q.shape[-2], k.shape[-2]
    outs = []
    for start in range(0, n_q, block_size):
        s = q[..., start : start + block_size, :] @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            rows = torch.arange(start, start + s.shape[-2])[:, None] + n_k - n_q
            s = s.masked_fill(torch.arange(n_k) > rows, -math.inf)
        outs.append(s.softmax(-1) @ v)
    return torch.cat(outs, dim=-2)


def attention_keeping_every_tile(q, k, v, block_size=128, causal=False):
    # one key block at a time, but every tile kept in a list for a two-pass softmax: all the
    # tiles alive together are the full matrix (found by a fresh reader: it passed)
    if not isinstance(block_size, int) or block_size < 1:
        raise ValueError("block_size")
    rows = torch.arange(q.shape[-2])[:, None] + k.shape[-2] - q.shape[-2]
    tiles = []
    for start in range(0, k.shape[-2], block_size):
        s = q @ k[..., start : start + block_size, :].transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            s = s.masked_fill(torch.arange(start, start + s.shape[-1]) > rows, -math.inf)
        tiles.append(s)
    m = tiles[0].amax(-1, keepdim=True)
    for s in tiles[1:]:
        m = torch.maximum(m, s.amax(-1, keepdim=True))
    total = sum(torch.exp(s - m).sum(-1, keepdim=True) for s in tiles)
    out = sum(
        torch.exp(s - m) @ v[..., i * block_size : (i + 1) * block_size, :]
        for i, s in enumerate(tiles)
    )
    return out / total


@pytest.mark.parametrize(
    "impl, words",
    [
        (attention_by_query_blocks, "as large as the full matrix of scores"),
        (attention_keeping_every_tile, "keeps every tile of scores alive at once"),
    ],
)
def test_tiles_that_store_the_full_matrix_another_way_fail_the_memory_check(impl, words):
    result = check_result("ex10.tiled_attention", impl)
    assert result.status == "failed", result.feedback
    assert words in result.feedback, result.feedback
    assert result.passed >= result.total - 3  # right values: only memory-limited cases fail


@pytest.mark.parametrize("task_id", TASKS)
def test_every_listed_mistake_fails_with_its_own_hint(task_id):
    """Each row of a task's FAULTS table: the wrong implementation that takes its name loses
    points, and the feedback names that mistake (no generic message)."""
    task = get_task(task_id)
    for wrong, hint in task.mistakes():
        result = check_result(task_id, wrong)
        assert result.status == "failed", wrong.keywords
        assert hint in result.feedback, (wrong.keywords, result.feedback)


# Slips the learners' review found with a generic or misleading message, written as learners do.
def tiled_in_tile_key_positions(q, k, v, block_size=128, causal=False):
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError("block_size")
    n_q, n_k = q.shape[-2], k.shape[-2]
    q = q / math.sqrt(q.shape[-1])
    m = torch.full((*q.shape[:-1], 1), -math.inf, dtype=q.dtype)
    total = torch.zeros_like(m)
    out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    rows = torch.arange(n_q)[:, None] + n_k - n_q
    for start in range(0, n_k, block_size):
        s = q @ k[..., start : start + block_size, :].transpose(-2, -1)
        if causal:  # the classic tiling bug: key positions 0 .. bk - 1 in every tile
            s = s.masked_fill(torch.arange(s.shape[-1]) > rows, -math.inf)
        new_m = torch.maximum(m, s.amax(-1, keepdim=True))
        c = torch.exp(m - new_m)
        p = torch.exp(s - new_m)
        total = total * c + p.sum(-1, keepdim=True)
        out = out * c + p @ v[..., start : start + block_size, :]
        m = new_m
    return out / total


def tiled_max_before_mask(q, k, v, block_size=128, causal=False):
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError("block_size")
    n_q, n_k = q.shape[-2], k.shape[-2]
    q = q / math.sqrt(q.shape[-1])
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    m = torch.full((*batch, n_q, 1), -math.inf, dtype=q.dtype)
    total = torch.zeros_like(m)
    out = torch.zeros(*batch, n_q, v.shape[-1], dtype=q.dtype)
    rows = torch.arange(n_q)[:, None] + n_k - n_q
    for start in range(0, n_k, block_size):
        s = q @ k[..., start : start + block_size, :].transpose(-2, -1)
        new_m = torch.maximum(m, s.amax(-1, keepdim=True))  # before the mask: future keys count
        if causal:
            s = s.masked_fill(torch.arange(start, start + s.shape[-1]) > rows, -math.inf)
        c = torch.exp(m - new_m)
        p = torch.exp(s - new_m)
        total = total * c + p.sum(-1, keepdim=True)
        out = out * c + p @ v[..., start : start + block_size, :]
        m = new_m
    return out / total


def tiled_each_block_own_max(q, k, v, block_size=128, causal=False):
    """Each block's exp against its own maximum, the blocks added without rescaling."""
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError("block_size")
    n_q, n_k = q.shape[-2], k.shape[-2]
    q = q / math.sqrt(q.shape[-1])
    total, out = 0.0, 0.0
    rows = torch.arange(n_q)[:, None] + n_k - n_q
    for start in range(0, n_k, block_size):
        s = q @ k[..., start : start + block_size, :].transpose(-2, -1)
        if causal:
            s = s.masked_fill(torch.arange(start, start + s.shape[-1]) > rows, -math.inf)
        block_max = s.amax(-1, keepdim=True)
        p = torch.exp(s - block_max.masked_fill(block_max == -math.inf, 0.0))
        total = total + p.sum(-1, keepdim=True)
        out = out + p @ v[..., start : start + block_size, :]
    return out / total


def window_without_abs(n, window, causal=False):
    if n < 1 or window < 0:
        raise ValueError("bad arguments")
    i = torch.arange(n)
    mask = (i[:, None] - i[None, :]) <= window
    return mask & (i[:, None] >= i[None, :]) if causal else mask


def mlm_labels_at_mask_only(ids, mask_id, vocab_size, mask_prob=0.15, pad_id=None, generator=None):
    if not 0 < mask_prob <= 1:
        raise ValueError("mask_prob")
    chosen = torch.rand(ids.shape, generator=generator) < mask_prob
    if pad_id is not None:
        chosen = chosen & (ids != pad_id)
    u = torch.rand(ids.shape, generator=generator)
    inputs = ids.clone()
    inputs[chosen & (u < 0.8)] = mask_id
    swap = chosen & (u >= 0.8) & (u < 0.9)
    inputs[swap] = torch.randint(vocab_size, (int(swap.sum()),), generator=generator).to(ids.dtype)
    labels = torch.where(inputs == mask_id, ids, torch.full_like(ids, -100))
    return inputs, labels


def mlm_independent_draws(ids, mask_id, vocab_size, mask_prob=0.15, pad_id=None, generator=None):
    if not 0 < mask_prob <= 1:
        raise ValueError("mask_prob")
    chosen = torch.rand(ids.shape, generator=generator) < mask_prob
    if pad_id is not None:
        chosen = chosen & (ids != pad_id)
    masked = chosen & (torch.rand(ids.shape, generator=generator) < 0.8)
    swap = chosen & ~masked & (torch.rand(ids.shape, generator=generator) < 0.1)
    random_ids = torch.randint(vocab_size, ids.shape, generator=generator, dtype=ids.dtype)
    inputs = torch.where(swap, random_ids, ids.masked_fill(masked, mask_id))
    return inputs, torch.where(chosen, ids, torch.full_like(ids, -100))


def mlm_randint_split(
    ids, mask_id, vocab_size, mask_prob=0.15, pad_id=None, generator=None, *, draw, masked_below
):
    # the 80/10/10 split from r = torch.randint(*draw): <mask> where r < masked_below, a random id
    # where r == masked_below, unchanged otherwise (right only for draw=(0, 10), masked_below=8)
    if not 0 < mask_prob <= 1:
        raise ValueError("mask_prob")
    chosen = torch.rand(ids.shape, generator=generator) < mask_prob
    if pad_id is not None:
        chosen = chosen & (ids != pad_id)
    r = torch.randint(*draw, ids.shape, generator=generator)
    random_ids = torch.randint(vocab_size, ids.shape, generator=generator, dtype=ids.dtype)
    swap = chosen & (r == masked_below)
    inputs = torch.where(swap, random_ids, ids.masked_fill(chosen & (r < masked_below), mask_id))
    return inputs, torch.where(chosen, ids, torch.full_like(ids, -100))


@pytest.mark.parametrize("draw,masked_below", [((0, 10), 8), ((1, 11), 9)])
def test_a_right_80_10_10_split_from_randint_passes(draw, masked_below):
    split = partial(mlm_randint_split, draw=draw, masked_below=masked_below)
    result = check_result("ex10.mlm_mask", split)
    assert result.passed == result.total, result.feedback


def backward_without_D(q, k, v, out, lse, d_out, block_size=128, causal=False, d=0, kept=None):
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError("block_size")
    n_q, n_k = q.shape[-2], k.shape[-2]
    scale = q.shape[-1] ** -0.5
    rows = torch.arange(n_q)[:, None] + n_k - n_q
    dq, dks, dvs = torch.zeros_like(q), [], []
    for start in range(0, n_k, block_size):
        kb, vb = k[..., start : start + block_size, :], v[..., start : start + block_size, :]
        s = q @ kb.transpose(-2, -1) * scale
        if causal:
            s = s.masked_fill(torch.arange(start, start + s.shape[-1]) > rows, -math.inf)
        p = torch.exp(s - lse[..., None]) if kept is None else kept[start // block_size]
        dvs.append(p.transpose(-2, -1) @ d_out)
        ds = p * (d_out @ vb.transpose(-2, -1) - d)  # d=0: the softmax's Jacobian without D
        dq = dq + ds @ kb * scale
        dks.append(ds.transpose(-2, -1) @ q * scale)
    return dq, torch.cat(dks, -2), torch.cat(dvs, -2)


@pytest.mark.parametrize(
    "task_id,impl,words",
    [
        ("ex10.tiled_attention", tiled_in_tile_key_positions, "inside the tile"),
        ("ex10.tiled_attention", tiled_max_before_mask, "before the causal mask"),
        ("ex10.tiled_attention", tiled_each_block_own_max, "against that block's own maximum"),
        ("ex10.sliding_window_mask", window_without_abs, "without abs"),
        ("ex10.mlm_mask", mlm_labels_at_mask_only, "only the positions that became <mask>"),
        ("ex10.mlm_mask", mlm_independent_draws, "separate draws"),
        # r < 9 <mask>, r == 9 random (90/10/0); randint(0, 9) read as 0 .. 9 (8/9, 1/9, 0);
        # randint(1, 10) (7/9, 1/9, 1/9): "the share ... is 0.903, expected 0.800" before
        *[
            ("ex10.mlm_mask", partial(mlm_randint_split, draw=draw, masked_below=m), "off by one")
            for draw, m in (((0, 10), 9), ((0, 9), 8), ((1, 10), 8))
        ],
        ("ex10.tiled_attention_backward", backward_without_D, "D is missing"),
    ],
)
def test_reviewed_slips_get_a_named_hint(task_id, impl, words):
    result = check_result(task_id, impl)
    assert result.status == "failed", result.feedback
    assert words in result.feedback, result.feedback


def backward_in_float64(q, k, v, out, lse, d_out, block_size=128, causal=False, keep=False):
    # a learner's backward done in float64 and cast back, dk and dv as blocks in lists, then cat
    # (memory linear in n: lost a check before, as "every tile kept"); keep=True keeps every
    # block's weights for a second pass, which stores the full matrix (it passed before)
    dtypes = (q.dtype, k.dtype, v.dtype)
    q, k, v, out, lse, d_out = (t.double() for t in (q, k, v, out, lse, d_out))
    grads = (backward_two_passes if keep else backward_without_D)(
        q, k, v, out, lse, d_out, block_size, causal, d=(d_out * out).sum(-1, keepdim=True)
    )
    return tuple(g.to(dt) for g, dt in zip(grads, dtypes, strict=True))


def backward_two_passes(q, k, v, out, lse, d_out, block_size, causal, d):
    rows = torch.arange(q.shape[-2])[:, None] + k.shape[-2] - q.shape[-2]
    weights = []  # pass 1 keeps them all, pass 2 reads them instead of recomputing them
    for start in range(0, k.shape[-2], block_size):
        s = q @ k[..., start : start + block_size, :].transpose(-2, -1) * q.shape[-1] ** -0.5
        if causal:
            s = s.masked_fill(torch.arange(start, start + s.shape[-1]) > rows, -math.inf)
        weights.append(torch.exp(s - lse[..., None]))
    return backward_without_D(q, k, v, out, lse, d_out, block_size, causal, d=d, kept=weights)


@pytest.mark.parametrize("keep, passes", [(False, True), (True, False)])
def test_backward_may_copy_its_inputs_but_not_keep_every_block_of_weights(keep, passes):
    result = check_result("ex10.tiled_attention_backward", partial(backward_in_float64, keep=keep))
    assert (result.status == "passed") == passes, result.feedback
    assert passes or "keeps every tile of scores alive" in result.feedback, result.feedback


def test_backward_may_not_use_autograd():
    def with_autograd(q, k, v, out, lse, d_out, block_size=128, causal=False):
        leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
        o = tiled_attention(*leaves, causal=causal, block_size=block_size)
        return torch.autograd.grad(o, leaves, d_out)

    assert check_result("ex10.tiled_attention_backward", with_autograd).status == "forbidden"


# Slips an outside learner's hunt found (#33) with full marks, a generic or a misleading message:
# the solution notebook's own function with one slip, as a learner writes it.
def _solution_with(name, *edits):
    """The solution notebook's `name` with each (old, new) text edit applied once."""
    import nbformat

    path = Path(__file__).resolve().parents[1] / "solutions" / "10_the_family_and_the_cost.ipynb"
    cell = next(
        c.source
        for c in nbformat.read(path, as_version=4).cells
        if c.cell_type == "code" and c.source.startswith(f"def {name}(")
    )
    for old, new in edits:
        assert cell.count(old) == 1, old
        cell = cell.replace(old, new)
    namespace = {"math": math, "torch": torch}
    exec(compile(cell, f"learner's {name}", "exec"), namespace)
    return namespace[name]


SUM = "running_sum = running_sum * correction + weights.sum(dim=-1, keepdim=True)"
NO_LABELS = ("labels = torch.where(chosen, ids, torch.full_like(ids, -100))", "pass")
RETURN = "return inputs, labels"
HUNTED = [  # task, function, edits, a phrase of the hint
    ("tiled_attention", [('float("-inf"), dtype=q.dtype)', "0.0, dtype=q.dtype)")], "starts at 0"),
    (
        "tiled_attention",
        [("math.sqrt(q.shape[-1])", "math.sqrt(v.shape[-1])")],
        "divided by sqrt(d_v)",
    ),
    (
        "tiled_attention",
        [
            (SUM, "running_sum = (running_sum + weights.sum(dim=-1, keepdim=True)) * correction"),
            (
                "out = out * correction + weights @ v_block",
                "out = (out + weights @ v_block) * correction",
            ),
        ],
        "AFTER the block's terms are added",
    ),
    (
        "tiled_attention",
        [("scores.amax(dim=-1, keepdim=True)", "scores.amax(dim=-1)")],
        "without keepdim=True",
    ),
    (
        "tiled_attention",
        [("scores.amax(dim=-1, keepdim=True)", "scores.max()")],
        "ONE number for the whole tile",
    ),
    (
        "tiled_attention",
        [
            (
                "out = torch.zeros((*batch, n_q, v.shape[-1]), dtype=q.dtype)",
                "out = torch.zeros_like(q)",
            )
        ],
        "not zeros_like(q)",
    ),
    (
        "tiled_attention",
        [("torch.arange(n_q).unsqueeze(-1)", "torch.arange(n_q)")],
        "must be a column, (n_q, 1)",
    ),
    (
        "tiled_attention",
        [
            (
                "torch.arange(start, start + scores.shape[-1])",
                "torch.arange(start, start + block_size)",
            )
        ],
        "not from block_size",
    ),
    (
        "tiled_attention_backward",
        [("sum(dim=-1, keepdim=True)", "sum(dim=-1)")],
        "The same holds for D",
    ),
    (
        "sliding_window_mask",
        [("mask = mask & (offset >= 0)", "mask = offset >= 0")],
        "the window still applies",
    ),
    ("mlm_mask", [("if pad_id is not None:", "if pad_id:")], "`if pad_id:` is False"),
    ("mlm_mask", [("randint(0, vocab_size,", "randint(0, vocab_size - 1,")], "never include"),
    ("mlm_mask", [("randint(0, vocab_size,", "randint(1, vocab_size,")], "never include 0"),
    (
        "mlm_mask",
        [NO_LABELS, (RETURN, "return inputs, torch.where(chosen, inputs, -100)")],
        "taken from the corrupted inputs",
    ),
    (
        "mlm_mask",
        [NO_LABELS, (RETURN, "return inputs, torch.where(inputs != ids, ids, -100)")],
        "whose input changed",
    ),
    (
        "mlm_mask",
        [NO_LABELS, (RETURN, "return inputs, ids.masked_fill(ids == pad_id, -100)")],
        "not every non-padding position",
    ),
    (
        "patchify",
        [
            ("rows, patch_size, cols, patch_size)", "patch_size, rows, patch_size, cols)"),
            ("permute(0, 2, 4, 1, 3, 5)", "permute(0, 3, 5, 1, 2, 4)"),
        ],
        "H/p apart",
    ),
]


# Slips a second hunt found: the solution notebook's function with one slip, as a learner
# writes it, and a phrase of the feedback it now gets.
HUNTED_2 = [
    (  # PyTorch's NotImplementedError (& of bool and float) was "not implemented yet"
        "sliding_window_mask",
        [("mask = mask & (offset >= 0)", "mask = mask & torch.tril(torch.ones(n, n))")],
        "bitwise_and",
    ),
    (  # mask_id was always vocab_size: randint's high taken from mask_id had full marks
        "mlm_mask",
        [("randint(0, vocab_size,", "randint(0, mask_id,")],
        "never include",
    ),
    (  # the random ids' range inside the <mask> range: the shares, without a hint
        "mlm_mask",
        [("(action >= 0.8) & (action < 0.9)", "(action < 0.1)")],
        "overlaps the <mask> range",
    ),
    (  # the queries' shift n_q - n_k: NaN, and "subtract the running maximum before exp"
        "tiled_attention",
        [
            (
                "torch.arange(n_q).unsqueeze(-1) + n_k - n_q",
                "torch.arange(n_q).unsqueeze(-1) + n_q - n_k",
            )
        ],
        "sign reversed",
    ),
    (
        "tiled_attention_backward",
        [
            (
                "torch.arange(n_q).unsqueeze(-1) + n_k - n_q",
                "torch.arange(n_q).unsqueeze(-1) + n_q - n_k",
            )
        ],
        "sign reversed",
    ),
    (  # a block that ends at block_size: a bare IndexError from amax
        "tiled_attention",
        [
            ("k[..., start : start + block_size, :]", "k[..., start:block_size, :]"),
            ("v[..., start : start + block_size, :]", "v[..., start:block_size, :]"),
        ],
        "is empty once start >= block_size",
    ),
    (  # .max's (values, indices): a bare TypeError from torch.maximum
        "tiled_attention",
        [("scores.amax(dim=-1, keepdim=True)", "scores.max(dim=-1, keepdim=True)")],
        "returns a pair",
    ),
    (  # q / d ** 1/2 is q / (2 d): generic
        "tiled_attention",
        [("q = q / math.sqrt(q.shape[-1])", "q = q / q.shape[-1] ** 1/2")],
        "binds tighter",
    ),
    (  # (dq, dv, dk): "only dk, dv differ"
        "tiled_attention_backward",
        [
            (
                "return dq, torch.cat(dk_blocks, dim=-2), torch.cat(dv_blocks, dim=-2)",
                "return dq, torch.cat(dv_blocks, dim=-2), torch.cat(dk_blocks, dim=-2)",
            )
        ],
        "dk and dv are swapped",
    ),
    (  # the running maximum without dtype=: a bare dtype error on bfloat16
        "tiled_attention",
        [('float("-inf"), dtype=q.dtype)', 'float("-inf"))')],
        "your running maximum is float32",
    ),
    (  # the grid split as (W/p, H/p): "None of the usual single mistakes"
        "patchify",
        [
            (
                "channels, rows, patch_size, cols, patch_size)",
                "channels, cols, patch_size, rows, patch_size)",
            )
        ],
        "a square image hides the swap",
    ),
    (  # H / p: a bare TypeError from reshape
        "patchify",
        [("height // patch_size, width // patch_size", "height / patch_size, width / patch_size")],
        "integer division",
    ),
]


HUNTED_3 = [  # #hunt3: a learner's slip that got a bare PyTorch error, and now its hint
    (  # int64 random ids put into int32 ids by indexing
        "mlm_mask",
        [
            (", generator=generator, dtype=ids.dtype)", ", generator=generator)"),
            (
                "inputs = torch.where(to_random, random_ids, inputs)",
                "inputs[to_random] = random_ids[to_random]",
            ),
        ],
        "dtype=ids.dtype",
    ),
    (  # one patch count for both sides: n = H // p
        "patchify",
        [("rows, patch_size, cols, patch_size)", "rows, patch_size, rows, patch_size)")],
        "H and W may differ",
    ),
    (  # the lesson's grey images: one channel
        "patchify",
        [("(batch, channels, rows,", "(batch, 1, rows,")],
        "take c from",
    ),
]


HUNTED_4 = [  # #hunt4: a hint that named no mistake
    (  # dq assigned, not accumulated: "only dq differs"
        "tiled_attention_backward",
        [("dq = dq + d_scores @ k_block * scale", "dq = d_scores @ k_block * scale")],
        "dq is overwritten by each block",
    ),
    (  # the lesson's "blocks above the diagonal are skipped", past the FIRST query's token
        "tiled_attention",
        [
            (
                "        k_block = k[",
                "        if causal and start > n_k - n_q:\n            break\n        k_block = k[",
            )
        ],
        "your loop stops too early",
    ),
    (  # q scaled once before the loop, as the forward does, and dk scaled again
        "tiled_attention_backward",
        [
            (
                "    dq = torch.zeros_like(q)\n",
                "    dq = torch.zeros_like(q)\n    qs = q * scale\n",
            ),
            ("scores = q @ k_block.transpose(-2, -1) * scale", "scores = qs @ k_block.mT"),
            ("d_scores.transpose(-2, -1) @ q * scale", "d_scores.mT @ qs * scale"),
        ],
        "dk is divided by sqrt(d_k) twice",
    ),
    (  # a random id made to differ from the token: the shares only, no hint
        "mlm_mask",
        [
            (
                "random_ids = torch.randint(0, vocab_size,",
                "random_ids = (ids + torch.randint(1, vocab_size, ids.shape, "
                "generator=generator, dtype=ids.dtype)) % vocab_size\n"
                "    unused = torch.randint(0, vocab_size,",
            )
        ],
        "never equal the original token",
    ),
]


HUNTED_5 = [  # #hunt5: one bullet's "/ sqrt(d_k)" left out: "only dq differs", no mistake named
    (
        "tiled_attention_backward",
        [("dq = dq + d_scores @ k_block * scale", "dq = dq + d_scores @ k_block")],
        "dq is sqrt(d_k) times too large",
    ),
    (
        "tiled_attention_backward",
        [("d_scores.transpose(-2, -1) @ q * scale", "d_scores.transpose(-2, -1) @ q")],
        "dk is sqrt(d_k) times too large",
    ),
    (  # the grid axes permuted last, then reshaped without the transpose: no mistake named
        "patchify",
        [("x.permute(0, 2, 4, 1, 3, 5)", "x.permute(0, 1, 3, 5, 2, 4)")],
        "your patch-grid axes come last",
    ),
    (  # the past half of the band whatever `causal` says: "None of the usual single mistakes"
        "sliding_window_mask",
        [("if causal:", "if True:")],
        "the band is two-sided",
    ),
    (  # ids unpacked as (batch, seq): full marks before, as every case was 2-D
        "mlm_mask",
        [
            (
                "    chosen = torch.rand(ids.shape,",
                "    batch, seq = ids.shape\n    chosen = torch.rand((batch, seq),",
            )
        ],
        "ids may have any shape",
    ),
    (  # #hunt6: divided by d_k instead of its square root: "None of the usual" before
        "tiled_attention",
        [("math.sqrt(q.shape[-1])", "q.shape[-1]")],
        "divided by d_k",
    ),
    (  # the lesson's 3-D k.transpose(1, 2) on 4-D inputs: a bare PyTorch error
        "tiled_attention",
        [("scores = q @ k_block.transpose(-2, -1)", "scores = q @ k_block.transpose(1, 2)")],
        "swaps the wrong axes",
    ),
    (  # #hunt7: the backward scaled by d_v (q, k and v were (d, d) in the lesson): no hint
        "tiled_attention_backward",
        [("math.sqrt(q.shape[-1])", "math.sqrt(v.shape[-1])")],
        "divided by sqrt(d_v)",
    ),
]


HUNTED_8 = [  # eighth round: slips that got another slip's hint or a weak one
    (  # a symmetric half-window was told to use <= (the same mask at window 2)
        "sliding_window_mask",
        [("offset.abs() <= window", "offset.abs() <= window // 2")],
        "not window=4: `window` counts the keys on EACH side",
    ),
    (  # D as a mean over d_v: 'only dq, dk differ' before
        "tiled_attention_backward",
        [("D = (d_out * out).sum(dim=-1,", "D = (d_out * out).mean(dim=-1,")],
        "D is the mean of d_out * out",
    ),
    (  # D summed without dim=, one number: 'only dq, dk differ' before
        "tiled_attention_backward",
        [("D = (d_out * out).sum(dim=-1, keepdim=True)", "D = (d_out * out).sum()")],
        "sum() without dim= adds up every query",
    ),
    (  # the forward's running sum from each block's mean: 'None of the usual' before
        "tiled_attention",
        [(SUM, SUM.replace("weights.sum(", "weights.mean("))],
        "MEAN of exp(s - m)",
    ),
]


HUNTED_F10 = [  # #f10: a fresh learner's slips that got "None of the usual", no hint or another's
    (  # the loop's last line left out: the maximum stays -inf ("None of the usual" before)
        "tiled_attention",
        [("\n        running_max = new_max", "")],
        "the running maximum is never updated",
    ),
    (  # an integer band: "your band reaches 4 keys on each side, not window=4" before
        "sliding_window_mask",
        [("    return mask\n", "    return mask.long()\n")],
        "not floats or integers",
    ),
    (  # the grid axes put together but left behind the channel ("None of the usual" before)
        "patchify",
        [("x.permute(0, 2, 4, 1, 3, 5)", "x.permute(0, 1, 2, 4, 3, 5)")],
        "still in front of the patch grid",
    ),
    (  # & binds tighter than != (only "the share ... chosen is 0.081" before)
        "mlm_mask",
        [("chosen & (ids != pad_id)", "chosen & ids != pad_id")],
        "& binds tighter than !=",
    ),
    (  # if / elif thresholds as masks, the random ids written over the <mask>s (no hint before)
        "mlm_mask",
        [("chosen & (action >= 0.8) & (action < 0.9)", "chosen & (action < 0.9)")],
        "so they overwrite them",
    ),
    (  # the backward's mask written afresh with >= ("None of the usual" before)
        "tiled_attention_backward",
        [("masked_fill(key_pos > query_pos", "masked_fill(key_pos >= query_pos")],
        "may attend to itself, as in the forward pass",
    ),
    (  # the forward's named slip, a bare PyTorch error in the backward before
        "tiled_attention_backward",
        [
            (
                "torch.arange(start, start + scores.shape[-1])",
                "torch.arange(start, start + block_size)",
            )
        ],
        "from its own width",
    ),
    (  # lse read as the sum itself ("None of the usual" before)
        "tiled_attention_backward",
        [("torch.exp(scores - lse)", "torch.exp(scores) / lse")],
        "not exp(s) / lse",
    ),
    (  # lse added, a sign slip ("None of the usual" before)
        "tiled_attention_backward",
        [("torch.exp(scores - lse)", "torch.exp(scores + lse)")],
        "MINUS lse",
    ),
    (  # the brackets of p * (dp - D) dropped: "only dq, dk differ" before
        "tiled_attention_backward",
        [("weights * (d_weights - D)", "weights * d_weights - D")],
        "inside the brackets",
    ),
    (  # 3-D slicing on 4-D k and v: the whole heads axis, told only "the full matrix" before
        "tiled_attention",
        [
            ("k[..., start : start + block_size, :]", "k[:, start : start + block_size]"),
            ("v[..., start : start + block_size, :]", "v[:, start : start + block_size]"),
        ],
        "k[:, start : ...] slices another axis",
    ),
    (  # the causal band's upper bound j <= i left out ("None of the usual" before)
        "sliding_window_mask",
        [("mask = mask & (offset >= 0)", "mask = offset <= window")],
        "j >= i - window alone",
    ),
    (  # one draw both chooses and splits 80/10/10: told only "every chosen position became
        # <mask>" before, which the learner believes their thresholds already prevent
        "mlm_mask",
        [
            (
                "chosen = torch.rand(ids.shape, generator=generator) < mask_prob",
                "action = torch.rand(ids.shape, generator=generator)\n"
                "    chosen = action < mask_prob",
            ),
            (
                "    action = torch.rand(ids.shape, generator=generator)  # one draw decides",
                "    #",
            ),
        ],
        "draw a second u",
    ),
    (  # the triangles' offsets swapped, an empty band ("None of the usual" before)
        "sliding_window_mask",
        [
            (
                "mask = offset.abs() <= window",
                "mask = torch.ones(n, n, dtype=torch.bool).tril(-window).triu(window)",
            )
        ],
        "offsets of tril and triu are swapped",
    ),
]


HUNTED_F10B = [  # #f10, a second fresh reader: common slips that got "None of the usual"
    (  # lesson 05's other masking slip, the later keys' scores filled with 0
        "tiled_attention",
        [
            (
                'scores.masked_fill(key_pos > query_pos, float("-inf"))',
                "scores.masked_fill(key_pos > query_pos, 0.0)",
            )
        ],
        "fills the later keys' scores with 0, not -inf",
    ),
    (  # the same slip in the recomputed tiles of the backward pass
        "tiled_attention_backward",
        [
            (
                'scores.masked_fill(key_pos > query_pos, float("-inf"))',
                "scores.masked_fill(key_pos > query_pos, 0.0)",
            )
        ],
        "filled with 0, not -inf",
    ),
    (  # int64 labels (torch.full's default) for int32 ids: a bare crash before
        "mlm_mask",
        [
            (
                "labels = torch.where(chosen, ids, torch.full_like(ids, -100))",
                "labels = torch.full(ids.shape, -100)\n    labels[chosen] = ids[chosen]",
            )
        ],
        "torch.full's default dtype for -100",
    ),
    (  # the running sum overwritten by each block, not accumulated
        "tiled_attention",
        [(SUM, "running_sum = weights.sum(dim=-1, keepdim=True)")],
        "the running sum is overwritten by each block",
    ),
    (  # the running output overwritten by each block, not accumulated
        "tiled_attention",
        [("out = out * correction + weights @ v_block", "out = weights @ v_block")],
        "the running output is overwritten by each block",
    ),
    (  # ex02's slip again: the scale multiplied, not divided
        "tiled_attention",
        [("q = q / math.sqrt(q.shape[-1])", "q = q * math.sqrt(q.shape[-1])")],
        "multiplied the scores by sqrt(d_k)",
    ),
    (  # `start += block_size` before the tile's key positions: NaN, and the hint "subtract
        # the running maximum before exp", which the code does, before
        "tiled_attention",
        [
            (
                "torch.arange(start, start + scores.shape[-1])",
                "torch.arange(start + block_size, start + block_size + scores.shape[-1])",
            )
        ],
        "start one block late",
    ),
    (  # the same in the backward pass ("None of the usual" before)
        "tiled_attention_backward",
        [
            (
                "torch.arange(start, start + scores.shape[-1])",
                "torch.arange(start + block_size, start + block_size + scores.shape[-1])",
            )
        ],
        "start one block late",
    ),
    (  # the lesson's tile of 4 keys copied, block_size ignored (full marks before)
        "tiled_attention",
        [
            ("range(0, n_k, block_size)", "range(0, n_k, 4)"),
            ("k[..., start : start + block_size, :]", "k[..., start : start + 4, :]"),
            ("v[..., start : start + block_size, :]", "v[..., start : start + 4, :]"),
        ],
        "the argument you were given",
    ),
    (  # the same in the backward pass (full marks before)
        "tiled_attention_backward",
        [
            ("range(0, n_k, block_size)", "range(0, n_k, 4)"),
            ("k[..., start : start + block_size, :]", "k[..., start : start + 4, :]"),
            ("v[..., start : start + block_size, :]", "v[..., start : start + 4, :]"),
        ],
        "the argument you were given",
    ),
    (  # the last step of the statement's recipe, o / l, left out
        "tiled_attention",
        [("return out / running_sum", "return out")],
        "at the end return o / l",
    ),
]


TRIU_MASK = (  # the solution's causal mask of a tile, written with triu instead
    "key_pos = torch.arange(start, start + scores.shape[-1])  # (bk,)",
    "blocked = torch.ones(n_q, scores.shape[-1], dtype=torch.bool).triu(n_k - n_q - start + 1)",
)
HUNTED_F10C = [  # #f10, the third reader: less obvious slips that got no hint or a generic one
    (  # the tile's triu diagonal with its offset's sign reversed ("None of the usual" before)
        "tiled_attention",
        [
            (
                TRIU_MASK[0],
                TRIU_MASK[1].replace("n_k - n_q - start + 1", "start - (n_k - n_q) + 1"),
            ),
            ("masked_fill(key_pos > query_pos,", "masked_fill(blocked,"),
        ],
        "the causal mask's offsets have the wrong sign",
    ),
    (  # ds times 1 / sqrt(d_k), then dq and dk again (the hint was "only dq, dk differ")
        "tiled_attention_backward",
        [("weights * (d_weights - D)", "weights * (d_weights - D) * scale")],
        "ds is divided by sqrt(d_k), and dq and dk are divided by it again",
    ),
    (  # padding taken out of the labels only, after the inputs were corrupted (no hint before:
        # "padding changed: 10811 (expected 0)")
        "mlm_mask",
        [
            ("chosen = chosen & (ids != pad_id)  # never a padding position", "pass"),
            (
                RETURN,
                "labels = labels.masked_fill(ids == pad_id, -100) if pad_id is not None "
                "else labels\n    " + RETURN,
            ),
        ],
        "leaving them out of the labels is not enough",
    ),
    (  # D summed over the queries' axis: a bare size-mismatch crash before
        "tiled_attention_backward",
        [("(d_out * out).sum(dim=-1, keepdim=True)", "(d_out * out).sum(dim=-2, keepdim=True)")],
        "D is summed over the queries",
    ),
    (  # one draw for choosing and splitting, thresholds fixed for the default 0.15 (no hint
        # before: "the share of chosen positions that became <mask> is 0.397, expected 0.800")
        "mlm_mask",
        [
            (
                "chosen = torch.rand(ids.shape, generator=generator) < mask_prob",
                "action = torch.rand(ids.shape, generator=generator)\n"
                "    chosen = action < mask_prob",
            ),
            ("    action = torch.rand(ids.shape, generator=generator)  # one draw", "    # one"),
            ("(action < 0.8)", "(action < 0.12)"),
            ("(action >= 0.8) & (action < 0.9)", "(action >= 0.12) & (action < 0.135)"),
        ],
        "with thresholds fixed for mask_prob=0.15",
    ),
    (  # the weights exp(s - m) taken with the maximum from before the block: NaN, and the hint
        # said "the rescaling factor is inverted", which the code did not do
        "tiled_attention",
        [
            (
                "        weights = torch.exp(scores - new_max)  # (..., n_q, bk)\n",
                "",
            ),
            (
                "        new_max = torch.maximum(",
                "        weights = torch.exp(scores - running_max)\n"
                "        new_max = torch.maximum(",
            ),
        ],
        "the block's weights use the maximum from before the block",
    ),
    (  # -100 where chosen, the id elsewhere (before: "padding positions whose label is not
        # -100: 81469" and no hint)
        "mlm_mask",
        [("torch.where(chosen, ids, torch.full_like(ids, -100))", "ids.masked_fill(chosen, -100)")],
        "your labels are the other way round",
    ),
    (  # H split as (p, H/p), with the lesson's permute kept ("None of the usual" before)
        "patchify",
        [
            (
                "images.reshape(batch, channels, rows, patch_size, cols, patch_size)",
                "images.reshape(batch, channels, patch_size, rows, patch_size, cols)",
            )
        ],
        "splits H as (p, H/p), so permute(0, 2, 4, 1, 3, 5)",
    ),
]


def test_a_tile_mask_written_with_triu_passes():
    """The right triu diagonal, n_k - n_q - start + 1, is a right answer (its sign reversed is
    HUNTED_F10C's slip)."""
    right = _solution_with(
        "tiled_attention", TRIU_MASK, ("masked_fill(key_pos > query_pos,", "masked_fill(blocked,")
    )
    result = check_result("ex10.tiled_attention", right)
    assert result.status == "passed", result.feedback


ALL_HUNTED = (
    HUNTED
    + HUNTED_2
    + HUNTED_3
    + HUNTED_4
    + HUNTED_5
    + HUNTED_8
    + HUNTED_F10
    + HUNTED_F10B
    + HUNTED_F10C
)


@pytest.mark.parametrize("name,edits,words", ALL_HUNTED, ids=[h[2] for h in ALL_HUNTED])
def test_hunted_slips_lose_points_in_the_notebook_with_a_named_hint(name, edits, words):
    result = check_result(f"ex10.{name}", _solution_with(name, *edits))
    assert result.status == "failed" and result.score < result.max_score, result.feedback
    assert words in result.feedback and "not implemented yet" not in result.feedback


def test_mlm_mask_check_runs_a_loop_over_the_positions_in_time():
    # hunt s9: a loop over the positions (BERT's own create_masked_lm_predictions is one) took
    # about 12 s in the notebook: each case ran it three times on 200,000 positions, twice only
    # to see that the draws come from `generator`. Those two checks now run on the first rows
    # (about 10,000 positions), so the positions a case costs are the statistical call's plus
    # a few; a right answer still gets every mark.
    seen = []

    def counted(ids, mask_id, vocab_size, mask_prob=0.15, pad_id=None, generator=None):
        seen.append(ids.numel())
        return mlm_by_multinomial(ids, mask_id, vocab_size, mask_prob, pad_id, generator)

    result = check_result("ex10.mlm_mask", counted)
    assert result.status == "passed", result.feedback
    big = [n for n in seen if n >= 200_000]
    assert len(big) == 7, seen  # one statistical call per case, as before
    assert sum(seen) - sum(big) <= 7 * 3 * 25_000, seen  # before: 14 more calls of 200,000


def test_a_right_mlm_mask_fails_the_shares_by_chance_less_than_once_in_a_million_runs():
    # #rand10: each case compares 5 shares (chosen, chosen in the first half, <mask>, unchanged,
    # random) with BERT's probabilities; the union of their exact binomial tails bounds how often
    # a right answer strays past one by chance: 1.3e-6 at 5 standard errors
    bound = 0.0
    for case in get_task("ex10.mlm_mask").cases(torch.Generator().manual_seed(0)):
        if case.raises is None:
            ids, mask_id, vocab_size = case.args
            pad_id, p = case.kwargs.get("pad_id"), case.kwargs.get("mask_prob", 0.15)
            real = ids != pad_id if pad_id is not None else torch.ones_like(ids, dtype=torch.bool)
            first_half = int(real[..., : ids.shape[-1] // 2].sum())
            chosen = round(int(real.sum()) * p)
            hit, inside = 0.1 / vocab_size, mask_id < vocab_size  # a random id that is the original
            for total, share in [
                (int(real.sum()), p),
                (first_half, p),
                (chosen, 0.8 + hit * inside),
                (chosen, 0.1 + hit),
                (chosen, 0.1 - hit * (1 + inside)),
            ]:
                if share < 1:  # mask_prob=1.0 chooses every position: no chance in it
                    bound += binomial_tail(total, share, share_tolerance(share, total))
    assert bound < 1e-6, bound


def test_random_ids_equal_to_the_original_are_expected_less_often_in_the_histogram():
    # #rand10: a random id equal to the original counts as unchanged, so an id that is common
    # among the originals comes less often among the random ids. The check expected every id
    # equally often, and so failed about 1 right answer in 300 (each draws from the check's
    # generator seeded 1234, so a draw order passes or fails on nearly every hidden seed alike;
    # mostly the vocab_size=4 case, where pad_id + 1 stands for pad_id, twice as common); on ids
    # half 2 and half 5 it said "id 2 is drawn 113 times more or less than the 269 expected"
    # (id 2 stays a random id half as often as the others: about 150 times)
    task = get_task("ex10.mlm_mask")
    ids = torch.full((400, 500), 2)
    ids[:, ::2] = 5
    case = Case("ids that are all 2 or 5, vocab_size=10, mask_id=10", (ids, 10, 10))
    got = task.call(mlm_mask, case)
    assert task.compare(got, task.expected(case), case) is None


# ---- L16: other 80/10/10 bounds ----


def mlm_split_bounds(ids, mask_id, vocab_size, mask_prob=0.15, pad_id=None, generator=None, *, how):
    if not 0 < mask_prob <= 1:
        raise ValueError("mask_prob")
    chosen = torch.rand(ids.shape, generator=generator) < mask_prob
    if pad_id is not None:
        chosen = chosen & (ids != pad_id)
    if how == "randint(0, 100), r <= 80, r <= 90":
        r = torch.randint(0, 100, ids.shape, generator=generator)
        masked, swap = chosen & (r <= 80), chosen & (r > 80) & (r <= 90)
    elif how == "randint(0, 100), r < 80, r < 90":  # right
        r = torch.randint(0, 100, ids.shape, generator=generator)
        masked, swap = chosen & (r < 80), chosen & (r >= 80) & (r < 90)
    elif how == "u <= 0.8, u <= 0.9":  # right: a continuous u is never exactly 0.8
        u = torch.rand(ids.shape, generator=generator)
        masked, swap = chosen & (u <= 0.8), chosen & (u > 0.8) & (u <= 0.9)
    elif how == "u >= 0.2 <mask>, u < 0.1 random":  # right: other ranges of the same sizes
        u = torch.rand(ids.shape, generator=generator)
        masked, swap = chosen & (u >= 0.2), chosen & (u < 0.1)
    else:  # "0.8 <= u < 0.1": the share 0.1 taken as the bound, so no random id
        u = torch.rand(ids.shape, generator=generator)
        masked, swap = chosen & (u < 0.8), chosen & (u >= 0.8) & (u < 0.1)
    random_ids = torch.randint(vocab_size, ids.shape, generator=generator, dtype=ids.dtype)
    inputs = torch.where(swap, random_ids, ids.masked_fill(masked, mask_id))
    return inputs, torch.where(chosen, ids, torch.full_like(ids, -100))


def _mlm_graded(how, seed):
    import course_lib.grading as grading

    grading.NOTEBOOK_SEED = seed  # the batch grader's hidden seeds
    try:
        return check_result("ex10.mlm_mask", partial(mlm_split_bounds, how=how))
    finally:
        grading.NOTEBOOK_SEED = 0


@pytest.mark.parametrize(
    "how, words",
    [
        ("randint(0, 100), r <= 80, r <= 90", "counts one value too many"),
        ("0.8 <= u < 0.1", "no chosen position gets a random id"),
    ],
)
def test_l16_other_80_10_10_bounds_are_named_under_every_seed(how, words):
    # before: only 'the share ... is 0.090, expected 0.102' (0.202, expected 0.105), with no
    # hint; under seed 4 the r <= 80 split was told its random ids never equal the original
    for seed in (0, 1, 2, 3, 4, 5):
        result = _mlm_graded(how, seed)
        assert result.status == "failed" and words in result.feedback, (seed, result.feedback)
        assert "never equal the original" not in result.feedback, (seed, result.feedback)


@pytest.mark.parametrize(
    "how",
    ["randint(0, 100), r < 80, r < 90", "u <= 0.8, u <= 0.9", "u >= 0.2 <mask>, u < 0.1 random"],
)
def test_l16_right_80_10_10_bounds_pass(how):
    for seed in (0, 1, 2):
        result = _mlm_graded(how, seed)
        assert result.passed == result.total, (seed, result.feedback)


# ---- f10: state kept between calls, a table cached at its first size -------------------------


def _f10_band_cached_by_n_and_causal():
    kept = {}

    def sliding_window_mask(n, window, causal=False):  # the window left out of the key
        if n < 1 or window < 0:
            raise ValueError("expected n >= 1 and window >= 0")
        if (n, causal) not in kept:
            offset = torch.arange(n)[:, None] - torch.arange(n)
            band = offset.abs() <= window
            kept[n, causal] = band & (offset >= 0) if causal else band
        return kept[n, causal]

    return sliding_window_mask


def test_f10_a_band_kept_per_n_and_causal_fails_and_is_named():
    # before: full marks, 12 of 12 (every n was asked once per causal); now the case n=7,
    # window=4 meets the band that n=7, window=2 left behind
    result = check_result("ex10.sliding_window_mask", _f10_band_cached_by_n_and_causal())
    assert result.status == "failed", result.feedback
    assert "earlier call with the same n" in result.feedback, result.feedback


def _f10_patches_cached_by_size():
    kept = {}

    def patchify(images, patch_size):  # an index table kept per image size, patch_size left out
        b, c, h, w = images.shape
        p = patch_size
        if h % p or w % p:
            raise ValueError(f"H and W must be multiples of patch_size={p}, got {h} x {w}")
        if (h, w) not in kept:
            grid = torch.arange(h * w).reshape(h // p, p, w // p, p)
            kept[h, w] = grid.permute(0, 2, 1, 3).reshape(-1, p * p)
        index = kept[h, w]
        patches = images.reshape(b, c, h * w)[:, :, index]  # (b, c, patches, p * p)
        return patches.transpose(1, 2).reshape(b, -1, c * p * p)

    return patchify


def test_f10_a_patch_table_kept_per_image_size_fails_and_is_named():
    # before: full marks, 9 of 9 (no image size was asked twice); now (2, 3, 8, 12) comes
    # again with patch_size=2 after patch_size=4
    result = check_result("ex10.patchify", _f10_patches_cached_by_size())
    assert result.status == "failed", result.feedback
    assert "earlier call with the same image size" in result.feedback, result.feedback


def test_f10_tables_built_afresh_in_each_call_pass():
    # the same code with an empty table at every call is right: the cases ask for nothing else
    for task_id, make in (
        ("ex10.sliding_window_mask", _f10_band_cached_by_n_and_causal),
        ("ex10.patchify", _f10_patches_cached_by_size),
    ):

        def afresh(*args, make=make, **kwargs):
            return make()(*args, **kwargs)

        result = check_result(task_id, afresh)
        assert result.passed == result.total, result.feedback


def _f10_tiled_stopping_at_n_q(q, k, v, block_size=128, causal=False):
    """A right loop, but with causal=True it stops at the block that starts at n_q."""
    if not isinstance(block_size, int) or isinstance(block_size, bool) or block_size < 1:
        raise ValueError(f"block_size must be a positive integer, got {block_size!r}")
    n_q, n_k = q.shape[-2], k.shape[-2]
    m = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=q.dtype)
    total, out = torch.zeros_like(m), 0
    query_pos = torch.arange(n_q)[:, None] + (n_k - n_q)
    for start in range(0, n_k, block_size):
        if causal and start >= n_q:  # as if the last query were token n_q - 1
            break
        s = q @ k[..., start : start + block_size, :].transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            key_pos = torch.arange(start, start + s.shape[-1])
            s = s.masked_fill(key_pos > query_pos, float("-inf"))
        new_m = torch.maximum(m, s.amax(-1, keepdim=True))
        p, rescale = (s - new_m).exp(), (m - new_m).exp()
        total = total * rescale + p.sum(-1, keepdim=True)
        out = out * rescale + p @ v[..., start : start + block_size, :]
        m = new_m
    return (out / total).to(q.dtype)


def test_f10_a_causal_loop_stopped_at_n_q_is_named():
    # before: 'the last keys are left out when n_k is not a multiple of block_size ... loop
    # with range(0, n_k, block_size)', which the loop already does (with q (3, 5, 4) and k
    # (2, 3, 9, 4) both drop the block of key 8)
    result = check_result("ex10.tiled_attention", _f10_tiled_stopping_at_n_q)
    assert result.status == "failed", result.feedback
    assert "stops at the block that starts at n_q" in result.feedback, result.feedback
    assert "the last keys are left out" not in result.feedback, result.feedback


# ---- h10: a band kept per (n, window) and cut in place by a causal call ----------------------


def _h10_band_cut_in_place():
    kept = {}

    def sliding_window_mask(n, window, causal=False):  # kept per (n, window): both in the key
        if n < 1 or window < 0:
            raise ValueError(f"expected n >= 1 and window >= 0, got n={n}, window={window}")
        if (n, window) not in kept:
            offset = torch.arange(n)[:, None] - torch.arange(n)
            kept[n, window] = offset.abs() <= window
        mask = kept[n, window]
        if causal:
            mask &= torch.arange(n)[:, None] >= torch.arange(n)  # in place: the kept one too
        return mask

    return sliding_window_mask


def test_h10_a_kept_band_cut_in_place_by_a_causal_call_fails_and_is_named():
    # before: full marks, 13 of 13 (no call without causal=True came after a causal one of the
    # same n and window); now n=8, window=3 is asked again after its causal call
    result = check_result("ex10.sliding_window_mask", _h10_band_cut_in_place())
    assert result.status == "failed", result.feedback
    assert "was cut in place there" in result.feedback, result.feedback


def test_h10_a_band_kept_and_cut_into_a_new_tensor_passes():
    kept = {}

    def sliding_window_mask(n, window, causal=False):
        if n < 1 or window < 0:
            raise ValueError(f"expected n >= 1 and window >= 0, got n={n}, window={window}")
        if (n, window) not in kept:
            offset = torch.arange(n)[:, None] - torch.arange(n)
            kept[n, window] = offset.abs() <= window
        mask = kept[n, window]
        return mask & (torch.arange(n)[:, None] >= torch.arange(n)) if causal else mask

    result = check_result("ex10.sliding_window_mask", sliding_window_mask)
    assert result.passed == result.total, result.feedback


# ---- h17: the lesson's query blocks with the shift forgotten; pad_id as the ignored label ------


def _h17_tiled_by_query_blocks(q, k, v, block_size=128, causal=False, shift=True, last=True):
    """The lesson's loop (query blocks too), each query block's keys up to its last token;
    with shift=False that end is q_start + rows, n_k - n_q forgotten; with last=False it is the
    block's FIRST query's token (h19)."""
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be a positive integer, got {block_size!r}")
    n_q, n_k = q.shape[-2], k.shape[-2]
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    outs = []
    for q_start in range(0, n_q, block_size):
        q_block = q[..., q_start : q_start + block_size, :] / math.sqrt(q.shape[-1])
        rows = q_block.shape[-2]
        m = torch.full((*batch, rows, 1), float("-inf"), dtype=q.dtype)
        total = torch.zeros((*batch, rows, 1), dtype=q.dtype)
        out = torch.zeros((*batch, rows, v.shape[-1]), dtype=q.dtype)
        query_pos = torch.arange(q_start, q_start + rows)[:, None] + n_k - n_q
        k_end = min(n_k, q_start + (rows if last else 1) + (n_k - n_q) * shift) if causal else n_k
        for start in range(0, k_end, block_size):
            s = q_block @ k[..., start : start + block_size, :].transpose(-2, -1)
            if causal:
                key_pos = torch.arange(start, start + s.shape[-1])
                s = s.masked_fill(key_pos > query_pos, float("-inf"))
            new_m = torch.maximum(m, s.amax(-1, keepdim=True))
            p, rescale = (s - new_m).exp(), (m - new_m).exp()
            total = total * rescale + p.sum(-1, keepdim=True)
            out = out * rescale + p @ v[..., start : start + block_size, :]
            m = new_m
        outs.append(out / total)
    return torch.cat(outs, dim=-2)


def test_h17_query_blocks_that_stop_without_the_shift_are_named():
    # before: 18/20 with 'None of the usual single mistakes gives this result'
    right = check_result("ex10.tiled_attention", _h17_tiled_by_query_blocks)
    assert right.passed == right.total, right.feedback
    result = check_result("ex10.tiled_attention", partial(_h17_tiled_by_query_blocks, shift=False))
    assert result.status == "failed", result.feedback
    assert "each query block's loop over the keys stops at q_start + rows" in result.feedback


def test_h17_labels_pad_id_where_not_chosen_are_named():
    # before: only 'padding positions whose label is not -100: 81469 (expected 0)', no hint
    result = check_result(
        "ex10.mlm_mask",
        _solution_with(
            "mlm_mask",
            (
                "torch.full_like(ids, -100))",
                "torch.full_like(ids, -100 if pad_id is None else pad_id))",
            ),
        ),
    )
    assert result.status == "failed", result.feedback
    assert "labelled with pad_id, not -100" in result.feedback, result.feedback


# ---- h18: the keys sliced on the last axis (k[..., start : end], no `, :`) ---------------------


@pytest.mark.parametrize(
    "name, edits",
    [
        (
            "tiled_attention",
            [
                ("k[..., start : start + block_size, :]", "k[..., start : start + block_size]"),
                ("v[..., start : start + block_size, :]", "v[..., start : start + block_size]"),
            ],
        ),
        (
            "tiled_attention_backward",
            [("k[..., start : start + block_size, :]", "k[..., start : start + block_size]")],
        ),
    ],
)
def test_h18_keys_sliced_on_the_last_axis_are_named(name, edits):
    # before: 'your code raised RuntimeError: Expected size for first two dimensions of batch2
    # tensor ...' with no hint, only 'To see the line that fails, run your code ...'
    result = check_result(f"ex10.{name}", _solution_with(name, *edits))
    assert result.status == "failed", result.feedback
    assert "slices the LAST axis, d_k, not the keys" in result.feedback, result.feedback


# ---- h19: the lesson's query blocks cut at their FIRST query; a backward stopped at n_q --------


def test_h19_query_blocks_cut_at_their_first_query_fail_and_are_named():
    # before: full marks, 20 of 20: every causal case with fewer queries than keys had
    # n_k - n_q a multiple of block_size (4 with 4) or one query, where the cut is right
    result = check_result("ex10.tiled_attention", partial(_h17_tiled_by_query_blocks, last=False))
    assert result.status == "failed", result.feedback
    assert "skipped once it starts after the query block's FIRST query" in result.feedback


def _h19_backward_by_query_blocks(q, k, v, out, lse, d_out, block_size=128, causal=False, **how):
    """The lesson's backward loop: key blocks outside, query blocks inside (dq, dk, dv filled in
    place); how: first_query=True skips a query block while its FIRST query comes before the
    keys, stop_at_n_q=True stops the key loop at n_q (causal=True)."""
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be a positive integer, got {block_size!r}")
    n_q, n_k = q.shape[-2], k.shape[-2]
    shift, scale = n_k - n_q, 1 / math.sqrt(q.shape[-1])
    D, row_lse = (d_out * out).sum(-1, keepdim=True), lse.unsqueeze(-1)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for ks in range(0, n_q if causal and how.get("stop_at_n_q") else n_k, block_size):
        k_block, v_block = k[..., ks : ks + block_size, :], v[..., ks : ks + block_size, :]
        for qs in range(0, n_q, block_size):
            rows = slice(qs, qs + block_size)
            last_token = (qs if how.get("first_query") else min(n_q, qs + block_size) - 1) + shift
            if causal and last_token < ks:  # no query of this block sees these keys
                continue
            s = q[..., rows, :] @ k_block.transpose(-2, -1) * scale
            if causal:
                query_pos = torch.arange(n_q)[rows, None] + shift
                s = s.masked_fill(torch.arange(ks, ks + s.shape[-1]) > query_pos, float("-inf"))
            p = (s - row_lse[..., rows, :]).exp()
            dv[..., ks : ks + block_size, :] += p.transpose(-2, -1) @ d_out[..., rows, :]
            ds = p * (d_out[..., rows, :] @ v_block.transpose(-2, -1) - D[..., rows, :])
            dq[..., rows, :] += ds @ k_block * scale
            dk[..., ks : ks + block_size, :] += ds.transpose(-2, -1) @ q[..., rows, :] * scale
    return dq, dk, dv


def test_h19_backward_query_blocks_cut_at_their_first_query_fail_and_are_named():
    # before: full marks, 14 of 14, for the same reason as the forward's
    task = "ex10.tiled_attention_backward"
    right = check_result(task, _h19_backward_by_query_blocks)
    assert right.passed == right.total, right.feedback
    result = check_result(task, partial(_h19_backward_by_query_blocks, first_query=True))
    assert result.status == "failed", result.feedback
    assert "its FIRST query, token q_start + n_k - n_q, comes before" in result.feedback


def test_h19_a_backward_stopped_at_n_q_is_named():
    # before: 'the last keys get no gradient when n_k is not a multiple of block_size ... loop
    # with range(0, n_k, block_size)', which the loop already does (the forward's f10 slip)
    result = check_result(
        "ex10.tiled_attention_backward", partial(_h19_backward_by_query_blocks, stop_at_n_q=True)
    )
    assert result.status == "failed", result.feedback
    assert "stops at the block that starts at n_q" in result.feedback, result.feedback
    assert "the last keys get no gradient" not in result.feedback, result.feedback


# ---- h10b: the sequence lengths read from axis 1 (3-D inputs assumed) -------------------------

SEQ_AXIS_1 = "n_q, n_k = q.shape[-2], k.shape[-2]"
SEQ_WORDS = "q.shape[1] and k.shape[1] are the numbers of queries and keys only for 3-D inputs"


@pytest.mark.parametrize("name", ["tiled_attention", "tiled_attention_backward"])
@pytest.mark.parametrize(
    "lengths",
    ["q.shape[1], k.shape[1]", "q.shape[-2], k.shape[1]", "q.shape[1], k.shape[-2]"],
)
def test_h10b_sequence_lengths_from_axis_1_are_named(name, lengths):
    # before: forward 'a maximum or sum over the keys without keepdim=True ...' (both, or q's
    # alone) and 'subtract the running maximum before exp' or 'None of the usual single
    # mistakes' (k's alone); backward 'None of the usual single mistakes', or a bare crash
    result = check_result(
        f"ex10.{name}", _solution_with(name, (SEQ_AXIS_1, f"n_q, n_k = {lengths}"))
    )
    assert result.status == "failed", result.feedback
    assert SEQ_WORDS in result.feedback, result.feedback
    assert "keepdim" not in result.feedback and "None of the usual" not in result.feedback


def test_h10b_a_sum_without_keepdim_keeps_its_own_hint():
    # its crash on (2, 3, 10, 8) is the one of q.shape[1]: a 3-D case comes first to tell them apart
    result = check_result(
        "ex10.tiled_attention",
        _solution_with("tiled_attention", (SUM, SUM.replace(", keepdim=True", ""))),
    )
    assert result.status == "failed", result.feedback
    assert "without keepdim=True" in result.feedback and SEQ_WORDS not in result.feedback


# ---- h10b: the backward's k_block.transpose(1, 2) -------------------------------------------


def test_h10b_backward_keys_transposed_on_axes_1_2_are_named():
    # before: a bare 'RuntimeError: The size of tensor a (3) must match the size of tensor b (4)
    # ...' and 'To see the line that fails, run your code ...', no hint
    name = "tiled_attention_backward"
    edit = ("q @ k_block.transpose(-2, -1)", "q @ k_block.transpose(1, 2)")
    result = check_result(f"ex10.{name}", _solution_with(name, edit))
    assert result.status == "failed", result.feedback
    assert "k.transpose(1, 2) swaps the wrong axes" in result.feedback, result.feedback
