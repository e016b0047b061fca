"""Helpers for the tests that run the course where learners open it (a real browser, Colab).

- `require(reason_if_missing)`: skip on a developer's machine, fail in CI (CI=true).
- `JupyterLab`: a JupyterLab server on 127.0.0.1 with a token and its own config, data,
  runtime, settings and workspaces folders (the lab extensions of ipywidgets and anywidget are
  still found in sys.prefix/share/jupyter/labextensions, as on a learner's machine).
- `ClassicNotebook`: the classic Notebook 6.5 server of another environment (the Colab
  stand-in, tests/colab_env.py), the same way: its nbextensions (widgetsnbextension's
  ipywidgets 7 manager, anywidget's) and their enabling come from that environment.
- `check_explorer(page, explorer, ...)`: an attention explorer answers a click and a hover, in
  the page and in the kernel, in either frontend.
- `widget_cells(path)`: the code cells whose committed outputs are Jupyter widgets (with or
  without tqdm progress bars).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
CHROMIUM = os.environ.get("COURSE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@contextlib.contextmanager
def chromium():
    """Debian's Chromium, headless and offline, driven by playwright (which never downloads a
    browser of its own): the one launch every browser test uses."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            browser.close()


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require(condition: bool, reason: str) -> None:
    """Skip with `reason` where `condition` is false, except in CI, where it is a failure."""
    if condition:
        return
    if in_ci():
        pytest.fail(
            f"CI=true and {reason} (.ci/run installs it; this test must not skip in CI)",
            pytrace=False,
        )
    pytest.skip(reason)


def browser_missing() -> str | None:
    """Why the browser test cannot run here, or None when it can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright Python package is not installed (pip install -e '.[test]')"
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        return f"no Chromium at {CHROMIUM} (Debian: apt-get install -y chromium)"
    return None


# The text/plain of a tqdm.auto bar (its widget's repr is the meter): "50%|#####     | 5/10 [..."
PROGRESS_BAR_TEXT = re.compile(r"\d+%\|.*\|\s*\d+/\d+|^\S*:?\s*\d+it \[")


def widget_cells(path: Path, progress_bars: bool = True) -> list[int]:
    """Indices (in nb.cells) of the code cells whose committed outputs include a widget;
    with progress_bars=False, tqdm progress bars do not count."""
    nb = nbformat.read(path, as_version=4)
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if WIDGET_MIME not in data:
                continue
            text = data.get("text/plain", "")
            text = "".join(text) if isinstance(text, list) else text
            if progress_bars or not PROGRESS_BAR_TEXT.search(text):
                found.append(i)
                break
    return found


def strip_outputs(src: Path, dst: Path) -> int:
    """Copy a notebook without outputs, counts or widget state; return its code-cell count."""
    nb = nbformat.read(src, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nb.metadata.pop("widgets", None)
    dst.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, dst)
    return sum(1 for c in nb.cells if c.cell_type == "code")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Settings a fresh learner would not see differently, chosen to keep the page quiet and stable:
# no news toast or update check (nothing leaves this machine), every cell in the DOM (no
# windowing, so every prompt can be read), and no autosave (the copy is thrown away anyway).
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
}


class _Server:
    """A Jupyter server process on 127.0.0.1 with a token; subclasses give its command line."""

    name = "Jupyter"

    def __init__(self, root_dir: Path, home: Path, startup_timeout: float = 90.0) -> None:
        self.root_dir, self.home, self.startup_timeout = root_dir, home, startup_timeout
        self.port, self.token = free_port(), os.urandom(16).hex()
        self.proc: subprocess.Popen | None = None
        self.log_path = home / f"{self.name.lower().replace(' ', '-')}.log"
        self._log = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}?token={self.token}"

    def _start(self, cmd: list[str], env: dict[str, str]) -> None:
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd = [*cmd, "--allow-root"]
        self._log = open(self.log_path, "w")  # noqa: SIM115 (closed in __exit__)
        self.proc = subprocess.Popen(
            cmd, cwd=self.root_dir, env=env, stdout=self._log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + self.startup_timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(self.url("api/status"), timeout=5) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise RuntimeError(
                    f"{self.name} did not answer within {self.startup_timeout} s:\n{self.log()}"
                )
            time.sleep(0.25)  # polling the server until it answers, not waiting for a result

    def log(self, tail: int = 4000) -> str:
        try:
            return self.log_path.read_text()[-tail:]
        except OSError:
            return ""

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # the server shuts its kernels down on SIGTERM
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self._log is not None:
            self._log.close()


def _write_kernelspec(data_dir: Path, python: Path | str) -> None:
    """The lessons' kernel ("python3") is `python`, whatever other kernels this user has."""
    spec = data_dir / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Python 3 (ipykernel)",
                "language": "python",
                "metadata": {"debugger": True},
            }
        )
    )


class JupyterLab(_Server):
    """`with JupyterLab(root_dir, home) as lab:` ... `lab.url("lab/tree/x.ipynb")`."""

    name = "JupyterLab"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            JUPYTER_CONFIG_DIR=str(self.home / "config"),
            JUPYTER_DATA_DIR=str(self.home / "data"),
            JUPYTER_RUNTIME_DIR=str(self.home / "runtime"),
            IPYTHONDIR=str(self.home / "ipython"),
            COURSE_DEVICE="cpu",
            MPLBACKEND="module://matplotlib_inline.backend_inline",
        )
        # Kernels import course_lib from this checkout even where it is not pip-installed.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        return env

    def __enter__(self) -> JupyterLab:
        settings = self.home / "config" / "lab" / "user-settings"
        for name, values in LAB_SETTINGS.items():
            target = settings / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(values))
        for sub in ("data", "runtime", "ipython", "workspaces"):
            (self.home / sub).mkdir(parents=True, exist_ok=True)
        _write_kernelspec(self.home / "data", sys.executable)
        cmd = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={self.root_dir}",
            "--LabApp.expose_app_in_browser=True",
            f"--LabApp.user_settings_dir={settings}",
            f"--LabApp.workspaces_dir={self.home / 'workspaces'}",
            "--LabApp.check_for_updates_class="
            "jupyterlab.handlers.announcements.NeverCheckForUpdate",
        ]
        self._start(cmd, self.env())
        return self


class ClassicNotebook(_Server):
    """The classic Notebook server (6.5) of the environment `venv`, serving `root_dir`:
    `with ClassicNotebook(root_dir, home, venv, base, env) as nb:` ... `nb.url("notebooks/x")`.

    `venv` runs the server and the kernel ("python3"), as one environment does on Colab; it
    may be an overlay (tests/colab_env.overlay) of `base`, whose share/jupyter (nbextensions,
    kernels) and etc/jupyter (which nbextensions are enabled) the server then reads too.
    `env` is the environment of both processes (colab_env.clean_env(venv) and what the lessons
    need); the server's own config, data and runtime folders are under `home`, so no setting
    of this user's (an nbextension disabled in ~/.jupyter) changes what the test sees.
    """

    name = "Classic Notebook"

    def __init__(
        self,
        root_dir: Path,
        home: Path,
        venv: Path,
        base: Path,
        env: dict[str, str],
        startup_timeout: float = 90.0,
    ) -> None:
        super().__init__(root_dir, home, startup_timeout)
        self.python = venv / "bin" / "python"
        self.base, self.base_env = base, env

    def env(self) -> dict[str, str]:
        env = dict(self.base_env)
        env.update(
            JUPYTER_CONFIG_DIR=str(self.home / "config"),
            JUPYTER_DATA_DIR=str(self.home / "data"),
            JUPYTER_RUNTIME_DIR=str(self.home / "runtime"),
            IPYTHONDIR=str(self.home / "ipython"),
            JUPYTER_PATH=str(self.base / "share" / "jupyter"),
            JUPYTER_CONFIG_PATH=str(self.base / "etc" / "jupyter"),
        )
        return env

    def __enter__(self) -> ClassicNotebook:
        for sub in ("config", "data", "runtime", "ipython"):
            (self.home / sub).mkdir(parents=True, exist_ok=True)
        _write_kernelspec(self.home / "data", self.python)
        cmd = [
            str(self.python),
            "-m",
            "notebook",
            "--no-browser",
            "--NotebookApp.ip=127.0.0.1",
            f"--NotebookApp.port={self.port}",
            "--NotebookApp.port_retries=0",
            f"--NotebookApp.token={self.token}",
            f"--NotebookApp.notebook_dir={self.root_dir}",
        ]
        self._start(cmd, self.env())
        return self


def copy_tree_for_lab(dst: Path) -> None:
    """The lesson folders the lab serves: a throwaway copy, so nothing touches the checkout."""
    for folder in ("notebooks", "exercises", "solutions"):
        (dst / folder).mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "README.md", dst / "README.md")


# What the kernel holds of every attention explorer: [[selected, locked], ...] as JSON.
EXPLORER_STATE = (
    "import json as _json\n"
    "from course_lib.widgets import AttentionExplorer as _Explorer\n"
    "print(_json.dumps([[w.selected, w.locked] for w in list(get_ipython().user_ns.values())"
    " if isinstance(w, _Explorer)]))"
)


def check_explorer(page, explorer, shot_prefix: Path, run_in_kernel) -> None:
    """The attention explorer `explorer` (a locator) answers a click (lock) and a hover
    (preview): its status line and key weights change, and the kernel's synced state follows.
    `run_in_kernel(code)` runs code in the page's kernel and returns what it printed."""
    explorer.scroll_into_view_if_needed()
    page.screenshot(path=f"{shot_prefix}-in-page.png")  # the explorer as it sits in the lesson
    explorer.screenshot(path=f"{shot_prefix}-before.png")
    status = explorer.locator(".ae-status")
    tokens = explorer.locator(".ae-token[data-index]")
    weights = explorer.locator(".ae-key .ae-weight")
    assert tokens.count() >= 2, "the explorer shows fewer than two query tokens"
    before_status, before_weights = status.inner_text(), weights.all_inner_texts()
    selected = explorer.locator(".ae-token.ae-selected")
    current = selected.first.get_attribute("data-index") if selected.count() else None
    indices = [tokens.nth(i).get_attribute("data-index") for i in range(tokens.count())]
    target = next(i for i in indices if i != current)
    chip = explorer.locator(f'.ae-token[data-index="{target}"]')
    word = chip.inner_text()

    # A click locks another query: the status names it, the key weights change.
    chip.click()
    expected = f'query {target} "{word}" (locked)'
    page.wait_for_function(
        "([el, text]) => el.textContent.includes(text)",
        arg=[status.element_handle(), expected],
        timeout=10_000,
    )
    after_status, after_weights = status.inner_text(), weights.all_inner_texts()
    assert after_status != before_status and expected in after_status, after_status
    assert after_weights != before_weights, "the key weights did not change with the query"
    explorer.screenshot(path=f"{shot_prefix}-after-click.png")
    synced = json.loads(run_in_kernel(EXPLORER_STATE).strip().splitlines()[-1])
    assert [int(target), True] in synced, f"the kernel did not receive the click: {synced}"

    # A second click unlocks; hovering over a third token previews it (not locked).
    chip.click()
    page.wait_for_function(
        "([el, text]) => !el.textContent.includes(text)",
        arg=[status.element_handle(), "(locked)"],
        timeout=10_000,
    )
    other = next(i for i in indices if i != target)
    hover = explorer.locator(f'.ae-token[data-index="{other}"]')
    hover_word = hover.inner_text()
    hover.hover()
    preview = f'query {other} "{hover_word}" attends to'
    page.wait_for_function(
        "([el, text]) => el.textContent.includes(text)",
        arg=[status.element_handle(), preview],
        timeout=10_000,
    )
    explorer.screenshot(path=f"{shot_prefix}-after-hover.png")
    synced = json.loads(run_in_kernel(EXPLORER_STATE).strip().splitlines()[-1])
    assert [int(other), False] in synced, f"the kernel did not receive the hover: {synced}"
