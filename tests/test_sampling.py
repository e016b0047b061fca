"""sample_next (temperature, top-k, top-p), perplexity and the cached attention step."""

import math

import pytest
import torch
import torch.nn.functional as F

from course_lib.attention import scaled_dot_product_attention
from course_lib.kv_cache import cached_attention_step
from course_lib.masking import causal_mask
from course_lib.sampling import perplexity, sample_next, sampling_distribution

PROBS = torch.tensor([[0.05, 0.40, 0.10, 0.25, 0.15, 0.05]])


def test_temperature_divides_the_logits():
    logits = torch.randn(3, 9)
    assert torch.allclose(
        sampling_distribution(logits, temperature=0.7), torch.softmax(logits / 0.7, -1), atol=1e-6
    )
    greedy = sampling_distribution(logits, temperature=0)
    assert torch.equal(greedy.argmax(-1), logits.argmax(-1)) and torch.all(greedy.sum(-1) == 1)


def test_top_k_keeps_exactly_k():
    probs = sampling_distribution(PROBS.log(), top_k=2)
    assert torch.allclose(probs, torch.tensor([[0, 0.4 / 0.65, 0, 0.25 / 0.65, 0, 0]]))


def test_top_p_keeps_the_crossing_token():
    probs = sampling_distribution(PROBS.log(), top_p=0.7)
    assert torch.allclose(probs, torch.tensor([[0, 0.5, 0, 0.3125, 0.1875, 0]]))
    # p below the largest probability: only the most likely token survives
    assert torch.equal(sampling_distribution(PROBS.log(), top_p=0.1).argmax(-1), torch.tensor([1]))
    assert (sampling_distribution(PROBS.log(), top_p=0.1) > 0).sum() == 1


def test_float64_keeps_dtype():
    probs = sampling_distribution(torch.randn(2, 5, dtype=torch.float64), top_k=3, top_p=0.8)
    assert probs.dtype == torch.float64 and torch.allclose(
        probs.sum(-1), torch.ones(2, dtype=torch.float64)
    )


def test_sample_next_frequencies_match_the_distribution():
    draws = sample_next(
        PROBS.log().repeat(40_000, 1), top_p=0.7, generator=torch.Generator().manual_seed(0)
    )
    assert draws.dtype == torch.long and draws.shape == (40_000,)
    freq = torch.bincount(draws, minlength=6) / len(draws)
    assert torch.allclose(freq, torch.tensor([0, 0.5, 0, 0.3125, 0.1875, 0]), atol=0.01)


def test_sample_next_is_reproducible_and_greedy_at_zero():
    logits = torch.randn(4, 11)
    a = sample_next(logits, generator=torch.Generator().manual_seed(3))
    b = sample_next(logits, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
    assert torch.equal(sample_next(logits, temperature=0), logits.argmax(-1))


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(temperature=-1.0), ValueError, "temperature"),
        (dict(temperature="hot"), TypeError, "temperature"),
        (dict(top_k=0), ValueError, "top_k"),
        (dict(top_k=2.5), TypeError, "top_k"),
        (dict(top_p=0.0), ValueError, "top_p"),
        (dict(top_p=1.5), ValueError, "top_p"),
    ],
)
def test_sample_next_rejects_bad_options(kwargs, error, match):
    with pytest.raises(error, match=match):
        sample_next(torch.randn(2, 5), **kwargs)


@pytest.mark.parametrize(
    "logits, error", [(torch.randn(5), ValueError), (torch.ones(2, 5, dtype=torch.long), TypeError)]
)
def test_sample_next_rejects_bad_logits(logits, error):
    with pytest.raises(error, match="logits"):
        sample_next(logits)


@pytest.mark.parametrize(
    "row, match",
    [
        ([0.0, float("nan"), 1.0], "row 1 holds NaN"),
        ([float("-inf")] * 3, "row 1 holds -inf everywhere"),
        ([0.0, float("inf"), 1.0], r"row 1 holds \+inf"),
    ],
)
@pytest.mark.parametrize("options", [{}, {"temperature": 0}, {"top_k": 2}, {"top_p": 0.5}])
def test_sample_next_names_logits_with_nothing_to_draw(row, match, options):
    # before: "probability tensor contains either `inf`, `nan` or element < 0" from inside
    # torch.multinomial, and at temperature 0 a silent token (the NaN's, or token 0)
    logits = torch.tensor([[0.0, 1.0, 2.0], row])
    for function in (sample_next, sampling_distribution):
        with pytest.raises(ValueError, match=match):
            function(logits, **options)
    masked = torch.tensor([[0.0, float("-inf"), 2.0]])  # -inf masks a token out: still fine
    assert sample_next(masked, **options).item() in (0, 2)


def test_a_temperature_so_small_that_the_logits_overflow_is_named():
    # before: sampling_distribution returned NaN everywhere and sample_next failed inside
    # torch.multinomial; temperature=0 is the greedy decoding such a learner wants
    logits = torch.tensor([[1.0, 5.0, -3.0]])
    for function in (sample_next, sampling_distribution):
        with pytest.raises(ValueError, match=r"temperature=1e-39 is so small .* overflow float32"):
            function(logits, temperature=1e-39)
    with pytest.raises(ValueError, match="overflow float16"):
        sample_next(logits.half() * 100, temperature=1e-3)
    assert sample_next(logits, temperature=1e-30).item() == 1  # small but finite: the arg-max


def test_perplexity_equals_exp_of_cross_entropy():
    logits, targets = torch.randn(3, 7, 13), torch.randint(13, (3, 7))
    want = F.cross_entropy(logits.reshape(-1, 13), targets.reshape(-1)).exp()
    assert torch.allclose(perplexity(logits, targets), want, atol=1e-5)
    assert torch.allclose(perplexity(torch.zeros(4, 10), torch.arange(4)), torch.tensor(10.0))
    logits64 = logits.double()
    assert perplexity(logits64, targets).dtype == torch.float64


@pytest.mark.parametrize(
    "targets, match",
    [(torch.zeros(3, 6, dtype=torch.long), "targets"), (torch.full((3, 7), 13), "outside")],
)
def test_perplexity_rejects_bad_targets(targets, match):
    with pytest.raises(ValueError, match=match):
        perplexity(torch.randn(3, 7, 13), targets)


@pytest.mark.parametrize("dtype, atol", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
def test_cached_steps_equal_full_causal_attention(dtype, atol):
    q, k, v = (torch.randn(2, 3, 9, 8, dtype=dtype) for _ in range(3))
    full, _ = scaled_dot_product_attention(q, k, v, causal_mask(9))
    k_cache, v_cache = k[:, :, :0], v[:, :, :0]
    outputs = []
    for t in range(9):
        out, k_cache, v_cache = cached_attention_step(
            q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1], k_cache, v_cache
        )
        outputs.append(out)
    assert torch.allclose(torch.cat(outputs, 2), full, atol=atol)
    assert torch.equal(k_cache, k) and torch.equal(v_cache, v)
    reference = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(torch.cat(outputs, 2), reference, atol=atol)


def test_cached_step_gradients_flow():
    q, k, v = (torch.randn(1, 2, 1, 4, requires_grad=True) for _ in range(3))
    cache = torch.randn(1, 2, 3, 4, requires_grad=True)
    out, _, _ = cached_attention_step(q, k, v, cache, cache)
    out.sum().backward()
    assert all(t.grad is not None and t.grad.abs().sum() > 0 for t in (q, k, v, cache))


@pytest.mark.parametrize(
    "args, match",
    [
        ((torch.randn(1, 2, 2, 4),) * 3 + (torch.randn(1, 2, 3, 4),) * 2, "q_t"),
        ((torch.randn(1, 2, 1, 4),) * 3 + (torch.randn(1, 3, 3, 4),) * 2, "share"),
        ((torch.randn(2, 1, 4),) * 3 + (torch.randn(1, 2, 3, 4),) * 2, "q_t"),
    ],
)
def test_cached_step_rejects_bad_shapes(args, match):
    with pytest.raises(ValueError, match=match):
        cached_attention_step(*args)


def test_math_of_the_perplexity_base():
    # e ** nats == 2 ** bits: the perplexity does not depend on the log base
    nats = 1.6
    assert math.isclose(math.exp(nats), 2 ** (nats / math.log(2)))
