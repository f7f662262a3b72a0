"""Every source notebook: one `parameters` cell, runs end to end at profile=smoke, executed copy up to date."""
from __future__ import annotations

import nbformat
import pytest

from flkit import run
from flkit.params import declared_parameters

SOURCES = run.sources()
IDS = [str(p.relative_to(run.SOURCES)) for p in SOURCES]


def _code(nb):
    return [c.source for c in nb.cells
            if c.cell_type == "code" and "injected-parameters" not in c.metadata.get("tags", [])]


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_parameters_cell(source):
    params = declared_parameters(source)
    assert "profile" in params and params["profile"] == "smoke", "default profile must be 'smoke'"
    assert "seed" in params or "seeds" in params
    assert params.get("device") == "auto"
    nb = nbformat.read(source, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit sources without outputs"


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_executed_copy_in_book_is_current(source):
    executed = run.book_path(source)
    assert executed.is_file(), \
        f"run `python -m flkit.run {source.relative_to(run.REPO)} -p profile paper` to create {executed}"
    a, b = nbformat.read(source, as_version=4), nbformat.read(executed, as_version=4)
    assert _code(a) == _code(b), f"{executed} is stale: re-execute it from its source"
    plots = any("plt." in src or "plots." in src for src in _code(a))
    images = sum("image/png" in o.get("data", {}) for c in b.cells for o in c.get("outputs", []))
    assert images or not plots, f"{executed}: the notebook plots but its executed copy holds no figure"
    profile = b.metadata.get("flkit", {}).get("parameters", {}).get("profile")
    assert profile in ("paper", "reduced"), f"{executed} was executed with profile={profile!r}, not for the book"


@pytest.mark.slow
@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_smoke_run(source, tmp_path):
    out = run.execute(source, {"profile": "smoke", "device": "cpu"}, out=tmp_path / source.name)
    nb = nbformat.read(out, as_version=4)
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
