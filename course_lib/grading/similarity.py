"""Code two learners share that the course does not explain: a hint for the instructor.

One submission cannot show that its `mine/` folder was copied from another learner; a class can.
After a batch, `notes` compares the learners' own code, as MOSS and Gradescope's similarity
report do, and as they do it leaves out what is expected to be alike:

- a piece is a top-level function or class of a `mine/` file or of a notebook's code cell,
  compared after dropping comments, docstrings and layout (`normalised`): renaming a variable
  makes another piece, re-indenting or rewording a comment does not;
- what the course explains never counts: a piece is measured by its tokens that the course's
  own versions of it (the solution notebooks and their `mine/` files, the untouched exercise
  templates) do not have, in order (`own_tokens`). Two learners who both handed in the course's
  solution, or both left the template, share nothing; two who both renamed one of its
  variables share a few tokens;
- a piece with fewer than `MIN_TOKENS` tokens of its own never counts: a short function, or
  the course's with a name changed, is what learners who get it right write alike (the causal
  mask as `torch.tril(torch.ones(n, n)).bool()` has 15 tokens the course's has not);
- a piece more than `MAX_SHARERS` learners have in common never counts (MOSS's `-m`): an idiom
  many chose on their own is not a copy;
- a pair of learners is named only when what they share adds up to `PAIR_TOKENS` tokens of
  their own.

The thresholds come from classes built from the solutions (`tests/test_similarity.py`): each
learner writes every answer as the solution does, in a style of their own (names, comments,
layout, idioms), so that they are more alike than real learners, and a few copy another's mine/
folder or one file of it. In 5 such classes (3 of 40 learners, 2 of 60: 5,880 pairs) these
thresholds named no pair of independent learners, and every learner who copied a whole mine/
folder (19 of 19). A copy of one file was named in 1 of 19 cases: those files were the
course's code but for a few names and idioms, which is what lower thresholds name between
independent learners too (10 tokens a piece and 30 a pair named 2 of 2,340 pairs).

The notes say which files the two learners share and how much; they go to the instructor's notes
(scores.csv, learners.json), never to a learner's feedback nor to a score. They are a hint for a
person to read the two files, not a verdict.
"""

from __future__ import annotations

import ast
import difflib
import functools
import io
import json
import tokenize
from collections import defaultdict
from pathlib import Path

MIN_TOKENS = 20  # a piece's own tokens: fewer, and it is the course's code or a short function
PAIR_TOKENS = 40  # what a pair shares, in all, before it is named
MAX_SHARERS = 4  # a piece more learners than this have is a common idiom, not a copy
_ROOT = Path(__file__).resolve().parents[2]  # the course's repository: solutions/, exercises/


def _without_docstrings(node: ast.AST) -> ast.AST:
    for child in ast.walk(node):
        body = getattr(child, "body", None)
        if (
            isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            child.body = body[1:] or [ast.Pass()]
    return node


def _tokens(code: str) -> list[str]:
    kinds = (tokenize.NAME, tokenize.OP, tokenize.NUMBER, tokenize.STRING)
    return [
        t.string for t in tokenize.generate_tokens(io.StringIO(code).readline) if t.type in kinds
    ]


def normalised(source: str) -> list[tuple[str, str]]:
    """(name, code) of each top-level function and class of `source`, its code without
    comments, docstrings and layout; [] when it is not Python. Lines of IPython magic (`%time`,
    `!pip`) are left out first."""
    return list(_normalised(source))


@functools.lru_cache(maxsize=4096)  # the cells the course gives are in every learner's notebook
def _normalised(source: str) -> tuple[tuple[str, str], ...]:
    lines = ["" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()]
    try:
        tree = ast.parse("\n".join(lines))
    except (SyntaxError, ValueError):
        return ()
    return tuple(
        (node.name, ast.unparse(_without_docstrings(node)))
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    )


def own_tokens(name: str, code: str, course: dict[str, list[list[str]]]) -> int:
    """How many tokens of a piece the course's versions of it (same name) do not explain: its
    tokens less the most any of them has in common with it, in order; 0 for the course's own."""
    tokens = _tokens(code)
    if tokens in course.get(name, []):
        return 0
    common = 0
    for ref in course.get(name, []):
        blocks = difflib.SequenceMatcher(None, ref, tokens, autojunk=False).get_matching_blocks()
        common = max(common, sum(b.size for b in blocks))
    return len(tokens) - common


def _code_cells(notebook: Path) -> list[str]:
    try:
        nb = json.loads(Path(notebook).read_text(encoding="utf-8"))
        cells = nb["cells"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    sources = []
    for cell in cells if isinstance(cells, list) else []:
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            source = cell.get("source", "")
            sources.append("".join(source) if isinstance(source, list) else str(source))
    return sources


@functools.cache
def course_code(root: Path = _ROOT) -> dict[str, list[list[str]]] | None:
    """{name: the tokens of each version the course holds} of every piece in its solutions
    (notebooks and mine/ files) and its exercise templates, normalised; None when the
    repository's notebooks are not there (a course_lib installed without them): then nothing is
    compared."""
    notebooks = sorted((root / "solutions").glob("*.ipynb")) + sorted(
        (root / "exercises").glob("*.ipynb")
    )
    if not notebooks:
        return None
    sources = [s for nb in notebooks for s in _code_cells(nb)]
    sources += [p.read_text() for p in sorted((root / "solutions" / "mine").glob("*.py"))]
    course: dict[str, list[list[str]]] = {}
    for name, code in {piece for source in sources for piece in normalised(source)}:
        course.setdefault(name, []).append(_tokens(code))
    return course


def _own_code(notebooks: list[Path], course: dict[str, list[list[str]]], measured: dict):
    """A learner's pieces the course does not explain: {code: (where, name, tokens, file)}, the
    mine/ files first (a marked cell is in its notebook too), and each mine/ file's pieces."""
    found: dict[str, tuple[str, str, int, Path]] = {}
    files: dict[str, list[str]] = {}
    folders = {nb.parent / "mine" for nb in notebooks if (nb.parent / "mine").is_dir()}
    sources = [
        (f"mine/{p.name}", p.resolve(), [p.read_text(encoding="utf-8", errors="replace")])
        for folder in sorted(folders)
        for p in sorted(folder.glob("*.py"))
        if p.name != "__init__.py"
    ]
    sources += [(nb.name, nb.resolve(), _code_cells(nb)) for nb in sorted(notebooks)]
    for where, path, texts in sources:
        for text in texts:
            for name, code in normalised(text):
                if where.startswith("mine/"):
                    files.setdefault(where, []).append(code)
                if code not in found:
                    if (name, code) not in measured:  # the same piece in many learners' code
                        measured[name, code] = own_tokens(name, code, course)
                    tokens = measured[name, code]
                    if tokens >= MIN_TOKENS:
                        found[code] = (where, name, tokens, path)
    return found, files


def pairs(learners: dict[str, list[Path]], course: dict | None = None):
    """[(learner a, learner b, [(where in a's, where in b's, name, tokens)], the mine/ files
    alike as a whole)] for each pair whose shared unexplained code reaches `PAIR_TOKENS`;
    `learners` maps a learner to the notebooks they handed in (their mine/ folder beside them)."""
    course = course_code() if course is None else course
    if course is None or len(learners) < 2:
        return []
    measured: dict[tuple[str, str], int] = {}
    own = {who: _own_code(nbs, course, measured) for who, nbs in learners.items()}
    holders = defaultdict(list)  # a piece -> the learners who have it
    for who, (found, _) in own.items():
        for code in found:
            holders[code].append(who)
    shared = defaultdict(list)
    for code, who in holders.items():
        if 2 <= len(who) <= MAX_SHARERS:
            for i, a in enumerate(who):
                for b in who[i + 1 :]:
                    if own[a][0][code][3] != own[b][0][code][3]:  # not one file both use
                        shared[a, b].append(code)
    found = []
    for (a, b), codes in shared.items():
        pieces = sorted((own[a][0][c][0], own[b][0][c][0], *own[a][0][c][1:3]) for c in codes)
        if sum(p[3] for p in pieces) >= PAIR_TOKENS:
            files_a, files_b = own[a][1], own[b][1]
            alike = {wa for wa, wb, _, _ in pieces if wa == wb and wa.startswith("mine/")}
            whole = sorted(f for f in alike if files_a.get(f) == files_b.get(f))
            found.append((a, b, pieces, whole))
    return found


def notes(learners: dict[str, list[Path]], course: dict | None = None) -> dict[str, list[str]]:
    """{learner: a note per learner they share code with}, for the instructor's notes: the
    files and pieces, where each has them, and how many tokens of their own they share."""
    said = defaultdict(list)
    for a, b, pieces, whole in pairs(learners, course):
        tokens = sum(p[3] for p in pieces)
        for me, other, flip in ((a, b, False), (b, a, True)):
            by_file = defaultdict(list)
            for wa, wb, name, _ in pieces:
                mine, theirs = (wb, wa) if flip else (wa, wb)
                where = mine if mine == theirs else f"{mine} (theirs: {theirs})"
                by_file[where + (" (whole file)" if mine in whole else "")].append(name)
            parts = "; ".join(f"{where}: {', '.join(names)}" for where, names in by_file.items())
            said[me].append(
                f"same code as {other} ({tokens} tokens the course does not explain, identical "
                f"but for layout and comments; a hint to compare the two, not a verdict): {parts}"
            )
    return dict(said)
