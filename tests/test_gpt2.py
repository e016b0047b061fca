"""GPT-2 in the course's code: OpenAI's tokenizer files read by course_lib.bpe, and GPT-2's
weights (Hugging Face's state dict) loaded into course_lib.gpt.GPT.

The reference is Hugging Face's `transformers` (the [test] extra), built offline from the same
files (the tokenizer) or from a small random configuration (the model): nothing downloads.
"""

from __future__ import annotations

import gzip
import hashlib
import json

import pytest
import torch

from course_lib.bpe import GPT2_FILES, BPETokenizer, _gpt2_bytes_to_unicode
from course_lib.datasets import load_shakespeare
from course_lib.gpt import GPT, generate, generate_with_cache
from course_lib.gpt2 import gpt2_config, gpt2_to_course, load_gpt2

transformers = pytest.importorskip("transformers")

# accents, emoji (one with a skin tone: two code points), CJK, numbers, runs of spaces and
# tabs, contractions ('s 'll 're 've 'm 'd 't, and "'S", which GPT-2's pattern does not split)
HARD_TEXT = (
    "naïve café — Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich. "
    "👍🏽 🎉🎉 東京タワー 안녕하세요 Привет, мир!\n"
    "It's 3.14159 or 1,000,000 or 2024-11-26; she'll say we're sure they've I'm he'd don't "
    "IT'S\n\n\n   four spaces    and\ttabs\t\t end  \n  "
    "x² ½ Ⅻ — «quotes» “curly” ‘single’ e\u0301 (e + combining accent) \u00a0nbsp"
)


def _read(name: str) -> bytes:
    return gzip.decompress((GPT2_FILES / f"{name}.gz").read_bytes())


@pytest.fixture(scope="module")
def gpt2_tokenizer():
    return BPETokenizer.gpt2()


@pytest.fixture(scope="module")
def reference_tokenizer():
    """Hugging Face's GPT-2 tokenizer, from the same two files (decompressed)."""
    vocab = json.loads(_read("encoder.json"))
    lines = _read("vocab.bpe").decode("utf-8").split("\n")[1:]  # after "#version: 0.2"
    merges = [tuple(line.split(" ")) for line in lines if line]
    return transformers.GPT2Tokenizer(vocab=vocab, merges=merges)


def test_the_shipped_files_are_the_ones_tiktoken_pins():
    pins = {
        "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
        "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
    }
    for name, sha256 in pins.items():
        assert hashlib.sha256(_read(name)).hexdigest() == sha256
    assert (GPT2_FILES / "LICENSE").read_text().startswith("Modified MIT License")


def test_the_vocabulary_is_gpt2s(gpt2_tokenizer):
    tok = gpt2_tokenizer
    assert tok.vocab_size == 50257 and len(tok.merges) == 50000
    assert tok.special_tokens == {"<|endoftext|>": 50256}
    # every token's bytes, written with GPT-2's byte-to-unicode table, is its encoder.json entry
    to_unicode = _gpt2_bytes_to_unicode()
    encoder = json.loads(_read("encoder.json"))
    written = {
        "".join(to_unicode[b] for b in token) if i < 50256 else token.decode(): i
        for i, token in enumerate(tok.vocab)
    }
    assert written == encoder
    assert tok.vocab[encoder["Ġthe"]] == b" the" and tok.vocab[encoder["Ċ"]] == b"\n"


@pytest.mark.parametrize("name", ["hard text", "course corpus"])
def test_ids_equal_hugging_faces(name, gpt2_tokenizer, reference_tokenizer):
    text = HARD_TEXT if name == "hard text" else load_shakespeare()
    ids = gpt2_tokenizer.encode(text)
    assert ids == reference_tokenizer.encode(text)
    assert gpt2_tokenizer.decode(ids) == text == reference_tokenizer.decode(ids)


def test_end_of_text_is_one_token_where_allowed(gpt2_tokenizer, reference_tokenizer):
    text = "The end.<|endoftext|>A new text: <|endoftext|>"
    ids = gpt2_tokenizer.encode(text, allowed_special="all")
    assert ids == reference_tokenizer.encode(text)  # Hugging Face always reads it whole
    assert ids.count(50256) == 2 and gpt2_tokenizer.decode(ids) == text
    plain = gpt2_tokenizer.encode(text)  # not allowed: ordinary text, "<", "|", "end", ...
    assert 50256 not in plain and gpt2_tokenizer.decode(plain) == text


# ---- the weights -------------------------------------------------------------------------------

SMALL = dict(vocab_size=50257, n_positions=128, n_embd=64, n_layer=2, n_head=4)  # theirs
SMALL_SIZES = dict(vocab_size=50257, block_size=128, d_model=64, num_heads=4, num_layers=2)


@pytest.fixture(scope="module")
def random_gpt2():
    """A small GPT-2 with random weights, built by Hugging Face's own code (no download).
    initializer_range 0.2 (GPT-2's is 0.02) spreads the logits, so that greedy decoding
    walks through many different tokens instead of repeating one."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(**SMALL, initializer_range=0.2)
    return transformers.GPT2LMHeadModel(config).eval()


def _ids(seed: int, shape: tuple[int, int]) -> torch.Tensor:
    return torch.randint(
        0, SMALL["vocab_size"], shape, generator=torch.Generator().manual_seed(seed)
    )


def test_logits_equal_hugging_faces(random_gpt2):
    ours = GPT.from_gpt2(random_gpt2.state_dict(), num_heads=4)
    assert ours.config == gpt2_config(**SMALL_SIZES)
    assert ours.lm_head.weight is ours.token_embedding.weight and not ours.training
    ids = _ids(0, (3, 128))  # the whole context
    with torch.no_grad():
        theirs = random_gpt2(ids).logits  # (3, 128, vocab)
        mine = ours(ids)
        first, cache = ours.forward_cached(ids[:, :50])  # the same, 50 tokens then 78
        rest, _ = ours.forward_cached(ids[:, 50:], cache)
    assert theirs.abs().max() > 1  # logits that are not all near zero
    assert (mine - theirs).abs().max() < 1e-5
    assert (torch.cat([first, rest], dim=1) - theirs).abs().max() < 1e-5


def test_greedy_tokens_equal_hugging_faces_with_and_without_the_cache(random_gpt2, gpt2_tokenizer):
    ours = GPT.from_gpt2(random_gpt2.state_dict(), num_heads=4)
    prompt = torch.tensor([gpt2_tokenizer.encode("To be, or not to be, that is the question:")])
    n = 20
    theirs = {
        cached: random_gpt2.generate(
            prompt, max_new_tokens=n, do_sample=False, use_cache=cached, pad_token_id=50256
        )
        for cached in (False, True)
    }
    mine = {
        "no cache": generate(ours, prompt, n, temperature=0.0),
        "cache": generate(ours, prompt, n, temperature=0.0, use_cache=True),
        "the exercise's loop": generate_with_cache(ours, prompt, n, temperature=0.0),
    }
    reference = theirs[False]
    assert reference.shape == (1, prompt.shape[1] + n) and torch.equal(theirs[True], reference)
    assert len(set(reference[0, -n:].tolist())) >= 10  # a walk through many tokens
    for name, tokens in mine.items():
        assert torch.equal(tokens, reference), name


def test_the_lessons_loader_reads_hugging_faces_files(tmp_path, random_gpt2):
    # save_pretrained writes Hugging Face's file (model.safetensors, "transformer." keys); the
    # original pytorch_model.bin of openai-community/gpt2, the file the lesson downloads, has
    # the keys without the prefix, each layer's causal mask as h.{i}.attn.bias (and
    # masked_bias), no lm_head, in PyTorch's older (non-zip) format: build both, read both
    safetensors = pytest.importorskip("safetensors.torch")
    random_gpt2.save_pretrained(tmp_path / "saved")
    saved = safetensors.load_file(tmp_path / "saved" / "model.safetensors")
    assert "transformer.wte.weight" in saved
    original = {k.removeprefix("transformer."): v for k, v in saved.items() if "lm_head" not in k}
    n = SMALL["n_positions"]
    for i in range(SMALL["n_layer"]):
        original[f"h.{i}.attn.bias"] = torch.tril(torch.ones(n, n)).view(1, 1, n, n)
        original[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    path = tmp_path / "pytorch_model.bin"
    torch.save(original, path, _use_new_zipfile_serialization=False)
    ids = _ids(1, (2, 30))
    with torch.no_grad():
        theirs = random_gpt2(ids).logits
        from_file = load_gpt2(path, num_heads=4)(ids)
        from_saved = GPT.from_gpt2(saved, num_heads=4)(ids)
    assert (from_file - theirs).abs().max() < 1e-5
    assert (from_saved - theirs).abs().max() < 1e-5


def test_the_key_map_transposes_and_splits(random_gpt2):
    theirs = random_gpt2.state_dict()
    ours = gpt2_to_course(theirs)
    c_attn = theirs["transformer.h.1.attn.c_attn.weight"]  # (d, 3 d): x @ W, q | k | v
    assert torch.equal(ours["layers.1.self_attn.k_proj.weight"], c_attn[:, 64:128].t())
    assert torch.equal(
        ours["layers.1.feed_forward.linear2.weight"],
        theirs["transformer.h.1.mlp.c_proj.weight"].t(),
    )
    assert set(ours) == set(GPT(gpt2_config(**SMALL_SIZES)).state_dict())


def test_a_state_dict_that_is_not_gpt2s_is_refused(random_gpt2):
    state = dict(random_gpt2.state_dict())
    with pytest.raises(ValueError, match="no 'wte.weight'.*not a GPT-2 state dict"):
        gpt2_to_course({"weight": torch.zeros(2)})
    with pytest.raises(ValueError, match=r"keys that GPT-2 does not have: \['h.0.attn.q.weight'\]"):
        gpt2_to_course({**state, "h.0.attn.q.weight": torch.zeros(2)})
    with pytest.raises(ValueError, match="lm_head.weight differs from wte.weight"):
        gpt2_to_course({**state, "lm_head.weight": torch.zeros_like(state["lm_head.weight"])})
    with pytest.raises(TypeError, match="state_dict must be a dict"):
        gpt2_to_course([1, 2])


# ---- and into the learner's GPT (exercise 09's capstone, its task 8) ------------------------


@pytest.fixture(scope="module")
def solution_library(tmp_path_factory):
    """The solution's own library (solutions/mine): its GPT class, key map and generate."""
    import os
    from pathlib import Path

    from course_lib import mine as library

    previous = os.environ.get("COURSE_MINE")
    os.environ["COURSE_MINE"] = str(Path(__file__).resolve().parents[1] / "solutions" / "mine")
    try:
        pieces = {
            "GPT": library.mine("ex09.GPT"),
            "gpt2_to_mine": library.mine("ex09.gpt2_to_mine"),
            "generate": library.mine("ex09.generate"),
        }
        assert not any(k.startswith("ex09") for k in library.borrowed()), library.borrowed()
    finally:
        if previous is None:
            del os.environ["COURSE_MINE"]
        else:
            os.environ["COURSE_MINE"] = previous
    return pieces


def _learner_gpt2(pieces, random_gpt2):
    model = pieces["GPT"](
        50257, 128, 64, 4, 2, bias=True, activation="gelu_tanh", positions="learned"
    )
    model.load_state_dict(pieces["gpt2_to_mine"](random_gpt2.state_dict()))
    return model.eval()


def test_the_learners_gpt_holds_gpt2_logits_equal_hugging_faces(solution_library, random_gpt2):
    mine = _learner_gpt2(solution_library, random_gpt2)
    assert type(mine).__module__ == "mine.gpt"
    ids = _ids(1, (2, 128))
    with torch.no_grad():
        theirs = random_gpt2(ids).logits
        plain = mine(ids)
        first, cache = mine.forward_cached(ids[:, :40], None, 0)
        rest, _ = mine.forward_cached(ids[:, 40:44], cache, 40)
    assert (plain - theirs).abs().max() < 1e-5
    assert (torch.cat([first, rest], dim=1) - theirs[:, :44]).abs().max() < 1e-5


def test_the_learners_generate_writes_gpt2s_greedy_tokens(
    solution_library, random_gpt2, gpt2_tokenizer
):
    mine = _learner_gpt2(solution_library, random_gpt2)
    prompt = torch.tensor([gpt2_tokenizer.encode("To be, or not to be, that is the question:")])
    theirs = random_gpt2.generate(prompt, max_new_tokens=20, do_sample=False, pad_token_id=50256)
    cached = solution_library["generate"](mine, prompt, 20, temperature=0.0)  # the KV cache
    plain = prompt
    with torch.no_grad():  # and without any cache: the whole sequence at every step
        for _ in range(20):
            plain = torch.cat([plain, mine(plain)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(cached, theirs) and torch.equal(plain, theirs)
