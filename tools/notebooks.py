"""Maintainer commands for the course's notebooks.

    python tools/notebooks.py stamp       # badge + setup cell at the top of every notebook
    python tools/notebooks.py exercises   # exercises/ generated from solutions/
    python tools/notebooks.py execute [PATH ...]   # re-run notebooks from a fresh kernel, save
                                                   # (refuses on a busy machine: --busy-ok)
    python tools/notebooks.py readme      # the syllabus table in README.md
    python tools/notebooks.py mine        # solutions/mine/ from the solutions' marked cells
    python tools/notebooks.py all [PATH ...]       # all of the above (mine before execute)
    python tools/notebooks.py from-py DRAFT.py NOTEBOOK.ipynb   # draft a notebook from a script

`execute` with no paths re-runs every lesson and solution notebook. Exercises are saved
without outputs, as learners get them. tests/test_notebooks.py fails when any of this drifts.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import sys
import time
import tokenize
import uuid
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from course_lib import BRANCH, REPOSITORY  # noqa: E402

FOLDERS = ("notebooks", "solutions", "exercises")
BADGE_TAG = "course-badge"
SETUP_TAG = "course-setup"
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
STUB = "# YOUR CODE HERE\nraise NotImplementedError()"
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}

# The first code cell of every notebook. On Colab it must change nothing the runtime already has:
# upgrading ipykernel, ipython or ipywidgets inside a running Colab session breaks the session,
# and Colab's widget frontend needs its own ipywidgets 7. So the course is installed with
# --no-deps, then only the dependencies that are missing, each held with what is there.
SETUP_SOURCE = """\
# Setup (the same first cell in every notebook): makes `course_lib` importable here, in a
# checkout of the repository, on Binder and on Colab. It installs nothing when it is present.
# Where it is missing (Colab), it installs the course and any package the course needs that is
# missing, and never upgrades a package already there (that can break a running Colab session).
import importlib
import importlib.metadata as metadata
import importlib.util
import os
import re
import subprocess
import sys

if importlib.util.find_spec("course_lib") is None:
    if os.path.isfile(os.path.join("..", "course_lib", "__init__.py")):
        sys.path.insert(0, os.path.abspath(".."))  # a checkout that was not pip-installed
    else:  # Colab, or a bare environment: install the course package from its repository
        source = os.environ.get(
            "COURSE_LIB_SOURCE", "git+https://github.com/@REPOSITORY@@@BRANCH@"
        )
        pip = [sys.executable, "-m", "pip", "install", "--quiet"]
        subprocess.run([*pip, "--no-deps", source], check=True)  # the course alone
        importlib.invalidate_caches()
        missing, kept, older = [], [], []
        for requirement in metadata.requires("course_lib"):
            if "extra ==" in requirement:
                continue  # the [lab] and [test] extras: not needed to run a notebook
            name, bound = re.match(r"([\\w.-]+)(?:>=([\\d.]+))?", requirement).groups()
            try:
                have = metadata.version(name)
            except metadata.PackageNotFoundError:
                missing.append(requirement)
                continue
            kept.append(f"{name}=={have}")  # held at its version while the missing install
            release = [int(n) for n in re.findall(r"\\d+", have)[:3]]  # "2.1.3+cu121": [2, 1, 3]
            if bound and release < [int(n) for n in bound.split(".")]:
                older.append(f"{name} {have} (the course is tested with {name}>={bound})")
        if missing:
            subprocess.run([*pip, *missing, *kept], check=True)
        added = "".join(f", {requirement}" for requirement in missing)
        print(f"installed course_lib{added}; the packages already here are unchanged")
        if older:
            print("older than tested (if a cell fails, upgrade it, then restart):", *older)

from course_lib.runtime import setup_notebook

device = setup_notebook()  # seeds everything, sets the plot style, picks cuda or cpu"""
SETUP_SOURCE = SETUP_SOURCE.replace("@REPOSITORY@", REPOSITORY).replace("@BRANCH@", BRANCH)


def colab_url(relpath: str) -> str:
    return f"https://colab.research.google.com/github/{REPOSITORY}/blob/{BRANCH}/{relpath}"


def badge_source(relpath: str) -> str:
    return (
        f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
        f"({colab_url(relpath)})"
    )


def all_notebooks(folders=FOLDERS) -> list[Path]:
    return sorted(p for f in folders for p in (ROOT / f).glob("*.ipynb"))


def _tagged(cell, tag: str) -> bool:
    return tag in cell.get("metadata", {}).get("tags", [])


def stamp(nb, relpath: str) -> None:
    """Put the Colab badge (cell 0) and the setup cell (cell 1) at the top of `nb`."""
    nb.cells = [c for c in nb.cells if not (_tagged(c, BADGE_TAG) or _tagged(c, SETUP_TAG))]
    badge = nbformat.v4.new_markdown_cell(
        badge_source(relpath), metadata={"tags": [BADGE_TAG]}, id=BADGE_TAG
    )
    setup = nbformat.v4.new_code_cell(SETUP_SOURCE, metadata={"tags": [SETUP_TAG]}, id=SETUP_TAG)
    nb.cells[:0] = [badge, setup]
    nb.metadata["kernelspec"] = KERNELSPEC
    folder, name = Path(relpath).parent.name, Path(relpath).name
    if folder in ("solutions", "exercises"):  # the grader reads which exercise set this is
        nb.metadata["course"] = {"exercise": "ex" + name[:2]}
    nb.metadata.setdefault("language_info", {"name": "python"})
    nb.nbformat, nb.nbformat_minor = 4, 5
    for cell in nb.cells:
        if not cell.get("id"):
            cell["id"] = uuid.uuid4().hex[:8]


def strip_solutions(source: str) -> str:
    """Replace each `### BEGIN SOLUTION` ... `### END SOLUTION` block with a stub."""
    out, inside, indent = [], False, ""
    for line in source.splitlines():
        stripped = line.strip()
        if stripped == BEGIN:
            if inside:
                raise ValueError("nested ### BEGIN SOLUTION")
            inside, indent = True, line[: len(line) - len(line.lstrip())]
            out.extend(indent + s for s in STUB.splitlines())
        elif stripped == END:
            if not inside:
                raise ValueError("### END SOLUTION without ### BEGIN SOLUTION")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError("### BEGIN SOLUTION without ### END SOLUTION")
    return "\n".join(out)


def make_exercise(solution_nb, relpath: str):
    """The learner's copy of a solution notebook: solutions stripped, no outputs."""
    nb = nbformat.from_dict(solution_nb)
    kept = []
    for cell in nb.cells:
        if _tagged(cell, "solution-only"):
            continue
        if cell.cell_type == "code":
            cell.source = strip_solutions(cell.source)
            cell.outputs, cell.execution_count = [], None
            cell.metadata.pop("execution", None)
        kept.append(cell)
    nb.cells = kept
    nb.metadata.pop("widgets", None)
    stamp(nb, relpath)
    return nb


def _write(nb, path: Path) -> bool:
    text = nbformat.writes(nb) + "\n"
    if path.exists() and path.read_text() == text:
        return False
    path.write_text(text)
    return True


def solution_library() -> dict[str, str]:
    """{file name: text} of the learner's library a learner who wrote every solution has:
    each solution cell marked "# save in mine/NAME.py", saved in notebook order, exactly as
    running the notebooks saves it (course_lib.mine.save_cell)."""
    import tempfile

    from course_lib.mine import marked_module, save_cell

    with tempfile.TemporaryDirectory() as tmp:
        for path in sorted((ROOT / "solutions").glob("*.ipynb")):
            for cell in nbformat.read(path, as_version=4).cells:
                if cell.cell_type == "code" and marked_module(cell.source):
                    save_cell(cell.source, tmp)
        return {p.name: p.read_text() for p in sorted(Path(tmp).glob("*.py"))}


def cmd_mine() -> None:
    """Write solutions/mine/ (the solutions' own library, which later solutions import)."""
    folder = ROOT / "solutions" / "mine"
    want = solution_library()
    folder.mkdir(exist_ok=True)
    for stale in set(p.name for p in folder.glob("*.py")) - set(want):
        (folder / stale).unlink()
        print(f"removed solutions/mine/{stale}")
    for name, text in want.items():
        target = folder / name
        if not target.exists() or target.read_text() != text:
            target.write_text(text)
            print(f"wrote solutions/mine/{name}")


def cmd_stamp(paths) -> None:
    for path in paths or all_notebooks():
        nb = nbformat.read(path, as_version=4)
        stamp(nb, str(path.relative_to(ROOT)))
        if _write(nb, path):
            print(f"stamped {path.relative_to(ROOT)}")


def cmd_exercises(paths) -> None:
    sources = paths or all_notebooks(("solutions",))
    for src in sources:
        dst = ROOT / "exercises" / src.name
        nb = make_exercise(nbformat.read(src, as_version=4), f"exercises/{src.name}")
        if _write(nb, dst):
            print(f"wrote {dst.relative_to(ROOT)}")


def coalesce_streams(nb) -> None:
    """Join consecutive stdout (or stderr) outputs of a cell into one output.

    The kernel sends printed text in chunks as it arrives, so a slow cell can save one line as
    two outputs, split anywhere. Static viewers (GitHub, nbviewer) draw each output as its own
    block, so such a split looks like a stray line break. Joined, the text reads as printed.
    """
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        merged = []
        for output in cell.get("outputs", []):
            if (
                output.get("output_type") == "stream"
                and merged
                and merged[-1].get("output_type") == "stream"
                and merged[-1].get("name") == output.get("name")
            ):
                merged[-1]["text"] += output["text"]
            else:
                merged.append(output)
        cell.outputs = merged


def execute(path: Path, timeout: int = 900):
    """Run a notebook top to bottom in a fresh kernel, as a learner would; return it."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    env_before = os.environ.get("COURSE_DEVICE")
    os.environ["COURSE_DEVICE"] = "cpu"  # committed outputs are the CPU's, as CI checks them
    try:
        NotebookClient(
            nb,
            timeout=timeout,
            kernel_name="python3",
            record_timing=False,
            resources={"metadata": {"path": str(path.parent)}},
        ).execute()
    finally:
        if env_before is None:
            os.environ.pop("COURSE_DEVICE", None)
        else:
            os.environ["COURSE_DEVICE"] = env_before
    coalesce_streams(nb)
    return nb


def machine_is_busy() -> str | None:
    """Why this machine is too busy to save timings from, or None when it is quiet enough."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # not available on this platform
        return None
    cores = os.cpu_count() or 1
    if load > cores:
        return (
            f"the load average ({load:.1f}) exceeds the number of cores ({cores}): timings and "
            "the 'Runs in' figures saved now would be slower than a learner's"
        )
    return None


def show_final_progress(nb) -> int:
    """Give each saved progress bar the text of its final state; return how many were set.

    A tqdm bar in a notebook is a widget. Its saved output holds the widget's id and, for
    viewers without a widget manager (GitHub, nbviewer), a text shown instead: the bar as it
    was when first displayed, "0%". The widget's final state is saved too (in the notebook's
    metadata), so the text can be rewritten to the bar's end: "dates: 100%|##########| 700/700".
    tests/sanitize.cfg makes the suite compare both forms alike.
    """
    import html

    state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    models = state.get("state", {})

    def model(ref):
        return models.get(str(ref).removeprefix("IPY_MODEL_"), {})

    count = 0
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            view = output.get("data", {}).get("application/vnd.jupyter.widget-view+json")
            box = model(view["model_id"]) if view else {}
            children = [model(c) for c in box.get("state", {}).get("children", [])]
            names = [c.get("model_name") for c in children]
            if names != ["HTMLModel", "FloatProgressModel", "HTMLModel"]:
                continue
            left, bar, right = (c.get("state", {}) for c in children)
            total, value = bar.get("max") or 0, bar.get("value") or 0
            filled = round(10 * value / total) if total else 0
            drawn = "█" * filled + " " * (10 - filled)
            text = f"{left.get('value', '')}|{drawn}|{right.get('value', '')}"
            output["data"]["text/plain"] = html.unescape(text).replace("\u2007", " ")
            count += 1
    return count


def cmd_execute(paths, busy_ok: bool = False) -> None:
    targets = paths or all_notebooks(("notebooks", "solutions"))
    busy = machine_is_busy()
    if busy and not busy_ok:
        raise SystemExit(
            f"refusing to execute and save notebooks: {busy}. Wait until the machine is quiet, "
            "or pass --busy-ok to save anyway (then re-run later before relying on the times)."
        )
    if busy:
        print(f"WARNING: {busy}; saving anyway (--busy-ok)", file=sys.stderr)
    for path in targets:
        if path.parent.name == "exercises":
            print(f"skipped {path.relative_to(ROOT)}: exercises are saved without outputs")
            continue
        start = time.perf_counter()
        nb = execute(path)
        show_final_progress(nb)
        _write(nb, path)
        print(f"executed {path.relative_to(ROOT)} in {time.perf_counter() - start:.1f} s")


def from_py(source: str):
    """A notebook from a "percent" script: cells start at `# %%` (code) or `# %% [markdown]`."""
    nb = nbformat.v4.new_notebook()
    blocks: list[tuple[str, list[str]]] = []
    for line in source.splitlines():
        if line.startswith("# %%"):
            blocks.append(("markdown" if "[markdown]" in line else "code", []))
        elif blocks:
            blocks[-1][1].append(line)
    for kind, lines in blocks:
        while lines and not lines[-1].strip():
            lines.pop()
        while lines and not lines[0].strip():
            lines.pop(0)
        if kind == "markdown":
            text = "\n".join(ln[2:] if ln.startswith("# ") else ln.lstrip("#") for ln in lines)
            nb.cells.append(nbformat.v4.new_markdown_cell(text))
        elif lines:
            nb.cells.append(nbformat.v4.new_code_cell("\n".join(lines)))
    return nb


PLANNED = {  # lessons of the syllabus, shown in the README before their notebook exists
    "00": "Introduction",
    "01": "Tokens and embeddings",
    "02": "Self-attention (Q, K, V)",
    "03": "Multi-head attention",
    "04": "Positional encoding",
    "05": "Masking",
    "06": "Cross-attention",
    "07": "Transformer blocks",
    "08": "Training an encoder-decoder",
    "09": "A GPT from scratch",
    "10": "The family and the cost",
    "11": "Inside the model you trained",
}
OUTCOMES = {  # one line per lesson in the README's syllabus: what a learner comes away with
    "00": "how the course works, the map of the Transformer, and why attention replaced "
    "recurrence, at what cost (O(n²)), in numbers",
    "01": "your own byte-level BPE tokenizer; `nn.Embedding` as a one-hot product; word "
    "vectors by counting, and why one vector per word fails",
    "02": "attention by hand (scores, stable softmax, weighted values), why it divides by "
    "√d_k, and attention heatmaps; equal to PyTorch's",
    "03": "multi-head attention with every reshape written out, matching "
    "`nn.MultiheadAttention` to float precision",
    "04": "why attention needs positions; sinusoidal, learned and rotary (RoPE) encodings, "
    "their properties verified",
    "05": "padding and causal masks, fully masked rows without NaN, and PyTorch's two opposite "
    "mask conventions",
    "06": "cross-attention from one sequence to another, its source mask, and where it sits in "
    "the decoder",
    "07": "feed-forward, residuals, LayerNorm, encoder and decoder layers: a full Transformer "
    "equal to `nn.Transformer`",
    "08": "an encoder-decoder you train to turn written dates into ISO 8601, with beam search "
    "and cross-attention maps",
    "09": "a character-level GPT trained on Shakespeare, sampled four ways, with a KV cache "
    "that gives the same text faster; the same GPT on BPE tokens, compared in bits per "
    "character; an ablation ladder of what each piece buys; a longer-trained GPT whose words "
    "are mostly real; GPT-2's tokenizer (shipped) and weights (a 548 MB download, only on "
    "request) in the same GPT, checked offline against a random GPT-2. The exercise: your own "
    "GPT from your own library, trained by your loop, with one ablation, the course's "
    "checkpoint and GPT-2's weights (through your key map) in it",
    "10": "BERT, GPT and T5 side by side; attention's cost measured, exact tiled attention, "
    "and cheaper approximations",
    "11": "hooks that read and change a trained GPT; induction heads found by their scores and "
    "watched forming; head ablation, direct logit attribution that sums to the logits, a logit "
    "lens",
}
SYLLABUS_START, SYLLABUS_END = "<!-- syllabus:start -->", "<!-- syllabus:end -->"


def _title(path: Path) -> str:
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].split(":", 1)[-1].strip()
    return path.stem


def _link(folder: str, name: str) -> str:
    return (
        f"[{folder[:-1] if folder != 'notebooks' else 'lesson'}]({folder}/{name}) "
        f"[![Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
        f"({colab_url(f'{folder}/{name}')})"
    )


DIFFICULTY = re.compile(r"Difficulty (★+)☆*, about (\d+) minutes")


def exercise_effort(solution: Path) -> tuple[int, int, str]:
    """(number of tasks, total minutes, stars per task) from a solution notebook: each task says
    "Difficulty ★★☆, about 15 minutes" once, in bold under its heading."""
    found = [
        (len(m.group(1)), int(m.group(2)))
        for cell in nbformat.read(solution, as_version=4).cells
        for m in DIFFICULTY.finditer(cell.source)
    ]
    return len(found), sum(minutes for _, minutes in found), " ".join("★" * s for s, _ in found)


# Study time of a lesson, estimated from its length: the prose read carefully, the code read,
# run and its output checked. Both rates are deliberately slow (a fast reader skims at 250 words
# a minute); the exercise times come from each task's own estimate. Code is counted in
# statements (logical lines), so the layout does not move the estimate: a call that `ruff format`
# spreads over four lines is still one thing to read.
WORDS_PER_MINUTE, STATEMENTS_PER_MINUTE = 100, 7


def code_statements(source: str) -> int:
    """The statements (logical lines) of a code cell; comments and blank lines are not counted.
    A cell Python cannot tokenize (an IPython magic, say) counts its non-blank lines instead."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return sum(1 for line in source.splitlines() if line.strip())
    return sum(1 for token in tokens if token.type == tokenize.NEWLINE)


def study_minutes(lesson: Path) -> int:
    """Estimated minutes to study a lesson notebook: its markdown words at WORDS_PER_MINUTE and
    its code statements (not the setup cell) at STATEMENTS_PER_MINUTE, rounded up to 5 minutes."""
    words = statements = 0
    for cell in nbformat.read(lesson, as_version=4).cells:
        if _tagged(cell, BADGE_TAG) or _tagged(cell, SETUP_TAG):
            continue
        if cell.cell_type == "markdown":
            words += len(cell.source.split())
        elif cell.cell_type == "code":
            statements += code_statements(cell.source)
    minutes = words / WORDS_PER_MINUTE + statements / STATEMENTS_PER_MINUTE
    return 5 * -(-int(minutes) // 5) if minutes else 0


def _hours(minutes: int) -> str:
    return f"{round(minutes / 30) / 2:g} h"  # to the half hour


def syllabus_table() -> str:
    """The README's syllabus: one row per lesson, with what it gives a learner, links to what
    exists, its estimated study time, and per exercise set its tasks' difficulty and the total
    of their estimated minutes (from the solutions); then the totals."""
    rows = [
        "| # | lesson | what you come away with | study time | exercise | solution "
        "| exercise tasks: difficulty, time |",
        "|---|---|---|---|---|---|---|",
    ]
    lessons = {p.name[:2]: p for p in all_notebooks(("notebooks",))}
    total_study = total_exercises = 0
    for number in sorted(set(PLANNED) | set(lessons)):
        lesson = lessons.get(number)
        outcome = OUTCOMES.get(number, "")
        if lesson is None:
            rows.append(f"| {number} | {PLANNED[number]} (in preparation) | {outcome} | | | | |")
            continue
        study = study_minutes(lesson)
        total_study += study
        cells = [
            f"{_title(lesson)}: {_link('notebooks', lesson.name)}",
            outcome,
            f"about {study} min",
        ]
        for folder in ("exercises", "solutions"):
            path = ROOT / folder / lesson.name
            if number == "00":
                path = ROOT / folder / "00_warmup.ipynb"
            cells.append(_link(folder, path.name) if path.exists() else "")
        solution = ROOT / "solutions" / (lesson.name if number != "00" else "00_warmup.ipynb")
        count, minutes, stars = exercise_effort(solution) if solution.exists() else (0, 0, "")
        total_exercises += minutes
        cells.append(f"{count} tasks ({stars}), about {minutes} min" if count else "")
        rows.append(f"| {number} | " + " | ".join(cells) + " |")
    rows.append("")
    rows.append(
        f"In all: about {_hours(total_study)} of lessons and {_hours(total_exercises)} of "
        f"exercises, about {_hours(total_study + total_exercises)} of study. The lesson times are "
        f"estimates from each notebook's length ({WORDS_PER_MINUTE} words of text or "
        f"{STATEMENTS_PER_MINUTE} statements of code a minute); the exercise times add up each "
        "task's own estimate."
    )
    return "\n".join(rows)


def cmd_readme() -> None:
    readme = ROOT / "README.md"
    text = readme.read_text()
    start, end = text.index(SYLLABUS_START), text.index(SYLLABUS_END)
    new = text[: start + len(SYLLABUS_START)] + "\n" + syllabus_table() + "\n" + text[end:]
    if new != text:
        readme.write_text(new)
        print("updated the syllabus table in README.md")


def main(argv=None) -> None:
    if argv is None and len(sys.argv) == 4 and sys.argv[1] == "from-py":
        src, dst = Path(sys.argv[2]), Path(sys.argv[3]).resolve()
        nb = from_py(src.read_text())
        stamp(nb, str(dst.relative_to(ROOT)))
        _write(nb, dst)
        print(f"wrote {dst.relative_to(ROOT)} ({len(nb.cells)} cells); now run: execute")
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = ["stamp", "exercises", "execute", "readme", "mine", "all"]
    parser.add_argument("command", choices=commands)
    parser.add_argument("paths", nargs="*", type=Path)
    parser.add_argument(
        "--busy-ok",
        action="store_true",
        help="execute and save even when the load average exceeds the number of cores",
    )
    args = parser.parse_intermixed_args(argv)  # options may come before or after the paths
    paths = [p.resolve() for p in args.paths]
    if args.command in ("stamp", "all"):
        cmd_stamp(paths)
    if args.command in ("exercises", "all"):
        cmd_exercises([p for p in paths if p.parent.name == "solutions"] if paths else [])
    if args.command in ("readme", "all"):
        cmd_readme()
    if args.command in ("mine", "all"):
        cmd_mine()
    if args.command in ("execute", "all"):
        cmd_execute(
            [p for p in paths if p.parent.name != "exercises"] if paths else [], args.busy_ok
        )


if __name__ == "__main__":
    main()
