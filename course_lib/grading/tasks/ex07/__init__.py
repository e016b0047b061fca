"""ex07, Transformer blocks: LayerNorm from scratch (the function, then the module), the
position-wise feed-forward, an encoder and a decoder layer, RMSNorm and SwiGLU; one module per
task, imported (so registered) in the order of the exercise notebook."""

import importlib

TASKS = (
    "layer_norm",
    "layer_norm_module",
    "feed_forward",
    "encoder_layer",
    "decoder_layer",
    "rms_norm",
    "swiglu",
)

for _module in TASKS:
    importlib.import_module(f"{__name__}.{_module}")
