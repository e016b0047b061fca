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
    monkeypatch.setattr(library, "_TOLD", set())
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


def _ran(source: str, success: bool = True):
    """What IPython hands its post_run_cell hook after running a cell."""
    from types import SimpleNamespace

    return SimpleNamespace(info=SimpleNamespace(raw_cell=source), success=success)


@pytest.mark.parametrize(
    "first, words",
    [
        ("# save in mine/attention .py", "is not a marker"),
        ("# Save in mine/attention.py", "is not a marker"),
        ("# save in mine/attention", "is not a marker"),
        ("# save in mine/attention.py  # my softmax", "is not a marker"),
        ("import torch\n# save in mine/attention.py", "is not its first line"),
    ],
)
def test_a_marker_with_a_typo_says_the_cell_was_not_saved(folder, capsys, first, words):
    # hunt m10: the cell ran, its check passed, and nothing said that mine/ never got it; a
    # later exercise then borrowed the course's softmax, "not written yet"
    library._after_cell(_ran(first + "\n" + SOFTMAX.split("\n", 1)[1]))
    out = capsys.readouterr().out
    assert not folder.exists()
    assert "this cell was not saved in your library" in out and words in out
    assert "`# save in mine/NAME.py`" in out


def test_right_markers_save_quietly_and_other_cells_say_nothing(folder, capsys):
    for first in (
        "# save in mine/attention.py",
        "#save in mine/attention.py  ",
        "  # save in mine/attention.py",
    ):
        library._after_cell(_ran(first + "\r\n" + SOFTMAX.split("\n", 1)[1].replace("\n", "\r\n")))
    library._after_cell(_ran("x = 1  # a plain cell\n"))
    library._after_cell(_ran("# save in mine/attention .py\nx = 1 / 0\n", success=False))
    assert capsys.readouterr().out == ""
    assert list(library.sections((folder / "attention.py").read_text())) == ["softmax"]


def test_a_marked_cell_that_stopped_with_an_error_says_it_was_not_saved(folder, capsys):
    # hunt m10: a marked cell whose last line (a quick try of the function) raised left the
    # function defined, its check passed, and mine/ kept the older version with no word
    library.save_cell(WRONG_SOFTMAX)
    library._after_cell(_ran(SOFTMAX + "softmax(torch.zeros(2)).sum(dim=3)\n", success=False))
    out = capsys.readouterr().out
    assert "this cell stopped with an error, so it was not saved: mine/attention.py keeps" in out
    assert "x.exp() / x.exp()" in (folder / "attention.py").read_text()


MASKED_ATTENTION = (
    "# save in mine/masking.py\n"
    + library.sections((ROOT / "solutions" / "mine" / "masking.py").read_text())[
        "masked_attention"
    ].split("\n", 1)[1]
)


def test_a_piece_built_on_a_borrowed_one_says_so_and_takes_the_fix(folder, capsys):
    # hunt m10: masked_attention (exercise 05) takes softmax with mine(). With exercise 02's
    # softmax failing, exercise 09 printed "✅ ex05.masked_attention: yours" and nothing else;
    # after the learner fixed softmax, re-running the cell kept the course's softmax inside
    # masking.py (imported once) and report() still said borrowed, until a kernel restart
    from course_lib.attention import softmax as course_softmax

    library.save_cell(WRONG_SOFTMAX)
    library.save_cell(MASKED_ATTENTION)
    masked_attention = library.mine("ex05.masked_attention")
    out = capsys.readouterr().out
    assert "⚠️  ex05.masked_attention: yours, from mine/masking.py, but it uses the course's "
    assert "ex02.softmax, borrowed (ex02.softmax: the version in mine/attention.py does not" in out
    assert "Finish exercise 02, then run this cell again." in out
    assert masked_attention.__globals__["softmax"] is course_softmax
    assert library.borrowed() == ["ex02.softmax"]
    library.save_cell(SOFTMAX)  # exercise 02 fixed
    masked_attention = library.mine("ex05.masked_attention")
    assert masked_attention.__globals__["softmax"].__module__ == "mine.attention"
    assert "✅ ex05.masked_attention: yours, from mine/masking.py" in capsys.readouterr().out
    assert library.borrowed() == []
    assert library.mine("ex05.causal_mask") is not None  # no masking.py piece: still borrowed
    assert "uses the course's" not in capsys.readouterr().out


def test_the_capstone_on_the_courses_softmax_is_named_and_halved(tmp_path, monkeypatch, capsys):
    # hunt m10: a GPT whose masked_attention ran the course's softmax (exercise 02's failing)
    # scored full marks, "passed all 18 checks", with no word of the borrowed softmax
    from course_lib.grading import check_result

    shutil.copytree(ROOT / "solutions" / "mine", tmp_path / "mine")
    monkeypatch.setenv("COURSE_MINE", str(tmp_path / "mine"))
    monkeypatch.setattr(library, "_LEDGER", {})
    monkeypatch.setattr(library, "_MODULES", {})
    monkeypatch.setattr(library, "_CHECKED", {})
    attention = tmp_path / "mine" / "attention.py"
    right = "shifted = x - x.amax(dim=dim, keepdim=True)"
    attention.write_text(attention.read_text().replace(right, "shifted = x"))
    result = check_result("ex09.GPT", library._load(tmp_path / "mine" / "gpt.py").GPT)
    assert (result.status, result.score, result.max_score) == ("passed", 0.5, 1.0)
    assert "Built with the course's course_lib.attention.softmax" in result.feedback
    assert "ex02.softmax: the version in mine/attention.py does not pass" in result.feedback


def test_the_capstone_names_the_borrowed_attention_not_the_softmax_it_calls(
    tmp_path, monkeypatch, capsys
):
    # the course's attention, standing in for a missing masked_attention, calls the course's
    # softmax: the learner's own softmax passes and was not borrowed, so it is not named
    from course_lib.grading import check_result

    shutil.copytree(ROOT / "solutions" / "mine", tmp_path / "mine")
    monkeypatch.setenv("COURSE_MINE", str(tmp_path / "mine"))
    monkeypatch.setattr(library, "_LEDGER", {})
    monkeypatch.setattr(library, "_MODULES", {})
    monkeypatch.setattr(library, "_CHECKED", {})
    masking = tmp_path / "mine" / "masking.py"
    masking.write_text(masking.read_text().replace("def masked_attention(", "def unused("))
    result = check_result("ex09.GPT", library._load(tmp_path / "mine" / "gpt.py").GPT)
    assert (result.status, result.score) == ("passed", 0.5), result.feedback
    assert (
        "Built with the course's course_lib.attention.scaled_dot_product_attention, borrowed"
        in (result.feedback)
    )
    assert "softmax" not in result.feedback


def test_a_piece_that_cannot_be_found_says_why(folder, capsys, monkeypatch, tmp_path):
    # hunt m10: a file that is not valid Python, or a function named otherwise, was "not
    # written yet"; a notebook run from another folder (Colab's /content without COURSE_MINE,
    # VS Code's workspace root) was told the same, with no word of where mine() looked
    library.save_cell(STUB_MASK)
    (folder / "masking.py").write_text((folder / "masking.py").read_text() + "\ndef oops(:\n")
    library.mine("ex05.causal_mask")
    out = capsys.readouterr().out
    assert "ex05.causal_mask: mine/masking.py is not valid Python (line " in out
    assert "not written yet" not in out
    library.save_cell(SOFTMAX.replace("def softmax", "def my_softmax"))
    library.mine("ex02.softmax")
    out = capsys.readouterr().out
    assert "not written yet in mine/attention.py, which defines no `softmax` (it defines " in out
    assert "my_softmax" in out
    monkeypatch.setenv("COURSE_MINE", str(tmp_path / "elsewhere" / "mine"))
    library.mine("ex02.softmax")
    library.mine("ex03.MultiHeadAttention")
    out = capsys.readouterr().out
    assert "ex02.softmax: not written yet in mine/attention.py. Finish it in exercise 02" in out
    where = f"mine() looks for your library in {tmp_path / 'elsewhere' / 'mine'} (no such folder)"
    assert out.count(where) == 1 and "set COURSE_MINE to its folder" in out  # once a session
    monkeypatch.setenv("COURSE_BATCH_GRADING", "1")  # the grader's copy: nothing to say there
    monkeypatch.setattr(library, "_TOLD", set())
    library.mine("ex02.softmax")
    assert "looks for your library" not in capsys.readouterr().out


def test_a_cells_earlier_version_under_another_key_does_not_shadow_it(folder):
    # hunt m10: a cell's key is its last definition. FeedForward's cell with a helper added
    # below it was saved as "helper"; with the helper moved back up, as "FeedForward" again,
    # and the "helper" part, later in the file, still held the older FeedForward: importing
    # mine/blocks.py gave the older class, with no word
    marker, helper = "# save in mine/blocks.py\n", "def helper():\n    pass\n"
    first = marker + "class FeedForward:\n    version = 1\n"
    second = marker + "class FeedForward:\n    version = 2\n\n\n" + helper
    third = marker + helper + "\n\nclass FeedForward:\n    version = 3\n"
    other = "# save in mine/blocks.py\ndef layer_norm(x):\n    return x\n"
    for cell in (first, other, second, third):
        path = library.save_cell(cell)
    assert list(library.sections(path.read_text())) == ["layer_norm", "FeedForward"]
    assert library._load(path).FeedForward.version == 3


def _cell(source: str, number: int, namespace: dict) -> None:
    """Run `source` as IPython runs a cell: compiled under a name whose lines linecache keeps."""
    import linecache

    filename = f"<ipython-input-{number}-m10>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)


def test_marked_cells_run_before_the_imports_are_saved_when_saving_starts(folder, monkeypatch):
    # hunt m10: after a kernel restart, the fixed softmax cell run before the first cell (whose
    # import switches saving on) passed its check, ✅, but mine/attention.py kept the old
    # version: exercise 05 then said "does not pass its check yet" of a piece shown passing
    from types import SimpleNamespace

    import IPython

    library.save_cell(WRONG_SOFTMAX)  # last week's
    namespace = {"__name__": "__main__"}
    _cell(SOFTMAX, 1, namespace)  # this week's fix, run first
    _cell(
        "# save in mine/attention.py\nclass Helper:\n    def f(self):\n        pass\n", 2, namespace
    )
    _cell("def unmarked():\n    pass\n", 3, namespace)
    registered = []
    shell = SimpleNamespace(
        user_ns=namespace,
        events=SimpleNamespace(callbacks={}, register=lambda *a: registered.append(a)),
    )
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    library._hook_into_ipython()  # what `from course_lib.mine import ...` does
    assert registered == [("post_run_cell", library._after_cell)]
    parts = library.sections((folder / "attention.py").read_text())
    assert list(parts) == ["softmax", "Helper"] and "amax" in parts["softmax"]


def test_the_batch_grader_says_a_library_was_not_handed_in(tmp_path):
    # hunt m10: ex09 handed in without its mine/ folder scored half on the capstone with every
    # piece "not written yet in mine/...", which blames the learner's work, not the hand-in
    import nbformat

    from course_lib.grading.batch import grade

    probe = (
        'split_heads = mine("ex03.split_heads")\n'
        "import course_lib.mine as library\n"
        'raise RuntimeError(library.ledger()["ex03.split_heads"]["why"])'
    )
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in ("from course_lib.mine import mine", probe)]
    for learner, library_too in (("ada", False), ("bob", True)):
        folder = tmp_path / "submissions" / learner
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / "09_gpt_from_scratch.ipynb")
        if library_too:
            (folder / "mine").mkdir()
    grade([tmp_path / "submissions"], tmp_path / "grades", timeout=300, jobs=1)
    rows = json.loads((tmp_path / "grades" / "scores.json").read_text())
    errors = {Path(row["submission"]).parent.name: row["error"] for row in rows}
    assert "RuntimeError: not handed in (no mine/ folder beside the notebook)" in errors["ada"]
    assert "RuntimeError: not written yet in mine/multihead.py" in errors["bob"]


def test_the_capstones_feedback_gives_a_reason_shared_by_pieces_once():
    from course_lib.grading.core import borrowed_message

    why = "not handed in (no mine/ folder beside the notebook)"
    ledger = {t: {"whose": "borrowed", "why": why} for t in ("ex03.split_heads", "ex04.apply_rope")}
    ledger["ex05.causal_mask"] = {"whose": "borrowed", "why": "not written yet in mine/masking.py"}
    message = borrowed_message(["course_lib.positional.apply_rope"], {"ledger": ledger})
    assert message.count(why) == 1
    assert f"(ex03.split_heads, ex04.apply_rope: {why}; ex05.causal_mask: not written" in message


def test_a_cell_that_tries_its_code_on_the_notebooks_names_is_told_where_and_why(folder, capsys):
    # hunt m10: a softmax cell ending with `print(softmax(scores))` (the lesson's scores) is
    # saved whole; every later import raised NameError, and exercise 05 said "mine/attention.py
    # raises NameError when imported: name 'scores' is not defined. Finish it in exercise 02"
    # of a piece exercise 02 showed passing, with no word of which line or why
    library.save_cell(STUB_MASK)
    library.save_cell(SOFTMAX + "\n\nprint(softmax(scores))  # trying it\n")
    library.mine("ex02.softmax")
    out = capsys.readouterr().out
    assert "mine/attention.py raises NameError when imported (line " in out
    assert "in the part saved by the cell of `softmax`): name 'scores' is not defined" in out
    assert "move a line that tries your code on the notebook's names into a cell of its own" in out


def test_a_library_folder_named_from_the_home_folder_is_found_there(tmp_path, monkeypatch):
    # hunt m10: COURSE_MINE="~/course/mine" saved into a folder literally named "~" inside the
    # notebook's folder, one per working directory, and mine() read from there
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COURSE_MINE", "~/course/mine")
    monkeypatch.chdir(tmp_path)
    assert library.save_cell(SOFTMAX) == tmp_path / "home" / "course" / "mine" / "attention.py"
    assert not (tmp_path / "~").exists()
