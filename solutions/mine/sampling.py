"""Your own code from the exercises: the cells marked `# save in mine/sampling.py`.

Edit those cells in their notebook, not this file: running a marked cell rewrites its part
below (between its ">>> cell" and "<<< cell" lines) and keeps the others. Later exercises use
these pieces through `mine("exNN.name")`, which checks them first.
"""
# ruff: noqa
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from course_lib.mine import mine


# >>> cell: sample_next
# save in mine/sampling.py
def sample_next(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    """logits (batch, vocab) -> next token ids, long (batch,)."""
    ### BEGIN SOLUTION
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be at least 1, got {top_k}")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / temperature  # (batch, vocab)
    if top_k is not None:
        kth_largest = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth_largest, float("-inf"))
    probs = torch.softmax(logits, dim=-1)  # (batch, vocab)
    if top_p is not None:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
        keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, mass_before < top_p)
        probs = probs.masked_fill(~keep, 0.0)
    probs = probs / probs.sum(dim=-1, keepdim=True)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (batch,)
    ### END SOLUTION
# <<< cell: sample_next


# >>> cell: perplexity
# save in mine/sampling.py
def perplexity(logits, targets):
    """logits (..., vocab), targets (...) long -> scalar tensor exp(mean cross-entropy)."""
    ### BEGIN SOLUTION
    if tuple(targets.shape) != tuple(logits.shape[:-1]):
        raise ValueError(
            f"targets has shape {tuple(targets.shape)}, expected {tuple(logits.shape[:-1])}"
        )
    log_probs = torch.log_softmax(logits, dim=-1)  # (..., vocab)
    nll = -log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (...)
    return nll.mean().exp()
    ### END SOLUTION
# <<< cell: perplexity


# >>> cell: generate
# save in mine/sampling.py
def generate(model, ids, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    """ids (batch, t) -> (batch, t + max_new_tokens): the prompt and the sampled continuation,
    one new token per model call through model.forward_cached(new_ids, cache, start).
    """
    ### BEGIN SOLUTION
    with torch.no_grad():
        logits, cache = model.forward_cached(ids, None, 0)  # the prompt: (batch, t, vocab)
        for _ in range(max_new_tokens):
            next_id = sample_next(logits[:, -1], temperature, top_k, None, generator)  # (batch,)
            ids = torch.cat([ids, next_id[:, None]], dim=1)  # (batch, t + 1)
            logits, cache = model.forward_cached(ids[:, -1:], cache, ids.shape[1] - 1)
    return ids
    ### END SOLUTION
# <<< cell: generate
