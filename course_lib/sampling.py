"""Sampling the next token (lesson 09).

    sampling_distribution  logits (batch, vocab) -> the probabilities a sampler draws from:
                           softmax(logits / temperature), then top-k, then top-p, renormalised
    sample_next            one draw per row from that distribution (greedy when temperature=0)
    perplexity             exp(mean cross-entropy in nats), defined in `course_lib.train` beside
                           the language-model loss it exponentiates; named here too, where
                           lesson 09 first reaches it (`sampling.perplexity`)

Filtering order (as Hugging Face `generate` does): temperature first, then keep the `top_k`
most likely tokens (and any tied with the k-th), then the smallest set of the most likely
tokens whose probabilities add up to at least `top_p` (the token that crosses `top_p` is kept).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .train import perplexity
from .validation import check_logits, check_sampling_options

__all__ = ["sampling_distribution", "sample_next", "perplexity"]


def sampling_distribution(
    logits: Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None
) -> Tensor:
    """logits (batch, vocab) -> probabilities (batch, vocab) that `sample_next` draws from.

    temperature > 0 divides the logits (a sharper distribution below 1, a flatter one above);
    temperature = 0 puts all the mass on the most likely token (greedy). top_k keeps the k
    most likely tokens and those tied with the k-th largest logit; top_p keeps the smallest set
    of most likely tokens whose probability reaches top_p. Everything else gets probability
    exactly 0; rows sum to 1.
    """
    check_logits(logits)
    vocab = logits.shape[-1]
    check_sampling_options(temperature, top_k, top_p)
    if temperature == 0:  # greedy: a one-hot on the arg-max
        return torch.zeros_like(logits).scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    logits = logits / temperature  # (batch, vocab): temperature acts BEFORE the softmax
    if temperature < 1 and not bool(torch.isfinite(logits.detach().amax(dim=-1)).all()):
        raise ValueError(
            f"temperature={temperature} is so small that logits / temperature overflow "
            f"{str(logits.dtype).replace('torch.', '')} (beyond {torch.finfo(logits.dtype).max:.3g}"
            "), which would make every probability NaN; use temperature=0 for greedy decoding"
        )
    if top_k is not None and top_k < vocab:
        kth_largest = torch.topk(logits, top_k, dim=-1).values[..., -1:]  # (batch, 1)
        logits = logits.masked_fill(logits < kth_largest, float("-inf"))  # ties at k are kept
    probs = torch.softmax(logits, dim=-1)  # (batch, vocab)
    if top_p is not None and top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)  # (batch, vocab)
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # probability of better tokens
        keep_sorted = mass_before < top_p  # keeps the token that crosses top_p
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)  # (batch, vocab)
        probs = probs.masked_fill(~keep, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def sample_next(
    logits: Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """logits (batch, vocab) -> the next token of each row, long (batch,).

    Draws from `sampling_distribution(logits, temperature, top_k, top_p)` with
    `torch.multinomial` and the given `generator` (same generator state, same tokens).
    temperature = 0 is greedy decoding: the arg-max, no randomness.
    """
    probs = sampling_distribution(logits, temperature, top_k, top_p)  # (batch, vocab)
    if temperature == 0:
        return logits.argmax(dim=-1)  # (batch,)
    draws = torch.multinomial(probs.float(), num_samples=1, generator=generator)  # (batch, 1)
    return draws.squeeze(-1)  # (batch,)
