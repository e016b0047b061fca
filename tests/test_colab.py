"""A lesson works on Colab: its first cell installs course_lib, then it runs top to bottom.

Colab is simulated by a throwaway virtual environment holding only what Colab provides for this
course (torch, numpy, matplotlib, ipywidgets, ipykernel, tqdm) and no course_lib: not the
checkout's, not an installed one. A copy of the lesson in a temporary folder outside the
repository runs in that environment's kernel with COURSE_LIB_SOURCE pointing at this checkout,
so the setup cell's `pip install` installs the package exactly as it does on Colab (from the
repository there). pip's cache is reused, so this takes about a minute or two, not a download.

Skips on a developer's machine without `venv`/`ensurepip`; in CI (CI=true) it must run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from browser_support import ROOT, require

LESSON = ROOT / "notebooks" / "02_self_attention.ipynb"  # light, and it has the widget
TORCH_PIN = "torch==2.13.0"  # the CPU wheel the README pins (cached on these machines)
COLAB_PACKAGES = [TORCH_PIN, "numpy", "matplotlib", "ipywidgets", "ipykernel", "tqdm"]
KERNEL_NAME = "colab-sim"


def _venv_available() -> bool:
    try:
        import ensurepip  # noqa: F401
        import venv  # noqa: F401
    except ImportError:
        return False
    return True


def _clean_env(venv: Path) -> dict[str, str]:
    """The environment of a Colab kernel: the venv first on PATH, nothing pointing at the repo."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])
    env["VIRTUAL_ENV"] = str(venv)
    env["PYTHONNOUSERSITE"] = "1"
    env["COURSE_DEVICE"] = "cpu"
    env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    # Byte-compiling torch's thousands of files is much of an install's CPU time, and Python
    # compiles what it imports anyway. (pip reads PIP_COMPILE=false as --no-compile; beware,
    # PIP_NO_COMPILE=1 would mean the opposite.)
    env["PIP_COMPILE"] = "false"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _run(cmd: list[str], env: dict[str, str], timeout: float, cwd: Path) -> str:
    result = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True,
                            timeout=timeout, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, (
        f"{' '.join(cmd)} exited with {result.returncode}:\n{result.stdout[-3000:]}"
        f"\n{result.stderr[-3000:]}"
    )
    return result.stdout


@pytest.fixture(scope="module")
def colab(tmp_path_factory):
    """(venv folder, its python, the kernel's env, kernelspec folder, seconds to build)."""
    require(_venv_available(), "this Python has no venv/ensurepip to build a throwaway env")
    started = time.perf_counter()
    base = tmp_path_factory.mktemp("colab")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120,
                   stdin=subprocess.DEVNULL)
    python = venv / "bin" / "python"
    env = _clean_env(venv)
    _run([str(python), "-m", "pip", "install", "--quiet", *COLAB_PACKAGES],
         env, timeout=600, cwd=base)
    kernels = base / "kernels" / KERNEL_NAME
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Colab simulation", "language": "python",
    }))
    yield venv, python, env, kernels.parent, time.perf_counter() - started
    # A gigabyte of torch takes a while to delete (20 s on a busy machine): not on our clock.
    subprocess.Popen(["rm", "-rf", str(base)], stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def test_the_colab_env_has_no_course_lib(colab):
    venv, python, env, _, _ = colab
    out = _run([str(python), "-c",
                "import importlib.util, sys; print(importlib.util.find_spec('course_lib'));"
                "print(sys.prefix)"], env, timeout=60, cwd=venv)
    spec, prefix = out.strip().splitlines()
    assert spec == "None", f"course_lib is importable in the simulated Colab env: {spec}"
    assert Path(prefix).resolve() == venv.resolve()


def test_lesson_installs_course_lib_and_runs_top_to_bottom(colab, tmp_path, pytestconfig):
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    venv, python, env, kernel_dirs, setup_seconds = colab
    content = tmp_path / "content"  # Colab's working folder; no course_lib beside or above it
    content.mkdir()
    notebook = content / LESSON.name
    shutil.copy(LESSON, notebook)
    assert ROOT not in notebook.resolve().parents
    assert not (content.parent / "course_lib").exists()

    nb = nbformat.read(notebook, as_version=4)
    assert nb.cells[1].cell_type == "code" and "COURSE_LIB_SOURCE" in nb.cells[1].source
    kernel_env = dict(env, COURSE_LIB_SOURCE=str(ROOT))
    km = KernelManager(kernel_name=KERNEL_NAME,
                       kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernel_dirs)]))
    started = time.perf_counter()
    client = NotebookClient(nb, km=km, timeout=600, record_timing=False,
                            resources={"metadata": {"path": str(content)}})
    client.execute(env=kernel_env, cwd=str(content))  # raises CellExecutionError on any error
    run_seconds = time.perf_counter() - started

    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "error"]
    assert not errors
    code = [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1))
    assert any(c.outputs for c in code[1:]), "the lesson ran but showed nothing"

    # The setup cell installed a real copy of the package into the venv (not the checkout).
    where = _run([str(python), "-c", "import course_lib; print(course_lib.__file__)"],
                 env, timeout=60, cwd=content).strip()
    assert Path(where).resolve().is_relative_to(venv.resolve()), where
    assert not Path(where).resolve().is_relative_to(ROOT), where

    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(f"\ncolab simulation: env built in {setup_seconds:.0f} s, {LESSON.name} installed "
              f"course_lib and ran in {run_seconds:.0f} s")
