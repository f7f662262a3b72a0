"""The GPU window (scripts/gpu_window.sh, flkit.window): bad input stops before any work, the packing keeps to
what the device brings back (8 files of 16 MiB, 64 MiB together), unpacking restores the same bytes and
refuses paths outside results/, and a CPU dry run goes through every step."""
from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from flkit import owed, window

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu_window.sh"


def _env(tmp_path: Path, **extra) -> dict:
    env = dict(os.environ, PYTHON=sys.executable, PYTHONPATH=str(REPO), FLKIT_RESULTS=str(tmp_path / "results"))
    env.update(extra)
    return env


def _fake_env_sh(tmp_path: Path) -> Path:
    """A stand-in for the carried .device/env.sh: no data sets (so the CPU pays no item that needs one)."""
    (tmp_path / "nodata").mkdir(exist_ok=True)
    env = tmp_path / "device" / "env.sh"
    env.parent.mkdir(exist_ok=True)
    env.write_text(f'export FLKIT_DATA="{tmp_path / "nodata"}"\necho "test env: FLKIT_DATA=$FLKIT_DATA"\n')
    return env


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _seed_root(root: Path) -> None:
    """A results root with a stored run, a checkpoint that the window deletes, and a file that it changes."""
    (root / "cvar" / "mnist").mkdir(parents=True)
    (root / "cvar" / "mnist" / "a.csv").write_text("round,metric,value\n0,test_acc,0.1\n")
    (root / "cvar" / "checkpoints").mkdir()
    (root / "cvar" / "checkpoints" / "batch-0.pt").write_bytes(b"old checkpoint")
    (root / "benchmarks").mkdir()
    (root / "benchmarks" / "b.csv").write_text("x\n1\n")


def _check_limits(out: Path) -> None:
    files = list(out.iterdir())
    assert 0 < len(files) <= window.MAX_FILES
    assert all(f.is_file() and f.stat().st_size <= window.FILE_CAP for f in files), files
    assert sum(f.stat().st_size for f in files) <= window.TOTAL_CAP
    assert window.FILE_CAP == owed.FILE_CAP


# ------------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("args,word", [
    (["--minutes", "3.9", "--device", "cpu", "--dry-run"], "at least 4"),
    (["--minutes", "0", "--device", "cpu", "--dry-run"], "at least 4"),
    (["--minutes", "12"], "at most 10"),
    (["--minutes", "ten", "--device", "cpu", "--dry-run"], "must be a number"),
    (["--minutes", "nan", "--device", "cpu", "--dry-run"], "must be a number"),
    ([], "--minutes M is required"),
    (["--minutes", "5", "--device", "tpu"], "cuda or cpu"),
    (["--minutes", "5", "--device", "cpu"], "goes with --dry-run"),
    (["--minutes", "5", "--device", "cpu", "--dry-run", "--env", "MISSING"], "is missing"),
    (["--minutes", "5", "--device", "cpu", "--dry-run", "--only", "nope"], "no such item"),
    (["--minutes", "5", "--margin", "-1"], "--margin"),
    (["--minutes", "5", "--bogus"], "unknown argument"),
    (["--minutes", "5", "--device", "cpu", "--dry-run", "OUT-NOT-EMPTY"], "not an empty folder"),
    (["--minutes", "5", "--device", "cpu", "--dry-run", "NO-OUT"], "$OUT is not set"),
])
def test_bad_input_fails_before_any_work(args, word, tmp_path):
    """One line on stderr, exit status 2, nothing written: no $OUT, no results root, no scratch folder."""
    env_sh = _fake_env_sh(tmp_path)
    out = tmp_path / "out"
    env = _env(tmp_path, OUT=str(out))
    if "OUT-NOT-EMPTY" in args:
        out.mkdir()
        (out / "stale.txt").write_text("from an earlier call")
    if "NO-OUT" in args:
        env.pop("OUT")
    args = [a for a in args if a not in ("OUT-NOT-EMPTY", "NO-OUT")]
    if "--env" in args:
        args[args.index("--env") + 1] = str(tmp_path / "device-missing" / "env.sh")
    elif "--dry-run" in args:
        args += ["--env", str(env_sh)]
    before = set(Path("/tmp").glob("gpu_window.*"))
    r = subprocess.run(["bash", str(SCRIPT), *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert len(err) == 1 and err[0].startswith(("gpu_window.sh: error: ", "python -m flkit.window: error: ")), err
    assert word in err[0], err
    assert not (tmp_path / "results").exists()
    assert (not out.exists()) or [p.name for p in out.iterdir()] in ([], ["stale.txt"])
    assert set(Path("/tmp").glob("gpu_window.*")) == before


def test_check_args_accepts_a_window(tmp_path):
    env = _fake_env_sh(tmp_path)
    assert window.check_args("9.5", "cuda", str(env), str(tmp_path / "out"), False) == 9.5
    assert window.check_args("4", "cpu", str(env), str(tmp_path / "out"), True) == 4.0


def test_prepare_makes_a_lean_device_folder(tmp_path):
    """The data sets' verified .gz files in torchvision's layout and an env.sh, nothing else; it replaces a
    folder it made, and refuses another one or an unknown data set."""
    from flkit import datasets
    if not datasets.available("mnist"):
        pytest.skip("the MNIST files are not here")
    dest = window.prepare(["mnist"], tmp_path / ".device")
    raw = dest / "data" / "MNIST" / "raw"
    assert sorted(p.name for p in raw.iterdir()) == sorted(f for f, _ in datasets._tv_class("mnist").resources)
    assert datasets.available("mnist", dest / "data") and not datasets.available("fashion-mnist", dest / "data")
    assert sorted(p.name for p in dest.iterdir()) == ["data", "env.sh"]
    r = subprocess.run(["bash", "-c", "source .device/env.sh >/dev/null && echo $FLKIT_DATA"], cwd=tmp_path,
                       capture_output=True, text=True, check=True)
    assert r.stdout.strip() == str(tmp_path / ".device" / "data")
    window.prepare(["mnist"], dest)                                    # its own folder: replaced
    other = tmp_path / "other"
    other.mkdir()
    (other / "env.sh").write_text("# made by hand\n")
    with pytest.raises(window.BadInput, match="not made by"):
        window.prepare(["mnist"], other)
    with pytest.raises(window.BadInput, match="data sets must be"):
        window.prepare(["cifar10"], tmp_path / "x")
    assert (other / "env.sh").read_text() == "# made by hand\n" and not (tmp_path / "x").exists()


# ------------------------------------------------------------------------------------------------ pack / unpack
def test_pack_splits_an_oversize_file_and_unpack_restores_the_same_bytes(tmp_path):
    """A 17 MiB file (incompressible) planted after the snapshot comes back in parts of at most 16 MiB; the
    changed and the deleted files are listed; unpacking into a copy of the first state gives the second
    state byte for byte, and a second unpack changes nothing."""
    root, out, copy = tmp_path / "results", tmp_path / "out", tmp_path / "copy"
    _seed_root(root)
    shutil.copytree(root, copy)
    before = window.snapshot(root)
    (root / "cvar" / "checkpoints" / "batch-0.pt").unlink()                   # a finished run's checkpoint
    (root / "benchmarks" / "b.csv").write_text("x\n2\n")                      # changed
    big = os.urandom(17 * 2**20)
    (root / "cvar" / "checkpoints" / "batch-1.pt").write_bytes(big)           # over 16 MiB
    (root / "tmp").mkdir()
    (root / "tmp" / "scratch.csv").write_text("never packed")                 # git-ignored scratch
    (root / "cvar" / "mnist" / ".a.csv.1.ab.tmp").write_text("a writer's temporary file")
    lines = []
    assert window.pack(root, before, out, notes=["pay: exit 75"], say=lambda t, **k: lines.append(t)) == 0
    _check_limits(out)
    names = sorted(p.name for p in out.iterdir())
    assert names == ["results.tar.gz.part00", "results.tar.gz.part01", "window-manifest.txt", "window.log"]
    assert (out / "results.tar.gz.part00").stat().st_size == window.PART_BYTES
    man = (out / "window-manifest.txt").read_text()
    assert "note\tpay: exit 75" in man and "deleted\tresults/cvar/checkpoints/batch-0.pt" in man
    assert "file\tchanged\tresults/benchmarks/b.csv" in man
    assert f"file\tnew\tresults/cvar/checkpoints/batch-1.pt\t{len(big)}\t{hashlib.sha256(big).hexdigest()}" in man
    assert "scratch" not in man and ".tmp" not in man and "a.csv" not in man     # unchanged files stay
    assert "packed 2 files" in (out / "window.log").read_text()

    rep = window.unpack(out, copy, say=lambda *a, **k: None)
    assert rep["new"] == ["results/cvar/checkpoints/batch-1.pt"] and rep["changed"] == ["results/benchmarks/b.csv"]
    assert rep["deleted"] == ["results/cvar/checkpoints/batch-0.pt"]
    expected = {k: v for k, v in _tree(root).items() if not k.startswith("tmp") and not k.endswith(".tmp")}
    assert _tree(copy) == expected
    rep = window.unpack(out, copy, say=lambda *a, **k: None)
    assert rep["unchanged"] == sorted(["results/cvar/checkpoints/batch-1.pt", "results/benchmarks/b.csv"])
    assert not rep["new"] and not rep["changed"] and not rep["deleted"]


def test_pack_keeps_to_the_budget_and_keeps_parts_together(tmp_path):
    """With room for 2 parts of 2 MiB (less the slack kept for gzip's buffers): the small result file goes
    in, a checkpoint written in parts goes whole or not at all (here one of two fits: the smaller), and what
    does not fit is listed as left behind (exit status 1)."""
    root, out = tmp_path / "results", tmp_path / "out"
    _seed_root(root)
    before = window.snapshot(root)
    ck = root / "fedau" / "checkpoints"
    ck.mkdir(parents=True)
    for i in range(2):
        (ck / f"a.pt.0123.part{i:02d}").write_bytes(os.urandom(1_000_000))     # 2.0 MB together
        (ck / f"b.pt.4567.part{i:02d}").write_bytes(os.urandom(700_000))       # 1.4 MB: one part alone would fit
    (root / "fedau" / "run.csv").write_text("round,metric,value\n" + "0,test_acc,0.5\n" * 1000)
    rc = window.pack(root, before, out, part_bytes=2 * 2**20, max_parts=2, say=lambda *a, **k: None)
    assert rc == 1
    _check_limits(out)
    man = (out / "window-manifest.txt").read_text().splitlines()
    assert "file\tnew\tresults/fedau/run.csv" in "\n".join(man)
    kinds = {name: sorted(line.split("\t")[0] for line in man if f"checkpoints/{name}.pt." in line) for name in "ab"}
    assert kinds == {"a": ["left", "left"], "b": ["file", "file"]}
    assert sum(p.stat().st_size for p in out.glob("results.tar.gz*")) <= 4 * 2**20


def _forged(out: Path, member: str, data: bytes = b"x") -> None:
    """A window output whose archive holds ``member``, with a manifest that agrees with it."""
    out.mkdir()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo(member)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    blob = buf.getvalue()
    (out / "results.tar.gz").write_bytes(blob)
    sha = hashlib.sha256
    (out / "window-manifest.txt").write_text(
        f"archive\tresults.tar.gz\t1\t{len(blob)}\t{sha(blob).hexdigest()}\npart\tresults.tar.gz\t{len(blob)}\n"
        f"file\tnew\t{member}\t{len(data)}\t{sha(data).hexdigest()}\n")


@pytest.mark.parametrize("member", ["results/../book/evil.md", "book/evil.md", "/etc/evil", "results/a/../../evil",
                                    "results", "results/./x"])
def test_unpack_refuses_paths_outside_results(member, tmp_path, capsys):
    root = tmp_path / "repo" / "results"
    root.mkdir(parents=True)
    _forged(tmp_path / "out", member)
    with pytest.raises(window.BadInput, match="refused"):
        window.unpack(tmp_path / "out", root)
    assert not list((tmp_path / "repo").rglob("evil*")) and not list(root.iterdir())
    with pytest.raises(SystemExit) as e:                      # the command line: one line, exit status 2
        window.main(["unpack", str(tmp_path / "out"), "--root", str(root)])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "refused" in err[0]


def test_unpack_refuses_a_link_out_of_the_root(tmp_path):
    root = tmp_path / "results"
    root.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (root / "cvar").symlink_to(tmp_path / "elsewhere")
    _forged(tmp_path / "out", "results/cvar/x.csv")
    with pytest.raises(window.BadInput, match="resolves outside"):
        window.unpack(tmp_path / "out", root)
    assert not list((tmp_path / "elsewhere").iterdir())


def test_unpack_detects_a_damaged_or_missing_part(tmp_path):
    """A byte flipped in a part, or a part missing: refused before anything is written."""
    root, out = tmp_path / "results", tmp_path / "out"
    _seed_root(root)
    before = window.snapshot(root)
    (root / "cvar" / "mnist" / "new.csv").write_bytes(os.urandom(3 * 2**20))
    window.pack(root, before, out, part_bytes=2**20, say=lambda *a, **k: None)
    target = tmp_path / "target"
    target.mkdir()
    part = out / "results.tar.gz.part01"
    data = bytearray(part.read_bytes())
    data[100] ^= 1
    part.write_bytes(bytes(data))
    with pytest.raises(window.BadInput, match="SHA-256"):
        window.unpack(out, target)
    part.unlink()
    with pytest.raises(window.BadInput, match="missing"):
        window.unpack(out, target)
    assert not list(target.iterdir())


# ------------------------------------------------------------------------------------------------ the dry run
@pytest.mark.slow
def test_cpu_dry_run_goes_through_every_step(tmp_path):
    """The whole window on the CPU with tiny budgets (one piece of 3 s of the Fig. 2 causes item): the checks'
    CSVs and the piece's checkpoint come back within the device's limits; unpacking them into the results
    root as it was before gives the state after, byte for byte."""
    root, out, copy = tmp_path / "results", tmp_path / "out", tmp_path / "copy"
    _seed_root(root)
    shutil.copytree(root, copy)
    env_sh = _fake_env_sh(tmp_path)
    r = subprocess.run(["taskset", "-c", "0", "bash", str(SCRIPT), "--minutes", "4", "--device", "cpu", "--dry-run",
                        "--env", str(env_sh), "--only", "cvar-fig2-causes"],
                       cwd=tmp_path, env=_env(tmp_path, OUT=str(out)), capture_output=True, text=True, timeout=600)
    assert r.returncode == 75, r.stdout[-3000:] + r.stderr[-3000:]          # work left: the item has 180 runs
    _check_limits(out)
    assert sorted(p.name for p in out.iterdir()) == ["results.tar.gz", "window-manifest.txt", "window.log"]
    man = (out / "window-manifest.txt").read_text()
    for name in ("window_parity_cpu.csv", "window_hics_fmnist_cpu.csv", "window_engine_fedau_fmnist_cpu.csv"):
        assert f"file\tnew\tresults/benchmarks/{name}" in man, man
    assert "file\tnew\tresults/cvar/checkpoints/batch-" in man                 # the piece stopped and checkpointed
    for step in ("check parity: exit 0", "check hics-rate: exit 0", "check fedau-engine: exit 0",
                 "check cvar-step: skipped", "pay: exit 75"):
        assert f"note\t{step}" in man, man
    log = (out / "window.log").read_text()
    assert "test env: FLKIT_DATA=" in log and "--pay --minutes" in log and "--device cpu" in log
    parity = (root / "benchmarks" / "window_parity_cpu.csv").read_text().splitlines()
    assert len(parity) == 3 and all(float(row.split(",")[2]) < 1e-4 for row in parity[1:])
    rates = (root / "benchmarks" / "window_hics_fmnist_cpu.csv").read_text()
    assert "train_samples_per_s" in rates and "minutes_hics-fmnist-s2" in rates
    r2 = subprocess.run(["bash", str(SCRIPT), "--unpack", str(out), "--root", str(copy)], env=_env(tmp_path),
                        capture_output=True, text=True, timeout=120)
    assert r2.returncode == 0, r2.stderr
    assert "4 new, 0 changed, 0 unchanged, 0 deleted" in r2.stdout, r2.stdout
    assert _tree(copy) == _tree(root)
