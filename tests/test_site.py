"""The course as a website: `python tools/site.py build` makes it offline from the committed
notebooks, and a real browser reads every page of it.

The site is built once into a temporary folder (the build must take under two minutes), served
from 127.0.0.1, and opened in headless Chromium (Debian's `chromium`, driven by playwright, as in
tests/test_browser.py). Every page must load with no console error and no request leaving the
machine (any such request is refused and reported), every link inside the site must lead to a
page and an anchor that exist, figures and math must be drawn, the attention explorer of lesson
02 must answer clicks and hovers with what Python's AttentionExplorer says, lesson 09's progress
bars must show their final state, and search must find a section and lead to it.
Screenshots (the landing page, lesson 02's explorer after a click, lesson 09's training
progress) go to a temporary folder; their paths are printed.

On a machine without Chromium or playwright the browser tests skip, saying why; in CI they fail.
"""

from __future__ import annotations

import functools
import html
import http.server
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlparse

import nbformat
import pytest
from browser_support import ROOT, WIDGET_MIME, browser_missing, chromium, require

sys.path.insert(0, str(ROOT))
import tools.site as site_tool  # noqa: E402

BUILD_LIMIT_S = 120  # the bound for a build on two cores
NOTEBOOKS = [
    p
    for folder in ("notebooks", "exercises", "solutions")
    for p in sorted((ROOT / folder).glob("*.ipynb"))
]
EXPLORER_LESSON = "notebooks/02_self_attention.html"
PROGRESS_LESSON = "notebooks/09_gpt_from_scratch.html"


def mathjax_missing() -> str | None:
    try:
        site_tool.mathjax_source()
    except site_tool.SiteError as error:
        return str(error)
    return None


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    reason = mathjax_missing()
    require(reason is None, reason or "")
    out = tmp_path_factory.mktemp("site") / "site"
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "tools/site.py", "build", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    seconds = time.perf_counter() - start
    assert proc.returncode == 0, f"the site build failed:\n{proc.stdout}\n{proc.stderr}"
    print(f"\n{proc.stdout.strip()}\nthe build command took {seconds:.1f} s")
    assert seconds < BUILD_LIMIT_S, f"the site build took {seconds:.0f} s (limit {BUILD_LIMIT_S})"
    return out


def page_paths(out: Path) -> list[str]:
    return sorted(p.relative_to(out).as_posix() for p in out.rglob("*.html"))


# -- the build, read as files --------------------------------------------------------------------


def test_every_notebook_has_a_page_with_launch_links(built):
    pages = page_paths(built)
    assert "index.html" in pages
    for notebook in NOTEBOOKS:
        rel = notebook.relative_to(ROOT).as_posix()
        page = rel.removesuffix(".ipynb") + ".html"
        assert page in pages, f"no page for {rel}"
        text = (built / page).read_text()
        assert site_tool.binder_url(rel) in text, f"{page}: no Binder link to {rel}"
        assert site_tool.colab_url(rel) in text, f"{page}: no Colab link to {rel}"
        assert (built / rel).is_file(), f"{page}: its notebook is not downloadable from the site"
    home = (built / "index.html").read_text()
    assert "mybinder.org" in home and "colab.research.google.com" in home


def test_landing_page_has_the_syllabus_with_study_times_and_links_to_every_lesson(built):
    home = (built / "index.html").read_text()
    for lesson in sorted((ROOT / "notebooks").glob("*.ipynb")):
        minutes = site_tool.study_minutes(lesson)
        assert f'href="notebooks/{lesson.stem}.html"' in home, f"no link to {lesson.stem}"
        assert f"about {minutes} min" in home, f"{lesson.stem}: no study time on the landing page"
    assert "In all: about" in home  # the syllabus totals
    # the README's Binder and Colab badges are the launch bar's two links: shown once, not twice
    assert home.count("mybinder.org/v2/gh/") == 1, "the Binder link is on the landing page twice"


def test_exercises_have_no_outputs_and_a_marked_link_to_their_solution(built):
    for exercise in sorted((ROOT / "exercises").glob("*.ipynb")):
        text = (built / "exercises" / f"{exercise.stem}.html").read_text()
        assert "jp-OutputArea-output" not in text, f"{exercise.name}: an output on the page"
        solution = re.search(r'<a class="solution-link" href="([^"]+)">([^<]+)</a>', text)
        assert solution, f"{exercise.name}: no marked link to the solution"
        assert solution.group(1) == f"../solutions/{exercise.stem}.html"
        assert "spoiler" in solution.group(2).lower()
        solved = (built / "solutions" / f"{exercise.stem}.html").read_text()
        assert "Spoiler: worked solutions." in solved
        # the solution notebook is the exercises' source, but its page is titled as solutions
        heading = re.search(r"<h1[^>]*>(.*?)</h1>", solved, re.DOTALL).group(1)
        assert heading.startswith(f"Solutions {exercise.name[:2]}:"), heading[:60]


def test_pages_link_to_the_previous_and_next_step_and_list_every_lesson(built):
    """A lesson leads to its exercise, an exercise to the next lesson; the sidebar lists all."""
    lesson = (built / "notebooks" / "02_self_attention.html").read_text()
    assert 'rel="prev" href="../exercises/01_tokens_and_embeddings.html"' in lesson
    assert 'rel="next" href="../exercises/02_self_attention.html"' in lesson
    exercise = (built / "exercises" / "02_self_attention.html").read_text()
    assert 'rel="next" href="../notebooks/03_multi_head_attention.html"' in exercise
    for other in sorted((ROOT / "notebooks").glob("*.ipynb")):
        assert f'href="../notebooks/{other.stem}.html"' in lesson, f"no {other.stem} in the list"


def test_a_page_opens_on_its_title_with_its_sections_listed_not_on_the_setup_cell(built):
    """The setup cell must run first in the notebook, but the page shows the lesson's title and
    introduction first; an "On this page" list links to every section; the browser tab names
    the page and the course."""
    text = (built / "notebooks" / "02_self_attention.html").read_text()
    assert "<title>Lesson 02: Self-attention (Q, K, V) · Transformers from Scratch</title>" in text
    title, setup = text.index("<h1"), text.index("celltag_course-setup")
    assert title < setup, "the setup cell comes before the lesson's title"
    toc = re.search(r'<details class="page-toc">.*?</details>', text, re.DOTALL)
    assert toc, "no list of the page's sections"
    anchors = re.findall(r'href="#([^"]+)"', toc.group(0))
    assert anchors == re.findall(r'<h2 id="([^"]+)"', text) and len(anchors) > 5
    assert "anchor-link" not in toc.group(0) and "¶" not in toc.group(0)


def test_widgets_are_drawn_from_their_saved_state(built):
    """Each saved widget output becomes a live explorer, a progress bar in its final state, or
    (a widget that needs Python) its text summary with run-it links; the counts match the
    notebooks."""
    for notebook in NOTEBOOKS:
        nb = nbformat.read(notebook, as_version=4)
        views = [
            o for c in nb.cells for o in c.get("outputs", []) if WIDGET_MIME in o.get("data", {})
        ]
        page = notebook.relative_to(ROOT).with_suffix(".html").as_posix()
        text = (built / page).read_text()
        drawn = (
            text.count('class="course-widget course-anywidget"')
            + text.count('class="course-widget course-progress"')
            + text.count('class="course-widget course-needs-python"')
        )
        assert drawn == len(views), f"{page}: {drawn} widgets drawn, {len(views)} saved"
    assert 'class="course-widget course-anywidget"' in (built / EXPLORER_LESSON).read_text()


def test_a_widget_that_needs_python_shows_its_text_and_run_it_links():
    page = next(p for p in site_tool.collect_pages() if p.kind == "lesson")
    view = {"model_id": "abc"}
    models = {"abc": {"model_name": "IntSliderModel", "state": {"value": 3}}}
    kind, markup = site_tool.widget_html(view, "IntSlider(value=3)", models, page)
    assert kind == "needs-python"
    assert "IntSlider(value=3)" in markup
    assert site_tool.binder_url(page.notebook_rel) in markup
    assert site_tool.colab_url(page.notebook_rel) in markup
    assert site_tool.widget_html(view, "x", {}, page)[0] == "needs-python"  # no saved state


def test_a_page_that_would_load_from_outside_fails_the_build():
    page = site_tool.Page("lesson", "notebooks/x.html", "x")
    with pytest.raises(site_tool.SiteError, match="would load from outside"):
        site_tool.check_nothing_remote(page, '<script src="https://cdn.example/x.js"></script>')
    site_tool.check_nothing_remote(page, '<a href="https://colab.research.google.com/">ok</a>')


def test_every_figure_on_the_site_has_its_description_as_alt_text(built):
    """A screen reader reads a figure's alt text: the description in its cell's metadata."""
    described = [
        text
        for notebook in NOTEBOOKS
        if notebook.parent.name != "exercises"  # an exercise has no outputs, so no figure
        for cell in nbformat.read(notebook, as_version=4).cells
        for text in cell.get("metadata", {}).get("alt", [])
    ]
    figures = 0
    for page in page_paths(built):
        for tag in re.findall(r"<img\b[^>]*>", (built / page).read_text()):
            if 'src="data:image/' not in tag:
                continue
            figures += 1
            alt = re.search(r'\salt="([^"]*)"', tag)
            text = alt.group(1).strip() if alt else ""
            # nbconvert's own alt for an image without one, read out for every such figure
            no_description = text.startswith("No description has been provided")
            assert text and not no_description, f"{page}: a figure without a description"
            assert html.unescape(text) in described, f"{page}: {text[:60]!r} is no description"
    assert figures == len(described) >= 50, f"{figures} figures, {len(described)} descriptions"


def test_a_figure_without_a_description_fails_the_build(tmp_path, monkeypatch):
    png = nbformat.v4.new_output("display_data", data={"image/png": "iVBO", "text/plain": "x"})
    cell = nbformat.v4.new_code_cell("plt.show()", outputs=[png])
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# T"), cell])
    monkeypatch.setattr(site_tool, "ROOT", tmp_path)
    source = tmp_path / "notebooks" / "99_figure.ipynb"
    source.parent.mkdir()
    nbformat.write(nb, source)
    page = site_tool.Page("lesson", "notebooks/99_figure.html", "T", "99", source)
    with pytest.raises(site_tool.SiteError, match=r"notebooks/99_figure.ipynb, cell 1: 1 figure"):
        site_tool.prepare_notebook(page)
    cell.metadata["alt"] = ['A bar chart: "most" tokens are <rare> & short.']
    nbformat.write(nb, source)
    prepared, _ = site_tool.prepare_notebook(page)
    rendered = site_tool.exporter().from_notebook_node(prepared)[0]
    body = site_tool.write_descriptions(rendered, prepared, page)
    assert '<img alt="A bar chart: &quot;most&quot; tokens are &lt;rare&gt; &amp; short." ' in body
    assert site_tool.NO_ALT not in body


def test_badges_become_text_and_notebook_links_become_page_links():
    page = site_tool.Page("lesson", "notebooks/02_self_attention.html", "x")
    markup = (
        '<a href="https://x.test"><img alt="Open In Colab" src="https://x.test/badge.svg"/></a>'
        '<a href="03_multi_head_attention.ipynb#Heads">next</a>'
        '<a href="../exercises/02_self_attention.ipynb">ex</a>'
        '<a href="../course_lib/attention.py">code</a>'
    )
    files = {"notebooks/03_multi_head_attention.html", "exercises/02_self_attention.html"}
    out = site_tool.rewrite_links(markup, page, files)
    assert "<img" not in out and '<span class="badge">Open In Colab</span>' in out
    assert 'href="../notebooks/03_multi_head_attention.html#Heads"' in out
    assert 'href="../exercises/02_self_attention.html"' in out
    assert f'href="{site_tool.github_url("course_lib/attention.py")}"' in out


# -- the site in a browser ------------------------------------------------------------------------


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def server(built):
    handler = functools.partial(_QuietHandler, directory=str(built))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}/"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def browser(server):
    reason = browser_missing()
    require(reason is None, reason or "")
    with chromium() as browser:
        yield browser


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory, pytestconfig):
    folder = tmp_path_factory.mktemp("site-screenshots")
    yield folder
    shots = sorted(folder.glob("*.png"))
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print("\nsite screenshots:\n" + "\n".join(f"  {p}" for p in shots))


class Visit:
    """A page with everything that went wrong in it recorded: console errors, page errors, and
    requests for anything outside the site (refused before they leave)."""

    def __init__(self, browser, origin: str) -> None:
        self.origin = origin
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.errors: list[str] = []
        self.outside: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        self.page.on(
            "response",
            lambda r: self.errors.append(f"{r.status} for {r.url}") if r.status >= 400 else None,
        )
        self.page.route("**/*", self._route)

    def _route(self, route) -> None:
        url = route.request.url
        if url.startswith(self.origin) or url.startswith(("data:", f"blob:{self.origin}")):
            route.continue_()
        else:
            self.outside.append(url)
            route.abort()

    def open(self, rel: str) -> None:
        self.page.goto(self.origin + rel, wait_until="load")
        if self.page.evaluate("() => !!window.MathJax"):
            self.page.wait_for_function(
                "() => document.body.dataset.mathjax === 'done'", timeout=60_000
            )

    def close(self) -> None:
        self.page.close()


# What a page holds, read in the browser: its links, its ids, its figures and its math.
PAGE_JS = """
() => ({
  links: Array.from(document.querySelectorAll("a[href]"), (a) => a.href),
  ids: Array.from(document.querySelectorAll("[id]"), (e) => e.id),
  figures: Array.from(document.querySelectorAll(".jp-OutputArea-output img"),
    (img) => ({complete: img.complete, width: img.naturalWidth, height: img.naturalHeight})),
  mathSources: document.querySelectorAll('script[type^="math/tex"]').length,
  mathRendered: document.querySelectorAll(".MathJax, .MathJax_Display").length,
  mathErrors: Array.from(document.querySelectorAll(".MathJax .merror, .MathJax_Error, .merror"),
    (e) => e.textContent).slice(0, 5),
  rawMath: Array.from(document.querySelectorAll(".jp-RenderedMarkdown"),
    (e) => e.innerText).join("\\n").match(/\\$\\$|\\\\frac|\\\\sqrt/g) || [],
})
"""


def png_outputs(notebook: Path) -> int:
    nb = nbformat.read(notebook, as_version=4)
    return sum(
        1 for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})
    )


def test_every_page_loads_cleanly_and_every_internal_link_resolves(built, server, browser):
    started = time.perf_counter()
    pages = page_paths(built)
    found: dict[str, dict] = {}
    problems: list[str] = []
    visit = Visit(browser, server)
    try:
        for rel in pages:
            visit.errors.clear()
            visit.outside.clear()
            visit.open(rel)
            info = visit.page.evaluate(PAGE_JS)
            found[rel] = info
            if visit.errors:
                problems.append(f"{rel}: console errors: {visit.errors[:3]}")
            if visit.outside:
                problems.append(f"{rel}: requests leaving the machine: {visit.outside[:3]}")
    finally:
        visit.close()
    assert not problems, "\n".join(problems)

    # Every link inside the site leads to a file that exists, and its #anchor to an id there.
    broken = []
    for rel, info in found.items():
        for href in info["links"]:
            if not href.startswith(server):
                assert urlparse(href).scheme in ("https", "mailto"), f"{rel}: odd link {href}"
                continue
            target, fragment = urldefrag(href)
            path = unquote(urlparse(target).path).lstrip("/") or "index.html"
            if not (built / path).is_file():
                broken.append(f"{rel} -> {href} (no such file)")
            elif fragment and path.endswith(".html"):
                ids = found.get(path, {}).get("ids", [])
                # as a browser looks for the anchor: as written, then percent-decoded
                if fragment not in ids and unquote(fragment) not in ids:
                    broken.append(f"{rel} -> {href} (no such anchor)")
    assert not broken, "broken links:\n" + "\n".join(broken[:20])

    # Figures: every saved PNG output of a notebook is drawn on its page.
    for notebook in NOTEBOOKS:
        rel = notebook.relative_to(ROOT).with_suffix(".html").as_posix()
        figures = found[rel]["figures"]
        assert len(figures) == png_outputs(notebook), f"{rel}: {len(figures)} figures drawn"
        bad = [f for f in figures if not (f["complete"] and f["width"] > 0 and f["height"] > 0)]
        assert not bad, f"{rel}: figures not drawn: {bad[:3]}"

    # Math: every formula typeset, none left as TeX, no MathJax error.
    for rel, info in found.items():
        assert info["mathRendered"] >= info["mathSources"], f"{rel}: formulas left untypeset"
        assert not info["mathErrors"], f"{rel}: MathJax errors {info['mathErrors']}"
        assert not info["rawMath"], f"{rel}: TeX shown as text: {info['rawMath'][:3]}"
    lesson02 = found[EXPLORER_LESSON]
    assert lesson02["mathSources"] >= 50, "lesson 02's formulas were not found by MathJax"
    print(f"{len(pages)} pages read in the browser in {time.perf_counter() - started:.1f} s")


def test_no_page_is_wider_than_a_phone(built, server, browser):
    """At 390 px, wide things (code, outputs, tables, formulas) scroll inside their own box: the
    page itself never scrolls sideways."""
    visit = Visit(browser, server)
    visit.page.set_viewport_size({"width": 390, "height": 844})
    wide = []
    try:
        for rel in page_paths(built):
            visit.open(rel)
            width = visit.page.evaluate("document.documentElement.scrollWidth")
            if width > 390:
                wide.append(f"{rel}: {width} px")
    finally:
        visit.close()
    assert not wide, "pages wider than a 390 px phone:\n" + "\n".join(wide)


def test_on_a_phone_the_lesson_list_opens_and_closes(server, browser):
    """At 390 px the lessons hide behind the menu button; a tap on a link in the list, a tap
    outside it or Escape closes it again."""
    visit = Visit(browser, server)
    visit.page.set_viewport_size({"width": 390, "height": 844})
    shown = "() => getComputedStyle(document.querySelector('.site-sidebar')).display !== 'none'"
    try:
        visit.open("notebooks/02_self_attention.html")
        assert not visit.page.evaluate(shown), "the lesson list covers the page on a phone"
        for close in ("tap outside", "Escape", "tap a link"):
            visit.page.click(".nav-toggle")
            assert visit.page.evaluate(shown), "the menu button does not show the lessons"
            if close == "tap outside":
                visit.page.mouse.click(380, 800)
            elif close == "Escape":
                visit.page.keyboard.press("Escape")
            else:  # a same-page link, so that the page stays and the list's state can be read
                visit.page.evaluate(
                    "document.querySelector('.site-sidebar a.current')"
                    ".addEventListener('click', e => e.preventDefault())"
                )
                visit.page.click(".site-sidebar a.current")
            assert not visit.page.evaluate(shown), f"{close} leaves the lesson list open"
        assert not visit.errors, visit.errors
    finally:
        visit.close()


def saved_explorer() -> tuple[list[str], list]:
    """The tokens and weights of lesson 02's explorer, as saved in the notebook."""
    nb = nbformat.read(ROOT / "notebooks" / "02_self_attention.ipynb", as_version=4)
    models = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    state = next(m["state"] for m in models.values() if m["model_name"] == "AnyModel")
    return state["tokens"], state["weights"]


def test_lesson_02_explorer_answers_clicks_and_hovers_without_a_kernel(
    server, browser, screenshots
):
    from course_lib.widgets import AttentionExplorer

    tokens, weights = saved_explorer()
    python_side = AttentionExplorer(tokens, weights)  # what the lesson's Python would say
    visit = Visit(browser, server)
    page = visit.page
    try:
        visit.open(EXPLORER_LESSON)
        explorer = page.locator(".course-anywidget .attention-explorer")
        assert explorer.count() == 1, "the explorer was not drawn from its saved state"
        assert page.locator(".course-anywidget .course-widget-fallback").is_hidden()
        status = explorer.locator(".ae-status")
        weights_shown = explorer.locator(".ae-key .ae-weight")
        before, before_weights = status.inner_text(), weights_shown.all_inner_texts()
        assert before == python_side.select("it").status_text()  # as saved: "it", locked

        # A click locks another query: the page says what Python says for that query.
        target = tokens.index("street")
        explorer.locator(f'.ae-token[data-index="{target}"]').click()
        expected = python_side.select(target).status_text()
        page.wait_for_function(
            "([el, text]) => el.textContent === text",
            arg=[status.element_handle(), expected],
            timeout=10_000,
        )
        assert weights_shown.all_inner_texts() != before_weights
        assert weights_shown.all_inner_texts() == [f"{w:.2f}" for w in weights[0][target]]
        explorer.scroll_into_view_if_needed()
        page.screenshot(path=str(screenshots / "lesson02-explorer-after-click.png"))

        # A second click unlocks; a hover over another token previews it.
        explorer.locator(f'.ae-token[data-index="{target}"]').click()
        assert "(locked)" not in status.inner_text()
        other = tokens.index("tired")
        explorer.locator(f'.ae-token[data-index="{other}"]').hover()
        expected = python_side.select(other, lock=False).status_text()
        page.wait_for_function(
            "([el, text]) => el.textContent === text",
            arg=[status.element_handle(), expected],
            timeout=10_000,
        )
        assert not visit.errors, visit.errors
        assert not visit.outside, visit.outside
    finally:
        visit.close()


def test_lesson_09_progress_bars_show_their_final_state(server, browser, screenshots):
    nb = nbformat.read(ROOT / PROGRESS_LESSON.replace(".html", ".ipynb"), as_version=4)
    saved = [
        o["data"]["text/plain"]
        for c in nb.cells
        for o in c.get("outputs", [])
        if WIDGET_MIME in o.get("data", {})
    ]
    visit = Visit(browser, server)
    try:
        visit.open(PROGRESS_LESSON)
        bars = visit.page.locator(".course-progress")
        assert bars.count() == len(saved) > 0
        for i in range(bars.count()):
            bar = bars.nth(i)
            value, high = (float(bar.get_attribute(a)) for a in ("aria-valuenow", "aria-valuemax"))
            assert value == high > 0, f"bar {i} is not at its end: {value}/{high}"
            text = bar.inner_text()
            assert "100%" in text and f"{high:g}/{high:g}" in text, text
            width = bar.locator(".course-progress-fill").evaluate("e => e.style.width")
            assert width == "100%", width
        bars.first.scroll_into_view_if_needed()
        visit.page.screenshot(path=str(screenshots / "lesson09-training-progress.png"))
        visit.open("index.html")
        visit.page.screenshot(path=str(screenshots / "landing-page.png"))
    finally:
        visit.close()


def test_search_finds_a_section_and_leads_to_it(server, browser):
    visit = Visit(browser, server)
    page = visit.page
    try:
        visit.open("notebooks/00_introduction.html")
        page.fill("#search-input", "numerically stable softmax")
        first = page.locator("#search-results a.search-result").first
        first.wait_for(state="visible", timeout=10_000)
        where = first.locator(".search-where").inner_text()
        assert "Self-attention" in where and "softmax" in where.lower(), where
        href = first.get_attribute("href")
        first.click()
        page.wait_for_url(re.compile(r"02_self_attention\.html#"), timeout=10_000)
        anchor = urldefrag(page.url)[1]
        assert page.locator(f'[id="{unquote(anchor)}"]').count() == 1, href

        page.fill("#search-input", "qwertyzzz")
        page.locator("#search-results .search-none").wait_for(state="visible", timeout=10_000)
        assert not visit.errors, visit.errors
        assert not visit.outside, visit.outside
    finally:
        visit.close()


def test_the_site_records_the_search_index_of_every_page(built):
    text = (built / "assets" / "search-index.js").read_text()
    index = json.loads(text.removeprefix("window.COURSE_SEARCH_INDEX = ").rstrip(";\n"))
    pages = {entry["url"].partition("#")[0] for entry in index}
    assert pages == set(page_paths(built)), set(page_paths(built)) - pages
    setup_line = "makes `course_lib` importable here"
    assert not any(setup_line in e["text"] for e in index), "the setup cell is in the index"
    # search snippets are plain text: their formulas are made readable, not left as TeX
    assert not [e["url"] for e in index if "$" in e["text"]], "TeX left in the search snippets"


def test_search_snippets_read_formulas_as_text():
    plain = site_tool.plain_math
    assert plain(r"divided by $\sqrt{d_k}$ here") == "divided by √d_k here"
    assert plain(r"$M_{ij} = [\, j \le i \,]$") == "M_ij = [ j ≤ i ]"
    assert plain(r"$$\mathrm{softmax}(x)_i = \frac{e^{x_i}}{\sum_j e^{x_j}}$$") == (
        "softmax(x)_i = (e^x_i)/(Σ_j e^x_j)"
    )
    assert plain("no formula here") == "no formula here"
