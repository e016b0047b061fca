"""ex09, a GPT from scratch: sampling the next token, perplexity, one step with a KV cache, the
generation loop with a cache, the capstone GPT, and the pieces that make the capstone the
learner's own: the validation loss (evaluate), the training loop (train) and the key map that
loads GPT-2's weights (gpt2_to_mine); one module per task, imported (so registered) in the
order of the exercise notebook.

The names below are the helpers other modules and the tests use, re-exported from their
task modules.
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

from .cached_attention_step import _attend  # noqa: E402
from .generate import (  # noqa: E402
    _GPT_SIZES,
    _build_gpt,
    _cache_only_gpt_class,
    _own_sample_next,
    _wrong_generate,
)
from .gpt import (  # noqa: E402
    _check_gpt2_init,
    _gpt_state,
    _mistake_gpt,
    _reference_gpt,
    _sgd_step,
)
from .perplexity import _nll  # noqa: E402
from .sample_next import _ORDER6, _ORDER8, _P6, _P8, DRAWS, _filter, _logits_from_probs  # noqa: E402

__all__ = [
    "DRAWS",
    "TASKS",
    "_GPT_SIZES",
    "_ORDER6",
    "_ORDER8",
    "_P6",
    "_P8",
    "_attend",
    "_build_gpt",
    "_cache_only_gpt_class",
    "_check_gpt2_init",
    "_filter",
    "_gpt_state",
    "_logits_from_probs",
    "_mistake_gpt",
    "_nll",
    "_own_sample_next",
    "_reference_gpt",
    "_sgd_step",
    "_wrong_generate",
]
