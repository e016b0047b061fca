"""ex08.greedy_decode: greedy decoding over a step function, finished rows forced to eos."""

from __future__ import annotations

import torch

from ...core import Case, Task, compare_values, register
from ..common import randn


class TableStepFn:
    """A stand-in model for grading: the next token's logits are read from a random table
    indexed by (row, position, last token), so the result depends on the whole history."""

    def __init__(self, table: torch.Tensor, bos_id: int):
        self.table, self.bos_id = table, bos_id  # table (batch, max_new_tokens, vocab, vocab)
        self.length = 0  # the length of the last prefix seen

    def __call__(self, prefix):
        if not isinstance(prefix, torch.Tensor) or prefix.dim() != 2:
            raise ValueError(
                "step_fn expects prefix as a (batch, t) tensor of token ids, got "
                f"{getattr(prefix, 'shape', type(prefix).__name__)}"
            )
        if prefix.is_floating_point():  # a model's nn.Embedding raises on float ids
            raise ValueError(
                f"step_fn takes token ids, a long tensor; your prefix is {str(prefix.dtype)[6:]}, "
                "which a model's embedding cannot look up: start from torch.full((batch_size, 1), "
                "bos_id, dtype=torch.long) (torch.ones(...) * bos_id is float) and append the ids "
                "of argmax(dim=-1), not the scores of max(dim=-1)[0]"
            )
        batch, t = prefix.shape
        if batch != self.table.shape[0]:
            raise ValueError(
                f"step_fn expects a prefix with batch={self.table.shape[0]} rows, got {batch}"
            )
        if t > self.table.shape[1]:
            raise ValueError(
                f"step_fn got a prefix of length {t}, more than <bos> + max_new_tokens "
                f"tokens: stop after max_new_tokens steps"
            )
        if self.length and t > self.length + 1:
            raise ValueError(
                f"step_fn got a prefix of length {t} after one of length {self.length}: each step "
                "appends ONE token to every row, a (batch, 1) column. Check the shape of your next "
                "token: logits[:, -1].argmax(dim=-1) is (batch,), and next_token[:, None] makes "
                "the column; a (batch, 1) tensor and a (batch,) mask broadcast to (batch, batch)"
            )
        if (prefix[:, 0] != self.bos_id).any() and self.length and t == 1:  # prefix[:, -1:]
            raise ValueError(
                f"step_fn got one token, not <bos>, after a prefix of length {self.length}: pass "
                "the whole prefix at every step, <bos> and every token so far, step_fn(prefix), "
                "not its last column step_fn(prefix[:, -1:]): the model reads its whole history"
            )
        if (prefix[:, 0] != self.bos_id).any():
            raise ValueError(
                f"every row of the prefix must start with <bos> (id {self.bos_id}), its first "
                "column prefix[:, 0]: out[:, 0] = bos_id fills that column (out[0] = bos_id fills "
                "the first row)"
            )
        vocab = self.table.shape[-1]
        if prefix.min() < 0 or prefix.max() >= vocab:
            raise ValueError(f"the prefix holds token ids outside the vocabulary [0, {vocab})")
        prefix, self.length = prefix.long(), t
        rows = torch.arange(batch).unsqueeze(1)  # (batch, 1)
        positions = torch.arange(t).unsqueeze(0)  # (1, t)
        return self.table[rows, positions, prefix]  # (batch, t, vocab)


_GREEDY_NO_STOP_HINT = (
    "a row that has produced eos_id is finished: it must keep emitting eos_id (force it with "
    "masked_fill on a `finished` mask) instead of what the model says next"
)


_ONE_FOR_ALL = (
    "every row got the same tokens, one choice copied to the whole batch: argmax without dim= "
    "returns one index into the flattened scores (often past the vocabulary), and one row's "
    "scores (logits[0, -1]) or tokens[0:1].expand(...) decodes one row alone; each row has its "
    "own next token: logits[:, -1].argmax(dim=-1), one per row"
)


_KEPT = (
    "this case calls your function twice with the same sizes and checks the second call: where "
    "the other cases pass, your function keeps something from the first call (a `finished` mask "
    "or an output tensor in a global, a cache or a mutable default argument) and reads it "
    "again; build the prefix, the mask and the output afresh inside the function at every call"
)


MISTAKES = {
    "no_stop": _GREEDY_NO_STOP_HINT,
    "argmax_wrong_axis": "argmax over the wrong axis: pick the most likely token over the "
    "vocabulary, logits[:, -1].argmax(dim=-1)",
    "argmax_no_dim": _ONE_FOR_ALL,
    # the same tokens as a prefix never grown (torch.cat's result not assigned back)
    "first_position": "every token was chosen from the logits that follow <bos>, the first "
    "position: take the last position's, logits[:, -1], and grow the prefix at every step, "
    "prefix = torch.cat([prefix, next_token[:, None]], dim=1) (torch.cat returns a new tensor: "
    "assign it back)",
    "keep_bos": "return the generated tokens without the leading <bos> "
    "(shape (batch, max_new_tokens))",
    # prefix[:, :-1], shift_right's slice: the right shape, shifted one place to the right
    "drop_last": "your tokens start with <bos> and lose the last generated token: prefix[:, :-1] "
    "cuts the wrong end; the generated tokens are prefix[:, 1:], all but the <bos> column",
    "no_fill": "when every row finishes early, fill the remaining positions with eos_id so that "
    "the result is (batch, max_new_tokens)",
    # no_stop with an early stop once every row has finished: another result whenever every
    # row finishes before max_new_tokens
    "not_forced": _GREEDY_NO_STOP_HINT,
    "zero_after_eos": "after its eos_id a finished row keeps emitting eos_id itself, not 0 (or a "
    "pad id): everything after the first eos_id is eos_id, masked_fill(finished, eos_id)",
    "bos_after_eos": "after its eos_id a finished row keeps emitting eos_id itself, not bos_id: "
    "everything after the first eos_id is eos_id, masked_fill(finished, eos_id)",
    "zero_fill": "when you stop early, fill the remaining positions with eos_id, not 0: a "
    "finished row keeps emitting eos_id",
    "one_step_late": "a finished row got one more of the model's tokens after its eos_id before "
    "eos_id was forced: mark it finished from the token just chosen, finished | "
    "(next_token == eos_id), not from the token before it",
    "released": "a finished row went back to the model's tokens after one forced eos_id: once a "
    "row has produced eos_id it stays finished, so update the mask as finished | "
    "(next_token == eos_id) with the forced token, not from the model's choice alone (mind the "
    "parentheses: | binds tighter than ==, so finished | next_token == eos_id is "
    "(finished | next_token) == eos_id)",
    "one_short": "one token short: generate max_new_tokens tokens after <bos>, so the prefix "
    "ends max_new_tokens + 1 long (<bos> is not one of the new tokens)",
    "bos_finishes": "your rows are finished before they start: <bos> is not a generated token, "
    "and with bos_id == eos_id (GPT-2 has one id, <|endoftext|>, for both) the prefix's first "
    "column is eos_id; mark a row finished only from the tokens it generates",
    "max_values": "max(dim=-1)[0] (its .values) is the largest score, not the token: take the "
    "token id, logits[:, -1].argmax(dim=-1) (or max(dim=-1).indices)",
    "sampled": "you sampled the next token (torch.multinomial), so your tokens change from run "
    "to run: greedy decoding takes the most likely token at every step, "
    "logits[:, -1].argmax(dim=-1); sampling is exercise 09's sample_next",
    "stop_at_any": "you stopped as soon as ONE row finished; stop early only when every row is "
    "finished (finished.all()): the others still have tokens to produce",
}


def wrong_greedy_decode(step_fn, batch_size, bos_id, eos_id, max_new_tokens, *, mistake=""):
    """Greedy decoding that forces finished rows to eos_id and may stop once every row has
    finished, with one named mistake."""
    prefix = torch.full((batch_size, 1), bos_id, dtype=torch.long)
    finished = torch.full((batch_size,), mistake == "bos_finishes" and bos_id == eos_id)
    runs_on = ("no_stop", "zero_after_eos", "bos_after_eos", "one_step_late", "released")
    runs_on += ("drop_last",)  # full length, so that [:, :-1] keeps max_new_tokens columns
    for _ in range(max_new_tokens - (mistake == "one_short")):  # <bos> counted as a token
        if (mistake == "stop_at_any" and finished.any()) or (
            mistake not in runs_on and finished.all()
        ):
            break
        logits = step_fn(prefix)  # (batch, t, vocab)
        if mistake == "argmax_wrong_axis":
            chosen = logits.argmax(dim=1)[:, -1]
        elif mistake == "max_values":  # the largest score, cast to an id, not its index
            chosen = logits[:, -1].max(dim=-1).values.long()
        elif mistake == "sampled":  # drawn from the softmax (call seeds the global stream)
            chosen = torch.multinomial(logits[:, -1].softmax(dim=-1), 1).squeeze(-1)
        elif mistake == "argmax_no_dim":  # one index into the flattened (batch, vocab) scores
            chosen = logits[:, -1].argmax().expand(batch_size)
        else:
            chosen = logits[:, 0 if mistake == "first_position" else -1].argmax(dim=-1)
        forced = {"zero_after_eos": 0, "bos_after_eos": bos_id}.get(mistake, eos_id)
        token = chosen.masked_fill(finished, forced)
        if mistake in ("no_stop", "not_forced"):  # finished rows never forced
            token = chosen
        if mistake == "one_step_late":  # finished from the token already in the prefix
            finished = finished | (prefix[:, -1] == eos_id)
        prefix = torch.cat([prefix, token[:, None]], dim=1)
        if mistake == "released":  # from the model's choice alone, forgetting earlier eos
            finished = chosen == eos_id
        elif mistake != "one_step_late":
            finished = finished | (token == eos_id)
    tokens = {"keep_bos": prefix, "drop_last": prefix[:, :-1]}.get(mistake, prefix[:, 1:])
    if mistake in ("no_fill", "one_short"):
        return tokens
    fill = 0 if mistake == "zero_fill" else eos_id
    rest = torch.full((batch_size, max_new_tokens + 1 - prefix.shape[1]), fill, dtype=torch.long)
    return torch.cat([tokens, rest], dim=1)


@register
class GreedyDecode(Task):
    id = "ex08.greedy_decode"
    lesson = "lesson 08, section 'Greedy decoding and beam search'"
    reference = "course_lib.decoding.greedy_decode"
    mistake_table = MISTAKES
    wrong = staticmethod(wrong_greedy_decode)

    def cases(self, gen):
        def case(description, sizes, eos_bias=0.0, ids=(1, 2), dtype=torch.float32,
                 twice=False):  # fmt: skip
            (batch, vocab, max_new_tokens), (bos_id, eos_id) = sizes, ids
            table = randn(gen, batch, max_new_tokens + 1, vocab, vocab, dtype=dtype)
            table[..., eos_id] += eos_bias
            data = {"table": table, "batch_size": batch, "bos_id": bos_id, "eos_id": eos_id}
            data["before"] = []  # tables of earlier calls with the same sizes
            if twice:  # first call: <eos> at the last step; second: never first, always second
                before = randn(gen, batch, max_new_tokens + 1, vocab, vocab, dtype=dtype)
                last = max_new_tokens - 1
                before[:, :last, :, eos_id] -= 100.0
                before[:, last, :, eos_id] += 100.0
                table[:, :2, :, eos_id] += torch.tensor([-100.0, 100.0])[:, None]
                data["before"] = [before]
            table[:, :, eos_id, eos_id] -= 3.0  # after <eos> the table prefers other tokens
            return Case(description, data={**data, "max_new_tokens": max_new_tokens})

        # sizes: (batch, vocab, max_new_tokens); ids: (bos_id, eos_id)
        return [
            case("batch 4, vocab 12, max_new_tokens 8: rows end at different steps",
                 (4, 12, 8), 1.0),
            case("batch 6, vocab 13, max_new_tokens 10, bos 0 and eos 5", (6, 13, 10), 1.5, (0, 5)),
            case("batch 3, vocab 8, max_new_tokens 6: <eos> is never chosen", (3, 8, 6), -100.0),
            case("batch 5, vocab 15, max_new_tokens 12: every row ends early", (5, 15, 12), 4.0),
            case("float64 logits, batch 2, vocab 8, max_new_tokens 5",
                 (2, 8, 5), 1.0, dtype=torch.float64),
            case("batch 1, vocab 6, max_new_tokens 1", (1, 6, 1)),
            # finished read from the whole prefix, <bos> included, passed every case above
            case("batch 3, vocab 9, max_new_tokens 6, bos_id == eos_id == 4 (GPT-2's one "
                 "<|endoftext|> id)", (3, 9, 6), 0.0, (4, 4)),
            # a `finished` mask or an output buffer kept between calls (in a global, a cache or
            # a mutable default) passed every case above: no two had the same sizes
            case("batch 4, vocab 12, max_new_tokens 8, called twice: first every row ends at its "
                 "last step, then every row at its second token (nothing may be kept from the "
                 "first call)", (4, 12, 8), twice=True),
        ]  # fmt: skip

    def call(self, obj, case):
        d = case.data
        with torch.random.fork_rng(devices=[]):
            for table in [*d["before"], d["table"]]:  # the last call's tokens are graded
                step_fn = TableStepFn(table, d["bos_id"])
                torch.manual_seed(0)  # a draw from the global stream: the same in "sampled"
                got = obj(step_fn, d["batch_size"], d["bos_id"], d["eos_id"], d["max_new_tokens"])
            return got

    def compare(self, got, want, case):
        if isinstance(got, torch.Tensor) and got.dtype in (torch.int32, torch.int16):
            return "your tokens should be a long (int64) tensor, got " + str(got.dtype)[6:]
        return compare_values(got, want, "your tokens")

    def diagnose(self, got, want, case):
        if case.data["before"]:  # the second call of the same sizes (its rows may all be eos)
            return _KEPT
        if isinstance(got, torch.Tensor) and got.shape == want.shape and len(got) > 1:
            # one row decoded (whichever) and copied to the batch
            return _ONE_FOR_ALL if (got == got[:1]).all() and (want != want[:1]).any() else None
        return None
