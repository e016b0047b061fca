"""Generating a sequence token by token (lesson 08; lesson 09 reuses greedy decoding).

Both decoders talk to the model through one function, `step_fn(prefix) -> logits`:
prefix (batch, t) holds <bos> and the tokens chosen so far, logits (batch, t, vocab) the
model's scores for the token after every position; only the last row, logits[:, -1], is used.
Any model fits behind it: `model_step_fn` builds one for a `Seq2SeqTransformer` (it encodes the
source once and re-runs only the decoder), lesson 09 builds one for a GPT.

    greedy_decode   at every step take the single most likely token
    beam_search     keep the `beam_size` most likely prefixes; finish with the best full one
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from .validation import (
    check_id_list,
    check_ids,
    check_non_negative_int,
    check_positive_int,
    check_token_id,
    is_number,
)

__all__ = [
    "greedy_decode",
    "beam_search",
    "model_step_fn",
    "strip_special",
    "translate",
    "exact_match",
]

StepFn = Callable[[Tensor], Tensor]


def _last_logits(step_fn: StepFn, prefix: Tensor) -> Tensor:
    logits = step_fn(prefix)
    if not isinstance(logits, Tensor) or logits.dim() != 3 or logits.shape[:2] != prefix.shape:
        got = tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__
        raise ValueError(
            f"step_fn must return logits (batch, t, vocab) for a prefix of shape "
            f"{tuple(prefix.shape)}, got {got}"
        )
    return logits[:, -1, :]  # (batch, vocab): the scores of the next token


def greedy_decode(
    step_fn: StepFn,
    batch_size: int,
    bos_id: int,
    eos_id: int,
    max_new_tokens: int,
    device: torch.device | str | None = None,
) -> Tensor:
    """Take the most likely token at every step: -> tokens (batch_size, max_new_tokens), long.

    The result holds the generated tokens without <bos>. A row that has produced `eos_id`
    is finished: it keeps emitting `eos_id` whatever the model says, so everything after
    the first <eos> is <eos>. The loop stops early once every row is finished (the rest is
    filled with eos_id).
    """
    if not callable(step_fn):
        raise TypeError(
            "step_fn must be a function prefix (batch, t) -> logits "
            f"(batch, t, vocab), got {type(step_fn).__name__}"
        )
    check_positive_int(batch_size, "batch_size")
    check_non_negative_int(bos_id, "bos_id", " (a token id)")
    check_non_negative_int(eos_id, "eos_id", " (a token id)")
    check_positive_int(max_new_tokens, "max_new_tokens")
    prefix = torch.full((batch_size, 1), bos_id, dtype=torch.long, device=device)  # (batch, 1)
    finished = torch.zeros(batch_size, dtype=torch.bool, device=device)  # (batch,)
    for _ in range(max_new_tokens):
        if finished.all():
            break
        with torch.no_grad():
            logits = _last_logits(step_fn, prefix)  # (batch, vocab)
        next_token = logits.argmax(dim=-1)  # (batch,): the best token, over the vocabulary
        next_token = next_token.masked_fill(finished, eos_id)  # finished rows stay finished
        prefix = torch.cat([prefix, next_token.unsqueeze(1)], dim=1)  # (batch, t + 1)
        finished |= next_token == eos_id
    tokens = prefix[:, 1:]  # drop <bos>
    pad = torch.full(
        (batch_size, max_new_tokens - tokens.shape[1]),
        eos_id,
        dtype=torch.long,
        device=prefix.device,
    )
    return torch.cat([tokens, pad], dim=1)  # (batch, max_new_tokens)


def beam_search(
    step_fn: StepFn,
    bos_id: int,
    eos_id: int,
    max_new_tokens: int,
    beam_size: int = 4,
    length_penalty: float = 0.0,
    device: torch.device | str | None = None,
) -> tuple[Tensor, float]:
    """Decode ONE sequence keeping the `beam_size` best prefixes: -> (tokens (n,), log-prob).

    step_fn gets the live beams as a batch, prefix (num_beams, t), and returns logits
    (num_beams, t, vocab). Each step every beam is extended by every token, and the
    `beam_size` highest total log-probabilities survive; a beam that emits `eos_id` is set
    aside as a finished hypothesis. The search ends when no live beam can beat the best
    finished one, or after max_new_tokens tokens. The winner maximises
    log_prob / length ** length_penalty (0: the plain sum, which favours short outputs).
    tokens are without <bos> and end with <eos> when the winner finished.
    beam_size=1 is greedy decoding.
    """
    if not callable(step_fn):
        raise TypeError(
            "step_fn must be a function prefix (beams, t) -> logits "
            f"(beams, t, vocab), got {type(step_fn).__name__}"
        )
    check_non_negative_int(bos_id, "bos_id", " (a token id)")
    check_non_negative_int(eos_id, "eos_id", " (a token id)")
    check_positive_int(max_new_tokens, "max_new_tokens")
    check_positive_int(beam_size, "beam_size")
    if not is_number(length_penalty):
        raise TypeError(f"length_penalty must be a number, got {length_penalty!r}")

    def score(log_prob: float, length: int) -> float:
        return log_prob / (length**length_penalty)

    beams = torch.full((1, 1), bos_id, dtype=torch.long, device=device)  # (num_beams, t)
    beam_scores = torch.zeros(1, dtype=torch.float64, device=device)  # (num_beams,) log-probs
    finished: list[tuple[float, float, Tensor]] = []  # (score, log_prob, tokens)
    for step in range(1, max_new_tokens + 1):
        with torch.no_grad():
            log_probs = torch.log_softmax(_last_logits(step_fn, beams).double(), dim=-1)
        vocab = log_probs.shape[-1]
        if eos_id >= vocab:
            raise ValueError(f"eos_id={eos_id} is outside the vocabulary of size {vocab}")
        total = (beam_scores.unsqueeze(1) + log_probs).flatten()  # (num_beams * vocab,)
        top_scores, top_index = total.topk(min(2 * beam_size, total.numel()))
        next_beams, next_scores = [], []
        for value, index in zip(top_scores.tolist(), top_index.tolist(), strict=True):
            beam, token = divmod(index, vocab)
            tokens = torch.cat([beams[beam, 1:], beams.new_tensor([token])])
            if token == eos_id:
                finished.append((score(value, step), value, tokens))
            else:
                next_beams.append(torch.cat([beams[beam], beams.new_tensor([token])]))
                next_scores.append(value)
            if len(next_beams) == beam_size:
                break
        if not next_beams:
            break
        beams = torch.stack(next_beams)
        beam_scores = torch.tensor(next_scores, dtype=torch.float64, device=beams.device)
        finished.sort(key=lambda item: item[0], reverse=True)
        del finished[beam_size:]
        # Log-probabilities only fall as a beam grows, so with no length penalty a live beam
        # whose score is already below the best finished one can never overtake it.
        if (
            len(finished) >= beam_size
            and length_penalty == 0
            and beam_scores.max().item() <= finished[0][0]
        ):
            break
    if not finished:  # nothing emitted <eos> within max_new_tokens: return the best live beam
        return beams[0, 1:], float(beam_scores[0])
    finished.sort(key=lambda item: item[0], reverse=True)
    _, log_prob, tokens = finished[0]
    return tokens, log_prob


def model_step_fn(model: nn.Module, src: Tensor) -> StepFn:
    """A step_fn for an encoder-decoder with `source_mask(src)`, `encode(src, src_mask) ->
    memory` and `decode(prefix, memory, src_mask) -> logits`: the source is encoded once, here.

    Beam search calls it with as many rows as live beams; for a single source (batch 1) the
    memory is repeated to match.
    """
    check_ids(src, "src", "n_src")
    with torch.no_grad():
        src_mask = model.source_mask(src)  # (batch, 1, n_src)
        memory = model.encode(src, src_mask)  # (batch, n_src, d_model)

    def step_fn(prefix: Tensor) -> Tensor:
        rows = prefix.shape[0]
        if rows == memory.shape[0]:
            return model.decode(prefix, memory, src_mask)
        if memory.shape[0] != 1:
            raise ValueError(
                f"the prefix has {rows} rows but the source has batch "
                f"{memory.shape[0]}; beams need a single source"
            )
        return model.decode(prefix, memory.expand(rows, -1, -1), src_mask.expand(rows, -1, -1))

    return step_fn


def strip_special(tokens: Sequence[int] | Tensor, eos_id: int) -> list[int]:
    """The tokens up to (not including) the first eos_id."""
    if isinstance(tokens, Tensor):
        if tokens.dim() != 1:
            raise ValueError(
                f"tokens must be one sequence, a 1-D tensor (seq,), got shape "
                f"{tuple(tokens.shape)}; strip each row: [strip_special(row, eos_id) for row in "
                "tokens]"
            )
        tokens = tokens.tolist()
    elif isinstance(tokens, str):
        raise TypeError(
            "tokens must be token ids, got a str: strip_special cuts ids, before decode"
        )
    tokens = list(check_id_list(tokens, "tokens"))
    check_token_id(eos_id, "eos_id", "the id of the <eos> token")
    return tokens[: tokens.index(eos_id)] if eos_id in tokens else tokens


def translate(
    model: nn.Module,
    tokenizer,
    texts: Sequence[str],
    max_new_tokens: int = 16,
    beam_size: int | None = None,
    batch_size: int = 500,
) -> list[str]:
    """Texts -> model outputs as text: greedy (beam_size None) or beam search per text."""
    if isinstance(texts, str):
        raise TypeError("texts must be a list of strings, got a single str; wrap it: [text]")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    outputs: list[str] = []
    try:
        for start in range(0, len(texts), batch_size):
            chunk = list(texts[start : start + batch_size])
            src, _ = tokenizer.encode_batch(chunk)
            src = src.to(device)
            if beam_size is None:
                tokens = greedy_decode(
                    model_step_fn(model, src),
                    len(chunk),
                    tokenizer.bos_id,
                    tokenizer.eos_id,
                    max_new_tokens,
                    device=device,
                )
                rows = list(tokens)
            else:
                rows = [
                    beam_search(
                        model_step_fn(model, src[i : i + 1]),
                        tokenizer.bos_id,
                        tokenizer.eos_id,
                        max_new_tokens,
                        beam_size,
                        device=device,
                    )[0]
                    for i in range(len(chunk))
                ]
            outputs += [tokenizer.decode(strip_special(row, tokenizer.eos_id)) for row in rows]
    finally:
        model.train(was_training)
    return outputs


def exact_match(predictions: Sequence[str], references: Sequence[str]) -> float:
    """The fraction of predictions equal to their reference, character for character."""
    for name, texts in (("predictions", predictions), ("references", references)):
        if isinstance(texts, str):
            raise TypeError(f"{name} must be a list of strings, got a single str; wrap it: [text]")
    if len(predictions) != len(references):
        raise ValueError(f"got {len(predictions)} predictions for {len(references)} references")
    if not predictions:
        raise ValueError("predictions is empty")
    for i, pair in enumerate(zip(predictions, references, strict=True)):
        for name, text in zip(("predictions", "references"), pair, strict=True):
            if not isinstance(text, str):
                raise TypeError(
                    f"{name}[{i}] is {type(text).__name__}, not a str: exact_match compares "
                    "texts, so decode token ids first (tokenizer.decode)"
                )
    return sum(p == r for p, r in zip(predictions, references, strict=True)) / len(predictions)
