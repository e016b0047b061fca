"""A Colab-faithful Python environment for the tests, built once and cached outside the repo.

Colab's default runtime (its published package list, googlecolab/backend-info, August 2026) has
Python 3.13 and torch 2.11 with the pins below. This environment holds exactly those pins, with
two stand-ins: the machine's own Python (3.11 in CI) for Colab's 3.13, and the cached CPU wheel
torch==2.13.0 for Colab's torch 2.11 (no other torch can be installed offline without pulling
gigabytes of CUDA). Packages Colab has but the pins do not name (traitlets, pyzmq, ...) resolve
to the newest releases that fit the pins. There is no course_lib in it: installing the course is
what the tests check.

    python tests/colab_env.py build    # build it (or find it ready); prints where and how long
    python tests/colab_env.py path     # where it is, if it is ready

The folder is ~/.cache/course-colab-sim/env-<hash of the pins and the Python> (the root can be
moved with COURSE_COLAB_CACHE). It is ready when its marker file records the same pins and the
same installed distributions as it holds now; anything else (a half-finished build, a package
changed by hand) is rebuilt. `.ci/run` builds it before the test command, so the timed suite
only reuses it; tests/test_colab.py builds it itself when it is missing.

The tests never install into it: `overlay()` makes a throwaway virtual environment that sees the
cached packages through a .pth file and receives whatever is installed (course_lib), so the
cached environment stays as Colab ships it and several test runs can share it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

# Colab's versions of the packages the course uses (googlecolab/backend-info, August 2026).
COLAB_PINS = [
    "numpy==2.1.3",
    "matplotlib==3.10.0",
    "tqdm==4.67.3",
    "ipywidgets==7.7.1",
    "widgetsnbextension==3.6.10",
    "anywidget==0.9.21",
    "ipykernel==6.17.1",
    "ipython==7.34.0",
    "jupyter_client==7.4.9",
    "nbclient==0.10.4",
    # Colab's Jupyter server, the classic Notebook 6.5 (its package lists carry notebook 6.5.x
    # with nbclassic; 6.5.7 is 6.5's last release, not checked against the August 2026 list). It
    # draws ipywidgets 7 models with widgetsnbextension 3.6: tests/test_colab_browser.py opens
    # the lessons in it. Unpinned, widgetsnbextension's `notebook>=4.4.1` resolved to Notebook 7
    # and JupyterLab 4, which Colab does not have.
    "notebook==6.5.7",
]
TORCH_PIN = "torch==2.13.0"  # stands in for Colab's torch 2.11: the CPU wheel cached here
LAYOUT = "1"  # bump when the way the environment is built changes

CACHE_ROOT = Path(os.environ.get("COURSE_COLAB_CACHE", Path.home() / ".cache" / "course-colab-sim"))
MARKER = "colab-env.json"


def _key() -> str:
    text = "\n".join([LAYOUT, sys.version.split()[0], TORCH_PIN, *COLAB_PINS])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def env_dir() -> Path:
    return CACHE_ROOT / f"env-{_key()}"


def venv_available() -> bool:
    """Whether this Python can make the environment (Debian's python3 may lack venv)."""
    try:
        import ensurepip  # noqa: F401
        import venv  # noqa: F401
    except ImportError:
        return False
    return True


def python_of(venv: Path) -> Path:
    return venv / "bin" / "python"


def clean_env(venv: Path | None = None) -> dict[str, str]:
    """Environment variables for a process of `venv`: nothing points at the repository or at
    another environment, pip does not byte-compile (Python compiles what it imports anyway)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV")
    }
    if venv is not None:
        env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])
        env["VIRTUAL_ENV"] = str(venv)
    env["PYTHONNOUSERSITE"] = "1"
    # pip reads PIP_COMPILE=false as --no-compile (PIP_NO_COMPILE=1 would mean the opposite).
    env["PIP_COMPILE"] = "false"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


# The first distribution of each name on sys.path: the one importlib.metadata.version() reports.
FREEZE = """
import importlib.metadata as m, json, re
found = {}
for d in m.distributions():
    found.setdefault(re.sub(r"[-_.]+", "-", d.metadata["Name"] or "").lower(), d.version)
print(json.dumps(found, sort_keys=True))
"""


def installed(python: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """{normalized name: version} of every distribution `python` sees."""
    # (run from the cache folder: `python -c` puts the current folder on sys.path, and a
    # checkout's course_lib.egg-info there would count as installed)
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(
        [str(python), "-c", FREEZE],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env=env or clean_env(),
        cwd=CACHE_ROOT,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{python} could not list its packages:\n{out.stderr[-2000:]}")
    return dict(json.loads(out.stdout))


def normalize(name: str) -> str:
    """A distribution name as PEP 503 compares them: jupyter_client -> jupyter-client."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins_hold(found: dict[str, str]) -> list[str]:
    """The pins that `found` does not satisfy (empty: all hold)."""
    wrong = []
    for pin in [*COLAB_PINS, TORCH_PIN]:
        name, version = pin.split("==")
        have = found.get(normalize(name))
        if have is None or have.split("+")[0] != version:
            wrong.append(f"{pin} (found {have})")
    return wrong


def ready(venv: Path | None = None) -> bool:
    """True when `venv` (default: this machine's cached one) is complete and unchanged."""
    venv = venv or env_dir()
    marker = venv / MARKER
    if not (marker.is_file() and python_of(venv).exists()):
        return False
    try:
        recorded = json.loads(marker.read_text())
        return recorded.get("key") == _key() and recorded.get("installed") == installed(
            python_of(venv)
        )
    except (OSError, ValueError, RuntimeError):
        return False


@contextlib.contextmanager
def _lock():
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    with open(CACHE_ROOT / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # one build at a time; readers wait for it
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(cmd: list[str], env: dict[str, str], timeout: float) -> None:
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        cmd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        cwd=CACHE_ROOT,
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd)} exited with {result.returncode}:\n"
            f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )


def build(log=print) -> tuple[Path, float, bool]:
    """The cached environment, built if it is not ready: (folder, seconds taken, built now)."""
    started = time.perf_counter()
    venv = env_dir()
    with _lock():
        if ready(venv):
            return venv, time.perf_counter() - started, False
        log(f"colab env: building {venv} (Colab's pins, {TORCH_PIN}; once, under a minute here)")
        if venv.exists():
            shutil.rmtree(venv)
        _run([sys.executable, "-m", "venv", str(venv)], clean_env(), timeout=300)
        env = clean_env(venv)
        _run(
            [str(python_of(venv)), "-m", "pip", "install", "--quiet", TORCH_PIN, *COLAB_PINS],
            env,
            timeout=1800,
        )
        found = installed(python_of(venv))
        wrong = _pins_hold(found)
        if wrong:
            raise RuntimeError(f"the Colab env does not hold Colab's pins: {wrong}")
        if normalize("course_lib") in found:
            raise RuntimeError("course_lib is installed in the Colab env before the test runs")
        (venv / MARKER).write_text(
            json.dumps(
                {"key": _key(), "pins": [TORCH_PIN, *COLAB_PINS], "installed": found}, indent=1
            )
        )
    return venv, time.perf_counter() - started, True


def overlay(base: Path, dest: Path) -> Path:
    """A fresh virtual environment at `dest` that imports everything `base` has (a .pth file
    adds base's site-packages after its own), and installs into itself: pip sees base's
    packages as installed and never removes them (they are outside its environment)."""
    _run([str(python_of(base)), "-m", "venv", "--without-pip", str(dest)], clean_env(), timeout=120)
    tag = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = dest / "lib" / tag / "site-packages"
    base_site = base / "lib" / tag / "site-packages"
    assert site.is_dir() and base_site.is_dir(), (site, base_site)
    (site / "_colab_base.pth").write_text(f"import site; site.addsitedir({str(base_site)!r})\n")
    return dest


def main(argv: list[str]) -> int:
    command = argv[1] if len(argv) > 1 else "build"
    if command == "build":
        try:
            venv, seconds, built = build()
        except Exception as error:  # noqa: BLE001  (CI reads the message, not a traceback)
            print(f"colab env: the build failed: {error}", file=sys.stderr)
            return 1
        print(f"colab env: {'built' if built else 'ready (cached)'} at {venv} in {seconds:.0f} s")
        return 0
    if command == "path":
        venv = env_dir()
        print(venv)
        return 0 if ready(venv) else 1
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
