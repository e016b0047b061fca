"""ex01, tokens and embeddings: one-hot vectors, the embedding look-up, cosine similarity,
nearest neighbours; and byte-level BPE: counting adjacent pairs, merging a pair, encoding with a
merge table in the order it was learned. One module per task; importing them registers the
tasks in the order of the exercise."""

import importlib

TASKS = (
    "one_hot",
    "embed",
    "cosine_similarity_matrix",
    "nearest_neighbours",
    "pair_counts",
    "merge_pair",
    "bpe_encode",
)
for _task in TASKS:
    importlib.import_module(f"{__name__}.{_task}")
