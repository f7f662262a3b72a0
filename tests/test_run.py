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


CVAR_PAGES = run.SOURCES / "cvar"


@pytest.mark.parametrize("params, match", [
    ({"rounds": -5}, "rounds must be an integer >= 1, got -5"),
    ({"rounds": 0, "profile": "paper"}, "rounds must be an integer >= 1, got 0"),
    ({"seeds": []}, r"seeds must be a non-empty list of distinct integers >= 0, got \[\]"),
    ({"profile": "full"}, "unknown profile 'full' for mnist"),
])
def test_cvar_page_values_refused_before_running(tmp_path, params, match):
    with pytest.raises(ValueError, match=match):
        run.execute(CVAR_PAGES / "mnist.ipynb", params, out=tmp_path / "mnist.ipynb")
    assert not list(tmp_path.iterdir())


def test_cli_rejects_negative_rounds_for_a_cvar_page(tmp_path):
    with pytest.raises(ValueError, match="rounds must be an integer >= 1, got -5"):
        run.main([str(CVAR_PAGES / "fmnist_table.ipynb"), "-p", "rounds", "-5", "--out", str(tmp_path / "x.ipynb")])
    assert not list(tmp_path.iterdir())


def test_every_cvar_page_is_checked_and_in_range_values_pass():
    pages = sorted(CVAR_PAGES.glob("*.ipynb"))
    assert [p.stem for p in pages] == sorted(run.CVAR_EXPERIMENTS)
    for page in pages:
        defaults = run.declared_parameters(page)
        run.check_values(page, defaults)
        run.check_values(page, {**defaults, "rounds": 3, "seeds": [0, 2]})
        with pytest.raises(ValueError, match="rounds must be an integer >= 1( or None)?, got -1"):
            run.check_values(page, {**defaults, "rounds": -1})
