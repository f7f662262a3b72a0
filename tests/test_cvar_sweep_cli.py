"""scripts/cvar_sweep.py's command line: where runs go by default, and bad input refused as one line with exit
status 2 before any computation."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# one Fig. 2(a) run of the smoke profile; --estimate so that nothing is stored
TINY = ["synthetic_2d", "--profile", "smoke", "--device", "cpu", "--set", "panels=[a]", "--set", "alphas=[1.0]",
        "--set", "authors_model_seeds=[]"]
ESTIMATE = TINY + ["--estimate", "--estimate-rounds", "1"]


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("cvar_sweep", REPO / "scripts" / "cvar_sweep.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def no_compute(script, monkeypatch):
    """Any training fails the test: bad input must be refused before it."""
    def fail(*a, **k):
        raise AssertionError("computation started")
    monkeypatch.setattr(script.cvar, "run_batch", fail)
    monkeypatch.setattr(script.cvar, "sweep", fail)


@pytest.fixture
def roots(script, monkeypatch):
    """Replace the sweep by a recorder of the folder it was given (nothing computed or stored)."""
    seen = []
    monkeypatch.setattr(script.cvar, "sweep", lambda s, *, root, **k: seen.append(Path(root)))
    return seen


def refused(script, capsys, argv) -> str:
    """The error line of a refused call (exit status 2, no traceback)."""
    with pytest.raises(SystemExit) as e:
        script.main(argv)
    assert e.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert lines and lines[-1].startswith("cvar_sweep.py: error: "), captured.err
    assert "Traceback" not in captured.err
    assert captured.out == ""  # refused before the settings line is printed
    return lines[-1]


# ---- defect 1: smoke runs went into the tracked results/cvar/ by default

def test_smoke_profile_defaults_to_scratch_folder(script, roots, monkeypatch, tmp_path):
    monkeypatch.setenv("FLKIT_RESULTS", str(tmp_path / "results"))
    assert script.main(TINY) == 0
    assert roots == [tmp_path / "results" / "tmp" / "cvar"]


def test_reduced_profile_still_defaults_to_book_folder(script, roots, monkeypatch, tmp_path):
    monkeypatch.setenv("FLKIT_RESULTS", str(tmp_path / "results"))
    assert script.main(["synthetic_2d", "--profile", "reduced", "--device", "cpu"]) == 0
    assert roots == [tmp_path / "results" / "cvar"]


def test_explicit_out_wins_for_smoke(script, roots, tmp_path):
    assert script.main(TINY + ["--out", str(tmp_path / "mine")]) == 0
    assert roots == [tmp_path / "mine"]


def test_smoke_run_stores_under_out(script, tmp_path):
    """End to end (two rounds, one run): stored under <out>/synthetic_2d/, nothing else written."""
    out = tmp_path / "out"
    assert script.main(TINY + ["--rounds", "2", "--out", str(out)]) == 0
    assert sorted(p.suffix for p in (out / "synthetic_2d").iterdir()) == [".csv", ".json"]
    assert sorted(p.name for p in out.iterdir()) == ["synthetic_2d"]  # no probe file left behind


# ---- defects 2 and 4: --set items that were silently ignored; settings errors as one line, exit 2

@pytest.mark.parametrize("item", ["seeds", "seeds=", "seeds=null", "seeds=~", "=[0]", "seeds=[0"])
def test_bad_set_item_refused(script, no_compute, capsys, tmp_path, item):
    line = refused(script, capsys, ESTIMATE + ["--out", str(tmp_path), "--set", item])
    assert repr(item) in line and "NAME=VALUE" in line


@pytest.mark.parametrize("args, word", [(["--set", "nosuch=1"], "nosuch"), (["--set", "alphas=[2.0]"], "alphas"),
                                        (["--seeds", "0", "0"], "seeds"), (["--device", "tpu"], "device")])
def test_bad_setting_is_one_line(script, no_compute, capsys, tmp_path, args, word):
    assert word in refused(script, capsys, ESTIMATE + ["--out", str(tmp_path)] + args)


def test_bad_setting_exit_status_as_a_command(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "cvar_sweep.py"), *TINY, "--out", str(tmp_path),
                           "--set", "nosuch=1"], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("cvar_sweep.py: error: unknown setting(s) ['nosuch']")
    assert "Traceback" not in proc.stderr and proc.stdout == ""


# ---- defect 3: numeric options checked by the argument parser

@pytest.mark.parametrize("option, value", [
    ("--batch-size", "-3"), ("--batch-size", "0"), ("--batch-size", "1.5"),
    ("--max-minutes", "-1"), ("--max-minutes", "0"), ("--max-minutes", "nan"), ("--max-minutes", "inf"),
    ("--estimate-rounds", "0"), ("--threads", "0"), ("--rounds", "0"), ("--rounds", "-2")])
def test_bad_number_refused(script, no_compute, capsys, tmp_path, option, value):
    line = refused(script, capsys, ESTIMATE + ["--out", str(tmp_path), option, value])
    assert f"argument {option}: " in line and repr(value) in line


# ---- defect 5: an unwritable --out (or --pack) found only after the computation

def test_unwritable_out_refused_before_computing(script, no_compute, capsys, tmp_path):
    (tmp_path / "f").write_text("")
    line = refused(script, capsys, TINY + ["--out", str(tmp_path / "f" / "x")])
    assert "--out" in line and str(tmp_path / "f" / "x") in line


def test_unwritable_pack_refused_before_computing(script, no_compute, capsys, tmp_path):
    (tmp_path / "f").write_text("")
    line = refused(script, capsys, TINY + ["--out", str(tmp_path / "out"), "--pack", str(tmp_path / "f" / "p.tar.gz")])
    assert "--pack" in line


def test_a_device_this_machine_lacks_is_one_line_before_computing(script, no_compute, capsys, tmp_path):
    """The ledger's commands name cuda: they parse anywhere (tests/test_owed.py), and run only where CUDA is."""
    import torch
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    assert script._parse(TINY[:3] + ["--device", "cuda", "--estimate"]).device == "cuda"
    assert script.main(TINY[:3] + ["--device", "cuda:1", "--out", str(tmp_path)]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith("cvar_sweep.py: error: ") and "CUDA is not available" in line and "\n" not in line
