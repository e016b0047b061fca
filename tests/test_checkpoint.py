"""The GPT checkpoint lesson 09 loads: there, small, documented, as good as recorded."""

import pytest
import torch

from course_lib.datasets import load_shakespeare, train_val_split
from course_lib.gpt import CHECKPOINT_PATH, GPT, load_shakespeare_gpt
from course_lib.text import CharTokenizer
from course_lib.train import evaluate_loss


@pytest.fixture(scope="module")
def checkpoint():
    return load_shakespeare_gpt()


def test_checkpoint_is_small_and_says_how_it_was_made(checkpoint):
    model, vocabulary, provenance = checkpoint
    assert CHECKPOINT_PATH.stat().st_size <= 15 * 2**20  # at most 15 MB in the package
    assert isinstance(model, GPT) and not model.training
    assert model.config.positions == "rope" and model.config.activation == "relu2"
    for key in ("command", "commit", "date", "train_seconds", "steps", "threads", "cpu", "torch"):
        assert provenance[key], key
    assert provenance["command"].startswith("python tools/train_checkpoint.py")
    assert provenance["train_seconds"] <= 3600  # at most an hour on two CPU threads
    assert provenance["threads"] == 2
    # issue #18 asks for at most 1.60 over the whole validation split; the shipped run: 1.5817
    assert provenance["val_loss"] <= 1.60
    # the vocabulary is lesson 09's: the same characters in the same order
    assert vocabulary == "".join(CharTokenizer.from_text(load_shakespeare(), specials=()).itos)


def test_checkpoint_reaches_its_recorded_validation_loss(checkpoint):
    """Over the whole validation split, as tools/train_checkpoint.py measured it. Only the
    forward pass runs here, so another CPU changes the loss in the last digits, not more."""
    model, vocabulary, provenance = checkpoint
    tokenizer = CharTokenizer.from_text(load_shakespeare(), specials=())
    ids = torch.tensor(tokenizer.encode(load_shakespeare()), dtype=torch.long)
    _, val_ids = train_val_split(ids)
    assert len(val_ids) == provenance["val_chars"]
    loss = evaluate_loss(model, val_ids, model.config.block_size)
    assert loss == pytest.approx(provenance["val_loss"], abs=1e-3)


def test_missing_checkpoint_says_where_it_comes_from(tmp_path):
    with pytest.raises(FileNotFoundError, match="tools/train_checkpoint.py"):
        load_shakespeare_gpt(tmp_path / "nothing.pt")
