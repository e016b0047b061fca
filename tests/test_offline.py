"""Nothing downloads at run time: the suite runs every notebook with the network blocked.

The guard (tests/offline/sitecustomize.py, put on PYTHONPATH by conftest.py) is inherited by
every process the suite starts. These tests show that it really blocks a download, in a plain
process and in a Jupyter kernel like the ones nbval runs the notebooks in, and that loopback,
which the kernels themselves need, still works.
"""

from __future__ import annotations

import os
import subprocess
import sys

import nbformat
import pytest
from helpers import ROOT

DOWNLOAD = """
import socket, urllib.request
try:
    urllib.request.urlopen("https://download.pytorch.org/models/resnet18.pth", timeout=5)
except OSError as e:  # urllib wraps the guard's error in a URLError
    print("blocked:", getattr(e, "reason", e))
try:
    socket.create_connection(("93.184.215.14", 80), timeout=5)
except socket.OfflineError as e:
    print("blocked:", e)
"""

LOOPBACK = """
import http.server, threading, urllib.request
server = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
threading.Thread(target=server.serve_forever, daemon=True).start()
for host in ("127.0.0.1", "localhost"):
    with urllib.request.urlopen(f"http://{host}:{server.server_port}/") as reply:
        print(host, reply.status)
server.shutdown()
"""


def test_the_suite_puts_the_guard_on_every_child_process_path():
    first = os.environ["PYTHONPATH"].split(os.pathsep)[0]
    assert first == str(ROOT / "tests" / "offline")
    assert os.environ.get("COURSE_OFFLINE_GUARD") == "1"


def _python(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT / "tests"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_a_download_fails_at_once_in_a_child_process():
    out = _python(DOWNLOAD).splitlines()
    assert len(out) == 2, out
    assert "network access blocked: looking up 'download.pytorch.org'" in out[0]
    assert "network access blocked: connecting to '93.184.215.14'" in out[1]


def test_loopback_still_works_under_the_guard():
    assert _python(LOOPBACK).split() == ["127.0.0.1", "200", "localhost", "200"]


def test_a_notebook_kernel_cannot_download(tmp_path):
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.v4.new_notebook()
    nb.cells.append(
        nbformat.v4.new_code_cell(
            "import urllib.request\nurllib.request.urlopen('https://pypi.org/simple/')"
        )
    )
    client = NotebookClient(
        nb,
        timeout=60,
        startup_timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    with pytest.raises(CellExecutionError, match="network access blocked: looking up 'pypi.org'"):
        client.execute()
