"""ex10.sliding_window_mask: Longformer's band as a bool mask. Data: the cases, the named
mistakes (FAULTS) and one wrong mask that takes a mistake's name."""

from __future__ import annotations

import torch

from ...core import Case, GradingError, Task, register

LESSON = "lesson 10"

FAULTS = {
    # #f9: before too_narrow, which gives the same band at window=2, where this one first fails
    "causal_halved": (
        "with causal=True keep the whole past half of the band, i - window <= j <= i (window + 1 "
        "keys, the query's own included): `window` counts the keys on ONE side, so the causal "
        "band is not halved (window // 2) nor made narrower, only cut at j <= i"
    ),
    "too_narrow": (
        "the window is one too narrow: key j is allowed when |i - j| <= window, so the "
        "band is 2 * window + 1 wide (use <=, not <)"
    ),
    "too_wide": (
        "the window is one too wide: key j is allowed when |i - j| <= window, not <= window + 1"
    ),
    "no_abs": (
        "without abs, i - j <= window holds for every key after the query: the band must be "
        "bounded on both sides, |i - j| <= window (offset.abs() <= window)"
    ),
    "future": "with causal=True the band keeps the past (j <= i), not the future",
    "causal_ignored": "causal=True is ignored: keep only the keys j with i - window <= j <= i",
    "always_causal": (
        "without causal=True the band is two-sided, |i - j| <= window: the keys up to "
        "`window` AFTER the query too; keep only j <= i when causal=True"
    ),
    "causal_no_upper": (
        "with causal=True the band is i - window <= j <= i: j >= i - window alone lets each "
        "query see every later key; keep j <= i as well (offset >= 0)"
    ),
    "plain_causal": (
        "with causal=True the window still applies: keep the past half of the band, "
        "i - window <= j <= i, not every key j <= i (that is the plain causal mask)"
    ),
    "diagonal_blocked": (
        "with causal=True a token may still attend to itself: keep j <= i, not j < i"
    ),
    "triangle_offsets_swapped": (
        "the offsets of tril and triu are swapped: tril(d) keeps j <= i + d and triu(d) keeps "
        "j >= i + d, so tril(-window).triu(window) keeps no key at all once window > 0; the "
        "band is ones.tril(window).triu(-window)"
    ),
    "inverted": (
        "your mask is inverted: True means 'may attend' in this course: keep the band True"
    ),
    "float": (
        "the mask must be a bool tensor (True/False), not floats or integers: build it from "
        "comparisons (<=, >=), which give bool, and combine them with &"
    ),
}


def wrong_band(n, window, causal=False, *, mistake):
    """The band from two aranges, with the named mistake where it bites."""
    offset = torch.arange(n)[:, None] - torch.arange(n)[None, :]  # i - j
    if mistake == "causal_no_upper" and causal:  # only the lower bound, j >= i - window
        return offset <= window
    distance = offset if mistake == "no_abs" else offset.abs()
    width = window + {"too_narrow": -1, "too_wide": 1}.get(mistake, 0)
    if mistake == "plain_causal" and causal:  # the window forgotten on the causal side
        width = n
    if mistake == "causal_halved" and causal:  # 0 <= i - j <= window // 2
        width = window // 2
    mask = distance <= width
    if mistake == "triangle_offsets_swapped":  # tril(-window).triu(window): j <= i - w, j >= i + w
        mask = (offset >= window) & (offset <= -window)
    if (causal or mistake == "always_causal") and mistake != "causal_ignored":
        if mistake == "future":
            mask &= offset <= 0
        else:
            mask &= offset > 0 if mistake == "diagonal_blocked" else offset >= 0
    if mistake == "inverted":
        return ~mask
    return mask.float() if mistake == "float" else mask


@register
class SlidingWindowMask(Task):
    id = "ex10.sliding_window_mask"
    lesson = f"{LESSON}, section 'Longformer: a sliding window'"
    reference = "course_lib.efficient_attention.sliding_window_mask"

    def cases(self, gen):
        return [
            # window // 2 on each side is window - 1 at window 2 (and 3, with (window + 1) // 2)
            Case("n=9, window=4", (9, 4)),
            Case("n=7, window=2", (7, 2)),
            Case("n=7, window=2, causal=True", (7, 2), {"causal": True}),
            Case("n=5, window=0 (each token sees only itself)", (5, 0)),
            Case("n=4, window=0, causal=True", (4, 0), {"causal": True}),
            Case("n=6, window=10 (wider than the sequence: everything allowed)", (6, 10)),
            Case("n=6, window=10, causal=True (the plain causal mask)", (6, 10), {"causal": True}),
            Case("n=1, window=3", (1, 3)),
            Case("n=12, window=3, causal=False given by keyword", (12, 3), {"causal": False}),
            Case("n=9, window=1, causal=True", (9, 1), {"causal": True}),
            # #f10: a mask kept from an earlier call of the same n (and causal), window forgotten
            Case(
                "n=7, window=4: the same n as above with another window (nothing kept from an "
                "earlier call may decide the band)",
                (7, 4),
            ),
            # #h10: a band kept per (n, window), then cut in place (&=) by a causal call
            Case(
                "n=8, window=3, asked before and after the same with causal=True (a call with "
                "causal=True may not change what a later call without it returns)",
                (8, 3),
                data={"around_causal": True},
            ),
            Case("window=-1 must raise a ValueError", (5, -1), raises=ValueError),
            Case("n=0 must raise a ValueError", (0, 2), raises=ValueError),
        ]

    mistake_table, wrong = FAULTS, staticmethod(wrong_band)

    def call(self, obj, case):
        if not case.data.get("around_causal"):
            return super().call(obj, case)
        first = obj(*case.args, **case.kwargs)
        first = first.clone() if isinstance(first, torch.Tensor) else first
        obj(*case.args, causal=True)
        again = obj(*case.args, **case.kwargs)
        if isinstance(first, torch.Tensor) and isinstance(again, torch.Tensor):
            if first.shape == again.shape and not torch.equal(first, again):
                n, window = case.args
                raise GradingError(
                    f"sliding_window_mask({n}, {window}) gave another band after a call "
                    f"sliding_window_mask({n}, {window}, causal=True) than before it: a mask "
                    "kept between calls (in a dict, an lru_cache, a default argument) was cut "
                    "in place there (mask &= ..., masked_fill_), which changed the kept one "
                    "too; with causal=True make a new tensor, mask = mask & (offset >= 0), or "
                    "build the band afresh in each call"
                )
        return again

    def diagnose(self, got, want, case):  # a band of another width: window // 2, a number
        n, window = case.args
        causal = case.kwargs.get("causal", False)
        if (n, window, causal) == (7, 4, False) and torch.equal(got, wrong_band(7, 2, mistake="")):
            return (
                "this is the band of an earlier call with the same n (n=7, window=2): a mask kept "
                "between calls was reused for another window; build the band afresh in each "
                "call, or key what you keep by n, window AND causal"
            )
        if isinstance(got, torch.Tensor) and got.dtype != torch.bool:  # torch.equal ignores it
            return FAULTS["float"]
        for width in range(n if isinstance(got, torch.Tensor) else 0):
            if torch.equal(got, wrong_band(n, width, causal, mistake="")):
                keys = f"{width} key{'s' * (width != 1)}"
                return (
                    f"your band reaches {keys} on each side of the query, not window={window}: "
                    "`window` counts the keys on EACH side, |i - j| <= window (2 * window + 1 "
                    "keys in all), not window // 2"
                )
        return None
