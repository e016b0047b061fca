"""The grading pipeline: instant checks in a notebook, and batch grading from a shell."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import warnings
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch
from helpers import ROOT, SOLUTIONS, mistake_params

from course_lib.grading import all_tasks, check, check_result, get_task
from course_lib.grading.batch import exercise_of
from course_lib.grading.core import Case, Task, compare_values, judge, run_cases


def right(a, b):
    return (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(-2)


# ---------------------------------------------------------------- instant feedback in a notebook


def test_check_passes_a_right_answer_and_prints_it(capsys):
    assert check("ex00.batched_matmul", right) is None  # nothing for Jupyter to echo
    assert "✅ ex00.batched_matmul: passed all" in capsys.readouterr().out


def test_check_never_raises_whatever_the_learner_passes(capsys):
    def exits(a, b):
        raise SystemExit(1)

    for obj in (None, 42, "text", exits, lambda: None, lambda a, b: 1 / 0):
        check("ex00.batched_matmul", obj)
    check("ex99.nothing", right)
    out = capsys.readouterr().out
    assert out.count("❌") == 7
    assert "unknown task id 'ex99.nothing'" in out


def test_a_name_in_quotes_or_swapped_arguments_are_named():
    # before: check("ex00.batched_matmul", "batched_matmul") ran every case and failed each with
    # "'str' object is not callable"; check(fn, "ex00...") said "unknown task id <function ...>"
    result = check_result("ex00.batched_matmul", "batched_matmul")
    assert result.score == 0 and result.status == "missing", result
    assert "not a name in quotes: check('ex00.batched_matmul', batched_matmul)" in result.render()
    assert check_result(right, "ex00.batched_matmul") == (
        "❌ the task id comes first: check('ex00.batched_matmul', right)"
    )


def test_not_implemented_is_reported_as_such():
    def stub(a, b):
        raise NotImplementedError()

    result = check_result("ex00.batched_matmul", stub)
    assert result.status == "not implemented" and result.score == 0
    assert "not implemented yet" in result.feedback


def test_forbidden_calls_are_caught_however_they_are_imported():
    from torch import matmul as renamed

    for impl in (
        lambda a, b: a @ b,
        lambda a, b: renamed(a, b),
        lambda a, b: torch.einsum("...nk,...km->...nm", a, b),
        lambda a, b: torch.linalg.matmul(a, b),  # passed 4/4, found by a fresh reader
    ):
        result = check_result("ex00.batched_matmul", impl)
        assert result.status == "forbidden" and result.score == 0, result.feedback


def test_calling_the_course_reference_scores_zero_even_under_an_alias():
    from course_lib.tensor_basics import batched_matmul as mine

    result = check_result("ex00.batched_matmul", lambda a, b: mine(a, b))
    assert (
        result.status == "forbidden"
        and "course_lib.tensor_basics.batched_matmul" in result.feedback
    )


def test_a_known_mistake_gets_its_specific_hint():
    result = check_result(
        "ex00.pairwise_sq_distances",
        lambda x, y: ((x.unsqueeze(-2) - y.unsqueeze(-3)) ** 2).sum(-1).sqrt(),
    )
    assert result.status == "failed" and "no sqrt" in result.feedback


def test_partial_credit_counts_the_cases_passed():
    only_2d = lambda a, b: (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(-2) if a.dim() == 2 else a  # noqa: E731
    result = check_result("ex00.batched_matmul", only_2d)
    # the 2-D cases pass (the first, and the (3, 4) a with a batch of b), the batched ones fail
    assert result.status == "failed" and (result.passed, result.total) == (2, 5)
    assert result.score == pytest.approx(2 / 5)


def test_a_case_that_must_raise_is_judged_on_the_exception_type():
    class Demo(Task):
        id = "demo.f"
        reference = ""

        def cases(self, gen):
            return [Case("bad input", (torch.zeros(2),), raises=ValueError)]

    def raises_value_error(x):
        raise ValueError("x must be 2-D")

    task = Demo()
    cases = task.cases(None)
    assert judge(task, cases, run_cases(task, raises_value_error, cases)).status == "passed"
    silent = judge(task, cases, run_cases(task, lambda x: x, cases))
    assert (
        silent.status == "failed" and "expected your code to raise a ValueError" in silent.feedback
    )


def test_exercise_set_is_read_from_metadata_then_checks_then_file_name(tmp_path):
    nb = nbformat.v4.new_notebook()
    assert exercise_of(nb, tmp_path / "02_x.ipynb") == "ex02"
    nb.cells.append(nbformat.v4.new_code_cell('check("ex05.causal_mask", causal_mask)'))
    assert exercise_of(nb, tmp_path / "02_x.ipynb") == "ex05"
    nb.metadata["course"] = {"exercise": "ex07"}
    assert exercise_of(nb, tmp_path / "anything.ipynb") == "ex07"


def test_every_task_has_a_reference_that_passes_its_own_checks():
    from course_lib.grading import all_tasks
    from course_lib.grading.core import resolve

    for task in all_tasks():
        result = check_result(task.id, resolve(task.reference))
        # The reference is forbidden for learners, so it is reported as "forbidden"; run the
        # judge without the watcher instead to see that its outputs are right.
        cases = task.cases(torch.Generator().manual_seed(1))
        outcomes = []
        for case in cases:
            try:
                outcomes.append({"status": "ok", "value": task.call(resolve(task.reference), case)})
            except Exception as e:  # noqa: BLE001
                outcomes.append(
                    {
                        "status": "raised",
                        "types": [k.__name__ for k in type(e).__mro__],
                        "message": str(e),
                        "not_implemented": False,
                    }
                )
        assert judge(task, cases, {"outcomes": outcomes, "seen": []}).status == "passed", task.id
        assert result.status == "forbidden"


# ---------------------------------------------------------------- batch grading from a shell


def grade(paths, out, *extra):
    proc = subprocess.run(
        [sys.executable, "-m", "course_lib.grading", *map(str, paths), "--out", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=1500,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, json.loads((out / "scores.json").read_text())


# Every solution notebook is graded in batch (full marks, end to end, for every task). Of the
# untouched exercises, three are: an untouched stub takes the same path through the batch
# grader in every set, and these cover plain functions (00) and modules built by the task (03,
# 07). nbval runs all the untouched exercises, and the next test gives every task's stub its
# verdict in-process, so grading the other seven in batch would prove nothing more.
BATCH_EXERCISES = [
    ROOT / "exercises" / name
    for name in ("00_warmup.ipynb", "03_multi_head_attention.ipynb", "07_transformer_blocks.ipynb")
]


@pytest.mark.parametrize("task_id", [t.id for t in all_tasks()])
def test_an_untouched_stub_is_reported_not_implemented(task_id):
    from course_lib.grading.core import resolve

    def stub(*args, **kwargs):
        raise NotImplementedError()

    class StubModule(torch.nn.Module):  # what an exercise's class looks like, untouched
        def __init__(self, *args, **kwargs):
            super().__init__()
            raise NotImplementedError()

    reference = resolve(get_task(task_id).reference)
    result = check_result(task_id, StubModule if isinstance(reference, type) else stub)
    assert result.status == "not implemented" and result.score == 0, result.feedback
    assert "not implemented yet" in result.feedback


def test_solutions_get_full_marks_and_untouched_exercises_get_zero(tmp_path):
    assert all(path.exists() for path in BATCH_EXERCISES)
    stdout, rows = grade([ROOT / "solutions", *BATCH_EXERCISES], tmp_path)
    assert len(rows) == len(SOLUTIONS) + len(BATCH_EXERCISES)
    for row in rows:
        assert set(row) == {"submission", "score", "max_score", "error", "tasks"}
        assert row["tasks"], row
        for task_id, t in row["tasks"].items():
            assert set(t) == {"score", "max_score", "feedback"}
            get_task(task_id)
        if Path(row["submission"]).parent.name == "solutions":
            assert row["score"] == row["max_score"] > 0, row
            assert row["error"] is None, row
        else:
            assert row["score"] == 0, row
            assert all("not implemented yet" in t["feedback"] for t in row["tasks"].values()), row
            assert row["error"] is None, row
    csv_lines = (tmp_path / "scores.csv").read_text(encoding="utf-8-sig").splitlines()
    assert (
        # one row per learner: here every notebook is a learner of its own (no folders per learner)
        csv_lines[0].startswith("learner,score,max_score,") and len(csv_lines) == len(rows) + 1
    )
    assert "solutions/00_warmup.ipynb" in stdout and "wrote" in stdout
    assert all(Path(r["submission"]).parent.name in ("solutions", "exercises") for r in rows)


def test_a_cell_timeout_longer_than_the_submission_budget_is_refused(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "course_lib.grading",
            str(ROOT / "solutions" / "00_warmup.ipynb"),
            "--out",
            str(tmp_path),
            "--timeout",
            "60",
            "--cell-timeout",
            "90",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 2
    assert "--cell-timeout must be positive and at most --timeout (60 s), got 90" in proc.stderr
    assert not (tmp_path / "scores.json").exists()


# ---------------------------------------------------------------- a task that uses an earlier one

LEARNER_EX01 = """
import torch

def one_hot(ids, vocab_size):
    if ids.is_floating_point() or ids.dtype == torch.bool:
        raise TypeError("ids must be integers")
    if (ids < 0).any() or (ids >= vocab_size).any():
        raise ValueError(f"ids {ids.tolist()} outside [0, {vocab_size})")
    return (ids.unsqueeze(-1) == torch.arange(vocab_size)).{dtype}()

def embed(ids, table):
    return one_hot(ids, table.shape[0]){to_table} @ table

def embed_alone(ids, table):
    return (ids.unsqueeze(-1) == torch.arange(table.shape[0])).long() @ table
"""


def _learner(dtype="float", to_table=""):
    """A learner's ex01 namespace, as a notebook would hold it."""
    namespace: dict = {}
    exec(LEARNER_EX01.replace("{dtype}", dtype).replace("{to_table}", to_table), namespace)  # noqa: S102
    return namespace


def test_a_task_that_fails_through_a_broken_earlier_task_says_to_fix_that_first():
    broken = _learner(dtype="long")  # int64 one-hot vectors: one_hot fails, embed raises
    assert check_result("ex01.one_hot", broken["one_hot"]).status == "failed"
    result = check_result("ex01.embed", broken["embed"])
    assert result.status == "failed"
    assert "This uses your one_hot, which fails its own checks: fix one_hot first." in (
        result.feedback
    )
    # Not said when the earlier task passes, or when this task does not call it.
    own_bug = check_result("ex01.embed", _learner(to_table=" * 2")["embed"])
    assert own_bug.status == "failed" and "fix one_hot" not in own_bug.feedback, own_bug.feedback
    alone = check_result("ex01.embed", broken["embed_alone"])
    assert alone.status == "failed" and "fix one_hot" not in alone.feedback


def test_fix_first_stands_alone_without_a_hint_for_a_mistake_not_made():
    # before: a merge_pair that merges nothing gave bpe_encode, whose own code is right, the
    # hint of a mistake in bpe_encode ('keep its result, ids = merge_pair(...)')
    namespace: dict = {}
    exec(  # noqa: S102
        "def merge_pair(ids, pair, new_id):\n"
        "    return list(ids)\n"
        "def bpe_encode(ids, merges):\n"
        "    for pair, new_id in merges.items():\n"
        "        ids = merge_pair(ids, pair, new_id)\n"
        "    return ids\n",
        namespace,
    )
    assert check_result("ex01.merge_pair", namespace["merge_pair"]).status == "failed"
    result = check_result("ex01.bpe_encode", namespace["bpe_encode"])
    assert "fix merge_pair first" in result.feedback, result.feedback
    assert "Hint:" not in result.feedback and "keep its result" not in result.feedback, (
        result.feedback
    )


def test_an_earlier_task_not_implemented_is_named_too():
    namespace = _learner()
    exec("def one_hot(ids, vocab_size):\n    raise NotImplementedError()", namespace)  # noqa: S102
    result = check_result("ex01.embed", namespace["embed"])
    assert result.status == "not implemented"
    assert "This uses your one_hot, which is not implemented yet: write one_hot first." in (
        result.feedback
    )


def test_a_module_task_points_to_the_learners_split_heads():
    from course_lib.multihead import MultiHeadAttention

    namespace: dict = {"MultiHeadAttention": MultiHeadAttention}
    exec(  # noqa: S102
        "import torch\n"
        "from course_lib import multihead\n"
        "def split_heads(x, num_heads):\n"  # no transpose: mixes the tokens
        "    b, n, d = x.shape\n"
        "    return x.reshape(b, num_heads, n, d // num_heads)\n"
        "merge_heads = multihead.merge_heads\n"
        "class Mine(torch.nn.Module):\n"
        "    def __init__(self, d_model, num_heads):\n"
        "        super().__init__()\n"
        "        self.num_heads = num_heads\n"
        "        for name in ('q_proj', 'k_proj', 'v_proj', 'out_proj'):\n"
        "            setattr(self, name, torch.nn.Linear(d_model, d_model))\n"
        "    def forward(self, query, key, value, mask=None):\n"
        "        q = split_heads(self.q_proj(query), self.num_heads)\n"
        "        k = split_heads(self.k_proj(key), self.num_heads)\n"
        "        v = split_heads(self.v_proj(value), self.num_heads)\n"
        "        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5\n"
        "        if mask is not None:\n"
        "            scores = scores.masked_fill(~mask.unsqueeze(1) if mask.dim() == 3 else ~mask,"
        " float('-inf'))\n"
        "        weights = scores.softmax(-1)\n"
        "        return self.out_proj(merge_heads(weights @ v)), weights\n",
        namespace,
    )
    result = check_result("ex03.MultiHeadAttention", namespace["Mine"])
    assert result.status == "failed"
    assert "This uses your split_heads, which fails its own checks: fix split_heads first." in (
        result.feedback
    )


def test_the_batch_grader_names_the_earlier_task_too(tmp_path):
    # The harness runs in the learner's namespace (here in this process, as a kernel would);
    # the grader judges the tasks in order and passes the earlier results on.
    from course_lib.grading import batch, harness

    namespace = _learner(dtype="long")
    results = {}
    for task_id in ("ex01.one_hot", "ex01.embed"):
        task = get_task(task_id)
        cases = task.cases(torch.Generator().manual_seed(5))
        torch.save(cases, tmp_path / "cases.pt")
        harness.run_task(namespace, task_id, str(tmp_path / "cases.pt"), str(tmp_path / "out.pt"))
        run = torch.load(tmp_path / "out.pt", weights_only=True)["run"]
        results[task_id] = batch._judge_task(task, cases, run, None, results)
    assert results["ex01.one_hot"].status == "failed"
    assert "fix one_hot first" in results["ex01.embed"].feedback


# ---------------------------------------------------------------- what a score means


def test_a_partial_score_says_what_scores_are_and_why_the_grader_may_differ(capsys):
    from course_lib.grading.batch import format_table
    from course_lib.grading.core import SCORE_NOTE

    assert "fraction of checks passed" in SCORE_NOTE and "fresh random inputs" in SCORE_NOTE
    only_2d = lambda a, b: right(a, b) if a.dim() == 2 else a  # noqa: E731
    check("ex00.batched_matmul", only_2d)
    check("ex00.batched_matmul", right)
    failed, passed = capsys.readouterr().out.strip().split("\n   ")[-1].split("\n")
    assert failed == f"({SCORE_NOTE})"  # one line, under the partial score only
    assert passed.startswith("✅") and SCORE_NOTE not in passed
    learner = {"learner": "ada", "score": 1.0, "max_score": 3.0, "notes": "ex00.a: " + "x" * 200}
    table = format_table([learner]).splitlines()
    assert table[-1] == SCORE_NOTE
    assert table[2].startswith("ada ") and "1 / 3  ex00.a: xxx" in table[2]
    assert table[2].endswith("…") and len(table[2]) < 150  # scores.csv has the notes in full


# ---------------------------------------------------------------- feedback on a crash


@pytest.mark.parametrize("task_id, wrong, hint", mistake_params(*[t.id for t in all_tasks()]))
def test_every_listed_mistake_of_every_task_fails_with_its_own_hint(task_id, wrong, hint):
    # the one test of the hint registry: a listed mistake whose hint could never show is a defect
    result = check_result(task_id, wrong)
    assert not isinstance(result, str), result
    assert result.status == "failed" and hint in result.feedback, result.feedback


# A hint names the mistake AND says what to do (EXERCISES.md). A necessary mark of the second
# part, simple on purpose: an imperative at the start of a clause (use, pass, divide, ...), a
# must/should/instead/", not", or a second clause after ';' or ':' that states the right form.
# A bare description fails ("that is the first token of each sequence"); whether the fix it
# gives is right is each mistake's own test's business, not this one's.
_DO = (
    r"add|append|apply|average|build|call|centre|change|check|choose|clamp|clip|clone|compare|"
    r"compute|convert|copy|count|create|cut|divide|draw|drop|exclude|feed|fill|flatten|give|guard|"
    r"keep|leave|let|make|mark|mask|move|multiply|name|normalise|pass|put|raise|read|record|"
    r"register|remove|repeat|replace|reshape|restore|return|rotate|run|scale|set|shift|skip|slice|"
    r"sort|split|start|stop|subtract|sum|swap|take|test|transpose|turn|unsqueeze|use|write|zero"
)
_SAYS_WHAT_TO_DO = re.compile(
    rf"(?:^|[;:.,(]\s*|\b(?:then|so|and|or|instead|only)\s+)(?:{_DO})\b"
    r"|\b(?:must|should|needs?|belongs?|goes|instead of|rather than)\b|, not |\(not "
    r"|[;:]\s+\S|\.\s+[A-Z]",
    re.I,
)


def test_every_hint_says_what_to_do():
    # #h11: these hints said only what was wrong; each now ends with what to do instead
    for before in (
        "that is the first token of each sequence",
        "the scores are not divided by sqrt(d_k)",
        "the final norm's weight (gamma, model.norm.weight) is missing",
        "the decoder input starts with <bos> and has the same length as the targets",
    ):
        assert not _SAYS_WHAT_TO_DO.search(before), before
    silent = [
        f"{task.id} {name}: {hint}"
        for task in all_tasks()
        for name, hint in task.mistake_table.items()
        if not _SAYS_WHAT_TO_DO.search(hint)
    ]
    assert not silent, "hints that do not say what to do:\n" + "\n".join(silent)


def _softmax_without_keepdim(x, dim=-1):
    e = (x - x.amax(dim=dim, keepdim=True)).exp()
    return e / e.sum(dim)


def _split_heads_with_float_d_head(x, num_heads):
    if x.shape[-1] % num_heads:
        raise ValueError("d_model must be divisible by num_heads")
    batch, seq, d_model = x.shape
    d_head = d_model / num_heads
    return x.view(batch, seq, num_heads, d_head).permute(0, 2, 1, 3)


def _perplexity_on_3d_logits(logits, targets):
    if logits.shape[:-1] != targets.shape:
        raise ValueError("targets must be logits.shape[:-1]")
    return torch.nn.functional.cross_entropy(logits, targets).exp()


def _embed_with_float32_one_hot(ids, table):
    if (ids < 0).any() or (ids >= table.shape[0]).any():
        raise ValueError("an id is out of range")
    return torch.nn.functional.one_hot(ids, table.shape[0]).float() @ table


def _last_token_at_length(x, lengths):  # found by a fresh reader: a raw IndexError, no hint
    return x[torch.arange(len(lengths)), lengths]


@pytest.mark.parametrize(
    "task_id, learner, words",
    [
        ("ex02.softmax", _softmax_without_keepdim, "keepdim=True"),
        ("ex03.split_heads", _split_heads_with_float_d_head, "d_model // num_heads"),
        ("ex09.perplexity", _perplexity_on_3d_logits, "flatten the positions"),
        ("ex01.embed", _embed_with_float32_one_hot, ".to(table.dtype)"),
        ("ex00.last_token", _last_token_at_length, "ends at index L - 1"),
    ],
)
def test_a_crash_gets_the_hint_of_the_mistake_that_raises_the_same_error(task_id, learner, words):
    # written differently from the listed mistakes (view, permute, F.one_hot, .exp()): what
    # matches is the error they raise on the failing case, not the code
    result = check_result(task_id, learner)
    assert result.status == "failed", result.feedback
    assert "your code raised" in result.feedback and "Hint:" in result.feedback, result.feedback
    assert words in result.feedback, result.feedback


def test_a_crash_no_listed_mistake_explains_gets_no_hint():
    def crashes(x, dim=-1):
        raise RuntimeError("something else entirely")

    feedback = check_result("ex02.softmax", crashes).feedback
    assert "your code raised RuntimeError: something else entirely. To see" in feedback, feedback
    # no hint, but what to do: the check shows no traceback, so say how to get one (#h11)
    assert "Hint:" not in feedback and "in a cell of its own" in feedback, feedback


def test_values_that_differ_are_shown_where_with_both_entries():
    # before (#h11): "your result differs from the expected values (largest difference 0.0486)"
    # and "in 9 of 25 entries", with no entry to look at; now the entry, yours and the expected
    def scaled(a, b):
        return (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(-2) * 1.01

    feedback = check_result("ex00.batched_matmul", scaled).feedback
    assert re.search(
        r"largest difference [\d.]+, at \[\d, \d\]: yours -?[\d.]+, expected", feedback
    )

    def shifted(n):
        return torch.ones(n, n, dtype=torch.bool).tril(-2)

    feedback = check_result("ex05.causal_mask", shifted).feedback
    assert "in 9 of 25 entries (the first at [0, 0]: yours False, expected True)" in feedback
    assert compare_values(torch.tensor(1.5), torch.tensor(1.0)) == (
        "your result differs from the expected values (largest difference 0.5, yours 1.5, "
        "expected 1)"
    )


def test_showing_where_values_differ_imports_nothing():
    # torch.unravel_index imports sympy on its first call: inside a run of checks (the mutation
    # tool's) that left sympy half-imported, and every attention task after it then crashed
    code = (
        "import sys, torch; from course_lib.grading.core import compare_values; "
        "compare_values(torch.ones(2, 3), torch.zeros(2, 3)); print('sympy' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.stdout.strip() == "False", proc.stdout + proc.stderr


def test_a_number_where_a_tensor_is_due_says_what_to_return():
    # before (#h11): "your result should be a tensor of shape (), got float", and no more
    def as_float(logits, targets):
        nll = -logits.log_softmax(-1).gather(-1, targets[..., None]).mean()
        return math.exp(nll.item())

    feedback = check_result("ex09.perplexity", as_float).feedback
    assert "got float: return a tensor (torch.exp" in feedback, feedback
    assert compare_values(torch.tensor(2.0), 2.5).endswith(
        "return a Python number, e.g. its .item()"
    )


# ---------------------------------------------------------------- code that changes its inputs


def _centred_distances(x, y):  # right values, but it shifts the caller's x and y
    c = x.mean()
    x -= c
    y -= c
    return ((x.unsqueeze(-2) - y.unsqueeze(-3)) ** 2).sum(-1)


def _shift_by_filling(targets, bos_id):  # its "expected" was computed on the filled targets
    targets.fill_(bos_id)
    return targets.clone()


def _matmul_unsqueezing_a(a, b):  # the reference could not run on the changed a
    a.unsqueeze_(-1)
    return (a * b.unsqueeze(-3)).sum(-2)


@pytest.mark.parametrize(
    "task_id, learner, names",
    [
        ("ex00.pairwise_sq_distances", _centred_distances, "`x` and `y`"),
        ("ex08.shift_right", _shift_by_filling, "`targets`"),
        ("ex00.batched_matmul", _matmul_unsqueezing_a, "`a`"),
    ],
)
def test_code_that_changes_its_inputs_in_place_fails_and_is_told_which(task_id, learner, names):
    # each passed, or was blamed on the checker, while the grader computed the expected answer
    # on the inputs the learner's code had already changed
    result = check_result(task_id, learner)
    assert result.status == "failed", result
    assert f"your code changed its input {names} in place" in result.feedback, result.feedback


def test_the_batch_grader_sees_an_input_changed_in_place_too(tmp_path):
    from course_lib.grading import batch, harness

    task = get_task("ex00.pairwise_sq_distances")
    cases = task.cases(torch.Generator().manual_seed(5))
    torch.save(cases, tmp_path / "cases.pt")
    namespace = {"pairwise_sq_distances": _centred_distances}
    harness.run_task(namespace, task.id, str(tmp_path / "cases.pt"), str(tmp_path / "out.pt"))
    run = torch.load(tmp_path / "out.pt", weights_only=True)["run"]
    result = batch._judge_task(task, cases, run, None, {})
    assert result.passed == 0 and "changed its input `x` and `y` in place" in result.feedback


def test_inputs_that_are_one_tensor_stay_one_tensor_for_the_learner():
    # self-attention passes one x as query, key and value: the copies keep that identity
    from course_lib.grading.core import _own_copy

    x = torch.randn(2, 3)
    own = _own_copy(Case("x three times", (x, x, x), {"also": x}))
    assert own.args[0] is own.args[1] is own.args[2] is own.kwargs["also"]
    assert own.args[0] is not x and torch.equal(own.args[0], x)


@pytest.mark.parametrize(
    "task_id, learner",
    [
        ("ex01.one_hot", lambda ids, n: torch.ops.aten.one_hot(ids.long(), n).float()),
        ("ex02.softmax", lambda x, dim=-1: torch.ops.aten._softmax(x, dim, False)),
        ("ex02.softmax", lambda x, dim=-1: torch.ops.aten.softmax.int(x, dim)),
    ],
)
def test_pytorchs_internal_operators_called_directly_are_not_allowed(task_id, learner):
    # torch.ops.aten.* bypassed the watch on the forbidden functions (found by a fresh reader)
    result = check_result(task_id, learner)
    assert result.status == "forbidden", result.feedback
    assert "one of PyTorch's internal operators" in result.feedback


def test_pytorchs_own_python_code_may_use_its_operators():
    # torch.nn.grad.conv1d_input is Python that calls torch.ops.aten.convolution_backward:
    # only the operators the learner's own code calls count
    def with_torch_internals(x, dim=-1):
        torch.nn.grad.conv1d_input((1, 1, 3), torch.ones(1, 1, 1), torch.ones(1, 1, 3))
        e = torch.exp(x - x.amax(dim=dim, keepdim=True))
        return e / e.sum(dim=dim, keepdim=True)

    assert check_result("ex02.softmax", with_torch_internals).status == "passed"


def test_check_cells_leave_the_work_to_the_batch_grader(capsys, monkeypatch):
    # in the grader's kernel a check cell only says so: the grader runs every task on its own
    # hidden cases afterwards (the notebook's checks were the same work done twice)
    monkeypatch.setenv("COURSE_BATCH_GRADING", "1")

    def boom(*args):
        raise AssertionError("a check cell ran the learner's code in the batch grader")

    check("ex02.softmax", boom)
    assert "checked by the batch grader" in capsys.readouterr().out


# ------------------------------------------------- the state a learner's earlier cells left on


def learner_softmax(x, dim=-1):
    e = (x - x.amax(dim=dim, keepdim=True)).exp()
    return e / e.sum(dim=dim, keepdim=True)


def learner_softmax_seeding(x, dim=-1):
    torch.manual_seed(0)  # "for reproducibility": the learner's next cells must not be reseeded
    return learner_softmax(x, dim)


class LearnerFeedForward(torch.nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu", bias=True):
        super().__init__()
        self.activation = activation
        self.linear1 = torch.nn.Linear(d_model, d_ff, bias=bias)
        self.dropout = torch.nn.Dropout(dropout)
        self.linear2 = torch.nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x):
        h, act = self.linear1(x), self.activation
        acts = {
            "relu": h.relu,
            "gelu": lambda: torch.nn.functional.gelu(h),
            "relu2": lambda: h.relu() ** 2,
        }
        acts["gelu_tanh"] = lambda: torch.nn.functional.gelu(h, approximate="tanh")
        if act not in acts:
            raise ValueError(f"unknown activation {act!r}")
        return self.linear2(self.dropout(acts[act]()))


NOTEBOOK_STATES = {  # what a learner's earlier cell leaves on: the checks must not mind it
    "float64 default": lambda: torch.set_default_dtype(torch.float64),
    "grad off": lambda: torch.set_grad_enabled(False),
    "seeded just before": lambda: torch.manual_seed(1234),
    # l14: 'the checker could not run (Cannot copy out of meta tensor; no data!)' before
    "meta default device": lambda: torch.set_default_device("meta"),
    "cpu default device": lambda: torch.set_default_device("cpu"),
}


@pytest.mark.parametrize("state", NOTEBOOK_STATES)
@pytest.mark.parametrize(
    "task_id, learner",
    [
        ("ex02.softmax", learner_softmax),
        ("ex02.softmax", learner_softmax_seeding),
        ("ex07.FeedForward", LearnerFeedForward),
    ],
)
def test_a_notebooks_state_fails_no_right_answer_and_the_check_leaves_it_as_it_was(
    state, task_id, learner
):
    # before: grad off failed softmax's gradient case ('your result carries no gradients'), a
    # float64 default failed FeedForward's dropout case (mat1 and mat2 must have the same dtype,
    # with a dropout hint), a module's init drew from the learner's global RNG (so the next
    # cell's torch.randn changed)
    saved = torch.get_default_dtype(), torch.is_grad_enabled()
    try:
        NOTEBOOK_STATES[state]()
        before = torch.get_default_dtype(), torch.is_grad_enabled(), torch.get_default_device()
        rng = torch.get_rng_state()
        result = check_result(task_id, learner)
        after = torch.get_default_dtype(), torch.is_grad_enabled(), torch.get_default_device()
        rng_after = torch.get_rng_state()
    finally:
        torch.set_default_dtype(saved[0])
        torch.set_grad_enabled(saved[1])
        torch.set_default_device(None)
    assert result.status == "passed" and result.score == result.max_score, result.feedback
    assert before == after and torch.equal(rng, rng_after)


def _softmax_leaving_grad_off(x, dim=-1):  # for `with torch.no_grad():`, never switched back
    torch.set_grad_enabled(False)
    return learner_softmax(x, dim)


def _softmax_leaving_float64(x, dim=-1):  # "for precision": every later tensor is float64
    torch.set_default_dtype(torch.float64)
    return learner_softmax(x, dim).to(x.dtype)


class _FeedForwardLeavingGradOff(LearnerFeedForward):
    def forward(self, x):
        torch.set_grad_enabled(False)
        return super().forward(x)


@pytest.mark.parametrize(
    "task_id, learner, words",
    [
        ("ex02.softmax", _softmax_leaving_grad_off, "switched gradients off"),
        ("ex02.softmax", _softmax_leaving_float64, "default dtype to torch.float64"),
        ("ex07.FeedForward", _FeedForwardLeavingGradOff, "switched gradients off"),
    ],
)
@pytest.mark.parametrize("seed", [None, 3])
def test_global_state_left_behind_fails_with_its_name_and_is_put_back(
    task_id, learner, words, seed
):
    # before: full marks; the check's own state (course_state) undid the change, but in the
    # learner's notebook every later cell would run without gradients, or in float64
    task = get_task(task_id)
    if seed is None:
        result = check_result(task_id, learner)
    else:
        cases = task.cases(torch.Generator().manual_seed(seed))
        result = judge(task, cases, run_cases(task, learner, cases))
    assert result.status == "failed" and result.score < result.max_score, result.feedback
    assert words in result.feedback, result.feedback
    assert torch.is_grad_enabled() and torch.get_default_dtype() == torch.float32


def test_a_check_run_in_inference_mode_still_back_propagates():
    with torch.inference_mode():  # before: softmax's gradient case failed ('carries no gradients')
        result = check_result("ex02.softmax", learner_softmax)
    assert result.status == "passed", result.feedback


def test_warnings_made_errors_in_the_notebook_fail_no_right_answer():
    def last_token(x, lengths):  # torch.tensor of a tensor warns ('To copy construct ...')
        return x[torch.arange(x.shape[0]), torch.tensor(lengths) - 1]

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # before: 0/3, 'your code raised UserWarning: ...'
        result = check_result("ex00.last_token", last_token)
        assert warnings.filters[0][0] == "error"
    assert result.status == "passed", result.feedback


def test_anomaly_detection_in_the_notebook_fails_no_right_answer():
    def masked_attention(q, k, v, mask):  # a fully masked row's NaN weights zeroed after softmax
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1).nan_to_num()
        return weights @ v, weights

    with torch.autograd.detect_anomaly():  # before: 7/9, 'SoftmaxBackward0 returned nan values'
        result = check_result("ex05.masked_attention", masked_attention)
        assert torch.is_anomaly_enabled()
    assert result.status == "passed", result.feedback


def test_a_module_built_from_the_class_is_told_to_pass_the_class():
    result = check_result("ex07.FeedForward", LearnerFeedForward(8, 32))
    assert result.status == "failed" and 'pass the class itself, check("ex07.FeedForward"' in (
        result.feedback
    )


# ---------------------------------- g13: right answers the gradient judging must not fail


def _rope_tables_in_numpy(x, positions=None):
    """RoPE with its angle table made in NumPy from the positions (data, never learned)."""
    seq, d = x.shape[-2], x.shape[-1]
    if d % 2:
        raise ValueError(f"the last dimension must be even, got {d}")
    pos = np.arange(seq) if positions is None else positions.numpy()
    angles = torch.from_numpy(np.outer(pos, 10000.0 ** (-np.arange(0, d, 2) / d)))
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), -1).flatten(-2)


def _softmax_constant_on_one_entry(x, dim=-1):
    """A right softmax that returns ones for an axis of length 1 (constant: gradient zero)."""
    if x.shape[dim] == 1:
        return torch.ones_like(x)
    e = (x - x.amax(dim=dim, keepdim=True)).exp()
    return e / e.sum(dim=dim, keepdim=True)


@pytest.mark.parametrize(
    "task_id, learner",
    [
        # float positions were made to require grad, so positions.numpy() raised in the
        # gradient pass: 10/12 with 'an in-place operation changed a tensor' (none was)
        ("ex04.apply_rope", _rope_tables_in_numpy),
        # no gradient where the reference's is zero was told 'no gradient reaches x': 12/13
        ("ex02.softmax", _softmax_constant_on_one_entry),
    ],
)
def test_g13_right_answers_pass_the_gradient_judging(task_id, learner):
    result = check_result(task_id, learner)
    assert result.status == "passed", result.feedback
    task = get_task(task_id)
    for seed in (1, 2):  # and under hidden seeds
        cases = task.cases(torch.Generator().manual_seed(seed))
        assert judge(task, cases, run_cases(task, learner, cases)).status == "passed", seed


def test_g13_one_tensor_under_several_names_is_named_by_all_of_them():
    # a self-attention case passes x as query, key and value: a detached value was told that
    # the gradient 'with respect to the input query' is wrong
    from course_lib.grading.core import with_gradients

    x, w = torch.randn(3, 4), torch.randn(4, 4)
    result = with_gradients(None, lambda t: t[0] @ w + t[1] + t[2].detach(), dict(q=x, k=x, v=x))
    assert list(result["__gradients__"]) == ["q, k and v (one tensor in this case)"]
    modules = with_gradients(
        None, lambda t: t[0] * t[1], {"the input key": x, "the input value": x}
    )
    assert list(modules["__gradients__"]) == ["the input key and value (one tensor in this case)"]


def _softmax_in_numpy(x, dim=-1):
    a = np.asarray(x)  # np.asarray of a tensor that requires grad raises
    e = np.exp(a - a.max(axis=dim, keepdims=True))
    return torch.from_numpy(e / e.sum(axis=dim, keepdims=True))


def _softmax_shift_under_inference_mode(x, dim=-1):
    with torch.inference_mode():  # an inference tensor, which backward cannot save
        scale = torch.ones_like(x)
    e = (x - x.amax(dim=dim, keepdim=True)).exp() * scale
    return e / e.sum(dim=dim, keepdim=True)


@pytest.mark.parametrize(
    "learner, words",
    [
        (_softmax_in_numpy, "NumPy (.numpy(), np.array, np.asarray) works outside PyTorch"),
        (_softmax_shift_under_inference_mode, "made under torch.inference_mode() cannot"),
        # the listed hint after the gradient message came after '..'
        (lambda x, dim=-1: _softmax_constant_on_one_entry(x, dim).detach(), "cut them"),
    ],
)
def test_g13_a_gradient_pass_that_cannot_run_is_told_its_cause(learner, words):
    # the first two were told 'an in-place operation (+=, *=, ...) changed a tensor': none did
    result = check_result("ex02.softmax", learner)
    assert result.status == "failed" and words in result.feedback, result.feedback
    assert "in-place" not in result.feedback and ".. " not in result.feedback, result.feedback


def test_a_nan_gradient_is_named_as_nan_not_as_a_cut_graph():
    # l14: before, 'its gradient with respect to q is not (largest difference nan) ... Hint: a
    # .detach(), torch.no_grad() or .data on part of the computation', a cause not written
    def learner(q, k, v, slope):  # the bias put in through log(weights): 0 weights, 1/0 grads
        i, j = torch.arange(q.shape[-2])[:, None], torch.arange(k.shape[-2])[None, :]
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1)
        weights = torch.softmax(weights.log() - slope * (i - j).abs().to(q.dtype), -1)
        return weights @ v, weights

    result = check_result("ex02.distance_biased_attention", learner)
    assert result.status == "failed", result.feedback
    assert "holds NaN where the right one is finite" in result.feedback, result.feedback
    assert "log(w) of a weight that is 0" in result.feedback and ".detach()" not in result.feedback


def _causal_mask_on_the_gpu(n):
    positions = torch.arange(n, device="cuda")  # a Colab learner's habit
    return positions.unsqueeze(1) >= positions.unsqueeze(0)


def test_code_that_names_the_gpu_is_told_to_take_the_device_from_its_inputs():
    result = check_result("ex05.causal_mask", _causal_mask_on_the_gpu)
    if torch.cuda.is_available():  # its output comes back to the CPU: a right mask is right
        assert result.score == result.max_score, result.feedback
    else:  # before: "your code raised AssertionError: Torch not compiled with CUDA enabled. To
        # see the line that fails, ...", which says nothing of why a Colab notebook fails here
        assert "not compiled with CUDA enabled. Hint: your code names a device" in result.feedback
        assert "model.to(device)" in result.feedback
