"""ex07.SwiGLU (transfer: Llama's feed-forward)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...core import Case, GradingError, register
from ..common import ModuleTask, randn

MISTAKES = {
    "gate_on_up": "the gate is on the wrong branch: SiLU goes on gate_proj(x), which then "
    "multiplies the plain up_proj(x): down_proj(silu(gate_proj(x)) * up_proj(x))",
    "no_up": "the up branch is missing: SwiGLU multiplies silu(gate_proj(x)) "
    "element-wise by up_proj(x) before down_proj",
    "sigmoid": "SiLU (swish) is x * sigmoid(x), not sigmoid(x): use F.silu",
    "gelu": "SwiGLU uses SiLU (swish), F.silu, not GELU (that would be GeGLU)",
    "silu_on_both": "only the gate branch goes through SiLU; up_proj(x) stays linear",
    "regrouped": "the default d_ff is 8 * d_model // 3: multiply first, then round down once. "
    "2 * (4 * d_model // 3) groups the same operators otherwise: it rounds "
    "4 * d_model / 3 down before doubling and comes out one short whenever d_model "
    "% 3 == 2 (340 instead of 341 at the course's d_model = 128)",
    "true_division": "8 * d_model / 3 is a float (true division), and a layer's size must be an "
    "int: d_ff = 8 * d_model // 3, multiply first, then floor-divide",
    "relu": "the gate goes through SiLU (F.silu), not ReLU (that would be ReGLU)",
    "silu_of_product": "SiLU goes on the gate alone, before the product: "
    "silu(gate_proj(x)) * up_proj(x), not silu(gate_proj(x) * up_proj(x))",
    "no_silu": "the gate has no activation: SiLU goes on the gate branch, "
    "silu(gate_proj(x)) * up_proj(x); without it the product is a plain bilinear map",
    "gelu_tanh": "SwiGLU uses SiLU (swish), F.silu, not GELU, tanh-approximated or not (that "
    "would be GeGLU)",
    "silu_outside": "SiLU goes on the gate branch, inside: down_proj(silu(gate_proj(x)) * "
    "up_proj(x)); you applied it to the output of down_proj, after the product",
    "sum": "the gate multiplies the up branch element-wise: silu(gate_proj(x)) * up_proj(x), "
    "not silu(gate_proj(x)) + up_proj(x)",
    "one_linear": "gate_proj and up_proj are one and the same layer (as after self.gate_proj = "
    "self.up_proj = nn.Linear(...)): loading the weights leaves both names with the last one's "
    "(up_proj's), so the gate is silu(up_proj(x)). Create each with its own nn.Linear",
}


class WrongSwiGLU(nn.Module):
    """down_proj(silu(gate_proj(x)) * up_proj(x)) with one named mistake (`mistake`)."""

    mistake = ""

    def __init__(self, d_model, d_ff=None):
        super().__init__()
        if d_ff is None:  # "regrouped" rounds 4 * d_model / 3 down before doubling
            rules = {"regrouped": 2 * (4 * d_model // 3), "true_division": 8 * d_model / 3}
            d_ff = rules.get(self.mistake, 8 * d_model // 3)
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x):
        gate, up = self.gate_proj(x), self.up_proj(x)
        gate = up if self.mistake == "one_linear" else gate  # the last loaded weights win
        if self.mistake == "gate_on_up":
            gate, up = up, gate
        if self.mistake == "silu_of_product":
            return self.down_proj(F.silu(gate * up))
        if self.mistake == "silu_outside":  # silu(down_proj(gate * up))
            return F.silu(self.down_proj(gate * up))
        activation = {
            "sigmoid": torch.sigmoid,
            "gelu": F.gelu,
            "relu": F.relu,
            "no_silu": torch.clone,
            "gelu_tanh": lambda h: F.gelu(h, approximate="tanh"),
        }
        gate = activation.get(self.mistake, F.silu)(gate)
        up = F.silu(up) if self.mistake == "silu_on_both" else up
        if self.mistake == "no_up":
            return self.down_proj(gate)
        return self.down_proj(gate + up if self.mistake == "sum" else gate * up)


@register
class SwiGLUTask(ModuleTask):
    """The learner's module with the reference's weights, the default width included."""

    id = "ex07.SwiGLU"
    lesson = "lesson 07, section 'The position-wise feed-forward network'"
    reference = "course_lib.llama.SwiGLU"
    mistake_table = MISTAKES
    wrong = WrongSwiGLU

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
            case("d_model=12 and d_ff left out: d_ff = 8 * 12 // 3 = 32, x (3, 12)",
                 12, None, (3,)),
            case("d_model=64, d_ff left out (170), x (1, 2, 64)", 64, None, (1, 2)),
            case("float64, d_model=6, d_ff=5 (d_ff < d_model), x (2, 2, 3, 6)",
                 6, 5, (2, 2, 3), dtype=torch.float64),
            case("d_model=4, d_ff=1, x (5, 4)", 4, 1, (5,)),
            # where 8 * d_model // 3 and 2 * (4 * d_model // 3) differ (d_model % 3 == 2)
            case("d_model=8 and d_ff left out: d_ff = 8 * 8 // 3 = 21, x (2, 3, 8)",
                 8, None, (2, 3)),
            case("d_model=128 (the course's GPT width) and d_ff left out: d_ff = 8 * 128 // 3 "
                 "= 341, x (2, 128)",
                 128, None, (2,)),
        ]  # fmt: skip

    def build(self, obj, case):
        """A default width that differs from the rule, named by the mistake that builds it."""
        module = super().build(obj, case)
        if len(case.data["sizes"]) == 1:
            width = getattr(getattr(module, "gate_proj", None), "out_features", None)
            want = 8 * case.data["sizes"][0] // 3
            if width is not None and width != want:
                for wrong, hint in self.mistakes():  # noqa: B007  (the hint of the row found)
                    try:
                        wrong_width = wrong(*case.data["sizes"]).gate_proj.out_features
                    except TypeError:  # "true_division": a float size
                        continue
                    if wrong_width == width:
                        break
                else:  # round(), math.ceil, 4 * d_model, a fixed number: no row of its own
                    hint = (
                        "the default d_ff is 8 * d_model // 3 with the d_model given: multiply "
                        "first, then round down (not round() or math.ceil)"
                    )
                raise GradingError(
                    f"with d_ff left out your d_ff is {width}, expected {want}. Hint: {hint}"
                )
        return module
