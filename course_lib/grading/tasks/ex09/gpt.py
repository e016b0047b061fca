"""ex09.GPT, the capstone: the learner's GPT, built from the learner's own pieces (course_lib.mine),
with course_lib.gpt.GPT's parameter names and a `forward_cached` for generation.

Graded without training: GPT-2's init, then, with the reference's weights loaded, the logits
(learned, rotary and no positions; GELU, ReLU^2 and GPT-2's tanh GELU; with and without biases),
one optimisation step, `forward_cached` against `forward`, and the tokens a cached generation
loop draws. A course piece that stands in for one of the learner's (borrowed) is named and
halves the score (`Task.borrowable`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ...core import Case, GradingError, compare_values, is_number, register
from ..common import ModuleTask, without_dropout
from ._shared import capstone_name, random_gpt_state

MISTAKES = {
    "no_causal": "a position sees the future: the self-attention needs "
    "the causal mask (True on and below the diagonal)",
    "post_norm": "the GPT's blocks are pre-norm: x = x + attn(norm1(x)), "
    "then x = x + feed_forward(norm2(x)); you normalised after adding (post-norm)",
    "torch_mask": "the causal mask is inverted: here True means 'may attend' (True on and below "
    "the diagonal, tril); PyTorch's nn.MultiheadAttention uses True = blocked",
    "attend_raw": "the self-attention must read the normalised input: "
    "x = x + self_attn(norm1(x)), not self_attn(x)",
    "relu": 'the feed-forward\'s activation is the `activation` argument ("gelu" by default, '
    '"relu2" for the course\'s checkpoint, "gelu_tanh" for GPT-2): pass it on to your '
    "FeedForward instead of always using ReLU",
    "triu": "the causal mask is the upper triangle (triu): each position would see the "
    "future and not the past. True must be on and below the diagonal (key j <= "
    "query i): your causal_mask(n) from exercise 05",
    "tanh_gelu": "this GELU is the tanh approximation (approximate='tanh', GPT-2's); "
    'activation="gelu" is the exact F.gelu(x), and "gelu_tanh" the approximation: they '
    "differ by up to about 1e-3, more than the check allows",
    "lesson_positions": "lesson 09's position_embedding is a module that ADDS positions to its "
    "input; here position_embedding is an nn.Embedding of the positions, so "
    "look them up and add them: token_embedding(ids) + "
    "position_embedding(torch.arange(start, start + seq))",
    "no_positions": 'with positions="learned", add the position embedding of the positions '
    "start .. start + seq - 1 to the token embedding",
    "rope_ignored": 'with positions="rope", rotate the queries and the keys (not the values) '
    "by their positions with your apply_rope, before the attention scores",
    "no_final_norm": "apply the final LayerNorm `norm` to the last block's output before lm_head",
    "untied": "with tie_weights (the default), the output layer must share its matrix with the "
    "token embedding: self.lm_head.weight = self.token_embedding.weight (the forward pass "
    "agrees, but one step of training updates the two copies separately)",
    "cache_positions_restart": "forward_cached gets `start`, the position of its first new "
    "token: the new tokens sit at start, start + 1, ..., not at 0, 1, ... (learned positions "
    "and rotary positions both need it)",
    "eps_ignored": "pass layer_norm_eps on to every LayerNorm (norm1, norm2 and the final norm): "
    "LayerNorm(d_model, layer_norm_eps, bias=bias)",
    "final_eps_ignored": "pass layer_norm_eps on to the final norm too (GPT's self.norm), not "
    "only to the blocks' LayerNorms",
    "block_eps_ignored": "pass layer_norm_eps on to the blocks' LayerNorms too (norm1 and norm2 "
    "in Block, through its `eps`), not only to the final norm",
    "norm1_eps_ignored": "pass layer_norm_eps on to norm1 too: in Block, "
    "LayerNorm(d_model, eps, bias=bias) for norm1 as for norm2; norm1 keeps the default 1e-5",
    "norm2_eps_ignored": "pass layer_norm_eps on to norm2 too: in Block, "
    "LayerNorm(d_model, eps, bias=bias) for norm2 as for norm1; norm2 keeps the default 1e-5",
    "always_tied": "tie the output layer to the token embedding only when tie_weights is True: "
    "with tie_weights=False, lm_head keeps its own matrix",
    "cache_not_kept": "forward_cached must return the cache with the new tokens' keys and values "
    "appended (your cached_attention_step returns the grown caches): a later token attends to "
    "every earlier one",
    "normed_residual": "pre-norm normalises only the input of each sub-layer: the residual adds "
    "to the un-normalised x, x = x + self_attn(norm1(x)), then x = x + feed_forward(norm2(x)); "
    "writing x = norm1(x) first replaces the residual stream by its normalised copy",
    "feed_raw": "the feed-forward must read the normalised stream too: x = x + "
    "feed_forward(norm2(x)); norm2 is built but never used",
    "norm1_twice": "each sub-layer has its own LayerNorm: the feed-forward reads norm2(x), "
    "x = x + feed_forward(norm2(x)), not norm1(x) a second time",
    "scale_embed": "a GPT adds the token and position embeddings as they are, x = "
    "token_embedding(ids) + position_embedding(positions): the * sqrt(d_model) of lesson 08's "
    "translator (and of the original Transformer) is not part of GPT-2",
    "rope_queries_only": "rotate the keys too, with the same positions as the queries: the "
    "score q . k depends on the offset between two positions only when both are rotated",
    "rope_keys_only": "rotate the queries too, with the same positions as the keys: the "
    "score q . k depends on the offset between two positions only when both are rotated",
    "rope_before_split": "split the heads first, then rotate: apply_rope on the (batch, n, "
    "d_model) projections pairs the features across the whole width with d_model's "
    "frequencies; each head is rotated on its own, apply_rope on (batch, heads, n, d_head)",
    "rope_values": "rotate only the queries and the keys with apply_rope: the scores q . k then "
    "depend on the offset between two positions; the values are not rotated",
    "chunk_ignores_cache": "with a cache, every new token attends to the cached keys and values "
    "too, also when one call brings several new tokens: feed them one at a time to your "
    "cached_attention_step, each with the caches grown by the tokens before it",
    "fixed_mask": "build the causal mask for the n tokens of each call, causal_mask(n) (or a "
    "buffer of block_size cut to n): one built once at a fixed size, lesson 09's 64, breaks "
    "on longer inputs, the course checkpoint's 256 tokens or GPT-2's 1,024",
    "squeeze": "a bare .squeeze() drops every axis of length 1: with one sequence (batch 1) or "
    "one head the batch or heads axis goes too; name the axis, .squeeze(2), or keep it",
    "activation_ignored": "the feed-forward's activation is the `activation` argument, not "
    'always its default "gelu": "relu2" for the course\'s checkpoint, "gelu_tanh" for GPT-2; '
    "pass it on to your FeedForward",
}

# The course pieces a learner's GPT may be built with when its own version is missing: named
# and half marks (Task.borrowable), not zero. The softmax too: the learner's masked_attention
# takes exercise 02's with mine(), the course's while the learner's fails its check.
BORROWABLE = tuple(
    "course_lib.multihead.MultiHeadAttention course_lib.multihead.split_heads "
    "course_lib.multihead.merge_heads course_lib.positional.apply_rope "
    "course_lib.masking.causal_mask course_lib.attention.scaled_dot_product_attention "
    "course_lib.attention.softmax course_lib.norms.LayerNorm course_lib.blocks.FeedForward "
    "course_lib.kv_cache.cached_attention_step".split()
)

_SIZES = ("vocab_size", "block_size", "d_model", "num_heads", "num_layers")
_OPTIONS = {"d_ff": None, "bias": False, "activation": "gelu", "positions": "learned"}
_OPTIONS |= {"layer_norm_eps": 1e-5, "tie_weights": True}

_ACTIVATIONS = {
    "gelu": F.gelu,
    "relu": F.relu,
    "relu2": lambda x: F.relu(x).square(),
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
}


def _rope(x, positions):
    """Rotary positions, pairs (2i, 2i + 1) rotated by position * 10000^(-2i/d)."""
    d = x.shape[-1]
    angles = positions[:, None].to(x.dtype) * 10000.0 ** (
        -torch.arange(0, d, 2, dtype=x.dtype) / d
    )  # (n, d/2)
    cos, sin = angles.cos(), angles.sin()
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


def _linears(module, names, n_in, n_out, bias):
    for name in names:
        setattr(module, name, nn.Linear(n_in, n_out, bias=bias))


class WrongBlock(nn.Module):
    """A pre-norm GPT block, written as a learner would (in plain PyTorch), with one named
    mistake; forward(x, cache=None, start=0) -> (x, cache). `o`: the GPT's options."""

    def __init__(self, d_model, num_heads, o, mistake):
        super().__init__()
        self.mistake, self.rope, self.heads = mistake, o["positions"] == "rope", num_heads
        activation, d_ff, bias = o["activation"], o["d_ff"] or 4 * d_model, o["bias"]
        if mistake == "relu":
            activation = "relu"
        elif mistake == "tanh_gelu" and activation == "gelu":
            activation = "gelu_tanh"
        elif mistake == "activation_ignored":
            activation = "gelu"
        self.self_attn = nn.Module()
        _linears(self.self_attn, ("q_proj", "k_proj", "v_proj", "out_proj"), d_model, d_model, bias)
        self.feed_forward = nn.Module()
        self.feed_forward.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.feed_forward.linear2 = nn.Linear(d_ff, d_model, bias=bias)
        self.activation = _ACTIVATIONS[activation]
        eps = 1e-5 if mistake in ("eps_ignored", "block_eps_ignored") else o["layer_norm_eps"]
        self.norm1 = nn.LayerNorm(d_model, eps=eps, bias=bias)
        self.norm2 = nn.LayerNorm(d_model, eps=eps, bias=bias)
        if mistake in ("norm1_eps_ignored", "norm2_eps_ignored"):  # one of the two keeps 1e-5
            getattr(self, mistake[:5]).eps = 1e-5

    def feed(self, x):
        f = self.feed_forward
        return f.linear2(self.activation(f.linear1(x)))

    def attend(self, h, cache, start):
        a, mistake = self.self_attn, self.mistake
        batch, n, d = h.shape

        def heads(t):  # (batch, n, d) -> (batch, heads, n, d_head)
            return t.view(batch, n, self.heads, d // self.heads).transpose(1, 2)

        q, k, v = heads(a.q_proj(h)), heads(a.k_proj(h)), heads(a.v_proj(h))
        if self.rope and mistake != "rope_ignored":
            positions = torch.arange(start, start + n)
            q = q if mistake == "rope_keys_only" else _rope(q, positions)
            k = k if mistake == "rope_queries_only" else _rope(k, positions)
            if mistake == "rope_before_split":  # pairs and frequencies over all of d_model
                q, k = heads(_rope(a.q_proj(h), positions)), heads(_rope(a.k_proj(h), positions))
            if mistake == "rope_values":
                v = _rope(v, positions)
        if cache is not None:
            k_all, v_all = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
            cache = cache if mistake == "cache_not_kept" else (k_all, v_all)
            k, v = (k, v) if mistake == "chunk_ignores_cache" and n > 1 else (k_all, v_all)
        t = k.shape[2]
        allowed = torch.ones(n, t, dtype=torch.bool).tril(t - n)  # query i sees keys <= its own
        masks = {
            "no_causal": torch.ones(n, t, dtype=torch.bool),
            "torch_mask": ~allowed,
            "triu": torch.ones(n, t, dtype=torch.bool).triu(t - n),
            "fixed_mask": torch.ones(64, 64, dtype=torch.bool).tril(t - n)[:n, :t],
        }
        mask = masks.get(mistake, allowed)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        weights = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1).nan_to_num(0.0)
        out = (weights @ v).squeeze() if mistake == "squeeze" else weights @ v
        merged = out.transpose(1, 2).reshape(batch, n, d)
        return a.out_proj(merged), cache

    def forward(self, x, cache=None, start=0):
        if self.mistake == "post_norm":
            attended, cache = self.attend(x, cache, start)
            x = self.norm1(x + attended)
            return self.norm2(x + self.feed(x)), cache
        if self.mistake == "normed_residual":  # x = norm1(x); x = x + attn(x); x = norm2(x); ...
            x = self.norm1(x)
            attended, cache = self.attend(x, cache, start)
            x = self.norm2(x + attended)
            return x + self.feed(x), cache
        h = x if self.mistake == "attend_raw" else self.norm1(x)
        attended, cache = self.attend(h, cache, start)
        x = x + attended
        norm2 = self.norm1 if self.mistake == "norm1_twice" else self.norm2
        return x + self.feed(x if self.mistake == "feed_raw" else norm2(x)), cache


class WrongGPT(nn.Module):
    """A learner-style capstone GPT with one named mistake (`mistake`); "" is a right one, GPT-2's
    init included."""

    mistake = ""

    def __init__(self, vocab_size, block_size, d_model, num_heads, num_layers, **options):
        super().__init__()
        o, mistake = {**_OPTIONS, **options}, self.mistake
        self.positions = o["positions"]
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        if self.positions == "learned":
            self.position_embedding = nn.Embedding(block_size, d_model)
        blocks = (WrongBlock(d_model, num_heads, o, mistake) for _ in range(num_layers))
        self.layers = nn.ModuleList(blocks)
        eps = 1e-5 if mistake in ("eps_ignored", "final_eps_ignored") else o["layer_norm_eps"]
        self.norm = nn.LayerNorm(d_model, eps=eps, bias=o["bias"])
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        if (o["tie_weights"] or mistake == "always_tied") and mistake != "untied":
            self.lm_head.weight = self.token_embedding.weight
        for name, param in self.named_parameters():  # GPT-2's init
            if param.dim() == 2:
                residual = name.endswith(("out_proj.weight", "linear2.weight"))
                nn.init.normal_(param, std=0.02 / math.sqrt(2 * num_layers) if residual else 0.02)
            else:
                nn.init.zeros_(param) if name.endswith("bias") else nn.init.ones_(param)

    def forward(self, ids):
        return self._run(ids, None, 0)[0]

    def forward_cached(self, ids, cache, start):
        if cache is None:
            heads = self.layers[0].heads
            d = self.token_embedding.weight.shape[1]
            empty = self.token_embedding.weight.new_zeros(ids.shape[0], heads, 0, d // heads)
            cache = [(empty, empty)] * len(self.layers)
        if self.mistake == "cache_positions_restart":
            start = 0
        return self._run(ids, cache, start)

    def _run(self, ids, cache, start):
        mistake, n = self.mistake, ids.shape[1]
        if mistake == "lesson_positions" and self.positions == "learned":  # lesson 09's module
            x = self.position_embedding(self.token_embedding(ids))
        else:
            x = self.token_embedding(ids)
        if mistake == "scale_embed":  # lesson 08's translator
            x = x * math.sqrt(x.shape[-1])
        if self.positions == "learned" and mistake not in ("no_positions", "lesson_positions"):
            x = x + self.position_embedding(torch.arange(start, start + n))
        new_cache = []
        for i, layer in enumerate(self.layers):
            x, layer_cache = layer(x, None if cache is None else cache[i], start)
            new_cache.append(layer_cache)
        if mistake != "no_final_norm":
            x = self.norm(x)
        return self.lm_head(x), (None if cache is None else new_cache)


def _mistake_gpt(mistake: str) -> type:
    """WrongGPT with one named mistake, as a class the check builds like the learner's."""
    return type(f"GPT_{mistake}", (WrongGPT,), {"mistake": mistake})


def _sgd_step(model, ids, lr=0.5):
    """One plain SGD step on the next-token loss; returns (loss, parameters after, by name)."""
    model.train()
    x, y = ids[:, :-1], ids[:, 1:]
    logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    model.zero_grad(set_to_none=True)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():  # parameters() lists a tied matrix once
            if p.grad is not None:
                p -= lr * p.grad
    state = {capstone_name(k): v for k, v in model.state_dict().items()}
    return float(loss.detach()), {k: state[k] for k in sorted(state)}


_TIED = ("lm_head", "token_embedding")
_TWO_PARAMETERS = (
    "your lm_head.weight and token_embedding.weight are two parameters that share one memory, "
    "not one tied parameter (lm_head.weight.data = ..., or nn.Parameter(...) around the "
    "embedding's weight): parameters() lists the matrix twice, Adam keeps two states for it, "
    "and .to() or .double() splits them apart. Hint: tie the Parameter itself, "
    "self.lm_head.weight = self.token_embedding.weight"
)


_STEP_ERRORS = {  # words of PyTorch's error in the step's backward -> what it means there
    "modified by an inplace operation": "your forward pass is right, but an in-place operation "
    "(x += ..., a method ending in _) changed a tensor the backward pass needs: write the "
    "residual as x = x + self_attn(...), a new tensor, not x += ...",
    "does not require grad": "your forward pass is right, but it computes no gradients: a "
    "torch.no_grad() (or @torch.no_grad()) around forward, or a .detach(), cuts the graph; keep "
    "no_grad for generation (your generate) and leave forward differentiable",
}


_CACHED_ERRORS = {  # words of PyTorch's error -> what a crash in forward_cached means there
    "must match": "with cache None, each layer starts from an empty cache of keys and values "
    "(batch, heads, 0, d_head) each, the shape cached_attention_step appends to",
    "same number of dimensions": "with cache None, each layer starts from an empty cache of keys "
    "and values (batch, heads, 0, d_head) each, the shape cached_attention_step appends to",
    "out of range": MISTAKES["squeeze"],
    "bound": "the positions of n new tokens from `start` are torch.arange(start, start + n)",
}


def _cached_logits(model, ids, prompt, chunk=1):
    """The logits of all of ids through forward_cached: the prompt at once, then `chunk` tokens
    at a time at their own positions."""
    cache, parts = None, []
    for t, stop in [(0, prompt), *((t, t + chunk) for t in range(prompt, ids.shape[1], chunk))]:
        try:
            logits, cache = model.forward_cached(ids[:, t:stop], cache, t)
        except (RuntimeError, IndexError) as error:
            hint = next((h for w, h in _CACHED_ERRORS.items() if w in str(error)), None)
            if hint is None:
                raise
            message = f"your code raised {type(error).__name__}: {error}. Hint: {hint}"
            raise GradingError(message) from None
        if cache is None or isinstance(cache, (list, tuple)) and any(c is None for c in cache):
            raise GradingError(
                f"your forward_cached(ids, cache, start={t}) returned the cache {cache!r:.40}: "
                "return the keys and values of every token so far, one (k_cache, v_cache) per "
                "layer (also when it was given None), or later tokens cannot attend to them"
            )
        parts.append(logits)
    return torch.cat(parts, dim=1)


def _generate_cached(model, ids, new, generator):
    """Exercise 09's generation loop (course_lib.gpt.generate_with_cache) on any model with
    forward_cached."""
    from ....sampling import sample_next

    logits, cache = model.forward_cached(ids, None, 0)
    for _ in range(new):
        next_id = sample_next(logits[:, -1], 1.0, None, None, generator)
        ids = torch.cat([ids, next_id[:, None]], dim=1)
        logits, cache = model.forward_cached(ids[:, -1:], cache, ids.shape[1] - 1)
    return ids


def _check_gpt2_init(model: nn.Module, num_layers: int) -> None:
    """The statement asks for GPT-2's init: N(0, 0.02^2) for every weight matrix (the
    embeddings, q/k/v_proj, linear1, an untied lm_head), N(0, (0.02 / sqrt(2 * num_layers))^2)
    for the two layers that write into the residual stream (out_proj, linear2), zero biases."""
    residual_std = 0.02 / math.sqrt(2 * num_layers)
    for name, param in model.named_parameters():
        residual = name.endswith(("out_proj.weight", "linear2.weight"))
        if residual:
            std = float(param.detach().double().std())
            if not 0.9 * residual_std <= std <= 1.1 * residual_std:
                raise GradingError(
                    f"your {name} starts with standard deviation {std:.3g}, expected "
                    f"0.02 / sqrt(2 * num_layers) = {residual_std:.3g} with num_layers="
                    f"{num_layers}: GPT-2 shrinks the two layers that write into the residual "
                    "stream (the attention's out_proj and linear2), so that the stream's "
                    "variance does not grow with depth"
                )
        if name.endswith("proj.bias") or name.endswith(("linear1.bias", "linear2.bias")):
            if bool(param.detach().abs().max() > 0):
                raise GradingError(
                    f"your {name} does not start at 0: GPT-2's init sets every bias to zero "
                    "(nn.init.zeros_); nn.Linear's own init draws them at random"
                )
        if name.endswith(("norm.weight", "norm1.weight", "norm2.weight")):
            if not bool((param.detach() == 1).all()):
                raise GradingError(
                    f"your {name} does not start at 1: a LayerNorm's scale starts at ones (its "
                    "own init); initialise only the weight matrices and the biases"
                )
        if param.dim() == 2 and not residual:  # embeddings, q/k/v_proj, linear1, lm_head
            std = float(param.detach().double().std())
            if not 0.015 <= std <= 0.025:
                layer = name.split(".")[-2]  # linear1, q_proj, ...
                shrunk = name.startswith("layers.") and std < 0.015
                raise GradingError(
                    f"your {name} starts with standard deviation {std:.3g}: initialise every "
                    "weight matrix (nn.Linear and nn.Embedding) from N(0, 0.02^2), GPT-2's "
                    "init (nn.init.normal_(weight, std=0.02)); "
                    + (
                        "the 1/sqrt(2 * num_layers) shrinks only the layers that write "
                        "into the residual stream, linear2 and the attention's out_proj, not "
                        f"{layer}"
                        + (
                            " (a test like name.endswith('proj.weight') matches q_proj, "
                            "k_proj and v_proj too: name out_proj)"
                            if layer in ("q_proj", "k_proj", "v_proj")
                            else ""
                        )
                        if shrunk
                        else "0.02 is one fixed number: not what PyTorch's layers draw by "
                        "default (N(0, 1) for nn.Embedding, uniform within "
                        "±1/sqrt(in_features) for nn.Linear), nor a std scaled with the width "
                        "(1/sqrt(d_model)) or with the depth (1/sqrt(2 * num_layers) shrinks "
                        "only out_proj and linear2)"
                    )
                )


@register
class CapstoneGPT(ModuleTask):
    id = "ex09.GPT"
    lesson = "lesson 09, section 'The GPT: the same blocks, a causal mask, no cross-attention'"
    reference = "course_lib.gpt.gpt_from_sizes"
    backward = False  # its "step" cases judge a training step, every parameter after it
    forbidden = tuple(
        "course_lib.gpt.GPT course_lib.blocks.EncoderLayer torch.nn.TransformerEncoderLayer "
        "torch.nn.TransformerEncoder torch.nn.TransformerDecoderLayer".split()
    )
    borrowable = BORROWABLE
    mistake_table = MISTAKES
    wrong = WrongGPT

    def cases(self, gen):
        def case(
            description, kind, sizes, batch, seq, dtype=torch.float32, new=0, chunk=1, **options
        ):
            ids = torch.randint(0, sizes["vocab_size"], (batch, seq), generator=gen)
            seed = int(torch.randint(0, 2**31 - 1, (1,), generator=gen))
            state = random_gpt_state(gen, sizes | options, dtype)
            data = {"kind": kind, "sizes": sizes, "options": options, "ids": ids, "new": new}
            data["chunk"] = chunk
            return Case(description, data=data | {"state": state, "seed": seed})

        small = {"vocab_size": 13, "block_size": 8, "d_model": 16, "num_heads": 2, "num_layers": 1}
        deeper = {"vocab_size": 9, "block_size": 6, "d_model": 12, "num_heads": 3, "num_layers": 2}
        # matrices big enough to measure a standard deviation within 10 %
        wide = {"vocab_size": 50, "block_size": 8, "d_model": 64, "num_heads": 4}
        long = {"vocab_size": 5, "block_size": 72, "d_model": 8, "num_heads": 1, "num_layers": 1}
        f64 = {"dtype": torch.float64}
        # fmt: off
        rows = [  # kind, sizes, batch, seq, options; the description
            ("forward", small, 2, 5, {},
             "forward: vocab 13, block_size 8, d_model 16, 2 heads, 1 layer, ids (2, 5)"),
            ("forward", deeper, 1, 6, f64,
             "forward: 2 layers, 3 heads, ids (1, 6) filling block_size, float64"),
            ("forward", small, 3, 1, {}, "forward on a single token, ids (3, 1)"),
            ("forward", deeper, 2, 6, {"positions": "rope", "activation": "relu2"},
             "forward with positions='rope' and activation='relu2' (the course checkpoint's), "
             "2 layers, ids (2, 6)"),
            ("forward", small, 2, 5, {"bias": True, "activation": "gelu_tanh"},
             "forward like GPT-2: bias=True, activation='gelu_tanh', ids (2, 5)"),
            ("forward", small, 2, 5, {"positions": "none", "tie_weights": False},
             "forward with positions='none' and tie_weights=False, ids (2, 5)"),
            ("step", small, 3, 7, {},
             "one SGD step (lr 0.5) on the next-token loss of ids (3, 7), then the loss and "
             "every parameter compared"),
            ("step", deeper, 2, 7, f64 | {"positions": "rope"},
             "one SGD step, 2 layers, positions='rope', float64, ids (2, 7)"),
            ("cached", deeper, 2, 6, f64 | {"new": 2},
             "forward_cached: a prompt of 2 tokens, then 4 tokens one at a time at positions "
             "2..5, against forward on all 6, float64"),
            ("cached", deeper, 2, 6, f64 | {"new": 3, "positions": "rope"},
             "forward_cached with positions='rope': a prompt of 3, then 3 one at a time, "
             "float64"),
            ("generate", small, 2, 2, f64 | {"new": 5},
             "generation through your forward_cached (exercise 09's loop): 1 layer, prompt "
             "(2, 2), 5 new tokens, temperature 1.0, same seed, float64"),
            ("forward", small, 2, 5, {"d_ff": 24},
             "forward with d_ff=24 (not 4 * d_model), ids (2, 5)"),
            ("forward", small, 2, 5, {"layer_norm_eps": 1e-2},
             "forward with layer_norm_eps=0.01 (every LayerNorm's), ids (2, 5)"),
            ("init", wide | {"num_layers": 1}, 1, 1, {"bias": True},
             "GPT-2's init, 1 layer of width 64 with biases: right after GPT(...) is built "
             "(before any weights are loaded), out_proj.weight and linear2.weight have standard "
             "deviation 0.02 / sqrt(2), every other weight matrix (token_embedding, "
             "position_embedding, q_proj, k_proj, v_proj, linear1) 0.02, every bias 0, every "
             "LayerNorm's weight 1"),
            ("init", wide | {"num_layers": 4}, 1, 1, {},
             "GPT-2's init, 4 layers of width 64: out_proj.weight and linear2.weight have "
             "standard deviation 0.02 / sqrt(8)"),
            ("cached", deeper, 2, 6, f64 | {"new": 2, "chunk": 3},
             "forward_cached with several new tokens in one call after a cache: a prompt of 2, "
             "then the tokens at positions 2..4 in one call, then position 5, float64"),
            ("forward", long, 1, 70, {},
             "forward on 70 tokens, more than lesson 09's 64 (block_size 72), batch 1, 1 head"),
            ("cached", long, 1, 5, f64 | {"new": 2},
             "forward_cached with batch 1 and one head (the notebook's generation): a prompt "
             "of 2, then 3 tokens one at a time, float64"),
            # #hunt19: an untied lm_head left at nn.Linear's init (std 0.072 here) passed
            ("init", wide | {"num_layers": 1}, 1, 1, {"tie_weights": False},
             "GPT-2's init with tie_weights=False: lm_head.weight, a matrix of its own, starts "
             "from N(0, 0.02^2) too"),
        ]
        # fmt: on
        return [case(text, kind, *shape, **options) for kind, *shape, options, text in rows]

    def init_args(self, case):
        sizes = case.data["sizes"]
        return tuple(sizes[name] for name in _SIZES), dict(case.data.get("options", {}))

    def build(self, obj, case):
        with torch.random.fork_rng(devices=[]):  # a model's own init draws from the global RNG
            torch.manual_seed(0)
            return super().build(obj, case)

    def call(self, obj, case):
        if case.data["kind"] != "init":
            return super().call(obj, case)
        # the model's own weights, none loaded
        _check_gpt2_init(self.build(obj, case), case.data["sizes"]["num_layers"])
        return "GPT-2's init"

    def weights(self, case):
        return case.data["state"]

    def not_a_module(self, built):
        return f"GPT(...) should build a torch.nn.Module, got {type(built).__name__}"

    def run(self, model, case):
        d = case.data
        lm, emb = (getattr(getattr(model, n, None), "weight", None) for n in _TIED)
        if isinstance(lm, torch.Tensor) and isinstance(emb, torch.Tensor) and lm is not emb:
            if lm.data_ptr() == emb.data_ptr():  # one memory, two parameters: not tied
                raise GradingError(_TWO_PARAMETERS)
        if d["kind"] == "step":  # a dropout the statement has not would change the loss
            without_dropout(model, [d["ids"][:, :-1]], {}, "GPT")
            try:
                return _sgd_step(model, d["ids"])
            except RuntimeError as error:
                hint = next((h for w, h in _STEP_ERRORS.items() if w in str(error)), None)
                if hint is None:
                    raise
                said = str(error).split(" Hint:")[0].rstrip(".")  # not PyTorch's anomaly hint
                raise GradingError(f"your code raised RuntimeError: {said}. Hint: {hint}") from None
        model.eval()
        with torch.no_grad():
            if d["kind"] == "forward":
                return model(d["ids"])
            if not callable(getattr(model, "forward_cached", None)):
                raise GradingError(
                    "your GPT has no forward_cached(ids, cache, start) method: your generate "
                    "(task 4) calls it, with cache None the first time"
                )
            if d["kind"] == "cached":  # "new" is the prompt's length here
                return _cached_logits(model, d["ids"], d["new"], d["chunk"])
            return _generate_cached(
                model, d["ids"], d["new"], torch.Generator().manual_seed(d["seed"])
            )

    def diagnose(self, got, want, case):
        kind, loss = case.data["kind"], got[0] if isinstance(got, tuple) else None
        if kind == "step" and is_number(loss) and abs(loss - want[0]) <= 1e-4 * max(1, want[0]):
            return (  # the loss agrees, a parameter after the step does not: its gradient
                "the loss agrees, so your forward pass is right, but the gradient that reached "
                "this parameter is not: a .detach(), torch.no_grad() or .data on part of the "
                "computation (an embedding, a residual branch, one sub-layer) cuts the paths back "
                "to it; remove it, so that every path the values take carries the gradient too"
            )
        return None

    def compare(self, got, want, case):
        kind = case.data["kind"]
        if kind == "step":
            if not isinstance(got, tuple):
                return "the step could not run"
            if abs(got[0] - want[0]) > 1e-4 * max(1.0, abs(want[0])):
                return f"the loss before the step is {got[0]:.6g}, expected {want[0]:.6g}"
            for name, value in want[1].items():  # named, so the learner knows where to look
                message = compare_values(got[1].get(name), value, f"your {name} after one step")
                if message:
                    return message
            return None
        what = {
            "forward": "your logits",
            "cached": "your logits through forward_cached",
            "generate": "your generated tokens",
        }.get(kind, "your result")
        return compare_values(got, want, what)
