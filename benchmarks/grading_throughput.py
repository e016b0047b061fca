"""How fast the batch grader grades a class: locally with --jobs 1 and 2, and on a Ray cluster.

    python benchmarks/grading_throughput.py [--copies 20] [--sets ex00 ex02 ...] [--no-ray]

Makes a class of `--copies` learners, each handing in every solution notebook and the
solutions' library mine/ (a folder per learner), and grades it three times with the same seed:
locally with one kernel at a time (--jobs 1), with two (--jobs 2), and on a local Ray cluster
started here (a head node and a worker node, one CPU each; its start-up is timed apart).
Every notebook must get full marks.
Prints submissions per minute for each run and the per-submission cost of each exercise set
(median seconds of one grading, one kernel at a time, from the --jobs 1 run), then the
estimate for a class of 300 learners handing in every set on an 8-core machine with --jobs 8:
300 learners x the seconds of one learner's notebooks (the sum of the per-set costs) / 8 cores,
divided by the parallel efficiency measured here (--jobs 2 throughput / twice the --jobs 1
throughput), which assumes 8 cores scale as 2 did. The last line is JSON with every number.
Run it on a quiet machine: the timings are wall-clock.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from course_lib.grading.batch import grade  # noqa: E402
from course_lib.grading.resume import Store  # noqa: E402

CLASS_SIZE, CORES = 300, 8


def make_class(folder: Path, copies: int, sets: list[str] | None) -> int:
    notebooks = sorted((ROOT / "solutions").glob("*.ipynb"))
    if sets:
        notebooks = [nb for nb in notebooks if f"ex{nb.name[:2]}" in sets]
    for c in range(copies):
        learner = folder / f"learner{c:03d}"
        learner.mkdir(parents=True)
        for nb in notebooks:
            shutil.copy(nb, learner / nb.name)
        library = ROOT / "solutions" / "mine"  # the learner's own library, beside the notebooks
        if library.is_dir():
            shutil.copytree(library, learner / "mine")
    return copies * len(notebooks)


def timed_run(folder: Path, out: Path, seed: int, **options) -> tuple[float, list[dict]]:
    start = time.perf_counter()
    rows = grade([folder], out, seed=seed, quiet=True, **options)
    seconds = time.perf_counter() - start
    wrong = [r["submission"] for r in rows if r["score"] != r["max_score"] or r["error"]]
    if wrong:
        raise SystemExit(f"a solution did not get full marks: {wrong[:3]}")
    return seconds, rows


def per_set_seconds(out: Path) -> dict[str, float]:
    """Median seconds of one submission's grading, per exercise set (from the saved files)."""
    by_set: dict[str, list[float]] = {}
    for saved in Store(out, {}).saved():
        exercise = next(iter(saved["row"]["tasks"])).split(".")[0]
        by_set.setdefault(exercise, []).append(saved["seconds"])
    return {s: round(statistics.median(v), 2) for s, v in sorted(by_set.items())}


def ray_run(folder: Path, out: Path, seed: int) -> tuple[float, float]:
    from ray.cluster_utils import Cluster

    start = time.perf_counter()
    memory = 100 * 1024**2
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "object_store_memory": memory, "include_dashboard": False},
    )
    try:
        cluster.add_node(num_cpus=1, object_store_memory=memory)
        cluster.wait_for_nodes()
        startup = time.perf_counter() - start
        seconds, _ = timed_run(folder, out, seed, ray=cluster.address)
    finally:
        import ray

        ray.shutdown()
        cluster.shutdown()
    return startup, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=20, help="learners (default 20)")
    parser.add_argument("--sets", nargs="*", default=None, help="only these sets (e.g. ex00)")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray cluster run")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.copies < 1:
        parser.error(f"--copies must be at least 1, got {args.copies}")
    result: dict = {"copies": args.copies}
    with tempfile.TemporaryDirectory(prefix="grading-throughput-") as tmp:
        folder = Path(tmp) / "class"
        n = make_class(folder, args.copies, args.sets)
        result["submissions"] = n
        for jobs in (1, 2):
            out = Path(tmp) / f"jobs{jobs}"
            seconds, _ = timed_run(folder, out, args.seed, jobs=jobs)
            result[f"jobs{jobs}_seconds"] = round(seconds, 1)
            result[f"jobs{jobs}_per_minute"] = round(n / seconds * 60, 2)
            print(f"--jobs {jobs}: {n} submissions in {seconds:.0f} s, "
                  f"{n / seconds * 60:.1f} per minute", flush=True)  # fmt: skip
            if jobs == 1:
                result["seconds_per_submission"] = per_set_seconds(out)
        ray_note = "skipped (--no-ray)"
        if not args.no_ray:
            try:
                import ray  # noqa: F401
            except ImportError:
                ray_note = "skipped: Ray is not installed (the [ray] extra)"
            else:
                startup, seconds = ray_run(folder, Path(tmp) / "ray", args.seed)
                result["ray_startup_seconds"] = round(startup, 1)
                result["ray_seconds"] = round(seconds, 1)
                result["ray_per_minute"] = round(n / seconds * 60, 2)
                ray_note = (f"{n} submissions in {seconds:.0f} s, {n / seconds * 60:.1f} per "
                            f"minute (the cluster took {startup:.0f} s to start)")  # fmt: skip
        print(f"Ray, 2 nodes of 1 CPU: {ray_note}")
    costs = result["seconds_per_submission"]
    for exercise, seconds in costs.items():
        print(f"  {exercise}: {seconds:.1f} s per submission")
    learner_seconds = sum(costs.values())
    efficiency = result["jobs2_per_minute"] / (2 * result["jobs1_per_minute"])
    minutes = CLASS_SIZE * learner_seconds / CORES / efficiency / 60
    result["learner_seconds"] = round(learner_seconds, 1)
    result["parallel_efficiency"] = round(efficiency, 3)
    result["class_of_300_8_cores_minutes"] = round(minutes, 1)
    print(
        f"a class of {CLASS_SIZE}, every set ({len(costs)} notebooks, {learner_seconds:.0f} s of "
        f"grading per learner), on {CORES} cores with --jobs {CORES} at the {efficiency:.0%} "
        f"parallel efficiency measured here: about {minutes:.0f} minutes"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
