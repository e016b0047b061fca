"""Checks run once, at the door: a model's inner layers skip the checks its forward made.

The counter wraps every `check_*` function of `course_lib.validation`, in every course_lib module
that imported it, and counts the calls made during one forward pass.
"""

from __future__ import annotations

import sys

import pytest
import torch

import course_lib.validation as validation
from course_lib.blocks import Decoder, DecoderLayer, Encoder, EncoderLayer
from course_lib.gpt import GPT, GPTConfig
from course_lib.kv_cache import cached_attention_step
from course_lib.llama import SwiGLU, rms_norm
from course_lib.positional import apply_rope


@pytest.fixture
def checks(monkeypatch) -> list[str]:
    """The names of the check_* functions called since the list was last cleared."""
    calls: list[str] = []
    originals = {name: getattr(validation, name) for name in validation.__all__}
    for module in [m for n, m in list(sys.modules.items()) if n.startswith("course_lib")]:
        for name, original in originals.items():
            if name.startswith("check_") and getattr(module, name, None) is original:

                def counted(*args, _name=name, _original=original, **kwargs):
                    calls.append(_name)
                    return _original(*args, **kwargs)

                monkeypatch.setattr(module, name, counted)
    return calls


def _count(checks: list[str], module, *inputs) -> int:
    checks.clear()
    module(*inputs)
    return len(checks)


def test_a_gpt_with_rope_makes_as_many_checks_as_one_with_learned_positions(checks):
    ids = torch.randint(0, 11, (2, 9))
    counts = {}
    for positions in ("learned", "rope"):
        torch.manual_seed(0)
        config = GPTConfig(
            vocab_size=11, block_size=16, d_model=16, num_heads=2, num_layers=4, positions=positions
        )
        model = GPT(config).eval()
        counts[positions] = _count(checks, model, ids)
    assert counts["rope"] == counts["learned"], counts
    assert 0 < counts["learned"] <= 6, counts  # a handful at the door, none per layer


def test_stacks_check_once_whatever_their_depth(checks):
    torch.manual_seed(0)
    x, memory = torch.randn(2, 5, 8), torch.randn(2, 7, 8)
    counts = {}
    for depth in (1, 4):
        encoder = Encoder(lambda: EncoderLayer(8, 2, 16), depth)
        decoder = Decoder(lambda: DecoderLayer(8, 2, 16), depth)
        counts[depth] = (
            _count(checks, encoder, x),
            _count(checks, decoder, x, memory),
        )
    assert counts[1] == counts[4], counts
    assert all(n > 0 for n in counts[1]), counts  # the stack does check, once


def test_bert_and_vit_check_once_whatever_their_depth(checks):
    from course_lib.family import MaskedLM, VisionTransformer

    torch.manual_seed(0)
    ids, images = torch.randint(0, 10, (2, 6)), torch.randn(2, 3, 8, 8)
    counts = {}
    for depth in (1, 4):
        bert = MaskedLM(10, 8, d_model=16, num_heads=2, num_layers=depth)
        vit = VisionTransformer(8, 4, 3, d_model=16, num_heads=2, num_layers=depth)
        counts[depth] = (_count(checks, bert, ids), _count(checks, vit, images))
    assert counts[1] == counts[4], counts
    with pytest.raises(ValueError, match="mask"):
        MaskedLM(10, 8, d_model=16, num_heads=2)(ids, torch.ones(3, 5, 5, dtype=torch.bool))


def test_doors_still_check_a_learners_call():
    with pytest.raises(ValueError, match="d_model"):
        Encoder(lambda: EncoderLayer(8, 2, 16), 2)(torch.randn(2, 5, 6))
    with pytest.raises(ValueError, match="memory"):
        Decoder(lambda: DecoderLayer(8, 2, 16), 2)(torch.randn(2, 5, 8), torch.randn(3, 7, 8))
    with pytest.raises(ValueError, match="SwiGLU"):
        SwiGLU(8)(torch.randn(2, 6))
    with pytest.raises(ValueError, match="weight"):
        rms_norm(torch.randn(2, 6), torch.ones(5))
    with pytest.raises(ValueError, match="one token"):
        q = torch.randn(1, 2, 2, 4)
        cached_attention_step(q, q, q, torch.zeros(1, 2, 0, 4), torch.zeros(1, 2, 0, 4))
    with pytest.raises(ValueError, match="even"):
        apply_rope(torch.randn(3, 5))


def test_rope_table_is_kept_and_equals_the_explicit_positions():
    x = torch.randn(2, 3, 7, 8, dtype=torch.float64)
    implicit, explicit = apply_rope(x), apply_rope(x, torch.arange(7))
    torch.testing.assert_close(implicit, explicit, rtol=0, atol=1e-15)
    shifted = apply_rope(x, torch.arange(5, 12))  # positions past 0: computed where x is
    assert not torch.allclose(shifted, implicit)


def test_generate_checks_its_prompt_once_not_at_every_step(checks):
    from course_lib.gpt import BigramLM, generate, generate_with_cache

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=11, block_size=16, d_model=16, num_heads=2, num_layers=1))
    ids = torch.randint(0, 11, (2, 3))
    for call in (
        lambda: generate(model, ids, 5),
        lambda: generate(model, ids, 5, use_cache=True),
        lambda: generate_with_cache(model, ids, 5),
    ):
        checks.clear()
        call()
        assert checks.count("check_ids") == 1, checks  # the prompt, at generate's door
        assert "check_context" not in checks, checks  # the model's door is inside: skipped
    with pytest.raises(ValueError, match="vocab_size=11"):
        generate(BigramLM(11), torch.tensor([[11]]), 1)


def test_doors_refuse_an_input_of_another_dtype_or_device_than_the_weights():
    # before: "mat1 and mat2 must have the same dtype, but got Double and Float" from inside
    # nn.Linear (or "mixed dtype (CPU)" from F.layer_norm), far from the learner's call
    from course_lib.blocks import EncoderDecoder, FeedForward, LayerNorm
    from course_lib.cross_attention import CrossAttentionSublayer
    from course_lib.multihead import MultiHeadAttention

    torch.manual_seed(0)
    x, memory = torch.randn(2, 5, 8), torch.randn(2, 7, 8)
    calls = {
        "this attention": lambda m, a, b: m(a, a, a)[0],
        "this feed-forward": lambda m, a, b: m(a),
        "this LayerNorm": lambda m, a, b: m(a),
        "this SwiGLU": lambda m, a, b: m(a),
        "this sub-layer": lambda m, a, b: m(a, b),
    }
    modules = {
        "this attention": lambda: MultiHeadAttention(8, 2),
        "this feed-forward": lambda: FeedForward(8, 16),
        "this LayerNorm": lambda: LayerNorm(8),
        "this SwiGLU": lambda: SwiGLU(8),
        "this sub-layer": lambda: CrossAttentionSublayer(8, 2),
    }
    layers = {  # the layers and stacks all say "this layer"
        "encoder layer": (lambda: EncoderLayer(8, 2, 16), lambda m, a, b: m(a)),
        "decoder layer": (lambda: DecoderLayer(8, 2, 16), lambda m, a, b: m(a, b)),
        "encoder": (lambda: Encoder(lambda: EncoderLayer(8, 2, 16), 2), lambda m, a, b: m(a)),
        "decoder": (
            lambda: Decoder(lambda: DecoderLayer(8, 2, 16), 2),
            lambda m, a, b: m(a, b),
        ),
        "encoder-decoder": (lambda: EncoderDecoder(8, 2, 1, 1, 16), lambda m, a, b: m(a, b)),
    }
    cases = [(owner, modules[owner], calls[owner]) for owner in modules]
    cases += [("this layer", make, call) for make, call in layers.values()]
    for owner, make, call in cases:
        module = make().eval()
        with pytest.raises(TypeError, match=f"float64 but the weights of {owner} are float32"):
            call(module, x.double(), memory.double())
        # the right inputs pass: float64 end to end, and any dtype under autocast
        assert call(module.double(), x.double(), memory.double()).dtype == torch.float64
        with torch.autocast("cpu", dtype=torch.bfloat16):
            call(module.float(), x.bfloat16(), memory.bfloat16())
        with pytest.raises(ValueError, match=f"is on cpu but the weights of {owner} are on meta"):
            call(module.to("meta"), x, memory)


def test_cached_attention_step_names_a_cache_of_another_dtype():
    # before: "expected scalar type Float but found Double" from the matmul inside
    q = torch.randn(1, 2, 1, 4)
    cache = torch.zeros(1, 2, 3, 4, dtype=torch.float64)
    with pytest.raises(TypeError, match="float32, float32, float32, float64, float64"):
        cached_attention_step(q, q, q, cache, cache)
    out, _, _ = cached_attention_step(q.double(), q.double(), q.double(), cache, cache)
    assert out.dtype == torch.float64  # float64 end to end is right


def test_hand_written_dtype_checks_share_one_helper(checks):
    # before: self_attention, attention_pool, cross_attention (a private copy) and
    # cached_attention_step each wrote the check out, and check_qkv said "got torch.float32,
    # torch.float32 and torch.float64" with no way out
    from course_lib.attention import scaled_dot_product_attention, self_attention
    from course_lib.cross_attention import attention_pool, cross_attention

    x, w, w64 = torch.randn(2, 5, 8), torch.randn(8, 4), torch.randn(8, 4, dtype=torch.float64)
    q, cache = torch.randn(1, 2, 1, 4), torch.zeros(1, 2, 3, 4, dtype=torch.float64)
    calls = [
        (lambda: self_attention(x, w, w64, w), "w_k has dtype float64 but x has float32; x @ w_k"),
        (lambda: cross_attention(x, x, w, w, w64), "w_v has dtype float64 but memory has float32"),
        (lambda: attention_pool(x, torch.randn(3, 4), w64, w), "w_k has dtype float64 but x"),
        (lambda: attention_pool(x, torch.randn(3, 4).double(), w, w), "queries has dtype float64"),
        (
            lambda: scaled_dot_product_attention(x, x.double(), x),
            r"q, k and v must share one dtype, got float32, float64, float32; convert them",
        ),
        (
            lambda: cached_attention_step(q, q, q, cache, cache),
            "q_t, k_t, v_t, k_cache and v_cache must share one dtype, got float32, float32, "
            r"float32, float64, float64; convert the cache with k_cache.to\(q_t.dtype\)",
        ),
    ]
    for call, match in calls:
        checks.clear()
        with pytest.raises(TypeError, match=match):
            call()
        assert checks[-1] == "check_same_dtype", checks


def _switch_calls():
    """(what, call) for every switch a learner sets, each given a str where a bool goes."""
    from course_lib.attention import scaled_dot_product_attention
    from course_lib.blocks import EncoderDecoder, FeedForward, LayerNorm, record_attention
    from course_lib.cross_attention import CrossAttentionSublayer
    from course_lib.efficient_attention import (
        random_feature_projection,
        sliding_window_attention,
        sliding_window_mask,
        tiled_attention,
    )
    from course_lib.gpt import generate
    from course_lib.llama import GroupedQueryAttention
    from course_lib.multihead import MultiHeadAttention
    from course_lib.train import train
    from course_lib.translator import Seq2SeqTransformer

    x = torch.randn(2, 5, 8)
    gpt = GPT(GPTConfig(vocab_size=11, block_size=16, d_model=16, num_heads=2, num_layers=1))
    return [
        ("bias", lambda v: MultiHeadAttention(8, 2, bias=v)),
        ("rope", lambda v: MultiHeadAttention(8, 2, rope=v)),
        ("bias", lambda v: GroupedQueryAttention(8, 2, 1, bias=v)),
        ("bias", lambda v: FeedForward(8, 16, bias=v)),
        ("bias", lambda v: LayerNorm(8, bias=v)),
        ("bias", lambda v: CrossAttentionSublayer(8, 2, bias=v)),
        ("norm_first", lambda v: EncoderLayer(8, 2, 16, norm_first=v)),
        ("norm_first", lambda v: DecoderLayer(8, 2, 16, norm_first=v)),
        ("norm_first", lambda v: EncoderDecoder(8, 2, 1, 1, 16, norm_first=v)),
        ("norm_first", lambda v: Seq2SeqTransformer(10, 8, 2, 1, 1, 16, norm_first=v)),
        ("is_causal", lambda v: scaled_dot_product_attention(x, x, x, is_causal=v)),
        ("need_weights", lambda v: scaled_dot_product_attention(x, x, x, need_weights=v)),
        ("is_causal", lambda v: MultiHeadAttention(8, 2)(x, x, x, is_causal=v)),
        ("need_weights", lambda v: MultiHeadAttention(8, 2)(x, x, x, need_weights=v)),
        ("is_causal", lambda v: EncoderLayer(8, 2, 16)(x, is_causal=v)),
        ("causal", lambda v: sliding_window_mask(5, 1, causal=v)),
        ("causal", lambda v: sliding_window_attention(x, x, x, 1, causal=v)),
        ("return_lse", lambda v: tiled_attention(x, x, x, return_lse=v)),
        ("orthogonal", lambda v: random_feature_projection(4, 4, orthogonal=v)),
        ("enabled", lambda v: record_attention(EncoderLayer(8, 2, 16), v)),
        ("use_cache", lambda v: generate(gpt, torch.zeros(1, 2, dtype=torch.long), 1, use_cache=v)),
        (
            "progress",
            lambda v: train(gpt, [], lambda m, b: 0, torch.optim.SGD(gpt.parameters()), progress=v),
        ),
    ]


@pytest.mark.parametrize("case", range(len(_switch_calls())))
def test_switches_refuse_what_is_not_a_bool(case):
    # before: bias="no", norm_first="no", causal="no" were truthy, so silently on (causal=1
    # too); a str is refused now, as GPTConfig(bias="no") already was, and True/False pass
    name, call = _switch_calls()[case]
    for wrong in ("no", 1):
        with pytest.raises(TypeError, match=f"{name} must be True or False, got {wrong!r}"):
            call(wrong)
    for right in (True, False):
        call(right)
