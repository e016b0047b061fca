"""ex05.dependency_matrix (transfer: the lesson's causality test, for every position at once)."""

from __future__ import annotations

import torch

from ...core import Case, GradingError, Task, register
from ..common import randn
from ._shared import LESSON, _not_bool


class _Probe(torch.nn.Module):
    """A function for the learner's dependency_matrix to read: one attention head over x
    (batch, seq, d) -> (batch, seq, d_out) with a fixed bool mask, (seq, seq) or (batch, seq,
    seq), True = may attend. A query that may attend to nothing gives 0 (and a gradient of 0);
    with `skip_feature_0`, feature 0 of x is never read; with `centred`, only differences of
    features (x - x.flip(-1)), blind to adding one number to all; with `faint` (a position),
    that position is read at 1e-3 of its size, so its dependencies move outputs by less than 1e-2.
    A module, so cases pickle."""

    def __init__(self, mask, gen, d, d_out, dtype, skip_feature_0=False, centred=False, faint=None):
        super().__init__()
        self.faint = faint
        self.register_buffer("mask", mask)
        self.register_buffer("w_qkv", randn(gen, 3, d, d, dtype=dtype) * d**-0.5)
        self.register_buffer("w_out", randn(gen, d, d_out, dtype=dtype) * d**-0.5)
        self.skip_feature_0, self.centred = skip_feature_0, centred

    def forward(self, x):
        if self.mask.dim() == 3 and len(x) != len(self.mask):  # else it broadcasts silently
            n = len(self.mask)
            raise ValueError(f"this f holds a mask for each of {n} batch rows: call it on all {n}")
        if self.skip_feature_0:
            x = torch.cat((torch.zeros_like(x[..., :1]), x[..., 1:]), dim=-1)
        if self.centred:
            x = x - x.flip(-1)
        if self.faint is not None:
            p = self.faint
            x = torch.cat((x[:, :p], x[:, p : p + 1] * 1e-3, x[:, p + 1 :]), dim=1)
        q, k, v = x @ self.w_qkv[0], x @ self.w_qkv[1], x @ self.w_qkv[2]
        some = self.mask.any(-1, keepdim=True)  # a query that may attend to something
        scores = (q @ k.transpose(-2, -1)) * x.shape[-1] ** -0.5  # no near one-hot rows: an
        scores = scores.masked_fill(~(self.mask | ~some), float("-inf"))  # input matters clearly
        return (scores.softmax(-1) * some) @ v @ self.w_out


def _wrong_dependency_matrix(f, x, *, mistake=""):
    """Change one position at a time and see which outputs move, with one named mistake."""
    if x.dim() != 3:
        raise ValueError("x must be (batch, seq, d)")
    seq = x.shape[1]
    before = f(x)
    change = torch.randn(x.shape[0], x.shape[2], generator=torch.Generator().manual_seed(0))
    depends = torch.zeros(seq, seq, dtype=torch.bool)
    changed = x.clone()
    for j in range(seq):
        if mistake != "accumulated":  # each position's change starts again from x
            changed = x.clone()
        if mistake == "scaled":
            changed[:, j] *= 2
        elif mistake == "constant":
            changed[:, j] += 1
        elif mistake == "one_feature":
            changed[:, j, 0] += 1
        elif mistake == "first_row":
            changed[0, j] += change[0].to(x.dtype)
        else:
            changed[:, j] += change.to(x.dtype)
        after = f(changed)
        if mistake == "summed_features":  # one number per output position: features cancel
            after, before = after.sum(-1, keepdim=True), before.sum(-1, keepdim=True)
        moved = after != before  # (batch, seq, d_out)
        if mistake == "all_features":  # an output moves only when every feature of it moves
            moved = moved.all(-1, keepdim=True)
        if mistake == "first_row":
            moved = moved[:1]
        if mistake == "own_output_only":
            depends[j, j] = moved[:, j].any()
        else:
            depends[:, j] = moved.any(-1).any(0) | (mistake == "summed_outputs" and moved.any())
    if mistake == "diagonal_assumed":
        depends |= torch.eye(seq, dtype=torch.bool)
    if mistake == "lower_only":  # only the outputs i >= j tested, as if f were causal
        depends = depends.tril()
    if mistake == "grad_accumulated":  # x.grad never reset: row i holds rows 0..i-1 too
        depends = depends.cumsum(0) > 0
    return {"transposed": depends.T, "float": depends.float()}.get(mistake, depends)


DEPENDENCY_MISTAKES = {
    "transposed": "entry [i, j] says whether OUTPUT position i depends on INPUT position j (a "
    "row per output, a column per input); yours is the transpose: a causal f gives a lower "
    "triangle",
    "own_output_only": "after changing position j, compare every output position with its "
    "value before, not only output j: row i of column j is about output i",
    "summed_outputs": "compare each output position on its own: entry [i, j] is about output i "
    "alone, and asking whether any output moved marks the whole column",
    "accumulated": "each position's change must start again from the original x: yours pile up "
    "(the test of position j still holds the changes of positions 0..j-1), so an output seems "
    "to depend on positions it never reads",
    "all_features": "an output position moves when any one of its features moves (here output "
    "feature 0 is constant): reduce over the features with .any, not .all",
    "scaled": "multiplying position j by a number (or setting it to 0) changes nothing where x is "
    "0 (here position 2 is all zeros): add a change instead, such as x[:, j] + torch.randn(d)",
    "one_feature": "change every feature of position j, not one: f need not read every feature "
    "(this one never reads feature 0)",
    "constant": "add a different amount to each feature (torch.randn(d)): adding the same number "
    "to every feature of position j is invisible to an f that reads only differences of features "
    "(this one; LayerNorm, which subtracts the mean, too)",
    "first_row": "change position j in every batch row and compare every row: a position can "
    "matter in one row and not in another (here keys 3 and 4 are padding in row 0 only)",
    "diagonal_assumed": "an output does not always depend on its own input: test the diagonal "
    "as every other entry. Here position 0 may attend to nothing and gives 0, and position 1 "
    "reads key 0 alone, which gets weight 1 whatever position 1's query is",
    "float": "return a bool tensor, True = depends: build it from comparisons (!=) or with "
    "dtype=torch.bool",
    "lower_only": "you tested only the outputs at or after position j (the lower triangle), as "
    "if every f were causal: test every entry, the future too; here f reads later positions, so "
    "outputs depend on inputs after them (the tool exists to find a mask that leaks)",
    "grad_accumulated": "output i is marked as depending on every input that an earlier output "
    "depends on (here each position reads only itself, yet row i holds rows 0..i-1 too): .grad "
    "adds up over backward() calls, so the gradient read for output i still holds those of the "
    "outputs before it. Reset it before each backward (copy.grad = None), or use "
    "torch.autograd.grad(y[:, i, o].sum(), copy), which returns a fresh gradient",
    "summed_features": "compare every feature of an output, not their sum: here output feature 1 "
    "is minus feature 0, so the sum never moves (the gradient of y[:, i].sum() is 0 too); use "
    "!= or .abs() per feature, or one gradient per output feature",
}


@register
class DependencyMatrix(Task):
    id = "ex05.dependency_matrix"
    lesson = f"{LESSON}, section 'A causality test'"
    reference = "course_lib.masking.dependency_matrix"
    mistake_table = DEPENDENCY_MISTAKES
    wrong = staticmethod(_wrong_dependency_matrix)

    def call(self, obj, case):
        result = super().call(obj, case)
        if case.args[1].requires_grad:  # x.requires_grad_(): the caller's x now builds graphs
            raise GradingError(
                "your code set requires_grad on the x it was given (x.requires_grad_()), so the "
                "caller's x is changed: every later operation on it builds a graph, and .numpy() "
                "fails. Leave x as it was: take gradients on a copy, x.detach().clone()"
                ".requires_grad_()"
            )
        if case.args[1].grad is not None:  # requires_grad_() undone, but backward() filled x.grad
            raise GradingError(
                "your code left a .grad on the x it was given (backward() through x itself), so "
                "the caller's x is changed: a later training step on it adds this gradient to its "
                "own. Leave x as it was: take gradients on a copy, x.detach().clone()"
                ".requires_grad_()"
            )
        return result

    def diagnose(self, got, want, case):  # int32 too: this result is no mask
        if _not_bool(self, got, want, case):
            return DEPENDENCY_MISTAKES["float"]
        want = torch.as_tensor(want)
        missed_only = got.shape == want.shape and not (got & ~want).any()
        if case.args[0].centred and missed_only:
            return (  # x[:, j] += 0.1 (rounding noise), grad.sum(-1) != 0: dependencies missed
                "dependencies cancel on this f, which reads only differences of features: change "
                "each feature by its own amount (torch.randn(d)) and compare with != or .abs(), "
                "not a signed sum over features"
            )
        if case.args[0].faint is not None and missed_only:  # isclose(atol=1e-2), allclose
            return (
                "you missed faint dependencies: this f reads position 2 at 1e-3 of its size, so "
                "changing it moves the outputs by less than 1e-2, which a loose comparison "
                "(isclose or allclose with atol=1e-2, abs() > 1e-2) takes for no change. Any "
                "change counts: compare with != (or a gradient with != 0)"
            )
        if missed_only:  # (after - before) > tol: an output that moved down was not counted
            return (
                "you missed dependencies (and marked none too many): an output that moves in "
                "either direction counts, so compare with != or (after - before).abs() > tol"
            )
        return None

    def cases(self, gen):
        def case(description, mask, batch=2, d=8, d_out=8, dtype=torch.float32, **options):
            seq = mask.shape[-1]
            probe = _Probe(mask, gen, d, d_out, dtype, **options).eval()
            return Case(description, (probe, randn(gen, batch, seq, d, dtype=dtype)))

        def on_grid(c):  # x + 1 and each position's mean are exact: no rounding noise
            c.args[1].mul_(16).round_().div_(16)
            return c

        causal = torch.ones(6, 6, dtype=torch.bool).tril()
        padded = torch.ones(2, 5, 5, dtype=torch.bool)
        padded[0, :, 3:] = False  # keys 3 and 4 are padding in row 0 only
        zero_at_2 = case(
            "causal attention over x whose position 2 is all zeros, x (2, 6, 8)", causal
        )
        zero_at_2.args[1][:, 2] = 0
        position_wise = case(
            "each position reads only itself (position-wise), x (2, 4, 8), "
            "d_out 3, output feature 0 constant",
            torch.eye(4, dtype=torch.bool),
            d_out=3,
        )
        position_wise.args[0].w_out[:, 0] = 0  # output feature 0 reads nothing
        cases = [
            position_wise,
            case("causal attention, x (2, 6, 8)", causal),
            case("no mask: every position reads every other, x (1, 4, 8)",
                 torch.ones(4, 4, dtype=torch.bool), batch=1),
            case("a mask that leaks one step into the future (tril(1)), x (2, 5, 8)",
                 torch.ones(5, 5, dtype=torch.bool).tril(1)),
            zero_at_2,
            case("causal attention that never reads feature 0, x (2, 6, 8)", causal,
                 skip_feature_0=True),
            case("keys 3 and 4 are padding in batch row 0 only (no causal mask), x (2, 5, 8)",
                 padded),
            case("the strict past (tril(-1)): position 0 may attend to nothing and gives 0, "
                 "float64 x (3, 5, 6)",
                 torch.ones(5, 5, dtype=torch.bool).tril(-1), batch=3, d=6, dtype=torch.float64),
            on_grid(case("causal attention that reads only differences of features (x - "
                         "x.flip(-1)), x (2, 6, 8) on a grid of 1/16", causal, centred=True)),
            case("one position, x (2, 1, 8)", torch.ones(1, 1, dtype=torch.bool)),
            Case("x of shape (6, 8), 2-D: a ValueError", (torch.nn.Identity(),
                 torch.zeros(6, 8)), raises=ValueError),
        ]  # fmt: skip
        opposed = case(  # drawn last: the cases above keep their values
            "causal attention, x (2, 5, 8), d_out 2: output feature 1 is minus feature 0",
            causal[:5, :5],
            d_out=2,
        )
        opposed.args[0].w_out[:, 1] = -opposed.args[0].w_out[:, 0]  # features sum to exactly 0
        one_feature = case(  # drawn after `opposed`: each dependency moves one number, up or
            "causal attention with one output feature and one batch row, x (1, 6, 8), d_out 1",
            causal,  # down: (after - before) > tol misses about half of its 21 dependencies
            batch=1,
            d_out=1,
        )
        faint = case(  # drawn last: every dependency on position 2 moves outputs by < 1e-2
            "causal attention that reads position 2 at 1e-3 of its size, x (2, 6, 8): a "
            "dependency can be faint",
            causal,
            faint=2,
        )
        # faint before the centred case: a loose comparison misses dependencies there too, and
        # that case's hint speaks of signed sums
        return [*cases[:8], faint, *cases[8:-1], opposed, one_feature, cases[-1]]
