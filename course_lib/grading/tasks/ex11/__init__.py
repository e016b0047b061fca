"""ex11, inside the model: attention patterns with hooks, an induction-head detector, head
ablation, direct logit attribution, and (transfer) activation patching; one module per task,
imported (so registered) in the order of the exercise notebook.

Every case names a model, not a tensor: `_models.ModelTask.call` builds it afresh from the
case's data (a course GPT with random, enlarged weights, or a hand-built induction circuit with
its two heads at positions drawn from the seed), runs the learner's function on it, and then
checks that the model is as it was (same outputs, no hook left behind). So the grader knows
where the heads are, and an ablation that is never undone loses points even when the number it
returns is right.
"""

import importlib

TASKS = (
    "attention_patterns",
    "induction_scores",
    "ablate_head",
    "direct_logit_attribution",
    "patch_head",
)
for _module in TASKS:
    importlib.import_module(f"{__name__}.{_module}")

from ._models import circuit_heads, random_gpt  # noqa: E402, F401  (the tests use them)
