"""The class run's hint on copied code (course_lib/grading/similarity.py), measured on a class.

The class is built from the solutions: each independent learner writes every answer as the
solution does, in a style of their own (their variable names, comments, layout, and a choice of
idioms: `torch.matmul` or `@`, `x.exp()` or `torch.exp(x)`, `x.size(-1)` or `x.shape[-1]`, ...),
which makes independent learners more alike than real ones, who also differ in how they go
about a task (with `steps`, a little: `_own_steps`). A few copy another learner's mine/ files,
some of them re-commented and re-laid-out, as many again with every variable and parameter
renamed too. `python tests/test_similarity.py [LEARNERS] [SEEDS] [COPIES] [steps]` measures the
thresholds on such classes (similarity.py's docstring gives what it printed).
"""

from __future__ import annotations

import ast
import json
import random
import shutil

from helpers import ROOT

from course_lib.grading import similarity
from course_lib.mine import marked_module, save_cell

# each local variable a learner may rename, to one of these (names learners reach for)
_NAMES = ["out", "result", "res", "y", "h", "tmp", "z", "t", "a", "b", "w", "s", "scores", "x2"]


class _Style(ast.NodeTransformer):
    """One learner's idioms, each chosen once (a learner who writes torch.matmul does so
    throughout), and their names for local variables, chosen per function."""

    def __init__(self, rng: random.Random, copier: bool = False):
        self.rng = rng
        self.bits = {k: rng.random() < 0.5 and not copier for k in ("matmul", "fn", "swap",
                     "size", "sqrt", "dim", "view", "aug", "none")}  # fmt: skip
        self.copier = copier  # renames every local variable and parameter, to names not in use
        self.names: dict[str, str] = {}

    def visit_FunctionDef(self, node):
        args = {a.arg for a in node.args.args + node.args.kwonlyargs}
        local = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)
                 and isinstance(n.ctx, ast.Store)} - args  # fmt: skip
        saved = self.names
        self.names = dict(saved)
        if self.copier:  # a copy that still runs: parameters too (not self, nor a keyword's)
            keyword = {a.arg for a in node.args.args[::-1][: len(node.args.defaults)]}
            local |= {a.arg for a in node.args.args} - keyword - {"self", "cls"}
            used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | args
            used |= set(self.names.values())
            free = self.rng.sample(_NAMES, len(_NAMES)) + [
                f"{n}{i}" for i in range(9) for n in _NAMES
            ]
            free = [n for n in free if n not in used][: len(local)]
            self.names.update(zip(sorted(local), free, strict=True))
        for name in sorted(local) if not self.copier else []:
            if self.rng.random() < 0.5:
                self.names[name] = self.rng.choice(_NAMES) + (
                    "" if self.rng.random() < 0.7 else "_"
                )
        self.generic_visit(node)
        self.names = saved
        return node

    def visit_arg(self, node):
        node.arg = self.names.get(node.arg, node.arg) if self.copier else node.arg
        return node

    def visit_Name(self, node):
        node.id = self.names.get(node.id, node.id)
        return node

    def visit_BinOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.MatMult) and self.bits["matmul"]:
            return ast.Call(
                ast.parse("torch.matmul", mode="eval").body, [node.left, node.right], []
            )
        if (
            self.bits["sqrt"]
            and isinstance(node.op, ast.Div)
            and isinstance(node.right, ast.Call)
            and ast.unparse(node.right.func) == "math.sqrt"
        ):
            node.right = ast.BinOp(node.right.args[0], ast.Pow(), ast.Constant(0.5))
        return node

    def visit_Assign(self, node):
        self.generic_visit(node)
        value = node.value
        if (
            self.bits["aug"]
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(value, ast.BinOp)
            and isinstance(value.left, ast.Name)
            and value.left.id == node.targets[0].id
        ):
            return ast.AugAssign(node.targets[0], value.op, value.right)
        return node

    def visit_Subscript(self, node):
        self.generic_visit(node)
        if (
            self.bits["size"]
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "shape"
            and isinstance(node.slice, (ast.Constant, ast.UnaryOp))
        ):
            return ast.Call(ast.Attribute(node.value.value, "size", ast.Load()), [node.slice], [])
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        func = node.func
        if not isinstance(func, ast.Attribute):
            return node
        if (
            self.bits["fn"]
            and func.attr in ("exp", "sqrt", "log", "tanh", "abs")
            and not (node.args or node.keywords or ast.unparse(func.value) in ("math", "torch"))
        ):
            return ast.Call(ast.parse(f"torch.{func.attr}", mode="eval").body, [func.value], [])
        if self.bits["swap"] and func.attr == "transpose" and len(node.args) == 2:
            node.args = node.args[::-1]
        if self.bits["view"] and func.attr in ("view", "reshape"):
            func.attr = "reshape" if func.attr == "view" else "view"
        if self.bits["none"] and func.attr == "unsqueeze" and len(node.args) == 1:
            if ast.unparse(node.args[0]) == "0":
                return ast.Subscript(func.value, ast.Constant(None), ast.Load())
        if self.bits["dim"] and not node.args and node.keywords and node.keywords[0].arg == "dim":
            node.args = [node.keywords[0].value]
            node.keywords = node.keywords[1:]
        return node


def _answers():
    """(notebook name, [the source of each code cell]) of every solution notebook."""
    found = []
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        nb = json.loads(path.read_text())
        cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
        found.append((path.name, cells))
    return found


def _own_steps(tree: ast.AST, rng: random.Random) -> ast.AST:
    """A learner's own way through an answer: of each statement of a function's body that
    calls or computes on a nested call or operation, one time in 3 they compute that first,
    into a variable of their own (`t = k.transpose(-2, -1)`, then `q @ t`)."""
    for function in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]:
        used = {n.id for n in ast.walk(function) if isinstance(n, ast.Name)}
        used |= {a.arg for a in ast.walk(function) if isinstance(a, ast.arg)}
        body = []
        for statement in function.body:
            value = getattr(statement, "value", None)
            parts = (value.args if isinstance(value, ast.Call) else
                     [value.left, value.right] if isinstance(value, ast.BinOp) else [])  # fmt: skip
            nested = [e for e in parts if isinstance(e, (ast.Call, ast.BinOp))]
            if isinstance(statement, (ast.Assign, ast.Return)) and nested and rng.random() < 1 / 3:
                name = next(n for n in rng.sample(_NAMES, len(_NAMES)) + ["v_"] if n not in used)
                used.add(name)
                body.append(ast.Assign([ast.Name(name, ast.Store())], nested[0], lineno=0))
                for field in ("args", "left", "right"):
                    if hasattr(value, field):
                        old = getattr(value, field)
                        new = ast.Name(name, ast.Load())
                        if isinstance(old, list):
                            setattr(value, field, [new if e is nested[0] else e for e in old])
                        elif old is nested[0]:
                            setattr(value, field, new)
            body.append(statement)
        function.body = body
    return tree


def _write_in_style(source: str, style: _Style, rng: random.Random, steps=None) -> str:
    """An answer cell as this learner writes it: their idioms and names, their own comments and
    layout (ast.unparse's, or the solution's with the solution markers gone), and with `steps`
    (a random.Random) their own steps (`_own_steps`)."""
    if "BEGIN SOLUTION" not in source:
        return source
    head = source.splitlines()[0] if marked_module(source) else None
    tree = style.visit(ast.parse(source))
    tree = _own_steps(tree, steps) if steps else tree
    code = ast.unparse(ast.fix_missing_locations(tree))
    if rng.random() < 0.5:  # their own comments
        code = "\n".join(
            line + ("  # my step" if line.strip() and rng.random() < 0.2 else "")
            for line in code.splitlines()
        )
    return (head + "\n" + code) if head else code


def build_class(folder, independent: int, seed: int, steps: bool = False):
    """`independent` learners, each a folder with every solution notebook and a mine/ folder
    made by running its marked cells (course_lib.mine.save_cell), written in styles of their
    own, and with `steps` in steps of their own (`_own_steps`, drawn apart: the class is the
    same otherwise); returns their names."""
    rng = random.Random(seed)
    own = random.Random(-seed) if steps else None
    names = []
    for i in range(independent):
        name = f"learner{i:02d}"
        style = _Style(rng)
        for notebook, cells in _answers():
            written = [_write_in_style(c, style, rng, own) for c in cells]
            _notebook(folder / name / notebook, written)
            for source in written:
                if marked_module(source):
                    save_cell(source, folder / name / "mine")
        names.append(name)
    return names


def _notebook(path, sources):
    path.parent.mkdir(parents=True, exist_ok=True)
    cells = [{"cell_type": "code", "source": s, "metadata": {}, "outputs": [],
              "execution_count": None} for s in sources]  # fmt: skip
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4,
                                "nbformat_minor": 5}))  # fmt: skip


def copy_mine(folder, source: str, copier: str, files: list[str] | None, relayout: bool,
              rename: random.Random | None = None):  # fmt: skip
    """`copier` replaces their mine/ files with `source`'s (all, or those named in `files`),
    re-laid-out (indented by 2, comments gone, one of their own added) when `relayout`, their
    local variables and parameters renamed (`_Style`'s copier, drawing from `rename`) when given."""
    (folder / copier / "mine").mkdir(parents=True, exist_ok=True)
    for path in sorted((folder / source / "mine").glob("*.py")):
        if path.name != "__init__.py" and (files is None or path.name in files):
            text = path.read_text()
            if relayout or rename:
                tree = ast.parse(text)
                tree = _Style(rename, copier=True).visit(tree) if rename else tree
                code = ast.unparse(tree).replace("    ", "  ")
                text = "# my library\n" + code + "\n"
            (folder / copier / "mine" / path.name).write_text(text)


def _learners(folder, names):
    return {n: sorted((folder / n).glob("*.ipynb")) for n in names}


def _template_notebooks(folder):
    """A learner who handed in the exercises untouched, their marked cells saved as they are."""
    for path in sorted((ROOT / "exercises").glob("*.ipynb")):
        cells = ["".join(c["source"]) for c in json.loads(path.read_text())["cells"]
                 if c["cell_type"] == "code"]  # fmt: skip
        _notebook(folder / path.name, cells)
        for source in cells:
            if marked_module(source):
                save_cell(source, folder / "mine")


def test_a_class_names_the_learners_who_copied_and_no_one_else(tmp_path):
    names = build_class(tmp_path, 10, seed=7)
    copy_mine(tmp_path, "learner01", "learner02", None, relayout=True)  # a whole mine/ folder
    # copied notebooks: their answer cells are compared too
    for nb in (tmp_path / "learner03").glob("*.ipynb"):
        shutil.copy(nb, tmp_path / "learner04" / nb.name)
    # two who handed in the course's own solution, two who left the templates: nothing shared
    for who in ("sol_a", "sol_b"):
        (tmp_path / who).mkdir()
        for nb in (ROOT / "solutions").glob("*.ipynb"):
            shutil.copy(nb, tmp_path / who / nb.name)
        shutil.copytree(ROOT / "solutions" / "mine", tmp_path / who / "mine")
    for who in ("tpl_a", "tpl_b"):
        _template_notebooks(tmp_path / who)
    # a short function every learner who gets it right writes alike, not as the course does
    for who in ("learner05", "learner06"):
        _notebook(tmp_path / who / "12_extra.ipynb",
                  ["def causal_mask(n):\n    return torch.ones(n, n).tril().bool()"])  # fmt: skip
    everyone = [*names, "sol_a", "sol_b", "tpl_a", "tpl_b"]
    found = similarity.pairs(_learners(tmp_path, everyone))
    named = {(a, b) for a, b, _, _ in found}
    assert named == {("learner01", "learner02"), ("learner03", "learner04")}
    copied = next(f for f in found if f[:2] == ("learner01", "learner02"))
    assert all(w.startswith("mine/") for p in copied[2] for w in p[:2])  # found in mine/ first
    assert copied[3] and set(copied[3]) <= {p[0] for p in copied[2]}  # whole files alike
    notebooks = next(f for f in found if f[:2] == ("learner03", "learner04"))
    assert all(theirs.endswith(".ipynb") for _, theirs, *_ in notebooks[2]) and not notebooks[3]
    notes = similarity.notes(_learners(tmp_path, ["learner01", "learner02"]))
    assert notes["learner01"][0].startswith("same code as learner02 (")
    assert "a hint to compare the two, not a verdict" in notes["learner02"][0]
    assert "(whole file)" in notes["learner02"][0]


def test_a_copied_folder_with_its_variables_renamed_is_named(tmp_path):
    names = build_class(tmp_path, 6, seed=7)
    # learner02 hands in learner01's mine/ folder, each variable and parameter renamed, re-laid-out
    copy_mine(tmp_path, "learner01", "learner02", None, relayout=True, rename=random.Random(1))
    found = similarity.pairs(_learners(tmp_path, names))
    assert {(a, b) for a, b, *_ in found} == {("learner01", "learner02")}
    ((_, _, pieces, whole),) = found
    mine = (tmp_path / "learner01" / "mine").glob("[!_]*.py")
    assert whole == sorted(f"mine/{p.name}" for p in mine)  # all its files, as a whole
    assert all(p[4] for p in pieces) and sum(p[3] for p in pieces) >= similarity.PAIR_TOKENS
    notes = similarity.notes(_learners(tmp_path, ["learner01", "learner02", "learner03"]))
    assert set(notes) == {"learner01", "learner02"}
    assert "identical but for names, layout and comments" in notes["learner02"][0]
    assert "(whole file)" in notes["learner02"][0]
    # two notebooks beside one mine/ folder: one folder, not two alike
    one, two, *_ = sorted((tmp_path / "learner01").glob("*.ipynb"))
    assert similarity.pairs({"x": [one], "y": [two]}) == []


def test_renamed_local_names_give_the_same_canonical_form():
    a = "def attend(q, k):\n    s = q @ k.transpose(-2, -1)\n    return F.softmax(s, dim=-1)"
    b = "def attend(x, y):\n    w = x @ y.transpose(-2, -1)  # my\n    return F.softmax(w, dim=-1)"
    c = "def attend(q, k):\n    s = q @ k.transpose(-1, -2)\n    return F.softmax(s, dim=-1)"
    assert similarity.canonical(a) == similarity.canonical(b) != similarity.canonical(c)
    assert similarity.normalised(a) != similarity.normalised(b)
    ((_, form),) = similarity.canonical(a)  # API names stay: attributes, modules, keywords
    assert (
        form
        == "def _1(_2, _3):\n    _4 = _2 @ _3.transpose(-2, -1)\n    return F.softmax(_4, dim=-1)"
    )
    method = (
        "class M(nn.Module):\n    def forward(self, x):\n        h = self.proj(x)\n        return h"
    )
    ((_, form),) = similarity.canonical(method)
    assert "def forward(_2, _3)" in form and "_2.proj(_3)" in form


def test_what_the_course_explains_is_not_counted():
    course = similarity.course_code()
    cell = next(  # the course's causal mask, as its solution notebook has it
        "".join(c["source"])
        for c in json.loads((ROOT / "solutions" / "05_masking.ipynb").read_text())["cells"]
        if "def causal_mask" in "".join(c["source"])
    )
    ((name, code),) = similarity.normalised(cell)
    assert similarity.own_tokens(name, code, course) == 0
    relaid = code.replace("(n):", '(n):  # my comment\n    """Mine."""\n').replace("    ", "\t")
    assert similarity.normalised(relaid) == [(name, code)]
    # what learners who get it right write alike is short, however it differs from the course's
    tril = "def causal_mask(n):\n    return torch.tril(torch.ones(n, n)).bool()"
    assert 0 < similarity.own_tokens(*similarity.normalised(tril)[0], course) < 20
    assert similarity.MIN_TOKENS >= 20
    assert similarity.normalised("%time x = 1\ndef f(a):\n    '''doc'''\n    return a  # c") == [
        ("f", "def f(a):\n    return a")
    ]
    assert similarity.normalised("def broken(:") == []


_OWN_SOFTMAX = """# save in mine/attention.py
def softmax(x, dim=-1):
    # subtract the largest for stability
    m = torch.max(x, dim=dim, keepdim=True).values
    e = torch.exp(x - m)
    total = torch.sum(e, dim=dim, keepdim=True)
    return e / total"""
_OWN_ATTENTION = """# save in mine/attention.py
def scaled_dot_product_attention(q, k, v):
    scale = 1.0 / math.sqrt(k.size(-1))
    logits = torch.matmul(q, k.transpose(-1, -2)) * scale
    w = softmax(logits, dim=-1)
    return torch.matmul(w, v), w"""


def test_the_batch_puts_the_hint_in_the_instructors_notes_only(tmp_path, monkeypatch):
    from course_lib.grading import batch, export, learners

    folder = tmp_path / "class"
    for who in ("ada", "bob", "eve"):
        _notebook(folder / who / "02_self_attention.ipynb", [_OWN_SOFTMAX, _OWN_ATTENTION])
    for cell in (_OWN_SOFTMAX, _OWN_ATTENTION):
        save_cell(cell, folder / "ada" / "mine")
    copy_mine(folder.parent, "class/ada", "class/bob", None, relayout=True)  # bob's is ada's
    shutil.copytree(ROOT / "solutions" / "mine", folder / "eve" / "mine")  # the course's
    _notebook(folder / "eve" / "02_self_attention.ipynb", ["import torch"])

    def worker(name, path, **options):  # a stand-in for the worker: no kernel, at once
        row = {"score": 1.0, "max_score": 2.0, "error": None, "tasks": {
            "ex02.softmax": {"score": 1.0, "max_score": 1.0, "feedback": "passed all 4 checks."},
            "ex02.scaled_dot_product_attention": {"score": 0.0, "max_score": 1.0,
                                                  "feedback": "the weights do not sum to 1"},
        }}  # fmt: skip
        return {"submission": name, **row}

    monkeypatch.setattr(batch, "_grade_in_worker", worker)
    batch.grade([folder], tmp_path / "out", seed=3, quiet=True)
    records = {r["learner"]: r for r in export.load(tmp_path / "out")}
    ada, bob, eve = records["ada"], records["bob"], records["eve"]
    assert "same code as bob (" in ada["notes"] and "same code as ada (" in bob["notes"]
    assert "mine/attention.py (whole file): scaled_dot_product_attention, softmax" in bob["notes"]
    assert "a hint to compare the two, not a verdict" in ada["notes"]
    assert "same code" not in eve["notes"]  # her code is the course's own
    # never in a learner's feedback, never in a score
    for r in (ada, bob):
        assert r["score"] == 1.0 and r["notes"].startswith("ex02.scaled_dot_product_attention:")
        assert all("same code" not in t["feedback"] for t in r["tasks"].values())
    export.export(tmp_path / "out", moodle=tmp_path / "m.csv")
    assert "same code" not in (tmp_path / "m.csv").read_text(encoding="utf-8-sig")
    table = (tmp_path / "out" / "scores.csv").read_text(encoding="utf-8-sig")
    assert table.count("same code as") == 2
    assert learners.same_learner(" Ada  ") == "ada"


def measure(independent: int, seeds: list[int], copies: int, renamed=None, steps=False):
    """Build classes (`build_class`), let `copies` learners copy another's mine/ folder (every
    other one: one file of it), then `renamed` more (as many by default) do so and rename its
    variables (`copy_mine`'s `rename`); print the pairs named that did not copy, the copies
    named, and the seconds `similarity.pairs` took per learner. `steps`: `build_class`'s."""
    import tempfile
    import time
    from pathlib import Path

    renamed = copies if renamed is None else renamed
    false, seconds = 0, 0.0
    counts = {kind: [0, 0] for kind in ("whole", "one", "whole renamed", "one renamed")}
    for seed in seeds:
        folder = Path(tempfile.mkdtemp(prefix="class-"))
        names = build_class(folder, independent, seed, steps)
        rng = random.Random(seed)
        pool = rng.sample(names, len(names))
        copied = {}
        for k in range(copies + renamed):
            source, copier = pool.pop(), pool.pop()
            files = sorted(p.name for p in (folder / source / "mine").glob("*.py"))
            chosen = None if k % 2 == 0 else [rng.choice(files[1:])]  # files[0]: __init__.py
            if k < copies:
                copy_mine(folder, source, copier, chosen, relayout=k % 3 == 0)
            else:
                copy_mine(folder, source, copier, chosen, relayout=True, rename=rng)
            kind = ("whole" if chosen is None else "one") + (" renamed" if k >= copies else "")
            copied[tuple(sorted((source, copier)))] = kind
        start = time.perf_counter()
        named = {(a, b) for a, b, *_ in similarity.pairs(_learners(folder, names))}
        seconds += time.perf_counter() - start
        false += len(named - set(copied))
        for pair, kind in copied.items():
            counts[kind][0] += pair in named
            counts[kind][1] += 1
        shutil.rmtree(folder)
    pairs = len(seeds) * independent * (independent - 1) // 2
    found = ", ".join(f"{kind} {n} of {of}" for kind, (n, of) in counts.items())
    print(
        f"{len(seeds)} classes of {independent}{' (own steps)' if steps else ''}: {false} of "
        f"{pairs} pairs named that did not "
        f"copy; copies of mine/ named: {found}; "
        f"{seconds / (len(seeds) * independent):.3f} s a learner"
    )


if __name__ == "__main__":  # e.g. python tests/test_similarity.py 40 1,2,3 6 [steps]
    import sys

    args = sys.argv[1:] + ["40", "1,2,3", "6"][len(sys.argv[1:]) :]
    measure(int(args[0]), [int(s) for s in args[1].split(",")], int(args[2]), None, "steps" in args)


def test_code_many_learners_share_is_an_idiom_and_two_is_a_pair(tmp_path):
    # the same long function of their own: in 2 learners' notebooks a hint, in 5 an idiom
    cell = (
        _OWN_SOFTMAX.replace("# save in mine/attention.py\n", "")
        + "\n\n\n"
        + (_OWN_ATTENTION.replace("# save in mine/attention.py\n", ""))
    )
    for i in range(5):
        _notebook(tmp_path / f"l{i}" / "02_self_attention.ipynb", [cell])
    learners = _learners(tmp_path, [f"l{i}" for i in range(5)])
    assert similarity.pairs(learners) == []
    ((a, b, pieces, whole),) = similarity.pairs({k: learners[k] for k in ("l0", "l3")})
    assert (a, b, whole) == ("l0", "l3", [])
    assert [p[:3] for p in pieces] == [
        ("02_self_attention.ipynb", "02_self_attention.ipynb", "scaled_dot_product_attention"),
        ("02_self_attention.ipynb", "02_self_attention.ipynb", "softmax"),
    ]
    assert sum(p[3] for p in pieces) >= similarity.PAIR_TOKENS
