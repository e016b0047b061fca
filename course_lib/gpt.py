"""A GPT from the course's own blocks (lesson 09): a decoder-only, character-level language model.

    ids (batch, seq)
      --token_embedding + position_embedding (lesson 04's learned positions)-->  (batch, seq, d)
      --num_layers x EncoderLayer(norm_first=True) with causal self-attention (lessons 05, 07)-->
      --norm (final LayerNorm)--> --lm_head--> logits (batch, seq, vocab)

A GPT block is lesson 07's pre-norm encoder layer with a causal mask: self-attention that
only looks back, then the feed-forward network. There is no cross-attention, because there is
no encoder to attend to. With `tie_weights` the output layer shares its matrix with the token
embedding (the same vectors read tokens in and score them out).

Generation with a KV cache (`forward_cached`) runs through the same layers: each layer's
attention appends the new tokens' keys and values to its `LayerCache` (course_lib.kv_cache).

Also here: `BigramLM` (the baseline: the next character from the current one only) and
`generate` with or without the cache (identical tokens). The loss, `evaluate_loss` and the
learning-rate schedule `WarmupCosine` live with the other training pieces in `course_lib.train`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from .blocks import EncoderLayer, LayerNorm
from .datasets import CHECKPOINT_PATH, load_shakespeare_checkpoint
from .kv_cache import KVCache
from .positional import LearnedPositionalEmbedding
from .sampling import sample_next
from .validation import (
    at_the_door,
    check_choice,
    check_context,
    check_dropout,
    check_flag,
    check_heads_divide,
    check_ids,
    check_non_negative_int,
    check_positive_int,
    door,
)

__all__ = [
    "GPTConfig",
    "GPT",
    "BigramLM",
    "generate",
    "generate_with_cache",
    "gpt_from_sizes",
    "CHECKPOINT_PATH",
    "load_shakespeare_gpt",
]

# lesson 09's longer-trained GPT (tools/train_checkpoint.py writes it; its provenance is inside)


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
    # "learned": lesson 04's learned position vectors, added to the token embeddings (GPT-2);
    # "rope": lesson 04's rotary positions, applied to every query and key (Llama);
    # "none": no positions at all (an ablation: causal attention still sees order a little)
    positions: str = "learned"
    # of the feed-forward: "gelu", "relu", "relu2" (ReLU squared) or "gelu_tanh" (GPT-2's)
    activation: str = "gelu"
    layer_norm_eps: float = 1e-5  # every LayerNorm's (GPT-2's too)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "d_model", "num_heads", "num_layers"):
            check_positive_int(getattr(self, name), name)
        check_choice(self.positions, "positions", ("learned", "rope", "none"))
        if self.d_ff is None:
            self.d_ff = 4 * self.d_model
        check_positive_int(self.d_ff, "d_ff")
        check_heads_divide(self.d_model, self.num_heads)
        check_dropout(self.dropout)
        check_flag(self.bias, "bias")  # bias="no" would be truthy: biases on
        check_flag(self.tie_weights, "tie_weights")


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
        self.position_embedding = (
            LearnedPositionalEmbedding(c.block_size, c.d_model)
            if c.positions == "learned"
            else None
        )
        self.dropout = nn.Dropout(c.dropout)
        self.layers = nn.ModuleList(
            EncoderLayer(
                c.d_model,
                c.num_heads,
                c.d_ff,
                dropout=c.dropout,
                norm_first=True,
                activation=c.activation,
                bias=c.bias,
                layer_norm_eps=c.layer_norm_eps,
                rope=c.positions == "rope",
            )
            for _ in range(c.num_layers)
        )
        self.norm = LayerNorm(c.d_model, c.layer_norm_eps, bias=c.bias)
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
            for proj in (layer.self_attn.out_proj, layer.feed_forward.linear2):
                nn.init.normal_(proj.weight, 0.0, 0.02 / math.sqrt(2 * self.config.num_layers))

    def _embed(self, ids: Tensor, start: int) -> Tensor:
        x = self.token_embedding(ids)  # (batch, seq, d_model)
        if self.position_embedding is not None:  # + the vectors of positions start, start + 1..
            x = self.position_embedding(x, start)
        return self.dropout(x)

    @classmethod
    def from_gpt2(cls, state_dict: dict[str, Tensor], num_heads: int | None = None) -> GPT:
        """A GPT with GPT-2's weights: `state_dict` as Hugging Face stores GPT-2 (its
        pytorch_model.bin, with or without the "transformer." prefix). Sizes come from the
        weights' shapes; num_heads (not in the shapes) defaults to d_model / 64, GPT-2's head
        size at every scale. The key map is `course_lib.gpt2.gpt2_to_course`."""
        from .gpt2 import gpt_from_gpt2

        return gpt_from_gpt2(cls, state_dict, num_heads)

    @door
    def forward(self, ids: Tensor) -> Tensor:
        if at_the_door():
            check_context(ids, 0, self.config.block_size, self.config.vocab_size)
        x = self._embed(ids, 0)  # (batch, seq, d_model)
        for layer in self.layers:
            x = layer(x, is_causal=True)  # (batch, seq, d_model)
        return self.lm_head(self.norm(x))  # (batch, seq, vocab)

    @door
    def forward_cached(
        self, ids: Tensor, cache: KVCache | None = None, start: int | None = None
    ) -> tuple[Tensor, KVCache]:
        """Logits for new tokens `ids` (batch, n) after the tokens already in `cache`.

        Returns (logits (batch, n, vocab), a cache with the new keys and values appended; the
        cache passed in is left as it was). Same numbers as forward() on the whole sequence:
        the past keys and values are reused, not recomputed. Start with cache=None. `start`
        is the position of ids[:, 0]; None means the number of tokens in the cache, the right
        value (a caller that passes its own, as exercise 09's generation loop does, must count
        the same way).
        """
        checks = at_the_door()
        if checks and cache is not None:
            self._check_cache(cache)
        cache = KVCache.empty(len(self.layers)) if cache is None else cache.copy()
        start = cache.num_tokens if start is None else start
        if checks:
            check_context(ids, start, self.config.block_size, self.config.vocab_size)
            self._check_cache(cache, len(ids))
        x = self._embed(ids, start)  # (batch, n, d_model)
        for layer, layer_cache in zip(self.layers, cache, strict=True):
            x = layer(x, is_causal=True, cache=layer_cache)  # appends to layer_cache
        return self.lm_head(self.norm(x)), cache  # (batch, n, vocab)

    def _check_cache(self, cache: object, batch: int | None = None) -> None:
        """A KVCache from this model's forward_cached, one LayerCache per layer, holding keys
        (batch, kv_heads, t, d_head) of this model's heads and of the batch of `ids`: another
        batch would broadcast into it silently."""
        if not isinstance(cache, KVCache):
            raise TypeError(
                "cache must be the KVCache that forward_cached returned (or None to start), "
                f"got {type(cache).__name__}"
            )
        if len(cache) != len(self.layers):
            raise ValueError(
                f"cache has {len(cache)} layers but this model has num_layers="
                f"{len(self.layers)}; continue a cache with the model that made it"
            )
        keys = cache[0].keys
        if batch is None or keys is None:
            return
        attn = self.layers[0].self_attn
        if (keys.shape[0], keys.shape[1], keys.shape[3]) != (batch, attn.num_kv_heads, attn.d_head):
            raise ValueError(
                f"cache holds keys of shape {tuple(keys.shape)}, (batch, kv_heads, t, d_head), "
                f"but ids has batch={batch} and this model has kv_heads={attn.num_kv_heads}, "
                f"d_head={attn.d_head}; continue a cache with the same batch of sequences, "
                "on the model that made it"
            )


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
        check_ids(ids, "ids", vocab_size=self.logits_table.num_embeddings)
        return self.logits_table(ids)  # (batch, seq, vocab)


# inference_mode, not just no_grad: it also skips autograd's version counters, which matters when
# each generated token costs dozens of small operations (the KV-cache path). A door: the prompt is
# checked once here, and the model calls of each step skip their checks.
@door
@torch.inference_mode()
def generate(
    model: GPT | BigramLM,
    ids: Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = False,
) -> Tensor:
    """Continue `ids` (batch, t) by max_new_tokens tokens -> (batch, t + max_new_tokens).

    Each step feeds the last block_size tokens, takes the logits of the last position and
    draws with `sample_next` (temperature 0 = greedy). use_cache=True (GPT only) keeps every
    layer's keys and values, so each step computes one new position instead of all of them;
    the tokens are identical. When the sequence outgrows block_size, the window slides and the
    learned positions shift, so the cache is rebuilt from the cropped window.
    """
    vocab_size = model.config.vocab_size if isinstance(model, GPT) else None
    check_ids(ids, "ids", "t", vocab_size)
    check_non_negative_int(max_new_tokens, "max_new_tokens")
    check_flag(use_cache, "use_cache")
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


@door
@torch.inference_mode()
def generate_with_cache(
    model: GPT,
    ids: Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Exercise 09's generation loop, written out: the prompt once, then each new token once.

    ids (batch, t) -> (batch, t + max_new_tokens), with t + max_new_tokens <= block_size. Every
    model call is forward_cached(new_ids, cache, start) with the new tokens' own position; the
    tokens equal those of generate(..., use_cache=False) under the same generator state.
    """
    check_ids(ids, "ids", "t", model.config.vocab_size)
    check_non_negative_int(max_new_tokens, "max_new_tokens")
    total = ids.shape[1] + max_new_tokens
    if total > model.config.block_size:
        raise ValueError(
            f"prompt + new tokens = {total} exceeds block_size "
            f"{model.config.block_size}; use generate, which slides the window"
        )
    logits, cache = model.forward_cached(ids, None, 0)  # the prompt: (batch, t, vocab)
    for _ in range(max_new_tokens):
        next_id = sample_next(logits[:, -1], temperature, top_k, None, generator)  # (batch,)
        ids = torch.cat([ids, next_id[:, None]], dim=1)
        logits, cache = model.forward_cached(ids[:, -1:], cache, ids.shape[1] - 1)
    return ids


def gpt_from_sizes(
    vocab_size: int, block_size: int, d_model: int, num_heads: int, num_layers: int, **options
) -> GPT:
    """The course's GPT built as exercise 09's capstone is: the five sizes, then any of
    GPTConfig's options by name (d_ff, bias, activation, positions, layer_norm_eps,
    tie_weights); by default d_ff = 4 d_model, no biases, tied output layer, GELU, pre-norm."""
    return GPT(
        GPTConfig(
            vocab_size=vocab_size,
            block_size=block_size,
            d_model=d_model,
            num_heads=num_heads,
            num_layers=num_layers,
            **options,
        )
    )


def load_shakespeare_gpt(path: str | Path | None = None) -> tuple[GPT, str, dict]:
    """Lesson 09's longer-trained GPT -> (model in eval mode, vocabulary, provenance).

    `vocabulary` is the string of its characters in id order (lesson 09's
    CharTokenizer.from_text(load_shakespeare(), specials=()) has the same ids); `provenance`
    says how it was trained: command, commit, steps, time, machine and validation loss.
    """
    saved = load_shakespeare_checkpoint(path)
    model = GPT(GPTConfig(**saved["config"]))
    model.load_state_dict(saved["state_dict"])
    return model.eval(), saved["vocabulary"], saved["provenance"]
