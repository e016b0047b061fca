"""ex10.mlm_mask: BERT's corruption, checked statistically (as ex09.sample_next): one call on
about 200,000 positions with a seeded generator, and the proportions (chosen, <mask>, random,
unchanged, by position) compared with BERT's within a few standard errors; never a padding
position; the labels exactly the original ids at the chosen positions and -100 elsewhere."""

from __future__ import annotations

import math

import torch

from ...core import Case, GradingError, Task, register

LESSON = "lesson 10"

_RANDINT_SPLIT = (
    "your 80/10/10 split from torch.randint is off by one: torch.randint(0, 10, ...) gives the "
    "ten values 0 .. 9 (its `high` is excluded), so r < 8 is 80 % <mask>, r == 8 10 % a random "
    "id and r == 9 10 % unchanged; or draw one u = torch.rand(...) per position: u < 0.8 "
    "<mask>, 0.8 <= u < 0.9 random, else unchanged"
)

FAULTS = {
    "pads_chosen": (
        "padding positions get chosen: choose only among the positions where ids != pad_id "
        "(and test `pad_id is not None`: `if pad_id:` is False for pad_id=0)"
    ),
    "all_masked": (
        "every chosen position became <mask>: of the chosen positions, 80 % become <mask>, "
        "10 % a random id and 10 % stay unchanged (when the draw u that chose a position, "
        "u < mask_prob, also picks <mask> with u < 0.8, every chosen u is below 0.8: draw a "
        "second u for the 80/10/10 split)"
    ),
    "swapped": (
        "the proportions are swapped: 80 % of the chosen positions become <mask> and 10 % "
        "a random id, not the other way round"
    ),
    "none_unchanged": (
        "no chosen position stays unchanged: keep 10 % of them as they are (80 % <mask>, "
        "10 % random, 10 % unchanged)"
    ),
    # r = randint(0, 10): r < 9 <mask>, r == 9 random (90/10/0); randint(0, 9): r < 8, r == 8
    # (8/9, 1/9, 0); randint(1, 10): r < 8, r == 8 (7/9, 1/9, 1/9)
    "randint_nine": _RANDINT_SPLIT,
    "randint_high_kept": _RANDINT_SPLIT,
    "randint_from_one": _RANDINT_SPLIT,
    "labels_everywhere": (
        "labels must be -100 at the positions that were not chosen, so that the loss "
        "skips them; only the chosen positions keep their original id"
    ),
    "labels_all_real": (
        "labels must be -100 at the positions that were not chosen, so that the loss "
        "skips them; only the chosen positions keep their original id (not every "
        "non-padding position)"
    ),
    "labels_pad_id": (  # #h17: torch.where(chosen, ids, pad_id)
        "the positions not chosen are labelled with pad_id, not -100: the loss skips only its "
        "ignore_index, -100 (F.cross_entropy's default), so every such position would be "
        "trained to predict the padding id; labels = torch.where(chosen, ids, -100)"
    ),
    "labels_from_inputs": (
        "your labels are taken from the corrupted inputs, so a <mask> or random position is "
        "labelled with <mask> or the random id: the label is the ORIGINAL id, taken from ids "
        "(torch.where(chosen, ids, -100))"
    ),
    "labels_where_changed": (
        "your labels mark only the positions whose input changed: the chosen positions left "
        "unchanged (10 %) are predicted too, so every chosen position keeps its original id "
        "as its label, whatever happened to its input"
    ),
    "labels_inverted": (
        "your labels are the other way round: -100 at the chosen positions and the id at every "
        "other one, so the loss would train on the tokens the model can see. Keep the original "
        "id where a position was chosen and -100 elsewhere: torch.where(chosen, ids, -100)"
    ),
    "labels_at_mask_only": (
        "your labels mark only the positions that became <mask>: the model must also predict "
        "the chosen positions given a random id or left unchanged (that is why they exist), "
        "so every chosen position keeps its original id as its label"
    ),
    "independent_rest": (
        "the random and unchanged shares come from separate draws on what is left: after 80 % "
        "<mask>, half of the remaining 20 % (not 10 % of it) get a random id; simplest is one "
        "uniform draw u per position: u < 0.8 <mask>, 0.8 <= u < 0.9 random, else unchanged"
    ),
    "independent_overwrite": (
        "the <mask> and random-id draws are independent, so some positions are masked and then "
        "overwritten by a random id (72 % <mask>, not 80 %): let one uniform draw per position "
        "decide between the three outcomes"
    ),
    "overlapping": (
        "the random-id range overlaps the <mask> range (u < 0.8, then u < 0.1): a tenth of the "
        "masked positions get a random id instead, so 70 % <mask> and 20 % unchanged; give "
        "the random ids their own range, 0.8 <= u < 0.9"
    ),
    "random_range_open": (
        "the random ids go to every chosen position with u < 0.9, and they are written after "
        "the <mask>s, so they overwrite them (u < 0.8 is inside u < 0.9): no <mask> is left. "
        "Give the random ids their own range, 0.8 <= u < 0.9"
    ),
    "pad_precedence": (
        "`chosen & ids != pad_id` is `(chosen & ids) != pad_id`: in Python & binds tighter "
        "than !=, so the bits of the ids decide which positions stay chosen; put the "
        "comparison in brackets, chosen & (ids != pad_id)"
    ),
    "fixed_prob": "use the mask_prob argument (0.15 is only its default)",
    "split_fixed_prob": (
        "the 80/10/10 split reuses the draw u that chose the position, with thresholds fixed "
        "for mask_prob=0.15 (u < 0.12 <mask>, u < 0.135 random): a chosen position has "
        "u < mask_prob, so split at 0.8 * mask_prob and 0.9 * mask_prob (or draw a second u "
        "for the split: u < 0.8 <mask>, 0.8 <= u < 0.9 random)"
    ),
    "pads_corrupted": (
        "padding positions are changed in the inputs: leaving them out of the labels is not "
        "enough, a padding position must never be chosen; take the padding out of the chosen "
        "positions (chosen & (ids != pad_id)) BEFORE you put <mask> and random ids in"
    ),
    "mask_id_drawn": (
        "the random ids include vocab_size, which is mask_id here: draw them from "
        "[0, vocab_size) (torch.randint's `high` is already excluded)"
    ),
    # r = randint(0, 100): r <= 80 <mask>, r <= 90 random (81/10/9), after mask_id_drawn:
    # with vocab_size=10 its random mask_ids make it about 81/9/10 too, and it is the exact one
    "randint_percent_inclusive": (
        "your 80/10/10 split from torch.randint(0, 100, ...) counts one value too many: r <= 80 "
        "holds the 81 values 0 .. 80 (81 % <mask>), and the unchanged share shrinks to 9 %. Use "
        "strict bounds, r < 80 <mask>, 80 <= r < 90 a random id, else unchanged (or one u = "
        "torch.rand(...): u < 0.8, 0.8 <= u < 0.9)"
    ),
    "no_random": (
        "no chosen position gets a random id (80 % <mask>, 20 % unchanged): the bounds are "
        "cumulative, u < 0.8 <mask>, then 0.8 <= u < 0.9 a random id (10 %), else unchanged; "
        "0.8 <= u < 0.1 (the share 0.1 taken as the bound) holds no u at all"
    ),
    "global_rng": "pass `generator=generator` to every random draw",
    "two_dims": (
        "ids may have any shape (...), not only (batch, seq): draw with the shape of ids, "
        "torch.rand(ids.shape, generator=generator), instead of unpacking batch, seq = ids.shape"
    ),
    "random_never_original": (
        "your random ids never equal the original token: draw them uniformly from "
        "[0, vocab_size), which gives the token back 1 time in vocab_size (BERT's unchanged "
        "10 % comes on top of that)"
    ),
    "labels_int64": (
        "your labels are int64, torch.full's default dtype for -100, and these ids are int32: "
        "putting the ids into them raises; make the labels in the dtype of ids, "
        "torch.full_like(ids, -100) (or dtype=ids.dtype)"
    ),
    "random_ids_int64": (
        "torch.randint gives int64 ids, and these ids are int32: draw the random ids with "
        "dtype=ids.dtype (or .to(ids.dtype)) before putting them into the inputs"
    ),
}


def wrong_mlm(ids, mask_id, vocab_size, mask_prob=0.15, pad_id=None, generator=None, *, mistake):
    """BERT's corruption with one uniform draw per position, with the named mistake."""
    if not 0 < mask_prob <= 1:
        raise ValueError("mask_prob")
    if mistake == "global_rng":
        generator = None
    if mistake == "two_dims":  # `batch, length = ids.shape`: only 2-D ids unpack
        batch, length = ids.shape
        ids = ids.reshape(batch, length)
    p = 0.15 if mistake == "fixed_prob" else mask_prob
    draw = torch.rand(ids.shape, generator=generator)
    chosen = draw < p
    drawn = chosen  # before the padding is taken out
    if pad_id is not None and mistake != "pads_chosen":  # & before != without the brackets
        chosen = (
            (chosen & ids) != pad_id if mistake == "pad_precedence" else chosen & (ids != pad_id)
        )
    split = {
        "all_masked": (1.0, 1.0),
        "swapped": (0.1, 0.9),
        "none_unchanged": (0.8, 1.0),
        "split_fixed_prob": (0.12, 0.135),
        "randint_nine": (0.9, 1.0),
        "randint_high_kept": (8 / 9, 1.0),
        "randint_from_one": (7 / 9, 8 / 9),  # 0.8 and 0.9 of the default 0.15, on the same draw
        "randint_percent_inclusive": (0.81, 0.91),
        "no_random": (0.8, 0.8),  # 0.8 <= u < 0.1: empty
    }
    low, high = split.get(mistake, (0.8, 0.9))
    action = draw if mistake == "split_fixed_prob" else torch.rand(ids.shape, generator=generator)
    extra = 1 if mistake == "mask_id_drawn" else 0
    random_ids = torch.randint(
        0, vocab_size + extra, ids.shape, generator=generator, dtype=ids.dtype
    )
    if mistake == "random_never_original":  # a shift of 1 .. vocab_size - 1: never the token
        random_ids = (ids + random_ids.clamp(min=1)) % vocab_size
    corrupted = drawn if mistake == "pads_corrupted" else chosen  # padding out of labels only
    masked = corrupted & (action < low)
    swap = corrupted & (action >= low) & (action < high)
    if mistake == "independent_rest":
        swap = chosen & ~masked & (torch.rand(ids.shape, generator=generator) < 0.1)
    elif mistake == "independent_overwrite":
        swap = chosen & (torch.rand(ids.shape, generator=generator) < 0.1)
    elif mistake in ("overlapping", "random_range_open"):  # the random range overlaps u < 0.8
        swap = chosen & (action < (0.1 if mistake == "overlapping" else high))
    inputs = torch.where(swap, random_ids, ids.masked_fill(masked, mask_id))
    if mistake == "random_ids_int64":  # index put of int64 ids into int32 inputs: raises
        inputs = ids.masked_fill(masked, mask_id)
        inputs[swap] = random_ids.long()[swap]
    labelled = {
        "labels_at_mask_only": masked,
        "labels_inverted": ~chosen,
        "labels_where_changed": chosen & (inputs != ids),
        "labels_all_real": ids != pad_id if pad_id is not None else torch.ones_like(chosen),
    }.get(mistake, chosen)
    source = inputs if mistake == "labels_from_inputs" else ids
    ignored = pad_id if mistake == "labels_pad_id" and pad_id is not None else -100
    labels = (
        ids.clone() if mistake == "labels_everywhere" else source.masked_fill(~labelled, ignored)
    )
    if mistake == "labels_int64":  # torch.full(ids.shape, -100), then the ids put in: int32 raises
        labels = torch.full(ids.shape, -100)
        labels[labelled] = ids[labelled]
    return inputs, labels


_MLM_SHAPE = (400, 500)  # 200,000 positions per case
# standard errors a share may stray: a right answer fails one of the 35 shares of the 7 cases
# with probability below 1e-7 (#rand10; at 5 it was 1.3e-6, one learner's run in 750,000)
SHARE_ERRORS = 5.5
_FEW_POSITIONS = 10_000  # the generator's checks run on the first rows, about this many


def _mlm_ids(gen, vocab_size, pad_id=None, dtype=torch.int64):
    ids = torch.randint(0, vocab_size, _MLM_SHAPE, generator=gen, dtype=dtype)
    if pad_id is not None:
        ids[ids == pad_id] = (pad_id + 1) % vocab_size
        lengths = torch.randint(100, _MLM_SHAPE[1] + 1, (_MLM_SHAPE[0],), generator=gen)
        ids[torch.arange(_MLM_SHAPE[1]) >= lengths[:, None]] = pad_id
    return ids


def _mlm_stats(ids, inputs, labels, mask_id, vocab_size, pad_id):
    real = ids != pad_id if pad_id is not None else torch.ones_like(ids, dtype=torch.bool)
    chosen = labels != -100
    picked, original = inputs[chosen], ids[chosen]
    replaced = picked[(picked != mask_id) & (picked != original)]
    half = ids.shape[-1] // 2
    first_real = real.clone()
    first_real[..., half:] = False
    counts = torch.bincount(replaced.clamp(0, vocab_size), minlength=vocab_size + 1)
    originals = torch.bincount(original.clamp(0, vocab_size), minlength=vocab_size + 1)
    return {
        "exact": {
            "padding positions whose label is not -100": int((chosen & ~real).sum()),
            "padding changed": int(((inputs != ids) & ~real).sum()),
            "labels of chosen positions that are not the original id": int(
                (labels[chosen] != original).sum()
            ),
            "positions changed although not chosen": int((inputs != ids)[~chosen].sum()),
            "random ids outside [0, vocab_size)": int(
                ((replaced < 0) | (replaced >= vocab_size)).sum()
            ),
        },
        "counts": {
            "real": int(real.sum()),
            "chosen": int(chosen.sum()),
            "first half real": int(first_real.sum()),
            "first half chosen": int((chosen & first_real).sum()),
            "masked": int((picked == mask_id).sum()),
            "unchanged": int((picked == original).sum()),
            "random": int(replaced.numel()),
        },
        "random histogram": counts[:vocab_size].double(),
        "chosen originals": originals[:vocab_size].double(),  # the original ids, by id
    }


_SHARES = {  # name: (the count, of this count, what the learner reads)
    "chosen": ("chosen", "real", "the share of non-padding positions chosen"),
    "first half": (
        "first half chosen",
        "first half real",
        "the share chosen in the first half of each row",
    ),
    "masked": ("masked", "chosen", "the share of chosen positions that became <mask>"),
    "unchanged": ("unchanged", "chosen", "the share of chosen positions left unchanged"),
    "random": ("random", "chosen", "the share of chosen positions given a random id"),
}


def share_tolerance(p: float, total: int) -> float:
    """How far a share of `total` positions may stray from its probability p."""
    return SHARE_ERRORS * math.sqrt(max(p * (1 - p), 1e-12) / total) + 1e-3


def _mlm_shares(counts):
    """name -> (share, number of positions it is a share of)."""
    return {
        name: (counts[hits] / max(1, counts[total]), counts[total])
        for name, (hits, total, _) in _SHARES.items()
    }


def _mlm_compare(got, want, mask_prob, vocab_size, mask_id):
    for name, value in want["exact"].items():
        # against a wrong implementation, only whether it makes this kind of error matters
        same = (
            got["exact"][name] == value
            if "expected" in want
            else (got["exact"][name] > 0) == (value > 0)
        )
        if not same:
            return f"{name}: {got['exact'][name]} (expected {value})"
    inside = mask_id < vocab_size  # a random id may then be mask_id: it counts as masked
    if "expected" in want:  # against BERT's probabilities
        hit = 0.1 / vocab_size  # a random id that is the original (or mask_id)
        targets = {
            "chosen": mask_prob,
            "first half": mask_prob,
            "masked": 0.8 + hit * inside,
            "unchanged": 0.1 + hit,
            "random": 0.1 - hit * (1 + inside),
        }
    else:  # against a wrong implementation's own proportions
        targets = {name: share for name, (share, _) in _mlm_shares(want["counts"]).items()}
    for name, (share, total) in _mlm_shares(got["counts"]).items():
        if total == 0:
            return f"{_SHARES[name][2]}: there is no position to count"
        p = targets[name]
        if abs(share - p) > share_tolerance(p, total):
            return f"{_SHARES[name][2]} is {share:.3f}, expected {p:.3f}"
    histogram = got["random histogram"]
    others = torch.arange(vocab_size) != mask_id  # a random mask_id is counted as masked
    if histogram.sum() > 0:
        # A random id equal to the original counts as unchanged, so id v stays in the histogram
        # in proportion to 1 - (its share of the chosen originals): the ids are not equally
        # frequent (pad_id + 1 stands for pad_id), and a flat expectation failed about 1 right
        # answer in 300 that draws in another order (#rand10, mostly the vocab_size=4 case)
        originals = got["chosen originals"]
        weight = others * (1 - originals / max(1.0, float(originals.sum())))
        expected = histogram.sum() * weight / weight.sum().clamp_min(1e-12)
        never = ((histogram == 0) & others & (expected > 20)).nonzero().flatten().tolist()
        if never:  # an id expected 20+ times that never came
            return (
                f"the random ids never include {', '.join(map(str, never[:3]))}: draw them "
                "uniformly from [0, vocab_size), torch.randint(0, vocab_size, ...) (its `high` "
                "is already excluded: no - 1, and low is 0)"
            )
        excess = ((histogram - expected).abs() - 6 * expected.sqrt() - 2).masked_fill(~others, -1)
        if excess.max() > 0:
            worst = int(excess.argmax())
            return (
                "the random ids are not uniform over [0, vocab_size): id "
                f"{worst} is drawn {abs(histogram[worst] - expected[worst]):.0f} times more or "
                f"less than the {expected[worst]:.0f} expected"
            )
    return None


@register
class MlmMask(Task):
    id = "ex10.mlm_mask"
    lesson = f"{LESSON}, section 'BERT: fill in the blanks'"
    reference = "course_lib.family.mlm_mask"

    def cases(self, gen):
        def case(description, vocab_size, pad_id=None, dtype=torch.int64, rows=None, **kwargs):
            ids = _mlm_ids(gen, vocab_size, pad_id=pad_id, dtype=dtype)[:rows]
            ids = ids.reshape(kwargs.pop("shape", ids.shape))
            mask_id = kwargs.pop("mask_id", vocab_size)
            ids[ids == mask_id] = (mask_id + 1) % vocab_size  # no input holds <mask> already
            kwargs |= {} if pad_id is None else {"pad_id": pad_id}
            raises = kwargs.pop("raises", None)
            return Case(description, (ids, mask_id, vocab_size), kwargs, raises=raises)

        # fmt: off
        return [  # vocab_size (= mask_id), pad_id, ...
            case("ids (400, 500) with vocab_size=20, mask_id=20, pad_id=0 and padded rows",
                 20, pad_id=0),
            case("no padding (pad_id=None), vocab_size=50, mask_id=50", 50),
            case("mask_prob=0.3, pad_id=3 (padding need not be 0), vocab_size=10, mask_id=10",
                 10, pad_id=3, mask_prob=0.3),
            case("mask_prob=1.0: every non-padding position is chosen, int32 ids",
                 12, pad_id=0, dtype=torch.int32, mask_prob=1.0),
            case("mask_prob=0.05, vocab_size=4 (random ids often equal the original)",
                 4, pad_id=1, mask_prob=0.05),
            case("mask_id=3 inside the vocabulary (vocab_size=30), as BERT's [MASK] is one of "
                 "its ids: random ids come from [0, vocab_size), not [0, mask_id)", 30, mask_id=3),
            case("ids (8, 50, 500): ids of any shape, here three dimensions, pad_id=0", 20,
                 pad_id=0, shape=(8, 50, 500)),
            case("mask_prob=0 must raise a ValueError", 5, rows=2, mask_prob=0.0,
                 raises=ValueError),
            case("mask_prob=1.5 must raise a ValueError", 5, rows=2, mask_prob=1.5,
                 raises=ValueError),
        ]
        # fmt: on

    def call(self, obj, case):
        ids, mask_id, vocab_size = case.args
        if case.raises is not None:
            return obj(ids, mask_id, vocab_size, **case.kwargs)
        pad_id = case.kwargs.get("pad_id")

        def run(seed, given=None):
            return obj(
                ids.clone() if given is None else given,
                mask_id,
                vocab_size,
                **case.kwargs,
                generator=torch.Generator().manual_seed(seed),
            )

        first = run(1234, given=ids)  # the learner's own copy: the grader sees it changed
        if not (
            isinstance(first, (tuple, list))
            and len(first) == 2
            and all(isinstance(t, torch.Tensor) for t in first)
        ):
            raise GradingError("return a tuple (inputs, labels) of two tensors")
        inputs, labels = first
        for name, t in (("inputs", inputs), ("labels", labels)):
            if t.shape != ids.shape:
                raise GradingError(
                    f"{name} has shape {tuple(t.shape)}, expected the shape of "
                    f"ids {tuple(ids.shape)}"
                )
        for name, t in (("inputs", inputs), ("labels", labels)):
            if t.dtype != ids.dtype:
                raise GradingError(
                    f"{name} has dtype {str(t.dtype)[6:]}; keep the dtype of ids "
                    f"({str(ids.dtype)[6:]}): F.cross_entropy takes integer class labels"
                )
        # the two checks of the generator run on about 10,000 positions, not 200,000: plenty to
        # see a draw outside the generator, and a loop over the positions answers in time
        few = ids[: max(1, _FEW_POSITIONS // max(1, ids[0].numel()))]
        again = run(1234, given=few.clone())
        if not all(
            torch.equal(a, b) for a, b in zip(again, run(1234, given=few.clone()), strict=True)
        ):
            raise GradingError(
                "two calls with generators in the same state gave different "
                "results: pass `generator=generator` to every random draw "
                "(torch.rand, torch.randint)"
            )
        if all(torch.equal(a, b) for a, b in zip(again, run(99, given=few.clone()), strict=True)):
            raise GradingError(
                "two calls with different generator seeds gave the same "
                "result: draw the random numbers from `generator`"
            )
        return _mlm_stats(ids, inputs.long(), labels.long(), mask_id, vocab_size, pad_id)

    def expected(self, case):
        if case.raises is not None:
            return None
        ids, mask_id, vocab_size = case.args
        pad_id = case.kwargs.get("pad_id")
        # The exact counts are all zero; the proportions are BERT's, checked in `compare`.
        stats = _mlm_stats(ids, ids, torch.full_like(ids, -100), mask_id, vocab_size, pad_id)
        stats["expected"] = True
        return stats

    def compare(self, got, want, case):
        if want is None:
            return None
        if not isinstance(got, dict) or "counts" not in got:
            return "your function should return (inputs, labels)"
        mask_prob = case.kwargs.get("mask_prob", 0.15)
        return _mlm_compare(got, want, mask_prob, case.args[2], case.args[1])

    mistake_table, wrong = FAULTS, staticmethod(wrong_mlm)
