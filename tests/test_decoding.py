"""course_lib.decoding: greedy decoding, beam search and the model helpers."""

import itertools

import pytest
import torch

from course_lib.datasets import date_tokenizer
from course_lib.decoding import (
    beam_search,
    exact_match,
    greedy_decode,
    model_step_fn,
    strip_special,
    translate,
)
from course_lib.translator import Seq2SeqTransformer

BOS, EOS = 0, 1


def table_step_fn(table):
    """Logits read from table (max_new_tokens + 1, vocab, vocab) by (position, last token): a tiny
    Markov 'model' whose best sequence can be found by brute force."""

    def step_fn(prefix):
        t = prefix.shape[1]
        return table[torch.arange(t).unsqueeze(0), prefix]  # (rows, t, vocab)

    return step_fn


def sequence_log_prob(table, tokens):
    """Log-probability of tokens (without <bos>) under table_step_fn(table)."""
    log_probs = table.log_softmax(-1)
    prev, total = BOS, 0.0
    for position, token in enumerate(tokens):
        total += log_probs[position, prev, token].item()
        prev = token
    return total


def test_greedy_decode_picks_the_argmax_and_keeps_eos():
    # position 0: token 3; position 1: token EOS for row 0, token 2 for row 1, ...
    logits_per_step = [
        torch.tensor([[0.0, 0, 0, 5], [0, 0, 0, 5]]),
        torch.tensor([[0.0, 5, 0, 0], [0, 0, 5, 0]]),
        torch.tensor([[0.0, 0, 5, 0], [0, 5, 0, 0]]),
        torch.tensor([[0.0, 0, 0, 5], [0, 0, 0, 5]]),
    ]

    def step_fn(prefix):
        t = prefix.shape[1]
        return torch.stack(logits_per_step[:t], dim=1)  # (2, t, 4)

    out = greedy_decode(step_fn, 2, BOS, EOS, max_new_tokens=4)
    assert out.dtype == torch.long
    assert out.tolist() == [[3, EOS, EOS, EOS], [3, 2, EOS, EOS]]


def test_greedy_decode_stops_early_and_pads_with_eos():
    calls = []

    def step_fn(prefix):
        calls.append(prefix.shape[1])
        logits = torch.zeros(prefix.shape[0], prefix.shape[1], 3)
        logits[..., EOS] = 1.0
        return logits

    assert greedy_decode(step_fn, 3, BOS, EOS, max_new_tokens=6).tolist() == [[EOS] * 6] * 3
    assert calls == [1]


def test_greedy_decode_rejects_bad_input():
    step_fn = table_step_fn(torch.randn(5, 4, 4))
    with pytest.raises(TypeError, match="step_fn"):
        greedy_decode(None, 2, BOS, EOS, 3)
    with pytest.raises(ValueError, match="batch_size"):
        greedy_decode(step_fn, 0, BOS, EOS, 3)
    with pytest.raises(ValueError, match="max_new_tokens"):
        greedy_decode(step_fn, 2, BOS, EOS, 0)
    with pytest.raises(ValueError, match="eos_id"):
        greedy_decode(step_fn, 2, BOS, -1, 3)
    with pytest.raises(ValueError, match="step_fn must return"):
        greedy_decode(lambda prefix: torch.zeros(2, 4), 2, BOS, EOS, 3)


def test_beam_size_one_is_greedy():
    gen = torch.Generator().manual_seed(1)
    for _ in range(5):
        table = torch.randn(7, 5, 5, generator=gen)
        greedy = greedy_decode(table_step_fn(table), 1, BOS, EOS, 6)[0]
        tokens, _ = beam_search(table_step_fn(table), BOS, EOS, 6, beam_size=1)
        assert strip_special(tokens, EOS) == strip_special(greedy, EOS)


def test_wide_beam_finds_the_most_likely_sequence():
    """With a beam as wide as the number of prefixes, beam search is exhaustive."""
    gen = torch.Generator().manual_seed(2)
    vocab, max_new_tokens = 4, 4
    for _ in range(5):
        table = 2 * torch.randn(max_new_tokens + 1, vocab, vocab, generator=gen)
        best, best_lp = None, -float("inf")
        for length in range(1, max_new_tokens + 1):  # sequences ending with EOS, no earlier EOS/BOS
            for body in itertools.product([2, 3], repeat=length - 1):
                seq = [*body, EOS]
                lp = sequence_log_prob(table, seq)
                if lp > best_lp:
                    best, best_lp = seq, lp
        # BOS (0) may also be emitted by the table; forbid it so the search space matches
        table[..., BOS] = -1e9
        best_lp = sequence_log_prob(table, best)
        tokens, log_prob = beam_search(table_step_fn(table), BOS, EOS, max_new_tokens, beam_size=16)
        assert tokens.tolist() == best
        assert log_prob == pytest.approx(best_lp, abs=1e-5)


def test_beam_search_can_beat_greedy():
    # Greedy takes token 2 (0.6), then 3 (0.55), then <eos>: probability 0.33. The beam keeps
    # token 3 (0.4), after which <eos> is certain: probability 0.4, the better sequence.
    table = torch.full((4, 4, 4), -1e9)
    table[0, BOS, 2], table[0, BOS, 3] = torch.tensor(0.6).log(), torch.tensor(0.4).log()
    table[1, 2, EOS], table[1, 2, 3] = torch.tensor(0.45).log(), torch.tensor(0.55).log()
    table[1, 3, EOS] = 0.0
    table[2, 3, EOS] = 0.0
    step_fn = table_step_fn(table)
    greedy = greedy_decode(step_fn, 1, BOS, EOS, 3)[0]
    assert greedy.tolist() == [2, 3, EOS]
    beam, log_prob = beam_search(step_fn, BOS, EOS, 3, beam_size=2)
    assert beam.tolist() == [3, EOS]
    assert log_prob == pytest.approx(torch.tensor(0.4, dtype=torch.float64).log().item())


def test_beam_search_rejects_bad_input():
    step_fn = table_step_fn(torch.randn(5, 4, 4))
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(step_fn, BOS, EOS, 3, beam_size=0)
    with pytest.raises(TypeError, match="length_penalty"):
        beam_search(step_fn, BOS, EOS, 3, length_penalty="x")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        beam_search(step_fn, BOS, 9, 3)


def test_model_helpers_decode_a_model():
    tok = date_tokenizer()
    torch.manual_seed(0)
    model = Seq2SeqTransformer(
        tok.vocab_size, d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=32
    ).eval()
    src, _ = tok.encode_batch(["3 Mar 2021", "the 1st of May 1999"])
    step_fn = model_step_fn(model, src)
    greedy = greedy_decode(step_fn, 2, tok.bos_id, tok.eos_id, 5)
    # the same as running the whole model on the growing prefix
    prefix = torch.full((2, 1), tok.bos_id)
    for _ in range(5):
        next_token = model(src, prefix)[:, -1].argmax(-1)
        prefix = torch.cat([prefix, next_token[:, None]], dim=1)
    done = torch.cumsum(prefix[:, 1:] == tok.eos_id, dim=1) > 0
    expected = prefix[:, 1:].masked_fill(torch.roll(done, 1, 1) & done, tok.eos_id)
    assert torch.equal(greedy, expected)
    texts = translate(model, tok, ["3 Mar 2021", "the 1st of May 1999"], max_new_tokens=5)
    assert texts == [tok.decode(strip_special(row, tok.eos_id)) for row in greedy]
    beams = translate(model, tok, ["3 Mar 2021"], max_new_tokens=5, beam_size=3)
    assert isinstance(beams[0], str)
    with pytest.raises(TypeError, match="texts"):
        translate(model, tok, "3 Mar 2021")


def test_exact_match():
    assert exact_match(["a", "b", "c", "d"], ["a", "x", "c", "d"]) == 0.75
    with pytest.raises(ValueError, match="references"):
        exact_match(["a"], ["a", "b"])
    assert strip_special([5, 6, 2, 2], 2) == [5, 6]
    assert strip_special(torch.tensor([5, 6]), 2) == [5, 6]


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: exact_match("abc", "abd"), TypeError, "predictions must be a list of strings"),
        (lambda: exact_match(["abc"], "a"), TypeError, "references must be a list of strings"),
        (lambda: exact_match([[5, 6]], ["ab"]), TypeError, r"predictions\[0\] is list, not a str"),
        (lambda: strip_special(torch.tensor([[5, 6, 2]]), 2), ValueError, "strip each row"),
        (lambda: strip_special([[5, 6, 2]], 2), TypeError, r"tokens\[0\] is \[5, 6, 2\]"),
        (lambda: strip_special("ab", 2), TypeError, "tokens must be token ids, got a str"),
        (lambda: strip_special([5, 6], "2"), TypeError, "eos_id must be an int"),
    ],
)
def test_exact_match_and_strip_special_name_what_is_not_a_list(call, error, words):
    # before: exact_match("abc", "abd") compared letters and gave 0.667, a list of token ids
    # never equals its text (0, silently), and strip_special kept a whole batch, stripping
    # nothing
    with pytest.raises(error, match=words):
        call()
