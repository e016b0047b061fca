"""Code two learners share that the course does not explain: a hint for the instructor.

One submission cannot show that its `mine/` folder was copied from another learner; a class can.
After a batch, `notes` compares the learners' own code, as MOSS and Gradescope's similarity
report do, and as they do it leaves out what is expected to be alike:

- a piece is a top-level function or class of a `mine/` file or of a notebook's code cell,
  compared after dropping comments, docstrings and layout (`normalised`): re-indenting or
  rewording a comment does not make another piece;
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
  their own;
- renaming variables, the first thing a copier does, makes other pieces; so two mine/ folders
  are also compared as a whole but for local names (`canonical`: each piece's own name, its
  functions' parameters, the variables they assign and the functions they define, renamed by
  order of first appearance; attributes after a dot, modules, keyword arguments and builtins
  keep theirs, as in MOSS's and JPlag's token streams). Two folders with `MIN_FILES` files or
  more in common, every one the same but for those names, are named when their pieces hold
  `PAIR_TOKENS` tokens the course does not explain, names left out (`own_tokens(renamed=True)`:
  two who handed in the course's code but for names share nothing). A piece or a file the same
  but for names is not enough: without names, what is left of the course's code is its idioms,
  which learners who write alike share (compared piece by piece but for names, with the
  thresholds above, 12 of 2,340 independent pairs below were named, and no thresholds, 5 to
  25 tokens a piece and 40 to 150 a pair, that named none of the 5,880 named a renamed copy; up
  to 8 of two independent learners' 10 mine/ files were the same but for names, never all).

The thresholds come from classes built from the solutions (`tests/test_similarity.py`): each
learner writes every answer as the solution does, in a style of their own (names, comments,
layout, idioms), so that they are more alike than real learners, and a few copy another's mine/
folder or one file of it, some renaming its variables and parameters consistently. In 5 such
classes (3 of 40 learners, 2 of 60: 5,880 pairs) these thresholds named no pair of independent
learners, every learner who copied a whole mine/ folder (19 of 19), and 16 of 19 who copied one
and renamed its variables (none before the folders were compared but for names): the other 3
had copied the course's code with a few common idioms, under `PAIR_TOKENS` tokens of its own
once names are left out (11, 15 and 28). With each learner also taking steps of their own
(`_own_steps`: a nested expression computed first, into a variable), none of 5,880 and 19 of 19
renamed. `MIN_FILES`: had the learners handed in only their first 2 mine/ files (attention.py,
multihead.py), 2 of the 5,880 pairs would have been named as folders the same but for names;
from 3 files none. A copy of one
file was named in 1 of 19 cases, renamed in 0 of 19: those files were the course's code but for
a few names and idioms, which is what lower thresholds name between independent learners too
(10 tokens a piece and 30 a pair named 2 of 2,340 pairs). Comparing folders but for names
costs about nothing: `pairs` takes 0.08 seconds a learner on those classes, as before (own
tokens are now measured only for pieces two learners share).

The notes say which files the two learners share and how much, and whether the code is the
same but for names; they go to the instructor's notes (scores.csv, learners.json), never to a
learner's feedback nor to a score. They are a hint for a person to read the two files, not a
verdict.
"""

from __future__ import annotations

import ast
import difflib
import functools
import io
import itertools
import json
import re
import tokenize
from collections import defaultdict
from pathlib import Path

MIN_TOKENS = 20  # a piece's own tokens: fewer, and it is the course's code or a short function
PAIR_TOKENS = 40  # what a pair shares, in all, before it is named
MAX_SHARERS = 4  # a piece more learners than this have is a common idiom, not a copy
MIN_FILES = 3  # mine/ files two folders the same but for names have in common, at least
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


_LOCAL = re.compile(r"_\d+")  # a local name in a canonical form: _1, _2, ...


class _Locals(ast.NodeVisitor):
    """Renames, in place, the local names of a top-level function or class (its own name, its
    functions' parameters and the variables they assign, the functions they define) to _1, _2,
    ... by order of first appearance; what is not local keeps its name: an attribute after a
    dot (`.transpose`, a method's name), a keyword argument, a module (`torch`, `F`, imported
    in the function too), a builtin, another top-level function."""

    def __init__(self, piece: ast.AST):
        self.scopes = [({piece.name}, {})]  # the enclosing functions' (local names, new names)
        self.count = 0

    def rename(self, name: str) -> str:
        for local, new in reversed(self.scopes):
            if name in local:
                if name not in new:
                    self.count += 1
                    new[name] = f"_{self.count}"
                return new[name]
        return name

    def visit_Name(self, node):
        node.id = self.rename(node.id)

    def visit_ExceptHandler(self, node):
        node.name = node.name and self.rename(node.name)
        self.generic_visit(node)

    def visit_Nonlocal(self, node):
        node.names = [self.rename(name) for name in node.names]

    def visit_FunctionDef(self, node):
        node.name = self.rename(node.name)
        self.visit_Lambda(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        node.name = self.rename(node.name)
        self.generic_visit(node)  # a class's body is no function: its names are attributes

    def visit_Lambda(self, node):
        args = node.args
        given = [*args.posonlyargs, *args.args, args.vararg, *args.kwonlyargs, args.kwarg]
        given = [a for a in given if a is not None]
        outside = [*getattr(node, "decorator_list", []), *args.defaults, *args.kw_defaults]
        outside += [a.annotation for a in given] + [getattr(node, "returns", None)]
        for child in outside:  # evaluated where the function is defined
            if child is not None:
                self.visit(child)
        self.scopes.append(({a.arg for a in given} | _assigned(node), {}))
        for a in given:
            a.arg = self.rename(a.arg)
        for child in node.body if isinstance(node.body, list) else [node.body]:
            self.visit(child)
        self.scopes.pop()


def _assigned(function: ast.AST) -> set[str]:
    """The names a function's body binds, not those of the functions and classes it holds (but
    their names), less those it declares global or nonlocal."""
    names, declared = set(), set()
    stack = list(function.body) if isinstance(function.body, list) else [function.body]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            declared.update(node.names)
        stack.extend(ast.iter_child_nodes(node))
    return names - declared


def _erased(tokens: list[str]) -> list[str]:
    """Tokens of a canonical form with every local name the same: what names do not change."""
    return ["_" if _LOCAL.fullmatch(t) else t for t in tokens]


def normalised(source: str) -> list[tuple[str, str]]:
    """(name, code) of each top-level function and class of `source`, its code without
    comments, docstrings and layout; [] when it is not Python. Lines of IPython magic (`%time`,
    `!pip`) are left out first."""
    return [(name, code) for name, code, _ in _normalised(source)]


def canonical(source: str) -> list[tuple[str, str]]:
    """(name, code) of each top-level function and class of `source`, normalised, its local
    names renamed by order of first appearance (`_Locals`): a copy whose variables were renamed
    has the same."""
    return [(name, canon) for name, _, canon in _normalised(source)]


@functools.lru_cache(maxsize=4096)  # the cells the course gives are in every learner's notebook
def _normalised(source: str) -> tuple[tuple[str, str, str], ...]:
    lines = ["" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()]
    try:
        tree = ast.parse("\n".join(lines))
    except (SyntaxError, ValueError):
        return ()
    found = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name, code = node.name, ast.unparse(_without_docstrings(node))
            _Locals(node).visit(node)
            found.append((name, code, ast.unparse(node)))
    return tuple(found)


def own_tokens(name: str, code: str, course: dict, renamed: bool = False) -> int:
    """How many tokens of a piece the course's versions of it (same name) do not explain: its
    tokens less the most any of them has in common with it, in order; 0 for the course's own.
    `renamed`: `code` is a canonical form, and its local names are not counted, as if the
    course's versions had used the same."""
    tokens = _tokens(code)
    refs = [versions[renamed] for versions in course.get(name, [])]
    if renamed:
        tokens = _erased(tokens)
    if tokens in refs:
        return 0
    common = 0
    for ref in refs:
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
def course_code(root: Path = _ROOT) -> dict[str, list[tuple[list[str], list[str]]]] | None:
    """{name: (its tokens, its canonical form's with local names erased) for each version the
    course holds} of every piece in its solutions (notebooks and mine/ files) and its exercise
    templates, normalised; None when the repository's notebooks are not there (a course_lib
    installed without them): then nothing is compared."""
    notebooks = sorted((root / "solutions").glob("*.ipynb")) + sorted(
        (root / "exercises").glob("*.ipynb")
    )
    if not notebooks:
        return None
    sources = [s for nb in notebooks for s in _code_cells(nb)]
    sources += [p.read_text() for p in sorted((root / "solutions" / "mine").glob("*.py"))]
    course: dict[str, list[tuple[list[str], list[str]]]] = {}
    for name, code, canon in {piece for source in sources for piece in _normalised(source)}:
        course.setdefault(name, []).append((_tokens(code), _erased(_tokens(canon))))
    return course


def _own_code(notebooks: list[Path]):
    """A learner's pieces, {code: (where, name, file)} where each is found first, the mine/
    files first (a marked cell is in its notebook too); each mine/ file's pieces, [(name,
    code, canonical form)]; and the mine/ folders they come from."""
    found: dict[str, tuple[str, str, Path]] = {}
    files: dict[str, list[tuple[str, str, str]]] = {}
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
            for name, code, canon in _normalised(text):
                if where.startswith("mine/"):
                    files.setdefault(where, []).append((name, code, canon))
                found.setdefault(code, (where, name, path))
    return found, files, {folder.resolve() for folder in folders}


def pairs(learners: dict[str, list[Path]], course: dict | None = None):
    """[(learner a, learner b, [(where in a's, where in b's, name, tokens, renamed)], the mine/
    files alike as a whole)] for each pair whose shared unexplained code reaches `PAIR_TOKENS`;
    `learners` maps a learner to the notebooks they handed in (their mine/ folder beside them).
    A piece is shared as it is; or, when two mine/ folders are the same but for local names
    (`_folder_pairs`), `renamed`, and then its names do not count among its tokens."""
    course = course_code() if course is None else course
    if course is None or len(learners) < 2:
        return []
    own = {who: _own_code(nbs) for who, nbs in learners.items()}
    holders = defaultdict(list)  # a piece -> the learners who have it
    for who, (found, *_) in own.items():
        for code in found:
            holders[code].append(who)
    shared = defaultdict(list)
    for code, who in holders.items():
        if 2 <= len(who) <= MAX_SHARERS:
            where, name, _ = own[who[0]][0][code]
            tokens = own_tokens(name, code, course)
            if tokens < MIN_TOKENS:
                continue
            for a, b in itertools.combinations(who, 2):
                (wa, _, fa), (wb, _, fb) = own[a][0][code], own[b][0][code]
                if fa != fb:  # not one file both use
                    shared[a, b].append((wa, wb, name, tokens, False))
    found = []
    for (a, b), pieces in shared.items():
        pieces.sort()
        if sum(p[3] for p in pieces) >= PAIR_TOKENS:
            files_a, files_b = own[a][1], own[b][1]
            alike = {wa for wa, wb, *_ in pieces if wa == wb and wa.startswith("mine/")}
            whole = sorted(f for f in alike if files_a.get(f) == files_b.get(f))
            found.append((a, b, pieces, whole))
    named = {(a, b) for a, b, _, _ in found}
    return found + [f for f in _folder_pairs(own, course) if f[:2] not in named]


def _folder_pairs(own: dict, course: dict) -> list:
    """Pairs whose mine/ folders hold at least `MIN_FILES` files alike and every file both have
    is the same but for local names (its pieces' canonical forms), with `PAIR_TOKENS` tokens
    the course does not explain when names do not count: a copied folder, renamed."""
    found = []
    for a, b in itertools.combinations(own, 2):
        files_a, files_b = own[a][1], own[b][1]
        both = sorted(set(files_a) & set(files_b))
        forms = [[piece[2] for piece in files[f]] for files in (files_a, files_b) for f in both]
        if len(both) < MIN_FILES or forms[: len(both)] != forms[len(both) :]:
            continue
        if own[a][2] & own[b][2]:  # one folder both use
            continue
        pieces = []
        for f in both:
            for (name, code, canon), (name_b, code_b, _) in zip(
                files_a[f], files_b[f], strict=True
            ):
                tokens = min(own_tokens(n, canon, course, renamed=True) for n in {name, name_b})
                if tokens:  # not the course's code but for names
                    pieces.append((f, f, name, tokens, code != code_b))
        if sum(p[3] for p in pieces) >= PAIR_TOKENS:
            found.append((a, b, sorted(pieces), both))
    return found


def notes(learners: dict[str, list[Path]], course: dict | None = None) -> dict[str, list[str]]:
    """{learner: a note per learner they share code with}, for the instructor's notes: the
    files and pieces, where each has them, and how many tokens of their own they share."""
    said = defaultdict(list)
    for a, b, pieces, whole in pairs(learners, course):
        tokens = sum(p[3] for p in pieces)
        but = "names, layout and comments" if any(p[4] for p in pieces) else "layout and comments"
        for me, other, flip in ((a, b, False), (b, a, True)):
            by_file = defaultdict(list)
            for wa, wb, name, *_ in pieces:
                mine, theirs = (wb, wa) if flip else (wa, wb)
                where = mine if mine == theirs else f"{mine} (theirs: {theirs})"
                by_file[where + (" (whole file)" if mine in whole else "")].append(name)
            parts = "; ".join(f"{where}: {', '.join(names)}" for where, names in by_file.items())
            said[me].append(
                f"same code as {other} ({tokens} tokens the course does not explain, identical "
                f"but for {but}; a hint to compare the two, not a verdict): {parts}"
            )
    return dict(said)
