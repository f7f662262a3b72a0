"""pyproject.toml and environment.yml must pin the same packages at the same versions."""
import re
import tomllib

import yaml


def _pins(specs):
    out = {}
    for s in specs:
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^\s;]+)", s.strip())
        if m:
            out[m.group(1).lower().replace("_", "-")] = m.group(2)
    return out


def test_environment_yml_matches_pyproject(repo):
    project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
    specs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        specs += extra
    want = _pins(specs)
    assert len(want) == len(specs), "every dependency in pyproject.toml must be pinned with =="
    env = yaml.safe_load((repo / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    got = _pins(pip)
    assert got == want
