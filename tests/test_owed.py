"""The owed-work ledger: every command parses (``python -m flkit.sweep`` or a benchmark script), progress is counted
from the stores, and ``--pay`` runs the commands in resumable pieces."""
from __future__ import annotations

import dataclasses
import importlib.util
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from flkit import owed

REPO = Path(__file__).resolve().parents[1]


def _script(path: str):
    spec = importlib.util.spec_from_file_location(Path(path).stem, REPO / path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("item", owed.ITEMS, ids=[it.id for it in owed.ITEMS])
def test_command_parses(item):
    """A run of the book goes through the one sweep command (its parser and the sweep's settings accept the
    arguments); a benchmark through its script's parser."""
    from flkit import sweep
    argv = shlex.split(item.command)
    assert argv[0] == "python", item.command
    if argv[1] == "-m":
        assert argv[2] == "flkit.sweep", item.command
        sw, args, plan = sweep.parse(argv[3:])
        assert plan is not None and sw.name == argv[3]
        assert args.device == ("cpu" if item.cpu else "cuda"), item.command
    else:
        assert argv[1].startswith("benchmarks/") and (REPO / argv[1]).is_file(), item.command
        assert _script(argv[1])._parse(argv[2:]) is not None
    assert (REPO / (item.page + ".ipynb")).is_file() or (REPO / (item.page + ".md")).is_file(), item.page


def test_progress_counts_the_store(tmp_path, monkeypatch):
    from flkit.papers.fedau import table
    monkeypatch.setenv("FLKIT_RESULTS", str(tmp_path))
    item = next(it for it in owed.ITEMS if it.id == "fedau-table-paper")
    done, total, minutes = item.progress()
    assert (done, total) == (0, 105) and minutes == pytest.approx(105 * item.gpu_min)
    s = table.profile("paper")
    c = table.configs(s)[0]
    import pandas as pd
    table.store_for(s).save(c, pd.DataFrame({"round": [0], "metric": ["test_acc"], "value": [0.1]}))
    assert item.progress()[:2] == (1, 105)
    df = owed.frame()
    assert df.set_index("id").loc["fedau-table-paper", "runs_done"] == "1 of 105"
    assert df.set_index("id").loc["fedau-table-paper", "gpu_minutes"] == pytest.approx(104 * item.gpu_min, abs=0.1)


def test_ledger_is_ordered_by_value(tmp_path, monkeypatch):
    """Most valuable first: the runs that decide a document's claim (the Fed-CVaR-Avg MNIST diagnostics, HiCS-FL
    with the document's CNN in setting (2), Fed-CVaR-Avg Table 1) lead; the FedAU cutoff figure (nothing in the
    document to compare against) and the book's own comparison under the RAM (no document's item depends on it) are
    last. Ranks are unique."""
    monkeypatch.setenv("FLKIT_RESULTS", str(tmp_path))
    df = owed.frame()
    assert df.value.is_monotonic_increasing and df.value.is_unique
    assert sorted(it.value for it in owed.ITEMS) == list(range(1, len(owed.ITEMS) + 1))
    ids = list(df.id)
    first = ["cvar-mnist-input-scaling", "cvar-mnist-horizon", "cvar-mnist-fedavg-step", "cvar-mnist-strong-risk",
             "hics-fmnist-s2", "cvar-table1-paper"]
    assert ids[:6] == first and ids[-2:] == ["fedau-cutoff-paper", "across-rare-users"]
    # the MNIST RAM-vector runs have no basis in the document: a labelled sensitivity check, near the end
    assert ids.index("cvar-mnist-authors-ram") > ids.index("cvar-fig2-causes")
    # the FedAU CNN spot-check (a reduced sensitivity check) after the FedAU table at the document's scale
    assert ids.index("fedau-table-paper") < ids.index("fedau-cnn-spot") == len(ids) - 3
    assert [it.id for it in owed.ledger()] == ids


def test_every_item_is_priced_honestly(tmp_path, monkeypatch):
    """GPU minutes 'measured' only where measured on a GPU, else the text says 'estimated'; CPU hours for every
    item, 'measured' on this CPU or 'extrapolated' with its basis; a CPU item has no GPU minutes."""
    monkeypatch.setenv("FLKIT_RESULTS", str(tmp_path))
    df = owed.frame()
    for col in ("value", "cpu_hours", "gpu_minutes", "basis", "cpu_basis", "estimate", "cpu_estimate", "why"):
        assert col in df.columns, col
    for it in owed.ITEMS:
        assert it.why and it.cpu_basis
        if it.gpu_min is None:
            assert it.cpu
        elif it.gpu_measured:
            assert it.basis.startswith("measured"), it.id
        else:
            assert it.basis.startswith("estimated"), it.id
        assert it.cpu_basis.startswith("measured") == it.cpu_measured or it.cpu_min == 0, it.id
    g = df.set_index("id")
    assert set(g.basis[g.gpu_minutes > 0]) <= {"measured", "estimated"}
    assert g.loc["cvar-fig2-causes", "gpu_minutes"] == 0 and g.loc["cvar-fig2-causes", "cpu_hours"] > 0
    assert (g.drop(index="fedau-engine-bench").cpu_hours > 0).all()
    cpu = df[df.cpu_minutes > 0]                              # CPU work is labelled as such, not as GPU minutes
    assert (cpu.gpu_minutes == 0).all() and cpu.needs.str.contains("CPU").all()


def test_payable_rule(monkeypatch):
    """On cuda: the GPU items; on cpu: the CPU items and those whose CPU price was measured here; data present."""
    monkeypatch.setattr(owed.Owed, "data_here", lambda self: True)
    by = {it.id: it for it in owed.ITEMS}
    scaling = by["cvar-mnist-input-scaling"]
    assert owed.payable(scaling, "cpu")[0] and owed.payable(scaling, "cuda")[0]
    assert owed.payable(by["cvar-fig2-causes"], "cpu")[0] and not owed.payable(by["cvar-fig2-causes"], "cuda")[0]
    ok, why = owed.payable(by["fedau-cutoff-paper"], "cpu")
    assert not ok and "extrapolated" in why
    monkeypatch.setattr(owed.Owed, "data_here", lambda self: not self.data or "cifar10" not in self.data)
    ok, why = owed.payable(by["hics-cifar10-paper"], "cuda")
    assert not ok and "CIFAR-10" in why


def test_argv_sets_device_limit_and_threads():
    it = next(i for i in owed.ITEMS if i.id == "cvar-mnist-horizon")
    argv = it.argv("cpu", 2.5, 1)
    assert argv[:4] == [sys.executable, "-m", "flkit.sweep", "cvar"] and argv[4] == "mnist"
    assert argv.count("--device") == 1 and argv[argv.index("--device") + 1] == "cpu"
    assert argv.count("--max-minutes") == 1 and float(argv[argv.index("--max-minutes") + 1]) == 2.5
    assert argv[argv.index("--threads") + 1] == "1" and "settings=[0.9]" in argv
    bench = next(i for i in owed.ITEMS if i.id == "fedau-engine-bench")
    b = bench.argv("cuda", 2.0)
    assert "--max-minutes" not in b and float(b[b.index("--budget") + 1]) == 120.0


# ---------------------------------------------------------------------------------------------- --pay
TINY = ("python -m flkit.sweep cvar synthetic_2d --profile smoke --set 'panels=[a]' --set 'alphas=[1.0]' "
        "--set 'authors_model_seeds=[]' --set 'seeds=[0, 1]' --device cuda --max-minutes 8.5")


def _tiny_runs():
    from flkit.papers import cvar
    s = cvar.settings("synthetic_2d", "smoke", panels=["a"], alphas=[1.0], authors_model_seeds=[], seeds=[0, 1])
    store = cvar.store_for(s)
    cs = cvar.run_configs(s)
    return sum(store.done(c) for c in cs), len(cs)


@pytest.fixture
def tiny(monkeypatch):
    """The ledger replaced by one tiny item: two Fig. 2(a) runs of the cvar smoke profile (seconds on a CPU)."""
    item = owed.Owed("tiny", "003", "smoke", "book/cvar/synthetic_2d", TINY, _tiny_runs, 1, "a test", None,
                     "no GPU", 0.01, "measured: a test", cpu_measured=True, cpu=True)
    monkeypatch.setattr(owed, "ITEMS", [item])
    return item


def _stored(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((root / "tmp" / "cvar" / "synthetic_2d").glob("*.csv"))}


def test_pay_stopped_at_a_piece_boundary_resumes_to_identical_results(tiny, tmp_path, monkeypatch, capsys):
    """A pay cut after one short piece (exit 75, a checkpoint under the cap listed to commit) and a second pay
    store the same bytes as one uninterrupted pay; the finished run's checkpoint is deleted."""
    monkeypatch.setenv("FLKIT_RESULTS", str(tmp_path / "a"))
    assert owed.main(["--pay", "--minutes", "5", "--device", "cpu", "--piece-minutes", "0.01",
                      "--max-pieces", "1"]) == 75
    ckpts = list((tmp_path / "a" / "tmp" / "cvar" / "checkpoints").glob("*.pt"))
    assert len(ckpts) == 1 and 0 < ckpts[0].stat().st_size <= owed.FILE_CAP
    out = capsys.readouterr().out
    assert ckpts[0].name in out and "work left: tiny" in out and _tiny_runs() == (0, 2)
    assert owed.main(["--pay", "--minutes", "5", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "nothing payable is left" in out and "deleted" in out and ckpts[0].name in out
    assert not ckpts[0].exists() and _tiny_runs() == (2, 2)
    monkeypatch.setenv("FLKIT_RESULTS", str(tmp_path / "b"))
    assert owed.main(["--pay", "--minutes", "5", "--device", "cpu"]) == 0
    a, b = _stored(tmp_path / "a"), _stored(tmp_path / "b")
    assert len(a) == 2 and a == b
    capsys.readouterr()
    assert owed.main(["--pay", "--minutes", "5", "--device", "cpu"]) == 0     # nothing left: no piece runs
    assert "piece of" not in capsys.readouterr().out


def test_pay_stops_before_its_minutes(tiny, tmp_path, monkeypatch, capsys):
    """Too little time for a piece (the margin and the shortest piece): exit 75 at once, nothing run."""
    monkeypatch.setenv("FLKIT_RESULTS", str(tmp_path))
    monkeypatch.setattr(owed.subprocess, "run", lambda *a, **k: pytest.fail("a piece started"))
    assert owed.main(["--pay", "--minutes", "0.2", "--device", "cpu"]) == 75
    assert "work left: tiny" in capsys.readouterr().out


def test_pay_failed_command_exits_1(tiny, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FLKIT_RESULTS", str(tmp_path))
    monkeypatch.setattr(owed.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 3))
    assert owed.main(["--pay", "--minutes", "5", "--device", "cpu"]) == 1
    assert "FAILED [tiny]: exit status 3" in capsys.readouterr().out


@pytest.mark.parametrize("argv,word", [
    (["--pay", "--minutes", "0", "--device", "cpu"], "--minutes"),
    (["--pay", "--minutes", "-3", "--device", "cpu"], "--minutes"),
    (["--pay", "--minutes", "nan", "--device", "cpu"], "--minutes"),
    (["--pay", "--minutes", "ten", "--device", "cpu"], "--minutes"),
    (["--pay", "--minutes", "5", "--device", "cpu", "--only", "nope"], "no such item"),
    (["--pay", "--minutes", "5", "--device", "tpu"], "--device"),
    (["--pay", "--minutes", "5", "--device", "cuda"], "no CUDA"),
    (["--pay", "--device", "cpu"], "--minutes"),
    (["--minutes", "5"], "goes with --pay"),
])
def test_pay_bad_input_is_one_line(argv, word, monkeypatch, capsys):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(owed, "pay", lambda *a, **k: pytest.fail("work started"))
    with pytest.raises(SystemExit) as e:
        owed.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("python -m flkit.owed: error: ") and word in err[0], err


def test_only_an_item_whose_data_are_missing_is_refused(monkeypatch, capsys):
    monkeypatch.setattr(owed.Owed, "data_here", lambda self: False)
    monkeypatch.setattr(owed, "pay", lambda *a, **k: pytest.fail("work started"))
    with pytest.raises(SystemExit) as e:
        owed.main(["--pay", "--minutes", "5", "--device", "cpu", "--only", "hics-cifar10-paper"])
    assert e.value.code == 2 and "CIFAR-10 files" in capsys.readouterr().err


def test_tracked_result_files_stay_under_the_cap():
    """Every result, manifest or checkpoint file the repository tracks weighs at most 16 MiB (what a GPU window
    brings back per file; split or compress a larger one)."""
    out = subprocess.run(["git", "ls-files", "-z", "results"], cwd=REPO, capture_output=True, check=True).stdout
    big = [f for f in out.decode().split("\0") if f and (REPO / f).is_file()
           and (REPO / f).stat().st_size > owed.FILE_CAP]
    assert not big, big


def test_hics_fmnist_paper_counts_its_19_runs(tmp_path, monkeypatch):
    """19 runs (DivFL's 3 of setting (2) at 600 rounds among them): setting (2)'s three jobs of the four cheap
    methods first (hics-fmnist-s2), the 16 others apart; GPU minutes as the H200 window measured them, CPU hours
    priced from the paper profile's client trainings and evaluations (the test
    set and the training loss over the profile's sample, every round); the CPU price of an evaluation is the
    measurement's (results/benchmarks/hics_eval_cpu.csv: the smaller per-model CPU time of two repeats, in the
    chunks the CNN evaluates with on a CPU)."""
    import pandas as pd

    from flkit.papers.hics import common, fmnist
    monkeypatch.setenv("FLKIT_RESULTS", str(tmp_path))
    s2 = next(it for it in owed.ITEMS if it.id == "hics-fmnist-s2")
    rest = next(it for it in owed.ITEMS if it.id == "hics-fmnist-paper")
    (d1, n1, m1), (d2, n2, m2) = s2.progress(), rest.progress()
    assert (d1, n1, d2, n2) == (0, 3, 0, 16)
    # the GPU prices are the window's measurement as written, not typed apart from it
    win = pd.read_csv(owed._REPO / "results/benchmarks/window_hics_fmnist_h200.csv").set_index("metric").value
    assert (m1, m2) == (pytest.approx(win["minutes_hics-fmnist-s2"], abs=0.005),
                        pytest.approx(win["minutes_hics-fmnist-paper"], abs=0.005))
    assert owed._HICS_H200_RATES == (round(win["train_samples_per_s"]), round(win["eval_forwards_per_s"]))
    assert f"{owed._HICS_H200_RATES[0]:,} training samples/s" in rest.basis and rest.basis.startswith("measured")
    assert "600" in rest.item and "3.1e8" in rest.basis and s2.value < rest.value
    paper = fmnist.profile("paper", powd_d_seeds=[])     # the document's setting: no pow-d diagnostic
    assert [j["group"] for j in fmnist.jobs(fmnist.profile("paper"))].count("powd_d") == 2
    assert owed._ALL_TRAININGS == fmnist.client_trainings(paper)
    assert f"{owed._ALL_TRAININGS:,} client trainings" in rest.basis
    main2 = [j for j in fmnist.jobs(paper) if fmnist.is_setting2_main(j)]
    assert owed._S2_TRAININGS == sum(j["rounds"] * 5 * len(j["methods"]) for j in main2)
    assert owed._ALL_EVALS == fmnist.evaluations(paper) and f"{owed._ALL_EVALS:,} run-method rounds" in rest.basis
    assert owed._S2_EVALS == sum((j["rounds"] + 1) * len(j["methods"]) for j in main2) == 2412
    assert owed._EVAL_FORWARDS == 10_000 + paper["train_loss_images"]
    assert owed._ALL_PROBES == fmnist.loss_probes(paper) and owed._S2_PROBES == fmnist.loss_probes(
        fmnist.profile("paper", settings=["(2)"], divfl_settings=[], lr_alt=None, powd_d_seeds=[])) == 600
    assert owed._PROBE_FORWARDS == 60_000 and "1,800 rounds of pow-d runs" in rest.basis
    assert f"{owed._ALL_EVALS - owed._S2_EVALS:,} run-method rounds" in rest.cpu_basis
    bench = pd.read_csv(owed._REPO / "results/benchmarks/hics_eval_cpu.csv")
    best = bench[bench.batch_size == common.eval_batch(paper["model"], "cpu")].groupby("set").per_model_cpu_s.min()
    assert (owed._HICS_TEST_S, owed._HICS_LOSS_S, owed._HICS_PROBE_S) == (
        round(best["test"], 2), round(best["sample"], 2), round(best["train"], 2))
    for s in (f"{owed._HICS_TEST_S:.2f} s", f"{owed._HICS_LOSS_S:.2f} s", f"{owed._S2_EVALS:,} run-method rounds",
              f"{owed._HICS_PROBE_S:.2f} s for pow-d's loss probe", f"x {owed._S2_PROBES} rounds"):
        assert s in s2.cpu_basis
    hours = s2.cpu_min * 3 / 60
    assert f"{hours:.1f} h in all" in s2.cpu_basis and hours == pytest.approx(7.3, abs=0.05)


@pytest.mark.parametrize("name,runs,minutes,data", [("hics-cifar10-paper", 21, 149.0, "CIFAR-10"),
                                                    ("hics-cifar100-paper", 12, 137.0, "CIFAR-100")])
def test_hics_cifar_items_count_their_runs(tmp_path, monkeypatch, name, runs, minutes, data):
    """The CIFAR comparisons: their profiles' jobs in their own store folders, and the data they need."""
    monkeypatch.setenv("FLKIT_RESULTS", str(tmp_path))
    from flkit.papers.hics import fmnist
    item = next(it for it in owed.ITEMS if it.id == name)
    assert item.progress() == (0, runs, pytest.approx(minutes))
    cfg = fmnist.profile(f"paper-{name.split('-')[1]}")      # the test set and a 10,000-image sample every round
    forwards = f"{fmnist.evaluations(cfg) * (10_000 + cfg['train_loss_images']):.1e}".replace("e+0", "e")
    assert f"{forwards} forward passes" in item.basis
    assert item.needs == f"the {data} files" and not item.cpu and item.document == "004"
    assert item.command == f"python -m flkit.sweep hics paper-{name.split('-')[1]} --device cuda --max-minutes 8"
    df = owed.frame()
    assert df.set_index("id").loc[name, "needs"] == f"the {data} files"


def test_checkpoints_are_committed_and_temporary_files_are_not():
    """Mid-run checkpoints under results/<chapter>/checkpoints/ (and their parts) are not git-ignored, so a pay's
    progress can be committed; writers' temporary files and the scratch folder are."""
    def ignored(path: str) -> bool:
        return subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO).returncode == 0
    assert not ignored("results/cvar/checkpoints/batch-0123456789abcdef.pt")
    assert not ignored("results/fedau/checkpoints/0123456789abcdef.pt.0123456789ab.part00")
    assert not ignored("results/hics/checkpoints/job-0123456789abcdef.pt")
    assert ignored("results/cvar/checkpoints/.batch-0123.pt.123.abcd1234.tmp")
    assert ignored("results/tmp/cvar/checkpoints/batch-0123.pt")


def test_a_part_keeps_its_whole_owed(tmp_path, monkeypatch):
    """hics-fmnist-s2 is part of hics-fmnist-paper: with only the part unpaid, the whole is still owed (the
    scorecard items naming hics-fmnist-paper stay owed until both are paid)."""
    monkeypatch.setenv("FLKIT_RESULTS", str(tmp_path))
    rest = next(it for it in owed.ITEMS if it.id == "hics-fmnist-paper")
    monkeypatch.setattr(owed, "ITEMS", [dataclasses.replace(rest, runs=lambda: (16, 16)) if it.id == rest.id else it
                                        for it in owed.ITEMS])
    ids = owed.unpaid_ids()
    assert "hics-fmnist-s2" in ids and "hics-fmnist-paper" in ids
    assert "hics-fmnist-paper" not in {it.id for it in owed.ledger()}


def test_fedau_cnn_spot_is_a_measured_cpu_item(tmp_path, monkeypatch):
    """The CNN spot-check: the 10 runs of profile cnn-spot counted from the store, paid on one CPU thread in
    resumable pieces, priced by a measurement on this CPU, a sensitivity check that no document item names."""
    from flkit.papers.fedau import table
    monkeypatch.setenv("FLKIT_RESULTS", str(tmp_path))
    it = next(i for i in owed.ITEMS if i.id == "fedau-cnn-spot")
    done, total, minutes = it.progress()
    assert (done, total) == (0, 10) and minutes == pytest.approx(10 * it.cpu_min) and 0 < minutes / 60 < 48
    assert it.cpu and it.cpu_measured and it.gpu_min is None and it.sensitivity and it.document == "000"
    assert it.cpu_basis.startswith("measured") and "--estimate --threads 1" in it.cpu_basis
    assert owed.payable(it, "cpu")[0] and not owed.payable(it, "cuda")[0]
    argv = it.argv("cpu", 20.0, 1)
    assert argv[argv.index("--profile") + 1] == "cnn-spot" and argv[argv.index("--study") + 1] == "table"
    assert argv[argv.index("--device") + 1] == "cpu" and float(argv[argv.index("--max-minutes") + 1]) == 20.0
    assert argv[argv.index("--threads") + 1] == "1"
    s = table.profile("cnn-spot")
    table.store_for(s).save(table.configs(s)[0], __import__("pandas").DataFrame(
        {"round": [0], "metric": ["test_acc"], "value": [0.1]}))
    assert it.progress()[:2] == (1, 10)
