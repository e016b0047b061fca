"""The maintainer commands: stripping solutions, drafting notebooks, stamping."""

import nbformat
import pytest

from tools.notebooks import (
    OUTCOMES,
    ROOT,
    SETUP_SOURCE,
    code_statements,
    from_py,
    make_exercise,
    stamp,
    strip_solutions,
    study_minutes,
)


def test_strip_solutions_keeps_indentation_and_code_around_the_block():
    source = (
        'def f(x):\n    """doc"""\n    ### BEGIN SOLUTION\n    return x + 1\n'
        "    ### END SOLUTION\n\ny = 2"
    )
    assert strip_solutions(source) == (
        'def f(x):\n    """doc"""\n    # YOUR CODE HERE\n    raise NotImplementedError()\n\ny = 2'
    )


def test_strip_solutions_handles_two_blocks_in_a_class():
    source = (
        "class A:\n    def __init__(self):\n        ### BEGIN SOLUTION\n        self.a = 1\n"
        "        ### END SOLUTION\n    def forward(self):\n        ### BEGIN SOLUTION\n"
        "        return self.a\n        ### END SOLUTION"
    )
    stripped = strip_solutions(source)
    assert stripped.count("raise NotImplementedError()") == 2
    assert "self.a = 1" not in stripped and "return self.a" not in stripped


@pytest.mark.parametrize(
    "source",
    [
        "### BEGIN SOLUTION\nx = 1",
        "x = 1\n### END SOLUTION",
        "### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION",
    ],
)
def test_strip_solutions_rejects_unbalanced_markers(source):
    with pytest.raises(ValueError):
        strip_solutions(source)


def test_from_py_and_stamp_make_badge_setup_then_content():
    nb = from_py("# %% [markdown]\n# # Title\n#\n# text\n\n# %%\nx = 1\n")
    stamp(nb, "notebooks/99_test.ipynb")
    assert [c.cell_type for c in nb.cells] == ["markdown", "code", "markdown", "code"]
    assert "colab.research.google.com/github/" in nb.cells[0].source
    assert nb.cells[0].source.endswith("/notebooks/99_test.ipynb)")
    assert nb.cells[1].source == SETUP_SOURCE
    assert nb.cells[2].source == "# Title\n\ntext"
    stamp(nb, "notebooks/99_test.ipynb")  # idempotent
    assert len(nb.cells) == 4


def test_make_exercise_clears_outputs_and_sets_the_exercise_id():
    nb = from_py("# %%\ndef f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION\n")
    nb.cells[0].outputs = [{"output_type": "stream", "name": "stdout", "text": "1"}]
    nb.cells[0].execution_count = 3
    ex = make_exercise(nb, "exercises/03_x.ipynb")
    body = ex.cells[2]
    assert "raise NotImplementedError()" in body.source and body.outputs == []
    assert body.execution_count is None
    assert ex.metadata.course == {"exercise": "ex03"}


def test_study_time_counts_prose_and_code_but_not_the_setup_cell(tmp_path):
    words = " ".join(["word"] * 250)  # 2.5 minutes at 100 words a minute
    code = "\n".join(["# a comment", "", *[f"x{i} = {i}" for i in range(12)]])  # 1.5 minutes
    nb = from_py(f"# %% [markdown]\n# {words}\n\n# %%\n{code}\n")
    stamp(nb, "notebooks/99_test.ipynb")  # adds the badge and the long setup cell
    path = tmp_path / "99_test.ipynb"
    nbformat.write(nb, path)
    assert study_minutes(path) == 5  # 4.2 minutes, rounded up to 5


def test_code_is_counted_in_statements_so_the_layout_does_not_change_the_estimate():
    one_line = "print(f'{x}', sorted(y), sep=', ')  # a comment\n"
    spread = "print(\n    f'{x}',\n    sorted(y),\n    sep=', ',\n)\n\n# a comment\n"
    assert code_statements(one_line) == code_statements(spread) == 1
    assert code_statements("def f(x):\n    y = x + 1\n    return y\n") == 3
    assert code_statements("%matplotlib inline\nx = (\n") == 2  # untokenizable: lines


def test_every_lesson_has_an_outcome_line_for_the_syllabus():
    lessons = {p.name[:2] for p in (ROOT / "notebooks").glob("*.ipynb")}
    missing = sorted(lessons - set(OUTCOMES))
    assert not missing, f"add a one-line outcome to OUTCOMES in tools/notebooks.py for {missing}"


def test_execute_refuses_to_save_on_a_busy_machine(monkeypatch):
    import tools.notebooks as nbtools

    monkeypatch.setattr(nbtools.os, "getloadavg", lambda: (9.0, 9.0, 9.0))
    monkeypatch.setattr(nbtools.os, "cpu_count", lambda: 2)
    assert "load average (9.0) exceeds the number of cores (2)" in nbtools.machine_is_busy()
    ran = []
    monkeypatch.setattr(nbtools, "execute", lambda path: ran.append(path))
    with pytest.raises(SystemExit, match="refusing to execute and save notebooks"):
        nbtools.cmd_execute([nbtools.ROOT / "notebooks" / "00_introduction.ipynb"])
    assert ran == []
    monkeypatch.setattr(nbtools.os, "getloadavg", lambda: (1.5, 1.0, 1.0))
    assert nbtools.machine_is_busy() is None


def test_execute_joins_a_printed_line_split_across_stream_outputs():
    import nbformat

    from tools.notebooks import coalesce_streams

    cell = nbformat.v4.new_code_cell("print('output :', (2, 3))")
    cell.outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="output :"),
        nbformat.v4.new_output("stream", name="stdout", text=" (2, 3)\n"),
        nbformat.v4.new_output("stream", name="stderr", text="a warning\n"),
        nbformat.v4.new_output("stream", name="stdout", text="next\n"),
    ]
    nb = nbformat.v4.new_notebook(cells=[cell])
    coalesce_streams(nb)
    assert [(o.name, o.text) for o in nb.cells[0].outputs] == [
        ("stdout", "output : (2, 3)\n"),
        ("stderr", "a warning\n"),
        ("stdout", "next\n"),
    ]


def test_saved_progress_bars_show_their_final_state():
    import nbformat

    from tools.notebooks import show_final_progress

    def html(value):
        return {"model_name": "HTMLModel", "state": {"value": value}}

    nb = nbformat.v4.new_notebook()
    nb.metadata["widgets"] = {
        "application/vnd.jupyter.widget-state+json": {
            "state": {
                "box": {
                    "model_name": "HBoxModel",
                    "state": {"children": ["IPY_MODEL_l", "IPY_MODEL_b", "IPY_MODEL_r"]},
                },
                "l": html("dates:\u2007100%"),
                "b": {"model_name": "FloatProgressModel", "state": {"value": 700.0, "max": 700.0}},
                "r": html("\u2007700/700\u2007[00:49&lt;00:00,\u200714.3it/s]"),
            }
        }
    }
    shown = "dates:   0%|          | 0/700 [00:00<?, ?it/s]"
    cell = nbformat.v4.new_code_cell("train()")
    cell.outputs = [
        nbformat.v4.new_output(
            "display_data",
            data={
                "text/plain": shown,
                "application/vnd.jupyter.widget-view+json": {"model_id": "box"},
            },
        )
    ]
    nb.cells.append(cell)
    assert show_final_progress(nb) == 1
    assert cell.outputs[0].data["text/plain"] == (
        "dates: 100%|██████████| 700/700 [00:49<00:00, 14.3it/s]"
    )


def test_the_suite_compares_a_bar_at_0_and_at_100_percent_alike():
    import re

    from helpers import ROOT

    text = (ROOT / "tests" / "sanitize.cfg").read_text()
    first = re.search(r"regex: (.*)\nreplace: (.*)", text)
    pattern, replacement = re.compile(first.group(1)), first.group(2)
    start = "dates:   0%|          | 0/700 [00:00<?, ?it/s]"
    end = "dates: 100%|██████████| 700/700 [00:49<00:00, 14.3it/s, loss=0.693]"
    assert pattern.sub(replacement, start) == pattern.sub(replacement, end) == "dates:[PROGRESS]"
