"""What ex07's module tasks share: random weights under the exercise's names, the one wrong
layer that is an encoder layer or (with `cross`) a decoder layer, their cases, and the hints
both layers give."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ....multihead import MultiHeadAttention
from ...core import Case, exercise_name
from ..common import (
    KEPT_INPUTS,
    ModuleTask,
    call_on_other_inputs,
    randn,
    residual_sublayers,
    without_dropout,
)

ALWAYS_POST_NORM = (
    "norm_first is ignored: your layer is post-norm even with norm_first=True, which asks "
    "for pre-norm, x = x + sublayer(norm(x)); keep self.norm_first = norm_first and branch on "
    "it in forward"
)
DEFAULT_PRE_NORM = (
    "built without norm_first, your layer is pre-norm: the default is norm_first=False "
    "(post-norm, as in nn.TransformerEncoderLayer and nn.TransformerDecoderLayer); give "
    "__init__ norm_first=False as its default"
)
PRE_POST_SWAPPED = (
    "post-norm and pre-norm are swapped: norm_first=False (post-norm) is "
    "x = norm(x + sublayer(x)); norm_first=True (pre-norm) is "
    "x = x + sublayer(norm(x)) (a layer that is always pre-norm, whatever "
    "norm_first says, gets this hint too)"
)
PRE_NORM_OUTPUT_NORMALISED = (
    "pre-norm normalises only each sub-layer's input: x = x + sublayer(norm(x)); the sum is not "
    "normalised again, as in norm(x + sublayer(norm(x))) (normalising the sum is post-norm)"
)
PRE_FINAL_NORM = (
    "your pre-norm layer normalises its output once more: the final LayerNorm of a pre-norm "
    "model (GPT-2's ln_f) comes once, after the last layer; a layer ends with x + ffn(norm(x))"
)
ONE_NORM_MODULE = (
    "your norms are one and the same module (as after self.norm1 = self.norm2 = LayerNorm(...)): "
    "loading the weights leaves every name with the last one's. Create a LayerNorm per sub-layer, "
    "each with its own weights"
)
KV_NOT_NORMED = (
    "in pre-norm the self-attention reads norm1(x) for its queries, keys and values alike: "
    "h = norm1(x), then self_attn(h, h, h, mask=...), not self_attn(norm1(x), x, x) (only the "
    "cross-attention takes its keys and values from elsewhere: memory)"
)
PRE_NO_LAST_NORM = (
    "in pre-norm every sub-layer reads its own LayerNorm's output, the feed-forward network "
    "too: the last step is x = x + ffn(norm(x)) (norm2 in the encoder, norm3 in the decoder), "
    "not x + ffn(x)"
)
LESSON_HEADS = (
    "your attention has 4 heads, the lesson's, whatever num_heads says: build it with the "
    "argument, MultiHeadAttention(d_model, num_heads, ...); the same weights split into "
    "another number of heads give other outputs"
)

STALE_RESIDUAL = (
    "every sub-layer but the first adds the layer's input x, not its own input: set "
    "residual = x again before each sub-layer (or write x = x + sublayer(...) each time)"
)
MASK_INVERTED = (
    "the mask is inverted: here True means 'may attend' (nn.MultiheadAttention's masks mean "
    "the opposite), so pass the mask as it is, not ~mask"
)
OUTPUT_TUPLE = (
    "MultiHeadAttention returns a pair (output, weights): add its first element to x, "
    "self.self_attn(h, h, h, mask=mask)[0] (or out, _ = ...), not the pair"
)
LAYER_NORM_EPS = (
    "your LayerNorms use another eps than nn.LayerNorm's default 1e-5 (some tutorials use "
    "1e-6): create them with the default eps, LayerNorm(d_model) (or nn.LayerNorm(d_model))"
)
RELU_NOT_GELU = "activation='relu' (the default) is ReLU (F.relu), not GELU"
RELU_ONLY = "the feed-forward network of this layer uses ReLU (F.relu), not GELU"
ACTIVATION_IGNORED = (
    "the activation argument is ignored (ReLU whatever it says): apply the function it names, "
    "'relu', 'gelu', 'gelu_tanh' or 'relu2', between linear1 and linear2"
)
RELU2_AS_RELU = (
    "activation='relu2' is ReLU squared, F.relu(h) ** 2 (Primer's activation, and the course's "
    "Shakespeare checkpoint's), not plain ReLU"
)
RELU2_SQUARE_FIRST = (
    "activation='relu2' is the ReLU first, then the square, F.relu(h) ** 2: negative inputs "
    "give 0; squaring first, F.relu(h ** 2) (or h ** 2 alone), turns them into positive values"
)
GELU_TANH_AS_GELU = (
    "activation='gelu_tanh' is GELU's tanh approximation, F.gelu(h, approximate='tanh') "
    "(GPT-2's); the exact F.gelu differs from it by up to 5e-4, which the check sees"
)
ACTIVATION_BOTH = (
    "the activation belongs between linear1 and linear2 only: the feed-forward network's "
    "output, linear2(...), is not activated again (it must be able to be negative), so the "
    "layer adds linear2(activate(linear1(h))) as it is"
)
ACTIVATION_ON_SUM = (
    "the activation belongs inside the feed-forward network, between linear1 and linear2, not "
    "on the residual sum: post-norm is norm(x + ffn(x)), not norm(activate(x + ffn(x))); "
    "pre-norm is x + ffn(norm(x)), not activate(x + ffn(norm(x))) (a ReLU there zeroes every "
    "negative entry the residual carries)"
)
NORM_SANDWICH = (
    "you normalised before AND after a sub-layer, h = norm(x), then x = norm(h + sublayer(h)): "
    "each sub-layer's LayerNorm sits in one place, post-norm (norm_first=False) "
    "x = norm(x + sublayer(x)), pre-norm (norm_first=True) x = x + sublayer(norm(x))"
)
NORM_OF_NORMED_X = (
    "you normalised x before adding it AND the sum, x = norm(norm(x) + sublayer(x)): each "
    "sub-layer's LayerNorm sits in one place, post-norm (norm_first=False) "
    "x = norm(x + sublayer(x)) with x itself in the residual, pre-norm (norm_first=True) "
    "x = x + sublayer(norm(x)) with the sum left as it is"
)
POST_RESIDUAL_NORMED = (
    "in post-norm the LayerNorm goes around the sum, x = norm(x + sublayer(x)); "
    "norm(x) + sublayer(x) normalises the residual alone and leaves the sum (the sub-layer's "
    "output in it too) unnormalised"
)
LAST_RESIDUAL_NORMED = (
    "in pre-norm the feed-forward sub-layer's residual must carry x itself, "
    "x = x + ffn(norm(x)), as around the attention before it; h = norm(x) then h + ffn(h) (or "
    "x = norm(x) then x = x + ffn(x)) puts the normalised copy in x's place"
)
FIRST_RESIDUAL_NORMED = (
    "in pre-norm the self-attention sub-layer's residual must carry x itself, "
    "x = x + self_attn(h, h, h, ...) with h = norm1(x), as around the sub-layers after it; "
    "h + self_attn(h, h, h, ...) (or x = norm1(x) then x = x + self_attn(x, x, x, ...)) puts "
    "the normalised copy in x's place"
)
MASK_KEPT = (
    "your layer kept the mask of an earlier call (on self, in a mutable default argument or in "
    "a global): each call must use the mask it is given, as a new batch brings new padding and "
    "a new length its own causal mask; keep no mask between calls"
)
MEMORY_KEPT = KEPT_INPUTS.replace("your module", "your layer")


def mode_mixed(sublayer: str) -> str:
    """The hint for one sub-layer written in the other norm mode than the layer's others."""
    return (
        f"your {sublayer} sub-layer is in the other norm mode than the rest of the layer (a line "
        "copied from the other branch of `if self.norm_first`): with norm_first=True every "
        "sub-layer is pre-norm, x = x + sublayer(norm(x)); with norm_first=False every one is "
        "post-norm, x = norm(x + sublayer(x)), the " + sublayer + "'s included"
    )


GELU_AS_TANH = (
    "activation='gelu' is the exact GELU, F.gelu(h); the tanh approximation "
    "(approximate='tanh') is 'gelu_tanh'"
)

# The activations by name, as course_lib.blocks.FeedForward takes them.
ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda h: F.gelu(h, approximate="tanh"),
    "relu2": lambda h: F.relu(h) ** 2,
}


def activation_with(name: str, mistake: str):
    """The activation called `name`, with one of the activation mistakes where it bites."""
    if mistake == "activation_ignored" or (mistake == "relu2_as_relu" and name == "relu2"):
        return F.relu
    if mistake == "gelu" and name == "relu":
        return F.gelu
    if mistake == "relu2_square_first" and name == "relu2":
        return torch.square
    if mistake == "gelu_tanh_as_gelu" and name == "gelu_tanh":
        return F.gelu
    if mistake == "gelu_as_tanh" and name == "gelu":
        return ACTIVATIONS["gelu_tanh"]
    if mistake == "gelu_sigmoid" and name == "gelu":  # quick GELU: h * sigmoid(1.702 h)
        return lambda h: h * torch.sigmoid(1.702 * h)
    if mistake == "gelu_tanh_as_tanh" and name == "gelu_tanh":
        return torch.tanh
    if mistake == "gelu_tanh_squared" and name == "gelu_tanh":  # h ** 2 for h ** 3
        return lambda h: 0.5 * h * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (h + 0.044715 * h**2)))
    if mistake == "gelu_tanh_no_half" and name == "gelu_tanh":  # h * (1 + tanh(...)), no 0.5
        return lambda h: 2 * F.gelu(h, approximate="tanh")
    if name not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {name!r}")
    return ACTIVATIONS[name]


def layer_kwargs(activation: str = "relu", bias: bool = True) -> dict:
    """A case's activation and bias, as keyword arguments (none when they are the defaults, so
    the first cases read like the task's simplest form)."""
    kwargs: dict = {}
    if activation != "relu":
        kwargs["activation"] = activation
    if not bias:
        kwargs["bias"] = False
    return kwargs


def random_state(module: nn.Module, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """The module's parameter names with random values (LayerNorm gammas/betas too)."""
    return {
        exercise_name(name): 0.2 + 0.5 * randn(gen, *p.shape, dtype=p.dtype)
        for name, p in module.state_dict().items()
    }


class WrongLayer(nn.Module):
    """An encoder layer, or with `cross` a decoder layer, with one named mistake (`mistake`)
    of either task's table; "" is a right one. Its subclasses give `forward` each signature."""

    mistake = ""
    cross = False

    def __init__(self, d_model, num_heads, d_ff, norm_first=None, activation="relu", bias=True):
        super().__init__()
        if norm_first is None:  # built without it: the default, False
            norm_first = self.mistake == "default_pre_norm"
        self.norm_first, self.activation = norm_first, activation
        num_heads = 4 if self.mistake == "lesson_heads" else num_heads
        self.self_attn = MultiHeadAttention(d_model, num_heads, bias=bias)
        if self.cross:
            self.multihead_attn = MultiHeadAttention(d_model, num_heads, bias=bias)
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)
        eps = 1e-6 if self.mistake == "norm_eps" else 1e-5
        for i in range(1, 4 if self.cross else 3):
            setattr(self, f"norm{i}", nn.LayerNorm(d_model, eps, bias=bias))

    def layer(self, x, memory, self_mask, memory_mask):
        mistake = self.mistake
        if mistake == "mask_kept":  # the first call's masks, kept on self for the next ones
            self_mask, memory_mask = self.__dict__.setdefault("kept", (self_mask, memory_mask))
        if mistake == "self_mask_kept":  # the causal one alone ("it is the same every time")
            self_mask = self.__dict__.setdefault("kept", self_mask)
        if mistake == "memory_kept":  # "memory is the same at every decoding step"
            memory = self.__dict__.setdefault("kept", memory)
        if mistake == "masks_swapped":
            self_mask, memory_mask = memory_mask, self_mask
        if mistake in ("mask_inverted", "masks_inverted", "self_mask_inverted"):
            self_mask = self_mask if self_mask is None else ~self_mask
            if mistake != "self_mask_inverted" and memory_mask is not None:
                memory_mask = ~memory_mask
        if mistake in ("mask_ignored", "no_self_mask"):
            self_mask = None
        if mistake == "causal_default" and self_mask is None:  # a causal mask of its own
            self_mask = torch.ones(x.shape[-2], x.shape[-2], dtype=torch.bool).tril()
        norms = [self.norm1, self.norm2, self.norm3] if self.cross else [self.norm1, self.norm2]
        if mistake == "norms_swapped":  # the last two
            norms[-2:] = norms[-1], norms[-2]
        if mistake in ("norm1_twice", "norm1_everywhere"):
            norms = [self.norm1] * len(norms)
        if mistake == "norm1_for_cross":
            norms[1] = self.norm1
        if mistake == "norm2_for_ffn":  # the cross-attention's line copied, norm2 kept
            norms[-1] = self.norm2
        if mistake == "one_norm_module":  # self.norm1 = self.norm2 = ...: the last loaded wins
            norms = [norms[-1]] * len(norms)
        activation = activation_with(self.activation, mistake)
        attns = [self.self_attn, getattr(self, "multihead_attn", None)]
        self_attn, cross_attn = {
            "attns_swapped": attns[::-1],
            "self_attn_twice": attns[:1] * 2,
            "one_attn_module": attns[1:] * 2,  # self.self_attn = self.multihead_attn = ...
        }.get(mistake, attns)

        def attention(h):  # the first sub-layer: x is its raw input
            kv = x if mistake == "kv_not_normed" else h
            pair = self_attn(h, kv, kv, mask=self_mask)
            return pair if mistake == "output_tuple" else pair[0]

        def cross_attention(h):
            keys = {"cross_on_x": h, "memory_normed": self.norm2(memory)}.get(mistake, memory)
            keys = self.norm1(memory) if mistake == "memory_norm1" else keys
            queries = memory if mistake == "queries_from_memory" else h
            queries = self.norm1(x) if mistake == "pre_stale_query" else queries  # h of sub-layer 1
            if mistake == "queries_from_memory":
                keys = h
            mask = None if mistake in ("no_memory_mask", "cross_on_x") else memory_mask
            mask = self_mask if mistake == "self_mask_in_cross" else mask
            if mistake == "memory_mask_transposed" and mask is not None:  # (batch, n_src, 1)
                mask = mask.transpose(-1, -2)
            return cross_attn(queries, keys, keys, mask=mask)[0]

        def feed_forward(h):
            h = self.norm1(x) if mistake == "pre_stale_h" else h  # the attention's h, reused
            if mistake == "activation_after":  # FeedForward's slip, in the layer written anew
                return activation(self.linear2(self.linear1(h)))
            out = self.linear2(activation(self.linear1(h)))
            return activation(out) if mistake == "activation_both" else out

        runs = (
            [attention, cross_attention, feed_forward] if self.cross else [attention, feed_forward]
        )
        if mistake == "cross_first":  # the sub-layers moved, the norms left in place
            runs[:2] = runs[1], runs[0]
        steps = list(zip(norms, runs, strict=True))
        order = {"lines_cross_first": (1, 0, 2), "lines_ff_before_cross": (0, 2, 1)}
        order["ffn_first"] = (1, 0)  # the encoder's two lines swapped, each with its norm
        steps = [steps[i] for i in order.get(mistake, range(len(steps)))]
        if mistake in ("norm_sandwich", "norm_of_normed_x"):  # norm(norm(x) + ...), either mode
            for norm, run in steps:
                h = norm(x)
                x = norm(h + run(h if mistake == "norm_sandwich" else x))
            return x
        pre, last = self.norm_first, len(steps) - 1
        normed = {  # the sub-layers whose residual is norm(x): x = norm(x) + sublayer(...)
            "post_residual_normed": () if pre else range(len(steps)),
            "post_attn_residual_normed": () if pre else (0,),
            "post_ffn_residual_normed": () if pre else (last,),
            "attn_residual_normed": (0,) if pre else (),
            "ffn_residual_normed": (last,) if pre else (),
        }.get(mistake)
        if normed:
            for i, (norm, run) in enumerate(steps):
                h = norm(x)
                if i in normed:
                    x = h + run(h if pre else x)
                else:
                    x = x + run(h) if pre else norm(x + run(x))
            return x
        other = {"mode_mixed_attn": 0, "mode_mixed_cross": 1, "mode_mixed_ffn": len(steps) - 1}
        if mistake in other:  # one sub-layer's line copied from the other norm_first branch
            for i, (norm, run) in enumerate(steps):
                pre = self.norm_first != (i == other[mistake])
                x = x + run(norm(x)) if pre else norm(x + run(x))
            return x
        if mistake == "activation_on_sum":  # activate(x + ffn(...)): inside post-norm's norm
            norm, run = steps[-1]
            steps[-1] = (norm if self.norm_first else lambda s: norm(activation(s)), run)
            out = residual_sublayers(x, steps, self.norm_first)
            return activation(out) if self.norm_first else out
        return residual_sublayers(x, steps, self.norm_first, mistake)


def layer_case(gen, description, reference, sizes, norm_first, shapes, dtype, **options):
    """A case of a layer task (FeedForward's too, whose norm_first is None): random weights
    for `reference(*sizes)` under the exercise's names, then one random input (..., d_model)
    per shape in `shapes`, followed by the arguments in `options["tail"]` (the decoder's
    masks); `options["mask"]` is the encoder's keyword, `options["raises"]` the error the
    case expects, the other options the activation and bias, passed on to the learner's layer."""
    tail, mask, raises = (options.pop(k, None) for k in ("tail", "mask", "raises"))
    ref = reference(*sizes, **({} if options.get("bias", True) else {"bias": False})).to(dtype)
    data = {
        "sizes": sizes,
        "norm_first": norm_first,
        "state_dict": random_state(ref, gen),
        "kwargs": layer_kwargs(**options),
    }
    args = tuple(randn(gen, *shape, sizes[0], dtype=dtype) for shape in shapes) + (tail or ())
    kwargs = {} if mask is None else {"mask": mask}
    return Case(description, args, kwargs, data=data, raises=raises)


class LayerTask(ModuleTask):
    """An encoder or decoder layer task: built with its sizes, norm_first and options."""

    def init_args(self, case):
        norm_first = case.data["norm_first"]  # None: built without it (its default, False)
        kwargs = {} if norm_first is None else {"norm_first": norm_first}
        kwargs.update(case.data["kwargs"])
        return tuple(case.data["sizes"]), kwargs

    def run(self, module, case):  # a first call on other inputs: a mask or memory kept shows
        call_on_other_inputs(module, case.args, case.kwargs)
        return without_dropout(module, list(case.args), case.kwargs, "layer")

    def diagnose(self, got, want, case):  # the course's attention gives 0, not NaN, there
        if isinstance(got, torch.Tensor) and got.isnan().any() and not want.isnan().any():
            return "NaN comes from a query whose keys are all masked, as when the mask is " + (
                "inverted: " + MASK_INVERTED.split(": ", 1)[1]
            )
        return None
