"""The learner's own library (course_lib.mine): marked cells saved, pieces checked and used,
borrowed pieces named, course_lib's model modules out of reach in own_code_only()."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from course_lib import mine as library

ROOT = Path(__file__).resolve().parent.parent

SOFTMAX = """# save in mine/attention.py
def softmax(x, dim=-1):
    e = (x - x.amax(dim=dim, keepdim=True)).exp()
    return e / e.sum(dim=dim, keepdim=True)
"""
WRONG_SOFTMAX = """# save in mine/attention.py
def softmax(x, dim=-1):
    return x.exp() / x.exp().sum(dim=dim, keepdim=True)
"""
STUB_MASK = """# save in mine/masking.py
def causal_mask(n):
    raise NotImplementedError()
"""


@pytest.fixture()
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_MINE", str(tmp_path / "mine"))
    monkeypatch.setattr(library, "_LEDGER", {})
    monkeypatch.setattr(library, "_MODULES", {})
    monkeypatch.setattr(library, "_CHECKED", {})
    return tmp_path / "mine"


def test_a_marked_cell_is_saved_and_rerunning_it_replaces_only_its_part(folder):
    assert library.save_cell(SOFTMAX) == folder / "attention.py"
    other = "# save in mine/attention.py\ndef helper(x):\n    return x\n"
    library.save_cell(other)
    library.save_cell(WRONG_SOFTMAX)  # the softmax cell edited and run again
    text = (folder / "attention.py").read_text()
    assert text.count("def softmax") == 1 and "x.exp() / x.exp()" in text
    assert "def helper" in text and (folder / "__init__.py").exists()
    assert list(library.sections(text)) == ["softmax", "helper"]


def test_unmarked_or_broken_cells_are_not_saved(folder):
    assert library.save_cell("def softmax(x):\n    return x\n") is None
    assert library.save_cell("# save in mine/attention.py\ndef softmax(x:\n") is None
    assert not folder.exists()


def test_mine_returns_a_passing_piece_and_borrows_the_rest_by_name(folder, capsys):
    library.save_cell(SOFTMAX)
    library.save_cell(STUB_MASK)
    own = library.mine("ex02.softmax")
    assert own.__module__ == "mine.attention"
    from course_lib.masking import causal_mask
    from course_lib.multihead import MultiHeadAttention

    assert library.mine("ex05.causal_mask") is causal_mask  # a stub: not written yet
    assert library.mine("ex03.MultiHeadAttention") is MultiHeadAttention  # no file at all
    out = capsys.readouterr().out
    assert "✅ ex02.softmax: yours, from mine/attention.py" in out
    assert "ex05.causal_mask: not written yet in mine/masking.py" in out
    assert "Finish it in exercise 03" in out
    assert library.borrowed() == ["ex03.MultiHeadAttention", "ex05.causal_mask"]


def test_a_piece_that_fails_its_check_is_borrowed_and_fixing_it_takes_effect(folder, capsys):
    library.save_cell(WRONG_SOFTMAX)
    from course_lib.attention import softmax

    assert library.mine("ex02.softmax") is softmax
    assert "does not pass its check yet" in capsys.readouterr().out
    library.save_cell(SOFTMAX)
    assert library.mine("ex02.softmax") is not softmax
    assert library.borrowed() == []


def test_a_module_that_raises_on_import_is_named(folder, capsys):
    cell = "# save in mine/attention.py\nboom = 1 / 0\ndef softmax(x, dim=-1):\n    ...\n"
    library.save_cell(cell)
    library.mine("ex02.softmax")
    assert "mine/attention.py raises ZeroDivisionError when imported" in capsys.readouterr().out


def _masked_attention_with(softmax):
    def masked_attention(q, k, v, mask):
        scores = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).masked_fill(~mask, float("-inf"))
        any_key = mask.any(dim=-1, keepdim=True)
        weights = softmax(scores.masked_fill(~any_key, 0.0), dim=-1).masked_fill(~mask, 0.0)
        return weights @ v, weights

    return masked_attention


def test_a_later_task_names_an_earlier_piece_that_stood_in_without_halving(folder, capsys):
    from course_lib.grading import check_result

    library.mine("ex03.MultiHeadAttention")  # borrowed too, but masked_attention never calls it
    borrowed = check_result(
        "ex05.masked_attention", _masked_attention_with(library.mine("ex02.softmax"))
    )
    assert borrowed.score == borrowed.max_score, borrowed.feedback
    assert "Built with the course's ex02.softmax (not written yet in mine/attention.py)" in (
        borrowed.feedback
    )
    assert "graded in exercise 02" in borrowed.feedback
    assert "MultiHeadAttention" not in borrowed.feedback
    library.save_cell(SOFTMAX)
    own = check_result(
        "ex05.masked_attention", _masked_attention_with(library.mine("ex02.softmax"))
    )
    assert own.feedback == "passed all 9 checks.", own.feedback
    capsys.readouterr()


def test_an_unknown_task_id_is_a_clear_error(folder):
    with pytest.raises(ValueError, match="expects a task id such as"):
        library.mine("ex03.multihead")


def test_own_code_only_blocks_the_model_modules_for_the_learner_and_restores_them(folder):
    import course_lib
    import course_lib.multihead as before

    with library.own_code_only({}):
        assert "course_lib.multihead" not in sys.modules
        with pytest.raises(ImportError, match="out of reach inside own_code_only"):
            import course_lib.multihead  # noqa: F401
        with pytest.raises(ImportError):
            from course_lib import gpt  # noqa: F401  (the package attribute is gone too)
        from course_lib.datasets import load_shakespeare  # data stays available

        assert callable(load_shakespeare)
    assert sys.modules["course_lib.multihead"] is before and course_lib.multihead is before


def test_own_code_only_names_course_objects_still_in_the_namespace(folder, capsys):
    from course_lib.multihead import MultiHeadAttention

    with library.own_code_only({"MultiHeadAttention": MultiHeadAttention, "x": 1}):
        pass
    assert "borrowed: MultiHeadAttention (course_lib.multihead)" in capsys.readouterr().out
    with library.own_code_only({"x": 1}):
        pass
    assert "borrowed: nothing (0 pieces yours)" in capsys.readouterr().out


def test_committed_solution_library_is_what_the_solutions_marked_cells_save():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import notebooks
    finally:
        sys.path.remove(str(ROOT / "tools"))
    want = notebooks.solution_library()
    have = {p.name: p.read_text() for p in sorted((ROOT / "solutions" / "mine").glob("*.py"))}
    assert have == want, "run: python tools/notebooks.py mine"


BROKEN_MHA = """

# >>> cell: MultiHeadAttention
# save in mine/multihead.py
_Right = MultiHeadAttention


class MultiHeadAttention(_Right):
    def forward(self, query, key, value, mask=None):
        output, weights = super().forward(query, key, value, mask)
        return 2 * output, weights  # a slip the check catches
# <<< cell: MultiHeadAttention
"""


def test_the_batch_grader_names_a_broken_earlier_piece_and_halves_the_capstone(tmp_path):
    from course_lib.grading.batch import grade

    learner = tmp_path / "submissions" / "ada"
    shutil.copytree(ROOT / "solutions" / "mine", learner / "mine")
    shutil.copy(ROOT / "solutions" / "09_gpt_from_scratch.ipynb", learner)
    with (learner / "mine" / "multihead.py").open("a") as f:
        f.write(BROKEN_MHA)
    grade([tmp_path / "submissions"], tmp_path / "grades", timeout=600, jobs=1)
    (row,) = json.loads((tmp_path / "grades" / "scores.json").read_text())
    capstone = row["tasks"]["ex09.GPT"]
    assert capstone["score"] == capstone["max_score"] / 2, capstone
    assert "course_lib.multihead.MultiHeadAttention" in capstone["feedback"]
    assert (
        "ex03.MultiHeadAttention: the version in mine/multihead.py does not pass"
        in (capstone["feedback"])
    )
    others = {k: v for k, v in row["tasks"].items() if k != "ex09.GPT"}
    assert all(t["score"] == t["max_score"] for t in others.values()), others


def test_a_changed_library_grades_its_notebook_again(tmp_path):
    from course_lib.grading.resume import Store

    (tmp_path / "mine").mkdir()
    notebook = tmp_path / "09_gpt_from_scratch.ipynb"
    notebook.write_text("{}")
    store = Store(tmp_path / "out", {"timeout": 300})
    before = store.key("ada", notebook)
    (tmp_path / "mine" / "multihead.py").write_text("x = 1\n")
    assert store.key("ada", notebook) != before


# every piece the solutions of exercises 02-07 save, by task id
SOLUTION_PIECES = {
    "ex02.softmax",
    "ex02.scaled_dot_product_attention",
    "ex03.split_heads",
    "ex03.merge_heads",
    "ex03.MultiHeadAttention",
    "ex04.sinusoidal_positional_encoding",
    "ex04.apply_rope",
    "ex05.causal_mask",
    "ex05.padding_mask",
    "ex05.masked_attention",
    "ex07.layer_norm",
    "ex07.LayerNorm",
    "ex07.FeedForward",
    "ex07.EncoderLayer",
}


def _marked_pieces() -> set[str]:
    """The task ids of the solutions' marked cells (02-07): what a cell saves is named by the
    last name it defines, and a helper that is no task (ex07's `activate`) is skipped."""
    import nbformat

    from course_lib.grading import get_task

    found = set()
    for path in sorted((ROOT / "solutions").glob("0[2-7]_*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code" and library.marked_module(cell.source):
                names = [n for n in library.defined_names(cell.source) if not n.startswith("_")]
                task_id = f"ex{path.name[:2]}.{names[-1]}"
                try:
                    get_task(task_id)
                except KeyError:
                    continue
                found.add(task_id)
    return found


def test_the_solutions_library_gives_the_learners_own_version_of_every_piece(monkeypatch, capsys):
    monkeypatch.setenv("COURSE_MINE", str(ROOT / "solutions" / "mine"))
    monkeypatch.setattr(library, "_LEDGER", {})
    monkeypatch.setattr(library, "_MODULES", {})
    monkeypatch.setattr(library, "_CHECKED", {})
    assert _marked_pieces() == SOLUTION_PIECES
    for task_id in sorted(SOLUTION_PIECES):
        piece = library.mine(task_id)
        assert piece.__module__.startswith("mine."), (task_id, piece.__module__)
    assert library.borrowed() == [], capsys.readouterr().out
    assert "borrowed" not in capsys.readouterr().out


@pytest.mark.parametrize("name", ["multihead.py", "blocks.py"])
def test_the_solutions_attention_and_blocks_hold_no_course_code(name):
    import ast

    tree = ast.parse((ROOT / "solutions" / "mine" / name).read_text())
    course_imports = [
        ast.unparse(node)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        and any(
            (getattr(node, "module", None) or alias.name).startswith("course_lib")
            for alias in node.names
        )
    ]
    assert course_imports == ["from course_lib.mine import mine"]


def test_a_piece_taken_with_mine_is_not_mistaken_for_its_home(folder, capsys):
    # blocks.py takes MultiHeadAttention from the library; with no multihead.py the piece is
    # borrowed, not looked for in blocks.py (which would load blocks.py from inside itself)
    cell = (
        "# save in mine/blocks.py\n"
        'MultiHeadAttention = mine("ex03.MultiHeadAttention")\n\n\n'
        "class EncoderLayer:\n    pass\n"
    )
    library.save_cell(cell)
    from course_lib.multihead import MultiHeadAttention

    assert library.mine("ex03.MultiHeadAttention") is MultiHeadAttention
    assert "not written yet in mine/multihead.py" in capsys.readouterr().out


def test_the_solutions_encoder_layer_equals_pytorchs_and_the_courses(monkeypatch):
    # exercise 07's EncoderLayer as the library holds it (built from the learner's
    # MultiHeadAttention, LayerNorm and activate): nn.TransformerEncoderLayer's results for the
    # activations PyTorch names, course_lib's EncoderLayer's for all four
    import torch
    from torch import nn

    from course_lib.blocks import EncoderLayer as CourseEncoderLayer
    from course_lib.grading.core import exercise_state
    from course_lib.multihead import torch_attention_state

    monkeypatch.setenv("COURSE_MINE", str(ROOT / "solutions" / "mine"))
    monkeypatch.setattr(library, "_LEDGER", {})
    monkeypatch.setattr(library, "_MODULES", {})
    monkeypatch.setattr(library, "_CHECKED", {})
    EncoderLayer = library.mine("ex07.EncoderLayer")
    assert EncoderLayer.__module__ == "mine.blocks" and library.borrowed() == []
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 16, generator=gen, dtype=torch.float64)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    for activation in ("relu", "gelu", "gelu_tanh", "relu2"):
        for bias in (True, False):
            for norm_first in (False, True):
                ours = EncoderLayer(16, 4, 32, norm_first, activation, bias).double().eval()
                course = (
                    CourseEncoderLayer(
                        16, 4, 32, norm_first=norm_first, activation=activation, bias=bias
                    )
                    .double()
                    .eval()
                )
                with torch.no_grad():
                    for p in course.parameters():
                        p.normal_(std=0.5, generator=gen)
                ours.load_state_dict(exercise_state(course.state_dict()))
                with torch.no_grad():
                    torch.testing.assert_close(ours(x, causal), course(x, causal))
                if activation in ("relu", "gelu"):
                    theirs = nn.TransformerEncoderLayer(
                        16,
                        4,
                        32,
                        0.0,
                        activation,
                        bias=bias,
                        norm_first=norm_first,
                        batch_first=True,
                        dtype=torch.float64,
                    ).eval()
                    ours.load_state_dict(torch_attention_state(theirs.state_dict()))
                    with torch.no_grad():
                        torch.testing.assert_close(ours(x), theirs(x))
