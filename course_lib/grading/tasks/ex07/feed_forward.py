"""ex07.FeedForward: the position-wise feed-forward network, with dropout, a choice of
activation ("relu", "gelu", "gelu_tanh", "relu2") and of biases."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...core import Case, GradingError, register
from ..common import ModuleTask, randn
from . import _layers as layers
from ._layers import random_state

# The dropout mistakes first: on the training-mode cases they are the specific ones.
MISTAKES = {
    "no_dropout": "the dropout argument is never applied: in training mode "
    "linear2(dropout(relu(linear1(x)))) drops hidden units at random (self.dropout = "
    "nn.Dropout(dropout), called between the ReLU and linear2)",
    "dropout_on_output": "dropout belongs on the hidden units, between the ReLU and "
    "linear2, not on the output: linear2(dropout(relu(linear1(x))))",
    "no_activation": "there is no activation between the two linear layers, so the "
    "network is one linear map: use linear2(relu(linear1(x)))",
    "activation_after": "the ReLU belongs between linear1 and linear2, not after "
    "linear2: use linear2(relu(linear1(x)))",
    "activation_both": "apply the ReLU only between the two linear layers; the output "
    "of linear2 is not passed through it (it must be able to be negative)",
    "dropout_always": "the dropout also drops in eval mode: F.dropout needs "
    "training=self.training (nn.Dropout does this for you)",
    "eval_scaled": "in eval mode nothing is rescaled: nn.Dropout already scales the kept units by "
    "1 / (1 - dropout) in training (inverted dropout), so eval mode is "
    "linear2(activation(linear1(x))) as it is, not times 1 - dropout",
    "keep_probability": "nn.Dropout(p) takes the probability of dropping a unit, not of keeping "
    "it: nn.Dropout(dropout), not nn.Dropout(1 - dropout)",
    "default_dropout": "built without the dropout argument, your network drops units in "
    "training mode: the default is dropout=0.0 (0.1 is nn.TransformerEncoderLayer's)",
    "fixed_p": "the dropout probability is the `dropout` argument, not a number of your own: "
    "nn.Dropout(dropout)",
    "input_dropout": "dropout belongs on the hidden units, between the ReLU and linear2, not on "
    "the input x: linear2(dropout(relu(linear1(x))))",
    "gelu": layers.RELU_NOT_GELU,
    "relu2_as_relu": layers.RELU2_AS_RELU,
    "gelu_tanh_as_gelu": layers.GELU_TANH_AS_GELU,
    "gelu_as_tanh": layers.GELU_AS_TANH,
    "gelu_sigmoid": "activation='gelu' is the exact GELU, h * Phi(h), F.gelu(h): h * "
    "sigmoid(1.702 * h) is its sigmoid approximation (CLIP's quick GELU), off by up to 0.02, "
    "which the check sees",
    "gelu_tanh_as_tanh": "activation='gelu_tanh' is GELU's tanh approximation, F.gelu(h, "
    "approximate='tanh'), not torch.tanh itself: 0.5 * h * (1 + tanh(sqrt(2 / pi) * (h + "
    "0.044715 * h ** 3)))",
    "gelu_tanh_squared": "GELU's tanh approximation cubes h inside the tanh: 0.5 * h * (1 + "
    "tanh(sqrt(2 / pi) * (h + 0.044715 * h ** 3))), not h ** 2; or F.gelu(h, approximate='tanh')",
    "gelu_tanh_no_half": "your 'gelu_tanh' is twice GELU's tanh approximation: the formula starts "
    "with 0.5, 0.5 * h * (1 + tanh(sqrt(2 / pi) * (h + 0.044715 * h ** 3))); or F.gelu(h, "
    "approximate='tanh')",
    "activation_ignored": layers.ACTIVATION_IGNORED,
    "residual": "the feed-forward network has no residual connection of its own: return "
    "linear2(dropout(relu(linear1(x)))); the layer that uses it adds x",
    "relu2_square_first": layers.RELU2_SQUARE_FIRST,
    # with ReLU the two orders agree (dropout scales by a positive number): the GELU case shows it
    "dropout_before_activation": "dropout goes after the activation, on the hidden units it "
    "outputs: linear2(dropout(activation(linear1(x)))), not activation(dropout(linear1(x))) "
    "(with ReLU both give the same numbers, with GELU they do not)",
    "residual_activated": "the feed-forward network has no residual connection of its own, and "
    "its output is not activated: return linear2(dropout(relu(linear1(x)))), not relu(x + "
    "...); the layer that uses it adds x, with no activation on the sum",
}


class WrongFeedForward(nn.Module):
    """linear2(dropout(activation(linear1(x)))) with one named mistake (`mistake`)."""

    mistake = ""

    def __init__(self, d_model, d_ff, dropout=None, activation="relu", bias=True):
        super().__init__()
        if dropout is None:  # built without it: its default, 0.0
            dropout = 0.1 if self.mistake == "default_dropout" else 0.0
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)
        self.p = {"keep_probability": 1 - dropout, "fixed_p": 0.1}.get(self.mistake, dropout)
        self.activation = activation

    def dropout(self, h, where):
        at = {"no_dropout": None, "dropout_on_output": "output", "input_dropout": "input"}
        at["dropout_before_activation"] = "pre-activation"
        if where != at.get(self.mistake, "hidden"):
            return h
        if self.mistake == "eval_scaled" and not self.training:  # the un-inverted dropout's rule
            return h * (1 - self.p)
        return F.dropout(h, self.p, training=self.training or self.mistake == "dropout_always")

    def forward(self, x):
        hidden = self.dropout(self.linear1(self.dropout(x, "input")), "pre-activation")
        activation = layers.activation_with(self.activation, self.mistake)
        if self.mistake not in ("no_activation", "activation_after"):
            hidden = activation(hidden)
        out = self.linear2(self.dropout(hidden, "hidden"))
        if self.mistake in ("activation_after", "activation_both"):
            out = activation(out)
        out = self.dropout(out, "output")
        if self.mistake == "residual_activated":  # relu(x + ffn(x)), a layer's sum activated
            return activation(x + out)
        return x + out if self.mistake == "residual" else out


@register
class FeedForwardTask(ModuleTask):
    """The learner's module with the reference's weights; dropout judged with its seed."""

    id = "ex07.FeedForward"
    lesson = "lesson 07, section 'The position-wise feed-forward network'"
    reference = "course_lib.blocks.FeedForward"
    mistake_table = MISTAKES
    wrong = WrongFeedForward

    def cases(self, gen):
        from ....blocks import FeedForward

        def case(description, sizes, shape, dtype=torch.float32, **options):
            return layers.layer_case(
                gen, description, FeedForward, sizes, None, [shape], dtype, **options
            )

        def seeded(description, mode, sizes, shape, dropout=0.5, activation="relu"):
            # EX07-1: dropout with the reference's random seed, in train or eval mode
            data = {
                "sizes": sizes if dropout is None else (*sizes, dropout),
                "kwargs": layers.layer_kwargs(activation),
                "state_dict": random_state(FeedForward(*sizes), gen),
                "mode": mode,
                "seed": int(torch.randint(0, 2**31 - 1, (1,), generator=gen)),
            }
            return Case(description, (randn(gen, *shape, sizes[0]),), data=data)

        f64 = torch.float64
        # sizes: (d_model, d_ff); shape: x's shape before its last axis, d_model
        return [
            case("d_model=8, d_ff=32, x (2, 5, 8)", (8, 32), (2, 5)),
            case("d_model=6, d_ff=10, x (3, 6): a single sequence", (6, 10), (3,)),
            case("d_model=4, d_ff=16, x (2, 3, 2, 4) with two batch dimensions",
                 (4, 16), (2, 3, 2)),
            case("float64, d_model=5, d_ff=7, x (1, 4, 5)", (5, 7), (1, 4), f64),
            Case("training mode, dropout=0.5, d_model=6, d_ff=24, x (4, 6): the hidden units "
                 "must be dropped at random (two passes differ), the output itself never",
                 (randn(gen, 4, 6),),
                 data={"sizes": (6, 24), "dropout": 0.5,
                       "state_dict": random_state(FeedForward(6, 24), gen)}),
            seeded("dropout=0.5 in train mode (same random seed as the reference): dropout after "
                   "the activation, before linear2",
                   "train", (8, 16), (2, 5)),
            seeded("dropout=0.5 in eval mode: no dropout at all", "eval", (6, 12), (3, 4)),
            # dropout given as the keep probability passed every check at 0.5 = 1 - 0.5
            seeded("dropout=0.2 in train mode (same random seed as the reference): each hidden "
                   "unit dropped with probability 0.2, the others scaled by 1 / 0.8",
                   "train", (6, 16), (3, 4), dropout=0.2),
            # the activations and biases last: the dropout cases above name a dropout mistake
            case("activation='gelu' (the exact GELU, BERT's), d_model=8, d_ff=16, x (2, 3, 8)",
                 (8, 16), (2, 3), activation="gelu"),
            case("activation='gelu_tanh' (GPT-2's tanh approximation of GELU), float64, "
                 "d_model=6, d_ff=24, x (2, 4, 6)",
                 (6, 24), (2, 4), f64, activation="gelu_tanh"),
            case("activation='relu2' (ReLU squared), d_model=6, d_ff=12, x (3, 5, 6)",
                 (6, 12), (3, 5), activation="relu2"),
            case("bias=False (neither linear has a bias), activation='relu2', d_model=8, d_ff=32, "
                 "x (2, 3, 8)",
                 (8, 32), (2, 3), activation="relu2", bias=False),
            case("bias=False, activation='gelu', float64, d_model=4, d_ff=8, x (5, 4)",
                 (4, 8), (5,), f64, activation="gelu", bias=False),
            case("activation='swish', a name the task does not list: a ValueError",
                 (4, 8), (2, 3), raises=ValueError, activation="swish"),
            # dropout before the activation matched every ReLU case (relu(c h) = c relu(h), c > 0)
            seeded("activation='gelu', dropout=0.5 in train mode (same random seed as the "
                   "reference): the GELU first, then dropout on its output, then linear2",
                   "train", (6, 16), (2, 4), activation="gelu"),
            # only the cases above that pass dropout ran in train mode: a default of 0.1 passed
            seeded("built without dropout, in train mode: the default is dropout=0.0, so "
                   "nothing is dropped",
                   "train", (6, 12), (2, 3), dropout=None),
        ]  # fmt: skip

    def init_args(self, case):
        dropout = case.data.get("dropout")
        kwargs = dict(case.data.get("kwargs", {}))
        if dropout is not None:
            kwargs["dropout"] = dropout
        return tuple(case.data["sizes"]), kwargs

    def diagnose(self, got, want, case):
        if case.data.get("mode") == "train":  # no listed mistake: the dropout itself differs
            return (
                "in training mode your output is not nn.Dropout's with the same random seed: a "
                "hand-made mask draws its random numbers differently (and the kept units are "
                "scaled by 1 / (1 - dropout)); use nn.Dropout(dropout) or F.dropout(h, dropout, "
                "self.training) between the activation and linear2"
            )
        return None

    def run(self, module, case):
        mode = case.data.get("mode")
        if mode is not None:
            module.train(mode == "train")
            # with gradients in train mode: nn.Dropout(dropout, inplace=True) overwrites ReLU's
            # output there only, and passed every check done without them
            with torch.set_grad_enabled(mode == "train"), torch.random.fork_rng(devices=[]):
                torch.manual_seed(case.data["seed"])
                out = module(*case.args)
            if mode == "train" and not isinstance(out, torch.Tensor):
                raise GradingError("forward should return a tensor")
            return self.back_propagate(out)
        if case.data.get("dropout") is None:  # with gradients: training back-propagates
            return self.back_propagate(module.eval()(*case.args))
        module.train()  # dropout acts in training mode only: random, so judged by its effect
        with torch.no_grad():
            first, second = module(*case.args), module(*case.args)
        return {
            "two passes differ": not torch.equal(first, second),
            "outputs exactly zero": bool((first == 0).any()),
        }

    @staticmethod
    def back_propagate(out):
        """`out` detached, after a backward pass through it (when it has a graph)."""
        try:
            if isinstance(out, torch.Tensor) and out.requires_grad:
                out.sum().backward()
        except RuntimeError as e:  # F.relu(h).pow_(2), h *= h: relu's output, needed
            if "inplace" not in str(e):
                raise
            raise GradingError(
                "training cannot back-propagate through your FeedForward: an in-place "
                "operation (pow_, *=, a method ending in _) changed a tensor the backward "
                "pass needs; build a new one instead, F.relu(h) ** 2 (nn.Dropout(dropout, "
                "inplace=True) is one too, in training mode: drop its inplace=True)"
            ) from e
        return out.detach() if isinstance(out, torch.Tensor) else out
