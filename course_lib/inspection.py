"""Inside a trained GPT (lesson 11): read, change and explain what its heads do.

Everything here works on the course's `GPT` (lesson 09) from the outside, with PyTorch hooks:
no line of the model changes. A forward hook sees a module's output (and may replace it); a
forward pre-hook sees, and may replace, its input. Three places in each layer are enough for
the heads (`residual_stream` and `direct_logit_attribution` also hook each layer, the first
layer's input and the final norm's input):

    layer.self_attn            pre-hook: ask for the attention weights; hook: read them
    layer.self_attn.out_proj   pre-hook: its input is every head's output side by side,
                               (batch, seq, num_heads * d_head): read or replace one head's slice
    layer.feed_forward         hook: what the feed-forward adds to the residual stream

Head h of a layer adds `z_h @ W_O[:, h*d_head:(h+1)*d_head].T` to the residual stream, where
z_h is its slice of out_proj's input: the output projection is a sum over heads, so each head's
contribution can be read, removed (ablation) or swapped (patching) on its own.

    attention_patterns(model, ids)        (num_layers, batch, num_heads, seq, seq)
    residual_stream(model, ids)           (num_layers + 1, batch, seq, d_model)
    induction_scores / previous_token_scores(model, ids)    (num_layers, num_heads)
    ablate_heads(model, heads)            a context manager: those heads add nothing (or their mean)
    ablation_effects(model, ids)          (num_layers, num_heads) change in loss per head
    direct_logit_attribution(model, ids)  (parts, batch, seq, vocab), summing to the logits
    logit_lens(model, ids)                (num_layers + 1, batch, seq, vocab)
    patch_head(model, clean, corrupted, layer, head)   logits of a patched run

`induction_circuit` builds a two-layer attention-only GPT whose weights are set by hand (no
training) so that one head attends to the previous token and a later one is an induction head:
the detectors must find them where they were put.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .gpt import GPT, GPTConfig
from .validation import check_choice, check_ids, check_positive_int, door, is_int

__all__ = [
    "hooked",
    "attention_patterns",
    "residual_stream",
    "head_inputs",
    "next_token_losses",
    "repeated_tokens",
    "previous_token_scores",
    "induction_scores",
    "in_context_score",
    "head_means",
    "ablate_heads",
    "ablate_head",
    "ablation_effects",
    "attribution_labels",
    "direct_logit_attribution",
    "logit_lens",
    "patch_head",
    "attention_only",
    "NoFeedForward",
    "induction_circuit",
]


# --------------------------------------------------------------------------------------------
# Hooks
# --------------------------------------------------------------------------------------------


@contextmanager
def hooked(*registrations: tuple[nn.Module, str, object]) -> Iterator[None]:
    """Register hooks for the duration of a `with` block, and always remove them afterwards.

    Each registration is (module, kind, function) with kind "forward" (function(module, args,
    output)), "pre" (function(module, args)) or "pre_kwargs" (function(module, args, kwargs) ->
    (args, kwargs)). A hook left registered would keep changing the model after the lesson
    moved on, so the handles are removed in a `finally`, even when the block raises.
    """
    handles = []
    try:
        for module, kind, function in registrations:
            if kind == "forward":
                handles.append(module.register_forward_hook(function))
            elif kind == "pre":
                handles.append(module.register_forward_pre_hook(function))
            elif kind == "pre_kwargs":
                handles.append(module.register_forward_pre_hook(function, with_kwargs=True))
            else:
                raise ValueError(f"kind must be 'forward', 'pre' or 'pre_kwargs', got {kind!r}")
        yield
    finally:
        for handle in handles:
            handle.remove()


def _check_model(model: object) -> GPT:
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a course_lib GPT, got {type(model).__name__}")
    return model


def _check_input(model: object, ids: object) -> tuple[GPT, Tensor]:
    model = _check_model(model)
    check_ids(ids, "ids", vocab_size=model.config.vocab_size)
    if ids.shape[1] > model.config.block_size:
        raise ValueError(
            f"ids has {ids.shape[1]} tokens but the model's context is "
            f"block_size={model.config.block_size}"
        )
    return model, ids


def _check_head(model: GPT, layer: object, head: object) -> tuple[int, int]:
    c = model.config
    for value, name, size, what in (
        (layer, "layer", c.num_layers, "num_layers"),
        (head, "head", c.num_heads, "num_heads"),
    ):
        if not is_int(value) or not 0 <= value < size:
            raise ValueError(
                f"{name} must be an int in 0..{size - 1} ({what}={size}), got {value!r}"
            )
    return layer, head


def _ask_for_weights(module, args, kwargs):
    return args, {**kwargs, "need_weights": True}  # the unfused path, which returns them


@door
@torch.no_grad()
def attention_patterns(model: GPT, ids: Tensor) -> Tensor:
    """Every head's attention weights: (num_layers, batch, num_heads, seq, seq).

    [l, b, h, i, j] is how much query i attends to key j in head h of layer l (rows sum to 1;
    the future is 0). Read with hooks on each layer's self_attn; the model is left as it was.
    """
    model, ids = _check_input(model, ids)
    patterns: list[Tensor] = []
    registrations = []
    for layer in model.layers:
        registrations.append((layer.self_attn, "pre_kwargs", _ask_for_weights))
        registrations.append(
            (layer.self_attn, "forward", lambda m, a, out: patterns.append(out[1].detach()))
        )
    with hooked(*registrations):
        model(ids)
    return torch.stack(patterns)  # (num_layers, batch, num_heads, seq, seq)


@door
@torch.no_grad()
def residual_stream(model: GPT, ids: Tensor) -> Tensor:
    """The residual stream before each layer and after the last: (num_layers + 1, batch, seq,
    d_model). [0] is the embeddings, [l + 1] the stream after layer l (before the final norm)."""
    model, ids = _check_input(model, ids)
    states: list[Tensor] = []
    registrations: list = [(model.layers[0], "pre", lambda m, args: states.append(args[0]))]
    for layer in model.layers:
        registrations.append((layer, "forward", lambda m, a, out: states.append(out)))
    with hooked(*registrations):
        model(ids)
    return torch.stack(states)


@door
@torch.no_grad()
def head_inputs(model: GPT, ids: Tensor) -> Tensor:
    """Every head's output before the output projection: (num_layers, batch, seq, num_heads,
    d_head). Head h of layer l adds head_inputs[l, ..., h, :] @ W_O[:, h*d_head:(h+1)*d_head].T
    to the residual stream (W_O = layers[l].self_attn.out_proj.weight)."""
    model, ids = _check_input(model, ids)
    c = model.config
    z: list[Tensor] = []
    with hooked(
        *[(lay.self_attn.out_proj, "pre", lambda m, a: z.append(a[0])) for lay in model.layers]
    ):
        model(ids)
    batch, seq = ids.shape
    return torch.stack(z).reshape(c.num_layers, batch, seq, c.num_heads, c.d_model // c.num_heads)


@door
@torch.no_grad()
def next_token_losses(model: GPT, ids: Tensor) -> Tensor:
    """The cross-entropy (nats) of predicting ids[:, t + 1] from ids[:, :t + 1]:
    (batch, seq - 1)."""
    model, ids = _check_input(model, ids)
    logits = model(ids)[:, :-1]  # (batch, seq - 1, vocab)
    return F.cross_entropy(logits.transpose(1, 2), ids[:, 1:].long(), reduction="none")


# --------------------------------------------------------------------------------------------
# Heads with a job
# --------------------------------------------------------------------------------------------


@door
def repeated_tokens(
    batch: int, period: int, vocab_size: int, generator: torch.Generator | None = None
) -> Tensor:
    """(batch, 2 * period) ids: a random sequence of `period` tokens, then the same again.

    The first copy is unpredictable; the second is predictable only by looking back at the
    first, which is what an induction head does. Tokens within a copy are all different
    (so "the token after its previous occurrence" is one position), hence period <= vocab_size.
    """
    for value, name in ((batch, "batch"), (period, "period"), (vocab_size, "vocab_size")):
        check_positive_int(value, name)
    if period > vocab_size:
        raise ValueError(f"period={period} must be at most vocab_size={vocab_size}")
    first = torch.stack(
        [torch.randperm(vocab_size, generator=generator)[:period] for _ in range(batch)]
    )  # (batch, period)
    return torch.cat([first, first], dim=1)


def _period(ids: Tensor) -> int:
    period = ids.shape[1] // 2
    if ids.shape[1] % 2 or period < 2 or not torch.equal(ids[:, :period], ids[:, period:]):
        raise ValueError(
            "ids must be sequences repeated twice, (batch, 2 * period) with ids[:, period:] "
            "== ids[:, :period] and period >= 2 (see repeated_tokens), got shape "
            f"{tuple(ids.shape)}"
        )
    return period


@door
def previous_token_scores(model: GPT, ids: Tensor) -> Tensor:
    """How much each head attends to the previous token: (num_layers, num_heads).

    The mean over the batch and the queries i >= 1 of the weight on key i - 1; 1 is a head that
    does nothing else. Any text works as input; random tokens rule out content as the reason.
    """
    patterns = attention_patterns(model, ids)  # (layers, batch, heads, seq, seq)
    if ids.shape[1] < 2:
        raise ValueError("ids needs at least 2 tokens to have a previous one")
    previous = patterns.diagonal(offset=-1, dim1=-2, dim2=-1)  # (layers, batch, heads, seq - 1)
    return previous.mean(dim=(1, 3))


@door
def induction_scores(model: GPT, ids: Tensor) -> Tensor:
    """How much each head attends as an induction head: (num_layers, num_heads).

    ids: sequences repeated twice (`repeated_tokens`), period T. A query i in the second copy
    (i >= T) holds the same token as position i - T, and the token that followed it there,
    at i - T + 1, is the one that comes next: the score is the mean over the batch and the
    queries i = T .. 2T - 1 of the weight on key i - T + 1 (Olsson et al.'s prefix matching).
    """
    _check_input(model, ids)
    period = _period(ids)
    patterns = attention_patterns(model, ids)  # (layers, batch, heads, 2T, 2T)
    # key i - T + 1 for query i: the diagonal T - 1 below the main one, from query T on
    stripe = patterns.diagonal(offset=1 - period, dim1=-2, dim2=-1)  # (layers, batch, heads, T + 1)
    return stripe[..., 1:].mean(dim=(1, 3))  # queries T .. 2T - 1


@door
def in_context_score(model: GPT, ids: Tensor) -> float:
    """Loss on the first copy minus loss on the second copy of repeated sequences (nats).

    The first copy's tokens (targets 1 .. T - 1) cannot be predicted; the second copy's
    (targets T + 1 .. 2T - 1; target T follows a token seen only once) can, by copying. A model
    without induction scores about 0; one that copies perfectly and is at chance on the first
    copy scores about log(vocab_size), and more if it is worse than chance there (lesson 11's
    hand-built circuit: 5.6 with 24 tokens).
    """
    _check_input(model, ids)
    period = _period(ids)
    losses = next_token_losses(model, ids)  # (batch, 2T - 1): [t] predicts target t + 1
    return (losses[:, : period - 1].mean() - losses[:, period:].mean()).item()


# --------------------------------------------------------------------------------------------
# Ablation
# --------------------------------------------------------------------------------------------


def _heads(model: GPT, heads: Iterable) -> dict[int, list[int]]:
    by_layer: dict[int, list[int]] = {}
    for pair in heads:
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise ValueError(f"heads must be (layer, head) pairs, got {pair!r}")
        layer, head = _check_head(model, *pair)
        by_layer.setdefault(layer, []).append(head)
    return by_layer


@door
@torch.no_grad()
def head_means(model: GPT, ids: Tensor) -> Tensor:
    """Each head's mean output over a batch of text, for mean ablation: (num_layers, num_heads,
    d_head) (averaged over the batch and the positions)."""
    return head_inputs(model, ids).mean(dim=(1, 2))


@contextmanager
def ablate_heads(
    model: GPT, heads: Iterable, kind: str = "zero", means: Tensor | None = None
) -> Iterator[GPT]:
    """Inside the `with` block, the given (layer, head) pairs add nothing (or only their mean).

    kind="zero" replaces a head's output by zeros; kind="mean" by its mean output `means`
    (from `head_means`, on other text), which keeps the average the next layers are used to and
    removes only what depends on this input. The weights are never touched: a pre-hook on
    out_proj edits its input, and it is removed when the block ends, even on an error.
    """
    model = _check_model(model)
    check_choice(kind, "kind", ("zero", "mean"))
    by_layer = _heads(model, heads)
    c = model.config
    d_head = c.d_model // c.num_heads
    if kind == "mean":
        expected = (c.num_layers, c.num_heads, d_head)
        if not isinstance(means, Tensor) or tuple(means.shape) != expected:
            raise ValueError(
                f"kind='mean' needs means of shape {expected} (head_means), got {means!r:.60}"
            )

    def replace(layer: int):
        def hook(module, args):
            z = args[0].clone()  # (batch, seq, num_heads * d_head)
            for head in by_layer[layer]:
                part = slice(head * d_head, (head + 1) * d_head)
                z[..., part] = 0.0 if kind == "zero" else means[layer, head].to(z.dtype)
            return (z, *args[1:])

        return hook

    with hooked(*[(model.layers[i].self_attn.out_proj, "pre", replace(i)) for i in by_layer]):
        yield model


@door
@torch.no_grad()
def ablate_head(model: GPT, ids: Tensor, layer: int, head: int) -> float:
    """The change in mean next-token loss (nats) when head `head` of layer `layer` is zeroed:
    loss with the head ablated minus loss without. The model is unchanged afterwards."""
    model, ids = _check_input(model, ids)
    _check_head(model, layer, head)
    clean = next_token_losses(model, ids).mean()
    with ablate_heads(model, [(layer, head)]):
        ablated = next_token_losses(model, ids).mean()
    return (ablated - clean).item()


@door
@torch.no_grad()
def ablation_effects(
    model: GPT, ids: Tensor, kind: str = "zero", means: Tensor | None = None
) -> Tensor:
    """(num_layers, num_heads): the change in mean next-token loss when each head alone is
    ablated (zero or mean ablation); positive = the model needs that head on this text."""
    model, ids = _check_input(model, ids)
    clean = next_token_losses(model, ids).mean()
    c = model.config
    effects = torch.zeros(c.num_layers, c.num_heads)
    for layer in range(c.num_layers):
        for head in range(c.num_heads):
            with ablate_heads(model, [(layer, head)], kind, means):
                effects[layer, head] = next_token_losses(model, ids).mean() - clean
    return effects


# --------------------------------------------------------------------------------------------
# Direct logit attribution and the logit lens
# --------------------------------------------------------------------------------------------


def attribution_labels(model: GPT) -> list[str]:
    """The names of direct_logit_attribution's parts, in order: "embed", then for each layer
    l its heads "L{l}H{h}" and its feed-forward "L{l}FF", then "bias" when the model has
    biases (attention output biases and the final norm's)."""
    c = _check_model(model).config
    labels = ["embed"]
    for layer in range(c.num_layers):
        labels += [f"L{layer}H{h}" for h in range(c.num_heads)] + [f"L{layer}FF"]
    return labels + (["bias"] if c.bias else [])


@door
@torch.no_grad()
def direct_logit_attribution(model: GPT, ids: Tensor) -> Tensor:
    """The logits split into what each piece wrote into the residual stream:
    (num_parts, batch, seq, vocab), summing over the first axis to model(ids).

    The final stream is a sum: embeddings + every head's output + every feed-forward's output
    (+ biases). The final LayerNorm is not linear, but once its scale 1 / sqrt(var + eps) is
    fixed to the value it had on this input, it is: each part is centred, divided by that
    scale, multiplied by the norm's weight and sent through lm_head. Order: attribution_labels.
    """
    model, ids = _check_input(model, ids)
    c = model.config
    d_head = c.d_model // c.num_heads
    embed: list[Tensor] = []
    z: list[Tensor] = []
    ff: list[Tensor] = []
    final: list[Tensor] = []
    registrations: list = [(model.layers[0], "pre", lambda m, a: embed.append(a[0]))]
    for layer in model.layers:
        registrations.append((layer.self_attn.out_proj, "pre", lambda m, a: z.append(a[0])))
        registrations.append((layer.feed_forward, "forward", lambda m, a, out: ff.append(out)))
    registrations.append((model.norm, "pre", lambda m, a: final.append(a[0])))
    with hooked(*registrations):
        logits = model(ids)
    parts = [embed[0]]
    bias = torch.zeros_like(embed[0])
    for layer, z_l, ff_l in zip(model.layers, z, ff, strict=True):
        out_proj = layer.self_attn.out_proj
        heads = z_l.unflatten(-1, (c.num_heads, d_head))  # (batch, seq, heads, d_head)
        w_o = out_proj.weight.unflatten(-1, (c.num_heads, d_head))  # (d_model, heads, d_head)
        per_head = torch.einsum("bshk,dhk->hbsd", heads, w_o)  # (heads, batch, seq, d_model)
        parts += [*per_head, ff_l]
        if out_proj.bias is not None:
            bias = bias + out_proj.bias
    stream = final[0]  # (batch, seq, d_model): the sum of the parts
    norm = model.norm
    scale = (stream.var(-1, unbiased=False, keepdim=True) + norm.eps).sqrt()  # fixed here

    def through_norm(part: Tensor) -> Tensor:  # the final norm, linear once scale is fixed
        return (part - part.mean(-1, keepdim=True)) / scale * norm.weight

    out = [model.lm_head(through_norm(p)) for p in parts]
    if c.bias:
        out.append(model.lm_head(through_norm(bias) + norm.bias))
    result = torch.stack(out)  # (num_parts, batch, seq, vocab)
    assert result.shape[1:] == logits.shape
    return result


@door
@torch.no_grad()
def logit_lens(model: GPT, ids: Tensor) -> Tensor:
    """What the model would predict if it stopped after each layer: the residual stream before
    layer 0 and after each layer, read through the final norm and lm_head:
    (num_layers + 1, batch, seq, vocab). The last one is model(ids)."""
    stream = residual_stream(model, ids)  # (layers + 1, batch, seq, d_model)
    return model.lm_head(model.norm(stream))


@door
@torch.no_grad()
def patch_head(
    model: GPT, clean_ids: Tensor, corrupted_ids: Tensor, layer: int, head: int
) -> Tensor:
    """Activation patching: the logits (batch, seq, vocab) of the corrupted input when head
    `head` of layer `layer` outputs what it output on the clean input (everything else runs on
    the corrupted input). Both inputs have the same shape."""
    model, clean_ids = _check_input(model, clean_ids)
    _check_input(model, corrupted_ids)
    if clean_ids.shape != corrupted_ids.shape:
        raise ValueError(
            f"clean_ids {tuple(clean_ids.shape)} and corrupted_ids {tuple(corrupted_ids.shape)} "
            "must have the same shape"
        )
    _check_head(model, layer, head)
    d_head = model.config.d_model // model.config.num_heads
    part = slice(head * d_head, (head + 1) * d_head)
    clean = head_inputs(model, clean_ids)[layer, :, :, head]  # (batch, seq, d_head)

    def patch(module, args):
        z = args[0].clone()
        z[..., part] = clean
        return (z, *args[1:])

    with hooked((model.layers[layer].self_attn.out_proj, "pre", patch)):
        return model(corrupted_ids)


# --------------------------------------------------------------------------------------------
# Attention-only models, and an induction circuit built by hand
# --------------------------------------------------------------------------------------------


class NoFeedForward(nn.Module):
    """Stands in for a layer's feed-forward network: adds nothing to the residual stream."""

    def forward(self, x: Tensor) -> Tensor:
        return torch.zeros_like(x)


def attention_only(model: GPT) -> GPT:
    """`model` with every feed-forward network removed (in place): the attention-only
    Transformer in which Elhage et al. and Olsson et al. first found induction heads."""
    for layer in _check_model(model).layers:
        layer.feed_forward = NoFeedForward()
        layer.norm2 = nn.Identity()  # normalised input of a sub-layer that is gone
    return model


def _codes(count: int, size: int, generator: torch.Generator) -> Tensor:
    """`count` orthogonal vectors of length `size` (a power of 2), entries +-1, each summing
    to 0 (rows 1.. of a Hadamard matrix, in a random order and with random signs)."""
    hadamard = torch.ones(1, 1)
    while hadamard.shape[0] < size:
        hadamard = torch.cat(
            [torch.cat([hadamard, hadamard], 1), torch.cat([hadamard, -hadamard], 1)]
        )
    rows = 1 + torch.randperm(size - 1, generator=generator)[:count]
    signs = torch.randint(0, 2, (count, 1), generator=generator) * 2 - 1
    return hadamard[rows] * signs


@door
@torch.no_grad()
def induction_circuit(
    vocab_size: int = 24,
    block_size: int = 24,
    previous_token_head: tuple[int, int] = (0, 0),
    induction_head: tuple[int, int] = (1, 0),
    num_layers: int = 2,
    num_heads: int = 4,
    seed: int = 0,
    sharpness: float = 30.0,
) -> GPT:
    """An attention-only GPT whose two circuit heads are set by hand, with no training.

    The residual stream has four blocks of 32 features (d_model = 32 * num_heads... at least
    128): token codes, position codes, "the previous token" (written by the previous-token
    head) and a block the other heads write small random noise into. Each code is a +-1 vector
    summing to 0, all orthogonal, so every LayerNorm only rescales the stream.

    - the previous-token head (layer a): the query of position p is the code of p - 1, the keys
      are the position codes: it attends to p - 1 and copies that token's code into block 3;
    - the induction head (layer b > a): the query is the current token's code, the keys are
      block 3 (each position's previous token): it attends to the position right after an
      earlier copy of the current token, and writes that position's token code into block 1,
      which the tied unembedding reads as "this token comes next".

    Every other head has random query and key weights and writes only small noise. Needs
    vocab_size, block_size <= 31 and num_heads >= 4 (a head's 32 features hold one code).
    """
    check_positive_int(num_layers, "num_layers")
    check_positive_int(num_heads, "num_heads")
    if not (1 <= vocab_size <= 31 and 2 <= block_size <= 31):
        raise ValueError(
            f"vocab_size and block_size must be at most 31, got {vocab_size}, {block_size}"
        )
    if num_heads < 4:
        raise ValueError(
            f"num_heads must be at least 4 (four blocks of 32 features), got {num_heads}"
        )
    size = 32
    config = GPTConfig(
        vocab_size=vocab_size,
        block_size=block_size,
        d_model=size * num_heads,
        num_heads=num_heads,
        num_layers=num_layers,
        positions="learned",
    )
    model = GPT(config)
    _check_head(model, *previous_token_head)
    _check_head(model, *induction_head)
    if previous_token_head[0] >= induction_head[0]:
        raise ValueError(
            f"the previous-token head {previous_token_head} must be in an earlier layer than "
            f"the induction head {induction_head}: the induction head reads what it wrote"
        )
    attention_only(model)
    gen = torch.Generator().manual_seed(seed)
    d = config.d_model
    block = [slice(i * size, (i + 1) * size) for i in range(4)]  # tokens, positions, prev, noise
    for p in model.parameters():
        p.zero_()
    tokens = _codes(vocab_size, size, gen)  # (vocab, 32)
    positions = _codes(block_size, size, gen)  # (block_size, 32)
    model.token_embedding.weight[:, block[0]] = tokens
    model.position_embedding.embedding.weight[:, block[1]] = positions
    for layer in model.layers:
        layer.norm1.weight.fill_(1.0)
    model.norm.weight[block[0]] = 0.15  # the unembedding reads the token block, scaled down
    # the stream holds two codes of norm sqrt(32), later three: every LayerNorm's scale is fixed
    for layer_index, layer in enumerate(model.layers):
        attn = layer.self_attn
        for h in range(num_heads):
            rows = slice(h * size, (h + 1) * size)
            if (layer_index, h) == tuple(previous_token_head):
                # query of position p: the code of p - 1 (position 0 looks at itself)
                shifted = torch.cat([positions[:1], positions[:-1]])  # (block_size, 32)
                back = positions.T @ shifted / size  # positions @ back = shifted (orthogonal rows)
                attn.q_proj.weight[rows, block[1]] = sharpness / size * back.T
                attn.k_proj.weight[rows, block[1]] = torch.eye(size)
                attn.v_proj.weight[rows, block[0]] = torch.eye(size)
                attn.out_proj.weight[block[2], rows] = torch.eye(size)
            elif (layer_index, h) == tuple(induction_head):
                attn.q_proj.weight[rows, block[0]] = sharpness / size * torch.eye(size)
                attn.k_proj.weight[rows, block[2]] = torch.eye(size)
                attn.v_proj.weight[rows, block[0]] = torch.eye(size)
                attn.out_proj.weight[block[0], rows] = 2.0 * torch.eye(size)
            else:
                attn.q_proj.weight[rows] = torch.randn(size, d, generator=gen) / math.sqrt(d)
                attn.k_proj.weight[rows] = torch.randn(size, d, generator=gen) / math.sqrt(d)
                attn.v_proj.weight[rows] = torch.randn(size, d, generator=gen) / math.sqrt(d)
                attn.out_proj.weight[block[3], rows] = 0.05 * torch.randn(size, size, generator=gen)
    return model.eval()
