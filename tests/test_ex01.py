"""ex01 grader: the reference passes, every named mistake fails with its hint, alternative
correct implementations pass, forbidden calls and stubs are recognised."""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from course_lib.grading import NOTEBOOK_SEED, check, check_result
from course_lib.grading.core import get_task, judge, resolve, run_cases

TASKS = ["ex01.one_hot", "ex01.embed", "ex01.cosine_similarity_matrix", "ex01.nearest_neighbours"]


# ---- correct implementations, written differently from the reference ----------------------


def one_hot_scatter(ids, vocab_size):
    if ids.is_floating_point() or ids.dtype == torch.bool:
        raise TypeError("ids must be integers")
    bad = ids[(ids < 0) | (ids >= vocab_size)]
    if bad.numel():
        raise ValueError(f"id {bad[0].item()} is out of range")
    out = torch.zeros(*ids.shape, vocab_size)
    return out.scatter_(-1, ids.long().unsqueeze(-1), 1.0)


def one_hot_eye(ids, vocab_size):
    if ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise TypeError("ids must be integers")
    if ids.numel() and (ids.min() < 0 or ids.max() >= vocab_size):
        raise ValueError(f"ids out of range: {ids.min().item()} .. {ids.max().item()}")
    return torch.eye(vocab_size)[ids.long()]


def embed_einsum(ids, table):
    if ids.min() < 0 or ids.max() >= table.shape[0]:
        raise ValueError("ids out of range")
    hot = (ids.unsqueeze(-1) == torch.arange(table.shape[0])).to(table.dtype)
    return torch.einsum("...v,vd->...d", hot, table)


def embed_flatten(ids, table):
    if ids.min() < 0 or ids.max() >= table.shape[0]:
        raise ValueError("ids out of range")
    flat = ids.reshape(-1)
    hot = torch.zeros(flat.numel(), table.shape[0], dtype=table.dtype)
    hot[torch.arange(flat.numel()), flat] = 1
    return (hot @ table).reshape(*ids.shape, table.shape[1])


def cosine_where(E):
    norms = E.norm(dim=1)
    unit = torch.where(norms[:, None] > 0, E / norms[:, None], torch.zeros_like(E))
    return unit @ unit.T


def cosine_outer(E):
    norms = (E * E).sum(1).sqrt()
    denominator = torch.outer(norms, norms)
    sims = (E @ E.T) / denominator
    return torch.nan_to_num(sims, nan=0.0)


def neighbours_topk_plus_one(E, index, k):
    unit = E / E.norm(dim=1, keepdim=True).clamp_min(1e-12)  # a zero row: similarity 0
    sims = unit @ unit[index]
    order = sims.topk(k + 1).indices
    return order[order != index][:k]


def neighbours_argsort(E, index, k):
    sims = torch.einsum("nd,d->n", E, E[index]) / (E.norm(dim=1) * E[index].norm())
    order = torch.nan_to_num(sims, nan=0.0).argsort(descending=True)  # a zero row: 0, not NaN
    return order[order != index][:k]


ALTERNATIVES = [
    ("ex01.one_hot", one_hot_scatter),
    ("ex01.one_hot", one_hot_eye),
    ("ex01.embed", embed_einsum),
    ("ex01.embed", embed_flatten),
    ("ex01.cosine_similarity_matrix", cosine_where),
    ("ex01.cosine_similarity_matrix", cosine_outer),
    ("ex01.nearest_neighbours", neighbours_topk_plus_one),
    ("ex01.nearest_neighbours", neighbours_argsort),
]

# ---- mistakes written here (independently of the task's own list) --------------------------


def one_hot_long(ids, vocab_size):
    return (ids.unsqueeze(-1) == torch.arange(vocab_size)).long()


def one_hot_unchecked(ids, vocab_size):
    return (ids.unsqueeze(-1) == torch.arange(vocab_size)).float()


def one_hot_negative_wraps(ids, vocab_size):
    # out-of-range ids are caught, but negative ones wrap around as Python indices
    if ids.max() >= vocab_size:
        raise ValueError("too large")
    return torch.eye(vocab_size)[ids]


def embed_transposed(ids, table):
    hot = (ids.unsqueeze(-1) == torch.arange(table.shape[1])).to(table.dtype)
    return hot @ table.T


def cosine_unnormalised(E):
    return E @ E.T


def cosine_nan(E):
    unit = E / E.norm(dim=1, keepdim=True)
    return unit @ unit.T


def neighbours_with_itself(E, index, k):
    unit = E / E.norm(dim=1, keepdim=True)
    return (unit @ unit[index]).argsort(descending=True)[:k]


def neighbours_ascending(E, index, k):
    unit = E / E.norm(dim=1, keepdim=True)
    sims = unit @ unit[index]
    sims[index] = -2.0
    return sims.topk(k).indices.flip(0)


def one_hot_float_ids_accepted(ids, vocab_size):
    if ids.min() < 0 or ids.max() >= vocab_size:
        raise ValueError("ids out of range")
    return (ids.unsqueeze(-1) == torch.arange(vocab_size)).float()


MISTAKES = [
    ("ex01.one_hot", one_hot_long, "return floats"),
    ("ex01.one_hot", one_hot_float_ids_accepted, "ids must be integers"),
    ("ex01.one_hot", one_hot_unchecked, "must raise ValueError"),
    ("ex01.one_hot", one_hot_negative_wraps, "negative id must raise ValueError"),
    ("ex01.embed", embed_transposed, "you treated the table as (d, vocab_size)"),
    ("ex01.cosine_similarity_matrix", cosine_unnormalised, "raw dot products"),
    ("ex01.cosine_similarity_matrix", cosine_nan, "0/0 = NaN"),
    ("ex01.nearest_neighbours", neighbours_with_itself, "exclude `index`"),
    ("ex01.nearest_neighbours", neighbours_ascending, "ascending order"),
]

FORBIDDEN = [
    ("ex01.one_hot", lambda ids, vocab_size: F.one_hot(ids, vocab_size).float()),
    ("ex01.embed", lambda ids, table: F.embedding(ids, table)),
    ("ex01.embed", lambda ids, table: torch.nn.Embedding.from_pretrained(table)(ids)),
    (
        "ex01.cosine_similarity_matrix",
        lambda E: F.cosine_similarity(E.unsqueeze(1), E.unsqueeze(0), dim=-1),
    ),
    (
        "ex01.nearest_neighbours",
        lambda E, index, k: resolve("course_lib.embeddings.nearest_neighbours")(E, index, k),
    ),
]


@pytest.mark.parametrize("task_id", TASKS)
def test_reference_passes_every_case(task_id):
    task = get_task(task_id)
    from course_lib.grading.core import judge, run_cases

    cases = task.cases(torch.Generator().manual_seed(0))
    # judge the reference without the watcher's "reference called" rule
    run = run_cases(task, resolve(task.reference), cases)
    run["seen"] = []
    result = judge(task, cases, run)
    assert result.status == "passed", result.feedback
    assert len(cases) >= 4


@pytest.mark.parametrize("task_id", TASKS)
def test_every_listed_mistake_fails_with_its_hint(task_id):
    task = get_task(task_id)
    for wrong, hint in task.mistakes():
        result = check_result(task_id, wrong)
        assert result.status == "failed", (hint, result.feedback)
        assert hint in result.feedback, result.feedback


@pytest.mark.parametrize(("task_id", "impl"), ALTERNATIVES, ids=lambda x: getattr(x, "__name__", x))
def test_alternative_correct_implementations_pass(task_id, impl):
    result = check_result(task_id, impl)
    assert result.status == "passed", result.feedback


@pytest.mark.parametrize(
    ("task_id", "impl", "hint"), MISTAKES, ids=lambda x: getattr(x, "__name__", None)
)
def test_named_mistakes_fail_with_specific_feedback(task_id, impl, hint):
    result = check_result(task_id, impl)
    assert result.status == "failed", result.feedback
    assert hint in result.feedback, result.feedback


@pytest.mark.parametrize(("task_id", "impl"), FORBIDDEN)
def test_forbidden_calls_are_rejected(task_id, impl):
    result = check_result(task_id, impl)
    assert result.status == "forbidden", result.feedback
    assert result.score == 0.0


@pytest.mark.parametrize("task_id", TASKS)
def test_stub_is_not_implemented(task_id):
    def stub(*args, **kwargs):
        raise NotImplementedError()

    result = check_result(task_id, stub)
    assert result.status == "not implemented", result.feedback


@pytest.mark.parametrize("task_id", TASKS)
def test_cases_cover_float64_or_int_paths(task_id):
    cases = get_task(task_id).cases(torch.Generator().manual_seed(1))
    descriptions = " ".join(c.description for c in cases)
    if task_id == "ex01.one_hot":
        assert any(c.raises is ValueError for c in cases)
        assert "int32" in descriptions
    else:
        assert "float64" in descriptions


# ---- byte-level BPE: pair_counts, merge_pair, bpe_encode --------------------------------------

BPE_TASKS = ["ex01.pair_counts", "ex01.merge_pair", "ex01.bpe_encode"]


def pair_counts_counter(ids):
    return dict(Counter(zip(ids, ids[1:], strict=False)))


def pair_counts_defaultdict(ids):
    counts = defaultdict(int)
    for a, b in zip(ids, ids[1:], strict=False):
        counts[a, b] += 1
    return counts


def merge_pair_with_a_skip_flag(ids, pair, new_id):
    out, skip = [], False
    for i, token in enumerate(ids):
        if skip:
            skip = False
        elif i + 1 < len(ids) and token == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            skip = True
        else:
            out.append(token)
    return out


def bpe_encode_lowest_rank_first(ids, merges):
    # minbpe's way: repeatedly merge the present pair that was learned earliest
    rank = {pair: r for r, pair in enumerate(merges)}
    ids = list(ids)
    while len(ids) >= 2:
        pair = min(zip(ids, ids[1:], strict=False), key=lambda p: rank.get(p, len(rank)))
        if pair not in rank:
            break
        ids = merge_pair_with_a_skip_flag(ids, pair, merges[pair])
    return ids


def _merge_pair_while(slip=""):
    """The lesson's while loop over ids: right, or with the one slip named."""

    def merge_pair(ids, pair, new_id):
        out, i = [], 0
        end = len(ids) - {"stops before the last pair": 2, "appends the last id": 1}.get(slip, 0)
        while i < end:
            if slip == "compares a slice":  # a list never equals the tuple
                found = ids[i : i + 2] == pair
            elif slip == "reads past the end":  # a bare IndexError when the last id is pair[0]
                found = ids[i] == pair[0] and ids[i + 1] == pair[1]
            else:
                found = i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair
            out.append(new_id if found else ids[i])
            i += 2 if found and slip != "one step after a merge" else 1
        if slip == "appends the last id" and ids:
            out.append(ids[-1])
        return out + (list(ids[i:]) if slip == "stops before the last pair" else [])

    return merge_pair


BPE_ALTERNATIVES = [
    ("ex01.pair_counts", pair_counts_counter),
    ("ex01.pair_counts", pair_counts_defaultdict),
    ("ex01.merge_pair", merge_pair_with_a_skip_flag),
    ("ex01.merge_pair", _merge_pair_while("")),
    ("ex01.bpe_encode", bpe_encode_lowest_rank_first),
]


@pytest.mark.parametrize(
    ("task_id", "impl"), BPE_ALTERNATIVES, ids=lambda x: getattr(x, "__name__", x)
)
def test_bpe_alternatives_pass(task_id, impl):
    result = check_result(task_id, impl)
    assert result.status == "passed", result.feedback


# written here, independently of the tasks' own lists


def pair_counts_set(ids):
    return {pair: 1 for pair in zip(ids, ids[1:], strict=False)}


def pair_counts_skipping(ids):
    counts, i = {}, 0
    while i + 1 < len(ids):
        counts[ids[i], ids[i + 1]] = counts.get((ids[i], ids[i + 1]), 0) + 1
        i += 2 if ids[i] == ids[i + 1] else 1
    return counts


def merge_pair_overlapping(ids, pair, new_id):
    out = []
    for i, token in enumerate(ids):
        if i + 1 < len(ids) and (token, ids[i + 1]) == tuple(pair):
            out.append(new_id)
        elif not (i > 0 and (ids[i - 1], token) == tuple(pair)):
            out.append(token)
    return out


def merge_pair_first_only(ids, pair, new_id):
    for i in range(len(ids) - 1):
        if (ids[i], ids[i + 1]) == tuple(pair):
            return list(ids[:i]) + [new_id] + list(ids[i + 2 :])
    return list(ids)


def bpe_encode_by_frequency(ids, merges):
    ids = list(ids)
    while True:
        counts = Counter(p for p in zip(ids, ids[1:], strict=False) if p in merges)
        if not counts:
            return ids
        pair = counts.most_common(1)[0][0]
        ids = merge_pair_with_a_skip_flag(ids, pair, merges[pair])


def bpe_encode_last_first(ids, merges):
    for pair in list(merges)[::-1]:
        ids = merge_pair_with_a_skip_flag(ids, pair, merges[pair])
    return ids


BPE_MISTAKES = [
    ("ex01.pair_counts", pair_counts_set, "count every position"),
    ("ex01.pair_counts", pair_counts_skipping, "overlapping pairs count"),
    ("ex01.merge_pair", merge_pair_overlapping, "an id can be merged only once"),
    ("ex01.merge_pair", merge_pair_first_only, "not only the first"),
    ("ex01.bpe_encode", bpe_encode_by_frequency, "in the order they were learned"),
    ("ex01.bpe_encode", bpe_encode_last_first, "last-learned first"),
]


@pytest.mark.parametrize(
    ("task_id", "impl", "hint"), BPE_MISTAKES, ids=lambda x: getattr(x, "__name__", None)
)
def test_bpe_named_mistakes_fail_with_specific_feedback(task_id, impl, hint):
    result = check_result(task_id, impl)
    assert result.status == "failed", result.feedback
    assert hint in result.feedback, result.feedback


def test_the_bpe_feedback_says_what_differs():
    result = check_result("ex01.pair_counts", pair_counts_skipping)
    assert "the pair (4, 4) has count 1, expected 2" in result.feedback
    result = check_result("ex01.pair_counts", lambda ids: sorted(pair_counts_counter(ids)))
    assert "should be a dict {(a, b): count}, got list" in result.feedback
    wraps = check_result("ex01.pair_counts", lambda ids: pair_counts_counter(ids + ids[:1]))
    assert "is not two neighbours in ids" in wraps.feedback
    result = check_result("ex01.merge_pair", lambda ids, pair, new_id: list(ids))
    assert "nothing was merged" in result.feedback


def bpe_encode_with_course_merge_pair(ids, merges):
    merge = resolve("course_lib.bpe.merge_pair")
    for pair, new_id in merges.items():
        ids = merge(ids, pair, new_id)
    return ids


@pytest.mark.parametrize(
    ("task_id", "impl", "needle"),
    [
        (
            "ex01.pair_counts",
            lambda ids: resolve("course_lib.bpe.pair_counts")(ids),
            "course_lib.bpe.pair_counts",
        ),
        # bpe_encode calls the reference merge_pair inside; the feedback names what the
        # learner's code called, bpe_encode (a course piece called by another is not counted)
        (
            "ex01.merge_pair",
            lambda ids, pair, new_id: resolve("course_lib.bpe.bpe_encode")(ids, {pair: new_id}),
            "your code calls course_lib.bpe.bpe_encode",
        ),
        ("ex01.bpe_encode", bpe_encode_with_course_merge_pair, "course_lib.bpe.merge_pair"),
        (
            "ex01.bpe_encode",
            lambda ids, merges: resolve("course_lib.bpe.BPETokenizer")(list(merges)).encode_bytes(
                bytes(ids)
            ),
            "course_lib.bpe.BPETokenizer",
        ),
    ],
)
def test_bpe_shortcuts_through_course_lib_are_rejected(task_id, impl, needle):
    result = check_result(task_id, impl)
    assert result.status == "forbidden", result.feedback
    assert needle in result.feedback and result.score == 0.0


@pytest.mark.parametrize("task_id", BPE_TASKS)
def test_bpe_reference_passes_and_stub_is_not_implemented(task_id):
    task = get_task(task_id)
    for seed in range(4):  # the batch grader draws other seeds
        cases = task.cases(torch.Generator().manual_seed(seed))
        run = run_cases(task, resolve(task.reference), cases)
        run["seen"] = []
        assert judge(task, cases, run).status == "passed"

    def stub(*args, **kwargs):
        raise NotImplementedError()

    assert check_result(task_id, stub).status == "not implemented"


def test_bpe_cases_cover_the_edges():
    def inputs(task_id):
        return [c.args for c in get_task(task_id).cases(torch.Generator().manual_seed(0))]

    for task_id in BPE_TASKS:
        ids = [args[0] for args in inputs(task_id)]
        assert [] in ids and any(len(i) == 1 for i in ids)  # empty list, a single id
        for run in (3, 4, 5):  # runs of equal ids
            assert any(any(i[k : k + run] == [i[k]] * run for k in range(len(i))) for i in ids)
    merge_cases = inputs("ex01.merge_pair")
    assert any(list(pair) == i[:2] and list(pair) == i[-2:] for i, pair, _ in merge_cases)
    assert any(
        tuple(pair) not in zip(i, i[1:], strict=False) for i, pair, _ in merge_cases if len(i) > 1
    )
    encode_cases = inputs("ex01.bpe_encode")
    # a merge whose pair holds the id of an earlier merge (a merge of merged tokens)
    assert any(
        set(pair) & set(list(merges.values())[:r])
        for _, merges in encode_cases
        for r, pair in enumerate(merges)
    )


def test_merge_pair_that_changes_its_input_is_caught():
    def in_place(ids, pair, new_id):  # right output, but the caller's list is gone
        i = 0
        while i < len(ids) - 1:
            if (ids[i], ids[i + 1]) == tuple(pair):
                ids[i : i + 2] = [new_id]
            i += 1
        return ids

    result = check_result("ex01.merge_pair", in_place)
    assert result.status == "failed" and "changed the list it was given" in result.feedback


# ---- found by a fresh reader ----------------------------------------------------------------


def test_an_embedding_that_slices_the_table_is_a_one_hot_product_all_the_same():
    # table[:, :] or table[0] is no lookup by id; it was reported as "indexing the table"
    def embed(ids, table):
        if (ids < 0).any() or (ids >= table.shape[0]).any():
            raise ValueError(f"an id is outside [0, {table.shape[0]})")
        one_hot = (ids.unsqueeze(-1) == torch.arange(table.shape[0])).to(table[0].dtype)
        return one_hot @ table[:, :]

    assert check_result("ex01.embed", embed).status == "passed"


def test_pair_counts_that_empties_its_input_fails():
    def popping(ids):
        counts = {}
        while len(ids) > 1:
            first = ids.pop(0)
            counts[(first, ids[0])] = counts.get((first, ids[0]), 0) + 1
        return counts

    result = check_result("ex01.pair_counts", popping)
    assert result.status == "failed" and "changed its input `ids`" in result.feedback


# ---- single mistakes that got "more than one thing may be wrong" (or passed) -------------------
# Written here, differently from the listed mistakes that now explain them.


def one_hot_checks_the_largest_id_first(ids, vocab_size):
    if ids.dtype in (torch.float16, torch.float32, torch.float64, torch.bool):
        raise TypeError("ids must be integer token ids")
    largest, smallest = int(ids.max()), int(ids.min())  # both raise on empty ids
    if largest >= vocab_size or smallest < 0:
        raise ValueError(f"id {largest if largest >= vocab_size else smallest} is out of range")
    return torch.eye(vocab_size)[ids]


def one_hot_refusing_empty_ids(ids, vocab_size):
    if ids.numel() == 0:
        raise ValueError("no ids given")
    return one_hot_scatter(ids, vocab_size)


def cosine_over_the_whole_matrix(E):
    unit = E / torch.linalg.norm(E)
    return unit @ unit.T


def cosine_with_flat_norms(E):
    norms = torch.sqrt((E**2).sum(dim=1)).clamp(min=1e-12)
    unit = E / norms
    return unit @ unit.T


def cosine_distance_matrix(E):
    norms = E.norm(dim=1)
    return 1 - (E @ E.T) / torch.outer(norms, norms).clamp_min(1e-12)


def cosine_ones_on_the_diagonal(E):
    sims = cosine_where(E)
    sims.fill_diagonal_(1.0)
    return sims


def neighbours_sorted_similarities(E, index, k):
    sims = cosine_where(E)[index]
    sims[index] = -float("inf")
    return sims.sort(descending=True).values[:k]


def neighbours_own_similarity_zeroed(E, index, k):
    sims = cosine_where(E)[index]
    sims = torch.where(torch.arange(len(sims)) == index, torch.zeros_like(sims), sims)
    return sims.topk(k).indices


def neighbours_dropped_after_ranking(E, index, k):
    order = cosine_where(E)[index].argsort(descending=True)[:k]
    return order[order != index]


def neighbours_dividing_by_zero(E, index, k):
    sims = (E @ E[index]) / (E.norm(dim=1) * E[index].norm())  # 0/0 for a zero row
    sims[index] = -float("inf")
    return sims.argsort(descending=True)[:k]


def neighbours_by_euclidean_distance(E, index, k):
    distances = torch.cdist(E[index : index + 1], E)[0]
    order = distances.argsort()
    return order[order != index][:k]


def merge_pair_as_comma_text(ids, pair, new_id):
    if not ids:
        return []
    text = ",".join(map(str, ids)).replace(f"{pair[0]},{pair[1]}", str(new_id))
    return [int(part) for part in text.split(",")]


FOUND_LATER = [
    ("ex01.one_hot", one_hot_checks_the_largest_id_first, "ids.min() and ids.max() raise"),
    ("ex01.one_hot", one_hot_refusing_empty_ids, "empty ids (no ids at all) are valid"),
    ("ex01.cosine_similarity_matrix", cosine_over_the_whole_matrix, "E.norm() without dim"),
    ("ex01.cosine_similarity_matrix", cosine_with_flat_norms, "keepdim=True) of shape (n, 1)"),
    ("ex01.cosine_similarity_matrix", cosine_distance_matrix, "the cosine distance"),
    ("ex01.cosine_similarity_matrix", cosine_ones_on_the_diagonal, "with itself is 0 too"),
    ("ex01.nearest_neighbours", neighbours_sorted_similarities, "return the rows"),
    ("ex01.nearest_neighbours", neighbours_own_similarity_zeroed, "a similarity of 0 does not"),
    ("ex01.nearest_neighbours", neighbours_dropped_after_ranking, "leaves k - 1 rows"),
    ("ex01.nearest_neighbours", neighbours_dividing_by_zero, "topk ranks NaN above"),
    ("ex01.nearest_neighbours", neighbours_by_euclidean_distance, "Euclidean distance"),
    ("ex01.merge_pair", merge_pair_as_comma_text, "ids written as text"),
]


@pytest.mark.parametrize(
    ("task_id", "impl", "hint"), FOUND_LATER, ids=lambda x: getattr(x, "__name__", None)
)
def test_single_mistakes_found_later_get_their_hint(task_id, impl, hint):
    result = check_result(task_id, impl)
    assert result.status == "failed", result.feedback
    assert hint in result.feedback, result.feedback
    assert "more than one thing" not in result.feedback


def test_merge_pair_by_text_passed_every_case_but_the_multi_digit_one():
    # str.replace on " ".join(ids) reads left to right without overlaps, like merge_pair
    result = check_result("ex01.merge_pair", merge_pair_as_comma_text)
    assert result.passed == result.total - 1, result.feedback


def test_the_new_edge_cases_are_there():
    gen = torch.Generator().manual_seed(0)
    one_hot_ids = [c.args[0] for c in get_task("ex01.one_hot").cases(gen)]
    assert any(ids.numel() == 0 for ids in one_hot_ids)
    neighbour_cases = get_task("ex01.nearest_neighbours").cases(gen)
    # a zero row that is not the query row (a zero query row ties everything at 0: undefined)
    assert any(
        (E.norm(dim=1) == 0).any() and E[index].norm() > 0
        for E, index, _ in (c.args for c in neighbour_cases)
    )
    merges = [c.args for c in get_task("ex01.merge_pair").cases(gen)]
    assert any(any(i >= 10 for i in ids) and max(pair) < 10 for ids, pair, _ in merges)


# ---- learner B's false pass: "skip the first, it's me" ----------------------------------------


def _learners_cosine(E):
    unit = E / E.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return unit @ unit.T


def neighbours_skipping_the_first_topk(E, index, k):
    return _learners_cosine(E)[index].topk(k + 1).indices[1:]


def neighbours_skipping_the_first_argsort(E, index, k):
    return _learners_cosine(E)[index].argsort(descending=True)[1 : k + 1]


def neighbours_skipping_the_first_sort(E, index, k):
    return torch.sort(_learners_cosine(E)[index], descending=True).indices[1 : k + 1]


@pytest.mark.parametrize(
    "impl",
    [
        neighbours_skipping_the_first_topk,
        neighbours_skipping_the_first_argsort,
        neighbours_skipping_the_first_sort,
    ],
)
def test_skipping_the_first_neighbour_fails_in_the_notebook_and_under_every_seed(impl, capsys):
    # The notebook's check (its fixed seed), as a learner sees it: no ✅, the hint names it.
    check("ex01.nearest_neighbours", impl)
    shown = capsys.readouterr().out
    assert shown.startswith("❌") and "skipping the first of the sorted" in shown, shown
    # The batch grader's hidden seeds: the same case fails the same way under each of them.
    task = get_task("ex01.nearest_neighbours")
    for seed in (NOTEBOOK_SEED, 1, 2, 3, 4, 5, 6, 1234):
        cases = task.cases(torch.Generator().manual_seed(seed))
        result = judge(task, cases, run_cases(task, impl, cases))
        assert result.status == "failed", (seed, result.feedback)
        assert result.passed == result.total - 1, (seed, result.feedback)
        assert "skipping the first of the sorted" in result.feedback, (seed, result.feedback)


# ---- learner B's slips that got no hint --------------------------------------------------------


def _one_hot_with_checks(ids, vocab_size):
    if ids.is_floating_point() or ids.dtype == torch.bool:
        raise TypeError("ids must be integers")
    if ids.numel() and (ids.min() < 0 or ids.max() >= vocab_size):
        raise ValueError(f"id {int(ids.max())} is outside [0, {vocab_size})")
    return (ids.unsqueeze(-1) == torch.arange(vocab_size)).float()


def embed_vocab_from_the_last_axis(ids, table):
    return _one_hot_with_checks(ids, table.shape[1]).to(table.dtype) @ table


def cosine_over_flat_norms(E):
    return (E @ E.T) / E.norm(dim=1)


def cosine_over_flat_norms_squared(E):
    norms = E.norm(dim=1)
    return (E @ E.T) / (norms * norms)


@pytest.mark.parametrize(
    ("task_id", "impl", "hint"),
    [
        ("ex01.embed", embed_vocab_from_the_last_axis, "vocab_size from the wrong axis"),
        ("ex01.merge_pair", _merge_pair_while("one step after a merge"), "step over both, i += 2"),
        ("ex01.cosine_similarity_matrix", cosine_over_flat_norms, "divides column j by |E_j|"),
        ("ex01.cosine_similarity_matrix", cosine_over_flat_norms_squared, "|E_j|² for column j"),
    ],
    ids=lambda x: getattr(x, "__name__", None),
)
def test_learner_bs_generic_slips_are_named(task_id, impl, hint):
    result = check_result(task_id, impl)
    assert result.status == "failed", result.feedback
    assert hint in result.feedback, result.feedback
    assert "more than one thing" not in result.feedback


# ---- #33: the next slips an outside learner makes ----------------------------------------------


def one_hot_refusing_only_float32(ids, vocab_size):
    if ids.dtype == torch.float or ids.dtype == torch.bool:  # float64 ids slip through
        raise TypeError("ids must be integers")
    if ids.numel() and (ids.min() < 0 or ids.max() >= vocab_size):
        bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
        raise ValueError(f"id {bad} is outside [0, {vocab_size})")
    return (ids.unsqueeze(-1) == torch.arange(vocab_size)).float()


def embed_in_float32_cast_back(ids, table):
    return (_one_hot_with_checks(ids, table.shape[0]) @ table.float()).to(table.dtype)


def cosine_of_the_columns(E):
    unit = E / E.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return unit.T @ unit


def neighbours_of_the_shortened_matrix(E, index, k):
    others = torch.cat([E[:index], E[index + 1 :]])
    return (_learners_cosine(torch.cat([E[index : index + 1], others]))[0, 1:]).topk(k).indices


def neighbours_shifted_past_index_only(E, index, k):
    top = neighbours_of_the_shortened_matrix(E, index, k)
    return top + (top > index).long()


def pair_counts_to_the_last_id(ids):
    counts = {}
    for i in range(len(ids)):
        pair = (ids[i], ids[i + 1])
        counts[pair] = counts.get(pair, 0) + 1
    return counts


def bpe_encode_stopping_at_an_absent_merge(ids, merges):
    for pair, new_id in merges.items():
        if pair not in zip(ids, ids[1:], strict=False):
            break
        ids = _merge(ids, pair, new_id)
    return ids


def _merge(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def neighbours_by_the_lessons_top3(E, index, k):
    scores = _learners_cosine(E)[index].clone()
    scores[index] = float("-inf")
    return scores.topk(3).indices


def bpe_encode_copied_from_encode_chunk(ids, merges):
    ids = list(ids.encode("utf-8"))
    for pair, new_id in merges.items():
        ids = _merge(ids, pair, new_id)
    return ids


def one_hot_naming_the_largest_id(ids, vocab_size):  # hunt 2: named 0 for [0, -1], full marks
    return _one_hot_with_checks(ids, vocab_size)


def embed_through_rows_of_the_identity(ids, table):  # hunt 2: eye[-1] is a row, full marks
    if ids.numel() and ids.max() >= table.shape[0]:
        raise ValueError(f"id {int(ids.max())} is not a row of the table")
    return torch.eye(table.shape[0], dtype=table.dtype)[ids] @ table


def cosine_with_an_epsilon_on_every_length(E, eps=1e-6):  # hunt 2: 'more than one thing...'
    unit = E / (E.norm(dim=1, keepdim=True) + eps)
    return unit @ unit.T


def cosine_with_a_tiny_epsilon(E):  # hunt 3: norm + 1e-8 had full marks (all rows were long)
    return cosine_with_an_epsilon_on_every_length(E, eps=1e-8)


def pair_counts_back_to_front(ids):  # hunt 2: '(3, 9) is missing', no word why
    counts = {}
    for left, right in zip(ids, ids[1:], strict=False):
        counts[right, left] = counts.get((right, left), 0) + 1
    return counts


def neighbours_by_argsort_ascending(E, index, k):  # hunt 3: 'none of the usual mistakes'
    scores = _learners_cosine(E)[index].clone()
    scores[index] = float("-inf")
    return scores.argsort()[:k]


def bpe_encode_as_a_tensor(ids, merges):  # hunt 3: told 'should be a tuple', asked a list
    return torch.tensor(_merge(ids, *next(iter(merges.items()))))


def one_hot_of_int64_only(ids, vocab_size):  # hunt 3: 'your code raised TypeError', no hint
    if ids.dtype != torch.long:
        raise TypeError("ids must be a LongTensor")
    return _one_hot_with_checks(ids, vocab_size)


def pair_counts_keyed_by_text(ids):  # hunt 3: str keys, "(3, 9)", had full marks
    counts = {}
    for left, right in zip(ids, ids[1:], strict=False):
        counts[f"({left}, {right})"] = counts.get(f"({left}, {right})", 0) + 1
    return counts


def bpe_encode_popping_the_merges(ids, merges):  # right order, but the caller's merges are gone
    while merges:
        pair = next(iter(merges))
        ids = _merge(ids, pair, merges.pop(pair))
    return ids


NEXT_SLIPS = [
    ("ex01.bpe_encode", bpe_encode_popping_the_merges, "your code changed its input `merges`"),
    ("ex01.pair_counts", pair_counts_back_to_front, "your pairs are back to front"),
    ("ex01.merge_pair", _merge_pair_while("reads past the end"), "ids[i + 1] is past the end"),
    ("ex01.cosine_similarity_matrix", cosine_with_an_epsilon_on_every_length, "clamp the lengths"),
    ("ex01.cosine_similarity_matrix", cosine_with_a_tiny_epsilon, "clamp the lengths"),
    ("ex01.nearest_neighbours", neighbours_by_argsort_ascending, "(at -inf) came first"),
    ("ex01.bpe_encode", bpe_encode_as_a_tensor, "should be a list of"),
    ("ex01.one_hot", one_hot_of_int64_only, "torch.int32 ids are integers too"),
    ("ex01.pair_counts", pair_counts_keyed_by_text, "with the key '(3, 9)', a str, not a tuple"),
    ("ex01.one_hot", one_hot_naming_the_largest_id, "name the id that is out of range (-2)"),
    ("ex01.embed", embed_through_rows_of_the_identity, "a negative id is out of range too"),
    (
        "ex01.merge_pair",
        _merge_pair_while("stops before the last pair"),
        "the pair at the very end",
    ),
    ("ex01.one_hot", one_hot_refusing_only_float32, "ids of any float dtype must raise"),
    ("ex01.embed", embed_in_float32_cast_back, "multiplied in float32 and converted"),
    ("ex01.cosine_similarity_matrix", cosine_of_the_columns, "E.T @ E compares the d columns"),
    ("ex01.nearest_neighbours", neighbours_of_the_shortened_matrix, "are not rows of E"),
    ("ex01.nearest_neighbours", neighbours_shifted_past_index_only, "not only > index"),
    ("ex01.pair_counts", pair_counts_to_the_last_id, "ids[i + 1] is out of range"),
    ("ex01.merge_pair", _merge_pair_while("appends the last id"), "appended after the loop"),
    ("ex01.bpe_encode", bpe_encode_stopping_at_an_absent_merge, "continue, not break"),
    ("ex01.nearest_neighbours", neighbours_by_the_lessons_top3, "lesson 01's top3"),
    ("ex01.bpe_encode", bpe_encode_copied_from_encode_chunk, "lesson 01's encode_chunk"),
]


@pytest.mark.parametrize(
    ("task_id", "impl", "hint"), NEXT_SLIPS, ids=[s[1].__name__ for s in NEXT_SLIPS]
)
def test_next_slips_fail_in_the_notebook_and_under_every_seed(task_id, impl, hint, capsys):
    check(task_id, impl)
    shown = capsys.readouterr().out
    assert shown.startswith("❌") and hint in shown, shown
    task = get_task(task_id)
    for seed in (1, 2, 3, 4, 5, 6, 7, 1234):
        cases = task.cases(torch.Generator().manual_seed(seed))
        result = judge(task, cases, run_cases(task, impl, cases))
        assert result.status == "failed", (seed, result.feedback)


# ---- fourth hunt (a fresh reader): slips the cases above let through ---------------------


def neighbours_own_similarity_at_minus_one(E, index, k, *, rank="topk"):
    sims = cosine_where(E)[index]
    sims[index] = -1.0  # "the lowest a cosine can be", but a row pointing away ties with it
    if rank == "topk":
        return sims.topk(k).indices
    return sims.argsort(descending=True)[:k]


@pytest.mark.parametrize("rank", ["topk", "argsort"])
def test_own_similarity_at_minus_one_fails_on_the_opposite_row(rank):
    def impl(E, index, k):
        return neighbours_own_similarity_at_minus_one(E, index, k, rank=rank)

    result = check_result("ex01.nearest_neighbours", impl)
    assert result.status == "failed", result.feedback
    assert "-1 does not exclude the row itself" in result.feedback, result.feedback


def test_excluding_every_row_at_cosine_one_gets_its_hint():
    def nearest_neighbours(E, index, k):
        sims = cosine_where(E)[index]
        sims[sims > 0.9999] = -float("inf")  # "the row itself is the one at similarity 1"
        return sims.topk(k).indices

    result = check_result("ex01.nearest_neighbours", nearest_neighbours)
    assert result.status == "failed", result.feedback
    assert "a copy or any parallel row also scores 1" in result.feedback, result.feedback


@pytest.mark.parametrize("guard", ["clamp 1e-8", "clamp 1e-6", "squared 1e-12", "product 1e-12"])
def test_a_clamp_above_tiny_lengths_fails_with_its_hint(guard):
    def cosine_similarity_matrix(E):
        norms = E.norm(dim=-1, keepdim=True)
        if guard == "squared 1e-12":
            norms = (E * E).sum(-1, keepdim=True).clamp_min(1e-12).sqrt()
        if guard == "product 1e-12":
            return (E @ E.T) / (norms * norms.T).clamp_min(1e-12)
        unit = E / norms.clamp_min(float(guard.split()[-1]))
        return unit @ unit.T

    result = check_result("ex01.cosine_similarity_matrix", cosine_similarity_matrix)
    assert result.status == "failed", result.feedback
    assert "tiny vectors (lengths about 1e-9, not zero)" in result.feedback, result.feedback


# ---- fifth hunt (a fresh reader, two-step and contract slips) ----------------------------


def merge_pair_returning_ids_when_absent(ids, pair, new_id):  # "Return a **new** list"
    if pair not in zip(ids, ids[1:], strict=False):
        return ids  # nothing to merge: hand back the same list, which had full marks
    return merge_pair_with_a_skip_flag(ids, pair, new_id)


def test_merge_pair_returning_the_given_list_fails_with_its_hint():
    result = check_result("ex01.merge_pair", merge_pair_returning_ids_when_absent)
    assert result.status == "failed", result.feedback
    assert "you returned the list you were given" in result.feedback, result.feedback


def test_a_threshold_that_zeroes_tiny_vectors_gets_its_hint():  # was told 'raw dot products'
    def cosine_similarity_matrix(E):
        norms = E.norm(dim=-1, keepdim=True)
        unit = torch.where(norms > 1e-6, E / norms, torch.zeros_like(E))
        return unit @ unit.T

    result = check_result("ex01.cosine_similarity_matrix", cosine_similarity_matrix)
    assert result.status == "failed", result.feedback
    assert "a threshold such as norm > 1e-6" in result.feedback, result.feedback


def test_new_ids_numbered_from_256_as_in_the_lesson_get_their_hint():  # was a bare 'result[2]'
    def bpe_encode(ids, merges):
        for rank, pair in enumerate(merges):
            ids = merge_pair_with_a_skip_flag(ids, pair, 256 + rank)
        return ids

    result = check_result("ex01.bpe_encode", bpe_encode)
    assert result.status == "failed", result.feedback
    assert "the new ids are the values of `merges`" in result.feedback, result.feedback


def test_dropping_merge_pairs_result_gets_its_hint():  # hunt 5: 'should have 4 values, got 6'
    def bpe_encode(ids, merges):
        for pair, new_id in merges.items():
            merge_pair_with_a_skip_flag(ids, pair, new_id)  # the new list is thrown away
        return ids

    result = check_result("ex01.bpe_encode", bpe_encode)
    assert result.status == "failed", result.feedback
    assert "so keep its result, ids = merge_pair" in result.feedback, result.feedback


@pytest.mark.parametrize("eps", [1e-8, 1e-6])
def test_neighbours_by_lengths_plus_an_epsilon_get_their_hint(eps):  # hunt 6: full marks
    def nearest_neighbours(E, index, k):
        unit = E / (E.norm(dim=1, keepdim=True) + eps)  # also no NaN for a zero row
        sims = unit @ unit[index]
        sims[index] = float("-inf")
        return sims.topk(k).indices

    result = check_result("ex01.nearest_neighbours", nearest_neighbours)
    assert result.status == "failed", result.feedback
    assert "an epsilon added to every length" in result.feedback, result.feedback


def test_embed_with_the_lessons_vocab_size_gets_its_hint():  # hunt 6: a bare RuntimeError
    def embed(ids, table):
        hot = (ids.unsqueeze(-1) == torch.arange(10)).to(table.dtype)  # lesson 01's vocab_size
        return hot @ table

    result = check_result("ex01.embed", embed)
    assert result.status == "failed", result.feedback
    assert "the lesson's 10 columns" in result.feedback, result.feedback


@pytest.mark.parametrize("slip", ["topk unsorted", "indices sorted"])
def test_neighbours_in_another_order_get_a_hint(slip):  # hunt 6: 'none of the usual'
    def nearest_neighbours(E, index, k):
        unit = E / E.norm(dim=1, keepdim=True).clamp_min(1e-12)
        sims = unit @ unit[index]
        sims[index] = float("-inf")
        if slip == "topk unsorted":
            return sims.topk(k, sorted=False).indices
        return sims.topk(k).indices.sort().values

    result = check_result("ex01.nearest_neighbours", nearest_neighbours)
    assert result.status == "failed", result.feedback
    assert "the right rows, but not most similar first" in result.feedback, result.feedback


@pytest.mark.parametrize("method", [False, True])
def test_embed_by_take_along_dim_is_a_look_up(method):  # hunt 6: full marks, not a product
    def embed(ids, table):
        if ((ids < 0) | (ids >= table.shape[0])).any():
            raise ValueError(f"ids must be in [0, {table.shape[0]})")
        index = ids.reshape(-1, 1).expand(-1, table.shape[1])
        rows = table.take_along_dim(index, 0) if method else torch.take_along_dim(table, index, 0)
        return rows.reshape(*ids.shape, table.shape[1])

    result = check_result("ex01.embed", embed)
    assert result.status == "failed", result.feedback
    assert "you looked the rows up by indexing the table" in result.feedback, result.feedback


def test_one_hot_refusing_two_float_dtypes_only_fails():  # hunt 6: full marks
    def one_hot(ids, vocab_size):
        if ids.dtype in (torch.float32, torch.float64) or ids.dtype == torch.bool:
            raise TypeError(f"ids must be integers, got {ids.dtype}")
        bad = ids[(ids < 0) | (ids >= vocab_size)]
        if bad.numel():
            raise ValueError(f"id {bad[0].item()} is outside [0, {vocab_size})")
        return (ids.unsqueeze(-1) == torch.arange(vocab_size)).float()

    result = check_result("ex01.one_hot", one_hot)
    assert result.status == "failed", result.feedback
    assert "ids.is_floating_point() covers every float dtype" in result.feedback, result.feedback


def _squeezed_one_hot(ids, vocab_size):
    _refuse_bad_ids(ids, vocab_size)
    return (ids.unsqueeze(-1) == torch.arange(vocab_size)).float().squeeze()  # the slip


@pytest.mark.parametrize(
    "task_id, fn",
    [
        ("ex01.one_hot", _squeezed_one_hot),
        ("ex01.embed", lambda ids, table: _squeezed_one_hot(ids, len(table)).to(table) @ table),
    ],
)
def test_a_squeeze_that_drops_one_sequences_batch_axis_fails(task_id, fn):
    # seventh hunt: full marks before (no case had an axis of length 1)
    result = check_result(task_id, fn)
    assert result.status == "failed", result.feedback
    assert "squeeze() drops every axis of length 1" in result.feedback, result.feedback


def test_pair_counts_keyed_by_zero_d_tensors_is_named():
    # seventh hunt: 'the pair (3, 9) is missing from your counts' though the learner had it
    def pair_counts(ids):
        t = torch.tensor(ids)
        return dict(Counter(zip(t[:-1], t[1:], strict=True)))

    result = check_result("ex01.pair_counts", pair_counts)
    assert result.status == "failed", result.feedback
    assert "of tensors, not ints" in result.feedback, result.feedback


def _merge_through_a_tensor(ids, pair, new_id):
    t, out, i = torch.tensor(ids, dtype=torch.long), [], 0
    while i < len(t):
        if i + 1 < len(t) and t[i] == pair[0] and t[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(t[i])  # the slip: a 0-d tensor, not t[i].item()
            i += 1
    return out


def _encode_through_a_tensor(ids, merges):
    for pair, new_id in merges.items():
        ids = _merge_through_a_tensor(ids, pair, new_id)
    return list(ids)


@pytest.mark.parametrize(
    "task_id, fn",
    [("ex01.merge_pair", _merge_through_a_tensor), ("ex01.bpe_encode", _encode_through_a_tensor)],
)
def test_a_list_of_zero_d_tensors_fails(task_id, fn):
    # seventh hunt: full marks before (tensor(3) == 3 is truthy, so each value compared equal)
    result = check_result(task_id, fn)
    assert result.status == "failed", result.feedback
    assert "your list holds tensors" in result.feedback, result.feedback


# ---- hunt s9: ids through a NumPy array ---------------------------------------------------------


def _pair_counts_through_numpy(ids):
    if len(ids) < 2:
        return {}
    a = np.array(ids)
    pairs, counts = np.unique(np.stack([a[:-1], a[1:]], axis=1), axis=0, return_counts=True)
    return {tuple(p): c for p, c in zip(pairs, counts, strict=True)}  # np.int64 keys and counts


def _merge_through_numpy(ids, pair, new_id):
    a, out, i = np.array(ids), [], 0
    while i < len(a):
        if i + 1 < len(a) and a[i] == pair[0] and a[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(a[i])  # the slip: an np.int64, not int(a[i]) or a.tolist()
            i += 1
    return out


def _encode_through_numpy(ids, merges):
    for pair, new_id in merges.items():
        ids = _merge_through_numpy(ids, pair, new_id)
    return ids


@pytest.mark.parametrize(
    "task_id, fn, named",
    [
        ("ex01.pair_counts", _pair_counts_through_numpy, "NumPy integers in {(np.int64(3)"),
        ("ex01.merge_pair", _merge_through_numpy, "your list holds NumPy integers (int64"),
        ("ex01.bpe_encode", _encode_through_numpy, "your list holds NumPy integers (int64"),
    ],
)
def test_ids_that_went_through_a_numpy_array_are_named(task_id, fn, named):
    # hunt s9: the pair_counts check said 'the pair (3, 9) is missing from your counts' though
    # the learner's dict had it (np.int64 keys), and a count or id came out as
    # "{'__repr__': '<int64>'}"; the statement asks for ints, so it still fails, now named
    result = check_result(task_id, fn)
    assert result.status == "failed", result.feedback
    assert named in result.feedback and ".tolist()" in result.feedback, result.feedback
    assert "__repr__" not in result.feedback and "is missing" not in result.feedback


# ---- hunt F11 (a fresh learner): slips whose feedback named no cause, or the wrong one --------


def _one_hot_axis_one(ids, vocab_size):
    _refuse_bad_ids(ids, vocab_size)
    return (ids[:, None] == torch.arange(vocab_size)).float()  # the slip: the axis second


def _one_hot_of_the_lessons_size(ids, vocab_size):
    _refuse_bad_ids(ids, vocab_size)
    vocab_size = 6  # the slip: the lesson's cell copied with its own size
    return (ids.unsqueeze(-1) == torch.arange(vocab_size)).float()


def _embed_in_float64(ids, table):
    hot = (ids.unsqueeze(-1) == torch.arange(len(table))).double()  # "float64, to be safe"
    if ((ids < 0) | (ids >= len(table))).any():
        raise ValueError(f"ids must be in [0, {len(table)})")
    return hot @ table.double()


def _cosine_in_float32(E):
    E = E.float()  # the slip: float64's digits given up
    unit = E / E.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return unit @ unit.T


def _neighbours_as_int32(E, index, k):
    unit = E / E.norm(dim=1, keepdim=True).clamp_min(1e-12)
    similarity = unit @ unit[index]
    similarity[index] = float("-inf")
    return similarity.argsort(descending=True)[:k].int()


def _encode_returning_in_the_loop(ids, merges):
    for pair, new_id in merges.items():
        out, i = [], 0
        while i < len(ids):
            if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
                out.append(new_id)
                i += 2
            else:
                out.append(ids[i])
                i += 1
        ids = out
        return ids  # the slip: indented into the loop, so only the first merge runs
    return list(ids)


@pytest.mark.parametrize(
    "task_id, fn, named",
    [
        ("ex01.one_hot", _one_hot_axis_one, "add the axis last: ids.unsqueeze(-1)"),
        ("ex01.one_hot", _one_hot_of_the_lessons_size, "torch.arange(6) is the lesson's"),
        ("ex01.embed", _embed_in_float64, "with no .double()"),
        ("ex01.cosine_similarity_matrix", _cosine_in_float32, "with no .float() on E"),
        ("ex01.nearest_neighbours", _neighbours_as_int32, "with no .int()"),
        ("ex01.bpe_encode", _encode_returning_in_the_loop, "`return` inside the for loop"),
    ],
)
def test_a_fresh_learners_slip_is_named(task_id, fn, named):
    # hunt F11: one_hot with ids[:, None] crashed on 2-D ids with only "run your code in a cell
    # of its own", and with the lesson's arange(6) got only "shape (3, 6), expected (3, 4)"; a
    # .double() (embed), .float() (cosine) or .int() (neighbours) was told "a
    # tensor you create gets PyTorch's default dtype", a cause the learner did not write; a
    # `return` inside bpe_encode's loop got "your result should have 2 values, got 3" alone
    result = check_result(task_id, fn)
    assert result.status == "failed", result.feedback
    assert named in result.feedback, result.feedback
    assert "default dtype" not in result.feedback and "cell of its own" not in result.feedback


# ---- d12: an answer whose values are right but whose gradient is cut --------------------------


def _d12_embed(cut):
    def embed(ids, table):
        if ((ids < 0) | (ids >= table.shape[0])).any():
            raise ValueError(f"ids must lie in [0, {table.shape[0]})")
        hot = (ids[..., None] == torch.arange(table.shape[0])).to(table.dtype)
        return hot @ cut(table)

    return embed


def test_d12_an_embedding_table_cut_from_the_graph_fails():
    # full marks before: the values alone were compared, and a detached table never learns
    assert check_result("ex01.embed", _d12_embed(lambda t: t)).score == 1.0
    for cut in (lambda t: t.detach(), lambda t: t.data):
        result = check_result("ex01.embed", _d12_embed(cut))
        assert result.status == "failed", result.feedback
        assert "no gradient reaches table" in result.feedback, result.feedback


# ---- hunt F11, second fresh reader: slips told nothing, or told a cause they did not write ----


def _one_hot_in_a_range(low, high):
    """A one-hot whose range check is off by one at a boundary the statement names."""

    def one_hot(ids, vocab_size):
        if ids.is_floating_point() or ids.dtype == torch.bool:
            raise TypeError(f"ids must be integers, got {ids.dtype}")
        bad = (ids < low) | (ids > vocab_size + high)
        if bad.any():
            raise ValueError(f"id {ids[bad][0].item()} is outside [0, {vocab_size})")
        return (ids.unsqueeze(-1) == torch.arange(vocab_size)).float()

    return one_hot


def _one_hot_by_rows(ids, vocab_size):  # NumPy's out[np.arange(n), ids] = 1: 1-D ids only
    _refuse_bad_ids(ids, vocab_size)
    out = torch.zeros(len(ids), vocab_size)
    out[torch.arange(len(ids)), ids] = 1
    return out


def _cosine_over_squared_row_lengths(E):
    norms = E.norm(dim=1, keepdim=True).clamp_min(1e-12)  # (n, 1)
    return (E @ E.T) / (norms * norms)  # |E_i|² per row, not |E_i| |E_j|


def _cosine_over_norms_t_at_norms(E):
    norms = E.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return (E @ E.T) / (norms.T @ norms)  # (1, 1): the outer product the wrong way round


def _neighbours_by_topk_smallest(E, index, k):
    unit = E / E.norm(dim=1, keepdim=True).clamp_min(1e-12)
    similarity = unit @ unit[index]
    similarity[index] = float("-inf")
    return similarity.topk(k, largest=False).indices


def _pair_counts_without_a_start(ids):
    counts = {}
    for i in range(len(ids) - 1):
        counts[(ids[i], ids[i + 1])] += 1  # KeyError the first time
    return counts


def _pair_counts_keyed_by_lists(ids):
    counts = {}
    for i in range(len(ids) - 1):
        pair = [ids[i], ids[i + 1]]
        counts[pair] = counts.get(pair, 0) + 1
    return counts


def _merge_pair_skipping_in_a_for_loop(ids, pair, new_id):
    merged = []
    for i in range(len(ids)):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            merged.append(new_id)
            i += 2  # no effect: the for loop sets i again
        else:
            merged.append(ids[i])
    return merged


def _encode_over_the_dict_itself(ids, merges):
    ids = list(ids)
    for pair, new_id in merges:  # the keys alone: pair = a, new_id = b
        ids = _merge(ids, pair, new_id)
    return ids


def _encode_numbered_by_enumerate(ids, merges):
    ids = list(ids)
    for new_id, pair in enumerate(merges):
        ids = _merge(ids, pair, new_id)
    return ids


def _embed_cast_to_float(ids, table):
    hot = (ids.unsqueeze(-1) == torch.arange(table.shape[0])).to(table.dtype)
    if ((ids < 0) | (ids >= table.shape[0])).any():
        raise ValueError("ids out of range")
    return (hot @ table).float()


SECOND_READER = [
    ("ex01.one_hot", _one_hot_in_a_range(1, -1), "the range includes 0", "cell of its own"),
    ("ex01.one_hot", _one_hot_in_a_range(0, -2), "the range includes 0", "cell of its own"),
    ("ex01.one_hot", _one_hot_by_rows, "only when ids are 1-D", "cell of its own"),
    (
        "ex01.cosine_similarity_matrix",
        _cosine_over_squared_row_lengths,
        "is |E_i|² for row i",
        "None of the usual",
    ),
    (
        "ex01.cosine_similarity_matrix",
        _cosine_over_norms_t_at_norms,
        "norms.T @ norms, (1, n) @ (n, 1), is the same slip",
        "None of the usual",
    ),
    (
        "ex01.nearest_neighbours",
        _neighbours_by_topk_smallest,
        "topk(k, largest=False) takes the smallest",
        "None of the usual",
    ),
    ("ex01.pair_counts", _pair_counts_without_a_start, "counts.get(pair, 0)", "cell of its"),
    ("ex01.pair_counts", _pair_counts_keyed_by_lists, "make each pair a tuple", "cell of its"),
    (
        "ex01.merge_pair",
        _merge_pair_skipping_in_a_for_loop,
        "in a for loop, i += 2 changes nothing",
        "None of the usual",
    ),
    (
        "ex01.merge_pair",
        _merge_pair_while("compares a slice"),
        "a list never equals the tuple pair",
        "None of the usual",
    ),
    (
        "ex01.bpe_encode",
        _encode_over_the_dict_itself,
        "loop over merges.items()",
        "None of the usual",
    ),
    (
        "ex01.bpe_encode",
        _encode_numbered_by_enumerate,
        "enumerate(merges) numbers the merges 0, 1, 2",
        "None of the usual",
    ),
    ("ex01.embed", _embed_cast_to_float, "no .float() on the table or on the result", "None"),
]


@pytest.mark.parametrize(
    ("task_id", "fn", "named", "not_named"),
    SECOND_READER,
    ids=[f"{i}-{s[0]}" for i, s in enumerate(SECOND_READER)],
)
def test_a_second_fresh_learners_slip_is_named(task_id, fn, named, not_named):
    # hunt F11, second reader: each got a bare traceback text ('run your code in a cell of its
    # own'), 'None of the usual single mistakes', or the hint of another cause (ids[:, None] ->
    # E.norm() without dim, topk(largest=False) -> argsort, `for ... in merges` -> 'keep its
    # result', a for loop's i += 2 -> 'step over both, i += 2', which it did)
    result = check_result(task_id, fn)
    assert result.status == "failed", result.feedback
    assert named in result.feedback and not_named not in result.feedback, result.feedback
    task = get_task(task_id)
    for seed in (1, 2, 3):
        cases = task.cases(torch.Generator().manual_seed(seed))
        assert judge(task, cases, run_cases(task, fn, cases)).status == "failed", seed


_LEARNER_EMBED = """
import torch


def one_hot(ids, vocab_size):
    if ids.is_floating_point() or ids.dtype == torch.bool:
        raise TypeError(f"ids must be integers, got {ids.dtype}")
    if ((ids < {low}) | (ids >= vocab_size)).any():
        raise ValueError(f"ids {ids.tolist()} must lie in [0, {vocab_size})")
    return (ids.unsqueeze(-1) == torch.arange(vocab_size)).float()


def embed(ids, table):
    return one_hot(ids, table.shape[{axis}]).to(table.dtype) @ table
"""


@pytest.mark.parametrize(("low", "axis", "axis_hint"), [(1, 0, False), (0, -1, True)])
def test_embed_blames_the_tables_axis_only_when_one_hot_is_not_the_cause(low, axis, axis_hint):
    # hunt F11, second reader: a one_hot refusing id 0 (ids < 1) made the right embed,
    # one_hot(ids, table.shape[0]) @ table, raise ValueError, and the check told it 'did you take
    # vocab_size from the wrong axis?'; the wrong axis itself keeps that hint
    namespace: dict = {}
    exec(_LEARNER_EMBED.replace("{low}", str(low)).replace("{axis}", str(axis)), namespace)  # noqa: S102
    result = check_result("ex01.embed", namespace["embed"])
    assert result.status == "failed", result.feedback
    assert ("from the wrong axis" in result.feedback) == axis_hint, result.feedback
    assert ("fix one_hot first" in result.feedback) != axis_hint, result.feedback


# ---- L14: one_hot's integer dtypes; embed as a loop of single-row look-ups ------------------


def _refuse_bad_ids(ids, vocab_size):
    if ids.is_floating_point() or ids.dtype == torch.bool:
        raise TypeError(f"ids must be integers, got {ids.dtype}")
    bad = ids[(ids < 0) | (ids >= vocab_size)]
    if bad.numel():
        raise ValueError(f"id {bad[0].item()} is outside [0, {vocab_size})")


def one_hot_of_a_list_of_dtypes(ids, vocab_size):  # 15/15 before: no case had int16 ids
    if ids.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"ids must be int64 or int32, got {ids.dtype}")
    _refuse_bad_ids(ids, vocab_size)
    return (ids.unsqueeze(-1) == torch.arange(vocab_size)).float()


def one_hot_by_rows_of_the_identity(ids, vocab_size):  # eye[ids] takes int64/int32 only
    _refuse_bad_ids(ids, vocab_size)
    return torch.eye(vocab_size)[ids]


@pytest.mark.parametrize(
    ("impl", "hint"),
    [
        (one_hot_of_a_list_of_dtypes, "torch.int16 ids are integers too"),
        (one_hot_by_rows_of_the_identity, "convert the ids with ids.long() first"),
    ],
    ids=["list of dtypes", "eye[ids]"],
)
def test_l14_one_hot_takes_int16_ids(impl, hint, capsys):
    # the statement asks for integer ids; a one_hot that refused (or crashed on) int16 ids had
    # full marks, as no case held them
    test_next_slips_fail_in_the_notebook_and_under_every_seed("ex01.one_hot", impl, hint, capsys)


def embed_row_by_row(ids, table):
    """One row at a time, by its int id: not the one-hot product the statement asks for, but
    the same values and gradients (a product written as a loop over the vocabulary indexes the
    table by ints too), so it keeps full marks."""
    vocab_size, d = table.shape
    flat = ids.reshape(-1).tolist()
    if any(i < 0 or i >= vocab_size for i in flat):
        raise ValueError(f"ids must lie in [0, {vocab_size})")
    rows = [table[i] for i in flat]
    return (torch.stack(rows) if rows else table[:0]).reshape(*ids.shape, d)


def one_hot_by_comparison_in_int16(ids, vocab_size):
    _refuse_bad_ids(ids, vocab_size)
    return (ids.unsqueeze(-1) == torch.arange(vocab_size, dtype=torch.int16)).float()


@pytest.mark.parametrize(
    ("task_id", "impl"),
    [
        ("ex01.embed", embed_row_by_row),
        ("ex01.one_hot", one_hot_scatter),
        ("ex01.one_hot", one_hot_eye),
        ("ex01.one_hot", one_hot_by_comparison_in_int16),
    ],
    ids=["embed row by row", "scatter of ids.long()", "eye[ids.long()]", "int16 arange"],
)
def test_l14_right_variants_keep_full_marks_under_every_seed(task_id, impl):
    task = get_task(task_id)
    for seed in (NOTEBOOK_SEED, 1, 2, 3, 4, 5):
        cases = task.cases(torch.Generator().manual_seed(seed))
        result = judge(task, cases, run_cases(task, impl, cases))
        assert result.status == "passed", (seed, result.feedback)


# ---- state kept between calls (hunt F11, set 01) -------------------------------------------


def _one_hot_cached_by_shape():
    memo = {}

    def one_hot(ids, vocab_size):
        one_hot_scatter(ids, vocab_size)  # its checks: bad ids raise
        if (ids.shape, vocab_size) not in memo:
            memo[ids.shape, vocab_size] = one_hot_scatter(ids, vocab_size)
        return memo[ids.shape, vocab_size]

    return one_hot


def _unit_rows_cached_by_shape():
    memo = {}

    def cosine_similarity_matrix(E):
        if tuple(E.shape) not in memo:
            lengths = E.norm(dim=1, keepdim=True)
            memo[tuple(E.shape)] = E / torch.where(lengths > 0, lengths, 1.0)
        unit = memo[tuple(E.shape)]
        return unit @ unit.T

    return cosine_similarity_matrix


def _one_hot_cached_in_embed():
    memo = {}

    def embed(ids, table):
        key = (tuple(ids.shape), table.shape[0])
        if key not in memo:
            memo[key] = resolve("course_lib.embeddings.one_hot")(ids, table.shape[0])
        return memo[key].to(table.dtype) @ table

    return embed


def _similarities_built_at_first_call():
    kept = []

    def nearest_neighbours(E, index, k):
        if not kept:
            unit = E / E.norm(dim=1, keepdim=True).clamp_min(1e-12)
            kept.append(unit @ unit.T)
        scores = kept[0][index].clone()
        scores[index] = float("-inf")
        return scores.topk(k).indices

    return nearest_neighbours


def _pair_counts_mutable_default():
    def pair_counts(ids, counts={}):  # noqa: B006  (the slip under test)
        for pair in zip(ids, ids[1:], strict=False):
            counts[pair] = counts.get(pair, 0) + 1
        return counts

    return pair_counts


def _merge_pair_mutable_default():
    def merge_pair(ids, pair, new_id, merged=[]):  # noqa: B006  (the slip under test)
        i = 0
        while i < len(ids):
            if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
                merged.append(new_id)
                i += 2
            else:
                merged.append(ids[i])
                i += 1
        return merged

    return merge_pair


def _pair_counts_in_one_dict():
    counts = {}

    def pair_counts(ids):
        counts.clear()
        for pair in zip(ids, ids[1:], strict=False):
            counts[pair] = counts.get(pair, 0) + 1
        return counts

    return pair_counts


def _merge_pair_into_one_list():
    merged = []

    def merge_pair(ids, pair, new_id):
        merged.clear()
        merged.extend(_merge_pair_mutable_default()(ids, pair, new_id, []))
        return merged

    return merge_pair


def _merges_listed_at_first_call():
    kept = []

    def bpe_encode(ids, merges):
        if not kept:
            kept.extend(merges.items())
        for pair, new_id in kept:
            ids = _merge_pair_mutable_default()(ids, pair, new_id, [])
        return ids

    return bpe_encode


_KEPT = "your result is the one of an earlier call"


@pytest.mark.parametrize(
    ("task_id", "make", "named"),
    [
        ("ex01.one_hot", _one_hot_cached_by_shape, _KEPT),
        ("ex01.embed", _one_hot_cached_in_embed, _KEPT),
        ("ex01.cosine_similarity_matrix", _unit_rows_cached_by_shape, _KEPT),
        ("ex01.nearest_neighbours", _similarities_built_at_first_call, _KEPT),
        ("ex01.pair_counts", _pair_counts_mutable_default, "a default argument (counts={})"),
        ("ex01.merge_pair", _merge_pair_mutable_default, "a default argument (merged=[])"),
        ("ex01.bpe_encode", _merges_listed_at_first_call, "kept the merges of an earlier call"),
        ("ex01.pair_counts", _pair_counts_in_one_dict, "changed the dict your function returned"),
        ("ex01.merge_pair", _merge_pair_into_one_list, "changed the list your function returned"),
    ],
    ids=[
        "one_hot",
        "embed",
        "cosine",
        "neighbours",
        "pair_counts",
        "merge_pair",
        "bpe_encode",
        "one dict, cleared",
        "one list, cleared",
    ],
)
def test_f11_state_kept_between_calls_fails_and_is_named(task_id, make, named):
    # hunt F11, set 01: a one-hot, a one-hot inside embed, unit rows cached by shape had full
    # marks (no case asked a shape twice); similarities kept from the first call read 'None of
    # the usual single mistakes' or 'argsort sorts ascending'; a mutable default argument only
    # 'got 6 values'; merges listed at the first call 'nothing was merged: keep its result';
    # one dict (or list) outside the function, cleared at each call, had full marks
    result = check_result(task_id, make())
    assert result.status == "failed", result.feedback
    assert named in result.feedback, result.feedback
    task = get_task(task_id)
    for seed in (1, 2, 3):
        cases = task.cases(torch.Generator().manual_seed(seed))
        fn = make()
        assert judge(task, cases, run_cases(task, fn, cases)).status == "failed", seed


def _cosine_in_float32(E):
    unit = E.float() / E.float().norm(dim=1, keepdim=True).clamp_min(1e-12)
    return (unit @ unit.T).to(E.dtype)


def _cosine_unbracketed(E):
    lengths = E.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return E @ E.T / lengths * lengths.T


@pytest.mark.parametrize(
    ("fn", "named", "not_named"),
    [
        (_cosine_in_float32, "only float32's digits", "an epsilon added to every length"),
        (_cosine_unbracketed, "group from left to right", "None of the usual"),
    ],
    ids=["float32 and back", "unbracketed"],
)
def test_f11_cosine_slips_are_named(fn, named, not_named):
    # hunt F11, set 01: float32 arithmetic converted back to float64 was told 'an epsilon added
    # to every length'; E @ E.T / norms * norms.T 'None of the usual single mistakes'
    result = check_result("ex01.cosine_similarity_matrix", fn)
    assert result.status == "failed", result.feedback
    assert named in result.feedback and not_named not in result.feedback, result.feedback


# ---- hunt h01: full marks before, each now fails with its hint ---------------------------------


def _one_hot_range_before_dtype(ids, vocab_size):  # two right tests in the wrong order
    if ids.numel() and (ids.min() < 0 or ids.max() >= vocab_size):
        raise ValueError(f"ids out of range: {ids.tolist()}")
    if ids.is_floating_point() or ids.dtype == torch.bool:
        raise TypeError("ids must be integers")
    return (ids.unsqueeze(-1) == torch.arange(vocab_size)).float()


def _one_hot_of_the_statements_dtypes(ids, vocab_size):  # (int64, int32, int16) from the task text
    if ids.dtype not in (torch.int64, torch.int32, torch.int16):
        raise TypeError(f"ids must be integers, got {ids.dtype}")
    if ((ids < 0) | (ids >= vocab_size)).any():
        raise ValueError(f"ids {ids.tolist()} outside [0, {vocab_size})")
    return (ids.unsqueeze(-1) == torch.arange(vocab_size)).float()


def _neighbours_excluding_equal_rows(E, index, k):  # "itself" found by value: copies go too
    similarity = _learners_cosine(E)[index]
    similarity[(E == E[index]).all(dim=-1)] = float("-inf")
    return similarity.topk(k).indices


@pytest.mark.parametrize(
    ("task_id", "impl", "hint"),
    [
        ("ex01.one_hot", _one_hot_range_before_dtype, "test the dtype before the range"),
        ("ex01.one_hot", _one_hot_of_the_statements_dtypes, "torch.uint8 ids are integers too"),
        (
            "ex01.nearest_neighbours",
            _neighbours_excluding_equal_rows,
            "you excluded every row equal to E[index]",
        ),
    ],
)
def test_h01_slips_with_full_marks_fail_and_are_named(task_id, impl, hint, capsys):
    test_next_slips_fail_in_the_notebook_and_under_every_seed(task_id, impl, hint, capsys)
