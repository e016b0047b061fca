"""Binder: the README's badge opens JupyterLab on lesson 00, and repo2docker can read the env.

(tests/test_packaging.py checks that environment.yml lists the same packages and bounds as
pyproject.toml; these tests check what Binder itself needs.)
"""

from __future__ import annotations

import os
import re
from urllib.parse import parse_qs, urlsplit

from helpers import ROOT

import course_lib

BADGE = re.compile(r"\[!\[Binder\]\(https://mybinder\.org/badge_logo\.svg\)\]\((?P<url>[^)\s]+)\)")


def _load_yaml(text: str) -> dict:
    try:
        import yaml
    except ImportError:  # pyyaml comes with the [test] extra; a minimal reader otherwise
        return _mini_yaml(text)
    return yaml.safe_load(text)


def _mini_yaml(text: str) -> dict:
    """Top-level `key: value` and `key:` followed by `  - item` lists; comments ignored."""
    data, current = {}, None
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not line.strip():
            continue
        if not line.startswith(" ") and ":" in line:
            key, _, value = line.partition(":")
            current = key.strip()
            data[current] = value.strip() or []
        elif line.lstrip().startswith("- ") and isinstance(data.get(current), list):
            data[current].append(line.lstrip()[2:].strip())
        else:
            raise ValueError(f"unexpected line in environment.yml: {raw!r}")
    return data


def test_binder_badge_opens_jupyterlab_on_lesson_00():
    readme = (ROOT / "README.md").read_text()
    badges = BADGE.findall(readme)
    assert len(badges) == 1, f"expected one Binder badge in README.md, found {len(badges)}"
    url = urlsplit(badges[0])
    assert (url.scheme, url.netloc) == ("https", "mybinder.org")
    assert url.path == f"/v2/gh/{course_lib.REPOSITORY}/{course_lib.BRANCH}", url.path
    urlpath = parse_qs(url.query).get("urlpath")
    assert urlpath == ["lab/tree/notebooks/00_introduction.ipynb"], (
        f"the badge should open JupyterLab on lesson 00, its urlpath is {urlpath}"
    )
    assert (ROOT / urlpath[0].removeprefix("lab/tree/")).is_file()


def test_environment_yml_is_valid_yaml_for_conda_forge_with_cpu_torch():
    env = _load_yaml((ROOT / "environment.yml").read_text())
    assert isinstance(env, dict) and isinstance(env.get("dependencies"), list), env
    assert env.get("channels") == ["conda-forge"], (
        f"use conda-forge only (no 'defaults' channel): {env.get('channels')}"
    )
    deps = [d for d in env["dependencies"] if isinstance(d, str)]
    names = {re.match(r"[A-Za-z0-9_.-]+", d).group(0).lower(): d for d in deps}
    assert re.fullmatch(r"python=3\.(1[0-9])", names.get("python", "")), names.get("python")
    assert "pip" in names, "pip is needed by postBuild to install the course package"
    assert "pytorch-cpu" in names, "the CPU build of torch keeps the Binder image small"
    assert not {"pytorch", "torch", "pytorch-gpu"} & set(names), "a CUDA torch on Binder"
    # Widgets render in JupyterLab only when their lab extensions are in the image.
    assert {"jupyterlab", "ipywidgets", "anywidget"} <= set(names)


def test_postbuild_is_executable_and_installs_the_course_package():
    post = ROOT / "postBuild"
    assert os.access(post, os.X_OK), "postBuild must be executable (git mode 100755)"
    text = post.read_text()
    assert text.startswith("#!"), "postBuild needs a shebang line"
    assert re.search(r"pip install [^\n]*--no-deps[^\n]* \.\s*$", text, re.M), text
    assert "set -e" in text, "a failing install must fail the Binder build"


def test_mini_yaml_reader_agrees_with_pyyaml():
    text = (ROOT / "environment.yml").read_text()
    mini = _mini_yaml(text)
    assert mini["channels"] == ["conda-forge"]
    assert any(d.startswith("pytorch-cpu") for d in mini["dependencies"])
    try:
        import yaml
    except ImportError:
        return
    assert mini == yaml.safe_load(text)
