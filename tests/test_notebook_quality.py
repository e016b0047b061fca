"""What people expect from a course notebook, checked on the committed notebooks.

- No code cell prints pages: at most MAX_LINES lines or MAX_CHARS characters of text output.
- Every cell that draws a figure gives it a title and labelled axes (a `course_lib.viz` helper
  does both; a diagram drawn with `axis("off")` needs a title only).
- A lesson's first screen (its first markdown cell after the badge) says what you will build
  and how long it takes to run ("Runs in ... N s").
- A cell that trains (calls `.backward()` inside a loop) shows a tqdm progress bar, or uses a
  `course_lib.train` helper (which shows one).

These are source heuristics, tuned to be simple to satisfy: a failure names the file, the cell
index (in nb.cells, as `nbformat` counts) and what to add.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from helpers import LESSONS, ROOT, SOLUTIONS, read, rel

MAX_LINES, MAX_CHARS = 60, 6000
CHECKED = LESSONS + SOLUTIONS

# Notebooks whose author is still writing them (uncommitted when this list was made): a rule
# they break is an expected failure (strict: once fixed, remove the entry). Keys: (rule, file).
STILL_BEING_WRITTEN: dict[tuple[str, str], str] = {}

TITLE = re.compile(r"\.set_title\(|\bplt\.title\(|\.suptitle\(|\.set\([^)]*\btitle\s*=")
XLABEL = re.compile(r"\.set_xlabel\(|\bplt\.xlabel\(|\.set\([^)]*\bxlabel\s*=|\.supxlabel\(")
YLABEL = re.compile(r"\.set_ylabel\(|\bplt\.ylabel\(|\.set\([^)]*\bylabel\s*=|\.supylabel\(")
AXIS_OFF = re.compile(r"""\.axis\(\s*["']off["']\s*\)|\.set_axis_off\(\)""")
FIRST_SCREEN_BUILDS = re.compile(
    r"\b(you|we) (will )?(build|write|train|make|implement|assemble)|\bIn this lesson\b"
    r"|\bHere we\b|\bYou will\b",
    re.I,
)
RUNS_IN = re.compile(r"Runs in\**\s*:?\**\s*:?[^\n]*?\d+\s*(s|sec|seconds?|min|minutes?)\b")
PROGRESS = re.compile(
    r"\btqdm\b|\btrange\b|\bcourse_lib\.train\b|from course_lib\.train import"
    r"|from course_lib import[^\n]*\btrain\b"
)


def _function_bodies(source: str) -> dict[str, str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    return {
        node.name: ast.get_source_segment(source, node) or ""
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")
    }


def _labelling(bodies: dict[str, str], known: set[str] = frozenset()) -> set[str]:
    """The functions that set a title and label their axes (or draw a diagram with the axes
    off), themselves or through another such function, e.g. head_grid -> attention_heatmap."""
    found = set(known)
    while True:
        new = {
            name
            for name, body in bodies.items()
            if name not in found
            and (
                (TITLE.search(body) or _calls(body, found))
                and (
                    (XLABEL.search(body) and YLABEL.search(body))
                    or AXIS_OFF.search(body)
                    or _calls(body, found)
                )
            )
        }
        if not new:
            return found
        found |= new


def _calls(source: str, names) -> bool:
    return any(re.search(rf"(?<![\w.]){re.escape(n)}\(|\.{re.escape(n)}\(", source) for n in names)


# The figure helpers of course_lib (viz, embeddings, ...): read from the source, not imported.
COURSE_PLOT_HELPERS = sorted(
    _labelling(
        {
            name: body
            for path in sorted((ROOT / "course_lib").glob("*.py"))
            for name, body in _function_bodies(path.read_text()).items()
        }
    )
)


def _case(rule: str, path: Path):
    reason = STILL_BEING_WRITTEN.get((rule, rel(path)))
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(path, id=rel(path), marks=marks)


def _cases(rule: str, paths) -> list:
    return [_case(rule, p) for p in paths]


def _indexed_code_cells(nb):
    return [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]


def _text_of(output) -> str:
    if output.output_type == "stream":
        return output.get("text", "")
    if output.output_type == "error":
        return "\n".join(output.get("traceback", []))
    return output.get("data", {}).get("text/plain", "")


def _makes_figure(cell) -> bool:
    return any(
        "image/png" in o.get("data", {}) or "image/svg+xml" in o.get("data", {})
        for o in cell.get("outputs", [])
    )


def _plot_helpers(nb) -> set[str]:
    """course_lib's figure helpers and the notebook's own functions that label their figure."""
    bodies = {}
    for _, cell in _indexed_code_cells(nb):
        bodies.update(_function_bodies(cell.source))
    return _labelling(bodies, set(COURSE_PLOT_HELPERS))


@pytest.mark.parametrize("path", _cases("output length", CHECKED))
def test_no_cell_prints_pages(path):
    too_long = []
    for i, cell in _indexed_code_cells(read(path)):
        text = "".join(_text_of(o) for o in cell.get("outputs", []))
        lines = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
        if lines > MAX_LINES or len(text) > MAX_CHARS:
            too_long.append(f"cell {i}: {lines} lines, {len(text)} characters")
    assert not too_long, (
        f"{rel(path)} prints too much (limit {MAX_LINES} lines or {MAX_CHARS} characters per "
        f"cell; print a slice, round, or summarise): " + "; ".join(too_long)
    )


@pytest.mark.parametrize("path", _cases("figure labels", CHECKED))
def test_every_figure_has_a_title_and_labelled_axes(path):
    nb = read(path)
    helpers = _plot_helpers(nb)
    problems = []
    for i, cell in _indexed_code_cells(nb):
        if not _makes_figure(cell):
            continue
        src = cell.source
        by_helper = _calls(src, helpers)
        if not (TITLE.search(src) or by_helper):
            problems.append(f"cell {i}: no title (set_title/plt.title/suptitle or a viz helper)")
        labelled = (XLABEL.search(src) and YLABEL.search(src)) or by_helper
        if not labelled and not AXIS_OFF.search(src):
            problems.append(
                f"cell {i}: axes not labelled (set_xlabel and set_ylabel, a "
                "course_lib.viz helper, or axis('off') for a diagram)"
            )
    assert not problems, f"{rel(path)}: " + "; ".join(problems)


ALT_MAX = 300
ALT_FILLER = re.compile(r"^(image of|figure of|a picture)", re.I)


def _alt_problems(nb) -> list[str]:
    problems = []
    for i, cell in _indexed_code_cells(nb):
        figures = sum(_makes_figure({"outputs": [o]}) for o in cell.get("outputs", []))
        alt = cell.get("metadata", {}).get("alt")
        if not figures:
            if alt is not None:
                problems.append(f"cell {i}: metadata 'alt' but no figure")
            continue
        if not isinstance(alt, list) or len(alt) != figures:
            problems.append(f"cell {i}: {figures} figure(s), metadata 'alt' is {alt!r}")
            continue
        for text in alt:
            if not isinstance(text, str) or not text.strip():
                problems.append(f"cell {i}: an empty description")
            elif len(text) > ALT_MAX:
                problems.append(f"cell {i}: a description of {len(text)} characters")
            elif ALT_FILLER.match(text.strip()):
                problems.append(f"cell {i}: a description opens with {text.split()[:3]}")
    return problems


@pytest.mark.parametrize("path", _cases("figure descriptions", CHECKED))
def test_every_figure_has_a_description_for_screen_readers(path):
    """The site writes a figure's description as its alt text (a screen reader reads it): each
    figure's cell carries one per figure in its metadata "alt", which re-running keeps."""
    problems = _alt_problems(read(path))
    assert not problems, (
        f'{rel(path)}: figures need a description each (cell metadata "alt": a list of one '
        f"string per figure, 1-{ALT_MAX} characters, saying what it shows): " + "; ".join(problems)
    )


def test_the_description_rule_catches_what_it_should():
    import nbformat

    png = nbformat.v4.new_output("display_data", data={"image/png": "iVBO", "text/plain": "x"})
    cell = nbformat.v4.new_code_cell("plt.show()", outputs=[png])
    nb = nbformat.v4.new_notebook(cells=[cell])
    assert _alt_problems(nb) == ["cell 0: 1 figure(s), metadata 'alt' is None"]
    for bad in ([""], ["x" * 301], ["Image of a plot"], ["one", "two"], "a line"):
        cell.metadata["alt"] = bad
        assert _alt_problems(nb), bad
    cell.metadata["alt"] = ["A line rising from left to right: the loss falls as training runs."]
    assert _alt_problems(nb) == []


@pytest.mark.parametrize("path", _cases("first screen", LESSONS))
def test_first_screen_says_what_you_build_and_how_long_it_runs(path):
    cells = [
        c
        for c in read(path).cells
        if c.cell_type == "markdown" and "course-badge" not in c.get("metadata", {}).get("tags", [])
    ]
    assert cells, f"{rel(path)} has no markdown cell"
    first = cells[0].source
    assert first.startswith("# Lesson "), f"{rel(path)}: the first markdown cell is not the title"
    assert FIRST_SCREEN_BUILDS.search(first), (
        f"{rel(path)}: the first markdown cell does not say what you will build "
        "('In this lesson you build ...')"
    )
    assert RUNS_IN.search(first), (
        f"{rel(path)}: the first markdown cell does not say how long it runs "
        "('**Runs in**: about N s on a laptop CPU')"
    )


UPDATES = {"step", "sub_", "add_", "copy_"}  # optimizer.step(), or a hand-written SGD update


def _trains_in_a_loop(source: str) -> bool:
    """True when a for/while loop calls `.backward()` and updates weights (`.step()`, `-=`).

    A loop that only measures gradients (no update) is not training and runs in milliseconds.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ".backward(" in source and ".step(" in source
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.While, ast.AsyncFor)):
            inner = list(ast.walk(node))
            calls = {
                n.func.attr
                for n in inner
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            }
            updates = calls & UPDATES or any(isinstance(n, ast.AugAssign) for n in inner)
            if "backward" in calls and updates:
                return True
    return False


@pytest.mark.parametrize("path", _cases("progress bar", CHECKED))
def test_training_loops_show_a_progress_bar(path):
    missing = [
        f"cell {i}"
        for i, cell in _indexed_code_cells(read(path))
        if _trains_in_a_loop(cell.source) and not PROGRESS.search(cell.source)
    ]
    assert not missing, (
        f"{rel(path)}: training loops without a progress bar in {', '.join(missing)} "
        "(wrap the loop in `tqdm(...)` from tqdm.auto, or use a course_lib.train helper)"
    )


def test_the_heuristics_catch_what_they_should():
    assert _trains_in_a_loop("for step in range(9):\n    loss.backward()\n    opt.step()\n")
    assert _trains_in_a_loop(
        "def fit():\n    while True:\n        loss.backward()\n"
        "        with torch.no_grad():\n            w -= 0.1 * w.grad\n"
    )
    assert not _trains_in_a_loop("for d in dims:\n    loss.backward()\n")  # measures only
    assert not _trains_in_a_loop("loss.backward()\nopt.step()\n")
    assert PROGRESS.search("for step in tqdm(range(100)):\n    loss.backward()")
    assert TITLE.search("ax.set_title('x')") and TITLE.search("fig.suptitle('x')")
    assert XLABEL.search("plt.xlabel('x')") and YLABEL.search("ax.set(ylabel='y')")
    assert AXIS_OFF.search('ax.axis("off")')
    assert RUNS_IN.search("**Runs in**: about 15 s on a laptop CPU")
    assert RUNS_IN.search("**Runs in:** about 2 minutes")
    assert not RUNS_IN.search("**Runs in**: quickly")
    helpers = set(COURSE_PLOT_HELPERS)
    assert {"attention_heatmap", "line_plot", "plot_embeddings_2d", "head_grid"} <= helpers
    assert _labelling({"draw": "ax.axis('off')\nax.set_title('t')", "plain": "ax.plot(x)"}) == {
        "draw"
    }
    assert (ROOT / "notebooks").is_dir()


@pytest.mark.parametrize("path", SOLUTIONS, ids=rel)
def test_every_task_states_its_difficulty_in_bold_before_its_code(path):
    """A learner sees the stars and minutes of a task before reading it, in the same place in
    every set: one bold line in the text above the task, none in the code they edit."""
    cells = read(path).cells
    checks = [m for c in cells if c.cell_type == "code" for m in re.findall(r'check\("', c.source)]
    bold = [
        line
        for c in cells
        if c.cell_type == "markdown"
        for line in c.source.splitlines()
        if re.fullmatch(r"\*\*Difficulty ★+☆*, about \d+ minutes[^*]*\.\*\*", line)
    ]
    in_code = [c.source[:60] for c in cells if c.cell_type == "code" and "Difficulty" in c.source]
    assert len(bold) == len(checks) and not in_code, (len(bold), len(checks), in_code)
