"""The one sweep command, ``python -m flkit.sweep <sweep>``: an unknown sweep and bad shared options are refused as
one line with exit status 2 before any computation; where the Fed-CVaR-Avg runs go by default; each chapter's smoke
sweep stores its runs, and one stopped at its deadline (exit 75) resumes to the bytes of an uninterrupted one.
(The HiCS-FL sweep's pieces: tests/test_hics_experiments.py; the ledger's pay through it: tests/test_owed.py.)"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from flkit import sweep
from flkit.papers.across.sweeps import RARE_USERS
from flkit.papers.cvar import sweeps
from flkit.papers.fedau.sweeps import SWEEP as FEDAU

REPO = Path(__file__).resolve().parents[1]
# one Fig. 2(a) run of the smoke profile; --estimate so that nothing is stored
TINY = ["cvar", "synthetic_2d", "--profile", "smoke", "--device", "cpu", "--set", "panels=[a]", "--set", "alphas=[1.0]",
        "--set", "authors_model_seeds=[]"]
ESTIMATE = TINY + ["--estimate", "--estimate-rounds", "1"]


@pytest.fixture
def no_compute(monkeypatch):
    """Any training or estimate of any sweep fails the test: bad input must be refused before it."""
    def fail(*a, **k):
        raise AssertionError("computation started")
    for sw in sweep.SWEEPS.values():
        monkeypatch.setattr(sw, "run", fail)
        monkeypatch.setattr(sw, "estimate", fail)


@pytest.fixture
def roots(monkeypatch):
    """Replace the cvar sweep by a recorder of the folder it was given (nothing computed or stored)."""
    seen = []
    monkeypatch.setattr(sweeps, "sweep", lambda s, *, root, **k: seen.append(Path(root)))
    return seen


def refused(capsys, argv, prog: str = "python -m flkit.sweep cvar") -> str:
    """The error line of a refused call (exit status 2, no traceback, nothing on stdout)."""
    with pytest.raises(SystemExit) as e:
        sweep.main(argv)
    assert e.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), captured.err
    assert captured.out == ""  # refused before the first line of output
    return lines[0]


# ---- the dispatcher: an unknown sweep, the shared options checked once for every sweep

def test_every_chapter_has_a_sweep():
    assert list(sweep.SWEEPS) == ["cvar", "fedau", "hics", "hics-fig6", "rare-users"]
    assert sweep.SWEEPS["cvar"] is sweeps.SWEEP and sweep.SWEEPS["fedau"] is FEDAU
    assert sweep.SWEEPS["rare-users"] is RARE_USERS
    for name, sw in sweep.SWEEPS.items():
        assert sw.name == name and sw.summary and sw.stopped and sweep.parser(name).prog.endswith(name)


@pytest.mark.parametrize("argv", [["nosuch"], ["CVAR"], ["--device", "cpu"]])
def test_unknown_sweep_is_one_line(no_compute, capsys, argv):
    line = refused(capsys, argv, prog="python -m flkit.sweep")
    assert repr(argv[0]) in line and "cvar, fedau, hics, hics-fig6, rare-users" in line


def test_no_sweep_prints_the_list_and_exits_2(capsys):
    with pytest.raises(SystemExit) as e:
        sweep.main([])
    assert e.value.code == 2 and "rare-users" in capsys.readouterr().err


# every sweep with valid arguments of its own; the shared options appended to each
VALID = {"cvar": ["cvar", "synthetic_2d", "--profile", "smoke"], "fedau": ["fedau", "--profile", "smoke"],
         "hics": ["hics", "smoke"], "hics-fig6": ["hics-fig6"], "rare-users": ["rare-users", "--profile", "smoke"]}


@pytest.mark.parametrize("name", list(VALID))
@pytest.mark.parametrize("option, value, word", [
    ("--max-minutes", "-1", "finite number > 0"), ("--max-minutes", "0", "finite number > 0"),
    ("--max-minutes", "nan", "finite number > 0"), ("--max-minutes", "inf", "finite number > 0"),
    ("--threads", "0", "integer >= 1"), ("--threads", "1.5", "integer >= 1"),
    ("--estimate-rounds", "0", "integer >= 1"), ("--rounds", "-2", "integer >= 1"),
    ("--device", "tpu", "auto, cpu or cuda[:i]"), ("--device", "cuda:x", "auto, cpu or cuda[:i]")])
def test_bad_shared_option_is_one_line_for_every_sweep(no_compute, capsys, name, option, value, word):
    line = refused(capsys, VALID[name] + [option, value], prog=f"python -m flkit.sweep {name}")
    assert f"argument {option}: " in line and repr(value) in line and word in line


@pytest.mark.parametrize("name", list(VALID))
@pytest.mark.parametrize("item", ["seeds", "seeds=", "seeds=null", "seeds=~", "=[0]", "seeds=[0"])
def test_bad_set_item_is_one_line_for_every_sweep(no_compute, capsys, name, item):
    line = refused(capsys, VALID[name] + ["--set", item], prog=f"python -m flkit.sweep {name}")
    assert repr(item) in line and "NAME=VALUE" in line


@pytest.mark.parametrize("name", list(VALID))
def test_unknown_setting_and_a_setting_given_twice_are_one_line(no_compute, capsys, name):
    line = refused(capsys, VALID[name] + ["--set", "nosuch=1"], prog=f"python -m flkit.sweep {name}")
    assert "nosuch" in line and "unknown setting" in line
    line = refused(capsys, VALID[name] + ["--set", "rounds=5", "--rounds", "6"], prog=f"python -m flkit.sweep {name}")
    assert "--rounds and --set rounds" in line


@pytest.mark.parametrize("argv, word", [
    (["cvar", "nosuch"], "invalid choice: 'nosuch'"), (["cvar", "mnist", "--profile", "huge"], "--profile"),
    (["cvar", "synthetic_2d", "--batch-size", "0"], "--batch-size must be an int >= 1"),
    (["fedau", "--study", "tables"], "--study"), (["fedau", "--set", "seeds=[1, 1]"], "seeds"),
    (["hics", "smoke", "--part", "2", "--of", "2"], "--part must lie in [0, --of = 2)"),
    (["hics", "smoke", "--of", "0"], "--of must be an int >= 1"),
    (["hics", "smoke", "--setting", "(9)"], "--setting must be one of"),
    (["hics", "smoke", "--set", "dataset=cifar10"], "choose the profile"),
    (["hics-fig6", "--model", "resnet"], "--model"), (["hics-fig6", "--seeds", "1"], "unknown setting(s) ['seeds']"),
    (["rare-users", "--rules", "fedprox"], "rules must be"), (["rare-users", "--seeds", "0", "0"], "seeds")])
def test_bad_option_of_a_sweep_is_one_line(no_compute, capsys, argv, word):
    assert word in refused(capsys, argv, prog=f"python -m flkit.sweep {argv[0]}")


def test_a_device_this_machine_lacks_is_one_line_before_computing(no_compute, capsys, tmp_path):
    """The ledger's commands name cuda: they parse anywhere (tests/test_owed.py), and run only where CUDA is."""
    import torch
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    assert sweep.parse(TINY[:4] + ["--device", "cuda", "--estimate"])[1].device == "cuda"
    assert sweep.main(TINY[:4] + ["--device", "cuda:1", "--out", str(tmp_path)]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith("python -m flkit.sweep cvar: error: ") and "CUDA is not available" in line
    assert "\n" not in line


def test_bad_input_exit_status_as_a_command(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "flkit.sweep", *TINY, "--out", str(tmp_path), "--set", "nosuch=1"],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().startswith("python -m flkit.sweep cvar: error: unknown setting(s) ['nosuch']")
    assert "Traceback" not in proc.stderr and "\n" not in proc.stderr.strip() and proc.stdout == ""


# ---- Fed-CVaR-Avg: where the runs go, an unwritable --out or --pack

def test_smoke_profile_defaults_to_scratch_folder(roots, monkeypatch, tmp_path):
    monkeypatch.setenv("FLKIT_RESULTS", str(tmp_path / "results"))
    assert sweep.main(TINY) == 1          # the recorder stored nothing: the sweep "ended" with runs missing
    assert roots == [tmp_path / "results" / "tmp" / "cvar"]


def test_reduced_profile_still_defaults_to_book_folder(roots, monkeypatch, tmp_path):
    monkeypatch.setenv("FLKIT_RESULTS", str(tmp_path / "results"))
    assert sweep.main(["cvar", "synthetic_2d", "--profile", "reduced", "--device", "cpu"]) == 1
    assert roots == [tmp_path / "results" / "cvar"]


def test_explicit_out_wins_for_smoke(roots, tmp_path):
    assert sweep.main(TINY + ["--out", str(tmp_path / "mine")]) == 1
    assert roots == [tmp_path / "mine"]


def test_unwritable_out_refused_before_computing(no_compute, capsys, tmp_path):
    (tmp_path / "f").write_text("")
    line = refused(capsys, TINY + ["--out", str(tmp_path / "f" / "x")])
    assert "--out" in line and str(tmp_path / "f" / "x") in line


def test_unwritable_pack_refused_before_computing(no_compute, capsys, tmp_path):
    (tmp_path / "f").write_text("")
    line = refused(capsys, TINY + ["--out", str(tmp_path / "out"), "--pack", str(tmp_path / "f" / "p.tar.gz")])
    assert "--pack" in line


# ---- each chapter's smoke sweep: stored, and stopped at a deadline then resumed to the same bytes

def _csvs(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.csv"))}


def _stopped_then_resumed(argv, folder, checkpoints, monkeypatch, tmp_path, capsys) -> tuple[dict, dict]:
    """``argv`` with a deadline that stops it in its first batch (exit 75, one checkpoint in
    ``checkpoints(root)``), called again (exit 0, the checkpoint removed), and uninterrupted in another results
    root: the stored CSVs of both (``folder(root)``: the store's folder)."""
    monkeypatch.setenv("FLKIT_RESULTS", str(tmp_path / "a"))
    assert sweep.main(argv + ["--max-minutes", "0.001"]) == sweep.EXIT_UNFINISHED
    out = capsys.readouterr().out
    assert "STOPPED before the deadline" in out and "Call again" in out
    ckpts = list(checkpoints(tmp_path / "a").glob("*.pt"))
    assert len(ckpts) == 1, ckpts
    assert sweep.main(argv) == 0 and not ckpts[0].exists()
    monkeypatch.setenv("FLKIT_RESULTS", str(tmp_path / "b"))
    assert sweep.main(argv) == 0
    return _csvs(folder(tmp_path / "a")), _csvs(folder(tmp_path / "b"))


def test_cvar_smoke_sweep_resumes_to_identical_results(monkeypatch, tmp_path, capsys):
    argv = TINY + ["--set", "seeds=[0, 1]", "--threads", "1"]
    a, b = _stopped_then_resumed(argv, lambda r: r / "tmp" / "cvar" / "synthetic_2d",
                                 lambda r: r / "tmp" / "cvar" / "checkpoints", monkeypatch, tmp_path, capsys)
    assert len(a) == 2 and a == b


def test_fedau_smoke_sweep_resumes_to_identical_results(monkeypatch, tmp_path, capsys):
    """The cutoff study of the smoke profile: its two runs train in one batch (checkpointed under
    results/tmp/fedau/checkpoints/ when stopped)."""
    from flkit import datasets
    if not datasets.available("fashion-mnist"):
        pytest.skip("needs the Fashion-MNIST files")
    argv = ["fedau", "--profile", "smoke", "--study", "cutoff", "--device", "cpu", "--threads", "1"]
    a, b = _stopped_then_resumed(argv, lambda r: r / "tmp" / "fedau", lambda r: r / "tmp" / "fedau" / "checkpoints",
                                 monkeypatch, tmp_path, capsys)
    assert len(a) == 2 and a == b


def test_rare_users_smoke_sweep_resumes_to_identical_results(monkeypatch, tmp_path, capsys):
    """One r and one seed of the smoke profile: the six rules train together."""
    from flkit import datasets
    if not datasets.available("mnist"):
        pytest.skip("needs the MNIST files")
    argv = ["rare-users", "--profile", "smoke", "--seeds", "0", "--set", "r=[0.9]", "--device", "cpu", "--threads", "1"]
    a, b = _stopped_then_resumed(argv, lambda r: r / "tmp" / "across" / "rare_users",
                                 lambda r: r / "tmp" / "across" / "checkpoints", monkeypatch, tmp_path, capsys)
    assert len(a) == 6 and a == b


def test_estimates_store_nothing(monkeypatch, tmp_path, capsys):
    """--estimate of the cvar and rare-users smoke sweeps: a projection printed, exit 0, no file written."""
    monkeypatch.setenv("FLKIT_RESULTS", str(tmp_path))
    assert sweep.main(ESTIMATE + ["--threads", "1"]) == 0
    assert "projected time" in capsys.readouterr().out
    from flkit import datasets
    if datasets.available("mnist"):
        assert sweep.main(["rare-users", "--profile", "smoke", "--seeds", "0", "--set", "r=[0.9]", "--device", "cpu",
                           "--estimate", "--estimate-rounds", "1"]) == 0
        assert "projected" in capsys.readouterr().out
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]
