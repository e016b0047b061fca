"""ex07.LayerNorm: the learner's layer_norm as a module, with learned weight and optional bias."""

from __future__ import annotations

import copy

import torch
from torch import nn

from ...core import Case, GradingError, register
from ..common import ModuleTask, float32_digits, randn
from .layer_norm import FORBIDDEN, wrong_layer_norm

INIT = (
    "a fresh LayerNorm starts with weight = ones and bias = zeros (nn.Parameter(torch.ones("
    "d_model)), nn.Parameter(torch.zeros(d_model))), as nn.LayerNorm does: untrained, it returns "
    "the normalised x unchanged"
)

MISTAKES = {
    "eps_not_passed": "the eps you were given is not used: pass it on to your layer_norm, "
    "layer_norm(x, self.weight, beta, self.eps)",
    "weight_bias_swapped": "weight is gamma (it scales) and bias is beta (it shifts): "
    "layer_norm(x, self.weight, self.bias, self.eps)",
    "weight_zeros": INIT,
    "bias_ones": INIT,
    "no_bias_shift_ones": "with bias=False there is no shift at all: pass zeros as beta "
    "(torch.zeros_like(self.weight)), not ones",
    "no_bias_passes_none": "with bias=False your layer_norm gets beta=None, and x_hat * gamma + "
    "None fails: pass zeros instead (torch.zeros_like(self.weight))",
    "default_eps": "the default eps is 1e-5 (nn.LayerNorm's), not 1e-6: "
    "def __init__(self, d_model, eps=1e-5, bias=True)",
}


class WrongLayerNorm(nn.Module):
    """weight (ones) and bias (zeros, or none) around layer_norm, with one named mistake."""

    mistake = ""

    def __init__(self, d_model, eps=None, bias=True):
        super().__init__()
        self.eps = (1e-6 if self.mistake == "default_eps" else 1e-5) if eps is None else eps
        self.weight = nn.Parameter(torch.full((d_model,), float(self.mistake != "weight_zeros")))
        fill = float(self.mistake == "bias_ones")
        self.bias = nn.Parameter(torch.full((d_model,), fill)) if bias else None

    def forward(self, x):
        gamma, beta = self.weight, self.bias
        if beta is None and self.mistake != "no_bias_passes_none":
            beta = torch.full_like(gamma, float(self.mistake == "no_bias_shift_ones"))
        if self.mistake == "weight_bias_swapped" and self.bias is not None:
            gamma, beta = beta, gamma
        eps = 1e-5 if self.mistake == "eps_not_passed" else self.eps
        return wrong_layer_norm(x, gamma, beta, eps)


def cpu_tensor_in_forward(module: nn.Module, x: torch.Tensor) -> bool:
    """Whether forward, run on the meta device (a stand-in for a GPU on a CPU-only machine),
    fails on a tensor it made on the CPU (torch.zeros(d) in forward, which every CPU case
    passed). Any other failure there is not this check's business: False."""
    try:
        copy.deepcopy(module).to("meta")(x.detach().to("meta"))
    except Exception as e:  # noqa: BLE001
        message = str(e).lower()
        return "device" in message and "cpu" in message
    return False


@register
class LayerNormModuleTask(ModuleTask):
    """The learner's module with loaded weights, and once fresh (its initial weight and bias)."""

    id = "ex07.LayerNorm"
    lesson = "lesson 07, section 'LayerNorm from scratch'"
    reference = "course_lib.norms.LayerNorm"
    mistake_table = MISTAKES
    wrong = WrongLayerNorm
    depends_on = ("layer_norm",)
    forbidden = FORBIDDEN

    def cases(self, gen):
        def case(
            description,
            d,
            shape,
            *,
            eps=None,
            bias=True,
            dtype=torch.float32,
            scale=3.0,
            fresh=False,
        ):
            x = scale * randn(gen, *shape, d, dtype=dtype) + 0.5
            state = {"weight": 1 + randn(gen, d, dtype=dtype)}
            if bias:
                state["bias"] = randn(gen, d, dtype=dtype)
            kwargs = {} if eps is None else {"eps": eps}
            if not bias:
                kwargs["bias"] = False
            data = {"d_model": d, "kwargs": kwargs, "state_dict": state, "fresh": fresh}
            return Case(description, (x,), data=data)

        return [
            case("d_model=6, x (2, 5, 6), with loaded weight and bias", 6, (2, 5)),
            case("float64, d_model=4, x (3, 4)", 4, (3,), dtype=torch.float64),
            case("a single vector x (7,)", 7, ()),
            case("eps=0.1, x (2, 3, 5) with small values (variance close to eps)",
                 5, (2, 3), eps=0.1, scale=0.3),
            case("bias=False (no bias parameter), d_model=8, x (2, 3, 8)", 8, (2, 3), bias=False),
            case("bias=False, eps=1e-3, float64, x (4, 6) with small values",
                 6, (4,), eps=1e-3, bias=False, dtype=torch.float64, scale=0.05),
            case("a fresh LayerNorm(5), no weights loaded: weight starts at ones, bias at zeros",
                 5, (3, 2), fresh=True),
            case("a fresh LayerNorm(4, bias=False), no weights loaded",
                 4, (2, 3), bias=False, fresh=True),
        ]  # fmt: skip

    def init_args(self, case):
        return (case.data["d_model"],), dict(case.data["kwargs"])

    def call(self, obj, case):
        if not case.data["fresh"]:
            return super().call(obj, case)
        module = self.build(obj, case).to(case.args[0].dtype)
        return self.run(module, case)

    def diagnose(self, got, want, case):  # a weight drawn at random (randn, rand) named nothing
        return INIT if case.data["fresh"] else float32_digits(got, want)

    def run(self, module, case):
        if "bias" not in case.data["state_dict"] and getattr(module, "bias", "absent") is not None:
            bias = repr(module.bias) if hasattr(module, "bias") else "missing"
            raise GradingError(  # a caller reads layer.bias, as of nn.LayerNorm(d, bias=False)
                f"with bias=False your LayerNorm's bias is {bias}: set self.bias = None, as the "
                "task says (code that reads layer.bias, like nn.LayerNorm's users, expects None)"
            )
        plain = [  # #hunt19: `self.zeros = torch.zeros(d)` stays on the CPU under .to("cuda")
            f"{prefix}{'.' if prefix else ''}{name}"
            for prefix, part in module.named_modules()
            for name, value in vars(part).items()
            if isinstance(value, torch.Tensor)
        ]
        if plain:
            raise GradingError(
                f"your LayerNorm keeps the tensor {plain[0]} as a plain attribute, which "
                "module.to(device) and .double() do not move: on a GPU forward then mixes a "
                "CPU tensor with CUDA ones and fails. Build it in forward from a parameter "
                "(torch.zeros_like(self.weight)), or self.register_buffer(name, tensor)"
            )
        if cpu_tensor_in_forward(module, case.args[0]):
            raise GradingError(
                "your LayerNorm's forward makes a tensor on the CPU (torch.zeros(d) or "
                "torch.ones(d) without device=): right here, but on a GPU (module.to('cuda'), "
                "as your GPT in exercise 09 on Colab) it meets CUDA tensors and fails. "
                "Make it from a parameter, torch.zeros_like(self.weight), which has its device "
                "and dtype"
            )
        out = module.eval()(*case.args)  # with gradients: the weight and bias are learned
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        grads = [None] * len(named)
        if isinstance(out, torch.Tensor) and out.requires_grad and named:
            grads = torch.autograd.grad(out.sum(), [p for _, p in named], allow_unused=True)
        reached = {n for (n, _), grad in zip(named, grads, strict=True) if grad is not None}
        unreached = [n for n, _ in module.named_parameters() if n not in reached]
        if unreached:
            raise GradingError(
                f"no gradient reaches your {' and '.join(unreached)}: forward leaves it out "
                "or cuts it off (.data, .detach(), torch.no_grad(), requires_grad=False), so "
                "training could never change it; use the parameters themselves in forward, "
                "layer_norm(x, self.weight, self.bias, self.eps)"
            )
        return out.detach() if isinstance(out, torch.Tensor) else out
