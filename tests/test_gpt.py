"""The GPT of lesson 09: built from EncoderLayer, causal, KV cache, generation, schedule."""

import dataclasses
import functools
import math

import pytest
import torch
import torch.nn.functional as F

from course_lib.blocks import EncoderLayer
from course_lib.gpt import GPT, BigramLM, GPTConfig, generate
from course_lib.kv_cache import KVCache, LayerCache
from course_lib.masking import causal_mask
from course_lib.multihead import MultiHeadAttention
from course_lib.train import WarmupCosine, WarmupLinear, evaluate_loss, lm_loss


def small(**overrides):
    options = dict(vocab_size=11, block_size=16, d_model=32, num_heads=4, num_layers=2)
    options.update(overrides)
    return GPT(GPTConfig(**options))


def test_forward_shape_and_blocks():
    torch.manual_seed(0)
    model = small()
    logits = model(torch.randint(11, (3, 10)))
    assert logits.shape == (3, 10, 11)
    assert all(isinstance(layer, EncoderLayer) and layer.norm_first for layer in model.layers)
    assert not hasattr(model.layers[0], "multihead_attn")  # no cross-attention
    assert model.lm_head.weight is model.token_embedding.weight


@pytest.mark.parametrize("dtype, atol", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
def test_equals_the_blocks_with_an_explicit_causal_mask(dtype, atol):
    torch.manual_seed(0)
    model = small().to(dtype)
    ids = torch.randint(11, (2, 12))
    x = model.position_embedding(model.token_embedding(ids))  # + learned positions
    for layer in model.layers:
        x = layer(x, causal_mask(12))
    by_hand = model.norm(x) @ model.token_embedding.weight.T
    assert torch.allclose(model(ids), by_hand, atol=atol)


def test_is_causal_matches_the_mask_and_torch():
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 4)
    x = torch.randn(2, 7, 16)
    fused, none = attn(x, x, x, need_weights=False, is_causal=True)
    masked, weights = attn(x, x, x, mask=causal_mask(7))
    explicit, weights_causal = attn(x, x, x, is_causal=True)
    assert none is None
    assert torch.allclose(fused, masked, atol=1e-6) and torch.allclose(explicit, masked, atol=1e-6)
    assert torch.equal(weights, weights_causal)
    with pytest.raises(ValueError, match="is_causal"):
        attn(x, x, x, mask=causal_mask(7), is_causal=True)
    with pytest.raises(ValueError, match="is_causal"):
        attn(x, x[:, :5], x[:, :5], is_causal=True)


def test_model_is_causal():
    torch.manual_seed(0)
    model = small()
    ids = torch.randint(11, (2, 14))
    changed = ids.clone()
    changed[:, 9] = (changed[:, 9] + 1) % 11
    diff = (model(changed) - model(ids)).abs().amax(dim=(0, 2))
    assert torch.all(diff[:9] == 0) and torch.all(diff[9:] > 0)


@pytest.mark.parametrize("dtype, atol", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
def test_forward_cached_equals_forward(dtype, atol):
    torch.manual_seed(0)
    model = small().to(dtype)
    ids = torch.randint(11, (2, 16))
    logits, cache = model.forward_cached(ids[:, :5])  # a prompt, then one token at a time
    pieces = [logits]
    for t in range(5, 16):
        logits, cache = model.forward_cached(ids[:, t : t + 1], cache)
        pieces.append(logits)
    assert torch.allclose(torch.cat(pieces, 1), model(ids), atol=atol)
    assert len(cache) == 2 and cache[0].keys.shape == (2, 4, 16, 8)
    with pytest.raises(ValueError, match="block_size"):
        model.forward_cached(ids[:, :1], cache)


def test_layer_cache_appends_in_place_and_copies_never_change():
    cache, k, v = LayerCache(), torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    keys, _ = cache.append(k, v)
    again, _ = cache.append(k[:, :, :1], v[:, :, :1])  # room to spare: the same buffer
    assert again.data_ptr() == keys.data_ptr() and len(cache) == 4
    assert torch.equal(again, torch.cat([k, k[:, :, :1]], dim=2))
    left, right = cache.copy(), cache.copy()  # two continuations of the same 4 tokens
    left.append(torch.ones(1, 2, 1, 4), torch.ones(1, 2, 1, 4))
    right.append(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 4))
    assert len(cache) == 4 and torch.equal(cache.keys, again)  # the original is unchanged
    assert torch.all(left.keys[:, :, 4] == 1) and torch.all(right.keys[:, :, 4] == 0)
    for _ in range(20):  # past the capacity: a larger buffer, the same tokens
        left.append(torch.ones(1, 2, 1, 4), torch.ones(1, 2, 1, 4))
    assert torch.equal(left.keys[:, :, :4], again) and left.keys.shape == (1, 2, 25, 4)


@pytest.mark.parametrize(
    "k, v, error, match",
    [
        ((2, 4, 8), (2, 4, 8), ValueError, r"k must have 4 dimensions \(batch, heads, n, d_head\)"),
        ((2, 3, 3, 8), (2, 3, 1, 8), ValueError, "each key has one value"),  # v broadcast
        ((1, 3, 1, 8), (1, 3, 1, 8), ValueError, "batch, heads and d_head"),  # batch broadcast
        ((2, 1, 1, 8), (2, 1, 1, 8), ValueError, "batch, heads and d_head"),  # heads broadcast
        (
            (2, 3, 1, 6),
            (2, 3, 1, 6),
            ValueError,
            r"the cache holds 4 tokens of shape \(2, 3, 4, 8\)",
        ),
        ((2, 3, 1, 8, "float64"), (2, 3, 1, 8, "float64"), TypeError, "the cache has float32"),
        ((2, 3, 1, 8), (2, 3, 1, 8, "float64"), TypeError, "k has dtype float32 but v has float64"),
        ((2, 3, 1, 8, "int64"), (2, 3, 1, 8, "int64"), TypeError, "floating-point"),
        ((2, 3, 1, 8, "meta"), (2, 3, 1, 8, "meta"), ValueError, "k is on meta but the cache"),
    ],
)
def test_layer_cache_refuses_keys_and_values_that_do_not_fit(k, v, error, match):
    # before: a v or a batch of length 1 broadcast into the cache, float64 keys were cast to
    # float32 and int keys stored, all silently; a 3-D k raised "tuple index out of range"
    def tensor(spec):
        *shape, kind = spec if isinstance(spec[-1], str) else (*spec, "float32")
        if kind == "meta":
            return torch.randn(shape, device="meta")
        return torch.randn(shape).to(getattr(torch, kind))

    cache = LayerCache()
    cache.append(torch.randn(2, 3, 4, 8), torch.randn(2, 3, 4, 8))
    with pytest.raises(error, match=match):
        cache.append(tensor(k), tensor(v))
    assert len(cache) == 4  # nothing was appended
    cache.append(torch.randn(2, 3, 2, 8), torch.randn(2, 3, 2, 8))  # what fits still does
    assert cache.keys.shape == (2, 3, 6, 8)
    with pytest.raises(ValueError, match="both keys and values"):
        LayerCache(torch.randn(2, 3, 4, 8))  # before: appending returned uninitialised values


def test_forward_cached_names_a_cache_that_does_not_continue_these_ids():
    # before: a batch-2 cache with batch-1 ids broadcast and returned batch-2 logits silently;
    # another model's cache raised "The expanded size of the tensor (16) must match ...", a
    # cache of other depth "zip() argument 2 is longer than argument 1", a list an
    # AttributeError
    torch.manual_seed(0)
    model = small()
    ids = torch.randint(11, (2, 4))
    _, cache = model.forward_cached(ids)
    wider = GPT(GPTConfig(vocab_size=11, block_size=16, d_model=64, num_heads=4, num_layers=2))
    _, other = wider.forward_cached(ids)
    for bad, error, words in (
        (cache, ValueError, r"cache holds keys of shape \(2, 4, 4, 8\).* but ids has batch=1"),
        (other, ValueError, "this model has kv_heads=4, d_head=8"),
        (KVCache.empty(3), ValueError, "cache has 3 layers but this model has num_layers=2"),
        ([], TypeError, "cache must be the KVCache that forward_cached returned"),
    ):
        with pytest.raises(error, match=words):
            model.forward_cached(ids[:1, :1] if bad is cache else ids[:, :1], bad)
    assert model.forward_cached(ids[:, :1], cache)[0].shape == (2, 1, 11)  # the same batch


def test_forward_cached_leaves_the_callers_cache_as_it_was():
    torch.manual_seed(0)
    model = small()
    ids = torch.randint(11, (2, 8))
    _, cache = model.forward_cached(ids[:, :5])
    one, _ = model.forward_cached(ids[:, 5:6], cache)  # two branches from the same cache
    other, _ = model.forward_cached(ids[:, 6:7], cache)
    assert cache.num_tokens == 5
    assert torch.allclose(one, model(ids[:, :6])[:, -1:], atol=1e-5)
    assert torch.allclose(other, model(torch.cat([ids[:, :5], ids[:, 6:7]], 1))[:, -1:], atol=1e-5)


@pytest.mark.parametrize(
    "options", [dict(), dict(top_k=3), dict(top_p=0.8, temperature=0.7), dict(temperature=0.0)]
)
def test_generate_with_cache_gives_identical_tokens(options):
    torch.manual_seed(0)
    model = small()
    prompt = torch.randint(11, (2, 3))
    plain = generate(model, prompt, 30, generator=torch.Generator().manual_seed(1), **options)
    cached = generate(
        model, prompt, 30, generator=torch.Generator().manual_seed(1), use_cache=True, **options
    )
    assert plain.shape == (2, 33)  # past block_size=16: the window slides
    assert torch.equal(plain, cached)
    assert torch.equal(plain[:, :3], prompt)


def test_generate_rejects_bad_input():
    model = small()
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(model, torch.zeros(1, 1, dtype=torch.long), -1)
    with pytest.raises(TypeError, match="ids"):
        generate(model, torch.zeros(1, 1), 3)
    with pytest.raises(TypeError, match="GPT"):
        generate(BigramLM(11), torch.zeros(1, 1, dtype=torch.long), 3, use_cache=True)


def test_bigram_and_untied_and_positionless_models():
    bigram = BigramLM(5)
    assert torch.allclose(bigram(torch.zeros(2, 3, dtype=torch.long)), torch.zeros(2, 3, 5))
    out = generate(
        bigram, torch.zeros(1, 1, dtype=torch.long), 4, generator=torch.Generator().manual_seed(0)
    )
    assert out.shape == (1, 5)
    untied = small(tie_weights=False, bias=True)
    assert untied.lm_head.weight is not untied.token_embedding.weight
    assert small(positions="none").position_embedding is None
    # without positions, attention is permutation-equivariant, so only the causal order remains:
    # the first position sees one token whatever its index
    noposition = small(positions="none")
    ids = torch.randint(11, (1, 6))
    assert torch.allclose(noposition(ids)[0, 0], noposition(ids[:, :1])[0, 0], atol=1e-6)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(vocab_size=0), ValueError, "vocab_size"),
        (dict(vocab_size=10, d_model=30, num_heads=4), ValueError, "num_heads"),
        (dict(vocab_size=10, block_size=-1), ValueError, "block_size"),
        # switches that are not True or False were taken for their truth value: "no" = True
        (dict(vocab_size=10, bias="no"), TypeError, "bias must be True or False, got 'no'"),
        (dict(vocab_size=10, tie_weights=0), TypeError, "tie_weights must be True or False"),
        (dict(vocab_size=10, dropout=1.5), ValueError, r"dropout must be in \[0, 1\)"),
    ],
)
def test_config_rejects_bad_sizes(kwargs, error, match):
    with pytest.raises(error, match=match):
        GPTConfig(**kwargs)


def test_forward_rejects_bad_ids():
    model = small()
    with pytest.raises(ValueError, match="block_size"):
        model(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(TypeError, match="ids"):
        model(torch.zeros(1, 4))
    with pytest.raises(TypeError, match="config"):
        GPT({"vocab_size": 3})


def test_ids_outside_the_vocabulary_are_refused_at_the_door():
    # before: IndexError "index out of range in self" from deep inside nn.Embedding
    model, bigram = small(), BigramLM(11)
    for bad, value in ((11, "11"), (-1, "-1")):
        ids = torch.tensor([[3, bad]])
        for call, *args in (
            (model, ids),
            (model.forward_cached, ids),
            (generate, model, ids, 2),
            (functools.partial(generate, use_cache=True), model, ids, 2),
            (bigram, ids),
            (generate, bigram, ids, 2),
        ):
            with pytest.raises(ValueError, match=rf"vocab_size=11\): it contains {value};"):
                call(*args)


def test_lm_loss_names_targets_outside_the_vocabulary_or_of_the_wrong_shape():
    # before: IndexError "Target 11 is out of bounds." from inside F.cross_entropy (on a GPU, a
    # device-side assert that ends the session), or "Expected input batch_size (6) to match
    # target batch_size (4)"
    model, x = small(), torch.randint(0, 11, (2, 3))
    with pytest.raises(
        ValueError, match=r"y holds ids outside \[0, vocab_size=11\): it contains 11"
    ):
        lm_loss(model, (x, torch.full((2, 3), 11)))
    with pytest.raises(ValueError, match=r"y has shape \(2, 2\) but logits has shape \(2, 3, 11\)"):
        lm_loss(model, (x, x[:, :2]))
    assert lm_loss(model, (x, x)).shape == ()


def test_gradients_reach_every_parameter():
    torch.manual_seed(0)
    model = small(bias=True)
    ids = torch.randint(11, (2, 9))
    loss = lm_loss(model, (ids[:, :-1], ids[:, 1:]))
    loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_evaluate_loss_is_the_mean_over_every_token():
    torch.manual_seed(0)
    model = small()
    ids = torch.randint(11, (50,))
    got = evaluate_loss(model, ids, block_size=16, batch_size=2)
    total, count = 0.0, 0
    for start in range(0, 49, 16):  # windows of 17 tokens overlapping by one
        window = ids[start : start + 17]
        logits = model(window[:-1][None])[0]
        total += F.cross_entropy(logits, window[1:], reduction="sum").item()
        count += len(window) - 1
    assert count == 49 and math.isclose(got, total / count, rel_tol=1e-5)
    assert model.training  # left as it was
    # before: "ids has 17 tokens (after 0 cached ones) but the model's context is block_size=16;
    # crop it", about ids the learner never made
    with pytest.raises(ValueError, match="block_size=17 is longer than the model's context"):
        evaluate_loss(model, ids, block_size=17)


def test_training_a_few_steps_lowers_the_loss():
    torch.manual_seed(0)
    model = small()
    ids = torch.arange(200) % 11  # a perfectly predictable text
    x, y = ids[:-1].reshape(1, -1)[:, :16], ids[1:].reshape(1, -1)[:, :16]
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first = lm_loss(model, (x, y)).item()
    for _ in range(30):
        optimizer.zero_grad()
        lm_loss(model, (x, y)).backward()
        optimizer.step()
    assert lm_loss(model, (x, y)).item() < first / 2


def test_warmup_cosine_by_steps():
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=0.0)
    schedule = WarmupCosine(optimizer, 1.0, 0.1, warmup_steps=4, total_steps=14)
    lrs = []
    for _ in range(16):
        lrs.append(optimizer.param_groups[0]["lr"])
        schedule.step()
    assert lrs[:4] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert lrs[9] == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi * 0.5)))
    assert lrs[14] == pytest.approx(0.1) and lrs[15] == pytest.approx(0.1)
    assert schedule.lr_at(0.0) == 1.0 and schedule.lr_at(2.0) == pytest.approx(0.1)


def test_warmup_cosine_by_time_and_bad_arguments():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.0)
    schedule = WarmupCosine(optimizer, 1.0, 0.0, warmup_steps=0, total_seconds=1e-9)
    schedule.step()
    schedule.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.0)  # the time is up
    with pytest.raises(ValueError, match="exactly one"):
        WarmupCosine(optimizer, 1.0, 0.1, 0)
    with pytest.raises(ValueError, match="min_lr"):
        WarmupCosine(optimizer, 1.0, 2.0, 0, total_steps=3)
    with pytest.raises(TypeError, match="optimizer"):
        WarmupCosine("adam", 1.0, 0.1, 0, total_steps=3)


def test_warmup_linear_falls_in_a_straight_line():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.0)
    schedule = WarmupLinear(optimizer, 1.0, 0.0, warmup_steps=2, total_steps=12)
    lrs = []
    for _ in range(14):
        lrs.append(optimizer.param_groups[0]["lr"])
        schedule.step()
    assert lrs[:2] == pytest.approx([0.5, 1.0])
    assert lrs[2:13] == pytest.approx([1.0 - i / 10 for i in range(11)])  # 1.0, 0.9, ..., 0.0
    assert lrs[13] == 0.0


def test_rope_gpt_uses_no_position_vectors_and_caches_correctly():
    config = GPTConfig(vocab_size=11, block_size=16, d_model=16, num_heads=2, num_layers=2)
    rope = GPT(dataclasses.replace(config, positions="rope", activation="relu2")).eval()
    assert rope.position_embedding is None
    assert all(layer.self_attn.rope for layer in rope.layers)
    ids = torch.randint(11, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = rope(ids)
        first, cache = rope.forward_cached(ids[:, :5])
        rest, _ = rope.forward_cached(ids[:, 5:], cache)  # positions 5.. after the cache
    torch.testing.assert_close(torch.cat([first, rest], 1), full, atol=1e-5, rtol=1e-5)
    # with no positions, one causal layer cannot tell "ab..." from "ba..." at the last token
    # (attention sees a set); rotary positions can: the last position's logits differ
    swapped = ids.clone()
    swapped[:, [0, 1]] = ids[:, [1, 0]]
    with torch.no_grad():
        assert not torch.allclose(rope(swapped)[:, -1], full[:, -1])
        # (one layer: with two, position 1's output already differs, and the last one sees it)
        none = GPT(dataclasses.replace(config, positions="none", num_layers=1)).eval()
        torch.testing.assert_close(none(swapped)[:, -1], none(ids)[:, -1])
    with pytest.raises(ValueError, match="positions"):
        GPTConfig(vocab_size=11, positions="sinusoidal")


def test_gpt2_switches_tanh_gelu_and_layer_norm_eps():
    # GPT-2's options are configuration: the tanh GELU in every feed-forward, and one eps for
    # every LayerNorm (the final one included)
    config = GPTConfig(vocab_size=11, block_size=8, d_model=16, num_heads=2, num_layers=2)
    config = dataclasses.replace(config, activation="gelu_tanh", layer_norm_eps=1e-3, bias=True)
    model = GPT(config)
    norms = [m for m in model.modules() if type(m).__name__ == "LayerNorm"]
    assert len(norms) == 5 and all(norm.eps == 1e-3 for norm in norms)
    ff = model.layers[0].feed_forward
    x = 50 * torch.randn(3, 16)  # large enough for the two GELUs to differ
    want = ff.linear2(F.gelu(ff.linear1(x), approximate="tanh"))
    assert torch.allclose(ff(x), want, atol=1e-6)
    assert not torch.allclose(ff(x), ff.linear2(F.gelu(ff.linear1(x))), atol=1e-6)
