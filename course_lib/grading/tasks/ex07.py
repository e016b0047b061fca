"""ex07, Transformer blocks: LayerNorm from scratch, the position-wise feed-forward, a layer."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...multihead import MultiHeadAttention
from ..core import Case, GradingError, Task, exercise_name, register
from .common import ModuleTask, randn


def _random_state(module: nn.Module, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """The module's parameter names with random values (LayerNorm gammas/betas too)."""
    return {
        exercise_name(name): 0.2 + 0.5 * randn(gen, *p.shape, dtype=p.dtype)
        for name, p in module.state_dict().items()
    }


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
        "torch.nn.functional.layer_norm",
        "torch.layer_norm",
        "torch.native_layer_norm",
        "torch.nn.LayerNorm",
        "torch.nn.functional.group_norm",
        "torch.nn.functional.rms_norm",
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
            case(
                "nearly constant rows, x (3, 6) * 1e-3 (variance close to eps)", (3, 6), scale=1e-3
            ),
            case(
                "float64 x (5, 5) * 1e-3 with eps=1e-4",
                (5, 5),
                dtype=torch.float64,
                scale=1e-3,
                eps=1e-4,
            ),
        ]

    def mistakes(self):
        return [
            (
                _ln_wrong_axis,
                "the statistics must be taken per token, over the last dimension "
                "(the d features): mean(dim=-1, keepdim=True), not over the batch or sequence",
            ),
            (
                _ln_unbiased,
                "LayerNorm uses the biased variance (divide by d, not d - 1): "
                "x.var(dim=-1, unbiased=False) or ((x - mean) ** 2).mean(-1)",
            ),
            (
                _ln_eps_outside,
                "eps goes inside the square root: (x - mean) / sqrt(var + eps), "
                "not (x - mean) / (sqrt(var) + eps)",
            ),
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
class FeedForwardTask(ModuleTask):
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
            Case(
                "training mode, dropout=0.5, d_model=6, d_ff=24, x (4, 6): the hidden units "
                "must be dropped at random (two passes differ), the output itself never",
                (randn(gen, 4, 6),),
                data={
                    "sizes": (6, 24),
                    "dropout": 0.5,
                    "state_dict": _random_state(FeedForward(6, 24), gen),
                },
            ),
        ]

    def init_args(self, case):
        dropout = case.data.get("dropout")
        return tuple(case.data["sizes"]), ({} if dropout is None else {"dropout": dropout})

    def run(self, module, case):
        mode = case.data.get("mode")
        if mode is not None:  # EX07-1: dropout with the reference's random seed
            module.train(mode == "train")
            with torch.no_grad(), torch.random.fork_rng(devices=[]):
                torch.manual_seed(case.data["seed"])
                out = module(*case.args)
            if mode == "train" and not isinstance(out, torch.Tensor):
                raise GradingError("forward should return a tensor")
            return out
        if case.data.get("dropout") is None:
            return super().run(module, case)
        module.train()  # dropout acts in training mode only: random, so judged by its effect
        with torch.no_grad():
            first, second = module(*case.args), module(*case.args)
        return {
            "two passes differ": not torch.equal(first, second),
            "outputs exactly zero": bool((first == 0).any()),
        }

    def mistakes(self):
        # The dropout mistakes first: on the training-mode case they are the specific ones.
        return [
            (
                _FFNoDropout,
                "the dropout argument is never applied: in training mode "
                "linear2(dropout(relu(linear1(x)))) drops hidden units at random (self.dropout = "
                "nn.Dropout(dropout), called between the ReLU and linear2)",
            ),
            (
                _FFDropoutOnOutput,
                "dropout belongs on the hidden units, between the ReLU and "
                "linear2, not on the output: linear2(dropout(relu(linear1(x))))",
            ),
            (
                _FFNoActivation,
                "there is no activation between the two linear layers, so the "
                "network is one linear map: use linear2(relu(linear1(x)))",
            ),
            (
                _FFActivationAfter,
                "the ReLU belongs between linear1 and linear2, not after "
                "linear2: use linear2(relu(linear1(x)))",
            ),
            (
                _FFActivationBoth,
                "apply the ReLU only between the two linear layers; the output "
                "of linear2 is not passed through it (it must be able to be negative)",
            ),
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
class EncoderLayerTask(ModuleTask):
    id = "ex07.EncoderLayer"
    lesson = "lesson 07, sections 'Post-norm and pre-norm' and 'The encoder layer'"
    reference = "course_lib.blocks.EncoderLayer"
    forbidden = (
        "torch.nn.TransformerEncoderLayer",
        "torch.nn.TransformerEncoder",
        "torch._transformer_encoder_layer_fwd",
    )

    def cases(self, gen):
        from ...blocks import EncoderLayer
        from ...masking import causal_mask

        def case(
            description,
            d_model,
            num_heads,
            d_ff,
            batch,
            seq,
            norm_first,
            dtype=torch.float32,
            mask=None,
        ):
            ref = EncoderLayer(d_model, num_heads, d_ff).to(dtype)
            data = {
                "sizes": (d_model, num_heads, d_ff),
                "norm_first": norm_first,
                "state_dict": _random_state(ref, gen),
            }
            x = randn(gen, batch, seq, d_model, dtype=dtype)
            return Case(description, (x,), {} if mask is None else {"mask": mask}, data=data)

        lengths = torch.tensor([6, 3, 1])
        pad = (torch.arange(6)[None, :] < lengths[:, None]).unsqueeze(1)  # (3, 1, 6)
        return [
            case(
                "post-norm (norm_first=False), d_model=8, 2 heads, x (2, 5, 8)",
                8,
                2,
                16,
                2,
                5,
                False,
            ),
            case(
                "pre-norm (norm_first=True), d_model=8, 2 heads, x (2, 5, 8)", 8, 2, 16, 2, 5, True
            ),
            case(
                "post-norm with a causal mask (4, 4), d_model=12, 3 heads",
                12,
                3,
                24,
                2,
                4,
                False,
                mask=causal_mask(4),
            ),
            case(
                "pre-norm with a padding mask (3, 1, 6), lengths [6, 3, 1]",
                8,
                4,
                32,
                3,
                6,
                True,
                mask=pad,
            ),
            case(
                "float64, post-norm, with a padding mask (3, 1, 6)",
                8,
                2,
                8,
                3,
                6,
                False,
                dtype=torch.float64,
                mask=pad,
            ),
            case(
                "float64, pre-norm, d_model=6, 1 head, x (1, 3, 6)",
                6,
                1,
                12,
                1,
                3,
                True,
                dtype=torch.float64,
            ),
        ]

    def init_args(self, case):
        return tuple(case.data["sizes"]), {"norm_first": case.data["norm_first"]}

    def mistakes(self):
        return [
            (
                _EncSwapped,
                "post-norm and pre-norm are swapped: norm_first=False (post-norm) is "
                "x = norm(x + sublayer(x)); norm_first=True (pre-norm) is "
                "x = x + sublayer(norm(x)) (a layer that is always pre-norm, whatever "
                "norm_first says, gets this hint too)",
            ),
            (
                _EncResidualNormed,
                "the residual must carry x itself around the sub-layer: "
                "post-norm is norm1(x + attention(x)), not x + norm1(attention(x)); pre-norm is "
                "x + attention(norm1(x)), not norm1(x) + attention(norm1(x))",
            ),
            (
                _EncNoResidual,
                "the residual connections are missing: add the sub-layer's input "
                "to its output (x + sublayer(...)) around both attention and feed-forward",
            ),
            (
                _EncResidualOutside,
                "each sub-layer needs its own residual connection: one "
                "around self-attention and one around the feed-forward network, not a single one "
                "around the whole layer",
            ),
        ]


# --------------------------------------------------------------------------------------------
# ex07.DecoderLayer (transfer: the lesson shows it, the learner wires three sub-layers)
# --------------------------------------------------------------------------------------------


class _DecoderMistake(nn.Module):
    """A decoder layer with one deliberate error, chosen by `kind`."""

    kind = ""

    def __init__(self, d_model, num_heads, d_ff, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.multihead_attn = MultiHeadAttention(d_model, num_heads)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        kind = self.kind
        pre = self.norm_first if kind != "pre_post_swapped" else not self.norm_first
        norm2, norm3 = (
            (self.norm3, self.norm2) if kind == "norms_swapped" else (self.norm2, self.norm3)
        )
        if kind == "masks_swapped":
            self_mask, memory_mask = memory_mask, self_mask

        def sa(h):
            return self.self_attn(h, h, h, mask=None if kind == "no_self_mask" else self_mask)[0]

        def ca(h):
            if kind == "no_memory_mask":
                return self.multihead_attn(h, memory, memory, mask=None)[0]
            if kind == "cross_on_x":  # keys and values from the target instead of memory
                return self.multihead_attn(h, h, h, mask=None)[0]
            if kind == "memory_normed":  # norm2 applied to memory too, not only the queries
                m = norm2(memory)
                return self.multihead_attn(h, m, m, mask=memory_mask)[0]
            return self.multihead_attn(h, memory, memory, mask=memory_mask)[0]

        def ff(h):
            return self.linear2(F.relu(self.linear1(h)))

        if pre and kind == "residual_of_normed":  # h = norm(x); h + sublayer(h)
            h = self.norm1(x)
            x = h + sa(h)
            h = norm2(x)
            x = h + ca(h)
            h = norm3(x)
            return h + ff(h)
        if pre:
            x = x + sa(self.norm1(x))
            x = x + ca(norm2(x))
            return x + ff(norm3(x))
        x = self.norm1(x + sa(x))
        x = norm2(x + ca(x))
        return norm3(x + ff(x))


class _DecCrossOnTarget(_DecoderMistake):
    kind = "cross_on_x"


class _DecNormsSwapped(_DecoderMistake):
    kind = "norms_swapped"


class _DecPrePostSwapped(_DecoderMistake):
    kind = "pre_post_swapped"


class _DecMasksSwapped(_DecoderMistake):
    kind = "masks_swapped"


class _DecNoSelfMask(_DecoderMistake):
    kind = "no_self_mask"


class _DecMemoryNormed(_DecoderMistake):
    kind = "memory_normed"


class _DecNoMemoryMask(_DecoderMistake):
    kind = "no_memory_mask"


class _DecResidualOfNormed(_DecoderMistake):
    kind = "residual_of_normed"


@register
class DecoderLayerTask(ModuleTask):
    id = "ex07.DecoderLayer"
    lesson = "lesson 07, section 'The decoder layer'"
    reference = "course_lib.blocks.DecoderLayer"
    forbidden = (
        "torch.nn.TransformerDecoderLayer",
        "torch.nn.TransformerDecoder",
        "torch.nn.Transformer",
    )

    def cases(self, gen):
        from ...blocks import DecoderLayer
        from ...masking import causal_mask

        def case(
            description,
            d_model,
            num_heads,
            d_ff,
            batch,
            n_tgt,
            n_src,
            norm_first,
            dtype=torch.float32,
            self_mask=None,
            memory_mask=None,
        ):
            ref = DecoderLayer(d_model, num_heads, d_ff).to(dtype)
            data = {
                "sizes": (d_model, num_heads, d_ff),
                "norm_first": norm_first,
                "state_dict": _random_state(ref, gen),
            }
            x = randn(gen, batch, n_tgt, d_model, dtype=dtype)
            memory = randn(gen, batch, n_src, d_model, dtype=dtype)
            return Case(description, (x, memory, self_mask, memory_mask), data=data)

        src_pad = (torch.arange(6)[None, :] < torch.tensor([6, 2, 4])[:, None]).unsqueeze(1)
        return [
            case(
                "post-norm (norm_first=False), d_model=8, 2 heads, x (2, 4, 8), memory "
                "(2, 6, 8), no masks",
                8,
                2,
                16,
                2,
                4,
                6,
                False,
            ),
            case(
                "pre-norm (norm_first=True), d_model=8, 2 heads, x (2, 4, 8), memory (2, 6, 8)",
                8,
                2,
                16,
                2,
                4,
                6,
                True,
            ),
            case(
                "post-norm with a causal self_mask (6, 6) and a source padding memory_mask "
                "(3, 1, 6), x (3, 6, 8), memory (3, 6, 8) (as long as the target), 2 heads",
                8,
                2,
                16,
                3,
                6,
                6,
                False,
                self_mask=causal_mask(6),
                memory_mask=src_pad,
            ),
            case(
                "post-norm with a causal self_mask (5, 5) and a source padding memory_mask "
                "(3, 1, 6), x (3, 5, 12), memory (3, 6, 12), 3 heads",
                12,
                3,
                24,
                3,
                5,
                6,
                False,
                self_mask=causal_mask(5),
                memory_mask=src_pad,
            ),
            case(
                "pre-norm with a causal self_mask (3, 3) and a memory_mask (3, 1, 6), x (3, 3, "
                "8), memory (3, 6, 8), 4 heads",
                8,
                4,
                32,
                3,
                3,
                6,
                True,
                self_mask=causal_mask(3),
                memory_mask=src_pad,
            ),
            case(
                "float64, post-norm, batch 1, x (1, 6, 6), memory (1, 2, 6), 1 head, causal "
                "self_mask",
                6,
                1,
                12,
                1,
                6,
                2,
                False,
                dtype=torch.float64,
                self_mask=causal_mask(6),
            ),
            case(
                "pre-norm with per-sequence masks: self_mask (3, 5, 5) causal and padded "
                "differently in each row, memory_mask (3, 5, 6) different for each query, "
                "x (3, 5, 8), memory (3, 6, 8), 2 heads",
                8,
                2,
                16,
                3,
                5,
                6,
                True,
                self_mask=causal_mask(5)
                & (torch.arange(5)[None, None, :] < torch.tensor([5, 3, 4])[:, None, None]),
                memory_mask=(torch.rand(3, 5, 6, generator=gen) > 0.4)
                | (torch.arange(6) == 0)[None, None, :],
            ),
            case(
                "float64, pre-norm, x (2, 4, 8), memory (2, 3, 8), causal self_mask",
                8,
                2,
                8,
                2,
                4,
                3,
                True,
                dtype=torch.float64,
                self_mask=causal_mask(4),
            ),
        ]

    def init_args(self, case):
        return tuple(case.data["sizes"]), {"norm_first": case.data["norm_first"]}

    def mistakes(self):
        return [
            (
                _DecCrossOnTarget,
                "the cross-attention takes its keys and values from the target "
                "x: that is a second self-attention. Queries come from x, keys and values from "
                "memory (the encoder's output): multihead_attn(x, memory, memory, "
                "mask=memory_mask)",
            ),
            (
                _DecNormsSwapped,
                "norm2 and norm3 are swapped: norm1 goes with self-attention, "
                "norm2 with cross-attention, norm3 with the feed-forward network (the names of "
                "nn.TransformerDecoderLayer)",
            ),
            (
                _DecPrePostSwapped,
                "post-norm and pre-norm are swapped: norm_first=False "
                "(post-norm) is x = norm(x + sublayer(x)); norm_first=True (pre-norm) is "
                "x = x + sublayer(norm(x)) (a layer that is always pre-norm, whatever "
                "norm_first says, gets this hint too)",
            ),
            (
                _DecMasksSwapped,
                "self_mask belongs to the self-attention (target to target, "
                "causal) and memory_mask to the cross-attention (target to source padding); you "
                "swapped them",
            ),
            (
                _DecNoSelfMask,
                "the self-attention ignores self_mask: without the causal mask "
                "every target position sees the future tokens it must predict",
            ),
            (
                _DecNoMemoryMask,
                "the cross-attention ignores memory_mask: the padding positions of the source "
                "must get zero weight, multihead_attn(x, memory, memory, mask=memory_mask)",
            ),
            (
                _DecResidualOfNormed,
                "in pre-norm the residual adds the sub-layer's output to x itself, "
                "x + sublayer(norm(x)), not to the normalised norm(x)",
            ),
            (
                _DecMemoryNormed,
                "memory goes into the cross-attention as it is: norm2 normalises the target "
                "side only (in pre-norm, the queries; memory was already normalised by the "
                "encoder's final LayerNorm), as in lesson 06's cross-attention sub-layer",
            ),
        ]


# --------------------------------------------------------------------------------------------
# ex07.rms_norm (transfer: Llama's norm)
# --------------------------------------------------------------------------------------------


def _rms_mean_subtracted(x, weight, eps=1e-6):
    centred = x - x.mean(dim=-1, keepdim=True)
    return centred / torch.sqrt(centred.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


def _rms_eps_outside(x, weight, eps=1e-6):
    return x / (torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True)) + eps) * weight


def _rms_wrong_axis(x, weight, eps=1e-6):
    return x / torch.sqrt(x.pow(2).mean(dim=0, keepdim=True) + eps) * weight


def _rms_no_sqrt(x, weight, eps=1e-6):
    return x / (x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


@register
class RMSNormTask(Task):
    id = "ex07.rms_norm"
    lesson = "lesson 07, section 'LayerNorm from scratch'"
    reference = "course_lib.llama.rms_norm"
    forbidden = (
        "torch.nn.functional.rms_norm",
        "torch.nn.RMSNorm",
        "torch.nn.functional.layer_norm",
        "torch.nn.LayerNorm",
        "torch.rms_norm",
    )

    def cases(self, gen):
        def case(description, shape, dtype=torch.float32, scale=3.0, shift=0.0, eps=None):
            d = shape[-1]
            x = scale * randn(gen, *shape, dtype=dtype) + shift
            weight = 1.0 + 0.5 * randn(gen, d, dtype=dtype)
            kwargs = {} if eps is None else {"eps": eps}
            return Case(description, (x, weight), kwargs)

        return [
            case(
                "x (2, 5, 8) with a mean of 2 per feature (RMSNorm keeps the mean)",
                (2, 5, 8),
                shift=2.0,
            ),
            case("x (7, 4), one vector per row", (7, 4), shift=-1.0),
            case("float64 x (2, 3, 4, 16)", (2, 3, 4, 16), dtype=torch.float64, shift=0.5),
            case(
                "x (1, 3, 6) of tiny values (about 1e-3), default eps = 1e-6", (1, 3, 6), scale=1e-3
            ),
            case("float64 x (3, 5) with eps=0.5 given", (3, 5), dtype=torch.float64, eps=0.5),
            case("x (4, 1): a single feature", (4, 1), shift=1.0),
        ]

    def mistakes(self):
        return [
            (
                _rms_mean_subtracted,
                "you subtracted the mean: that is LayerNorm without its bias. "
                "RMSNorm only divides by the root mean square, sqrt(mean(x**2) + eps), and keeps "
                "the mean",
            ),
            (_rms_eps_outside, "eps goes inside the square root: sqrt(mean(x**2) + eps)"),
            (
                _rms_wrong_axis,
                "the mean is over the last dimension (each vector's d features): "
                "mean(dim=-1, keepdim=True)",
            ),
            (
                _rms_no_sqrt,
                "divide by the ROOT mean square: take the square root of mean(x**2) + eps",
            ),
        ]


# --------------------------------------------------------------------------------------------
# ex07.SwiGLU (transfer: Llama's feed-forward)
# --------------------------------------------------------------------------------------------


class _SwiGLUMistake(nn.Module):
    kind = ""

    def __init__(self, d_model, d_ff=None):
        super().__init__()
        if d_ff is None:  # "regrouped" rounds 4 * d_model / 3 down before doubling
            d_ff = 2 * (4 * d_model // 3) if self.kind == "regrouped" else 8 * d_model // 3
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x):
        gate, up = self.gate_proj(x), self.up_proj(x)
        if self.kind == "gate_on_up":
            return self.down_proj(F.silu(up) * gate)
        if self.kind == "no_gate":
            return self.down_proj(F.silu(gate))
        if self.kind == "sigmoid":
            return self.down_proj(torch.sigmoid(gate) * up)
        if self.kind == "gelu":
            return self.down_proj(F.gelu(gate) * up)
        if self.kind == "both":
            return self.down_proj(F.silu(gate) * F.silu(up))
        return self.down_proj(F.silu(gate) * up)


class _GateOnUp(_SwiGLUMistake):
    kind = "gate_on_up"


class _NoGate(_SwiGLUMistake):
    kind = "no_gate"


class _SigmoidGate(_SwiGLUMistake):
    kind = "sigmoid"


class _GeluGate(_SwiGLUMistake):
    kind = "gelu"


class _SiluOnBoth(_SwiGLUMistake):
    kind = "both"


class _SwiGLURegrouped(_SwiGLUMistake):
    kind = "regrouped"


@register
class SwiGLUTask(ModuleTask):
    id = "ex07.SwiGLU"
    lesson = "lesson 07, section 'The position-wise feed-forward network'"
    reference = "course_lib.llama.SwiGLU"

    def cases(self, gen):
        def case(description, d_model, d_ff, shape, dtype=torch.float32):
            hidden = 8 * d_model // 3 if d_ff is None else d_ff
            state = {
                "gate_proj.weight": randn(gen, hidden, d_model, dtype=dtype) * d_model**-0.5,
                "up_proj.weight": randn(gen, hidden, d_model, dtype=dtype) * d_model**-0.5,
                "down_proj.weight": randn(gen, d_model, hidden, dtype=dtype) * hidden**-0.5,
            }
            args = (d_model,) if d_ff is None else (d_model, d_ff)
            x = 2.0 * randn(gen, *shape, d_model, dtype=dtype)
            return Case(description, (x,), data={"sizes": args, "state_dict": state})

        return [
            case("d_model=8, d_ff=12, x (2, 5, 8)", 8, 12, (2, 5)),
            case(
                "d_model=12 and d_ff left out: d_ff = 8 * 12 // 3 = 32, x (3, 12)",
                12,
                None,
                (3,),
            ),
            case("d_model=64, d_ff left out (170), x (1, 2, 64)", 64, None, (1, 2)),
            case(
                "float64, d_model=6, d_ff=5 (d_ff < d_model), x (2, 2, 3, 6)",
                6,
                5,
                (2, 2, 3),
                dtype=torch.float64,
            ),
            case("d_model=4, d_ff=1, x (5, 4)", 4, 1, (5,)),
            # where 8 * d_model // 3 and 2 * (4 * d_model // 3) differ (d_model % 3 == 2)
            case(
                "d_model=8 and d_ff left out: d_ff = 8 * 8 // 3 = 21, x (2, 3, 8)", 8, None, (2, 3)
            ),
            case(
                "d_model=128 (the course's GPT width) and d_ff left out: d_ff = 8 * 128 // 3 "
                "= 341, x (2, 128)",
                128,
                None,
                (2,),
            ),
        ]

    def build(self, obj, case):
        """A default width that differs from the rule, named by the mistake that builds it."""
        module = super().build(obj, case)
        if len(case.data["sizes"]) == 1:
            width = getattr(getattr(module, "gate_proj", None), "out_features", None)
            if width is not None and width != 8 * case.data["sizes"][0] // 3:
                for wrong, hint in self.mistakes():
                    if wrong(*case.data["sizes"]).gate_proj.out_features == width:
                        raise GradingError(
                            f"with d_ff left out your d_ff is {width}, expected "
                            f"{8 * case.data['sizes'][0] // 3}. Hint: {hint}"
                        )
        return module

    def mistakes(self):
        return [
            (
                _GateOnUp,
                "the gate is on the wrong branch: SiLU goes on gate_proj(x), which then "
                "multiplies the plain up_proj(x): down_proj(silu(gate_proj(x)) * up_proj(x))",
            ),
            (
                _NoGate,
                "the up branch is missing: SwiGLU multiplies silu(gate_proj(x)) "
                "element-wise by up_proj(x) before down_proj",
            ),
            (_SigmoidGate, "SiLU (swish) is x * sigmoid(x), not sigmoid(x): use F.silu"),
            (_GeluGate, "SwiGLU uses SiLU (swish), F.silu, not GELU (that would be GeGLU)"),
            (_SiluOnBoth, "only the gate branch goes through SiLU; up_proj(x) stays linear"),
            (
                _SwiGLURegrouped,
                "the default d_ff is 8 * d_model // 3: multiply first, then round down once. "
                "2 * (4 * d_model // 3) groups the same operators otherwise: it rounds "
                "4 * d_model / 3 down before doubling and comes out one short whenever d_model "
                "% 3 == 2 (340 instead of 341 at the course's d_model = 128)",
            ),
        ]


# --------------------------------------------------------------------------------------------
# Review 2026-11-23 (EX07-1, EX07-2), kept apart so that it merges with work on the cases above
# --------------------------------------------------------------------------------------------

from ..core import extend_task  # noqa: E402


class _EncoderVariant(_EncoderMistake):
    def forward(self, x, mask=None):
        m = None if self.kind == "mask_ignored" else mask
        act = F.gelu if self.kind == "gelu" else F.relu
        norm2 = self.norm1 if self.kind == "norm1_twice" else self.norm2

        def sa(h):
            return self.self_attn(h, h, h, mask=m)[0]

        def ff(h):
            return self.linear2(act(self.linear1(h)))

        if self.norm_first:
            x = x + sa(self.norm1(x))
            return x + ff(norm2(x))
        x = self.norm1(x + sa(x))
        return norm2(x + ff(x))


class _EncMaskIgnored(_EncoderVariant):
    kind = "mask_ignored"


class _EncGelu(_EncoderVariant):
    kind = "gelu"


class _EncNorm1Twice(_EncoderVariant):
    kind = "norm1_twice"


extend_task(
    EncoderLayerTask,
    mistakes=[
        (
            _EncMaskIgnored,
            "the mask is ignored: pass it to the self-attention, self_attn(h, h, h, mask=mask)",
        ),
        (_EncGelu, "the feed-forward network of this layer uses ReLU (F.relu), not GELU"),
        (
            _EncNorm1Twice,
            "norm1 is used twice: norm1 goes with the attention, norm2 with the "
            "feed-forward network (each has its own weights)",
        ),
    ],
)


# EX07-1: dropout sits between the activation and linear2, is random in train mode and off in
# eval mode. With the same seed, nn.Dropout or F.dropout(training=self.training) at that place
# draws the same mask as the reference. (No dropout, and dropout after linear2, are mistakes
# of FeedForwardTask itself, above.)
class _FFDropoutVariant(nn.Module):
    kind = ""

    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.p = dropout
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        h = F.relu(self.linear1(x))
        if self.kind == "always":
            return self.linear2(F.dropout(h, self.p))
        return self.linear2(F.dropout(h, self.p, training=self.training))


class _FFDropoutAlways(_FFDropoutVariant):
    kind = "always"


def _dropout_cases(gen):
    from ...blocks import FeedForward

    def case(description, mode, d_model, d_ff, shape):
        ref = FeedForward(d_model, d_ff)
        data = {
            "sizes": (d_model, d_ff, 0.5),
            "state_dict": _random_state(ref, gen),
            "mode": mode,
            "seed": int(torch.randint(0, 2**31 - 1, (1,), generator=gen)),
        }
        return Case(description, (randn(gen, *shape, d_model),), data=data)

    return [
        case(
            "dropout=0.5 in train mode (same random seed as the reference): dropout after the "
            "activation, before linear2",
            "train",
            8,
            16,
            (2, 5),
        ),
        case("dropout=0.5 in eval mode: no dropout at all", "eval", 6, 12, (3, 4)),
    ]


extend_task(
    FeedForwardTask,
    cases=_dropout_cases,
    mistakes=[
        (
            _FFDropoutAlways,
            "the dropout also drops in eval mode: F.dropout needs "
            "training=self.training (nn.Dropout does this for you)",
        ),
    ],
)


# --------------------------------------------------------------------------------------------
# Single mistakes that got "more than one thing may be wrong" (or the hint of another mistake):
# eps ignored or with another default, gamma and beta swapped, a residual or a norm misplaced,
# masks inverted, norm_first ignored, another activation; and dropout given as the probability
# of keeping a unit, which passed every check (no case had a dropout other than 0.5)
# --------------------------------------------------------------------------------------------


def _ln_no_keepdim(x, gamma, beta, eps=1e-5):
    mean = x.mean(dim=-1)
    var = ((x - mean) ** 2).mean(dim=-1)
    return (x - mean) / torch.sqrt(var + eps) * gamma + beta


def _ln_parts(x, eps, *, centre=True, second_moment=False, sqrt=True, dim=-1):
    """(x - mean) / sqrt(var + eps) over `dim`, or a version with one piece changed."""
    if dim is None:  # statistics of the whole tensor
        mean = x.mean()
        var = ((x - mean) ** 2).mean()
    else:
        mean = x.mean(dim=dim, keepdim=True)
        var = (x**2 if second_moment else (x - mean) ** 2).mean(dim=dim, keepdim=True)
    spread = torch.sqrt(var + eps) if sqrt else var + eps
    return (x - mean if centre else x) / spread


def _ln_gamma_beta_swapped(x, gamma, beta, eps=1e-5):
    return _ln_parts(x, eps) * beta + gamma


def _ln_not_centred(x, gamma, beta, eps=1e-5):
    return _ln_parts(x, eps, centre=False) * gamma + beta


def _ln_second_moment(x, gamma, beta, eps=1e-5):
    return _ln_parts(x, eps, second_moment=True) * gamma + beta


def _ln_divided_by_variance(x, gamma, beta, eps=1e-5):
    return _ln_parts(x, eps, sqrt=False) * gamma + beta


def _ln_no_beta(x, gamma, beta, eps=1e-5):
    return _ln_parts(x, eps) * gamma


def _ln_whole_tensor(x, gamma, beta, eps=1e-5):
    return _ln_parts(x, eps, dim=None) * gamma + beta


def _ln_dim1(x, gamma, beta, eps=1e-5):
    return _ln_parts(x, eps, dim=1) * gamma + beta


def _ln_eps_ignored(x, gamma, beta, eps=1e-5):
    return _ln_parts(x, 1e-5) * gamma + beta


def _ln_default_eps(x, gamma, beta, eps=1e-6):
    return _ln_parts(x, eps) * gamma + beta


def _ln_no_eps(x, gamma, beta, eps=1e-5):
    return _ln_parts(x, 0.0) * gamma + beta


_NO_KEEPDIM = (
    "mean(dim=-1) without keepdim=True drops the last axis, so x - mean does not line up "
    "with x: keep it, x.mean(dim=-1, keepdim=True), shape (..., 1)"
)

extend_task(
    LayerNormTask,
    mistakes=[
        (_ln_no_keepdim, _NO_KEEPDIM),
        (
            _ln_gamma_beta_swapped,
            "gamma and beta are swapped: gamma scales the normalised x and beta shifts it, "
            "x_hat * gamma + beta",
        ),
        (
            _ln_not_centred,
            "the mean is not subtracted from x: the result is (x - mean) / sqrt(var + eps), "
            "not x / sqrt(var + eps)",
        ),
        (
            _ln_second_moment,
            "the variance is the mean of (x - mean) ** 2; the mean of x ** 2 is the variance "
            "only when the mean is 0",
        ),
        (
            _ln_divided_by_variance,
            "divide by the standard deviation sqrt(var + eps), not by the variance var + eps",
        ),
        (_ln_no_beta, "beta is missing: the result is x_hat * gamma + beta"),
        (
            _ln_whole_tensor,
            "the mean and variance are taken over the whole tensor (no dim); each vector gets "
            "its own, over the last dimension: x.mean(dim=-1, keepdim=True)",
        ),
        (
            _ln_dim1,
            "the statistics are taken over dim=1, the last dimension only when x is 2-D: "
            "use dim=-1 (keepdim=True), whatever the batch dimensions",
        ),
        (
            _ln_eps_ignored,
            "the eps argument is ignored (a fixed 1e-5 is used instead): with eps=0.5 the result "
            "must change; use the eps you are given, sqrt(var + eps)",
        ),
        (
            _ln_default_eps,
            "the default eps is 1e-5 (nn.LayerNorm's), not 1e-6: "
            "def layer_norm(x, gamma, beta, eps=1e-5)",
        ),
        (
            _ln_no_eps,
            "your result is LayerNorm without eps (or with a far smaller one): add eps to the "
            "variance inside the square root, sqrt(var + eps), with the default eps=1e-5",
        ),
    ],
)


def _rms_parts(x, eps, *, squares="mean", keepdim=True):
    """sqrt(mean(x**2) + eps) over the last dimension, or a version with one piece changed."""
    if squares == "sum":
        ms = x.pow(2).sum(dim=-1, keepdim=keepdim)
    elif squares == "mean squared":  # the square of the mean
        ms = x.mean(dim=-1, keepdim=keepdim).pow(2)
    else:
        ms = x.pow(2).mean(dim=-1, keepdim=keepdim)
    return torch.sqrt(ms + eps)


def _rms_no_keepdim(x, weight, eps=1e-6):
    return x / _rms_parts(x, eps, keepdim=False) * weight


def _rms_weight_added(x, weight, eps=1e-6):
    return x / _rms_parts(x, eps) + weight


def _rms_no_weight(x, weight, eps=1e-6):
    return x / _rms_parts(x, eps)


def _rms_sum(x, weight, eps=1e-6):
    return x / _rms_parts(x, eps, squares="sum") * weight


def _rms_times_rms(x, weight, eps=1e-6):
    return x * _rms_parts(x, eps) * weight


def _rms_mean_squared(x, weight, eps=1e-6):
    return x / _rms_parts(x, eps, squares="mean squared") * weight


def _rms_eps_ignored(x, weight, eps=1e-6):
    return x / _rms_parts(x, 1e-6) * weight


def _rms_default_eps(x, weight, eps=1e-5):
    return x / _rms_parts(x, eps) * weight


def _rms_no_eps(x, weight, eps=1e-6):
    return x / _rms_parts(x, 0.0) * weight


extend_task(
    RMSNormTask,
    mistakes=[
        (_rms_no_keepdim, _NO_KEEPDIM.replace("x - mean does", "x / rms does")),
        (
            _rms_weight_added,
            "weight scales the normalised x: multiply by it, x / rms * weight, do not add it",
        ),
        (_rms_no_weight, "weight is missing: multiply the normalised x by it, x / rms * weight"),
        (
            _rms_sum,
            "divide by the root MEAN square: the mean of x**2 over the d features, not the sum "
            "(which would give every vector length 1 instead of RMS 1)",
        ),
        (
            _rms_times_rms,
            "you multiplied by the root mean square instead of dividing by it: "
            "x / sqrt(mean(x**2) + eps), or x * torch.rsqrt(mean(x**2) + eps) (rsqrt is already "
            "1 / sqrt)",
        ),
        (
            _rms_mean_squared,
            "the mean of the squares, mean(x**2), is not the square of the mean, mean(x)**2: "
            "square x first, then average",
        ),
        (
            _rms_eps_ignored,
            "the eps argument is ignored (a fixed 1e-6 is used instead): with eps=0.5 the result "
            "must change; use the eps you are given, sqrt(mean(x**2) + eps)",
        ),
        (
            _rms_default_eps,
            "the default eps of rms_norm is 1e-6 (Llama's), not 1e-5 (LayerNorm's): "
            "def rms_norm(x, weight, eps=1e-6)",
        ),
        (
            _rms_no_eps,
            "your result is RMSNorm without eps (or with a far smaller one): add eps inside the "
            "square root, sqrt(mean(x**2) + eps), with the default eps=1e-6",
        ),
    ],
)


class _FFVariant(_FFDropoutVariant):
    """linear2(dropout(relu(linear1(x)))) with one piece changed, chosen by `kind`."""

    def forward(self, x):
        kind = self.kind
        p = {"fixed_p": 0.1, "keep_probability": 1 - self.p}.get(kind, self.p)
        act = F.gelu if kind == "gelu" else F.relu
        if kind == "input_dropout":
            x_in = F.dropout(x, p, training=self.training)
            return self.linear2(act(self.linear1(x_in)))
        out = self.linear2(F.dropout(act(self.linear1(x)), p, training=self.training))
        return x + out if kind == "residual" else out


class _FFGelu(_FFVariant):
    kind = "gelu"


class _FFFixedDropout(_FFVariant):
    kind = "fixed_p"


class _FFInputDropout(_FFVariant):
    kind = "input_dropout"


class _FFResidual(_FFVariant):
    kind = "residual"


class _FFKeepProbability(_FFVariant):
    kind = "keep_probability"


def _dropout_rate_case(gen):
    from ...blocks import FeedForward

    data = {
        "sizes": (6, 16, 0.2),
        "state_dict": _random_state(FeedForward(6, 16), gen),
        "mode": "train",
        "seed": int(torch.randint(0, 2**31 - 1, (1,), generator=gen)),
    }
    return [
        Case(
            "dropout=0.2 in train mode (same random seed as the reference): each hidden unit "
            "dropped with probability 0.2, the others scaled by 1 / 0.8",
            (randn(gen, 3, 4, 6),),
            data=data,
        )
    ]


extend_task(
    FeedForwardTask,
    cases=_dropout_rate_case,
    mistakes=[
        (
            _FFKeepProbability,
            "nn.Dropout(p) takes the probability of dropping a unit, not of keeping it: "
            "nn.Dropout(dropout), not nn.Dropout(1 - dropout)",
        ),
        (
            _FFFixedDropout,
            "the dropout probability is the `dropout` argument, not a number of your own: "
            "nn.Dropout(dropout)",
        ),
        (
            _FFInputDropout,
            "dropout belongs on the hidden units, between the ReLU and linear2, not on the "
            "input x: linear2(dropout(relu(linear1(x))))",
        ),
        (_FFGelu, "the activation of this feed-forward network is ReLU (F.relu), not GELU"),
        (
            _FFResidual,
            "the feed-forward network has no residual connection of its own: return "
            "linear2(dropout(relu(linear1(x)))); the layer that uses it adds x",
        ),
    ],
)


_ALWAYS_POST_NORM = (
    "norm_first is ignored: your layer is post-norm even with norm_first=True, which asks "
    "for pre-norm, x = x + sublayer(norm(x)); keep self.norm_first = norm_first and branch on "
    "it in forward"
)
_MASK_INVERTED = (
    "the mask is inverted: here True means 'may attend' (nn.MultiheadAttention's masks mean "
    "the opposite), so pass the mask as it is, not ~mask"
)
_LAYER_NORM_EPS = (
    "your LayerNorms use another eps than nn.LayerNorm's default 1e-5 (some tutorials use "
    "1e-6): create them as nn.LayerNorm(d_model)"
)


class _EncoderMore(_EncoderMistake):
    def __init__(self, d_model, num_heads, d_ff, norm_first=False):
        super().__init__(d_model, num_heads, d_ff, norm_first)
        if self.kind == "norm_eps":
            self.norm1, self.norm2 = nn.LayerNorm(d_model, 1e-6), nn.LayerNorm(d_model, 1e-6)

    def forward(self, x, mask=None):
        kind = self.kind
        if kind == "mask_inverted" and mask is not None:
            mask = ~mask
        norm1, norm2 = (
            (self.norm2, self.norm1) if kind == "norms_swapped" else (self.norm1, self.norm2)
        )
        keep_attn, keep_ff = kind != "no_attn_residual", kind != "no_ff_residual"
        if self.norm_first and kind != "always_post":
            h = self._sa(norm1(x), mask) + (x if keep_attn else 0)
            return self._ff(norm2(x if kind == "ff_on_input" else h)) + (h if keep_ff else 0)
        h = norm1(self._sa(x, mask) + (x if keep_attn else 0))
        return norm2(self._ff(x if kind == "ff_on_input" else h) + (h if keep_ff else 0))


class _EncAlwaysPostNorm(_EncoderMore):
    kind = "always_post"


class _EncMaskInverted(_EncoderMore):
    kind = "mask_inverted"


class _EncNormsSwapped(_EncoderMore):
    kind = "norms_swapped"


class _EncFFOnInput(_EncoderMore):
    kind = "ff_on_input"


class _EncNoAttnResidual(_EncoderMore):
    kind = "no_attn_residual"


class _EncNoFFResidual(_EncoderMore):
    kind = "no_ff_residual"


class _EncLayerNormEps(_EncoderMore):
    kind = "norm_eps"


extend_task(
    EncoderLayerTask,
    mistakes_first=[(_EncAlwaysPostNorm, _ALWAYS_POST_NORM)],
    mistakes=[
        (_EncMaskInverted, _MASK_INVERTED),
        (
            _EncNormsSwapped,
            "norm1 and norm2 are swapped: norm1 goes with the self-attention, norm2 with the "
            "feed-forward network",
        ),
        (
            _EncFFOnInput,
            "the feed-forward sub-layer reads the layer's input x instead of the output of the "
            "attention sub-layer: the two run one after the other, x = x + attention(...), then "
            "the feed-forward network on that new x",
        ),
        (
            _EncNoAttnResidual,
            "the residual connection around the self-attention is missing: add its input, "
            "x + attention(...), as you did around the feed-forward network",
        ),
        (
            _EncNoFFResidual,
            "the residual connection around the feed-forward network is missing: add its input, "
            "x + ffn(...), as you did around the self-attention",
        ),
        (_EncLayerNormEps, _LAYER_NORM_EPS),
    ],
)


_WRONG_ORDER = (
    "the sub-layers are in the wrong order: self-attention over the target first, then "
    "the cross-attention to memory, then the feed-forward network"
)


class _DecoderMore(_DecoderMistake):
    def __init__(self, d_model, num_heads, d_ff, norm_first=False):
        super().__init__(d_model, num_heads, d_ff, norm_first)
        if self.kind == "norm_eps":
            self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model, 1e-6) for _ in range(3))

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        kind = self.kind
        if kind == "masks_inverted":
            self_mask = None if self_mask is None else ~self_mask
            memory_mask = None if memory_mask is None else ~memory_mask
        act = F.gelu if kind == "gelu" else F.relu
        norms = (
            [self.norm1] * 3 if kind == "norm1_everywhere" else [self.norm1, self.norm2, self.norm3]
        )

        def sa(h):
            return self.self_attn(h, h, h, mask=self_mask)[0]

        def ca(h):
            if kind == "queries_from_memory":
                return self.multihead_attn(memory, h, h, mask=memory_mask)[0]
            return self.multihead_attn(h, memory, memory, mask=memory_mask)[0]

        def ff(h):
            return self.linear2(act(self.linear1(h)))

        sublayers = [ca, sa, ff] if kind == "cross_first" else [sa, ca, ff]
        pairs = list(zip(norms, sublayers, strict=True))
        if kind in ("lines_cross_first", "lines_ff_before_cross"):  # whole lines moved
            order = (1, 0, 2) if kind == "lines_cross_first" else (0, 2, 1)
            pairs = [pairs[i] for i in order]
        layer_input = x
        for i, (norm, sublayer) in enumerate(pairs):
            if kind == "cross_reads_input" and i == 1:  # the cross-attention reads the stale x
                x = (
                    x + sublayer(norm(layer_input))
                    if self.norm_first
                    else norm(x + sublayer(layer_input))
                )
            elif kind == "no_residual":
                x = sublayer(norm(x)) if self.norm_first else norm(sublayer(x))
            elif self.norm_first and kind != "always_post":
                x = x + sublayer(norm(x))
            elif kind == "residual_normed":
                x = x + norm(sublayer(x))
            elif kind == "no_final_norm" and i == 2:
                x = x + sublayer(x)
            else:
                x = norm(x + sublayer(x))
        return x


class _DecAlwaysPostNorm(_DecoderMore):
    kind = "always_post"


class _DecMasksInverted(_DecoderMore):
    kind = "masks_inverted"


class _DecQueriesFromMemory(_DecoderMore):
    kind = "queries_from_memory"


class _DecGelu(_DecoderMore):
    kind = "gelu"


class _DecNorm1Everywhere(_DecoderMore):
    kind = "norm1_everywhere"


class _DecNoResidual(_DecoderMore):
    kind = "no_residual"


class _DecResidualNormed(_DecoderMore):
    kind = "residual_normed"


class _DecNoFinalNorm(_DecoderMore):
    kind = "no_final_norm"


class _DecCrossFirst(_DecoderMore):
    kind = "cross_first"


class _DecLayerNormEps(_DecoderMore):
    kind = "norm_eps"


class _DecCrossReadsInput(_DecoderMore):
    kind = "cross_reads_input"


class _DecLinesCrossFirst(_DecoderMore):
    kind = "lines_cross_first"


class _DecLinesFFBeforeCross(_DecoderMore):
    kind = "lines_ff_before_cross"


extend_task(
    DecoderLayerTask,
    mistakes_first=[(_DecAlwaysPostNorm, _ALWAYS_POST_NORM)],
    mistakes=[
        (_DecMasksInverted, _MASK_INVERTED.replace("the mask is", "the masks are")),
        (
            _DecQueriesFromMemory,
            "the cross-attention takes its queries from memory: the queries come from the "
            "target x, the keys and values from memory, multihead_attn(x, memory, memory, "
            "mask=memory_mask)",
        ),
        (_DecGelu, "the feed-forward network of this layer uses ReLU (F.relu), not GELU"),
        (
            _DecNorm1Everywhere,
            "norm1 is used for every sub-layer: norm1 goes with the self-attention, norm2 with "
            "the cross-attention, norm3 with the feed-forward network (each has its own weights)",
        ),
        (
            _DecNoResidual,
            "the residual connections are missing: add each sub-layer's input to its output "
            "(x + sublayer(...)) around all three sub-layers",
        ),
        (
            _DecResidualNormed,
            "the residual must carry x itself around the sub-layer: post-norm is "
            "norm(x + sublayer(x)), not x + norm(sublayer(x))",
        ),
        (
            _DecNoFinalNorm,
            "the feed-forward sub-layer has no LayerNorm: in post-norm the last step is "
            "x = norm3(x + ffn(x))",
        ),
        (_DecCrossFirst, _WRONG_ORDER),
        (_DecLayerNormEps, _LAYER_NORM_EPS),
        (
            _DecCrossReadsInput,
            "the cross-attention reads the layer's input x instead of the output of the "
            "self-attention sub-layer: the three sub-layers run one after the other, each on "
            "the x the previous one returned (keep assigning x = ...)",
        ),
        (_DecLinesCrossFirst, _WRONG_ORDER),
        (_DecLinesFFBeforeCross, _WRONG_ORDER),
    ],
)


class _SwiGLUMore(_SwiGLUMistake):
    def forward(self, x):
        gate, up = self.gate_proj(x), self.up_proj(x)
        if self.kind == "relu":
            return self.down_proj(F.relu(gate) * up)
        if self.kind == "silu_of_product":
            return self.down_proj(F.silu(gate * up))
        return self.down_proj(F.silu(gate) + up)  # "sum"


class _ReluGate(_SwiGLUMore):
    kind = "relu"


class _SiluOfProduct(_SwiGLUMore):
    kind = "silu_of_product"


class _SumGate(_SwiGLUMore):
    kind = "sum"


extend_task(
    SwiGLUTask,
    mistakes=[
        (_ReluGate, "the gate goes through SiLU (F.silu), not ReLU (that would be ReGLU)"),
        (
            _SiluOfProduct,
            "SiLU goes on the gate alone, before the product: "
            "silu(gate_proj(x)) * up_proj(x), not silu(gate_proj(x) * up_proj(x))",
        ),
        (
            _SumGate,
            "the gate multiplies the up branch element-wise: silu(gate_proj(x)) * up_proj(x), "
            "not silu(gate_proj(x)) + up_proj(x)",
        ),
    ],
)
