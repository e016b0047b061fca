"""Resuming a batch: each graded submission is saved as soon as it is graded.

The output folder holds `submissions/KEY.json` per graded submission, written atomically (to a
temporary name, then renamed), so a batch killed at any moment leaves only whole files. KEY is a
hash of the submission's name, the notebook's bytes and the grading options (the seed and a hash
of the course's code among them): a batch run again with the same output folder reuses a file
only for the same notebook graded the same way, and grades the rest. `batch.json` keeps the seed
of a batch whose seed was not given, so that the rerun draws the same hidden inputs (keep the
output folder to yourself: the seed lets one compute the hidden inputs).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any


class Store:
    """The graded submissions of one output folder."""

    def __init__(self, out_dir: Path, options: dict[str, Any]):
        self.folder = Path(out_dir) / "submissions"
        self.folder.mkdir(parents=True, exist_ok=True)
        self.options = json.dumps(options, sort_keys=True)

    def key(self, submission: str, path: Path) -> str:
        """The notebook, the options and the learner's library beside it (mine/, which later
        exercises import): a change to any of them grades the notebook again."""
        digest = hashlib.sha256()
        for part in (submission.encode(), Path(path).read_bytes(), self.options.encode()):
            digest.update(hashlib.sha256(part).digest())
        library = Path(path).parent / "mine"
        if library.is_dir():
            for file in sorted(library.rglob("*.py")):
                digest.update(hashlib.sha256(file.name.encode() + file.read_bytes()).digest())
        return digest.hexdigest()[:24]

    def load(self, key: str) -> dict | None:
        """The saved row of `key`, or None (never saved, or not a whole file)."""
        try:
            saved = json.loads((self.folder / f"{key}.json").read_text())
        except (OSError, ValueError):
            return None
        return saved.get("row") if isinstance(saved, dict) else None

    def save(self, key: str, row: dict, **extra: Any) -> None:
        _write_whole(
            self.folder / f"{key}.json", json.dumps({"key": key, **extra, "row": row}, indent=1)
        )

    def saved(self) -> list[dict]:
        """Every whole file in the folder (for the throughput benchmark's timings)."""
        out = []
        for f in sorted(self.folder.glob("*.json")):
            try:
                out.append(json.loads(f.read_text()))
            except ValueError:
                pass
        return out


def batch_seed(out_dir: Path, seed: int | None, fresh) -> int:
    """The seed of this batch: the one given, else the one a previous run saved, else fresh()."""
    state = Path(out_dir) / "batch.json"
    saved = None
    try:
        saved = json.loads(state.read_text()).get("seed")
    except (OSError, ValueError, AttributeError):
        pass
    if seed is None:
        seed = int(saved) if isinstance(saved, int) else fresh()
    if saved != seed:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        _write_whole(state, json.dumps({"seed": seed}) + "\n")
    return seed


def _write_whole(target: Path, text: str) -> None:
    """Write to a temporary name, then rename: a process killed meanwhile leaves no part file."""
    tmp = target.with_name(f".{target.stem}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, target)
