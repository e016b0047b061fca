"""A GPT from the course's own blocks (lesson 09): a decoder-only, character-level language model.

    ids (batch, seq)
      --token_embedding + position_embedding-->  (batch, seq, d_model)
      --num_layers x EncoderLayer(norm_first=True), causal self-attention-->
      --norm (final LayerNorm)--> --lm_head--> logits (batch, seq, vocab)

A GPT block is lesson 07's pre-norm encoder layer with a causal mask: self-attention that
only looks back, then the feed-forward network. There is no cross-attention, because there is
no encoder to attend to. With `tie_weights` the output layer shares its matrix with the token
embedding (the same vectors read tokens in and score them out).

Also here: `BigramLM` (the baseline: the next character from the current one only),
`lm_loss`, `evaluate_loss` (mean cross-entropy over a whole split), `generate` with or without
a KV cache (identical tokens), and `WarmupCosine`, a learning-rate schedule that warms up
linearly and then follows a cosine down to `min_lr` at the end of a step or a time budget.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .blocks import EncoderLayer, LayerNorm
from .multihead import merge_heads
from .sampling import sample_next
from .validation import check_positive_int, check_tensor

__all__ = [
    "GPTConfig",
    "GPT",
    "BigramLM",
    "KVCache",
    "lm_loss",
    "evaluate_loss",
    "generate",
    "generate_with_cache",
    "gpt_from_sizes",
    "WarmupCosine",
]

# One (keys, values) pair per layer, each (batch, heads, t, d_head).
KVCache = list[tuple[Tensor, Tensor]]


@dataclass
class GPTConfig:
    """The sizes and switches of a GPT. d_ff defaults to 4 * d_model."""

    vocab_size: int
    block_size: int = 128  # the longest context the model sees (learned positions)
    d_model: int = 128
    num_heads: int = 4
    num_layers: int = 4
    d_ff: int | None = None
    dropout: float = 0.0
    bias: bool = False  # biases in the linear layers and LayerNorms
    tie_weights: bool = True  # lm_head.weight is token_embedding.weight
    positions: bool = True  # False: no position embedding (an ablation)
    activation: str = "gelu"

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "d_model", "num_heads", "num_layers"):
            check_positive_int(getattr(self, name), name)
        if self.d_ff is None:
            self.d_ff = 4 * self.d_model
        check_positive_int(self.d_ff, "d_ff")
        if self.d_model % self.num_heads != 0:
            raise ValueError(f"d_model={self.d_model} is not divisible by "
                             f"num_heads={self.num_heads}")


class GPT(nn.Module):
    """A decoder-only Transformer: forward(ids (batch, seq)) -> logits (batch, seq, vocab).

    seq may be at most config.block_size. Position i's logits predict token i + 1 and depend
    only on tokens 0..i (causal self-attention).
    """

    def __init__(self, config: GPTConfig):
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise TypeError(f"config must be a GPTConfig, got {type(config).__name__}")
        self.config = c = config
        self.token_embedding = nn.Embedding(c.vocab_size, c.d_model)
        self.position_embedding = nn.Embedding(c.block_size, c.d_model) if c.positions else None
        self.layers = nn.ModuleList(
            EncoderLayer(c.d_model, c.num_heads, c.d_ff, dropout=c.dropout, norm_first=True,
                         activation=c.activation, bias=c.bias)
            for _ in range(c.num_layers)
        )
        self.dropout = nn.Dropout(c.dropout)
        self.norm = LayerNorm(c.d_model, bias=c.bias)
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        if c.tie_weights:
            self.lm_head.weight = self.token_embedding.weight
        self._init_weights()

    def _init_weights(self) -> None:
        # GPT-2's initialisation: N(0, 0.02) everywhere, and the two layers that write into the
        # residual stream scaled by 1/sqrt(2 * num_layers), so the stream's variance does not
        # grow with depth.
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)
        for layer in self.layers:
            for proj in (layer.self_attn.out_proj, layer.linear2):
                nn.init.normal_(proj.weight, 0.0, 0.02 / math.sqrt(2 * self.config.num_layers))

    def _check_ids(self, ids: object, start: int = 0) -> Tensor:
        check_tensor(ids, "ids", ndim=2, shape_hint="(batch, seq) of token ids",
                     dtype=(torch.int64, torch.int32))
        if start + ids.shape[1] > self.config.block_size:
            raise ValueError(f"ids has {ids.shape[1]} tokens (after {start} cached ones) but the "
                             f"model's context is block_size={self.config.block_size}; "
                             "crop it to the last block_size tokens")
        return ids

    def _embed(self, ids: Tensor, start: int) -> Tensor:
        x = self.token_embedding(ids)  # (batch, seq, d_model)
        if self.position_embedding is not None:
            positions = torch.arange(start, start + ids.shape[1], device=ids.device)  # (seq,)
            x = x + self.position_embedding(positions)  # (seq, d_model) broadcast over batch
        return self.dropout(x)

    def forward(self, ids: Tensor) -> Tensor:
        self._check_ids(ids)
        x = self._embed(ids, 0)  # (batch, seq, d_model)
        for layer in self.layers:
            x = layer(x, is_causal=True)  # (batch, seq, d_model)
        return self.lm_head(self.norm(x))  # (batch, seq, vocab)

    def forward_cached(self, ids: Tensor, cache: KVCache | None = None,
                       start: int | None = None) -> tuple[Tensor, KVCache]:
        """Logits for new tokens `ids` (batch, n) after the tokens already in `cache`.

        Returns (logits (batch, n, vocab), the cache with the new keys and values appended).
        Same numbers as forward() on the whole sequence: the past keys and values are reused,
        not recomputed. Start with cache=None. `start` is the position of ids[:, 0]; None means
        the number of tokens in the cache, the right value (a caller that passes its own, as
        exercise 09's generation loop does, must count the same way).
        """
        if start is None:
            start = 0 if not cache else cache[0][0].shape[2]
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise ValueError(f"start must be an int >= 0 (the position of ids[:, 0]), "
                             f"got {start!r}")
        self._check_ids(ids, start)
        x = self._embed(ids, start)  # (batch, n, d_model)
        new_cache: KVCache = []
        for i, layer in enumerate(self.layers):
            x, layer_cache = _layer_with_cache(layer, x, cache[i] if cache else None)
            new_cache.append(layer_cache)
        return _linear(self.lm_head, _norm(self.norm, x)), new_cache  # (batch, n, vocab)


def _layer_with_cache(layer: EncoderLayer, x: Tensor, cache: tuple[Tensor, Tensor] | None
                      ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
    """One pre-norm GPT block on new tokens x (batch, n, d_model), reusing cached keys/values.

    The same sub-modules as EncoderLayer.forward (norm1, self_attn's projections, norm2, the
    feed-forward), but the keys and values of earlier tokens come from the cache. For one new
    token this is `course_lib.sampling.cached_attention_step` (lesson 09 checks they agree),
    run with PyTorch's fused attention kernel because generation calls it at every step.
    """
    attn = layer.self_attn
    h = _norm(layer.norm1, x)  # (batch, n, d_model)
    q, k, v = (attn._split(_linear(proj, h)) for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
    # q, k, v: (batch, heads, n, d_head)
    k_all = k if cache is None else torch.cat([cache[0], k], dim=2)  # (b, h, t + n, d_head)
    v_all = v if cache is None else torch.cat([cache[1], v], dim=2)
    n, total = x.shape[1], k_all.shape[2]
    if n == 1:  # generation: the newest token may see every cached key, so no mask
        heads = F.scaled_dot_product_attention(q, k_all, v_all)  # (b, h, 1, d_head)
    else:  # a prompt: new token i sees the cache and the new tokens up to itself
        mask = torch.ones(n, total, dtype=torch.bool, device=x.device).tril(total - n)
        heads = F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=mask)
    x = x + _maybe_dropout(layer.dropout1, _linear(attn.out_proj, merge_heads(heads)))
    hidden = _linear(layer.linear1, _norm(layer.norm2, x))  # (batch, n, d_ff)
    hidden = F.gelu(hidden) if layer.activation == "gelu" else F.relu(hidden)
    hidden = _linear(layer.linear2, _maybe_dropout(layer.dropout, hidden))  # (b, n, d_model)
    return x + _maybe_dropout(layer.dropout2, hidden), (k_all, v_all)


# Generation calls the cached path once per token on one position, where the cost is the number
# of calls, not arithmetic: a module call (hooks, input checks) costs more than the maths of a
# 128-wide vector. So the cached path calls the functions behind the modules directly, with the
# modules' own weights (the same kernels, so the same numbers), and skips dropout in eval mode.
def _norm(norm: LayerNorm, x: Tensor) -> Tensor:
    return F.layer_norm(x, (norm.d_model,), norm.weight, norm.bias, norm.eps)


def _linear(linear: nn.Linear, x: Tensor) -> Tensor:
    return F.linear(x, linear.weight, linear.bias)


def _maybe_dropout(dropout: nn.Dropout, x: Tensor) -> Tensor:
    return dropout(x) if dropout.training and dropout.p > 0 else x


class BigramLM(nn.Module):
    """The baseline: the next character's logits are a learned row per current character.

    forward(ids (batch, seq)) -> logits (batch, seq, vocab); no context beyond one token.
    """

    def __init__(self, vocab_size: int):
        super().__init__()
        check_positive_int(vocab_size, "vocab_size")
        self.logits_table = nn.Embedding(vocab_size, vocab_size)
        nn.init.zeros_(self.logits_table.weight)  # starts as the uniform distribution

    def forward(self, ids: Tensor) -> Tensor:
        check_tensor(ids, "ids", ndim=2, shape_hint="(batch, seq) of token ids",
                     dtype=(torch.int64, torch.int32))
        return self.logits_table(ids)  # (batch, seq, vocab)


def lm_loss(model: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
    """Mean next-token cross-entropy (nats) of `model` on a batch (x, y), both (batch, seq)."""
    x, y = batch
    logits = model(x)  # (batch, seq, vocab)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


@torch.no_grad()
def evaluate_loss(model: nn.Module, ids: Tensor, block_size: int, batch_size: int = 64) -> float:
    """Mean cross-entropy in nats per character over ALL of `ids` (n,).

    The text is cut into consecutive windows of block_size + 1 tokens that overlap by one, so
    every token after the first is predicted exactly once, from the context of its window.
    """
    check_tensor(ids, "ids", ndim=1, shape_hint="(n,)", dtype=(torch.int64, torch.int32))
    check_positive_int(block_size, "block_size")
    check_positive_int(batch_size, "batch_size")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    ids = ids.long().to(device)
    n_full = (len(ids) - 1) // block_size
    total, count = 0.0, 0
    full = ids[: n_full * block_size + 1]
    x_all = full[:-1].reshape(n_full, block_size)  # (windows, block_size)
    y_all = full[1:].reshape(n_full, block_size)
    for lo in range(0, n_full, batch_size):
        logits = model(x_all[lo: lo + batch_size])  # (b, block_size, vocab)
        total += F.cross_entropy(logits.flatten(0, 1), y_all[lo: lo + batch_size].flatten(),
                                 reduction="sum").item()
        count += y_all[lo: lo + batch_size].numel()
    rest = ids[n_full * block_size:]  # the last, shorter window
    if len(rest) > 1:
        logits = model(rest[:-1].unsqueeze(0))
        total += F.cross_entropy(logits[0], rest[1:], reduction="sum").item()
        count += len(rest) - 1
    model.train(was_training)
    return total / count


# inference_mode, not just no_grad: it also skips autograd's version counters, which matters when
# each generated token costs dozens of small operations (the KV-cache path)
@torch.inference_mode()
def generate(model: GPT | BigramLM, ids: Tensor, max_new_tokens: int, temperature: float = 1.0,
             top_k: int | None = None, top_p: float | None = None,
             generator: torch.Generator | None = None, use_cache: bool = False) -> Tensor:
    """Continue `ids` (batch, t) by max_new_tokens tokens -> (batch, t + max_new_tokens).

    Each step feeds the last block_size tokens, takes the logits of the last position and
    draws with `sample_next` (temperature 0 = greedy). use_cache=True (GPT only) keeps every
    layer's keys and values, so each step computes one new position instead of all of them;
    the tokens are identical. When the sequence outgrows block_size, the window slides and the
    learned positions shift, so the cache is rebuilt from the cropped window.
    """
    check_tensor(ids, "ids", ndim=2, shape_hint="(batch, t) of token ids",
                 dtype=(torch.int64, torch.int32))
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) \
            or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    if use_cache and not isinstance(model, GPT):
        raise TypeError(f"use_cache=True needs a GPT, got {type(model).__name__}")
    block_size = model.config.block_size if isinstance(model, GPT) else None
    was_training = model.training
    model.eval()
    ids = ids.long()
    cache: KVCache | None = None
    cached_upto = 0  # how many tokens of `ids` the cache holds
    for _ in range(max_new_tokens):
        window = ids if block_size is None else ids[:, -block_size:]
        if not use_cache:
            logits = model(window)[:, -1]  # (batch, vocab)
        else:
            if ids.shape[1] > block_size or cache is None:  # (re)build from the window
                cache, cached_upto = None, ids.shape[1] - window.shape[1]
            logits, cache = model.forward_cached(ids[:, cached_upto:], cache)
            logits, cached_upto = logits[:, -1], ids.shape[1]
        next_id = sample_next(logits, temperature, top_k, top_p, generator)  # (batch,)
        ids = torch.cat([ids, next_id[:, None]], dim=1)
    model.train(was_training)
    return ids


@torch.inference_mode()
def generate_with_cache(model: GPT, ids: Tensor, max_new_tokens: int, temperature: float = 1.0,
                        top_k: int | None = None, generator: torch.Generator | None = None
                        ) -> Tensor:
    """Exercise 09's generation loop, written out: the prompt once, then each new token once.

    ids (batch, t) -> (batch, t + max_new_tokens), with t + max_new_tokens <= block_size. Every
    model call is forward_cached(new_ids, cache, start) with the new tokens' own position; the
    tokens equal those of generate(..., use_cache=False) under the same generator state.
    """
    total = ids.shape[1] + max_new_tokens
    if total > model.config.block_size:
        raise ValueError(f"prompt + new tokens = {total} exceeds block_size "
                         f"{model.config.block_size}; use generate, which slides the window")
    logits, cache = model.forward_cached(ids, None, 0)  # the prompt: (batch, t, vocab)
    for _ in range(max_new_tokens):
        next_id = sample_next(logits[:, -1], temperature, top_k, None, generator)  # (batch,)
        ids = torch.cat([ids, next_id[:, None]], dim=1)
        logits, cache = model.forward_cached(ids[:, -1:], cache, ids.shape[1] - 1)
    return ids


def gpt_from_sizes(vocab_size: int, block_size: int, d_model: int, num_heads: int,
                   num_layers: int) -> GPT:
    """The course's GPT built from the five sizes of exercise 09's capstone (d_ff = 4 d_model,
    no biases, tied output layer, GELU, pre-norm)."""
    return GPT(GPTConfig(vocab_size=vocab_size, block_size=block_size, d_model=d_model,
                         num_heads=num_heads, num_layers=num_layers))


class WarmupCosine:
    """Learning rate: linear warm-up to max_lr over warmup_steps, then a cosine to min_lr.

    The cosine runs over total_steps, or over total_seconds of wall-clock time from the first
    step() (a schedule fitted to a time budget: it reaches min_lr when the time is up). Call
    step() after every optimizer step, as with a torch scheduler (`course_lib.train.train`
    does). `lr_at(progress)` is the curve itself, for plots.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, max_lr: float, min_lr: float,
                 warmup_steps: int, total_steps: int | None = None,
                 total_seconds: float | None = None):
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer, got "
                            f"{type(optimizer).__name__}")
        if not 0 <= min_lr <= max_lr:
            raise ValueError(f"need 0 <= min_lr <= max_lr, got min_lr={min_lr}, max_lr={max_lr}")
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
            raise ValueError(f"warmup_steps must be an int >= 0, got {warmup_steps!r}")
        if (total_steps is None) == (total_seconds is None):
            raise ValueError("give exactly one of total_steps and total_seconds")
        if total_steps is not None:
            check_positive_int(total_steps, "total_steps")
        elif not total_seconds > 0:
            raise ValueError(f"total_seconds must be positive, got {total_seconds!r}")
        self.optimizer, self.max_lr, self.min_lr = optimizer, max_lr, min_lr
        self.warmup_steps, self.total_steps, self.total_seconds = (warmup_steps, total_steps,
                                                                   total_seconds)
        self.steps_done = 0
        self._start: float | None = None
        self._set(self.lr_now())

    def lr_at(self, progress: float) -> float:
        """The cosine part at progress in [0, 1]: max_lr at 0, min_lr at 1 and after."""
        progress = min(max(progress, 0.0), 1.0)
        return self.min_lr + 0.5 * (self.max_lr - self.min_lr) * (1 + math.cos(math.pi * progress))

    def lr_now(self) -> float:
        step = self.steps_done
        if step < self.warmup_steps:
            return self.max_lr * (step + 1) / self.warmup_steps
        if self.total_steps is not None:
            span = max(self.total_steps - self.warmup_steps, 1)
            return self.lr_at((step - self.warmup_steps) / span)
        elapsed = 0.0 if self._start is None else time.perf_counter() - self._start
        return self.lr_at(elapsed / self.total_seconds)

    def _set(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def step(self) -> None:
        if self._start is None:
            self._start = time.perf_counter()
        self.steps_done += 1
        self._set(self.lr_now())
