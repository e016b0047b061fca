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
    assert (  # bool ids, and two ids its message does not name (7, and -2 since hunt 2)
        check_result("ex01.one_hot", lenient).passed
        == check_result("ex01.one_hot", lenient).total - 3
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


def test_the_dtype_hint_names_a_cast_as_well_as_a_created_tensor():
    def cast(q, k, v):  # .double() on float32 inputs: no tensor created, a cast
        weights = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).softmax(-1).double()
        return weights @ v.double(), weights

    result = check_result("ex02.scaled_dot_product_attention", cast)
    assert result.status == "failed" and "dtype float64, expected float32" in result.feedback
    assert "Look for a cast (.float(), .double()" in result.feedback, result.feedback


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


# ---- review of 2026-11-26, learner A: slips that got "None of the usual single mistakes" ----


def _step_attending_first(q_t, k_t, v_t, k_cache, v_cache, *, stable=False):
    """Attends over the old cache, then appends (the classic off-by-one); its stable softmax
    (amax over an empty axis) raises on the first step."""
    if q_t.shape[-2] != 1:
        raise ValueError("q_t must hold one token")
    scores = q_t @ k_cache.transpose(-2, -1) / k_cache.shape[-1] ** 0.5
    if stable:
        scores = scores - scores.amax(-1, keepdim=True)
    out = scores.softmax(-1) @ v_cache
    return out, torch.cat([k_cache, k_t], 2), torch.cat([v_cache, v_t], 2)


def _step(q_t, k_t, v_t, k_cache, v_cache, *, softmax_dim=-1, prepend=False):
    if q_t.shape[-2] != 1:
        raise ValueError("q_t must hold one token")
    pairs = ((k_t, k_cache), (v_t, v_cache)) if prepend else ((k_cache, k_t), (v_cache, v_t))
    keys, values = (torch.cat(pair, 2) for pair in pairs)
    weights = (q_t @ keys.transpose(-2, -1) / keys.shape[-1] ** 0.5).softmax(softmax_dim)
    return weights @ values, keys, values


def _generate_dropping(dropped):
    from course_lib.grading.tasks.ex09 import _own_sample_next

    own_sample_next = _own_sample_next()

    def generate(model, ids, max_new_tokens, temperature=1.0, top_k=None, generator=None):
        passed = {"temperature": temperature, "top_k": top_k, "generator": generator}
        passed.pop(dropped)
        with torch.no_grad():
            logits, cache = model.forward_cached(ids, None, 0)
            for _ in range(max_new_tokens):
                token = own_sample_next(logits[:, -1], **passed)
                ids = torch.cat([ids, token[:, None]], dim=1)
                logits, cache = model.forward_cached(ids[:, -1:], cache, ids.shape[1] - 1)
        return ids

    return generate


def _sample_next_top_k_last(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    if temperature < 0 or (top_k is not None and top_k < 1):
        raise ValueError("bad temperature or top_k")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError("bad top_p")
    if temperature == 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits / temperature, -1)
    if top_p is not None:
        sorted_probs, order = probs.sort(-1, descending=True)
        keep = (sorted_probs.cumsum(-1) - sorted_probs) < top_p
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs * keep)
    if top_k is not None:  # after top-p: the wrong order
        kth = torch.topk(probs, min(top_k, probs.shape[-1])).values[:, -1:]
        probs = probs.masked_fill(probs < kth, 0.0)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def _perplexity_per_row(logits, targets):
    if logits.shape[:-1] != targets.shape:
        raise ValueError("targets must have the shape of logits without the last axis")
    nll = -torch.log_softmax(logits, -1).gather(-1, targets[..., None])[..., 0]
    return torch.exp(nll.mean(-1)).mean()


def _decoder(stale=False, ff_before_cross=False):
    import torch.nn.functional as F
    from torch import nn

    from course_lib.multihead import MultiHeadAttention

    class Decoder(nn.Module):
        def __init__(self, d_model, num_heads, d_ff, norm_first=False):
            super().__init__()
            self.norm_first = norm_first
            self.self_attn = MultiHeadAttention(d_model, num_heads)
            self.multihead_attn = MultiHeadAttention(d_model, num_heads)
            self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
            self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))

        def forward(self, x, memory, self_mask=None, memory_mask=None):
            def sa(h):
                return self.self_attn(h, h, h, mask=self_mask)[0]

            def ca(h):
                return self.multihead_attn(h, memory, memory, mask=memory_mask)[0]

            def ff(h):
                return self.linear2(F.relu(self.linear1(h)))

            if self.norm_first:
                h = x + sa(self.norm1(x))
                h = h + ca(self.norm2(x if stale else h))
                return h + ff(self.norm3(h))
            h = self.norm1(x + sa(x))
            if ff_before_cross:
                h = self.norm3(h + ff(h))
                return self.norm2(h + ca(h))
            h = self.norm2(h + ca(x if stale else h))
            return self.norm3(h + ff(h))

    return Decoder


def _gpt(kind):
    from course_lib.grading.tasks.ex09 import _mistake_gpt

    return _mistake_gpt(kind)


NAMED_SLIPS = [
    ("ex09.cached_attention_step", _step_attending_first, "the classic off-by-one"),
    (
        "ex09.cached_attention_step",
        lambda *a: _step_attending_first(*a, stable=True),
        "the classic off-by-one",
    ),
    ("ex09.cached_attention_step", lambda *a: _step(*a, softmax_dim=-2), "over dim=-2"),
    ("ex09.cached_attention_step", lambda *a: _step(*a, prepend=True), "at the END of the caches"),
    ("ex09.generate", _generate_dropping("temperature"), "temperature is not passed on"),
    ("ex09.generate", _generate_dropping("top_k"), "top_k is not passed on"),
    ("ex09.generate", _generate_dropping("generator"), "pass `generator` on"),
    ("ex09.sample_next", _sample_next_top_k_last, "top-k comes before top-p"),
    ("ex09.perplexity", _perplexity_per_row, "one perplexity per sequence"),
    ("ex09.GPT", _gpt("triu"), "the upper triangle (triu)"),
    ("ex09.GPT", _gpt("tanh_gelu"), "approximate='tanh'"),
    ("ex09.GPT", _gpt("lesson_positions"), "a module that ADDS positions"),
    ("ex07.DecoderLayer", _decoder(stale=True), "reads the layer's input x"),
    ("ex07.DecoderLayer", _decoder(ff_before_cross=True), "in the wrong order"),
]


def test_each_named_slip_fails_with_its_own_hint():
    for task_id, wrong, hint in NAMED_SLIPS:
        result = check_result(task_id, wrong)
        assert result.status == "failed", (task_id, hint, result.feedback)
        assert hint in result.feedback, (task_id, hint, result.feedback)


def test_a_capstone_without_gpt2_init_keeps_the_points_of_its_right_forward():
    # one init mistake scored 0 of 6; the init is now a check of its own
    right = _gpt("")

    class DefaultInit(right):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            for module in self.modules():
                if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
                    module.reset_parameters()

    result = check_result("ex09.GPT", DefaultInit)
    assert result.passed == result.total - 3, result.feedback  # the three init cases
    assert "GPT-2's init" in result.feedback


def test_a_capstone_that_shrinks_linear1_is_told_which_layers_shrink():
    # learner A put the residual scaling on linear1: 0 of 6 with the generic init message
    right = _gpt("")

    class ShrunkLinear1(right):
        def __init__(self, vocab_size, block_size, d_model, num_heads, num_layers, **options):
            super().__init__(vocab_size, block_size, d_model, num_heads, num_layers, **options)
            with torch.no_grad():
                for layer in self.layers:
                    layer.feed_forward.linear1.weight /= (2 * num_layers) ** 0.5

    result = check_result("ex09.GPT", ShrunkLinear1)
    assert result.passed == result.total - 3, result.feedback  # the three init cases
    assert "linear2 and the attention's out_proj, not linear1" in result.feedback


# ---- F9: rare slips that lost marks with "None of the usual single mistakes", PyTorch's bare
# error, or (temperature < 1e-3 as greedy) full marks; each is written as a learner would ----


def _gqa_mask(form):
    """Solution 03's grouped_query_attention with the mask used in one of several forms."""
    import math

    def grouped_query_attention(q, k, v, mask=None):
        num_heads, num_kv_heads = q.shape[1], k.shape[1]
        if num_heads % num_kv_heads != 0:
            raise ValueError(f"num_heads={num_heads} is not a multiple of {num_kv_heads}")
        group = num_heads // num_kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            if form == "view":  # MultiHeadAttention's (batch, 1, n_q, n_k), by view
                mask = mask.view(mask.shape[0], 1, *mask.shape[-2:]) if mask.dim() > 2 else mask
            elif form == "unsqueeze, expand_as":
                mask = (mask.unsqueeze(1) if mask.dim() == 3 else mask).expand_as(scores)
            elif form == "expand_as":  # right: the mask broadcasts to the scores' shape
                mask = mask.expand_as(scores)
            if form.startswith("in place"):
                scores.masked_fill_(~(mask.unsqueeze(1) if "unsqueeze" in form else mask), -1e30)
            else:
                scores = scores.masked_fill(~mask, float("-inf"))
        weights = scores.softmax(dim=-1)
        return weights @ v, weights

    return grouped_query_attention


def _gpt_eps_default_on(norm):
    class GPT(_gpt("")):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            for layer in self.layers:
                getattr(layer, norm).eps = 1e-5  # built without layer_norm_eps

    return GPT


def _sample_next(slip):
    def sample_next(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
        if temperature < 0 or (top_k is not None and top_k < 1):
            raise ValueError("temperature must be >= 0 and top_k >= 1")
        if top_p is not None and not 0 < top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        if temperature == 0 or (slip == "tiny is greedy" and temperature < 1e-3):
            return logits.argmax(dim=-1)
        logits = logits / temperature
        if slip == "twice":
            logits = logits / temperature
        if top_k is not None:
            kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        if top_p is not None:
            sorted_probs, order = probs.sort(dim=-1, descending=True)
            kept = sorted_probs.cumsum(dim=-1) - sorted_probs < top_p
            probs = probs.masked_fill(~torch.zeros_like(kept).scatter(-1, order, kept), 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1)

    return sample_next


def _perplexity_dim0(logits, targets):
    if targets.shape != logits.shape[:-1]:
        raise ValueError("targets must have the shape of logits without the last axis")
    nll = -torch.log_softmax(logits, dim=0).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return nll.mean().exp()


def _step_scaled_by_d_model(q_t, k_t, v_t, k_cache, v_cache):
    if q_t.shape[-2] != 1:
        raise ValueError("q_t must hold one token")
    k_cache, v_cache = torch.cat([k_cache, k_t], dim=2), torch.cat([v_cache, v_t], dim=2)
    d_model = q_t.shape[1] * q_t.shape[-1]  # heads * d_head
    weights = (q_t @ k_cache.transpose(-2, -1) / d_model**0.5).softmax(dim=-1)
    return weights @ v_cache, k_cache, v_cache


def _generate_counting_positions():
    """A generate whose position counter, a default argument, lives on between calls."""
    from course_lib.grading.tasks.ex09 import _own_sample_next

    own_sample_next = _own_sample_next()

    def generate(model, ids, max_new_tokens, temperature=1.0, top_k=None, generator=None, pos=[0]):  # noqa: B006
        with torch.no_grad():
            logits, cache = model.forward_cached(ids, None, 0)
            pos[0] += ids.shape[1]
            for _ in range(max_new_tokens):
                token = own_sample_next(logits[:, -1], temperature, top_k, None, generator)
                ids = torch.cat([ids, token[:, None]], dim=1)
                logits, cache = model.forward_cached(ids[:, -1:], cache, pos[0])
                pos[0] += 1
        return ids

    return generate


def _window_halved_when_causal(n, window, causal=False):
    if n < 1 or window < 0:
        raise ValueError(f"n must be >= 1 and window >= 0, got {n}, {window}")
    offset = torch.arange(n)[:, None] - torch.arange(n)[None, :]
    if causal:
        return (offset >= 0) & (offset <= window // 2)
    return offset.abs() <= window


F9_SLIPS = [
    ("ex03.grouped_query_attention", _gqa_mask("view"), "its mask handling breaks"),
    ("ex03.grouped_query_attention", _gqa_mask("unsqueeze, expand_as"), "its mask handling"),
    ("ex03.grouped_query_attention", _gqa_mask("in place, unsqueeze"), "cannot grow the scores"),
    ("ex09.GPT", _gpt_eps_default_on("norm1"), "pass layer_norm_eps on to norm1 too"),
    ("ex09.GPT", _gpt_eps_default_on("norm2"), "pass layer_norm_eps on to norm2 too"),
    ("ex09.sample_next", _sample_next("tiny is greedy"), "only temperature=0 is greedy"),
    ("ex09.sample_next", _sample_next("twice"), "divided by the temperature twice"),
    ("ex09.perplexity", _perplexity_dim0, "log_softmax over dim=0"),
    ("ex09.cached_attention_step", _step_scaled_by_d_model, "sqrt(heads * d_head)"),
    ("ex10.sliding_window_mask", _window_halved_when_causal, "not halved (window // 2)"),
]


def test_each_f9_slip_fails_with_its_own_hint():
    for task_id, wrong, hint in F9_SLIPS:
        result = check_result(task_id, wrong)
        assert result.status == "failed", (task_id, hint, result.feedback)
        assert hint in result.feedback, (task_id, hint, result.feedback)
        assert "None of the usual" not in result.feedback, (task_id, result.feedback)


def test_a_generate_that_keeps_its_position_counter_between_calls_is_told_so():
    # a bare "ids has 1 tokens (after 16 cached ones)" from the model before
    result = check_result("ex09.generate", _generate_counting_positions())
    assert result.status == "failed", result.feedback
    assert "keeps something from one call to the next" in result.feedback, result.feedback


def test_the_f9_right_answers_keep_full_marks():
    for task_id, right in [
        ("ex03.grouped_query_attention", _gqa_mask("expand_as")),
        ("ex03.grouped_query_attention", _gqa_mask("in place")),
        ("ex09.sample_next", _sample_next("")),
    ]:
        result = check_result(task_id, right)
        assert result.status == "passed", (task_id, result.feedback)
