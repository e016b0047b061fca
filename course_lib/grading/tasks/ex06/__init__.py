"""ex06, cross-attention: attention from one sequence to another, and the decoder's sub-layer;
then (transfer) attention pooling with learned queries. One module per task, imported (so
registered) in the order of the exercise notebook."""

import importlib

TASKS = ("cross_attention", "cross_attention_sublayer", "attention_pool")

for _module in TASKS:
    importlib.import_module(f"{__name__}.{_module}")

from ..common import lengths_mask as source_padding_mask  # noqa: E402  (tests/test_ex06.py)

__all__ = ["TASKS", "source_padding_mask"]
