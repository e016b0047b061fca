"""Colab's widgets in a real browser: the attention explorer, ipywidgets controls and a tqdm
progress bar drawn by a frontend for ipywidgets 7, with the Colab stand-in's kernel.

tests/test_colab.py runs the lessons in an environment holding Colab's versions
(tests/colab_env.py: ipywidgets 7.7.1, widgetsnbextension 3.6.10, anywidget 0.9.21), but no
browser draws their widgets there, and JupyterLab 4 (tests/test_browser.py) cannot draw
ipywidgets 7 models. Colab's own frontend is not available offline; the stand-in is the server
Colab's runtime itself ships, the classic Notebook 6.5 (notebook 6.5.7, a Colab pin; it serves
nbclassic's page), whose widget manager is widgetsnbextension 3.6's, the JavaScript half of
ipywidgets 7, with anywidget's nbextension beside it. The packages enable both themselves
(etc/jupyter/nbconfig/notebook.d); nothing is built or downloaded.

One classic Notebook server runs from a throwaway overlay of the cached environment (the
kernel is that environment's Python: ipywidgets 7.7.1 and ipykernel 6.17.1, asked of the kernel
itself), and headless Chromium (Debian's, driven by playwright) opens two notebooks in it,
each run all from a fresh kernel once the page's widget manager is up:
- lesson 02 without outputs: its setup cell installs course_lib from this checkout, as on
  Colab; every prompt numbered, no traceback; the attention explorer is drawn as a widget and
  answers a click and a hover, in the page and in the kernel (the JupyterLab test's check);
- a three-cell notebook: the setup cell, a tqdm.auto progress bar of 50 steps, which ends
  complete in the page (100%, 50/50, the bar full and in the success style), and a Dropdown,
  a slider and an HTML widget: choosing another query in the Dropdown reaches the kernel, whose
  callback changes what the HTML widget shows.
In both, every widget output holds a drawn view with a size, every model the kernel made was
created by the frontend (ipywidgets 7's @jupyter-widgets/controls 1.5.0, or anywidget), and no
"Error displaying widget", "Loading widget...", "model not found", widget-as-text fallback or
widget error in the console is there. With the widgets nbextension disabled the tests fail at
once, saying so; with anywidget's disabled, lesson 02's fails on the explorer's empty output.

Not checked: an ipywidgets.Output (so not course_lib's attention_dropdown, which draws into
one). widgetsnbextension 3.6.10 cannot create its OutputModel in this frontend ("Could not
create a model", "n._deserialize_state is not a function": its classic OutputModel is made with
Backbone's extend from an ES-class base model, whose static methods extend does not copy), so
the Output and any box holding it stay empty. Colab draws Output with its own widget manager.

Screenshots go to a temporary folder; their paths are printed. Skips on a developer's machine
without Chromium, playwright or venv; in CI (CI=true) it fails instead. The first run builds the
cached Colab environment when it is missing (about 30 s).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import colab_env
import nbformat
import pytest
from browser_support import (
    ROOT,
    WIDGET_MIME,
    ClassicNotebook,
    browser_missing,
    check_explorer,
    chromium,
    require,
    strip_outputs,
)

from tools.notebooks import SETUP_SOURCE

LESSON_02 = ROOT / "notebooks" / "02_self_attention.ipynb"
SETUP_LINE = "installed course_lib; the packages already here are unchanged"
# What the page must run on: Colab's frontend stand-in and Colab's widget packages.
FRONTEND = {"notebook": "6.5.7", "widgetsnbextension": "3.6.10", "anywidget": "0.9.21"}
KERNEL_VERSIONS = (
    "import ipywidgets, ipykernel; print(ipywidgets.__version__, ipykernel.__version__)"
)
RUN_TIMEOUT_MS = 600_000  # lesson 02 with the setup cell's install; about a minute when idle
PAGE_TIMEOUT_MS = 120_000

# How far the page has got: the notebook, its kernel, and ipywidgets 7's widget manager (the
# jupyter-js-widgets nbextension registers the "jupyter.widget" comm target when it loads).
PAGE_JS = """
() => {
  const J = window.Jupyter, nb = J && J.notebook, k = nb && nb.kernel;
  const defined = (window.requirejs && requirejs.s.contexts._.defined) || {};
  return {
    version: J ? J.version : null,
    loaded: !!(nb && nb._fully_loaded),
    connected: !!(k && k.is_connected && k.is_connected()),
    manager: !!(k && k.widget_manager),
    target: !!(k && k.comm_manager && k.comm_manager.targets["jupyter.widget"]),
    enabled: nb && nb.config && nb.config.data ? nb.config.data.load_extensions || {} : null,
    nbextensions: Object.keys(defined).filter((name) => name.startsWith("nbextensions/")),
  };
}
"""

STATE_JS = """
() => {
  const prompts = [], errors = [];
  Jupyter.notebook.get_cells().forEach((cell, i) => {
    if (cell.cell_type !== "code") return;
    const n = cell.input_prompt_number;
    if (cell.get_text().trim()) prompts.push(n === null || n === undefined ? "" : String(n));
    cell.output_area.outputs.forEach((out) => {
      if (out.output_type === "error") {
        errors.push({cell: i, ename: out.ename, evalue: out.evalue,
                     traceback: (out.traceback || []).join("\\n").slice(-3000)});
      }
    });
  });
  const icon = document.querySelector("#kernel_indicator_icon");
  return {idle: !!(icon && icon.classList.contains("kernel_idle_icon")), prompts, errors};
}
"""

# Finished: the kernel is idle and every prompt shows a number (or a cell failed, which stops
# run-all: then the test reports the error instead of waiting for the timeout).
DONE_JS = f"""
(expected) => {{
  const s = ({STATE_JS})();
  if (!s.idle || s.prompts.length !== expected || s.prompts.some((p) => p === "*")) return false;
  return s.errors.length > 0 || s.prompts.every((p) => /^\\d+$/.test(p));
}}
"""

# Every output of every cell: the mime types the model holds, the node the notebook drew it in
# (a widget's is an output_subarea with the class jupyter-widgets-view), the widget views in
# it, and the text shown.
OUTPUTS_JS = """
() => {
  const found = [];
  Jupyter.notebook.get_cells().forEach((cell, i) => {
    if (cell.cell_type !== "code") return;
    const areas = Array.from(cell.output_area.element[0].children)
      .filter((c) => c.classList.contains("output_area"));
    cell.output_area.outputs.forEach((out, j) => {
      const node = areas[j] && areas[j].querySelector(".output_subarea");
      const box = node ? node.getBoundingClientRect() : {width: 0, height: 0};
      found.push({
        cell: i, index: j, type: out.output_type,
        mimes: Object.keys(out.data || {}),
        classes: node ? node.className : null,
        // ipywidgets 7's views are Phosphor widgets (p-Widget), anywidget's Lumino ones
        views: node ? node.querySelectorAll(".jupyter-widgets, .p-Widget, .lm-Widget").length : 0,
        text: node ? node.innerText.slice(0, 400) : "",
        html: node ? node.innerHTML.slice(0, 300) : "",
        width: box.width, height: box.height,
      });
    });
  });
  return found;
}
"""

# Every widget output holds a drawn view.
WIDGETS_DRAWN_JS = f"""
() => ({OUTPUTS_JS})().filter((o) => o.mimes.includes("{WIDGET_MIME}")).every((o) => o.views > 0)
"""

# The frontend's widget models: [module, module version, model name, error], the error (a
# string) where the frontend could not create the model.
MODELS_JS = """
async () => {
  const manager = Jupyter.notebook.kernel.widget_manager;
  const found = [];
  for (const [id, promise] of Object.entries(manager._models)) {
    try {
      const m = await promise;
      found.push([m.get("_model_module"), m.get("_model_module_version"), m.get("_model_name"),
                  null]);
    } catch (error) {
      found.push([null, null, id, String(error)]);
    }
  }
  return found;
}
"""


# Runs code in the notebook's kernel (outside any cell) and returns what it printed.
KERNEL_JS = """
(code) => new Promise((resolve) => {
  let out = "";
  Jupyter.notebook.kernel.execute(code, {iopub: {
    output: (msg) => {
      if (msg.msg_type === "stream") out += msg.content.text;
      if (msg.msg_type === "error") out += msg.content.ename + ": " + msg.content.evalue;
    },
    status: (msg) => { if (msg.content.execution_state === "idle") resolve(out); },
  }}, {silent: false, store_history: false});
})
"""

# What a learner must never see where a widget should be.
BROKEN_WIDGET_TEXT = re.compile(
    r"Error displaying widget|Error rendering Jupyter widget|Loading widget|model not found"
    r"|A Jupyter widget could not be displayed|Could not create (a )?view"
)
FALLBACK_TEXT = re.compile(  # a widget shown as its repr: the widget manager did not draw it
    r"^\s*(\w*(Box|Widget|Explorer|Dropdown|Output|Progress|Slider)\w*\(|Error displaying widget)"
)


def _say(pytestconfig, text: str) -> None:
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(text)


@pytest.fixture(scope="module")
def colab_notebook(tmp_path_factory, pytestconfig):
    """The classic Notebook server of a throwaway overlay of the cached Colab environment."""
    reason = browser_missing()
    require(reason is None, reason or "")
    require(
        colab_env.venv_available(), "this Python has no venv/ensurepip to build a throwaway env"
    )
    base, seconds, built = colab_env.build(log=lambda text: _say(pytestconfig, "\n" + text))
    _say(pytestconfig, f"\ncolab env {'built' if built else 'found ready'} in {seconds:.1f} s")
    root = tmp_path_factory.mktemp("colab-browser")
    venv = colab_env.overlay(base, root / "venv")
    content = root / "content"  # Colab's working folder: no course_lib beside or above
    content.mkdir()
    env = colab_env.clean_env(venv)
    env.update(
        COURSE_DEVICE="cpu",
        MPLBACKEND="module://matplotlib_inline.backend_inline",
        COURSE_LIB_SOURCE=str(ROOT),  # the setup cell installs the course from this checkout
    )
    found = colab_env.installed(colab_env.python_of(venv), env)
    wrong = {n: found.get(n) for n, v in FRONTEND.items() if found.get(n) != v}
    assert not wrong, f"the Colab env's frontend packages are not {FRONTEND}: {wrong}"
    with ClassicNotebook(content, root / "home", venv, base, env) as server:
        # Notebook 6.5 serves the classic page from nbclassic's files (the page's
        # Jupyter.version is nbclassic's), as it does on Colab's runtime.
        running = f"Jupyter Notebook {FRONTEND['notebook']} is running"
        assert running in server.log(tail=20_000), f"not {running!r}:\n{server.log()}"
        yield server


@pytest.fixture(scope="module")
def browser(colab_notebook):
    with chromium() as browser:
        yield browser


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory, pytestconfig):
    folder = tmp_path_factory.mktemp("screenshots")
    yield folder
    shots = sorted(folder.glob("*.png"))
    _say(pytestconfig, "\ncolab browser test screenshots:\n" + "\n".join(f"  {p}" for p in shots))


def in_kernel(page, code: str) -> str:
    return page.evaluate(KERNEL_JS, code)


def open_notebook(browser, server: ClassicNotebook, name: str):
    """A page on `name` (under the server's root) whose kernel is up and whose widget manager
    (ipywidgets 7's, from widgetsnbextension) is ready; returns (page, console errors)."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(server.url(f"notebooks/{name}"), wait_until="domcontentloaded")
    page.wait_for_function(
        f"() => {{ const s = ({PAGE_JS})(); return s.loaded && s.connected; }}",
        timeout=PAGE_TIMEOUT_MS,
    )
    try:
        page.wait_for_function(f"() => ({PAGE_JS})().target", timeout=30_000)
    except Exception:  # playwright's TimeoutError: say what the page has instead
        state = page.evaluate(PAGE_JS)
        raise AssertionError(
            f"{name}: the classic Notebook page has no ipywidgets widget manager 30 s after its "
            "kernel connected: the jupyter-js-widgets nbextension (widgetsnbextension) did not "
            f"load. Enabled in the page's config: {state['enabled']}; nbextensions loaded: "
            f"{state['nbextensions']}; console errors: {errors[:5]}"
        ) from None
    # The kernel side is ipywidgets 7 (Colab's), whatever the frontend: asked of the kernel.
    versions = in_kernel(page, KERNEL_VERSIONS).split()
    assert versions == ["7.7.1", "6.17.1"], (
        f"the kernel's ipywidgets and ipykernel are {versions}, not Colab's 7.7.1 and 6.17.1"
    )
    return page, errors


def run_all(page, name: str, expected: int, screenshots: Path, console: list[str]):
    """Run all cells, check prompts, errors and widgets; return (the outputs as drawn, the
    frontend's widget models, see MODELS_JS)."""
    page.evaluate("() => { Jupyter.notebook.execute_all_cells(); }")
    page.wait_for_function(DONE_JS, arg=expected, timeout=RUN_TIMEOUT_MS, polling=250)
    state = page.evaluate(STATE_JS)
    assert not state["errors"], f"{name} raised in the classic Notebook: " + "\n".join(
        f"cell {e['cell']}: {e['ename']}: {e['evalue']}\n{e['traceback']}" for e in state["errors"]
    )
    assert state["prompts"] == [str(n) for n in range(1, expected + 1)], state["prompts"]
    # A widget's view is made after its cell has finished (the manager loads its classes
    # first): give the views a few seconds, then check what is drawn.
    try:
        page.wait_for_function(WIDGETS_DRAWN_JS, timeout=20_000, polling=250)
    except Exception:  # playwright's TimeoutError: the checks below say which one and why
        pass
    page.screenshot(path=str(screenshots / f"{Path(name).stem}-after-run-all.png"))
    outputs = page.evaluate(OUTPUTS_JS)
    models = page.evaluate(MODELS_JS)
    assert "Traceback (most recent call last)" not in "\n".join(o["text"] for o in outputs)

    failed = [m for m in models if m[3]]
    for o in [o for o in outputs if WIDGET_MIME in o["mimes"]]:
        where = f"{name} cell {o['cell']} output {o['index']}"
        assert "jupyter-widgets-view" in (o["classes"] or ""), (
            f"{where}: drawn as {o['classes']} ({o['text'][:200]!r}), not as a widget: the "
            "page has no renderer for widgets (is the widgetsnbextension nbextension enabled?)"
        )
        assert o["views"] > 0, (
            f"{where}: the widget's output holds no widget view ({o['html'][:200]!r}): its model "
            f"or its JavaScript module did not load. Models not created: {failed[:5]}; "
            f"console errors: {console[:5]}"
        )
        assert o["height"] > 0 and o["width"] > 0, f"{where}: the widget has no size"
    assert not failed, f"{name}: models the frontend could not create: {failed}"
    for o in outputs:
        where = f"{name} cell {o['cell']} output {o['index']}"
        assert not BROKEN_WIDGET_TEXT.search(o["text"]), f"{where}: {o['text'][:300]!r}"
        assert not FALLBACK_TEXT.match(o["text"]), f"{where}: a widget shown as text: {o['text']!r}"
    page_text = page.inner_text("#notebook-container")
    broken = BROKEN_WIDGET_TEXT.search(page_text)
    assert not broken, f"{name}: the page shows {broken.group(0)!r}"
    no_widget_errors(name, console)
    return outputs, models


def no_widget_errors(name: str, console: list[str]) -> None:
    # (The one console error expected is the Colab badge's image: this machine is offline.)
    widget_errors = [m for m in console if "widget" in m.lower()]
    assert not widget_errors, f"{name}: widget errors in the console: {widget_errors[:5]}"


def shut_down(page) -> None:
    """Stop the notebook's kernel, so that the next notebook has the CPU to itself."""
    page.evaluate("() => new Promise((done) => Jupyter.notebook.session.delete(done, done))")


def code_cells(nb) -> int:
    return sum(1 for c in nb.cells if c.cell_type == "code" and c.source.strip())


def test_lesson_02_explorer_works_in_classic_notebook_with_colabs_kernel(
    colab_notebook, browser, screenshots, pytestconfig
):
    started = time.perf_counter()
    server = colab_notebook
    name = LESSON_02.name
    expected = strip_outputs(LESSON_02, server.root_dir / name)
    before = colab_env.installed(server.python, server.env())
    page, console_errors = open_notebook(browser, server, name)
    try:
        outputs, models = run_all(page, name, expected, screenshots, console_errors)
        # The setup cell installed course_lib from this checkout, as on Colab (unless the
        # other test here installed it first).
        setup = "".join(o["text"] for o in outputs if o["cell"] == 1)
        assert setup.strip() == ("" if "course-lib" in before else SETUP_LINE), setup

        widgets = [o for o in outputs if WIDGET_MIME in o["mimes"]]
        assert widgets, f"{name} showed no widget (the attention explorer)"
        assert any(m[0] == "anywidget" for m in models), f"no anywidget model: {models}"
        explorers = page.locator(".output_subarea.jupyter-widgets-view .attention-explorer")
        assert explorers.count() >= 1, f"{name}: no attention explorer drawn on the page"
        for e in range(explorers.count()):
            check_explorer(
                page,
                explorers.nth(e),
                screenshots / f"{LESSON_02.stem}-classic-explorer{e}",
                lambda code: in_kernel(page, code),
            )
        no_widget_errors(name, console_errors)
        shut_down(page)
    except Exception:
        page.screenshot(path=str(screenshots / f"{LESSON_02.stem}-classic-failure.png"))
        raise
    finally:
        page.close()
    _say(
        pytestconfig,
        f"\ncolab browser: {name} ran and its explorer answered in the classic Notebook in "
        f"{time.perf_counter() - started:.0f} s",
    )


# What the training lessons do (a tqdm.auto bar) and plain ipywidgets 7 controls whose
# callbacks run in the kernel, in a few seconds; the setup cell first, as in every notebook.
# (Not an ipywidgets.Output, so not course_lib's attention_dropdown: widgetsnbextension
# 3.6.10's OutputModel cannot be created in the classic Notebook, see the module docstring.)
CHECK_CELLS = [
    SETUP_SOURCE,
    "from tqdm.auto import tqdm\n\n"
    "total = 0\nfor step in tqdm(range(50), desc='training'):\n    total += step\nprint(total)",
    """\
import ipywidgets as widgets

tokens = ["the", "cat", "sat", "down"]
query = widgets.Dropdown(options=[(t, i) for i, t in enumerate(tokens)], description="query")
top_k = widgets.IntSlider(value=2, min=1, max=4, description="top k")
shown = widgets.HTML()


def show(_change=None):
    shown.value = f"<b>query {query.value}</b>: {tokens[query.value]} (top {top_k.value})"


query.observe(show, names="value")
top_k.observe(show, names="value")
show()
widgets.VBox([query, top_k, shown])""",
]


def test_progress_bar_and_controls_render_in_classic_notebook(
    colab_notebook, browser, screenshots, pytestconfig
):
    started = time.perf_counter()
    server = colab_notebook
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in CHECK_CELLS]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }
    name = "colab_widgets_check.ipynb"
    nbformat.write(nb, server.root_dir / name)
    page, console_errors = open_notebook(browser, server, name)
    try:
        outputs, models = run_all(page, name, code_cells(nb), screenshots, console_errors)
        controls = {m[2] for m in models if m[:2] == ["@jupyter-widgets/controls", "1.5.0"]}
        wanted = {"FloatProgressModel", "HBoxModel", "DropdownModel", "IntSliderModel", "HTMLModel"}
        assert wanted <= controls, (
            f"the frontend's models are not ipywidgets 7's (@jupyter-widgets/controls 1.5.0): "
            f"{models}"
        )

        # The progress bar: a widget, complete (100%, 50/50, the success style), and the loop ran.
        bars = [o for o in outputs if o["cell"] == 1 and WIDGET_MIME in o["mimes"]]
        assert len(bars) == 1, f"tqdm.auto made no widget in the classic Notebook: {outputs}"
        assert "100%" in bars[0]["text"] and "50/50" in bars[0]["text"], bars[0]["text"]
        assert any(o["cell"] == 1 and o["text"].strip() == "1225" for o in outputs), outputs
        bar = page.locator(".jupyter-widgets-view .widget-hprogress .progress-bar")
        assert bar.count() == 1, "no progress bar element in the output"
        assert "progress-bar-success" in (bar.get_attribute("class") or ""), (
            f"the bar did not end in the success style: {bar.get_attribute('class')}"
        )
        bar_width = bar.evaluate("(el) => el.getBoundingClientRect().width")
        track_width = bar.evaluate("(el) => el.parentElement.getBoundingClientRect().width")
        assert bar_width > 0 and abs(bar_width - track_width) < 2, (bar_width, track_width)
        page.locator(".jupyter-widgets-view .widget-hbox").first.screenshot(
            path=str(screenshots / "colab-progress-bar.png")
        )

        # The controls: a Dropdown and a slider drawn as such; choosing another query in the
        # Dropdown reaches the kernel, whose callback changes what the HTML widget shows.
        box = page.locator(".jupyter-widgets-view .widget-vbox").first
        select = box.locator(".widget-dropdown select")
        assert select.count() == 1, "no Dropdown drawn"
        assert box.locator(".widget-slider").count() == 1, "no slider drawn"
        shown = box.locator(".widget-html")
        assert shown.inner_text().strip() == "query 0: the (top 2)", shown.inner_text()
        box.screenshot(path=str(screenshots / "colab-controls-before.png"))
        select.select_option(label="sat")
        page.wait_for_function(
            "(el) => el.innerText.includes('query 2: sat')",
            arg=shown.element_handle(),
            timeout=20_000,
        )
        box.screenshot(path=str(screenshots / "colab-controls-after.png"))
        value = in_kernel(page, "print(query.value)").strip()
        assert value == "2", f"the kernel did not receive the Dropdown's choice: {value!r}"
        no_widget_errors(name, console_errors)
        shut_down(page)
    except Exception:
        page.screenshot(path=str(screenshots / "colab-widgets-check-failure.png"))
        raise
    finally:
        page.close()
    _say(
        pytestconfig,
        f"\ncolab browser: a progress bar and ipywidgets controls drawn and answering in "
        f"{time.perf_counter() - started:.0f} s",
    )
