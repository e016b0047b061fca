"""ex03, multi-head attention: split the heads, merge them back, the whole module, and
grouped-query attention (kv heads shared by groups of query heads); one module per task,
imported (so registered) in the order of the exercise notebook. Below, the wrong module the
tests subclass, from its task module."""

import importlib

TASKS = ("split_heads", "merge_heads", "multi_head_attention", "grouped_query_attention")

for _module in TASKS:
    importlib.import_module(f"{__name__}.{_module}")

from .multi_head_attention import _WrongMultiHeadAttention  # noqa: E402

__all__ = ["TASKS", "_WrongMultiHeadAttention"]
