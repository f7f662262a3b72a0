"""The papermill runner: parameter checks before work, atomic output, metadata."""
from __future__ import annotations

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from flkit import run


def _nb(path, body="x = profile", params='profile = "smoke"\nseed = 0\ndevice = "auto"'):
    nb = new_notebook(cells=[new_code_cell(params, metadata={"tags": ["parameters"]}), new_code_cell(body)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


def test_unknown_parameter_refused_before_running(tmp_path):
    src = _nb(tmp_path / "a.ipynb", body="raise SystemExit('must not run')")
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['profil'\].*takes \['device', 'profile', 'seed'\]"):
        run.execute(src, {"profil": "paper"}, out=tmp_path / "out.ipynb")
    assert not (tmp_path / "out.ipynb").exists()


def test_needs_exactly_one_parameters_cell(tmp_path):
    nb = new_notebook(cells=[new_code_cell("profile = 'smoke'")])
    nbformat.write(nb, tmp_path / "b.ipynb")
    with pytest.raises(ValueError, match="exactly one cell tagged 'parameters', found 0"):
        run.declared_parameters(tmp_path / "b.ipynb")


@pytest.mark.slow
def test_execute_overrides_and_records(tmp_path):
    src = _nb(tmp_path / "c.ipynb", body="assert profile == 'paper' and seed == 3")
    out = run.execute(src, {"profile": "paper", "seed": 3}, out=tmp_path / "c_out.ipynb")
    meta = nbformat.read(out, as_version=4).metadata["flkit"]
    assert meta["parameters"] == {"profile": "paper", "seed": 3, "device": "auto"}
    assert meta["wall_time_s"] >= 0 and meta["machine"]


@pytest.mark.slow
def test_failed_run_leaves_no_output(tmp_path):
    src = _nb(tmp_path / "d.ipynb", body="raise RuntimeError('boom')")
    out = tmp_path / "book" / "d.ipynb"
    with pytest.raises(Exception, match="boom"):
        run.execute(src, out=out)
    assert list(out.parent.iterdir()) == []


def test_cli_rejects_bad_arguments(capsys):
    with pytest.raises(SystemExit):
        run.main([])
    assert "give notebook paths or --all" in capsys.readouterr().err
