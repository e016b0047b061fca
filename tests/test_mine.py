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
