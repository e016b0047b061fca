"""The KV cache (lesson 09): generate a token without recomputing the keys and values of the past.

A decoder's causal self-attention at step t needs the keys and values of tokens 0..t, but those
of tokens 0..t-1 are the same as at the previous step: only the newest token's are new.

    cached_attention_step  one head-batched attention step, written out: append the newest key
                           and value to the cache, attend from the newest query to all of them
    LayerCache             what one attention layer keeps: keys and values (batch, heads, t, d_head)
    KVCache                one LayerCache per layer of a model (`GPT.forward_cached` uses it)

`MultiHeadAttention(..., cache=layer_cache)` appends its new keys and values to `layer_cache` and
attends over all of them, so cached generation runs through the very layers that training uses.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .attention import scaled_dot_product_attention
from .validation import at_the_door, check_floating, check_same_dtype, check_tensor, door

__all__ = ["cached_attention_step", "LayerCache", "KVCache"]


@door
def cached_attention_step(
    q_t: Tensor, k_t: Tensor, v_t: Tensor, k_cache: Tensor, v_cache: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Attention for the newest token, reusing the keys and values of the earlier ones.

    q_t, k_t, v_t: (batch, heads, 1, d_head), the newest token's query, key and value.
    k_cache, v_cache: (batch, heads, t, d_head), the keys and values of the t earlier tokens
    (t may be 0). Returns (output_t (batch, heads, 1, d_head), k_cache, v_cache) with the new
    caches (batch, heads, t + 1, d_head): the old ones with k_t and v_t appended along the
    sequence axis. output_t equals the last row of full causal attention over all t + 1
    tokens: the newest token may attend to every earlier one and to itself, so no mask.
    """
    if at_the_door():
        for t, name in ((q_t, "q_t"), (k_t, "k_t"), (v_t, "v_t")):
            check_tensor(t, name, ndim=4, shape_hint="(batch, heads, 1, d_head)")
            check_floating(t, name)
            if t.shape[2] != 1:
                raise ValueError(
                    f"{name} must hold one token, shape (batch, heads, 1, d_head), "
                    f"got shape {tuple(t.shape)}"
                )
        for t, name in ((k_cache, "k_cache"), (v_cache, "v_cache")):
            check_tensor(t, name, ndim=4, shape_hint="(batch, heads, t, d_head)", allow_empty=True)
        if (
            k_t.shape != q_t.shape
            or tuple(k_cache.shape[:2]) != tuple(q_t.shape[:2])
            or k_cache.shape[-1] != q_t.shape[-1]
        ):
            raise ValueError(
                f"q_t {tuple(q_t.shape)}, k_t {tuple(k_t.shape)} and k_cache "
                f"{tuple(k_cache.shape)} must share batch, heads and d_head"
            )
        if (
            v_t.shape[:3] != q_t.shape[:3]
            or tuple(v_cache.shape[:3]) != tuple(k_cache.shape[:3])
            or v_cache.shape[-1] != v_t.shape[-1]
        ):
            raise ValueError(
                f"v_t {tuple(v_t.shape)} and v_cache {tuple(v_cache.shape)} must match "
                f"k_t {tuple(k_t.shape)} and k_cache {tuple(k_cache.shape)} in batch, "
                "heads and length, and share their d_head"
            )
        check_same_dtype(
            (q_t, k_t, v_t, k_cache, v_cache),
            ("q_t", "k_t", "v_t", "k_cache", "v_cache"),
            "convert the cache with k_cache.to(q_t.dtype)",
        )
    k_cache = torch.cat([k_cache, k_t], dim=-2)  # (batch, heads, t + 1, d_head)
    v_cache = torch.cat([v_cache, v_t], dim=-2)  # (batch, heads, t + 1, d_head)
    output_t, _ = scaled_dot_product_attention(q_t, k_cache, v_cache)  # (batch, heads, 1, d_head)
    return output_t, k_cache, v_cache


class LayerCache:
    """The keys and values one attention layer has seen, each (batch, heads, t, d_head).

    `append(k, v)` adds the new tokens' keys and values (batch, heads, n, d_head) and returns
    all of them (batch, heads, t + n, d_head). `len(cache)` is t, the number of cached tokens.

    The tensors live in a buffer with room to spare (its capacity doubles when full), so an
    append writes only the n new positions: a `torch.cat` would copy all t old ones each step.
    `keys` and `values` are views of the first t positions. Copies of a cache share the buffer
    until one appends where another already wrote; that one moves to a buffer of its own, so
    no cache's tokens ever change.
    """

    def __init__(self, keys: Tensor | None = None, values: Tensor | None = None):
        self._k = self._v = None
        if keys is not None or values is not None:
            if keys is None or values is None:
                raise ValueError("give both keys and values (or neither, for an empty cache)")
            self._check_new(keys, values, "keys", "values")
        self._k, self._v = keys, values  # buffers (batch, heads, capacity, d_head)
        self._len = 0 if keys is None else keys.shape[2]
        self._filled = [self._len]  # positions written in the buffer, shared with copies

    @property
    def keys(self) -> Tensor | None:
        return None if self._k is None else self._k[:, :, : self._len]

    @property
    def values(self) -> Tensor | None:
        return None if self._v is None else self._v[:, :, : self._len]

    @door
    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        if at_the_door():  # a learner's call; MultiHeadAttention's own call skips the checks
            self._check_new(k, v)
        t, n = self._len, k.shape[2]
        if self._k is None or t + n > self._k.shape[2] or self._filled[0] != t:
            self._k, self._v = self._grown(self._k, k, t + n), self._grown(self._v, v, t + n)
            self._filled = [t]  # a buffer of its own: earlier copies keep the old one
        self._k[:, :, t : t + n], self._v[:, :, t : t + n] = k, v
        self._len = self._filled[0] = t + n
        return self.keys, self.values

    def _check_new(self, k: Tensor, v: Tensor, k_name: str = "k", v_name: str = "v") -> None:
        """New keys and values: floating (batch, heads, n, d_head), one value per key, and the
        batch, heads, d_head, dtype and device of the tokens already cached; a mismatch would
        otherwise broadcast, or be cast, silently into the cache."""
        hint = "(batch, heads, n, d_head)"
        for t, name in ((k, k_name), (v, v_name)):
            check_tensor(t, name, ndim=4, shape_hint=hint, allow_empty=True)
            check_floating(t, name)
        if k.shape[:3] != v.shape[:3]:
            raise ValueError(
                f"{k_name} {tuple(k.shape)} and {v_name} {tuple(v.shape)} must have the same "
                "batch, heads and length n: each key has one value"
            )
        check_same_dtype((k, v), (k_name, v_name), f"convert {v_name} with .to({k_name}.dtype)")
        if k.device != v.device:
            raise ValueError(f"{k_name} is on {k.device} but {v_name} is on {v.device}")
        if self._k is None:
            return
        for new, old, name in ((k, self.keys, k_name), (v, self.values, v_name)):
            if new.shape[:2] != old.shape[:2] or new.shape[3] != old.shape[3]:
                raise ValueError(
                    f"{name} has shape {tuple(new.shape)} but the cache holds {len(self)} tokens "
                    f"of shape {tuple(old.shape)}: new tokens must have its batch, heads and "
                    f"d_head, {hint} with only n free"
                )
        fix = f"convert them with .to({self._k.dtype})"
        check_same_dtype((k, self._k), (k_name, "the cache"), fix)
        if k.device != self._k.device:
            raise ValueError(
                f"{k_name} is on {k.device} but the cache is on {self._k.device}; move "
                f"them with .to('{self._k.device}')"
            )

    def _grown(self, old: Tensor | None, new: Tensor, needed: int) -> Tensor:
        """A buffer with room for twice `needed` positions, holding the first t of `old`."""
        shape = (*new.shape[:2], 2 * needed, new.shape[3])
        buffer = new.new_empty(shape)
        if old is not None:
            buffer[:, :, : self._len] = old[:, :, : self._len]
        return buffer

    def copy(self) -> LayerCache:
        twin = LayerCache()
        twin._k, twin._v, twin._len, twin._filled = self._k, self._v, self._len, self._filled
        return twin

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        shape = None if self._k is None else tuple(self.keys.shape)
        return f"LayerCache(keys: {shape})"


class KVCache(list):
    """One `LayerCache` per layer: `KVCache.empty(num_layers)`; `len(cache[0])` tokens cached.

    `copy()` gives a cache that can grow without changing this one (`LayerCache.copy`), so a
    caller's old cache stays as it was.
    """

    @classmethod
    def empty(cls, num_layers: int) -> KVCache:
        return cls(LayerCache() for _ in range(num_layers))

    def copy(self) -> KVCache:
        return KVCache(layer.copy() for layer in self)

    @property
    def num_tokens(self) -> int:
        return len(self[0]) if self else 0
