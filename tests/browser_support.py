"""Helpers for the tests that run the course where learners open it (a real browser, Colab).

- `require(reason_if_missing)`: skip on a developer's machine, fail in CI (CI=true).
- `JupyterLab`: a JupyterLab server on 127.0.0.1 with a token and its own config, data,
  runtime, settings and workspaces folders (the lab extensions of ipywidgets and anywidget are
  still found in sys.prefix/share/jupyter/labextensions, as on a learner's machine).
- `widget_cells(path)`: the code cells whose committed outputs are Jupyter widgets (with or
  without tqdm progress bars).
"""

from __future__ import annotations

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


class JupyterLab:
    """`with JupyterLab(root_dir, home) as lab:` ... `lab.url("lab/tree/x.ipynb")`."""

    def __init__(self, root_dir: Path, home: Path, startup_timeout: float = 90.0) -> None:
        self.root_dir, self.home, self.startup_timeout = root_dir, home, startup_timeout
        self.port, self.token = free_port(), os.urandom(16).hex()
        self.proc: subprocess.Popen | None = None
        self.log_path = home / "jupyterlab.log"

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

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}?token={self.token}"

    def __enter__(self) -> JupyterLab:
        settings = self.home / "config" / "lab" / "user-settings"
        for name, values in LAB_SETTINGS.items():
            target = settings / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(values))
        for sub in ("data", "runtime", "ipython", "workspaces"):
            (self.home / sub).mkdir(parents=True, exist_ok=True)
        # The lessons' kernel ("python3") is this Python, whatever other kernels this user has.
        spec = self.home / "data" / "kernels" / "python3"
        spec.mkdir(parents=True, exist_ok=True)
        (spec / "kernel.json").write_text(
            json.dumps(
                {
                    "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                    "display_name": "Python 3 (ipykernel)",
                    "language": "python",
                    "metadata": {"debugger": True},
                }
            )
        )
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
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-root")
        self._log = open(self.log_path, "w")  # noqa: SIM115 (closed in __exit__)
        self.proc = subprocess.Popen(
            cmd, cwd=self.root_dir, env=self.env(), stdout=self._log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + self.startup_timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(self.url("api/status"), timeout=5) as response:
                    if response.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise RuntimeError(
                    f"JupyterLab did not answer within {self.startup_timeout} s:\n{self.log()}"
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
        self._log.close()


def copy_tree_for_lab(dst: Path) -> None:
    """The lesson folders the lab serves: a throwaway copy, so nothing touches the checkout."""
    for folder in ("notebooks", "exercises", "solutions"):
        (dst / folder).mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "README.md", dst / "README.md")
