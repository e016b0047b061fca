"""Build the course as a static website, offline, from the committed, executed notebooks.

    python tools/site.py build --out build/site     # then open build/site/index.html

Every page comes from what is committed: the README (the landing page, with the syllabus), the
lessons with their saved outputs, the exercises (saved without outputs) and the solutions (one
clearly marked link away from their exercise). Nothing is executed and nothing is downloaded:
notebooks are rendered with nbconvert (its JupyterLab template), MathJax is copied from the
`jupyter-server-mathjax` package (Jupyter's own MathJax, installed from PyPI with the [site]
or [test] extra), and the site's few scripts are in tools/site_assets/.

Widgets work without a kernel where their state was saved with the notebook (nbclient saves
every widget's final state in the notebook's metadata):
- an anywidget (the attention explorer) runs its own JavaScript module, saved in its state,
  against a small in-page model (tools/site_assets/widgets.js): clicks and hovers work as in
  Jupyter, with no Python behind them;
- a progress bar (tqdm's HBox of HTML, FloatProgress, HTML) is drawn in its final state;
- any other widget needs Python: the page shows its text summary and "run it" links.

Every figure gets its description as alt text, for a reader who cannot see it: the one in its
cell's metadata "alt" (a list, one per figure), which re-running the notebook keeps. The build
refuses a figure without one, naming the notebook and cell.

The site is a tree of plain files: it works from a web server and from the file system alike
(search loads its index as a script, not with fetch). Nothing on a page loads from outside the
site; the build checks that, and tests/test_site.py checks it again in Chromium.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from posixpath import normpath
from urllib.parse import unquote

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from course_lib import BRANCH, REPOSITORY  # noqa: E402
from tools.notebooks import (  # noqa: E402
    BADGE_TAG,
    SETUP_TAG,
    colab_url,
    exercise_effort,
    study_minutes,
)

ASSETS = Path(__file__).resolve().parent / "site_assets"
TITLE = "Transformers from Scratch"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
GITHUB = f"https://github.com/{REPOSITORY}"
MATHJAX_CONFIG = "TeX-AMS-MML_HTMLorMML-full,Safe"
KIND_FOLDER = {"lesson": "notebooks", "exercise": "exercises", "solution": "solutions"}


class SiteError(RuntimeError):
    """The site cannot be built as asked (a missing package, a page that would load from
    outside the site, a link to nowhere, a figure without a description)."""


def binder_url(relpath: str) -> str:
    return f"https://mybinder.org/v2/gh/{REPOSITORY}/{BRANCH}?urlpath=lab/tree/{relpath}"


def github_url(relpath: str) -> str:
    return f"{GITHUB}/blob/{BRANCH}/{relpath}"


# -- the pages --------------------------------------------------------------------------------


@dataclass
class Page:
    kind: str  # "home", "lesson", "exercise" or "solution"
    rel: str  # the page's path in the site, e.g. "notebooks/02_self_attention.html"
    title: str  # the notebook's first heading, e.g. "Lesson 02: Self-attention (Q, K, V)"
    number: str = ""  # "02"
    source: Path | None = None  # the notebook (None for the landing page)
    minutes: int = 0  # study time: the lesson's estimate, or the exercise tasks' sum
    prev: Page | None = field(default=None, repr=False)
    next: Page | None = field(default=None, repr=False)
    exercise: Page | None = field(default=None, repr=False)  # a lesson's exercise
    solution: Page | None = field(default=None, repr=False)  # an exercise's solution

    @property
    def notebook_rel(self) -> str:
        return self.source.relative_to(ROOT).as_posix() if self.source else ""

    @property
    def root(self) -> str:  # from this page to the site's root
        return "../" * self.rel.count("/")

    @property
    def short(self) -> str:  # the title without "Lesson 02:" / "Exercises 02:"
        return self.title.split(":", 1)[-1].strip()


def first_heading(path: Path) -> str:
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return path.stem


def collect_pages() -> list[Page]:
    """The landing page, then per lesson: the lesson, its exercise, its solution. prev/next
    walk lesson, exercise, next lesson...; a solution points back to its exercise."""
    home = Page("home", "index.html", TITLE)
    pages, sequence = [home], [home]
    for lesson_path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        number = lesson_path.name[:2]
        lesson = Page(
            "lesson",
            f"notebooks/{lesson_path.stem}.html",
            first_heading(lesson_path),
            number,
            lesson_path,
            study_minutes(lesson_path),
        )
        pages.append(lesson)
        sequence.append(lesson)
        exercise_path = next(iter(sorted((ROOT / "exercises").glob(f"{number}_*.ipynb"))), None)
        solution_path = next(iter(sorted((ROOT / "solutions").glob(f"{number}_*.ipynb"))), None)
        if exercise_path is None:
            continue
        minutes = exercise_effort(solution_path)[1] if solution_path else 0
        exercise = Page(
            "exercise",
            f"exercises/{exercise_path.stem}.html",
            first_heading(exercise_path),
            number,
            exercise_path,
            minutes,
        )
        lesson.exercise = exercise
        pages.append(exercise)
        sequence.append(exercise)
        if solution_path is not None:
            solution = Page(
                "solution",
                f"solutions/{solution_path.stem}.html",
                "Solutions " + first_heading(solution_path).removeprefix("Exercises "),
                number,
                solution_path,
                minutes,
            )
            exercise.solution = solution
            pages.append(solution)
    for before, after in zip(sequence, sequence[1:], strict=False):
        before.next, after.prev = after, before
    for page in pages:
        if page.kind == "solution":
            exercise = next(p for p in pages if p.solution is page)
            page.prev, page.next = exercise, exercise.next
    return pages


# -- widgets ----------------------------------------------------------------------------------


def _escape_json(value: object) -> str:
    """JSON that is safe inside a <script> element."""
    return json.dumps(value, separators=(",", ":")).replace("<", "\\u003c")


def run_it_links(page: Page) -> str:
    rel = page.notebook_rel
    return (
        f'<a href="{binder_url(rel)}">Binder</a> · <a href="{colab_url(rel)}">Colab</a>'
        if rel
        else ""
    )


def progress_bar_html(box: dict, models: dict) -> str | None:
    """A tqdm bar (HBox of HTML, FloatProgress, HTML) in its final state, or None."""

    def model(ref: object) -> dict:
        return models.get(str(ref).removeprefix("IPY_MODEL_"), {})

    if box.get("model_name") != "HBoxModel":
        return None
    children = [model(c) for c in box.get("state", {}).get("children", [])]
    if [c.get("model_name") for c in children] != ["HTMLModel", "FloatProgressModel", "HTMLModel"]:
        return None
    left, bar, right = (c.get("state", {}) for c in children)
    low, high = bar.get("min") or 0, bar.get("max") or 0
    value = bar.get("value") or 0
    fraction = (value - low) / (high - low) if high > low else 0.0
    style = bar.get("bar_style") or "info"
    color = model(bar.get("style")).get("state", {}).get("bar_color") or ""
    fill_style = f"width: {100 * min(max(fraction, 0), 1):.1f}%"
    if color:
        fill_style += f"; background: {html.escape(color)}"
    label = re.sub(r"<[^>]+>", "", html.unescape(left.get("value", ""))).strip() or "progress"
    # The two HTML values are tqdm's text (its description and its counts), saved as HTML.
    return (
        f'<div class="course-widget course-progress" role="progressbar" '
        f'aria-label="{html.escape(label)}" aria-valuemin="{low:g}" aria-valuemax="{high:g}" '
        f'aria-valuenow="{value:g}">'
        f'<span class="course-progress-text">{left.get("value", "")}</span>'
        f'<span class="course-progress-track"><span class="course-progress-fill '
        f'course-progress-{html.escape(style)}" style="{fill_style}"></span></span>'
        f'<span class="course-progress-text">{right.get("value", "")}</span></div>'
    )


def widget_html(view: dict, text: str, models: dict, page: Page) -> tuple[str, str]:
    """(kind, HTML) for one saved widget output: "anywidget", "progress" or "needs-python"."""
    model = models.get(view.get("model_id", ""), {})
    state = model.get("state", {})
    if model.get("model_name") == "AnyModel" and state.get("_esm"):
        keep = {k: v for k, v in state.items() if not k.startswith("_") or k in ("_esm", "_css")}
        return "anywidget", (
            '<div class="course-widget course-anywidget">'
            f'<script type="application/json" class="course-widget-state">{_escape_json(keep)}'
            "</script>"
            f'<pre class="course-widget-fallback">{html.escape(text)}</pre>'
            '<p class="course-widget-note">Saved with the notebook when it ran: this widget '
            "works in the page, without Python. To change the code behind it, run the "
            f"notebook: {run_it_links(page)}.</p></div>"
        )
    bar = progress_bar_html(model, models)
    if bar is not None:
        return "progress", bar
    return "needs-python", (
        '<div class="course-widget course-needs-python">'
        f"<pre>{html.escape(text)}</pre>"
        '<p class="course-run-it">This output is an interactive widget that needs Python; '
        f"above is its text summary. Run it: {run_it_links(page)}.</p></div>"
    )


FIGURE_TYPES = ("image/png", "image/jpeg")
ALT_MAX = 300  # characters: a description a screen reader reads out in a breath or two


def attach_descriptions(page: Page, index: int, cell) -> None:
    """Each figure of the cell gets its description (the cell's metadata "alt": one string per
    figure, in output order; kept when the notebook is run again), for the page's alt text."""
    figures = [
        o for o in cell.get("outputs", []) if any(t in o.get("data", {}) for t in FIGURE_TYPES)
    ]
    if not figures:
        return
    alt = cell.get("metadata", {}).get("alt")
    where = f"{page.notebook_rel}, cell {index}"
    if not isinstance(alt, list) or len(alt) != len(figures):
        raise SiteError(
            f"{where}: {len(figures)} figure(s) but no description for each: give the cell's "
            'metadata "alt" a list of one description per figure (what it shows, in words), so '
            "that a reader who cannot see it hears it"
        )
    for output, text in zip(figures, alt, strict=True):
        if not isinstance(text, str) or not text.strip() or len(text) > ALT_MAX:
            raise SiteError(f'{where}: each "alt" description is 1 to {ALT_MAX} characters')
        output.setdefault("metadata", {})["alt"] = text.strip()


NO_ALT = "No description has been provided for this image"  # what nbconvert writes instead


def write_descriptions(body: str, nb, page: Page) -> str:
    """Each figure's <img> on the page gets its description (put on its output by
    attach_descriptions) as alt text; nbconvert would write NO_ALT, which a screen reader reads
    out for every figure. Fails when an image of the page is left with NO_ALT."""
    queued: dict[str, list[str]] = {}  # src -> descriptions, in page order
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            alt = output.get("metadata", {}).get("alt")
            for kind in FIGURE_TYPES if alt else ():
                if kind in output.get("data", {}):
                    src = "".join(f"data:{kind};base64,{output.data[kind]}".split())
                    queued.setdefault(src, []).append(alt)

    def describe(match: re.Match) -> str:
        tag = match.group(0)
        queue = queued.get("".join(html.unescape(_attribute(tag, "src") or "").split()))
        if not queue:
            return tag
        tag = re.sub(r'\salt="[^"]*"', "", tag)
        return f'<img alt="{_h(queue.pop(0))}"{tag[4:]}'

    body = IMAGE.sub(describe, body)
    if NO_ALT in body:
        raise SiteError(f"{page.rel}: an image without a description (alt text)")
    return body


def prepare_notebook(page: Page):
    """The notebook as the page shows it: no Colab badge cell (the page has its own launch
    links), each widget output replaced by its HTML, each figure given its description.
    Returns (nb, counts of widget kinds)."""
    nb = nbformat.read(page.source, as_version=4)
    models = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    counts: dict[str, int] = {}
    kept = []
    for index, cell in enumerate(nb.cells):
        tags = cell.get("metadata", {}).get("tags", [])
        if BADGE_TAG in tags:
            continue
        attach_descriptions(page, index, cell)
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if WIDGET_VIEW not in data:
                continue
            text = data.get("text/plain", "")
            text = "".join(text) if isinstance(text, list) else text
            kind, markup = widget_html(data[WIDGET_VIEW], text, models, page)
            counts[kind] = counts.get(kind, 0) + 1
            output["data"] = {"text/html": markup, "text/plain": text}
        kept.append(cell)
    # The setup cell comes first in the notebook (it must run first); on the page, the title and
    # introduction come first, so that a visitor does not open a lesson onto setup code.
    if (
        len(kept) > 1
        and SETUP_TAG in kept[0].get("metadata", {}).get("tags", [])
        and kept[1].cell_type == "markdown"
    ):
        kept[0], kept[1] = kept[1], kept[0]
    if page.kind == "solution":  # the notebook is the exercises' source: its title says so
        for cell in kept:
            if cell.cell_type == "markdown" and cell.source.startswith("# Exercises "):
                cell.source = "# Solutions " + cell.source.removeprefix("# Exercises ")
                break
    nb.cells = kept
    nb.metadata.pop("widgets", None)
    return nb, counts


# -- HTML: rendering, links, search -------------------------------------------------------------

_exporter = None


def exporter():
    global _exporter
    if _exporter is None:
        from nbconvert import HTMLExporter

        _exporter = HTMLExporter(
            template_name="coursesite", extra_template_basedirs=[str(ASSETS / "templates")]
        )
    return _exporter


def markdown_html(text: str) -> str:
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    return markdown2html_mistune(text)


LINK = re.compile(r'(<a\b[^>]*?\s)href="([^"]*)"', re.IGNORECASE)
IMAGE = re.compile(r"<img\b[^>]*>", re.IGNORECASE)
REMOTE = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def _attribute(tag: str, name: str) -> str | None:
    found = re.search(rf'\s{name}="([^"]*)"', tag)
    return found.group(1) if found else None


def rewrite_links(markup: str, page: Page, site_files: set[str]) -> str:
    """Links to notebooks become links to their pages; links to other files of the repository go
    to GitHub; images from outside the site (the Binder and Colab badges) become text, so that
    nothing loads from outside."""
    folder = page.rel.rpartition("/")[0]

    def image(match: re.Match) -> str:
        src = _attribute(match.group(0), "src") or ""
        if REMOTE.match(src) and not src.startswith("data:"):
            return f'<span class="badge">{_attribute(match.group(0), "alt") or "image"}</span>'
        return match.group(0)

    def link(match: re.Match) -> str:
        before, url = match.groups()
        if REMOTE.match(url) or url.startswith("#"):
            return match.group(0)
        path, _, fragment = url.partition("#")
        target = normpath(f"{folder}/{unquote(path)}" if folder else unquote(path))
        anchor = f"#{fragment}" if fragment else ""
        if target == "README.md":
            new = "index.html"
        elif target.endswith(".ipynb") and target[:-6] + ".html" in site_files:
            new = target[:-6] + ".html"
        elif (ROOT / target).exists():
            return f'{before}href="{github_url(target)}{anchor}"'
        else:
            return match.group(0)  # left as written: the site test's link check reports it
        return f'{before}href="{page.root}{new}{anchor}"'

    return LINK.sub(link, IMAGE.sub(image, markup))


VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}


class SectionText(HTMLParser):
    """Splits a page's HTML into sections at its h1-h3 headings: [(id, heading, text)]. The
    setup cell (the same in every notebook), scripts and styles are left out."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.sections: list[list[str]] = [["", "", ""]]
        self.skip_depth = 0  # > 0 inside something left out
        self.depth = 0
        self.heading: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag in VOID:
            return
        self.depth += 1
        if self.skip_depth:
            self.skip_depth += 1
            return
        if tag in ("script", "style") or "celltag_" + SETUP_TAG in (attrs.get("class") or ""):
            self.skip_depth = 1
            return
        if tag in ("h1", "h2", "h3") and attrs.get("id"):
            self.sections.append([attrs["id"], "", ""])
            self.heading = tag
        if tag in ("p", "pre", "li", "tr", "div", "br"):
            self._add(" ")

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        self.depth -= 1
        if self.skip_depth:
            self.skip_depth -= 1
            return
        if tag == self.heading:
            self.heading = None

    def _add(self, text: str) -> None:
        section = self.sections[-1]
        if self.heading:
            section[1] += text
        else:
            section[2] += text

    def handle_data(self, data):
        if not self.skip_depth and data != "¶":
            self._add(data)


# TeX commands as text; any other command reads as its name (\sin as sin)
TEX_SYMBOLS = dict(
    pair.split()
    for pair in re.findall(
        r"\S+ \S+",
        "cdot · times × sqrt √ top ᵀ sum Σ le ≤ leq ≤ ge ≥ geq ≥ ne ≠ neq ≠ approx ≈ in ∈ infty ∞ "
        "to → leftarrow ← rightarrow → odot ⊙ partial ∂ ell ℓ lVert ‖ rVert ‖ alpha α beta β "
        "gamma γ epsilon ε varepsilon ε theta θ mu μ pi π sigma σ phi φ omega ω lambda λ Delta Δ "
        "dots … ldots … ",
    )
)
TEX_COMMAND = re.compile(r"\\([a-zA-Z]+)|\\[,;:! ]")
TEX_INLINE = re.compile(r"\$\$(.+?)\$\$|\$([^$]{1,400}?)\$")


def plain_math(text: str) -> str:
    """TeX in a search snippet, made readable as text: "$\\sqrt{d_k}$" becomes "√d_k" (the
    page itself typesets it with MathJax; the snippet is plain text)."""

    def formula(match: re.Match) -> str:
        tex = match.group(1) or match.group(2)
        tex = re.sub(r"\\(?:text|mathrm|mathbf|mathit|operatorname)\{([^{}]*)\}", r"\1", tex)
        for _ in range(4):  # inner groups first: x_{ij} -> x_ij, then \frac{a}{b} -> (a)/(b)
            tex = re.sub(r"([_^])\{([^{}]*)\}", r"\1\2", tex)
            tex = re.sub(r"\\frac\{([^{}]*)\}\{([^{}]*)\}", r"(\1)/(\2)", tex)
        tex = re.sub(r"\\(?:left|right|big|Big|bigg|qquad|quad)\b", " ", tex)
        tex = TEX_COMMAND.sub(
            lambda m: TEX_SYMBOLS.get(m.group(1), m.group(1)) if m.group(1) else " ", tex
        )
        return " ".join(tex.replace("{", "").replace("}", "").split())

    return TEX_INLINE.sub(formula, text)


def search_entries(page: Page, body: str) -> list[dict]:
    parser = SectionText()
    parser.feed(body)
    entries = []
    for anchor, heading, text in parser.sections:
        heading = " ".join(heading.split()).rstrip("¶ ")
        text = plain_math(" ".join(text.split()))
        if not (heading or text):
            continue
        entries.append(
            {
                "url": page.rel + (f"#{anchor}" if anchor else ""),
                "page": page.title if page.kind != "home" else TITLE,
                "section": heading,
                "text": text,
            }
        )
    return entries


# -- the page shell ---------------------------------------------------------------------------


def _h(text: str) -> str:
    return html.escape(text, quote=True)


def sidebar(pages: list[Page], current: Page) -> str:
    """Every lesson with its study time; under it, its exercise and (marked) its solution."""

    def link(page: Page, label: str, extra: str = "") -> str:
        here = ' aria-current="page" class="current"' if page is current else ""
        return f'<a href="{current.root}{page.rel}"{here}>{label}</a>{extra}'

    items = [f'<li class="nav-home">{link(pages[0], "Home and syllabus")}</li>']
    for lesson in (p for p in pages if p.kind == "lesson"):
        sub = []
        if lesson.exercise:
            sub.append(
                "<li>"
                + link(
                    lesson.exercise,
                    "Exercise",
                    f' <span class="minutes">{lesson.exercise.minutes} min</span>',
                )
                + "</li>"
            )
            if lesson.exercise.solution:
                sub.append(
                    '<li class="nav-solution">'
                    + link(lesson.exercise.solution, "Solution (spoiler)")
                    + "</li>"
                )
        items.append(
            '<li class="nav-lesson">'
            + link(
                lesson,
                f'<span class="num">{lesson.number}</span> {_h(lesson.short)}',
                f' <span class="minutes">{lesson.minutes} min</span>',
            )
            + f"<ul>{''.join(sub)}</ul></li>"
        )
    return f'<ul class="nav-list">{"".join(items)}</ul>'


def launch_bar(page: Page) -> str:
    rel = page.notebook_rel or "notebooks/00_introduction.ipynb"
    what = "this notebook" if page.source else "the course"
    download = (
        f' · <a href="{page.root}{rel}" download>Download the notebook</a>' if page.source else ""
    )
    return (
        f'<div class="launch-bar">Run {what}: '
        f'<a class="launch binder" href="{binder_url(rel)}">Launch on Binder</a> '
        f'<a class="launch colab" href="{colab_url(rel)}">Open in Colab</a>'
        f"{download}</div>"
    )


def notice(page: Page) -> str:
    if page.kind == "exercise" and page.solution:
        return (
            '<div class="notice notice-exercise">This page shows the exercise as you get it: '
            "write your code in the notebook (Binder, Colab or your own Jupyter) and run its "
            "check cells. The worked answers are on a separate page: "
            f'<a class="solution-link" href="{page.root}{page.solution.rel}">'
            "Solutions (spoiler: try the tasks first)</a>.</div>"
        )
    if page.kind == "solution":
        exercise = page.prev
        return (
            '<div class="notice notice-solution"><strong>Spoiler: worked solutions.</strong> '
            "This page shows the answers, with their checks run. "
            f'<a href="{page.root}{exercise.rel}">Back to the exercise</a>.</div>'
        )
    if page.kind == "lesson" and page.exercise:
        return (
            f'<div class="notice notice-lesson">About {page.minutes} min to study; then the '
            f'<a href="{page.root}{page.exercise.rel}">exercise</a> '
            f"(about {page.exercise.minutes} min).</div>"
        )
    return ""


H2 = re.compile(r'<h2 id="([^"]+)">(.*?)</h2>', re.DOTALL)


def page_toc(body: str) -> str:
    """The page's sections ("On this page", its h2 headings), folded, above the notebook."""
    items = []
    for anchor, inner in H2.findall(body):
        text = re.sub(r"<[^>]+>", "", re.sub(r'<a class="anchor-link".*?</a>', "", inner))
        items.append(f'<li><a href="#{anchor}">{text.strip()}</a></li>')
    if len(items) < 2:
        return ""
    return (
        '<details class="page-toc"><summary>On this page: '
        f"{len(items)} sections</summary><ol>{''.join(items)}</ol></details>"
    )


def pager(page: Page) -> str:
    parts = []
    if page.prev:
        parts.append(
            f'<a class="prev" rel="prev" href="{page.root}{page.prev.rel}">'
            f"← {_h(page.prev.title)}</a>"
        )
    if page.next:
        parts.append(
            f'<a class="next" rel="next" href="{page.root}{page.next.rel}">'
            f"{_h(page.next.title)} →</a>"
        )
    return f'<nav class="pager">{"".join(parts)}</nav>'


def shell(page: Page, pages: list[Page], body: str, *, math: bool, widgets: bool) -> str:
    root = page.root
    head = [
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_h(page.title + ' · ' + TITLE if page.kind != 'home' else TITLE)}</title>",
        f'<link rel="icon" href="{root}assets/favicon.svg" type="image/svg+xml">',
        f'<link rel="stylesheet" href="{root}assets/jupyterlab/index.css">',
        f'<link rel="stylesheet" href="{root}assets/jupyterlab/theme-light.css">',
        f'<link rel="stylesheet" href="{root}assets/highlight.css">',
        f'<link rel="stylesheet" href="{root}assets/site.css">',
    ]
    if math:
        head.append(f'<script src="{root}assets/mathjax-config.js"></script>')
        head.append(
            f'<script src="{root}assets/mathjax/MathJax.js?config={MATHJAX_CONFIG}" defer></script>'
        )
    scripts = [f'<script src="{root}assets/site.js"></script>']
    if widgets:
        scripts.append(f'<script src="{root}assets/widgets.js"></script>')
    kind_class = f"page-{page.kind}"
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
{chr(10).join(head)}
</head>
<body class="{kind_class}" data-root="{root}" data-jp-theme-light="true">
<header class="site-header">
  <button class="nav-toggle" type="button" aria-label="Show the lessons">☰</button>
  <a class="site-title" href="{root}index.html">{TITLE}</a>
  <div class="search">
    <input id="search-input" type="search" placeholder="Search the course"
      aria-label="Search the course" autocomplete="off">
    <div id="search-results" class="search-results" hidden></div>
  </div>
</header>
<div class="site-layout">
<nav class="site-sidebar" aria-label="Lessons">
{sidebar(pages, page)}
</nav>
<main class="site-main">
{launch_bar(page)}
{notice(page)}
{page_toc(body) if page.source else ""}
<div class="page-content jp-Notebook">
{body}
</div>
{pager(page)}
<footer class="site-footer">Code: MIT licence. Prose and figures: CC BY 4.0.
Source: <a href="{GITHUB}">{REPOSITORY}</a>. Built from the committed notebooks; nothing on this
page loads from outside the site.</footer>
</main>
</div>
{chr(10).join(scripts)}
</body>
</html>
"""


BADGE_LINE = re.compile(r"^\[!\[[^\]]*\]\([^)]*\)\]\([^)]*\)\n", re.MULTILINE)


def landing_body() -> str:
    """The README, less its Binder and Colab badges under the title: the page's launch bar
    above it has the same two links (the syllabus keeps its Colab links)."""
    text = BADGE_LINE.sub("", (ROOT / "README.md").read_text())
    return (
        f'<div class="jp-RenderedHTMLCommon jp-RenderedMarkdown readme">{markdown_html(text)}</div>'
    )


HAS_MATH = re.compile(r"\$[^$\n]+\$|\\\(|\\\[")


# -- assets and the build -----------------------------------------------------------------------


def mathjax_source() -> Path:
    try:
        import jupyter_server_mathjax
    except ImportError:
        raise SiteError(
            "the site needs MathJax from the jupyter-server-mathjax package: "
            'pip install -e ".[site]" (or ".[test]")'
        ) from None
    return Path(jupyter_server_mathjax.__file__).parent / "static"


def copy_assets(out: Path) -> None:
    from nbconvert import HTMLExporter
    from pygments.formatters import HtmlFormatter

    assets = out / "assets"
    assets.mkdir(parents=True, exist_ok=True)
    for name in ("site.css", "site.js", "widgets.js", "mathjax-config.js", "favicon.svg"):
        shutil.copy(ASSETS / name, assets / name)
    lab = Path(HTMLExporter().template_paths[0]).parent / "lab" / "static"
    if not (lab / "index.css").exists():  # where nbconvert keeps its JupyterLab template's CSS
        lab = next(
            Path(p) / "static"
            for p in HTMLExporter(template_name="lab").template_paths
            if (Path(p) / "static" / "index.css").exists()
        )
    (assets / "jupyterlab").mkdir(exist_ok=True)
    for name in ("index.css", "theme-light.css"):
        shutil.copy(lab / name, assets / "jupyterlab" / name)
    (assets / "highlight.css").write_text(
        HtmlFormatter(style="default").get_style_defs(".highlight") + "\n"
    )
    # MathJax, English only: it loads another language's messages only when asked for one
    shutil.copytree(
        mathjax_source(),
        assets / "mathjax",
        ignore=lambda folder, names: (
            [n for n in names if n != "en"] if Path(folder).name == "localization" else []
        ),
    )


def check_nothing_remote(page: Page, markup: str) -> None:
    """A page must load nothing from outside the site: no remote src, no remote stylesheet."""
    loads = re.findall(r'<(?:img|script|iframe|source|video|audio)\b[^>]*\ssrc="([^"]*)"', markup)
    loads += re.findall(r'<link\b[^>]*\shref="([^"]*)"', markup)
    loads += re.findall(r"url\((['\"]?)(https?:[^)]*)\)", markup)
    remote = [
        u for u in loads if isinstance(u, str) and REMOTE.match(u) and not u.startswith("data:")
    ]
    if remote:
        raise SiteError(f"{page.rel} would load from outside the site: {remote[:3]}")


@dataclass
class BuildReport:
    out: Path
    pages: int
    seconds: float
    widgets: dict[str, int]
    search_entries: int


def build(out: Path) -> BuildReport:
    """Build the whole site into `out` (emptied first). Returns what it built."""
    start = time.perf_counter()
    mathjax_source()  # fail early, with the install command, when MathJax is missing
    out = out.resolve()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    pages = collect_pages()
    site_files = {p.rel for p in pages}
    index: list[dict] = []
    widgets: dict[str, int] = {}
    for page in pages:
        if page.kind == "home":
            body, math, counts = landing_body(), False, {}
        else:
            nb, counts = prepare_notebook(page)
            body = write_descriptions(exporter().from_notebook_node(nb)[0], nb, page)
            math = any(c.cell_type == "markdown" and HAS_MATH.search(c.source) for c in nb.cells)
            copy = out / page.notebook_rel  # the notebook itself, for "Download"
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(page.source, copy)
        for kind, n in counts.items():
            widgets[kind] = widgets.get(kind, 0) + n
        body = rewrite_links(body, page, site_files)
        index.extend(search_entries(page, body))
        markup = shell(page, pages, body, math=math, widgets="anywidget" in counts)
        check_nothing_remote(page, markup)
        target = out / page.rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(markup)
    copy_assets(out)
    (out / "assets" / "search-index.js").write_text(
        "window.COURSE_SEARCH_INDEX = " + _escape_json(index) + ";\n"
    )
    return BuildReport(out, len(pages), time.perf_counter() - start, widgets, len(index))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the site from the committed notebooks")
    b.add_argument("--out", type=Path, default=ROOT / "build" / "site")
    args = parser.parse_args(argv)
    try:
        report = build(args.out)
    except SiteError as error:
        raise SystemExit(f"site: {error}") from None
    widgets = ", ".join(f"{n} {kind}" for kind, n in sorted(report.widgets.items()))
    print(
        f"site: built {report.pages} pages in {report.seconds:.1f} s (widgets: {widgets}; "
        f"{report.search_entries} search entries) at {report.out}"
    )
    print(f"site: open {report.out / 'index.html'}")


if __name__ == "__main__":
    main()
