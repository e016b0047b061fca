"""ex10, the family and the cost: tiled attention forward and backward, the sliding-window
mask, BERT's masking, image patches. One module per task; each is data around the reference:
its cases, a table of named mistakes (FAULTS) with their hints, and one wrong implementation
that takes a mistake's name. Importing the package registers every task."""

from . import (  # noqa: F401  (registers the tasks, in the exercise's order)
    mlm_mask,
    patchify,
    sliding_window_mask,
    tiled_attention,
    tiled_attention_backward,
)
