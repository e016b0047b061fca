"""Byte-level BPE on the course's Shakespeare corpus: training time and encoding time.

    python benchmarks/bpe.py [--vocab-size 512] [--chars N]

Trains a `course_lib.bpe.BPETokenizer` with `vocab_size` tokens (256 bytes + merges) on the
shipped corpus (about 1.1 MB; `--chars N` keeps only its first N characters, for a quick run),
then encodes the whole text with a fresh copy of the tokenizer (an empty chunk cache, as a
learner's first call would have) and checks that decoding gives the text back. Targets of
issue 17 on a 2-core CPU: training at most 10 s, encoding at most 5 s.

Prints one JSON line: {"train_seconds", "encode_seconds", "vocab_size", "corpus_chars",
"corpus_bytes", "tokens", "bytes_per_token", "round_trip"}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from course_lib.bpe import BPETokenizer  # noqa: E402
from course_lib.datasets import load_shakespeare  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vocab-size", type=int, default=512)
    parser.add_argument(
        "--chars", type=int, default=None, help="use only the first N characters of the corpus"
    )
    args = parser.parse_args()
    text = load_shakespeare()
    if args.chars is not None:
        text = text[: args.chars]

    start = time.perf_counter()
    trained = BPETokenizer.train(text, args.vocab_size)
    train_seconds = time.perf_counter() - start

    tokenizer = BPETokenizer(trained.merges)  # a fresh cache: nothing encoded yet
    start = time.perf_counter()
    ids = tokenizer.encode(text)
    encode_seconds = time.perf_counter() - start

    num_bytes = len(text.encode("utf-8"))
    print(
        json.dumps(
            {
                "train_seconds": round(train_seconds, 3),
                "encode_seconds": round(encode_seconds, 3),
                "vocab_size": tokenizer.vocab_size,
                "corpus_chars": len(text),
                "corpus_bytes": num_bytes,
                "tokens": len(ids),
                "bytes_per_token": round(num_bytes / max(len(ids), 1), 3),
                "round_trip": tokenizer.decode(ids) == text,
            }
        )
    )


if __name__ == "__main__":
    main()
