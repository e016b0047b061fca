"""ex05.causal_mask."""

from __future__ import annotations

import torch

from ...core import Case, Task, register
from ._shared import LESSON, _not_bool

CAUSAL_MISTAKES = {
    "triu": "that is the upper triangle: position i would see the future. True must be on and below"
    " the diagonal (key j <= query i), which is tril",
    "no_diagonal": "the diagonal is missing: a position may attend to itself (tril, not "
    "tril(-1)); without it the first row has no key at all. As a complement: triu() holds the "
    "diagonal, so ~triu() drops it; the future alone is triu(1), and the mask ~triu(1)",
    "inverted": "your mask is inverted: in this course True means 'may attend' (the convention of "
    "F.scaled_dot_product_attention), not 'blocked' as in nn.MultiheadAttention: True on and "
    "below the diagonal (tril)",
    "float": "the mask must be a bool tensor (True/False), not 1.0/0.0 floats: a float mask is "
    "ADDED to the scores, so 1.0 and 0.0 would block nothing. Use dtype=torch.bool",
    "int": "the mask must be a bool tensor (True/False), not integers; use dtype=torch.bool",
    "tril_above": "tril(1) keeps one diagonal above the main one, so query i also sees key i + 1, "
    "the next token: the causal mask is tril() with the default diagonal=0 (key j <= query i)",
    "first_row_empty": "row 0 is all False, but query 0 may attend key 0, itself: a loop that "
    "fills m[i, :i + 1] must start at i = 0, not 1",
    "additive": "that is an additive float mask (0 where allowed, -inf above the diagonal, as "
    "nn.Transformer.generate_square_subsequent_mask makes); this course's masks are bool, True "
    "= may attend: torch.ones(n, n, dtype=torch.bool).tril()",
    "last_row_empty": "the last row is all False, but the last query may attend every key: a "
    "loop that fills m[i, :i + 1] must run over every row, for i in range(n), not range(n - 1)",
    "fixed_size": "your mask is cut from a table of a fixed size (a block_size table sliced "
    "[:n, :n]), too small for this n: build it for the n you are given",
}


def wrong_causal_mask(n, *, mistake=""):
    """tril of ones, bool, with one named mistake."""
    dtype = {"float": torch.float32, "int": torch.int64}.get(mistake, torch.bool)
    ones = torch.ones(n, n, dtype=dtype)
    if mistake == "fixed_size":  # a (16, 16) table built once (a block_size), sliced [:n, :n]
        return wrong_causal_mask(16)[:n, :n]
    if mistake == "additive":  # 0 where allowed, -inf above the diagonal (PyTorch's float mask)
        return torch.full((n, n), float("-inf")).triu(1)
    mask = {
        "triu": ones.triu(),
        "no_diagonal": ones.tril(-1),
        "tril_above": ones.tril(1),
        "first_row_empty": ones.tril() * (torch.arange(n) > 0)[:, None],  # a loop from i = 1
        "last_row_empty": ones.tril() * (torch.arange(n) < n - 1)[:, None],  # range(n - 1)
    }.get(mistake, ones.tril())
    return ~mask if mistake == "inverted" else mask


@register
class CausalMask(Task):
    """True on and below the diagonal, (n, n) bool."""

    id = "ex05.causal_mask"
    lesson = f"{LESSON}, section 'The causal mask'"
    reference = "course_lib.masking.causal_mask"
    mistake_table = CAUSAL_MISTAKES
    wrong = staticmethod(wrong_causal_mask)

    def diagnose(self, got, want, case):
        size = got.shape[0] if isinstance(got, torch.Tensor) and got.dim() == 2 else None
        if size and got.shape == (size, size) and size != case.args[0]:  # any table size
            if torch.equal(got.bool(), torch.ones(size, size, dtype=torch.bool).tril()):
                return (
                    f"your mask is ({size}, {size}) for n={case.args[0]}: it comes from a table "
                    "of a fixed size (a block_size table, sliced [:n, :n] or not sliced): build "
                    "it for the n you are given, torch.ones(n, n, dtype=torch.bool).tril()"
                )
        return _not_bool(self, got, want, case)

    def cases(self, gen):
        return [Case(f"n={n}", (n,)) for n in (5, 2, 8, 1, 40)]
