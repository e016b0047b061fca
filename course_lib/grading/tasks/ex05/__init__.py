"""ex05, masking: the causal mask, padding masks, and attention that respects a mask; then
(transfer) a prefix-LM mask and a dependency matrix that tests a function for causality. One
module per task, imported (so registered) in the order of the exercise notebook."""

import importlib

TASKS = (
    "causal_mask",
    "padding_mask",
    "masked_attention",
    "prefix_lm_mask",
    "dependency_matrix",
)

for _module in TASKS:
    importlib.import_module(f"{__name__}.{_module}")

from .masked_attention import ATTENTION_MISTAKES  # noqa: E402  (ex06's hints reuse some)

__all__ = ["ATTENTION_MISTAKES", "TASKS"]
