"""Packaging, Binder and CI wiring agree with each other."""

import re

import tomllib
from helpers import LESSONS, ROOT, readme_test_command

import course_lib
from tools.notebooks import SETUP_SOURCE

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
CONDA_NAMES = {"torch": "pytorch-cpu"}


def _requirement(spec: str) -> tuple[str, str]:
    name, bound = re.match(r"([A-Za-z0-9_.-]+)\s*(.*)", spec).groups()
    return name.lower(), bound.replace(" ", "")


def test_environment_yml_lists_the_same_packages_and_bounds_as_pyproject():
    project = PYPROJECT["project"]
    wanted = dict(
        _requirement(s) for s in project["dependencies"] + project["optional-dependencies"]["lab"]
    )
    conda = {}
    for line in (ROOT / "environment.yml").read_text().splitlines():
        m = re.match(r"\s*-\s+([A-Za-z0-9_.-]+)(\S*)\s*$", line)
        if m and m.group(1) not in ("python", "pip", "conda-forge"):
            conda[m.group(1).lower()] = m.group(2)
    expected = {CONDA_NAMES.get(name, name): bound for name, bound in wanted.items()}
    assert conda == expected


def test_one_repository_url_everywhere():
    assert PYPROJECT["project"]["urls"]["Repository"] == course_lib.REPOSITORY_URL
    assert f"git+{course_lib.REPOSITORY_URL}@{course_lib.BRANCH}" in SETUP_SOURCE
    readme = (ROOT / "README.md").read_text()
    assert f"mybinder.org/v2/gh/{course_lib.REPOSITORY}/{course_lib.BRANCH}" in readme


def test_ci_runs_the_readme_test_command_verbatim_with_torch_pinned():
    command = readme_test_command()
    ci = (ROOT / ".ci" / "run").read_text()
    assert command in ci.splitlines()
    assert "torch==2.13.0" in command
    assert not re.search(r"pip install[^\n]*\btorch(?!==)", ci), "an unpinned torch in .ci/run"


def test_readme_links_every_lesson_exercise_and_solution_with_colab():
    readme = (ROOT / "README.md").read_text()
    for lesson in LESSONS:
        for folder in ("notebooks", "exercises", "solutions"):
            path = ROOT / folder / (lesson.name if folder == "notebooks" else lesson.name)
            if path.exists():
                assert f"]({folder}/{path.name})" in readme, (
                    f"README does not link {folder}/{path.name}"
                )
                assert f"/blob/{course_lib.BRANCH}/{folder}/{path.name}" in readme


def test_binder_installs_the_course_package():
    post = (ROOT / "postBuild").read_text()
    assert "pip install" in post and "--no-deps" in post


def test_readme_syllabus_table_is_up_to_date():
    from tools.notebooks import syllabus_table

    assert syllabus_table() in (ROOT / "README.md").read_text(), (
        "README's syllabus table is out of date; run: python tools/notebooks.py readme"
    )


def test_runtime_bounds_are_plain_lower_bounds_that_colab_satisfies():
    """The setup cell reads each runtime bound as `name>=X.Y` (to name an older package), and
    Colab's versions (tests/colab_env.py) must satisfy every one: on Colab, the setup cell then
    installs course_lib and nothing else (tests/test_colab.py checks it with pip itself)."""
    from colab_env import COLAB_PINS, normalize

    colab = {normalize(p.split("==")[0]): p.split("==")[1] for p in COLAB_PINS}
    for spec in PYPROJECT["project"]["dependencies"]:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)>=(\d+(?:\.\d+)*)", spec)
        assert m, f"{spec!r}: runtime dependencies must be plain 'name>=X.Y' (the setup cell)"
        name, bound = normalize(m.group(1)), [int(n) for n in m.group(2).split(".")]
        if name in colab:
            have = [int(n) for n in colab[name].split(".")]
            assert have >= bound, f"{spec} excludes Colab's {name} {colab[name]}"
    kernel = {"ipykernel", "ipython", "ipywidgets", "jupyter-client"}
    listed = {normalize(_requirement(s)[0]) for s in PYPROJECT["project"]["dependencies"]}
    assert kernel <= listed, f"the kernel packages' bounds must be stated: {kernel - listed}"


def test_setup_cell_installs_the_course_without_its_dependencies():
    assert '"--no-deps", source' in SETUP_SOURCE
    assert "COURSE_LIB_SOURCE" in SETUP_SOURCE
    assert "--upgrade" not in SETUP_SOURCE and " -U" not in SETUP_SOURCE
