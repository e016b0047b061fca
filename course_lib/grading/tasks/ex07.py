"""ex07, Transformer blocks: LayerNorm from scratch, the position-wise feed-forward, a layer."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...multihead import MultiHeadAttention
from ..core import Case, Task, load_weights, register


def randn(gen: torch.Generator, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=dtype)


def _random_state(module: nn.Module, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """The module's parameter names with random values (LayerNorm gammas/betas too)."""
    return {name: 0.2 + 0.5 * randn(gen, *p.shape, dtype=p.dtype)
            for name, p in module.state_dict().items()}


# --------------------------------------------------------------------------------------------
# ex07.layer_norm
# --------------------------------------------------------------------------------------------


def _ln_wrong_axis(x, gamma, beta, eps=1e-5):
    mean = x.mean(dim=0, keepdim=True)
    var = x.var(dim=0, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * gamma + beta


def _ln_unbiased(x, gamma, beta, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, unbiased=True, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * gamma + beta


def _ln_eps_outside(x, gamma, beta, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    std = x.var(dim=-1, unbiased=False, keepdim=True).sqrt()
    return (x - mean) / (std + eps) * gamma + beta


@register
class LayerNormTask(Task):
    id = "ex07.layer_norm"
    lesson = "lesson 07, section 'LayerNorm from scratch'"
    reference = "course_lib.blocks.layer_norm"
    forbidden = (
        "torch.nn.functional.layer_norm", "torch.layer_norm", "torch.native_layer_norm",
        "torch.nn.LayerNorm", "torch.nn.functional.group_norm", "torch.nn.functional.rms_norm",
    )

    def cases(self, gen):
        def case(description, shape, dtype=torch.float32, scale=3.0, eps=None):
            d = shape[-1]
            # an offset, except for tiny rows (float32 cannot centre 1.5 + 1e-3 noise exactly)
            x = scale * randn(gen, *shape, dtype=dtype) + (1.5 if scale >= 1 else 0.0)
            gamma = 1 + randn(gen, d, dtype=dtype)
            beta = randn(gen, d, dtype=dtype)
            kwargs = {} if eps is None else {"eps": eps}
            return Case(description, (x, gamma, beta), kwargs)

        return [
            case("x (4, 6), the default eps", (4, 6)),
            case("a batch x (2, 5, 8)", (2, 5, 8)),
            case("x (3, 4, 2, 6) with two batch dimensions", (3, 4, 2, 6)),
            case("a single vector x (10,)", (10,)),
            case("float64 x (2, 3, 7)", (2, 3, 7), dtype=torch.float64),
            case("x (2, 4, 5) with eps=0.5", (2, 4, 5), eps=0.5),
            case("nearly constant rows, x (3, 6) * 1e-3 (variance close to eps)", (3, 6),
                 scale=1e-3),
            case("float64 x (5, 5) * 1e-3 with eps=1e-4", (5, 5), dtype=torch.float64,
                 scale=1e-3, eps=1e-4),
        ]

    def mistakes(self):
        return [
            (_ln_wrong_axis, "the statistics must be taken per token, over the last dimension "
             "(the d features): mean(dim=-1, keepdim=True), not over the batch or sequence"),
            (_ln_unbiased, "LayerNorm uses the biased variance (divide by d, not d - 1): "
             "x.var(dim=-1, unbiased=False) or ((x - mean) ** 2).mean(-1)"),
            (_ln_eps_outside, "eps goes inside the square root: (x - mean) / sqrt(var + eps), "
             "not (x - mean) / (sqrt(var) + eps)"),
        ]


# --------------------------------------------------------------------------------------------
# ex07.FeedForward
# --------------------------------------------------------------------------------------------


class _FeedForwardMistake(nn.Module):
    where = "none"

    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        hidden = self.linear1(x)
        if self.where in ("middle", "both"):
            hidden = F.relu(hidden)
        out = self.linear2(hidden)
        return F.relu(out) if self.where in ("after", "both") else out


class _FFNoActivation(_FeedForwardMistake):
    where = "none"


class _FFNoDropout(_FeedForwardMistake):
    """Right in evaluation mode; `dropout` accepted but never applied."""

    where = "middle"


class _FFDropoutOnOutput(_FeedForwardMistake):
    """Dropout applied to linear2's output instead of the hidden units."""

    where = "middle"

    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__(d_model, d_ff, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(super().forward(x))


class _FFActivationAfter(_FeedForwardMistake):
    where = "after"


class _FFActivationBoth(_FeedForwardMistake):
    where = "both"


@register
class FeedForwardTask(Task):
    id = "ex07.FeedForward"
    lesson = "lesson 07, section 'The position-wise feed-forward network'"
    reference = "course_lib.blocks.FeedForward"

    def cases(self, gen):
        from ...blocks import FeedForward

        def case(description, d_model, d_ff, shape, dtype=torch.float32):
            ref = FeedForward(d_model, d_ff).to(dtype)
            data = {"sizes": (d_model, d_ff), "state_dict": _random_state(ref, gen)}
            return Case(description, (randn(gen, *shape, d_model, dtype=dtype),), data=data)

        return [
            case("d_model=8, d_ff=32, x (2, 5, 8)", 8, 32, (2, 5)),
            case("d_model=6, d_ff=10, x (3, 6): a single sequence", 6, 10, (3,)),
            case("d_model=4, d_ff=16, x (2, 3, 2, 4) with two batch dimensions", 4, 16, (2, 3, 2)),
            case("float64, d_model=5, d_ff=7, x (1, 4, 5)", 5, 7, (1, 4), dtype=torch.float64),
            Case("training mode, dropout=0.5, d_model=6, d_ff=24, x (4, 6): the hidden units "
                 "must be dropped at random (two passes differ), the output itself never",
                 (randn(gen, 4, 6),),
                 data={"sizes": (6, 24), "dropout": 0.5,
                       "state_dict": _random_state(FeedForward(6, 24), gen)}),
        ]

    def call(self, obj, case):
        dropout = case.data.get("dropout")
        module = obj(*case.data["sizes"]) if dropout is None else obj(
            *case.data["sizes"], dropout=dropout)
        state = case.data["state_dict"]
        dtype = next(iter(state.values())).dtype
        if isinstance(module, nn.Module):
            module = module.to(dtype)
        load_weights(module, state, "your FeedForward")
        if dropout is None:
            module.eval()
            with torch.no_grad():
                return module(*case.args)
        module.train()  # dropout acts in training mode only: random, so judged by its effect
        with torch.no_grad():
            first, second = module(*case.args), module(*case.args)
        return {"two passes differ": not torch.equal(first, second),
                "outputs exactly zero": bool((first == 0).any())}

    def mistakes(self):
        # The dropout mistakes first: on the training-mode case they are the specific ones.
        return [
            (_FFNoDropout, "the dropout argument is never applied: in training mode "
             "linear2(dropout(relu(linear1(x)))) drops hidden units at random (self.dropout = "
             "nn.Dropout(dropout), called between the ReLU and linear2)"),
            (_FFDropoutOnOutput, "dropout belongs on the hidden units, between the ReLU and "
             "linear2, not on the output: linear2(dropout(relu(linear1(x))))"),
            (_FFNoActivation, "there is no activation between the two linear layers, so the "
             "network is one linear map: use linear2(relu(linear1(x)))"),
            (_FFActivationAfter, "the ReLU belongs between linear1 and linear2, not after "
             "linear2: use linear2(relu(linear1(x)))"),
            (_FFActivationBoth, "apply the ReLU only between the two linear layers; the output "
             "of linear2 is not passed through it (it must be able to be negative)"),
        ]


# --------------------------------------------------------------------------------------------
# ex07.EncoderLayer
# --------------------------------------------------------------------------------------------


class _EncoderMistake(nn.Module):
    """An encoder layer with one deliberate error, chosen by `kind`."""

    kind = ""

    def __init__(self, d_model, num_heads, d_ff, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)

    def _sa(self, x, mask):
        return self.self_attn(x, x, x, mask=mask)[0]

    def _ff(self, x):
        return self.linear2(F.relu(self.linear1(x)))

    def forward(self, x, mask=None):
        pre = self.norm_first if self.kind != "swapped" else not self.norm_first
        if self.kind == "residual_normed":
            if pre:  # residual adds the normalised input instead of x
                h = self.norm1(x)
                x = h + self._sa(h, mask)
                h = self.norm2(x)
                return h + self._ff(h)
            x = x + self.norm1(self._sa(x, mask))  # norm around the sub-layer only
            return x + self.norm2(self._ff(x))
        if self.kind == "no_residual":
            if pre:
                x = self._sa(self.norm1(x), mask)
                return self._ff(self.norm2(x))
            x = self.norm1(self._sa(x, mask))
            return self.norm2(self._ff(x))
        if self.kind == "residual_outside":  # residual skips the whole layer
            if pre:
                h = self._sa(self.norm1(x), mask)
                return x + self._ff(self.norm2(h))
            h = self.norm1(self._sa(x, mask))
            return self.norm2(x + self._ff(h))
        if pre:
            x = x + self._sa(self.norm1(x), mask)
            return x + self._ff(self.norm2(x))
        x = self.norm1(x + self._sa(x, mask))
        return self.norm2(x + self._ff(x))


class _EncSwapped(_EncoderMistake):
    kind = "swapped"


class _EncResidualNormed(_EncoderMistake):
    kind = "residual_normed"


class _EncNoResidual(_EncoderMistake):
    kind = "no_residual"


class _EncResidualOutside(_EncoderMistake):
    kind = "residual_outside"


@register
class EncoderLayerTask(Task):
    id = "ex07.EncoderLayer"
    lesson = "lesson 07, sections 'Post-norm and pre-norm' and 'The encoder layer'"
    reference = "course_lib.blocks.EncoderLayer"
    forbidden = (
        "torch.nn.TransformerEncoderLayer", "torch.nn.TransformerEncoder",
        "torch._transformer_encoder_layer_fwd",
    )

    def cases(self, gen):
        from ...blocks import EncoderLayer
        from ...masking import causal_mask

        def case(description, d_model, num_heads, d_ff, batch, seq, norm_first,
                 dtype=torch.float32, mask=None):
            ref = EncoderLayer(d_model, num_heads, d_ff).to(dtype)
            data = {"sizes": (d_model, num_heads, d_ff), "norm_first": norm_first,
                    "state_dict": _random_state(ref, gen)}
            x = randn(gen, batch, seq, d_model, dtype=dtype)
            return Case(description, (x,), {} if mask is None else {"mask": mask}, data=data)

        lengths = torch.tensor([6, 3, 1])
        pad = (torch.arange(6)[None, :] < lengths[:, None]).unsqueeze(1)  # (3, 1, 6)
        return [
            case("post-norm (norm_first=False), d_model=8, 2 heads, x (2, 5, 8)",
                 8, 2, 16, 2, 5, False),
            case("pre-norm (norm_first=True), d_model=8, 2 heads, x (2, 5, 8)",
                 8, 2, 16, 2, 5, True),
            case("post-norm with a causal mask (4, 4), d_model=12, 3 heads",
                 12, 3, 24, 2, 4, False, mask=causal_mask(4)),
            case("pre-norm with a padding mask (3, 1, 6), lengths [6, 3, 1]",
                 8, 4, 32, 3, 6, True, mask=pad),
            case("float64, post-norm, with a padding mask (3, 1, 6)",
                 8, 2, 8, 3, 6, False, dtype=torch.float64, mask=pad),
            case("float64, pre-norm, d_model=6, 1 head, x (1, 3, 6)",
                 6, 1, 12, 1, 3, True, dtype=torch.float64),
        ]

    def call(self, obj, case):
        module = obj(*case.data["sizes"], norm_first=case.data["norm_first"])
        state = case.data["state_dict"]
        dtype = next(iter(state.values())).dtype
        if isinstance(module, nn.Module):
            module = module.to(dtype)
        load_weights(module, state, "your EncoderLayer")
        module.eval()
        with torch.no_grad():
            return module(*case.args, **case.kwargs)

    def mistakes(self):
        return [
            (_EncSwapped, "post-norm and pre-norm are swapped: norm_first=False (post-norm) is "
             "x = norm(x + sublayer(x)); norm_first=True (pre-norm) is "
             "x = x + sublayer(norm(x))"),
            (_EncResidualNormed, "the residual must carry x itself around the sub-layer: "
             "post-norm is norm1(x + attention(x)), not x + norm1(attention(x)); pre-norm is "
             "x + attention(norm1(x)), not norm1(x) + attention(norm1(x))"),
            (_EncNoResidual, "the residual connections are missing: add the sub-layer's input "
             "to its output (x + sublayer(...)) around both attention and feed-forward"),
            (_EncResidualOutside, "each sub-layer needs its own residual connection: one "
             "around self-attention and one around the feed-forward network, not a single one "
             "around the whole layer"),
        ]
