"""ex11 (inside the model): the references and the solution notebook's functions pass, every
named mistake fails with its hint, the solutions get full marks and the untouched exercise
zero in the batch grader, and an ablation that is never undone loses points."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import nbformat
import pytest
import torch

from course_lib import inspection
from course_lib.grading import check_result
from course_lib.grading.core import get_task, judge, run_cases

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = "11_inside_the_model.ipynb"
TASKS = [
    "ex11.attention_patterns",
    "ex11.induction_scores",
    "ex11.ablate_head",
    "ex11.direct_logit_attribution",
    "ex11.patch_head",
]


def _copy(fn):
    """The reference's logic under a code object of its own (the grader does not see it)."""
    fn = getattr(fn, "__wrapped__", fn)
    fn = getattr(fn, "__wrapped__", fn)
    code = fn.__code__.replace(co_name=fn.__name__ + "_copy")
    return types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


@pytest.fixture(scope="module")
def solution():
    """The solution notebook's functions, defined as a learner's notebook defines them."""
    nb = nbformat.read(ROOT / "solutions" / NOTEBOOK, as_version=4)
    namespace: dict = {}
    for cell in nb.cells:
        if (
            cell.cell_type == "code"
            and "check(" not in cell.source
            and "course-setup" not in (cell.metadata.get("tags", []))
        ):
            exec(compile(cell.source, NOTEBOOK, "exec"), namespace)
    return namespace


@pytest.mark.parametrize("task_id", TASKS)
def test_the_solution_passes(solution, task_id):
    result = check_result(task_id, solution[task_id.split(".")[1]])
    assert result.status == "passed", result.feedback


def test_the_reference_logic_passes():
    # the other references call course_lib helpers that their tasks do not allow
    result = check_result("ex11.attention_patterns", _copy(inspection.attention_patterns))
    assert result.status == "passed", result.feedback


@pytest.mark.parametrize("seed", [1, 123])
@pytest.mark.parametrize("task_id", TASKS)
def test_the_solution_passes_the_hidden_cases(solution, task_id, seed):
    # other seeds put the hand-built circuits' heads elsewhere
    task = get_task(task_id)
    cases = task.cases(torch.Generator().manual_seed(seed))
    result = judge(task, cases, run_cases(task, solution[task.name], cases))
    assert result.status == "passed", result.feedback


@pytest.mark.parametrize("task_id", TASKS)
def test_calling_the_reference_is_forbidden(task_id):
    reference = getattr(inspection, task_id.split(".")[1])
    assert check_result(task_id, reference).status == "forbidden"


@pytest.mark.parametrize("task_id", TASKS)
def test_every_named_mistake_fails_with_its_hint(task_id):
    task = get_task(task_id)
    for wrong, hint in task.mistakes():
        result = check_result(task_id, wrong)
        assert result.status == "failed", (task_id, hint)
        assert hint in result.feedback, (task_id, hint, result.feedback)


def test_an_ablation_left_in_place_is_caught_even_though_its_number_is_right():
    task = get_task("ex11.ablate_head")
    wrong = task.mistakes()[0][0]
    cases = task.cases(torch.Generator().manual_seed(0))
    outcome = run_cases(task, wrong, cases[:1])["outcomes"][0]
    want = task.expected(cases[0])
    assert outcome["value"][0] == pytest.approx(want[0], abs=1e-5)  # the number is right
    assert outcome["value"][1] != "unchanged"
    assert "left the model changed" in check_result("ex11.ablate_head", wrong).feedback


def test_an_ablation_by_zeroing_value_rows_and_restoring_them_passes():
    def ablate_by_values(model, ids, layer, head):
        attn = model.layers[layer].self_attn
        d_head = attn.d_model // attn.num_heads
        rows = slice(head * d_head, (head + 1) * d_head)
        saved = attn.v_proj.weight.detach().clone()

        def loss():
            with torch.no_grad():
                logits = model(ids)
            return torch.nn.functional.cross_entropy(
                logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()
            ).item()

        clean = loss()
        try:
            with torch.no_grad():
                attn.v_proj.weight[rows] = 0.0  # no value, no output: the same ablation
            return loss() - clean
        finally:
            with torch.no_grad():
                attn.v_proj.weight.copy_(saved)

    result = check_result("ex11.ablate_head", ablate_by_values)
    assert result.status == "passed", result.feedback


def test_the_detector_is_graded_on_circuits_whose_heads_move_with_the_seed():
    from course_lib.grading.tasks.ex11 import circuit_heads

    placements = {circuit_heads(seed) for seed in range(20)}
    assert len(placements) > 5
    task = get_task("ex11.induction_scores")
    for seed in (0, 1):
        case = task.cases(torch.Generator().manual_seed(seed))[0]
        spec = case.data["model"]
        _, induction = circuit_heads(spec["seed"], spec["layers"], spec["heads"])
        scores, state = task.expected(case)
        assert state == "unchanged"
        assert tuple((scores == scores.max()).nonzero()[0].tolist()) == induction


def test_solutions_get_full_marks_and_the_untouched_exercise_zero(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "course_lib.grading",
            str(ROOT / "solutions" / NOTEBOOK),
            str(ROOT / "exercises" / NOTEBOOK),
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {
        Path(r["submission"]).parent.name: r
        for r in json.loads((tmp_path / "scores.json").read_text())
    }
    assert set(rows["solutions"]["tasks"]) == set(TASKS)
    assert rows["solutions"]["score"] == rows["solutions"]["max_score"] == len(TASKS)
    assert rows["exercises"]["score"] == 0
    assert all("not implemented yet" in t["feedback"] for t in rows["exercises"]["tasks"].values())


# Wrong answers that an outside learner found getting full marks: each now loses points in the
# notebook's own check (check_result uses its seed) with a hint that names it.


def _patterns_without_finally(model, ids):
    patterns, handles = [], []
    for layer in model.layers:
        handles.append(
            layer.self_attn.register_forward_pre_hook(
                lambda m, a, k: (a, {**k, "need_weights": True}), with_kwargs=True
            )
        )
        handles.append(layer.self_attn.register_forward_hook(lambda m, a, o: patterns.append(o[1])))
    with torch.no_grad():
        model(ids)
    for handle in handles:  # never reached when the forward raises
        handle.remove()
    return torch.stack(patterns)


def _patterns_by_the_record_flag(model, ids):
    for layer in model.layers:
        layer.record_attention = True
    with torch.no_grad():
        model(ids)
    return torch.stack([layer.attention for layer in model.layers])


def _patterns_by_the_record_flag_switched_back(model, ids):
    """The layers' own recording, switched on and back off: the flag is as it was, but each
    layer keeps the weights it stored (found by the outside learner: full marks before)."""
    for layer in model.layers:
        layer.record_attention = True
    try:
        with torch.no_grad():
            model(ids)
        return torch.stack([layer.attention for layer in model.layers])
    finally:
        for layer in model.layers:
            layer.record_attention = False


def _patterns_in_eval_mode(solution):
    def attention_patterns(model, ids):
        model.eval()
        return solution["attention_patterns"](model, ids)

    return attention_patterns


def _patterns_in_eval_mode_put_back_after_success(solution):
    """model.eval(), then the mode put back, but not in a `finally`: a forward that raises
    leaves a model that came in training mode in eval mode (full marks before: no model in
    training mode was given a forward that raises)."""

    def attention_patterns(model, ids):
        was = model.training
        model.eval()
        result = solution["attention_patterns"](model, ids)
        model.train(was)
        return result

    return attention_patterns


def _ablate_in_eval_mode(solution):
    def ablate_head(model, ids, layer, head):
        model.eval()
        return solution["ablate_head"](model, ids, layer, head)

    return ablate_head


def _attribution_with_eps_fixed(model, ids):
    """The solution's attribution with the norm's eps written as 1e-5."""
    original = model.norm.eps
    embeddings, z_all, ff_all, final = [], [], [], []
    d_head = model.config.d_model // model.config.num_heads
    handles = [model.layers[0].register_forward_pre_hook(lambda m, a: embeddings.append(a[0]))]
    for layer in model.layers:
        handles.append(
            layer.self_attn.out_proj.register_forward_pre_hook(lambda m, a: z_all.append(a[0]))
        )
        handles.append(layer.feed_forward.register_forward_hook(lambda m, a, o: ff_all.append(o)))
    handles.append(model.norm.register_forward_pre_hook(lambda m, a: final.append(a[0])))
    try:
        with torch.no_grad():
            model(ids)
    finally:
        for handle in handles:
            handle.remove()
    parts = [embeddings[0]]
    for layer, z, ff in zip(model.layers, z_all, ff_all, strict=True):
        w_o = layer.self_attn.out_proj.weight
        for h in range(model.config.num_heads):
            cols = slice(h * d_head, (h + 1) * d_head)
            parts.append(z[..., cols] @ w_o[:, cols].T)
        parts.append(ff)
    assert model.norm.eps == original
    scale = (final[0].var(-1, unbiased=False, keepdim=True) + 1e-5).sqrt()
    with torch.no_grad():
        return torch.stack(
            [
                model.lm_head((p - p.mean(-1, keepdim=True)) / scale * model.norm.weight)
                for p in parts
            ]
        )


@pytest.mark.parametrize(
    "task_id, make, named",
    [
        ("ex11.attention_patterns", lambda s: _patterns_without_finally, "when the forward raises"),
        ("ex11.attention_patterns", lambda s: _patterns_by_the_record_flag, "record_attention"),
        (
            "ex11.attention_patterns",
            lambda s: _patterns_by_the_record_flag_switched_back,
            "record_attention",
        ),
        ("ex11.attention_patterns", _patterns_in_eval_mode, "model.eval()"),
        (
            "ex11.attention_patterns",
            _patterns_in_eval_mode_put_back_after_success,
            "put the mode back in the `finally:`",
        ),
        ("ex11.ablate_head", _ablate_in_eval_mode, "model.eval()"),
        ("ex11.direct_logit_attribution", lambda s: _attribution_with_eps_fixed, "model.norm.eps"),
    ],
    ids=[
        "no finally",
        "record flag",
        "record flag undone",
        "patterns eval",
        "patterns eval, put back without finally",
        "ablate eval",
        "eps 1e-5",
    ],
)
def test_wrong_answers_that_once_got_full_marks_lose_points_with_a_named_hint(
    solution, task_id, make, named
):
    result = check_result(task_id, make(solution))
    assert result.status == "failed", result.feedback
    assert result.score < result.max_score
    assert named in result.feedback, result.feedback
    task = get_task(task_id)  # and in the batch grader, on another seed
    cases = task.cases(torch.Generator().manual_seed(7))
    graded = judge(task, cases, run_cases(task, make(solution), cases))
    assert graded.status == "failed" and graded.score < graded.max_score, graded.feedback


def test_a_forward_that_raises_leaves_no_hook_with_the_solution(solution):
    from course_lib.grading.tasks.ex11 import random_gpt

    model = random_gpt(15)
    too_long = torch.zeros(1, model.config.block_size + 1, dtype=torch.long)
    with pytest.raises(ValueError):
        solution["attention_patterns"](model, too_long)
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


# Slips an outside learner's hunt found (#33) with a generic or a misleading message: the
# solution notebook's own function with one slip, as a learner writes it.
def _solution_with(solution, name, *edits):
    """The solution notebook's `name` with each (old, new) text edit applied once, defined in
    a copy of the notebook's namespace (so it calls the notebook's attention_patterns)."""
    nb = nbformat.read(ROOT / "solutions" / NOTEBOOK, as_version=4)
    cell = next(c.source for c in nb.cells if c.source.startswith(f"def {name}("))
    for old, new in edits:
        assert cell.count(old) == 1, old
        cell = cell.replace(old, new)
    namespace = dict(solution)
    exec(compile(cell, f"learner's {name}", "exec"), namespace)
    return namespace[name]


DIVISOR = "(final[0].var(-1, unbiased=False, keepdim=True) + model.norm.eps).sqrt()"
HUNTED = [  # task, edits, a phrase of the hint
    (
        "attention_patterns",
        [('return args, {**kwargs, "need_weights": True}', 'return args, {"need_weights": True}')],
        "other keyword arguments",
    ),
    (
        "induction_scores",
        [("patterns[..., queries, keys]", "patterns[..., keys, queries]")],
        "ABOVE the diagonal",
    ),
    (
        "induction_scores",
        [("arange(period, 2 * period)", "arange(period - 1, 2 * period - 1)")],
        "dropped query 2T - 1",
    ),
    (
        "induction_scores",
        [
            ("weights = patterns[..., queries, keys]", "weights = patterns[..., period:, :period]"),
            ("weights.mean(dim=(1, 3))", "weights.diagonal(1, -2, -1).mean(dim=(1, 3))"),
        ],
        "the last query, 2T - 1, is missing",
    ),
    ("ablate_head", [("return (z,)", "return None")], "your ablation changed nothing"),
    (
        "direct_logit_attribution",
        [(DIVISOR, "final[0].std(-1, unbiased=False, keepdim=True) + model.norm.eps")],
        "outside the square root",
    ),
    (
        "direct_logit_attribution",
        [("parts = [embeddings[0]]", "parts = [model.token_embedding(ids)]")],
        "token AND position",
    ),
]


@pytest.mark.parametrize("name,edits,words", HUNTED, ids=[h[2] for h in HUNTED])
def test_hunted_slips_lose_points_in_the_notebook_with_a_named_hint(solution, name, edits, words):
    result = check_result(f"ex11.{name}", _solution_with(solution, name, *edits))
    assert result.status == "failed" and result.score < result.max_score, result.feedback
    assert words in result.feedback, result.feedback


def test_zeroing_the_heads_slice_of_the_attention_output_gets_the_rows_hint(solution):
    def ablate_head(model, ids, layer, head):
        d_head = model.config.d_model // model.config.num_heads

        def loss():
            with torch.no_grad():
                logits = model(ids)
            return torch.nn.functional.cross_entropy(
                logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()
            )

        def zero_output(module, args, output):  # the slice of self_attn's OUTPUT, d_model wide
            out = output[0].clone()
            out[..., head * d_head : (head + 1) * d_head] = 0.0
            return out, output[1]

        clean = loss()
        handle = model.layers[layer].self_attn.register_forward_hook(zero_output)
        try:
            return (loss() - clean).item()
        finally:
            handle.remove()

    result = check_result("ex11.ablate_head", ablate_head)
    assert result.status == "failed", result.feedback
    assert "self_attn's OUTPUT" in result.feedback, result.feedback


# Slips a second hunt found, with a generic or misleading message before: the solution
# notebook's function with one slip, as a learner writes it, and a phrase of its hint now.
FF_HOOK = "layer.feed_forward.register_forward_hook(lambda m, a, o: ff_outputs.append(o))"
NORM_HOOK = "model.norm.register_forward_pre_hook(lambda m, a: final.append(a[0]))"
HUNTED_2 = [
    (  # a hook per layer storing into patterns[i]: "one hook per layer" (it had one)
        "attention_patterns",
        [
            ("    def keep(module, args, output):\n        patterns.append(output[1])\n", ""),
            ("patterns, handles = [], []", "patterns, handles = {}, []"),
            ("for layer in model.layers:", "for i, layer in enumerate(model.layers):"),
            (
                "register_forward_hook(keep)",
                "register_forward_hook(lambda m, a, o: patterns.update({i: o[1]}))",
            ),
            ("torch.stack(patterns)", "torch.stack(list(patterns.values()))"),
        ],
        "reads i when it runs",
    ),
    (  # the token before the earlier copy: "None of the usual single mistakes"
        "induction_scores",
        [("keys = queries - period + 1", "keys = queries - period - 1")],
        "BEFORE the earlier copy",
    ),
    (  # F.cross_entropy on (batch, seq, vocab): a bare "Expected target size" error
        "ablate_head",
        [
            (
                "F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())",
                "F.cross_entropy(logits[:, :-1], ids[:, 1:])",
            )
        ],
        "classes on dim 1",
    ),
    (  # the feed-forward's input: generic
        "direct_logit_attribution",
        [
            (
                FF_HOOK,
                "layer.feed_forward.register_forward_pre_hook("
                "lambda m, a: ff_outputs.append(a[0]))",
            )
        ],
        "feed-forward's part is its OUTPUT",
    ),
    (  # the divisor from the norm's output: generic
        "direct_logit_attribution",
        [(NORM_HOOK, "model.norm.register_forward_hook(lambda m, a, o: final.append(o))")],
        "INPUT of model.norm",
    ),
    (  # the clean run's hook never removed: "the patching hook is still registered"
        "patch_head",
        [
            (
                "    try:\n        with torch.no_grad():\n            model(clean_ids)\n"
                "    finally:\n        handle.remove()\n",
                "    with torch.no_grad():\n        model(clean_ids)\n",
            )
        ],
        "the clean run's recording hook",
    ),
]


@pytest.mark.parametrize("name,edits,words", HUNTED_2, ids=[h[2] for h in HUNTED_2])
def test_second_hunt_slips_lose_points_with_a_named_hint(solution, name, edits, words):
    result = check_result(f"ex11.{name}", _solution_with(solution, name, *edits))
    assert result.status == "failed" and result.score < result.max_score, result.feedback
    assert words in result.feedback, result.feedback


HUNTED_3 = [  # #hunt3: each got "None of the usual single mistakes" or a bare PyTorch error
    (  # the head's slice of out_proj's OUTPUT, recorded and patched with forward hooks
        "patch_head",
        [
            (
                "register_forward_pre_hook(lambda m, a: clean.append(a[0][..., cols]))",
                "register_forward_hook(lambda m, a, o: clean.append(o[..., cols]))",
            ),
            ("def patch(module, args):", "def patch(module, args, output):"),
            ("z = args[0].clone()", "z = output.clone()"),
            ("return (z,)", "return z"),
            ("out_proj.register_forward_pre_hook(patch)", "out_proj.register_forward_hook(patch)"),
        ],
        "out_proj's OUTPUT",
    ),
    (  # the patched run given the clean ids
        "patch_head",
        [("return model(corrupted_ids)", "return model(clean_ids)")],
        "the clean run's logits",
    ),
    (  # the weight's columns without the transpose: a bare "cannot be multiplied"
        "direct_logit_attribution",
        [("z[..., cols] @ w_o[:, cols].T", "z[..., cols] @ w_o[:, cols]")],
        "matching COLUMNS of out_proj.weight, transposed",
    ),
    (  # its rows, transposed
        "direct_logit_attribution",
        [("z[..., cols] @ w_o[:, cols].T", "z[..., cols] @ w_o[cols, :].T")],
        "(d_head, d_model)",
    ),
    (  # the forward's error caught and reported, not propagated: full marks before
        "attention_patterns",
        [
            (
                "        with torch.no_grad():\n            model(ids)\n    finally:",
                "        with torch.no_grad():\n            model(ids)\n"
                "    except ValueError as error:\n        print(error)\n        return None\n"
                "    finally:",
            )
        ],
        "let the error propagate",
    ),
]


@pytest.mark.parametrize("name,edits,words", HUNTED_3, ids=[h[2] for h in HUNTED_3])
def test_third_hunt_slips_get_a_named_hint(solution, name, edits, words):
    result = check_result(f"ex11.{name}", _solution_with(solution, name, *edits))
    assert result.status == "failed", result.feedback
    assert words in result.feedback and "None of the usual" not in result.feedback


@pytest.mark.parametrize("seed", [0, 1, 2, 7, 123])  # 0: the notebook's; 1 named layer_ignored
def test_an_ablation_whose_loss_reads_row_0_only_is_told_so_under_every_seed(solution, seed):
    learner = _solution_with(
        solution,
        "ablate_head",
        ("logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()", "logits[0, :-1], ids[0, 1:]"),
    )
    task = get_task("ex11.ablate_head")
    cases = task.cases(torch.Generator().manual_seed(seed))
    result = judge(task, cases, run_cases(task, learner, cases))
    assert result.status == "failed" and result.score < result.max_score, result.feedback
    assert "the loss over the whole batch, not row 0" in result.feedback, result.feedback


HUNTED_4 = [  # #hunt4: each got "None of the usual single mistakes" or no hint at all
    (  # summed over the queries (averaged over the batch)
        "induction_scores",
        [("weights.mean(dim=(1, 3))", "weights.sum(dim=3).mean(dim=1)")],
        "not a sum",
    ),
    (  # the stripe one below: diagonal(-(T + 1)), queries T + 1 .. 2T - 1
        "induction_scores",
        [("patterns[..., queries, keys]", "patterns.diagonal(-(period + 1), -2, -1)")],
        "the token BEFORE the earlier copy",
    ),
    (  # z[:, a:b] on (batch, seq, features): positions zeroed, no hint
        "ablate_head",
        [("z[..., head * d_head", "z[:, head * d_head")],
        "you zeroed sequence POSITIONS",
    ),
    (
        "ablate_head",
        [("z[..., head * d_head : (head + 1) * d_head]", "z[..., head]")],
        "(h+1)*d_head",
    ),
    (
        "patch_head",
        [("slice(head * d_head, (head + 1) * d_head)", "slice(head, head + 1)")],
        "not the single feature h",
    ),
    (  # the slice on the positions, empty when seq <= head * d_head: "hook removed?" only
        "patch_head",
        [
            ("a[0][..., cols]", "a[0][:, cols]"),
            ("z[..., cols] = clean[0]", "z[:, cols] = clean[0]"),
        ],
        "slices the positions",
    ),
    (  # RMSNorm's divisor: no mean subtracted
        "direct_logit_attribution",
        [(DIVISOR, "(final[0].pow(2).mean(-1, keepdim=True) + model.norm.eps).sqrt()")],
        "not RMSNorm's root mean square",
    ),
    (  # every part centred by the stream's mean
        "direct_logit_attribution",
        [("(p - p.mean(-1, keepdim=True))", "(p - final[0].mean(-1, keepdim=True))")],
        "centred by ITS OWN mean",
    ),
]


HUNTED_5 = [  # #hunt5: a boundary slip that got "None of the usual single mistakes"
    (  # range(T + 1, 2T): the first query of the second copy left out
        "induction_scores",
        [("torch.arange(period, 2 * period)", "torch.arange(period + 1, 2 * period)")],
        "the first query of the second copy, i = T, is missing",
    ),
    (  # "that slice (and only that slice)" left out: the other heads zeroed
        "patch_head",
        [("z = args[0].clone()", "z = torch.zeros_like(args[0])")],
        "the other heads' outputs became 0",
    ),
    (  # the stripe sliced as if its index were the query's: only queries 2T - 2, 2T - 1
        "induction_scores",
        [
            (
                "patterns[..., queries, keys]",
                "patterns.diagonal(-(period - 1), -2, -1)[..., period - 1 :]",
            )
        ],
        "is indexed from ITS first query",
    ),
    (  # #hunt6: nn.MultiheadAttention's average_attn_weights=False added: a bare TypeError
        "attention_patterns",
        [
            (
                '{**kwargs, "need_weights": True}',
                '{**kwargs, "need_weights": True, "average_attn_weights": False}',
            )
        ],
        "takes no average_attn_weights",
    ),
    (  # #hunt7: the previous-token stripe scored as the induction one: "None of the usual"
        "induction_scores",
        [("keys = queries - period + 1", "keys = queries - 1")],
        "the token just before",
    ),
]


@pytest.mark.parametrize(
    "name,edits,words", HUNTED_4 + HUNTED_5, ids=[h[2] for h in HUNTED_4 + HUNTED_5]
)
def test_fourth_hunt_slips_get_a_named_hint(solution, name, edits, words):
    result = check_result(f"ex11.{name}", _solution_with(solution, name, *edits))
    assert result.status == "failed", result.feedback
    assert words in result.feedback and "None of the usual" not in result.feedback


NO_FINALLY_EDITS = [  # #hunt4: full marks before, though a raising forward left the hooks on
    (
        "patch_head",
        "    try:\n        with torch.no_grad():\n            model(clean_ids)\n"
        "    finally:\n        handle.remove()\n",
        "    with torch.no_grad():\n        model(clean_ids)\n    handle.remove()\n",
    ),
    (
        "direct_logit_attribution",
        "    try:\n        with torch.no_grad():\n            model(ids)\n"
        "    finally:\n        for handle in handles:\n            handle.remove()\n",
        "    with torch.no_grad():\n        model(ids)\n    for handle in handles:\n"
        "        handle.remove()\n",
    ),
]


@pytest.mark.parametrize("name,old,new", NO_FINALLY_EDITS, ids=[e[0] for e in NO_FINALLY_EDITS])
def test_hooks_removed_without_finally_fail_when_the_forward_raises(solution, name, old, new):
    result = check_result(f"ex11.{name}", _solution_with(solution, name, (old, new)))
    assert result.status == "failed" and result.score < result.max_score, result.feedback
    assert "your hooks stay on the model when the forward raises" in result.feedback


def _patch_with_a_cache(model, clean_ids, corrupted_ids, layer, head, _clean={}):  # noqa: B006
    """#hunt7: the clean run recorded once per (layer, head), then reused on every later call."""
    out_proj = model.layers[layer].self_attn.out_proj
    part = slice(*(h * model.config.d_model // model.config.num_heads for h in (head, head + 1)))
    with torch.no_grad():
        if (layer, head) not in _clean:
            handle = out_proj.register_forward_pre_hook(
                lambda m, a: _clean.__setitem__((layer, head), a[0][..., part].clone())
            )
            try:
                model(clean_ids)
            finally:
                handle.remove()
        handle = out_proj.register_forward_pre_hook(
            lambda m, a: (
                torch.cat(
                    [a[0][..., : part.start], _clean[layer, head], a[0][..., part.stop :]], -1
                ),
            )
        )
        try:
            return model(corrupted_ids)
        finally:
            handle.remove()


def test_a_patch_that_caches_the_clean_run_between_calls_is_told_so():
    result = check_result("ex11.patch_head", _patch_with_a_cache)  # once got full marks
    assert result.status == "failed", result.feedback
    assert "an earlier call" in result.feedback, result.feedback


HUNTED_F11 = [  # #hunt-f11: a learner's slip that got "None of the usual single mistakes"
    (  # len(ids) is the batch size, not the length: the period of a batch of 4 read as 2
        "induction_scores",
        [
            ("period = ids.shape[1] // 2", "period = len(ids) // 2"),
            (
                "patterns[..., queries, keys]",
                "patterns.diagonal(-(period - 1), -2, -1)[..., -period:]",
            ),
        ],
        "len(ids) and ids.shape[0] are the batch size",
    ),
    (  # the scores of the batch's first sequence only
        "induction_scores",
        [("weights.mean(dim=(1, 3))", "weights[:, 0].mean(dim=-1)")],
        "from the first sequence of the batch only",
    ),
    (  # the logits cut for the shift, the targets cut the same way: each position's own token
        "ablate_head",
        [("ids[:, 1:].flatten()", "ids[:, :-1].flatten()")],
        "each position is scored on its own token",
    ),
    (  # keepdim forgotten: a broadcast error with no hint
        "direct_logit_attribution",
        [(DIVISOR, "(final[0].var(-1, unbiased=False) + model.norm.eps).sqrt()")],
        "the divisor lost its last axis",
    ),
    (  # every layer's heads first, then every feed-forward
        "direct_logit_attribution",
        [
            ("        parts.append(ff)\n", ""),
            ("    scale = (", "    parts += ff_outputs\n    scale = ("),
        ],
        "the parts are in another order",
    ),
    (  # the embeddings last
        "direct_logit_attribution",
        [
            ("parts = [embeddings[0]]", "parts = []"),
            ("    scale = (", "    parts.append(embeddings[0])\n    scale = ("),
        ],
        "the parts are in another order",
    ),
    (  # the clean output added to the corrupted one instead of replacing it
        "patch_head",
        [("z[..., cols] = clean[0]", "z[..., cols] += clean[0]")],
        "you ADDED the clean output",
    ),
    (  # the patching pre-hook changes a clone and returns nothing: "was the hook removed?"
        "patch_head",
        [("        return (z,)\n", "")],
        "Does your pre-hook RETURN the patched input",
    ),
    (  # the clean output of the batch's first sequence given to every corrupted sequence
        "patch_head",
        [("z[..., cols] = clean[0]", "z[..., cols] = clean[0][0]")],
        "got the FIRST clean sequence's output",
    ),
    (  # flattened, then shifted: each sequence's last position scored on the next one's first
        "ablate_head",
        [
            (
                "F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())",
                "F.cross_entropy(logits.flatten(0, 1)[:-1], ids.flatten()[1:])",
            )
        ],
        "you flattened before shifting",
    ),
]


@pytest.mark.parametrize("name,edits,words", HUNTED_F11, ids=[h[2] for h in HUNTED_F11])
@pytest.mark.parametrize("seed", [0, 5])
def test_f11_hunt_slips_get_a_named_hint_under_every_seed(solution, name, edits, words, seed):
    task = get_task(f"ex11.{name}")
    wrong = _solution_with(solution, name, *edits)
    cases = task.cases(torch.Generator().manual_seed(seed))  # 0: the notebook's seed
    result = judge(task, cases, run_cases(task, wrong, cases))
    assert result.status == "failed" and result.score < result.max_score, result.feedback
    assert words in result.feedback and "None of the usual" not in result.feedback


@pytest.mark.parametrize("seed", [0, 5])
def test_a_length_check_by_the_halves_alone_is_caught(solution, seed):
    """#hunt-f11: checking only that ids[:, :T] equals ids[:, T : 2 * T] raised on the odd case's
    random ids by luck (full marks); its ids now repeat before one token more."""
    wrong = _solution_with(
        solution,
        "induction_scores",
        (
            "if ids.shape[1] % 2 != 0:",
            "if not torch.equal(ids[:, : ids.shape[1] // 2], ids[:, ids.shape[1] // 2 : "
            "ids.shape[1] // 2 * 2]):",
        ),
    )
    task = get_task("ex11.induction_scores")
    cases = task.cases(torch.Generator().manual_seed(seed))
    result = judge(task, cases, run_cases(task, wrong, cases))
    assert result.status == "failed" and result.score < result.max_score, result.feedback
    assert "expected your code to raise a ValueError" in result.feedback, result.feedback


@pytest.mark.parametrize(
    "old,new",
    [  # #hunt-f11: a bare TypeError "ask_for_weights() missing 1 required positional argument"
        (
            "register_forward_pre_hook(ask_for_weights, with_kwargs=True)",
            "register_forward_pre_hook(ask_for_weights)",
        ),
        (
            "def ask_for_weights(module, args, kwargs):\n"
            '        return args, {**kwargs, "need_weights": True}',
            "def ask_for_weights(module, args):\n        return args",
        ),
    ],
    ids=["with_kwargs left out", "a hook that takes other arguments"],
)
def test_a_hook_pytorch_cannot_call_gets_the_hook_signatures(solution, old, new):
    result = check_result(
        "ex11.attention_patterns", _solution_with(solution, "attention_patterns", (old, new))
    )
    assert result.status == "failed", result.feedback
    assert "your code raised TypeError" in result.feedback
    assert (
        "when registered with register_forward_pre_hook(hook, with_kwargs=True)" in result.feedback
    )


def test_a_type_error_of_the_learners_own_code_gets_no_hook_hint(solution):
    wrong = _solution_with(
        solution,
        "attention_patterns",
        ("return torch.stack(patterns)", "return torch.stack(patterns, 0, 1)"),
    )
    result = check_result("ex11.attention_patterns", wrong)
    assert "your code raised TypeError" in result.feedback and "hook(module" not in result.feedback


_LATE = [  # hooks made in a loop that write slot i: every hook reads i after the loop
    ("    patterns, handles = [], []", "    patterns, handles = [None] * len(model.layers), []"),
    ("        patterns.append(output[1])", "        patterns[i] = output[1]"),
    ("        for layer in model.layers:", "        for i, layer in enumerate(model.layers):"),
]


def _late_slots(patterns_made):
    """The edits of _LATE with the list replaced by `patterns_made`."""
    return [(old, new.replace("[None] * len(model.layers)", patterns_made)) for old, new in _LATE]


HUNTED_SECOND_F11 = [  # #hunt-f11 (second reader): a wrong hint, or none, before
    (  # a list of slots left None: was told only to set need_weights, which it did
        "attention_patterns",
        _LATE,
        "a slot of a list made first ([None] * num_layers) was never filled",
    ),
    (  # a tensor of zeros made first: every layer but the last stays 0 ("None of the usual")
        "attention_patterns",
        [
            *_late_slots(
                "torch.zeros(len(model.layers), len(ids), model.config.num_heads, "
                "ids.shape[1], ids.shape[1])"
            ),
            ("return torch.stack(patterns)", "return patterns"),
        ],
        "only the last layer's pattern is filled",
    ),
    (  # the lesson's model.layers[0] copied: a bare 'your result is X, expected Y'
        "ablate_head",
        [("model.layers[layer].self_attn", "model.layers[0].self_attn")],
        "the lesson's model.layers[0]",
    ),
    (  # the lesson's d_head = 32 copied: 'changed nothing', with no word of d_head's size
        "ablate_head",
        [("d_head = model.config.d_model // model.config.num_heads", "d_head = 32")],
        "not the lesson's 32",
    ),
    (  # the lesson's model.layers[0] copied: 'None of the usual single mistakes'
        "patch_head",
        [("model.layers[layer].self_attn", "model.layers[0].self_attn")],
        "you patched the head in layer 0",
    ),
    (  # the divisor without its square root: 'None of the usual single mistakes'
        "direct_logit_attribution",
        [(DIVISOR, "(final[0].var(-1, unbiased=False, keepdim=True) + model.norm.eps)")],
        "the square ROOT of var + eps",
    ),
    (  # the variance over the positions: 'None of the usual single mistakes'
        "direct_logit_attribution",
        [("final[0].var(-1,", "final[0].var(1,")],
        "the variance is over d_model, the LAST axis",
    ),
    (  # / for //: a bare TypeError from diagonal, the way the task's hint writes it
        "induction_scores",
        [
            ("period = ids.shape[1] // 2", "period = ids.shape[1] / 2"),
            (
                "patterns[..., queries, keys]",
                "patterns.diagonal(-(period - 1), -2, -1)[..., -int(period):]",
            ),
        ],
        "the period T must be an int",
    ),
    (  # each sequence's mean added up: 'None of the usual single mistakes'
        "induction_scores",
        [("weights.mean(dim=(1, 3))", "weights.mean(dim=3).sum(dim=1)")],
        "the scores are summed over the sequences of the batch",
    ),
]


@pytest.mark.parametrize(
    "name,edits,words", HUNTED_SECOND_F11, ids=[h[2] for h in HUNTED_SECOND_F11]
)
@pytest.mark.parametrize("seed", [0, 5])
def test_second_f11_hunt_slips_get_their_own_hint(solution, name, edits, words, seed):
    task = get_task(f"ex11.{name}")
    wrong = _solution_with(solution, name, *edits)
    cases = task.cases(torch.Generator().manual_seed(seed))  # 0: the notebook's seed
    result = judge(task, cases, run_cases(task, wrong, cases))
    assert result.status == "failed" and result.score < result.max_score, result.feedback
    assert words in result.feedback and "None of the usual" not in result.feedback


def _ablate_restoring_a_view(model, ids, layer, head):
    """#hunt-f11: the head's columns zeroed and 'restored' from a view, so they stay zero."""
    d_head = model.config.d_model // model.config.num_heads
    weight = model.layers[layer].self_attn.out_proj.weight
    cols = slice(head * d_head, (head + 1) * d_head)

    def loss():
        logits = model(ids)
        return torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())

    with torch.no_grad():
        clean = loss()
        saved = weight[:, cols]  # a view, not a copy
        weight[:, cols] = 0.0
        ablated = loss()
        weight[:, cols] = saved
    return (ablated - clean).item()


def test_weights_restored_from_a_view_are_told_to_clone():
    result = check_result("ex11.ablate_head", _ablate_restoring_a_view)
    assert result.status == "failed", result.feedback
    assert "w[:, cols].clone(): w[:, cols] alone is a view" in result.feedback, result.feedback


HUNTED_THIRD_F11 = [  # #hunt-f11, third reader: task, edits, a phrase of the hint
    (  # lm_head.weight without its transpose: was told to fix the HEADS' product
        "direct_logit_attribution",
        [
            (
                "model.lm_head((p - p.mean(-1, keepdim=True)) / scale * model.norm.weight)",
                "((p - p.mean(-1, keepdim=True)) / scale * model.norm.weight) "
                "@ model.lm_head.weight",
            )
        ],
        "the unembedding is model.lm_head(x)",
    ),
    (  # the divisor read before the last layer: 'None of the usual single mistakes'
        "direct_logit_attribution",
        [("model.norm.register_forward_pre_hook", "model.layers[-1].register_forward_pre_hook")],
        "a pre-hook on model.layers[-1] reads the stream before the last layer",
    ),
    (  # divided by the divisor twice: was told only that it divided by var + eps
        "direct_logit_attribution",
        [("/ scale * model.norm.weight", "/ scale / scale * model.norm.weight")],
        "or by the divisor twice",
    ),
    (  # the norm's weight (its scale, gamma) applied twice: 'None of the usual single mistakes'
        "direct_logit_attribution",
        [("/ scale * model.norm.weight", "/ scale * model.norm.weight * model.norm.weight")],
        "the final norm's weight (model.norm.weight) is applied twice",
    ),
    (  # the last position only patched: 'None of the usual single mistakes'
        "patch_head",
        [("z[..., cols] = clean[0]", "z[:, -1, cols] = clean[0][:, -1]")],
        "you patched the last position only",
    ),
    (  # mean ablation over each sequence's positions: a bare 'your result is X, expected Y'
        "ablate_head",
        [
            (
                "z[..., head * d_head : (head + 1) * d_head] = 0.0",
                "z[..., head * d_head : (head + 1) * d_head] = z[\n"
                "        ..., head * d_head : (head + 1) * d_head\n"
                "    ].mean(dim=1, keepdim=True)",
            )
        ],
        "this task asks for ZERO ablation",
    ),
    (  # the clean output kept in a mutable default: crashed on the next case's shape, no hint
        "patch_head",
        [
            ("layer, head):", "layer, head, clean=[]):"),
            ("    clean = []\n", ""),
            (
                "clean.append(a[0][..., cols])",
                "clean.append(a[0][..., cols]) if not clean else None",
            ),
        ],
        "the clean output came from an earlier call",
    ),
    (  # diagonal without dim1 and dim2 (dims 0 and 1: layers, batch): a bare shape message
        "induction_scores",
        [("patterns[..., queries, keys]", "patterns.diagonal(-(period - 1))[..., -period:]")],
        "without dim1 and dim2 reads a stripe of dims 0 and 1",
    ),
    (  # L15: a stripe mask from query T - 1 on (its key 0 too), the sum divided by T: "None of
        # the usual single mistakes" (two slips to the eye, one stripe to the grader)
        "induction_scores",
        [
            (
                "weights = patterns[..., queries, keys]",
                "i = torch.arange(2 * period)\n"
                "    stripe = (i[:, None] - i[None, :]) == period - 1",
            ),
            (
                "weights.mean(dim=(1, 3))",
                "(patterns * stripe).sum(dim=(-2, -1)).mean(dim=1) / period",
            ),
        ],
        "holds T + 1 queries",
    ),
    (  # torch.cat for torch.stack: a bare shape message
        "attention_patterns",
        [("return torch.stack(patterns)", "return torch.cat(patterns)")],
        "torch.stack(patterns) puts them on a NEW first axis",
    ),
]


STRIPE_READ_RIGHT = [  # L15: the stripe i - j = T - 1 read rightly, by a mask or by diagonal
    [
        (
            "weights = patterns[..., queries, keys]",
            "i = torch.arange(2 * period)\n"
            "    stripe = ((i[:, None] - i[None, :]) == period - 1) & (i[:, None] >= period)",
        ),
        ("weights.mean(dim=(1, 3))", "(patterns * stripe).sum(dim=(-2, -1)).mean(dim=1) / period"),
    ],
    [("patterns[..., queries, keys]", "patterns.diagonal(-(period - 1), -2, -1)[..., -period:]")],
    [
        (
            "patterns[..., queries, keys]",
            "patterns.diagonal(1 - period, dim1=-2, dim2=-1)[..., 1:]",
        ),
        ("weights.mean(dim=(1, 3))", "weights.sum(dim=-1).mean(dim=1) / period"),
    ],
]


@pytest.mark.parametrize("edits", STRIPE_READ_RIGHT, ids=["mask", "diagonal", "diagonal sum"])
@pytest.mark.parametrize("seed", [0, 3])
def test_the_induction_stripe_read_rightly_keeps_full_marks(solution, edits, seed):
    task = get_task("ex11.induction_scores")
    cases = task.cases(torch.Generator().manual_seed(seed))
    result = judge(
        task, cases, run_cases(task, _solution_with(solution, "induction_scores", *edits), cases)
    )
    assert result.status == "passed", result.feedback


@pytest.mark.parametrize(
    "name,edits,words", HUNTED_THIRD_F11, ids=[h[2][:40] for h in HUNTED_THIRD_F11]
)
@pytest.mark.parametrize("seed", [0, 5])
def test_third_f11_hunt_slips_get_their_own_hint(solution, name, edits, words, seed):
    task = get_task(f"ex11.{name}")
    wrong = _solution_with(solution, name, *edits)
    cases = task.cases(torch.Generator().manual_seed(seed))  # 0: the notebook's seed
    result = judge(task, cases, run_cases(task, wrong, cases))
    assert result.status == "failed" and result.score < result.max_score, result.feedback
    assert words in result.feedback and "None of the usual" not in result.feedback
    assert "matching COLUMNS of out_proj.weight" not in result.feedback, result.feedback


def test_a_clean_input_of_the_wrong_width_is_not_called_stale(solution):
    """#hunt-f11: only a clean slice of the head's width with another batch or seq gets the
    stale hint; the whole out_proj input assigned to the head's slice is another slip."""
    wrong = _solution_with(solution, "patch_head", ("a[0][..., cols]", "a[0]"))
    result = check_result("ex11.patch_head", wrong)
    assert result.status == "failed" and "must match the existing size" in result.feedback
    assert "earlier call" not in result.feedback, result.feedback


def _induction_by_matching_tokens(solution, latest):
    """A learner's induction_scores that finds query i's earlier copy by its token (the first
    earlier position holding it, or the latest) instead of by its position, i - T."""
    attention_patterns = solution["attention_patterns"]

    def induction_scores(model, ids):
        if ids.shape[1] % 2:
            raise ValueError(f"ids must be a sequence repeated twice, got length {ids.shape[1]}")
        period = ids.shape[1] // 2
        patterns = attention_patterns(model, ids)  # (layers, batch, heads, 2T, 2T)
        total = 0
        for b in range(ids.shape[0]):
            for i in range(period, 2 * period):
                matches = (ids[b, :i] == ids[b, i]).nonzero().flatten()
                j = matches[-1] if latest else matches[0]
                total = total + patterns[:, b, :, i, j + 1]
        return total / (ids.shape[0] * period)

    return induction_scores


@pytest.mark.parametrize("seed", [None, 1, 2, 3])
@pytest.mark.parametrize("latest", [False, True], ids=["first match", "latest match"])
def test_an_earlier_copy_found_by_its_token_is_told_that_tokens_repeat(solution, latest, seed):
    # before: 5/5 in the notebook and under every seed, since each case's copies held distinct
    # tokens; a last case now repeats tokens within a copy
    task = get_task("ex11.induction_scores")
    learner = _induction_by_matching_tokens(solution, latest)
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    if gen is None:
        result = check_result(task.id, learner)
    else:
        cases = task.cases(gen)
        result = judge(task, cases, run_cases(task, learner, cases))
    assert result.status == "failed", result.feedback
    assert "tokens repeating within each copy" in result.feedback
    assert "The earlier copy is a position, i - T" in result.feedback


# Hunt 17: full marks before, as ablate_head had no forward that raises, no second call on a
# model, and induction_scores no model in training mode.
def _ablate_mode_put_back_after_success(solution):
    """model.eval(), the mode put back after the forwards but not in a `finally`."""

    def ablate_head(model, ids, layer, head):
        was = model.training
        model.eval()
        result = solution["ablate_head"](model, ids, layer, head)
        model.train(was)
        return result

    return ablate_head


def _ablate_hook_first_without_finally(solution):
    """The ablated run first, its hook removed after a forward that succeeded."""
    return _solution_with(
        solution,
        "ablate_head",
        (
            "    clean = mean_loss()\n"
            "    handle = model.layers[layer].self_attn.out_proj.register_forward_pre_hook("
            "zero_head)\n"
            "    try:\n"
            "        ablated = mean_loss()\n"
            "    finally:\n"
            "        handle.remove()\n",
            "    handle = model.layers[layer].self_attn.out_proj.register_forward_pre_hook("
            "zero_head)\n"
            "    ablated = mean_loss()\n"
            "    handle.remove()\n"
            "    clean = mean_loss()\n",
        ),
    )


def _ablate_weights_restored_without_finally(solution):
    """out_proj's columns zeroed for the ablated run (first), restored after it succeeded."""

    def ablate_head(model, ids, layer, head):
        d_head = model.config.d_model // model.config.num_heads
        weight = model.layers[layer].self_attn.out_proj.weight
        saved = weight.detach().clone()

        def loss():
            with torch.no_grad():
                logits = model(ids)
            return torch.nn.functional.cross_entropy(
                logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()
            )

        with torch.no_grad():
            weight[:, head * d_head : (head + 1) * d_head] = 0.0
        ablated = loss()
        with torch.no_grad():
            weight.copy_(saved)
        return (ablated - loss()).item()

    return ablate_head


def _ablate_with_a_cache(key):
    """The clean loss kept between calls, by ids.shape or by the model."""
    cache: dict = {}

    def ablate_head(model, ids, layer, head):
        d_head = model.config.d_model // model.config.num_heads

        def loss():
            with torch.no_grad():
                logits = model(ids)
            return torch.nn.functional.cross_entropy(
                logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()
            )

        def zero_head(module, args):
            z = args[0].clone()
            z[..., head * d_head : (head + 1) * d_head] = 0.0
            return (z,)

        k = tuple(ids.shape) if key == "shape" else model
        if k not in cache:
            cache[k] = loss()
        handle = model.layers[layer].self_attn.out_proj.register_forward_pre_hook(zero_head)
        try:
            ablated = loss()
        finally:
            handle.remove()
        return (ablated - cache[k]).item()

    return ablate_head


def _induction_in_eval_mode(solution):
    def induction_scores(model, ids):
        model.eval()
        return solution["induction_scores"](model, ids)

    return induction_scores


HUNT17 = [  # task, the learner's function, a phrase of the feedback
    ("ablate_head", _ablate_mode_put_back_after_success, "mode back only after a forward"),
    ("ablate_head", _ablate_hook_first_without_finally, "still registered after the forward"),
    ("ablate_head", _ablate_weights_restored_without_finally, "weights you changed were not"),
    ("ablate_head", lambda s: _ablate_with_a_cache("shape"), "clean loss came from an earlier"),
    ("ablate_head", lambda s: _ablate_with_a_cache("model"), "clean loss came from an earlier"),
    ("induction_scores", _induction_in_eval_mode, "its training mode changed"),
    ("attention_patterns", _patterns_in_eval_mode_put_back_after_success, "mode back only"),
]


def _result_under_seed(task_id, obj, seed):
    """The notebook's check (seed None) or the batch grader's under `seed`."""
    if seed is None:
        return check_result(task_id, obj)
    task = get_task(task_id)
    cases = task.cases(torch.Generator().manual_seed(seed))
    return judge(task, cases, run_cases(task, obj, cases))


@pytest.mark.parametrize(
    "name,make,words",
    HUNT17,
    ids=["mode", "hook", "weights", "cache shape", "cache model", "induction eval", "patterns"],
)
@pytest.mark.parametrize("seed", [None, 1, 5])
def test_hunt17_slips_lose_points_with_a_named_hint(solution, name, make, words, seed):
    result = _result_under_seed(f"ex11.{name}", make(solution), seed)
    assert result.status == "failed" and result.score < result.max_score, result.feedback
    assert words in result.feedback and "None of the usual" not in result.feedback
    assert torch.is_grad_enabled()  # the check put gradients back on for the cells after it
    assert "and left the model in eval mode" not in result.feedback, result.feedback


def _kept_between_calls(solution, name, line, default=False):
    """The solution notebook's `name` with the lists on `line` made once, outside the function
    (a module-level global), or as a mutable default argument; induction_scores calls such an
    attention_patterns."""
    nb = nbformat.read(ROOT / "solutions" / NOTEBOOK, as_version=4)
    inner = "attention_patterns" if name == "induction_scores" else name
    cells = {
        n: next(c.source for c in nb.cells if c.source.startswith(f"def {n}("))
        for n in {name, inner}
    }
    source = cells[inner]
    assert source.count(line) == 1, line
    if default:  # attention_patterns(model, ids, patterns=[])
        source = source.replace(line, "    handles = []\n")
        source = source.replace("(model, ids)", "(model, ids, patterns=[])", 1)
    else:
        source = f"{line.strip()}\n" + source.replace(line, "")
    namespace = dict(solution)
    exec(compile(source, f"learner's {inner}", "exec"), namespace)
    if name != inner:
        exec(compile(cells[name], f"learner's {name}", "exec"), namespace)
    return namespace[name]


PATTERNS_LINE = "    patterns, handles = [], []\n"
KEPT_LISTS = [  # task, the line of lists made once, as a default argument, the list named
    ("attention_patterns", PATTERNS_LINE, False, "`patterns`"),
    ("attention_patterns", PATTERNS_LINE, True, "`patterns`"),
    ("induction_scores", PATTERNS_LINE, False, "`patterns`"),
    (
        "direct_logit_attribution",
        "    embeddings, head_inputs, ff_outputs, final = [], [], [], []\n",
        False,
        "`embeddings`, `ff_outputs`, `final`, `head_inputs`",
    ),
    ("patch_head", "    clean = []\n", False, "`clean`"),
]


@pytest.mark.parametrize(
    "name,line,default,names", KEPT_LISTS, ids=["patterns", "default", "induction", "dla", "patch"]
)
@pytest.mark.parametrize("seed", [None, 1, 5])
def test_lists_kept_between_calls_are_named(solution, name, line, default, names, seed):
    # #hunt17: a bare zip()/torch.stack/broadcast error with no hint; now the lists are named
    learner = _kept_between_calls(solution, name, line, default)
    task = get_task(f"ex11.{name}")
    if seed is None:  # the notebook's check
        result = check_result(task.id, learner)
    else:
        cases = task.cases(torch.Generator().manual_seed(seed))
        result = judge(task, cases, run_cases(task, learner, cases))
    assert result.status == "failed" and result.score < result.max_score, result.feedback
    assert "is kept between calls" in result.feedback, result.feedback
    assert f"(yours: {names})" in result.feedback, result.feedback


def _reads_a_closure_cell_never_filled():
    def attention_patterns(model, ids):  # raises NameError (free variable not yet assigned)
        return not_yet  # noqa: F821

    not_yet = None
    del not_yet
    return attention_patterns


class _ListWhoseLenRaises(list):
    def __len__(self):
        raise RuntimeError("len() of a learner's container that raises")


_ODD_CONTAINER = _ListWhoseLenRaises([torch.zeros(1)])


def _reads_a_container_whose_len_raises(model, ids):
    return torch.stack(_ODD_CONTAINER)


@pytest.mark.parametrize(
    "wrong", [_reads_a_closure_cell_never_filled(), _reads_a_container_whose_len_raises]
)
def test_learner_state_the_kept_list_hint_cannot_read_is_left_alone(wrong):
    # the kept-list hint reads the learner's globals, defaults and closures before each call;
    # code it cannot read (an empty closure cell, a len() that raises) once made the grader's
    # own reading fail, and the learner was told 'your code raised ValueError: Cell is empty'
    # (or the len() error) instead of what their function does
    graded = check_result("ex11.attention_patterns", wrong)
    assert graded.status == "failed" and graded.score == 0, graded.feedback
    assert "Cell is empty" not in graded.feedback, graded.feedback
    assert "len() of a learner's container" not in graded.feedback, graded.feedback
    assert "not_yet" in graded.feedback or "shape" in graded.feedback, graded.feedback


def _ablate_zeroing_columns(restore="copy", freeze=False):
    """out_proj's columns zeroed in place and put back in a `finally`; freeze: requires_grad
    switched off to allow the in-place zeroing outside no_grad, and never switched back;
    restore="parameter": the values put back in a new nn.Parameter, not in place."""

    def ablate_head(model, ids, layer, head):
        out_proj = model.layers[layer].self_attn.out_proj
        d_head = model.config.d_model // model.config.num_heads
        cols = slice(head * d_head, (head + 1) * d_head)

        def loss():
            with torch.no_grad():
                logits = model(ids)
            return torch.nn.functional.cross_entropy(
                logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()
            )

        clean, saved = loss(), out_proj.weight.detach().clone()
        try:
            if freeze:
                out_proj.weight.requires_grad_(False)
                out_proj.weight[:, cols] = 0.0
            else:
                with torch.no_grad():
                    out_proj.weight[:, cols] = 0.0
            return (loss() - clean).item()
        finally:
            if restore == "parameter":
                out_proj.weight = torch.nn.Parameter(saved)
            else:
                with torch.no_grad():
                    out_proj.weight.copy_(saved)

    return ablate_head


def _frozen_first(solution, name):
    """The solution's `name` after model.requires_grad_(False) (the model frozen, never thawed)."""

    def frozen(model, *args):
        model.requires_grad_(False)
        return solution[name](model, *args)

    return frozen


def _grad_off_first(solution, name):
    """The solution's `name` after torch.set_grad_enabled(False), never switched back on (for
    `with torch.no_grad():`): the whole program's later forwards build no graph."""

    def grad_off(model, *args):
        torch.set_grad_enabled(False)
        return solution[name](model, *args)

    return grad_off


HUNT19 = [  # task, the learner's function, a phrase of the feedback
    ("ablate_head", lambda s: _ablate_zeroing_columns(freeze=True), "requires_grad is off"),
    ("ablate_head", lambda s: _frozen_first(s, "ablate_head"), "requires_grad is off"),
    ("ablate_head", lambda s: _ablate_zeroing_columns("parameter"), "a new nn.Parameter"),
    ("patch_head", lambda s: _frozen_first(s, "patch_head"), "requires_grad changed"),
    ("attention_patterns", lambda s: _frozen_first(s, "attention_patterns"), "requires_grad"),
    *((t[5:], lambda s, n=t[5:]: _grad_off_first(s, n), "switched gradients off") for t in TASKS),
]


@pytest.mark.parametrize(
    "name,make,words",
    HUNT19,
    ids=["weight frozen", "model frozen", "new parameter", "patch frozen", "patterns frozen"]
    + [f"{task_id[5:]} grad off" for task_id in TASKS],
)
@pytest.mark.parametrize("seed", [None, 1, 5])
def test_parameters_frozen_or_replaced_lose_points_with_a_named_hint(
    solution, name, make, words, seed
):
    result = _result_under_seed(f"ex11.{name}", make(solution), seed)
    assert result.status == "failed" and result.score < result.max_score, result.feedback
    assert words in result.feedback and "None of the usual" not in result.feedback


def test_columns_zeroed_and_restored_in_place_keep_full_marks():
    result = check_result("ex11.ablate_head", _ablate_zeroing_columns())
    assert result.status == "passed", result.feedback


def _refusing_a_full_block(solution, name):
    """The solution's `name` after a length check of its own that refuses ids of exactly
    block_size tokens (>= for >), which the model takes."""

    def checked(model, ids, *args):
        if ids.shape[1] >= model.config.block_size:
            raise ValueError(f"ids longer than block_size {model.config.block_size}")
        return solution[name](model, ids, *args)

    return checked


@pytest.mark.parametrize("task_id", TASKS)
@pytest.mark.parametrize("seed", [None, 1, 5])
def test_a_length_check_that_refuses_a_full_block_is_told_so(solution, task_id, seed):
    task = get_task(task_id)
    learner = _refusing_a_full_block(solution, task.name)
    if seed is None:  # the notebook's check
        result = check_result(task_id, learner)
    else:
        cases = task.cases(torch.Generator().manual_seed(seed))
        result = judge(task, cases, run_cases(task, learner, cases))
    assert result.status == "failed" and result.score < result.max_score, result.feedback
    assert "exactly block_size long" in result.feedback and "(not >=)" in result.feedback
