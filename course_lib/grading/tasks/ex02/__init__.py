"""ex02, self-attention: a stable softmax, scaled dot-product attention, self-attention, and
attention with a distance bias (ALiBi's); one module per task, imported (so registered) in the
order of the exercise notebook. Below, the hints other sets' tasks reuse (ex03, ex05, ex06,
ex09), from the modules that hold them."""

import importlib

TASKS = (
    "softmax",
    "scaled_dot_product_attention",
    "self_attention",
    "distance_biased_attention",
)

for _module in TASKS:
    importlib.import_module(f"{__name__}.{_module}")

from ._shared import FLOAT32_DIGITS, FLOAT32_SCALE  # noqa: E402
from .scaled_dot_product_attention import (  # noqa: E402
    D_K_FROM_SHAPE_1,
    POWER_HALF,
    SCALED_AFTER_SOFTMAX,
)

__all__ = [
    "D_K_FROM_SHAPE_1",
    "FLOAT32_DIGITS",
    "FLOAT32_SCALE",
    "POWER_HALF",
    "SCALED_AFTER_SOFTMAX",
    "TASKS",
]
