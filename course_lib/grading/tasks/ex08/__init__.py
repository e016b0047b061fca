"""ex08, training an encoder-decoder: the warm-up schedule, label smoothing, teacher forcing's
shifted input, greedy decoding over a step function and one training step; one module per
task, imported (so registered) in the order of the exercise notebook."""

import importlib

TASKS = ("noam_lr", "label_smoothing_loss", "shift_right", "greedy_decode", "train_step")

for _module in TASKS:
    importlib.import_module(f"{__name__}.{_module}")

from .greedy_decode import TableStepFn  # noqa: E402  (the tests build their own step functions)

__all__ = ["TASKS", "TableStepFn"]
