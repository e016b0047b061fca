"""Grader tests for ex03 (multi-head attention): right answers pass, each mistake gets its hint."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import course_lib.grading
from course_lib.attention import scaled_dot_product_attention
from course_lib.grading import check_result
from course_lib.grading.core import get_task, judge, resolve, run_cases, tasks_for
from course_lib.multihead import split_heads as reference_split_heads

TASK_IDS = [
    "ex03.split_heads",
    "ex03.merge_heads",
    "ex03.MultiHeadAttention",
    "ex03.grouped_query_attention",
]


def status_and_feedback(task_id, obj):
    result = check_result(task_id, obj)
    assert not isinstance(result, str), result  # a string means the checker itself failed
    return result.status, result.feedback


def test_the_exercise_set_has_its_tasks_in_order():
    assert [t.id for t in tasks_for("ex03")] == TASK_IDS


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_reference_passes_every_case(task_id):
    task = get_task(task_id)
    cases = task.cases(torch.Generator().manual_seed(123))
    run = run_cases(task, resolve(task.reference), cases)
    run["seen"] = []  # the reference calls itself, which is only forbidden for learners
    result = judge(task, cases, run)
    assert result.status == "passed", result.feedback


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_handing_in_the_reference_is_forbidden(task_id):
    status, feedback = status_and_feedback(task_id, resolve(get_task(task_id).reference))
    assert status == "forbidden"
    assert "course's finished version" in feedback


# --------------------------------------------------------------------------------------------
# Correct solutions written in other ways
# --------------------------------------------------------------------------------------------


def split_view_permute(x, num_heads):
    batch, seq, d_model = x.shape
    if d_model % num_heads:
        raise ValueError("d_model must be divisible by num_heads")
    return x.view(batch, seq, num_heads, d_model // num_heads).permute(0, 2, 1, 3)


def split_by_chunks(x, num_heads):
    if x.shape[-1] % num_heads:
        raise ValueError(f"d_model={x.shape[-1]} is not divisible by num_heads={num_heads}")
    return torch.stack(x.chunk(num_heads, dim=-1), dim=1)


def merge_permute(x):
    batch, num_heads, seq, d_head = x.shape
    return x.permute(0, 2, 1, 3).contiguous().view(batch, seq, num_heads * d_head)


def merge_by_cat(x):
    return torch.cat(x.unbind(dim=1), dim=-1)


class EinsumMultiHeadAttention(nn.Module):
    """A correct alternative: einsum for the products, masked_fill(-inf) and softmax."""

    def __init__(self, d_model, num_heads, bias=True):
        super().__init__()
        self.num_heads, self.d_head = num_heads, d_model // num_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, query, key, value, mask=None):
        def heads(t):  # (batch, seq, d_model) -> (batch, seq, heads, d_head)
            return t.unflatten(-1, (self.num_heads, self.d_head))

        q, k, v = heads(self.q_proj(query)), heads(self.k_proj(key)), heads(self.v_proj(value))
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(self.d_head)
        if mask is not None:
            allowed = mask.unsqueeze(1) if mask.dim() == 3 else mask  # broadcast over heads
            scores = scores.masked_fill(~allowed, -math.inf)
        weights = scores.softmax(dim=-1)  # (batch, heads, n_q, n_k)
        mixed = torch.einsum("bhqk,bkhd->bqhd", weights, v).flatten(-2)  # (batch, n_q, d_model)
        return self.out_proj(mixed), weights


class Float64MultiHeadAttention(EinsumMultiHeadAttention):
    """A correct alternative that computes in float64 and casts back to the input dtype."""

    def forward(self, query, key, value, mask=None):
        batch, n_q, d_model = query.shape
        q = reference_like_split(self.q_proj(query).double(), self.num_heads)
        k = reference_like_split(self.k_proj(key).double(), self.num_heads)
        v = reference_like_split(self.v_proj(value).double(), self.num_heads)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(
                ~(mask.unsqueeze(1) if mask.dim() == 3 else mask), -math.inf
            )
        weights = scores.softmax(dim=-1)
        merged = (weights @ v).transpose(1, 2).reshape(batch, n_q, d_model).to(query.dtype)
        return self.out_proj(merged), weights.to(query.dtype)


class LessonCopyMultiHeadAttention(Float64MultiHeadAttention):
    """Lesson 03's step by step, which attends with the course's scaled_dot_product_attention."""

    def forward(self, query, key, value, mask=None):
        q, k, v = (
            reference_like_split(proj(t), self.num_heads)
            for proj, t in ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value))
        )
        mask = mask.unsqueeze(1) if mask is not None and mask.dim() == 3 else mask
        heads, weights = scaled_dot_product_attention(q, k, v, mask)
        return self.out_proj(heads.transpose(1, 2).flatten(-2)), weights


class LessonSplitMultiHeadAttention(Float64MultiHeadAttention):
    """Its own attention, but the course's split_heads and merge_heads, as lesson 03 calls them."""

    def forward(self, query, key, value, mask=None):
        from course_lib.multihead import merge_heads, split_heads

        q, k, v = (
            split_heads(proj(t), self.num_heads)
            for proj, t in ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value))
        )
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(
                ~(mask.unsqueeze(1) if mask.dim() == 3 else mask), -math.inf
            )
        weights = scores.softmax(dim=-1)
        return self.out_proj(merge_heads(weights @ v)), weights


@pytest.mark.parametrize(
    "module, borrowed",
    [
        (LessonCopyMultiHeadAttention, "course_lib.attention.scaled_dot_product_attention"),
        (LessonSplitMultiHeadAttention, "course_lib.multihead.split_heads"),
    ],
)
def test_multi_head_attention_built_on_the_course_pieces_is_borrowed(module, borrowed):
    # hunt 3: full marks, though the task says to write the attention out in the cell
    result = check_result("ex03.MultiHeadAttention", module)
    assert result.passed == result.total and result.score == result.max_score / 2, result.feedback
    assert borrowed in result.feedback and "borrowed" in result.feedback, result.feedback


def reference_like_split(x, num_heads):
    batch, seq, d_model = x.shape
    return x.reshape(batch, seq, num_heads, d_model // num_heads).transpose(1, 2)


@pytest.mark.parametrize(
    "task_id,obj",
    [
        ("ex03.split_heads", split_view_permute),
        ("ex03.split_heads", split_by_chunks),
        ("ex03.merge_heads", merge_permute),
        ("ex03.merge_heads", merge_by_cat),
        ("ex03.MultiHeadAttention", EinsumMultiHeadAttention),
        ("ex03.MultiHeadAttention", Float64MultiHeadAttention),
    ],
)
def test_alternative_correct_solutions_pass(task_id, obj):
    status, feedback = status_and_feedback(task_id, obj)
    assert status == "passed", feedback


# --------------------------------------------------------------------------------------------
# Named mistakes: each fails, with its own hint
# --------------------------------------------------------------------------------------------


def split_no_transpose(x, num_heads):
    batch, seq, d_model = x.shape
    if d_model % num_heads:
        raise ValueError("not divisible")
    return x.reshape(batch, num_heads, seq, d_model // num_heads)


def split_no_divisibility_check(x, num_heads):
    batch, seq, d_model = x.shape
    return x.reshape(batch, seq, num_heads, -1).transpose(1, 2)


def merge_no_transpose(x):
    batch, num_heads, seq, d_head = x.shape
    return x.reshape(batch, seq, num_heads * d_head)


class LearnerMultiHeadAttention(nn.Module):
    """A learner's module with one switchable mistake."""

    mistake = None

    def __init__(self, d_model, num_heads, bias=True):
        super().__init__()
        self.num_heads, self.d_model = num_heads, d_model
        bias = bias or self.mistake == "bias"  # the mistake: biases whatever bias says
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, query, key, value, mask=None):
        q = reference_like_split(self.q_proj(query), self.num_heads)
        k, v = self.k_proj(key), self.v_proj(value)
        if self.mistake == "cache":
            k, v = self.__dict__.setdefault("cache", (k, v))
        k, v = reference_like_split(k, self.num_heads), reference_like_split(v, self.num_heads)
        d_scale = self.d_model if self.mistake == "d_model" else q.shape[-1]
        scores = q @ k.transpose(-2, -1) / math.sqrt(d_scale)
        if mask is not None:
            scores = scores.masked_fill(~(mask.unsqueeze(1) if mask.dim() == 3 else mask), -1e9)
        weights = scores.softmax(-1)  # (batch, heads, n_q, n_k)
        if self.mistake == "average":  # one averaged map over the whole (unsplit) values
            merged = weights.mean(1) @ self.v_proj(value)
        else:
            merged = (weights @ v).transpose(1, 2).flatten(-2)
        output = merged if self.mistake == "no_out_proj" else self.out_proj(merged)
        return output, weights


class NoOutProj(LearnerMultiHeadAttention):
    mistake = "no_out_proj"


class AveragedHeads(LearnerMultiHeadAttention):
    mistake = "average"


class ScaledByDModel(LearnerMultiHeadAttention):
    mistake = "d_model"


class BiasIgnored(LearnerMultiHeadAttention):
    mistake = "bias"


class AveragedWeights(LearnerMultiHeadAttention):
    def forward(self, query, key, value, mask=None):
        output, weights = super().forward(query, key, value, mask)
        return output, weights.mean(dim=1)


class KeyValueCache(LearnerMultiHeadAttention):
    mistake = "cache"  # keys and values projected on the first call only, as for generation


class MissingOutProj(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        return query, None


@pytest.mark.parametrize(
    "task_id,wrong,hint",
    [
        ("ex03.split_heads", split_no_transpose, "mixes tokens"),
        ("ex03.split_heads", split_no_divisibility_check, "expected a ValueError"),
        ("ex03.merge_heads", merge_no_transpose, "transpose(1, 2)"),
        ("ex03.MultiHeadAttention", NoOutProj, "output = out_proj(merge_heads(heads))"),
        ("ex03.MultiHeadAttention", AveragedHeads, "concatenated (merge_heads), not averaged"),
        ("ex03.MultiHeadAttention", AveragedWeights, "not their average over heads"),
        ("ex03.MultiHeadAttention", ScaledByDModel, "divide by sqrt(d_head), not sqrt(d_model)"),
        ("ex03.MultiHeadAttention", MissingOutProj, "has no parameter named 'out_proj.weight'"),
        ("ex03.MultiHeadAttention", BiasIgnored, "bias=False): pass bias=bias on to every layer"),
        ("ex03.MultiHeadAttention", KeyValueCache, "kept an input from an earlier call"),
    ],
)
def test_mistakes_fail_with_their_hint(task_id, wrong, hint):
    status, feedback = status_and_feedback(task_id, wrong)
    assert status == "failed"
    assert hint in feedback, feedback


def test_mask_is_checked_with_batch_dims_and_unequal_lengths():
    cases = get_task("ex03.MultiHeadAttention").cases(torch.Generator().manual_seed(0))
    masked = [c for c in cases if "mask" in c.kwargs]
    assert any(
        c.kwargs["mask"].dim() == 3 and c.args[0].shape[1] != c.args[1].shape[1] for c in masked
    )
    assert any(c.args[0].dtype == torch.float64 for c in cases)

    class IgnoresMask(LearnerMultiHeadAttention):
        def forward(self, query, key, value, mask=None):
            return super().forward(query, key, value, None)

    status, feedback = status_and_feedback("ex03.MultiHeadAttention", IgnoresMask)
    assert status == "failed" and "mask" in feedback


# --------------------------------------------------------------------------------------------
# Forbidden shortcuts and stubs
# --------------------------------------------------------------------------------------------


class UsesFusedAttention(LearnerMultiHeadAttention):
    def forward(self, query, key, value, mask=None):
        q = reference_like_split(self.q_proj(query), self.num_heads)
        k = reference_like_split(self.k_proj(key), self.num_heads)
        v = reference_like_split(self.v_proj(value), self.num_heads)
        if mask is not None and mask.dim() == 3:
            mask = mask.unsqueeze(1)
        heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out_proj(heads.transpose(1, 2).flatten(-2)), None


class UsesTorchModule(LearnerMultiHeadAttention):
    def forward(self, query, key, value, mask=None):
        torch_mha = nn.MultiheadAttention(self.d_model, self.num_heads, batch_first=True)
        return torch_mha(query, key, value, need_weights=True, average_attn_weights=False)


class UsesFunctionalMHA(LearnerMultiHeadAttention):
    def forward(self, query, key, value, mask=None):
        in_w = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])
        in_b = torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias])
        out, weights = F.multi_head_attention_forward(
            query.transpose(0, 1),
            key.transpose(0, 1),
            value.transpose(0, 1),
            self.d_model,
            self.num_heads,
            in_w,
            in_b,
            None,
            None,
            False,
            0.0,
            self.out_proj.weight,
            self.out_proj.bias,
            average_attn_weights=False,
        )
        return out.transpose(0, 1), weights


def split_calling_reference(x, num_heads):
    return reference_split_heads(x, num_heads)


@pytest.mark.parametrize(
    "task_id,obj,name",
    [
        ("ex03.MultiHeadAttention", UsesFusedAttention, "scaled_dot_product_attention"),
        ("ex03.MultiHeadAttention", UsesTorchModule, "torch.nn.MultiheadAttention"),
        ("ex03.MultiHeadAttention", UsesFunctionalMHA, "multi_head_attention_forward"),
        ("ex03.split_heads", split_calling_reference, "course_lib.multihead.split_heads"),
    ],
)
def test_forbidden_calls_are_caught(task_id, obj, name):
    status, feedback = status_and_feedback(task_id, obj)
    assert status == "forbidden"
    assert name in feedback


def stub_function(*args, **kwargs):
    raise NotImplementedError()


class StubModule(nn.Module):
    def __init__(self, d_model, num_heads, bias=True):
        super().__init__()
        raise NotImplementedError()

    def forward(self, query, key, value, mask=None):
        raise NotImplementedError()


@pytest.mark.parametrize(
    "task_id,obj",
    [
        ("ex03.split_heads", stub_function),
        ("ex03.merge_heads", stub_function),
        ("ex03.MultiHeadAttention", StubModule),
    ],
)
def test_stubs_are_not_implemented(task_id, obj):
    status, feedback = status_and_feedback(task_id, obj)
    assert status == "not implemented"
    assert "not implemented yet" in feedback


def test_missing_submission():
    status, _ = status_and_feedback("ex03.MultiHeadAttention", None)
    assert status == "missing"


# --------------------------------------------------------------------------------------------
# ex03.grouped_query_attention
# --------------------------------------------------------------------------------------------


def gqa_by_groups(q, k, v, mask=None):
    """A correct alternative: view the query heads as (num_kv_heads, group) and broadcast."""
    batch, num_heads, n_q, d_head = q.shape
    num_kv_heads = k.shape[1]
    if num_heads % num_kv_heads:
        raise ValueError("num_heads must be a multiple of num_kv_heads")
    group = num_heads // num_kv_heads
    qg = q.view(batch, num_kv_heads, group, n_q, d_head)
    scores = qg @ k.unsqueeze(2).transpose(-2, -1) / math.sqrt(d_head)  # (b, kv, g, n_q, n_k)
    scores = scores.reshape(batch, num_heads, n_q, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    weights = scores.softmax(-1)
    out = weights.view(batch, num_kv_heads, group, n_q, -1) @ v.unsqueeze(2)
    return out.reshape(batch, num_heads, n_q, -1), weights


def gqa_by_index(q, k, v, mask=None):
    """A correct alternative: index the kv heads with h // group."""
    num_heads, num_kv_heads = q.shape[1], k.shape[1]
    if num_heads % num_kv_heads:
        raise ValueError("num_heads must be a multiple of num_kv_heads")
    index = torch.arange(num_heads) // (num_heads // num_kv_heads)
    return scaled_dot_product_attention(q, k[:, index], v[:, index], mask)


@pytest.mark.parametrize("obj", [gqa_by_groups, gqa_by_index])
def test_grouped_query_attention_alternatives_pass(obj):
    status, feedback = status_and_feedback("ex03.grouped_query_attention", obj)
    assert status == "passed", feedback


def gqa_with_a_wrong_group(q, k, v, mask=None):
    num_heads, num_kv_heads = q.shape[1], k.shape[1]
    if num_heads % num_kv_heads:
        raise ValueError("num_heads must be a multiple of num_kv_heads")
    index = torch.arange(num_heads) % num_kv_heads  # kv head h % num_kv_heads: tiled
    return scaled_dot_product_attention(q, k[:, index], v[:, index], mask)


def gqa_along_keys(q, k, v, mask=None):
    group = q.shape[1] // k.shape[1]
    if q.shape[1] % k.shape[1]:
        raise ValueError("num_heads must be a multiple of num_kv_heads")
    return scaled_dot_product_attention(
        q, k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2), mask
    )


@pytest.mark.parametrize(
    "wrong,hint",
    [
        (gqa_with_a_wrong_group, "the heads are grouped wrongly"),
        (gqa_along_keys, "not along the keys"),
    ],
)
def test_grouped_query_attention_learner_mistakes_get_their_hint(wrong, hint):
    status, feedback = status_and_feedback("ex03.grouped_query_attention", wrong)
    assert status == "failed"
    assert hint in feedback, feedback


def test_grouped_query_attention_cases_cover_the_edges():
    cases = get_task("ex03.grouped_query_attention").cases(torch.Generator().manual_seed(0))
    kv = {(c.args[0].shape[1], c.args[1].shape[1]) for c in cases if c.raises is None}
    assert (4, 1) in kv and any(h == k for h, k in kv) and any(1 < k < h for h, k in kv)
    assert any(c.args[0].dtype == torch.float64 for c in cases)
    assert any(c.args[0].shape[0] == 1 for c in cases)
    assert any(c.args[0].shape[2] != c.args[1].shape[2] for c in cases)
    assert any(c.raises is ValueError for c in cases)


def test_reference_grouped_query_attention_is_multi_head_attention_with_repeated_kv():
    from course_lib.llama import GroupedQueryAttention, grouped_query_attention
    from course_lib.multihead import MultiHeadAttention

    gen = torch.Generator().manual_seed(3)
    q = torch.randn(2, 6, 4, 5, generator=gen, dtype=torch.float64)
    k = torch.randn(2, 2, 7, 5, generator=gen, dtype=torch.float64)
    v = torch.randn(2, 2, 7, 5, generator=gen, dtype=torch.float64)
    out, weights = grouped_query_attention(q, k, v)
    repeated = [t[:, [0, 0, 0, 1, 1, 1]] for t in (k, v)]
    want, want_weights = scaled_dot_product_attention(q, *repeated)
    assert torch.allclose(out, want) and torch.allclose(weights, want_weights)
    # num_kv_heads == num_heads: the module is MultiHeadAttention, weight for weight
    torch.manual_seed(0)
    gqa, mha = GroupedQueryAttention(12, 3, 3), MultiHeadAttention(12, 3)
    mha.load_state_dict(gqa.state_dict())
    x = torch.randn(2, 5, 12)
    assert torch.allclose(gqa(x, x, x)[0], mha(x, x, x)[0], atol=1e-6)
    with pytest.raises(ValueError, match="multiple"):
        GroupedQueryAttention(12, 3, 2)


# ---- found by a fresh reader: a wrong answer that passed ------------------------------------


def test_multi_head_attention_that_takes_keys_from_the_query_when_shapes_match_fails():
    # no cross-attention case had n_q == n_k, so this special case passed every check
    from course_lib.grading.tasks import ex03

    class KeysFromQuery(ex03._WrongMultiHeadAttention):
        mistake = ""

        def forward(self, query, key, value, mask=None):
            if query.shape == key.shape:
                key = query
            return super().forward(query, key, value, mask)

    result = check_result("ex03.MultiHeadAttention", KeysFromQuery)
    assert result.status == "failed", result.feedback
    assert "as many keys as queries" in result.feedback, result.feedback


# ---- #33: slips a learner makes, written as a learner would; each gets its own hint ---------


def _split_transposed_first(x, num_heads):
    batch, seq, d_model = x.shape
    if d_model % num_heads:
        raise ValueError("d_model must be divisible by num_heads")
    return x.transpose(1, 2).reshape(batch, num_heads, seq, d_model // num_heads)


class _LearnerMHA(nn.Module):
    """A learner's module; `slip` names the one thing it gets wrong."""

    slip = ""

    def __init__(self, d_model, num_heads, bias=True):
        super().__init__()
        self.num_heads, self.d_head = num_heads, d_model // num_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        if self.slip == "one layer for q, k and v":
            self.q_proj = self.k_proj = self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        if self.slip == "float32 buffer":  # .to(float64) keeps its float32-rounded value
            self.register_buffer(
                "scale", torch.tensor(1 / math.sqrt(self.d_head)), persistent=False
            )

    def split(self, x):
        batch, seq, _ = x.shape
        if self.slip == "split without transpose":
            return x.view(batch, self.num_heads, seq, self.d_head)
        if self.slip == "split by d_head":  # split_heads(x, self.d_head)
            return x.view(batch, seq, self.d_head, self.num_heads).permute(0, 2, 1, 3)
        return x.view(batch, seq, self.num_heads, self.d_head).permute(0, 2, 1, 3)

    def forward(self, query, key, value, mask=None):
        query = query.detach() if self.slip == "query detached" else query  # d12
        if self.slip == "keys and values swapped":
            key, value = value, key
        from_query = self.slip == "keys and values from query"  # as in self-attention
        q, k = self.split(self.q_proj(query)), self.split(self.k_proj(query if from_query else key))
        if self.slip == "keys split by n_q":  # the query's length used for the keys too
            batch, n_q = query.shape[:2]
            k = self.k_proj(key).view(batch, n_q, self.num_heads, self.d_head).transpose(1, 2)
        v = self.v_proj(key if self.slip == "values from key" else query if from_query else value)
        v = self.split(v)
        scores = q @ k.transpose(-1, -2) / self.d_head**0.5
        if self.slip.startswith("float32"):  # an assistant's torch.sqrt(torch.tensor(d_head))
            root = torch.sqrt(torch.tensor(self.d_head))
            scores = q @ k.transpose(-1, -2)
            scores = scores * self.scale if self.slip == "float32 buffer" else scores / root
        if mask is not None:
            if self.slip == "mask always unsqueezed" or (
                mask.dim() == 3 and self.slip != "mask not unsqueezed"
            ):
                mask = mask[:, None]
            if self.slip == "fill 0":
                scores = scores.masked_fill(mask == 0, 0.0)
            elif self.slip != "zeroed after softmax":
                scores = scores.masked_fill(mask == 0, float("-inf"))
        with torch.set_grad_enabled(self.slip != "softmax under no_grad"):
            weights = torch.softmax(scores, dim=-1)
        if mask is not None and self.slip == "zeroed after softmax":
            weights = weights * mask
        heads = weights @ v  # (batch, heads, n_q, d_head)
        batch, n_q = query.shape[:2]
        if self.slip == "merge without transpose":
            merged = heads.reshape(batch, n_q, -1)
        else:
            merged = heads.transpose(1, 2).reshape(batch, n_q, -1)
        output = self.out_proj(merged)
        output = query + output if self.slip == "residual added" else output
        weights = scores if self.slip == "scores returned" else weights
        return (output.detach() if self.slip == "output detached" else output), weights


def _learner_mha(slip):
    return type("MultiHeadAttention", (_LearnerMHA,), {"slip": slip})


def _gqa(slip=""):
    """The right grouped-query attention, or it with the one slip named (or a right variant)."""

    def grouped_query_attention(q, k, v, mask=None):
        num_heads, num_kv_heads = q.shape[1], k.shape[1]
        if num_heads % num_kv_heads:
            raise ValueError("num_heads must be a multiple of num_kv_heads")
        group = {
            "repeated num_kv_heads times": num_kv_heads,
            "group = h / kv": num_heads / num_kv_heads,  # the statement's own '/'
            "group upside down": num_kv_heads // num_heads,
            "int(h / kv)": int(num_heads / num_kv_heads),  # right
        }.get(slip, num_heads // num_kv_heads)
        k = k.repeat(1, group, 1, 1) if slip == "keys tiled" else k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        scores = q @ (k.transpose(1, 2) if slip == "k.transpose(1, 2)" else k.transpose(-2, -1))
        if slip != "no scale":
            d_k = {"scaled by d_v": v.shape[-1], "sqrt(k.shape[-2])": k.shape[-2]}
            scores = scores / math.sqrt(d_k.get(slip, q.shape[-1]))
        if slip == "if mask:" and mask:
            pass
        if mask is not None and slip == "scores + mask":
            scores = scores + mask
        elif mask is not None and slip == "scores[~mask]":
            scores[~mask] = float("-inf")
        elif mask is not None and slip != "mask ignored":
            fill = 0.0 if slip == "fill 0" else float("-inf")
            scores = scores.masked_fill(mask if slip == "mask inverted" else ~mask, fill)
        if slip == "softmax in float32":  # a mixed-precision habit, cast back
            return (weights := scores.float().softmax(-1).to(q.dtype)) @ v, weights
        if slip == "softmax in float32, not cast back":  # float32 weights @ float64 values
            return (weights := scores.float().softmax(-1)) @ v, weights
        weights = scores.softmax(
            dim={"softmax(dim=1)": 1, "softmax over queries": -2}.get(slip, -1)
        )
        if slip == "weights detached":
            return weights.detach() @ v, weights
        return weights @ v, scores if slip == "scores returned" else weights

    return grouped_query_attention


@pytest.mark.parametrize(
    "task_id, learner, words",
    [
        ("ex03.split_heads", _split_transposed_first, "the two steps are in the wrong order"),
        ("ex03.MultiHeadAttention", _learner_mha("split without transpose"), "split by a reshape"),
        ("ex03.MultiHeadAttention", _learner_mha("merge without transpose"), "merged by a reshape"),
        ("ex03.MultiHeadAttention", _learner_mha("fill 0"), "exp(0) = 1"),
        ("ex03.MultiHeadAttention", _learner_mha("zeroed after softmax"), "AFTER the softmax"),
        ("ex03.MultiHeadAttention", _learner_mha("mask not unsqueezed"), "an axis for the heads"),
        ("ex03.MultiHeadAttention", _learner_mha("values from key"), "v_proj(value)"),
        ("ex03.MultiHeadAttention", _learner_mha("mask always unsqueezed"), "already broadcasts"),
        ("ex03.MultiHeadAttention", _learner_mha("keys split by n_q"), "their own length n_k"),
        ("ex03.MultiHeadAttention", _learner_mha("one layer for q, k and v"), "one and the same"),
        (
            "ex03.grouped_query_attention",
            _gqa("repeated num_kv_heads times"),
            "group = num_heads // num_kv_heads times",
        ),
        ("ex03.grouped_query_attention", _gqa("scaled by d_v"), "divided by sqrt(d_v)"),
        ("ex03.grouped_query_attention", _gqa("no scale"), "divide the scores by sqrt"),
        ("ex03.grouped_query_attention", _gqa("mask ignored"), "the mask is ignored"),
        ("ex03.grouped_query_attention", _gqa("mask inverted"), "the other way round"),
        ("ex03.grouped_query_attention", _gqa("fill 0"), "exp(0) = 1"),
    ],
)
def test_a_learners_slip_fails_the_notebook_check_with_its_own_hint(task_id, learner, words):
    result = check_result(task_id, learner)
    assert result.status == "failed" and result.score < result.max_score, result.feedback
    assert words in result.feedback, result.feedback


# ---- second hunt: slips a learner makes, written as a learner would -------------------------


class _HuntMHA(nn.Module):
    """A learner's module; `slip` names the one thing it gets wrong ("" for none)."""

    slip = ""

    def __init__(self, d_model, num_heads, bias=True, dropout=0.1):
        super().__init__()
        self.num_heads, self.d_model, self.d_head = num_heads, d_model, d_model // num_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout if "dropout" in self.slip else 0.0)

    def forward(self, query, key, value, mask=None):
        slip = self.slip
        q = reference_like_split(self.q_proj(query), self.num_heads)
        k_proj = self.q_proj if slip == "k = self.q_proj(key)" else self.k_proj
        k_in = {"k from value": value, "k from query": query}.get(slip, key)
        k = reference_like_split(k_proj(k_in), self.num_heads)
        if slip == "k.view(batch, n_q, heads, -1)":  # the query's length, d_head inferred
            k = k_proj(k_in).view(*query.shape[:2], self.num_heads, -1).transpose(1, 2)
        v_proj = self.k_proj if slip == "v = self.k_proj(value)" else self.v_proj
        v = reference_like_split(v_proj(query if slip == "v from query" else value), self.num_heads)
        k_t = k.transpose(1, 2) if slip == "k.transpose(1, 2)" else k.transpose(-2, -1)
        scale = {
            "d_model // h ** 0.5": self.d_model // self.num_heads**0.5,
            "/ d_head ** -0.5": self.d_head**-0.5,
            "/ d_head": self.d_head,
            "/ sqrt(q.shape[1])": math.sqrt(q.shape[1]),  # exercise 02's 2-D d_k: num_heads
            "/ sqrt(q.shape[2])": math.sqrt(q.shape[2]),  # exercise 02's 3-D d_k: n_q
        }.get(slip, math.sqrt(self.d_head))
        if slip == "/ d_head ** 1/2":
            scale = self.d_head**1 * 2  # how Python reads scores / d_head ** 1/2
        elif slip == "scale = d_head ** 1/2":  # d_head / 2: the root at d_head = 4 only
            scale = self.d_head**1 / 2
        scores = q @ k_t / (1 if slip == "softmax(scores) / sqrt(d_head)" else scale)
        if mask is not None:
            per_example = mask.dim() == 3
            if slip == "per example if mask.shape[0] == batch":
                per_example = mask.shape[0] == query.shape[0]
            mask = mask.unsqueeze(1) if per_example else mask
            if slip == "scores[mask == 0] = -inf":
                scores[mask == 0] = -math.inf
            else:
                scores = scores.masked_fill(~mask, -math.inf)
        weights = scores.softmax(dim=-1)
        if slip == "softmax(scores) / sqrt(d_head)":
            weights = weights / scale
        if slip == "F.dropout without training=":
            weights = F.dropout(weights, 0.1)
        else:
            weights = self.dropout(weights)  # p = 0 without a dropout slip
        merged = (weights @ v).transpose(1, 2).flatten(-2)
        if slip == "transpose(1, 2).view(batch, n_q, d_model)":
            merged = (weights @ v).transpose(1, 2).view(*query.shape)
        if slip == "dropout 0.2 on the output":
            return F.dropout(self.out_proj(merged), 0.2, self.training), weights
        return self.out_proj(merged), weights


@pytest.mark.parametrize(
    "slip, words",
    [
        ("", None),
        ("dropout 0.1 on the weights", "drops values at random (dropout)"),
        ("F.dropout without training=", "unless training=self.training"),
        ("dropout 0.2 on the output", "in training mode either"),
        ("k from value", "k = k_proj(key)"),
        ("v from query", "v = v_proj(value)"),
        ("k.transpose(1, 2)", "transpose its last two axes"),
        ("d_model // h ** 0.5", "** binds tighter"),
        ("/ d_head ** -0.5", "multiplied the scores by sqrt(d_head)"),
        ("scores[mask == 0] = -inf", "boolean indexing does not broadcast"),
        # third hunt: these got 'None of the usual single mistakes' or a bare PyTorch error
        ("k from query", "the keys are projected from `query`"),
        ("k = self.q_proj(key)", "the keys go through q_proj"),
        ("v = self.k_proj(value)", "the values go through k_proj"),
        ("/ d_head", "divide by its square root"),
        ("/ sqrt(q.shape[1])", "d_k from shape[1]"),
        ("/ sqrt(q.shape[2])", "d_k from shape[2]"),
        ("/ d_head ** 1/2", "** binds tighter than /"),
        ("scale = d_head ** 1/2", "** binds tighter than /"),  # was 'divide ... by sqrt(d_head)'
        # fifth hunt: full marks before, as no 2-D mask had n_q == batch
        ("per example if mask.shape[0] == batch", "tell it by mask.dim() == 3"),
        ("softmax(scores) / sqrt(d_head)", "after the softmax, so they no longer sum to 1"),
        ("k.view(batch, n_q, heads, -1)", "split each tensor by its own shape"),  # PyTorch's error
        ("transpose(1, 2).view(batch, n_q, d_model)", "merged with .view"),  # PyTorch's error
    ],
)
def test_a_second_hunt_slip_fails_the_notebook_check_with_its_own_hint(slip, words):
    # dropout passed every eval-mode check; the others got no hint or a bare PyTorch error
    result = check_result("ex03.MultiHeadAttention", type("MHA", (_HuntMHA,), {"slip": slip}))
    if words is None:
        assert result.status == "passed", result.feedback
        return
    assert result.status == "failed", result.feedback
    assert words in result.feedback, result.feedback


class _HeadByHead(EinsumMultiHeadAttention):
    """A learner's module that attends head by head, and stacks the heads' maps on dim=0
    (the same projections as the einsum alternative above, its own forward)."""

    def forward(self, query, key, value, mask=None):
        q, k, v = self.q_proj(query), self.k_proj(key), self.v_proj(value)
        outputs, maps = [], []
        for h in range(self.num_heads):
            part = slice(h * self.d_head, (h + 1) * self.d_head)
            scores = q[..., part] @ k[..., part].transpose(-2, -1) / math.sqrt(self.d_head)
            if mask is not None:
                scores = scores.masked_fill(~mask, -math.inf)
            maps.append(scores.softmax(dim=-1))
            outputs.append(maps[-1] @ v[..., part])
        return self.out_proj(torch.cat(outputs, dim=-1)), torch.stack(maps)  # dim=0


def test_weights_stacked_heads_first_are_told_so_where_batch_equals_heads():
    # the first case has batch = num_heads = 2, so the shapes agreed: 'None of the usual'
    result = check_result("ex03.MultiHeadAttention", _HeadByHead)
    assert result.status == "failed", result.feedback
    assert "stack the heads' maps on dim=1" in result.feedback, result.feedback


def test_grouped_query_attention_that_forgets_to_repeat_v_is_told_so():
    # it was told 'not along the keys', a mistake it did not make
    def grouped_query_attention(q, k, v, mask=None):
        if q.shape[1] % k.shape[1]:
            raise ValueError("num_heads must be a multiple of num_kv_heads")
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)  # v forgotten
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, -math.inf)
        weights = scores.softmax(dim=-1)
        return weights @ v, weights

    result = check_result("ex03.grouped_query_attention", grouped_query_attention)
    assert result.status == "failed" and "a v not repeated" in result.feedback, result.feedback


def test_grouped_query_attention_head_by_head_with_h_over_num_kv_heads_is_told_so():
    # hunt 3: 'index 1 is out of bounds for dimension 1 with size 1', and no hint
    def grouped_query_attention(q, k, v, mask=None):
        num_heads, num_kv_heads = q.shape[1], k.shape[1]
        if num_heads % num_kv_heads:
            raise ValueError("num_heads must be a multiple of num_kv_heads")
        outputs, maps = [], []
        for h in range(num_heads):
            kv = h // num_kv_heads  # the slip: h // group
            scores = q[:, h] @ k[:, kv].transpose(-2, -1) / math.sqrt(q.shape[-1])
            if mask is not None:
                full = mask.expand(q.shape[0], num_heads, q.shape[2], k.shape[2])
                scores = scores.masked_fill(~full[:, h], -math.inf)
            maps.append(scores.softmax(dim=-1))
            outputs.append(maps[-1] @ v[:, kv])
        return torch.stack(outputs, dim=1), torch.stack(maps, dim=1)

    result = check_result("ex03.grouped_query_attention", grouped_query_attention)
    assert result.status == "failed", result.feedback
    assert "h // num_kv_heads is that only when" in result.feedback, result.feedback


def split_with_a_bare_error(x, num_heads):  # right, but its ValueError says nothing
    batch, seq, d_model = x.shape
    if d_model % num_heads:
        raise ValueError
    return x.reshape(batch, seq, num_heads, d_model // num_heads).transpose(1, 2)


def test_a_value_error_without_a_message_fails_its_case():
    result = check_result("ex03.split_heads", split_with_a_bare_error)
    assert result.status == "failed" and result.passed == result.total - 1, result.feedback
    assert "your ValueError carries no message: say what was expected" in result.feedback


# ---- fourth hunt (a fresh reader) --------------------------------------------------------


def _renormalised_attention(q, k, v, keep):
    weights = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(dim=-1)
    if keep is not None:  # "zero the blocked keys, then make each row sum to 1 again"
        weights = weights * keep
        weights = weights / weights.sum(-1, keepdim=True)
    return weights @ v, weights


class _FourProjections(nn.Module):
    """A learner's MultiHeadAttention __init__: the four projections, named as the task asks."""

    def __init__(self, d_model, num_heads, bias=True):
        super().__init__()
        self.num_heads = num_heads
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            setattr(self, name, nn.Linear(d_model, d_model, bias=bias))


class RenormalisingMultiHeadAttention(_FourProjections):
    def forward(self, query, key, value, mask=None):
        batch, n_q, d_model = query.shape
        q, k, v = (
            proj(t).view(batch, -1, self.num_heads, d_model // self.num_heads).transpose(1, 2)
            for proj, t in ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value))
        )
        keep = mask.unsqueeze(1) if mask is not None and mask.dim() == 3 else mask
        heads, weights = _renormalised_attention(q, k, v, keep)
        return self.out_proj(heads.transpose(1, 2).reshape(batch, n_q, d_model)), weights


def gqa_renormalised(q, k, v, mask=None):
    if q.shape[1] % k.shape[1]:
        raise ValueError("num_heads must be a multiple of num_kv_heads")
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    return _renormalised_attention(q, k, v, mask)


@pytest.mark.parametrize(
    "task_id, learner",
    [
        ("ex03.MultiHeadAttention", RenormalisingMultiHeadAttention),
        ("ex03.grouped_query_attention", gqa_renormalised),
    ],
)
def test_zeroing_after_the_softmax_and_rescaling_fails(task_id, learner):
    result = check_result(task_id, learner)
    assert result.status == "failed", result.feedback
    assert "underflow to 0 before you rescale" in result.feedback, result.feedback


def gqa_with_a_slip(q, k, v, mask=None, *, slip):
    if q.shape[1] % k.shape[1]:
        raise ValueError("num_heads must be a multiple of num_kv_heads")
    group = q.shape[1] // k.shape[1]
    dim = 0 if slip == "repeated on dim=0" else 1
    k = k.repeat_interleave(group, dim=dim)
    v = v.repeat(1, group, 1, 1) if slip == "v tiled" else v.repeat_interleave(group, dim=dim)
    d_k = {"shape[1]": q.shape[1], "shape[2]": q.shape[2], "num_heads": q.shape[1]}.get(
        slip, q.shape[-1]
    )
    after = slip == "scaled after the softmax"
    root = torch.tensor(d_k).sqrt() if slip == "float32 scale" else math.sqrt(d_k)
    scores = q @ k.transpose(-2, -1) / (1 if after else root)
    if mask is not None:
        axes = {"mask.unsqueeze(1) as in MHA": (3,), "unsqueeze(1) unless 4-D": (2, 3)}
        if slip == "unsqueeze(1)" or mask.dim() in axes.get(slip, ()):
            mask = mask.unsqueeze(1)
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    weights = weights / math.sqrt(d_k) if after else weights
    return weights @ v, weights


@pytest.mark.parametrize(
    "slip, words",
    [
        ("v tiled", "k and v are repeated differently"),
        # fifth hunt: MultiHeadAttention's 3-D mask code copied had full marks (no 3-D mask case)
        ("mask.unsqueeze(1) as in MHA", "one per query head"),
        # fifth hunt: 'None of the usual single mistakes' and a bare PyTorch error before
        ("scaled after the softmax", "after the softmax, so they no longer sum to 1"),
        ("repeated on dim=0", "dim=0 repeats the batch"),
        ("shape[1]", "d_k from shape[1]"),
        ("shape[2]", "d_k from shape[2]"),
        ("num_heads", "or divided by sqrt(num_heads)"),  # ex02's text named only shape[1]
        # sixth hunt: full marks (the float64 case's d_head 4 has an exact float32 root)
        ("float32 scale", "your scale is a float32 tensor"),
        ("unsqueeze(1)", "whatever its number of axes"),  # a bare shape message before
        # eighth round: 'each kv head is repeated num_kv_heads times' before (a row's error)
        ("unsqueeze(1) unless 4-D", "whatever its number of axes"),
    ],
)
def test_gqa_slips_that_got_no_hint(slip, words):
    def learner(q, k, v, mask=None):
        return gqa_with_a_slip(q, k, v, mask, slip=slip)

    result = check_result("ex03.grouped_query_attention", learner)
    assert result.status == "failed" and words in result.feedback, result.feedback


class AttentionWithWeightsByHand(_FourProjections):
    """Exercise 02's x @ w_q carried over to nn.Linear's weights, (out, in): not transposed."""

    def project(self, layer, x):
        return x @ layer.weight + (0 if layer.bias is None else layer.bias)

    def forward(self, query, key, value, mask=None):
        batch, n_q, d_model = query.shape
        q, k, v = (
            self.project(proj, t).view(batch, -1, self.num_heads, d_model // self.num_heads)
            for proj, t in ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value))
        )
        keep = mask.unsqueeze(1) if mask is not None and mask.dim() == 3 else mask
        heads, weights = scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), keep)
        merged = heads.transpose(1, 2).reshape(batch, n_q, d_model)
        return self.project(self.out_proj, merged), weights


def test_nn_linear_weights_used_untransposed_get_their_hint():
    result = check_result("ex03.MultiHeadAttention", AttentionWithWeightsByHand)
    assert result.status == "failed", result.feedback
    assert "nn.Linear's weight is (out_features, in_features)" in result.feedback, result.feedback


class HeadByHeadWithStridedFeatures(_FourProjections):
    """One head at a time, head h taking every num_heads-th feature, the heads concatenated."""

    def forward(self, query, key, value, mask=None):
        q, k, v = self.q_proj(query), self.k_proj(key), self.v_proj(value)
        outputs, maps = [], []
        for h in range(self.num_heads):  # 3-D scores: the mask as it is
            pick = slice(h, None, self.num_heads)  # the slip: h*d_head:(h+1)*d_head
            out, weights = scaled_dot_product_attention(
                q[..., pick], k[..., pick], v[..., pick], mask
            )
            outputs.append(out)
            maps.append(weights)
        return self.out_proj(torch.cat(outputs, dim=-1)), torch.stack(maps, dim=1)


def test_head_by_head_with_strided_features_gets_its_hint():
    result = check_result("ex03.MultiHeadAttention", HeadByHeadWithStridedFeatures)
    assert result.status == "failed", result.feedback
    assert "you gave it every num_heads-th feature" in result.feedback, result.feedback


def merge_with_view(x):
    batch, num_heads, seq, d_head = x.shape
    return x.transpose(1, 2).view(batch, seq, num_heads * d_head)  # the slip: reshape


def test_merge_heads_with_view_gets_its_hint():
    # fifth hunt: PyTorch's bare error, though lesson 03 shows this very slip
    result = check_result("ex03.merge_heads", merge_with_view)
    assert result.status == "failed" and "not contiguous" in result.feedback, result.feedback


@pytest.mark.parametrize(
    "slip, words",
    [  # sixth hunt: 'None of the usual single mistakes' before
        ("keys and values from query", "the keys and values are projected from `query`"),
        ("float32 scale", "your scale is a float32 tensor"),
        ("float32 buffer", "right only to float32's digits"),
        ("output detached", "your output carries no gradients"),  # full marks (run in no_grad)
    ],
)
def test_a_sixth_hunt_slip_is_named(slip, words):
    result = check_result("ex03.MultiHeadAttention", _learner_mha(slip))
    assert result.status == "failed" and words in result.feedback, result.feedback


class MultiHeadAttentionWithABuffer(_LearnerMHA):
    """Right, with a persistent buffer of its own (a causal mask kept for later, as GPTs do)."""

    def __init__(self, d_model, num_heads, bias=True):
        super().__init__(d_model, num_heads, bias)
        self.register_buffer("causal", torch.ones(8, 8, dtype=torch.bool).tril())


def test_a_buffer_of_the_learners_own_is_named_a_buffer():
    # sixth hunt: it was told "parameters the task does not ask for: causal"; exercise 09 loads
    # GPT-2 strictly into the learner's model, so the buffer must stay out of the state dict
    result = check_result("ex03.MultiHeadAttention", MultiHeadAttentionWithABuffer)
    assert result.status == "failed", result.feedback
    assert "buffers the task does not ask for" in result.feedback
    assert "persistent=False" in result.feedback


def test_a_softmax_under_no_grad_is_named():
    # F11 hunt: full marks before: the output has a grad_fn (through v_proj and out_proj), yet
    # q_proj and k_proj never get a gradient, so the attention of exercise 09's GPT never learns
    result = check_result("ex03.MultiHeadAttention", _learner_mha("softmax under no_grad"))
    assert result.status == "failed", result.feedback
    assert "no gradients back to q_proj and k_proj" in result.feedback, result.feedback


@pytest.mark.parametrize(
    "slip, words",
    [  # F11 hunt: 'None of the usual single mistakes' before
        ("keys and values swapped", "the keys are projected from `value` and the values from"),
        ("split by d_head", "you passed d_head"),
        ("residual added", "the residual connection belongs to the layer around it"),
        ("scores returned", "the weights you return are the scores before the softmax"),
    ],
)
def test_an_f11_multi_head_slip_is_named(slip, words):
    result = check_result("ex03.MultiHeadAttention", _learner_mha(slip))
    assert result.status == "failed" and words in result.feedback, result.feedback


@pytest.mark.parametrize(
    "slip, words",
    [  # F11 hunt: a bare PyTorch error, 'None of the usual', or (`if mask:`) the mask_reshaped
        # hint about unsqueeze(1), a slip it did not make
        ("group = h / kv", "group = num_heads // num_kv_heads"),  # the statement's own '/'
        ("keys tiled", "k.repeat(1, group, 1, 1) tiles the kv heads"),
        ("k.transpose(1, 2)", "transpose its last two axes"),
        ("scores[~mask]", "boolean indexing does not broadcast"),
        ("softmax over queries", "not dim=-2 (the queries)"),
        ("if mask:", "test `if t is not None:`"),
    ],
)
def test_an_f11_grouped_query_slip_is_named(slip, words):
    result = check_result("ex03.grouped_query_attention", _gqa(slip))
    assert result.status == "failed" and words in result.feedback, result.feedback


def test_merge_heads_with_the_last_two_axes_transposed_is_named():
    # F11 hunt: x.transpose(-2, -1), attention's habit, got 'None of the usual single mistakes'
    def merge_heads(x):
        batch, num_heads, seq, d_head = x.shape
        return x.transpose(-2, -1).reshape(batch, seq, num_heads * d_head)

    result = check_result("ex03.merge_heads", merge_heads)
    assert result.status == "failed" and "transposed the last two axes" in result.feedback


class HeadsFoldedIntoTheBatch(_FourProjections):
    """torch.bmm on (batch * num_heads, n, d_head), a 3-D mask tiled with .repeat."""

    def forward(self, query, key, value, mask=None):
        (batch, n_q, d_model), n_k, h = query.shape, key.shape[1], self.num_heads
        q, k, v = (
            proj(t)
            .view(batch, -1, h, d_model // h)
            .transpose(1, 2)
            .reshape(batch * h, -1, d_model // h)
            for proj, t in ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value))
        )
        scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(d_model // h)
        if mask is not None:
            mask = mask.repeat(h, 1, 1) if mask.dim() == 3 else mask  # the slip: interleave
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = scores.softmax(dim=-1)
        heads = torch.bmm(weights, v).view(batch, h, n_q, -1)
        merged = heads.transpose(1, 2).reshape(batch, n_q, d_model)
        return self.out_proj(merged), weights.view(batch, h, n_q, n_k)


def test_a_mask_tiled_over_heads_folded_into_the_batch_is_named():
    # F11 hunt: 'None of the usual single mistakes' before; lesson 03 repeat_interleaves it
    result = check_result("ex03.MultiHeadAttention", HeadsFoldedIntoTheBatch)
    assert result.status == "failed", result.feedback
    assert "repeat_interleave(num_heads, dim=0)" in result.feedback, result.feedback


@pytest.mark.parametrize("seed", [13, 17, 18, 42])
def test_a_float32_scale_fails_under_every_hidden_seed(monkeypatch, seed):
    # F11 hunt: full marks under these hidden seeds, where its float64 cases (d_head 2 both)
    # happened to stay within float64's tolerance; a float64 case with d_head 6 now fails it
    monkeypatch.setattr(course_lib.grading, "NOTEBOOK_SEED", seed)
    result = check_result("ex03.MultiHeadAttention", _learner_mha("float32 scale"))
    assert result.status == "failed", result.feedback
    assert "your scale is a float32 tensor" in result.feedback, result.feedback


# ---- hunt R12: rarer slips that got 'None of the usual single mistakes' ----------------------


class _R12MHA(nn.Module):
    """A learner's multi-head attention, split by hand; `slip` names its one mistake."""

    slip = ""

    def __init__(self, d_model, num_heads, bias=True):
        super().__init__()
        self.num_heads = num_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, query, key, value, mask=None):
        batch, n_q, d_model = query.shape
        h = self.num_heads
        q, k, v = (
            proj(t).view(batch, -1, h, d_model // h).transpose(1, 2)
            for proj, t in ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value))
        )
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            mask = mask.unsqueeze(1) if mask.dim() == 3 else mask
            if self.slip == "scores + mask":  # a bool mask added as if it were additive
                scores = scores + mask
            else:
                scores = scores.masked_fill(~mask, float("-inf"))
        weights = scores.softmax(dim=1 if self.slip == "softmax(dim=1)" else -1)
        merged = (weights @ v).transpose(1, 2).reshape(batch, n_q, d_model)
        if self.slip == "merged @ W + b":  # out_proj by hand, its weight not transposed
            return merged @ self.out_proj.weight + self.out_proj.bias, weights
        return self.out_proj(merged), weights


# ---- d12: answers whose values are right but whose gradient is cut ----------------------------


@pytest.mark.parametrize(
    "task_id, learner, words",
    [
        (
            "ex03.MultiHeadAttention",
            type("MultiHeadAttention", (_R12MHA,), {"slip": "scores + mask"}),
            "a True/False mask is not an additive one",
        ),
        (
            "ex03.MultiHeadAttention",
            type("MultiHeadAttention", (_R12MHA,), {"slip": "softmax(dim=1)"}),
            "the softmax runs over dim=1, the heads",
        ),
        (
            "ex03.MultiHeadAttention",
            type("MultiHeadAttention", (_R12MHA,), {"slip": "merged @ W + b"}),
            "applied as x @ weight.T + bias",
        ),
        ("ex03.grouped_query_attention", _gqa("scores + mask"), "not an additive one"),
        ("ex03.grouped_query_attention", _gqa("softmax(dim=1)"), "over dim=1, the heads"),
        # R12, five more slips each: an axis
        ("ex03.grouped_query_attention", _gqa("sqrt(k.shape[-2])"), "the number of keys"),
    ],
)
def test_an_r12_slip_is_named(task_id, learner, words):
    result = check_result(task_id, learner)
    assert result.status == "failed" and words in result.feedback, result.feedback
    assert "None of the usual" not in result.feedback, result.feedback


@pytest.mark.parametrize(
    "task_id, learner",
    [("ex03.MultiHeadAttention", _R12MHA), ("ex03.grouped_query_attention", _gqa(""))],
)
def test_the_r12_learners_pass_without_their_slip(task_id, learner):
    result = check_result(task_id, learner)
    assert result.status == "passed", result.feedback


def test_d12_a_cut_gradient_fails_where_the_values_alone_passed():
    # full marks before: the projections were checked, never the input's gradient (a detached
    # query starves every layer below the attention); the GQA function's gradients not at all
    assert check_result("ex03.MultiHeadAttention", _learner_mha("")).score == 1.0
    result = check_result("ex03.MultiHeadAttention", _learner_mha("query detached"))
    assert result.status == "failed", result.feedback
    assert "the input query" in result.feedback, result.feedback  # self-attention: not "no"
    assert check_result("ex03.grouped_query_attention", _gqa()).score == 1.0
    result = check_result("ex03.grouped_query_attention", _gqa("weights detached"))
    assert result.status == "failed" and "no gradient reaches q, k" in result.feedback


# ---- f03: split/merge gradients, and two GQA slips without a hint -----------------------------


def _f03_split(slip=""):
    def split_heads(x, num_heads):
        batch, seq, d_model = x.shape
        if d_model % num_heads:
            raise ValueError("d_model must be divisible by num_heads")
        x = x.detach() if slip == "detached" else x
        heads = x.reshape(batch, seq, num_heads, d_model // num_heads)
        return heads.transpose_(1, 2) if slip == "transpose_" else heads.transpose(1, 2)

    return split_heads


def _f03_merge(slip=""):
    def merge_heads(x):
        batch, num_heads, seq, d_head = x.shape
        x = x.detach() if slip == "detached" else x
        return x.transpose(1, 2).reshape(batch, seq, num_heads * d_head)

    return merge_heads


def test_f03_a_detached_split_or_merge_fails_its_own_check():
    # full marks before (6/6, 5/5): only the values were judged, yet MultiHeadAttention and the
    # GPT of exercise 09 train through both, and a split that cuts the graph starves every layer
    for task_id, learner in [
        ("ex03.split_heads", _f03_split("detached")),
        ("ex03.merge_heads", _f03_merge("detached")),
    ]:
        result = check_result(task_id, learner)
        assert result.status == "failed", result.feedback
        assert "no gradient reaches x" in result.feedback, result.feedback


@pytest.mark.parametrize("learner", [_f03_split(""), _f03_split("transpose_")])
def test_f03_an_in_place_transpose_of_the_reshaped_view_still_passes(learner):
    # right where split_heads runs (x is a projection's output); on a leaf x it would raise
    assert status_and_feedback("ex03.split_heads", learner)[0] == "passed"


@pytest.mark.parametrize(
    "slip, words",
    [
        ("scores returned", "the weights you return are the scores before the softmax"),
        ("softmax in float32", "right only to float32's digits"),
        ("softmax in float32, not cast back", "part of your computation is float32"),
    ],
)
def test_f03_a_gqa_slip_that_got_no_hint_is_named(slip, words):
    # before: 'None of the usual single mistakes' for the first two, the bare crash for the last
    status, feedback = status_and_feedback("ex03.grouped_query_attention", _gqa(slip))
    assert status == "failed" and words in feedback, feedback
    assert "None of the usual" not in feedback, feedback


class _F03MHA(nn.Module):
    slip = ""

    def __init__(self, d_model, num_heads, bias=True):
        super().__init__()
        self.num_heads, self.d_head = num_heads, d_model // num_heads
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            setattr(self, name, nn.Linear(d_model, d_model, bias=bias))

    def forward(self, query, key, value, mask=None):
        q, k, v = (
            layer(x).unflatten(-1, (self.num_heads, self.d_head)).transpose(1, 2)
            for layer, x in ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value))
        )
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if mask is not None:
            if mask.dim() == 3:  # the heads' axis, or (the slips) another one
                mask = mask.unsqueeze(
                    {"mask.unsqueeze(2)": 2, "mask.unsqueeze(-1)": -1}.get(self.slip, 1)
                )
            scores = scores.masked_fill(~mask, -math.inf)
        # the slip: float32 weights @ float64 values
        weights = F.softmax(scores.float() if self.slip == "softmax in float32" else scores, -1)
        heads = (weights @ v).transpose(1, 2)
        return self.out_proj(heads.reshape(*heads.shape[:2], -1)), weights


@pytest.mark.parametrize(
    "slip, words",
    [
        ("softmax in float32", "part of your computation is float32"),
        ("mask.unsqueeze(2)", "must stand for the heads, axis 1"),
        ("mask.unsqueeze(-1)", "must stand for the heads, axis 1"),
    ],
)
def test_f03_mha_slip_that_crashed_without_a_hint_is_named(slip, words):
    # before: PyTorch's bare error ('expected scalar type Float but found Double', a broadcast
    # error) and a traceback tip; the right module (no slip) passes
    assert status_and_feedback("ex03.MultiHeadAttention", _F03MHA)[0] == "passed"
    learner = type("MultiHeadAttention", (_F03MHA,), {"slip": slip})
    status, feedback = status_and_feedback("ex03.MultiHeadAttention", learner)
    assert status == "failed" and words in feedback, feedback


# ---- L14: merge_heads by transpose(0, 2); the group of grouped-query attention upside down ---


def merge_heads_transposing_0_2(x):
    batch, num_heads, seq, d_head = x.shape
    return x.transpose(0, 2).reshape(batch, seq, num_heads * d_head)  # the slip: 0, not 1


def _graded_under(task_id, impl, seed):
    task = get_task(task_id)
    cases = task.cases(torch.Generator().manual_seed(seed))
    return judge(task, cases, run_cases(task, impl, cases))


@pytest.mark.parametrize(
    ("task_id", "impl", "hint"),
    [
        ("ex03.merge_heads", merge_heads_transposing_0_2, "transpose(0, 2) swaps the batch"),
        (
            "ex03.grouped_query_attention",
            _gqa("group upside down"),
            "num_kv_heads // num_heads is 0",
        ),
    ],
    ids=["merge transpose(0, 2)", "group upside down"],
)
def test_l14_slips_are_named_and_fail_under_every_seed(task_id, impl, hint):
    # before: 'None of the usual single mistakes' / a bare RuntimeError about a size 0
    result = check_result(task_id, impl)
    assert result.status == "failed" and hint in result.feedback, result.feedback
    for seed in (1, 2, 3, 4, 5):
        graded = _graded_under(task_id, impl, seed)
        assert graded.status == "failed" and hint in graded.feedback, (seed, graded.feedback)


@pytest.mark.parametrize(
    ("task_id", "impl"),
    [
        ("ex03.merge_heads", lambda x: x.permute(0, 2, 1, 3).flatten(2)),
        ("ex03.merge_heads", lambda x: torch.cat(x.unbind(1), dim=-1)),
        ("ex03.merge_heads", lambda x: x.transpose(-3, -2).contiguous().view(*x.shape[::2], -1)),
        ("ex03.grouped_query_attention", _gqa("")),
        ("ex03.grouped_query_attention", _gqa("int(h / kv)")),
    ],
    ids=["permute flatten", "cat of heads", "view of contiguous", "gqa", "int(h / kv)"],
)
def test_l14_right_variants_keep_full_marks(task_id, impl):
    for seed in (0, 1, 2, 3, 4, 5):
        graded = _graded_under(task_id, impl, seed)
        assert graded.status == "passed", (seed, graded.feedback)


# ---- F11 (f3): state kept between calls; two steps in the other order; grouping -------------

_KEPT_D_HEAD = {}


def split_heads_with_d_head_kept_by_num_heads(x, num_heads):
    batch, seq, d_model = x.shape
    if d_model % num_heads:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    d_head = _KEPT_D_HEAD.setdefault(num_heads, d_model // num_heads)  # the slip: a cache
    return x.reshape(batch, seq, num_heads, d_head).transpose(1, 2)


_KEPT_SHAPE = {}


def split_heads_with_shape_kept_by_x_shape(x, num_heads):
    batch, seq, d_model = x.shape
    if d_model % num_heads:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    shape = _KEPT_SHAPE.setdefault(tuple(x.shape), (batch, seq, num_heads, d_model // num_heads))
    return x.reshape(shape).transpose(1, 2)


@pytest.mark.parametrize(
    "impl",
    [split_heads_with_d_head_kept_by_num_heads, split_heads_with_shape_kept_by_x_shape],
    ids=["d_head cached by num_heads", "shape cached by x.shape"],
)
def test_f3_a_split_that_keeps_a_size_between_calls_fails_under_every_seed(impl):
    # before: full marks, in the notebook and under every seed (no case asked the same
    # num_heads or the same x shape twice with another d_head)
    for seed in (None, 1, 2, 3, 4, 5):
        (_KEPT_D_HEAD if impl is split_heads_with_d_head_kept_by_num_heads else _KEPT_SHAPE).clear()
        graded = check_result("ex03.split_heads", impl) if seed is None else None
        graded = graded or _graded_under("ex03.split_heads", impl, seed)
        assert graded.status == "failed", (seed, graded.feedback)
        assert "kept from an earlier call" in graded.feedback, graded.feedback


def split_heads_d_head_before_seq(x, num_heads):
    batch, seq, d_model = x.shape
    if d_model % num_heads:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    # the slip: (batch, heads, d_head, seq), then the last two axes swapped
    return x.view(batch, num_heads, d_model // num_heads, seq).transpose(2, 3)


def merge_heads_reshape_first(x):
    batch, num_heads, seq, d_head = x.shape
    # the slip: split_heads' steps in split_heads' order
    return x.reshape(batch, seq, num_heads, d_head).transpose(1, 2).reshape(batch, seq, -1)


def merge_heads_transposing_0_1(x):
    batch, num_heads, seq, d_head = x.shape
    return x.transpose(0, 1).reshape(batch, seq, num_heads * d_head)  # the slip: 0, not 2


@pytest.mark.parametrize(
    ("task_id", "impl", "hint"),
    [
        ("ex03.split_heads", split_heads_d_head_before_seq, "(batch, num_heads, d_head, seq)"),
        ("ex03.merge_heads", merge_heads_reshape_first, "in the same order"),
        ("ex03.merge_heads", merge_heads_transposing_0_1, "transpose(0, 1) swaps the batch"),
    ],
    ids=["split (b, h, d_head, seq)", "merge reshape first", "merge transpose(0, 1)"],
)
def test_f3_a_step_order_or_axis_slip_is_named_under_every_seed(task_id, impl, hint):
    # before: 'None of the usual single mistakes'
    result = check_result(task_id, impl)
    assert result.status == "failed" and hint in result.feedback, result.feedback
    for seed in (1, 2, 3):
        graded = _graded_under(task_id, impl, seed)
        assert graded.status == "failed" and hint in graded.feedback, (seed, graded.feedback)


class _F3MHA(_F03MHA):
    """Lesson 03's module with one slip of the F11 hunt (f3), named by `slip`."""

    def forward(self, query, key, value, mask=None):
        batch, n_q, d_model = query.shape
        h, d_head = self.num_heads, self.d_head

        def split(x):
            if self.slip == "split (b, h, d_head, seq)":
                return x.reshape(batch, h, d_head, x.shape[1]).transpose(2, 3)
            return x.reshape(batch, x.shape[1], h, d_head).transpose(1, 2)

        q, k, v = split(self.q_proj(query)), split(self.k_proj(key)), split(self.v_proj(value))
        if mask is not None and self.slip == "mask kept":  # built once, at the first call
            mask = self.__dict__.setdefault("first_mask", mask)
        if mask is not None and mask.dim() == 3:
            mask = mask.unsqueeze(1)
        scale = d_model / h**0.5 if self.slip == "d_model / h ** 0.5" else math.sqrt(d_head)
        if self.slip == "query.shape[1] // h":  # d_head from the length, not d_model
            scale = math.sqrt(query.shape[1] // h)
        scores = q @ k.transpose(-2, -1) / scale
        after = self.slip == "filled after softmax"  # the two steps swapped
        if mask is not None and not after:
            scores = scores.masked_fill(~mask, -math.inf)
        weights = scores.softmax(-1)
        if mask is not None and after:
            weights = weights.masked_fill(~mask, -math.inf)
        heads = weights @ v  # (batch, h, n_q, d_head)
        if self.slip == "merge reshape first":
            merged = heads.reshape(batch, n_q, h, d_head).transpose(1, 2).reshape(batch, n_q, -1)
        else:
            merged = heads.transpose(1, 2).reshape(batch, n_q, -1)
        return self.out_proj(merged), weights


@pytest.mark.parametrize(
    "slip, words",
    [
        ("", None),
        ("split (b, h, d_head, seq)", "(batch, num_heads, d_head, seq)"),
        ("merge reshape first", "merged in split_heads' order"),
        ("mask kept", "kept the mask of an earlier call"),
        ("d_model / h ** 0.5", "** binds tighter than /"),
        ("query.shape[1] // h", "shape[1] of the unsplit inputs is their length"),
        ("filled after softmax", "with -inf AFTER the softmax"),
    ],
)
def test_f3_mha_slip_is_named(slip, words):
    # before: 'None of the usual single mistakes' for each slip (query.shape[1] // h: the hint
    # of sqrt(num_heads), which it equals on the first case, alone; filled after softmax: 'contains
    # NaN' and no hint); no slip: full marks
    learner = type("MultiHeadAttention", (_F3MHA,), {"slip": slip})
    status, feedback = status_and_feedback("ex03.MultiHeadAttention", learner)
    if words is None:
        assert status == "passed", feedback
    else:
        assert status == "failed" and words in feedback, feedback


def gqa_q_and_k_each_scaled(q, k, v, mask=None):
    num_heads, num_kv_heads = q.shape[1], k.shape[1]
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads={num_heads} is not a multiple of num_kv_heads={num_kv_heads}")
    group = num_heads // num_kv_heads
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    root = math.sqrt(q.shape[-1])
    scores = (q / root) @ (k / root).transpose(-2, -1)  # the slip: scaled twice, by d_head
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    weights = scores.softmax(-1)
    return weights @ v, weights


def test_f3_gqa_scores_divided_by_d_head_are_named():
    # before: 'None of the usual single mistakes' (MultiHeadAttention named it, this task not)
    result = check_result("ex03.grouped_query_attention", gqa_q_and_k_each_scaled)
    assert result.status == "failed" and "divided the scores by d_head" in result.feedback, (
        result.feedback
    )


def gqa_filled_after_softmax(q, k, v, mask=None):
    num_heads, num_kv_heads = q.shape[1], k.shape[1]
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads={num_heads} is not a multiple of num_kv_heads={num_kv_heads}")
    group = num_heads // num_kv_heads
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    weights = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(-1)
    if mask is not None:  # the slip: the mask after the softmax
        weights = weights.masked_fill(~mask, -math.inf)
    return weights @ v, weights


def test_f3_gqa_mask_filled_after_the_softmax_is_named():
    # before: 'your result[0] contains NaN where the expected result has none', no hint
    result = check_result("ex03.grouped_query_attention", gqa_filled_after_softmax)
    assert result.status == "failed" and "AFTER the softmax" in result.feedback, result.feedback


# ---- HUNT17 (h3): grouped-query attention's check read backwards; a group, an index table or
# an expand that only the first, multi-query case allows ---------------------------------------


def _h3_gqa(slip, kept):
    def grouped_query_attention(q, k, v, mask=None):
        num_heads, num_kv_heads = q.shape[1], k.shape[1]
        bad = num_kv_heads % num_heads if slip == "kv % heads" else num_heads % num_kv_heads
        if bad:
            raise ValueError(f"num_heads={num_heads}, num_kv_heads={num_kv_heads}")
        group = num_heads // num_kv_heads
        if slip == "group kept":  # a cache keyed by num_heads: the first case's group
            group = kept.setdefault(num_heads, group)
        if slip == "index kept":  # an index table keyed by num_heads: the first case's
            index = kept.setdefault(num_heads, torch.arange(num_heads) // group)
            k, v = k[:, index], v[:, index]
        elif slip == "expand":  # works where the kv axis has size 1 only
            k, v = k.expand(-1, num_heads, -1, -1), v.expand(-1, num_heads, -1, -1)
        else:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, -math.inf)
        weights = scores.softmax(-1)
        return weights @ v, weights

    return grouped_query_attention


@pytest.mark.parametrize(
    "slip, words",
    [
        ("", None),
        ("kv % heads", "raise the ValueError only when num_heads % num_kv_heads != 0"),
        ("group kept", "the group of the multi-query case"),
        ("index kept", "every query head read kv head 0"),
        ("expand", "only repeats an axis of size 1"),
    ],
)
def test_h3_gqa_slip_is_named_under_every_seed(slip, words):
    # before: 'your code raised ValueError' with no hint (kv % heads), PyTorch's bare size error
    # and a traceback tip (group kept, expand), 'None of the usual single mistakes' (index kept)
    for seed in (None, 1, 2, 3):
        learner = _h3_gqa(slip, {})  # a fresh cache for each grading, as in a fresh kernel
        if seed is None:
            result = check_result("ex03.grouped_query_attention", learner)
        else:
            result = _graded_under("ex03.grouped_query_attention", learner, seed)
        if words is None:
            assert result.status == "passed", (seed, result.feedback)
        else:
            assert result.status == "failed" and words in result.feedback, (seed, result.feedback)


def test_h3_a_gqa_value_error_from_unpacking_gets_no_check_hint():
    def grouped_query_attention(q, k, v, mask=None):
        batch, heads, n_q = q.shape  # the slip: 4 axes into 3 names
        return q, k

    result = check_result("ex03.grouped_query_attention", grouped_query_attention)
    assert result.status == "failed" and "to unpack" in result.feedback, result.feedback
    assert "raise the ValueError only" not in result.feedback, result.feedback


class _H3MHA(_F03MHA):
    """Lesson 03's module, one length taken for every split when `slip` is set."""

    def forward(self, query, key, value, mask=None):
        batch, n_q, d_model = query.shape
        seq = key.shape[1] if self.slip == "key.shape[1] for every split" else n_q

        def split(x, length):
            return x.reshape(batch, length, self.num_heads, self.d_head).transpose(1, 2)

        q = split(self.q_proj(query), seq)
        k, v = split(self.k_proj(key), key.shape[1]), split(self.v_proj(value), value.shape[1])
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if mask is not None:
            scores = scores.masked_fill(
                ~(mask.unsqueeze(1) if mask.dim() == 3 else mask), -math.inf
            )
        weights = scores.softmax(-1)
        heads = (weights @ v).transpose(1, 2).reshape(batch, n_q, d_model)
        return self.out_proj(heads), weights


@pytest.mark.parametrize("slip", ["", "key.shape[1] for every split"])
def test_h3_queries_split_by_the_keys_length_are_named(slip):
    # before: PyTorch's bare 'shape ... is invalid for input of size 72' and a traceback tip
    learner = type("MultiHeadAttention", (_H3MHA,), {"slip": slip})
    status, feedback = status_and_feedback("ex03.MultiHeadAttention", learner)
    if slip:
        assert status == "failed" and "split into heads with the keys' length" in feedback, feedback
    else:
        assert status == "passed", feedback


class _H3MaskViewed(_F03MHA):
    def forward(self, query, key, value, mask=None):
        if mask is not None:  # the slip: a view to 4-D where a broadcast is needed
            mask = mask.view(query.shape[0], 1, query.shape[1], key.shape[1])
        return super().forward(query, key, value, mask)


def test_h3_a_mask_viewed_to_four_axes_is_named():
    # before: PyTorch's bare "shape '[3, 1, 2, 6]' is invalid for input of size 18"
    status, feedback = status_and_feedback("ex03.MultiHeadAttention", _H3MaskViewed)
    assert status == "failed" and "mask.view(batch, 1, n_q, n_k)" in feedback, feedback


_KEPT_MERGED = {}


def merge_heads_result_kept_by_shape(x):
    batch, num_heads, seq, d_head = x.shape
    merged = x.transpose(1, 2).reshape(batch, seq, num_heads * d_head)
    return _KEPT_MERGED.setdefault(tuple(x.shape), merged)  # the slip: the first result, kept


def test_a_merge_that_returns_a_result_kept_from_an_earlier_call_is_told_so():
    # before: 'no gradient reaches x ... look for .detach(), torch.no_grad(), ...', a list of
    # causes none of which is in the code; the gradient check (core) now names the cache too
    _KEPT_MERGED.clear()
    graded = check_result("ex03.merge_heads", merge_heads_result_kept_by_shape)
    assert graded.status == "failed", graded.feedback
    assert "no gradient reaches x" in graded.feedback, graded.feedback
    assert "kept from an earlier call" in graded.feedback, graded.feedback


# ---- HUNT18 (h03): a per-example mask told from a 2-D one by its first size; a float d_head;
# a float32 tensor filled head by head; merge_heads' input unpacked in split_heads' order ------


class _H03MHA(_F03MHA):
    """Lesson 03's module, split and merged by hand; `slip` names its one mistake."""

    def __init__(self, d_model, num_heads, bias=True):
        super().__init__(d_model, num_heads, bias)
        if self.slip == "d_head = d_model / num_heads":
            self.d_head = d_model / num_heads

    def forward(self, query, key, value, mask=None):
        (batch, n_q, d_model), slip = query.shape, self.slip
        q, k, v = (
            layer(x).reshape(batch, x.shape[1], self.num_heads, self.d_head).transpose(1, 2)
            for layer, x in ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value))
        )
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if mask is not None:
            per_example = {
                "2-D if mask.shape[0] == n_q": mask.shape[0] != n_q,
                "2-D if the mask is square": mask.shape[-2] != mask.shape[-1],
            }.get(slip, mask.dim() == 3)
            scores = scores.masked_fill(~(mask.unsqueeze(1) if per_example else mask), -math.inf)
        weights = scores.exp() / scores.exp().sum(-1, keepdim=True) if slip == "exp / sum" else None
        weights = scores.softmax(-1) if weights is None else weights
        heads = weights @ v  # (batch, heads, n_q, d_head)
        if slip == "torch.zeros filled head by head":
            merged = torch.zeros(batch, n_q, d_model)  # float32, whatever the input's dtype
            for h in range(self.num_heads):
                merged[..., h * self.d_head : (h + 1) * self.d_head] = heads[:, h]
        else:
            merged = heads.transpose(1, 2).reshape(batch, n_q, d_model)
        return self.out_proj(merged), weights


@pytest.mark.parametrize(
    "slip, words",
    [
        ("", None),
        # full marks before, in the notebook and under every seed: no 3-D mask had batch == n_q
        ("2-D if mask.shape[0] == n_q", "you told a 2-D (n_q, n_k) mask by mask.shape[0] == n_q"),
        ("2-D if the mask is square", "or by its being square"),
        # full marks before: no case had scores past exp's float32 range (about 88)
        ("exp / sum", "exp(200) overflows float32"),
        # PyTorch's bare TypeError or dtype error before
        ("d_head = d_model / num_heads", "a shape needs ints: d_head = d_model // num_heads"),
        ("torch.zeros filled head by head", "a tensor made without dtype="),
    ],
)
def test_h03_mha_slip_is_named_under_every_seed(slip, words):
    learner = type("MultiHeadAttention", (_H03MHA,), {"slip": slip})
    for seed in (None, 1, 2, 3):
        if seed is None:
            result = check_result("ex03.MultiHeadAttention", learner)
        else:
            result = _graded_under("ex03.MultiHeadAttention", learner, seed)
        if words is None:
            assert result.status == "passed", (seed, result.feedback)
        else:
            assert result.status == "failed" and words in result.feedback, (seed, result.feedback)


def merge_heads_unpacked_as_split_input(x):
    batch, seq, num_heads, d_head = x.shape  # the slip: split_heads' input order
    return x.transpose(1, 2).reshape(batch, seq, num_heads * d_head)


def test_h03_merge_heads_unpacked_in_split_heads_order_is_named():
    # before: only 'your result has shape (2, 3, 20), expected (2, 5, 12)'
    status, feedback = status_and_feedback("ex03.merge_heads", merge_heads_unpacked_as_split_input)
    assert status == "failed" and "your 'seq' is the number of heads" in feedback, feedback


def gqa_softmax_by_hand(q, k, v, mask=None):
    num_heads, num_kv_heads = q.shape[1], k.shape[1]
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads={num_heads} is not a multiple of num_kv_heads={num_kv_heads}")
    group = num_heads // num_kv_heads
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    weights = scores.exp() / scores.exp().sum(-1, keepdim=True)  # the slip: no maximum taken off
    return weights @ v, weights


def test_h03_gqa_softmax_without_the_maximum_subtracted_fails_under_every_seed():
    # before: full marks, in the notebook and under every seed (no score past 88)
    for seed in (None, 1, 2, 3):
        if seed is None:
            result = check_result("ex03.grouped_query_attention", gqa_softmax_by_hand)
        else:
            result = _graded_under("ex03.grouped_query_attention", gqa_softmax_by_hand, seed)
        assert result.status == "failed", (seed, result.feedback)
        assert "exp(200) overflows float32" in result.feedback, (seed, result.feedback)
