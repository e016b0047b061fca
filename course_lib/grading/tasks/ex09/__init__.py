"""ex09, a GPT from scratch: sampling the next token, perplexity, one step with a KV cache, the
generation loop with a cache, the capstone GPT, and the pieces that make the capstone the
learner's own: the validation loss (evaluate), the training loop (train) and the key map that
loads GPT-2's weights (gpt2_to_mine); one module per task, imported (so registered) in the
order of the exercise notebook. Below, the helpers the tests use, from their task modules.
"""

import importlib

TASKS = (
    "sample_next",
    "perplexity",
    "cached_attention_step",
    "generate",
    "gpt",
    "train",
    "evaluate",
    "gpt2_to_mine",
)

for _module in TASKS:
    importlib.import_module(f"{__name__}.{_module}")

from .generate import _own_sample_next  # noqa: E402
from .gpt import _mistake_gpt  # noqa: E402
from .sample_next import _ORDER6, _P6, DRAWS, _logits_from_probs  # noqa: E402

__all__ = [
    "DRAWS",
    "TASKS",
    "_ORDER6",
    "_P6",
    "_logits_from_probs",
    "_mistake_gpt",
    "_own_sample_next",
]
