"""Run every lesson and solution notebook on a GPU, and compare what they print with the CPU's.

    python tools/gpu_notebooks.py run OUT [--only TEXT] [--jobs 8]
    python tools/gpu_notebooks.py compare OUT

A maintainer's check of the README's "a GPU is used when there is one": `run`, on a machine
with a CUDA GPU, executes each notebook from a fresh kernel with COURSE_DEVICE unset (so the
setup cell picks `cuda`), after a first cell that records the device and PyTorch's version,
and writes the executed copies under OUT/nbs/ and one line per notebook in OUT/results.json.
`compare`, anywhere, reads them beside the committed notebooks and prints, per notebook, the
cells whose text output differs: first those the tests compare (a difference there is a
defect: CI would fail on that machine), then the `nbval-ignore-output` cells (trained numbers
and timings, which are allowed to differ), with their first differing lines. Progress bars and
figures' text are left out of the comparison.
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import json
import os
import re
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
PROBE = (
    "import torch as _torch, course_lib.runtime as _runtime; "
    "print('DEVICE', _runtime.get_device(), _torch.__version__)"
)


def notebooks(only: str | None) -> list[Path]:
    paths = sorted(ROOT.glob("notebooks/[0-9]*.ipynb")) + sorted(
        ROOT.glob("solutions/[0-9]*.ipynb")
    )
    return [p for p in paths if only is None or only in str(p)]


def run_one(path: Path, out: Path) -> dict:
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(PROBE))
    start, error = time.perf_counter(), None
    client = NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    try:
        client.execute()
    except Exception as e:  # noqa: BLE001  (report any failure and go on with the others)
        error = f"{type(e).__name__}: {str(e)[-1500:]}"
    seconds = time.perf_counter() - start
    probe = "".join(o.get("text", "") for o in nb.cells[0].get("outputs", [])).strip()
    rel = path.relative_to(ROOT)
    (out / "nbs" / rel.parent).mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out / "nbs" / rel)
    return {"notebook": str(rel), "seconds": round(seconds, 1), "error": error, "device": probe}


def cmd_run(out: Path, only: str | None, jobs: int) -> None:
    os.environ.pop("COURSE_DEVICE", None)
    results = []
    with futures.ThreadPoolExecutor(jobs) as pool:
        for r in pool.map(lambda p: run_one(p, out), notebooks(only)):
            print(
                f"{'ok   ' if r['error'] is None else 'ERROR'} {r['seconds']:6.1f} s  "
                f"{r['notebook']}  ({r['device']})",
                flush=True,
            )
            if r["error"]:
                print("      " + r["error"].replace("\n", "\n      "), flush=True)
            results.append(r)
    (out / "results.json").write_text(json.dumps(results, indent=1))


def _text(cell) -> list[str]:
    parts = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            parts.append(o["text"])
        elif "text/plain" in o.get("data", {}) and not o["data"]["text/plain"].startswith(
            "<Figure"
        ):
            parts.append(o["data"]["text/plain"])
    lines = re.split(r"[\r\n]", "\n".join(parts))
    return [line for line in lines if line.strip() and not re.search(r"it/s|s/it|steps/s", line)]


def cmd_compare(out: Path) -> None:
    for executed in sorted((out / "nbs").glob("*/*.ipynb")):
        rel = executed.relative_to(out / "nbs")
        gpu = nbformat.read(executed, as_version=4).cells[1:]  # the probe cell left out
        cpu = nbformat.read(ROOT / rel, as_version=4).cells
        checked, ignored = [], []
        for index, (a, b) in enumerate(zip(cpu, gpu, strict=True)):
            if a.cell_type != "code" or _text(a) == _text(b):
                continue
            pairs = [(x, y) for x, y in zip(_text(a), _text(b), strict=False) if x != y][:2]
            tags = a.metadata.get("tags", [])
            (ignored if "nbval-ignore-output" in tags else checked).append((index, pairs))
        print(f"{rel}: {len(checked)} compared cells differ, {len(ignored)} ignored cells differ")
        for kind, cells in (("COMPARED", checked), ("ignored", ignored)):
            for index, pairs in cells:
                for x, y in pairs:
                    print(f"  {kind} cell {index}\n    cpu: {x[:120]}\n    gpu: {y[:120]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["run", "compare"])
    parser.add_argument("out", type=Path)
    parser.add_argument("--only", default=None, help="only notebooks whose path contains this")
    parser.add_argument("--jobs", type=int, default=8, help="notebooks run at once")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.command == "run":
        cmd_run(args.out, args.only, args.jobs)
    else:
        cmd_compare(args.out)


if __name__ == "__main__":
    main()
