"""The owed-work ledger: every command parses with its script, progress is counted from the stores."""
from __future__ import annotations

import importlib.util
import shlex
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
    argv = shlex.split(item.command)
    assert argv[0] == "python" and (REPO / argv[1]).is_file(), item.command
    args = _script(argv[1])._parse(argv[2:])
    assert args is not None
    assert (REPO / (item.page + ".ipynb")).is_file() or (REPO / (item.page + ".md")).is_file(), item.page


def test_progress_counts_the_store(tmp_path, monkeypatch):
    from flkit.papers.fedau import table
    monkeypatch.setenv("FLKIT_RESULTS", str(tmp_path))
    item = next(it for it in owed.ITEMS if it.id == "fedau-table-paper")
    done, total, minutes = item.progress()
    assert (done, total) == (0, 105) and minutes == pytest.approx(105 * item.minutes_per_run)
    s = table.profile("paper")
    c = table.configs(s)[0]
    import pandas as pd
    table.store_for(s).save(c, pd.DataFrame({"round": [0], "metric": ["test_acc"], "value": [0.1]}))
    assert item.progress()[:2] == (1, 105)
    df = owed.frame()
    gpu_only = (df.needs == "a GPU").to_numpy()
    assert gpu_only[:gpu_only.sum()].all()                  # what a GPU alone can pay comes first,
    assert df.gpu_minutes[gpu_only].is_monotonic_decreasing  # largest first
    assert {"fedau-table-paper", "fedau-cutoff-paper", "cvar-table1-paper"} <= set(df.id[gpu_only])
    cpu = df[df.cpu_minutes > 0]                              # CPU work is labelled as such, not as GPU minutes
    assert (cpu.gpu_minutes == 0).all() and cpu.needs.str.contains("CPU").all()
    assert all(owed_item.cpu for owed_item in owed.ITEMS if owed_item.id in set(cpu.id))


def test_hics_fmnist_paper_counts_its_19_runs(tmp_path, monkeypatch):
    """19 runs (DivFL's 3 of setting (2) at 600 rounds among them), ~41 GPU minutes in all (the basis's sum)."""
    monkeypatch.setenv("FLKIT_RESULTS", str(tmp_path))
    item = next(it for it in owed.ITEMS if it.id == "hics-fmnist-paper")
    assert item.progress() == (0, 19, pytest.approx(41.0))
    assert "600" in item.item and "4.9e8" in item.basis


@pytest.mark.parametrize("name,runs,minutes,data", [("hics-cifar10-paper", 21, 188.0, "CIFAR-10"),
                                                    ("hics-cifar100-paper", 12, 172.0, "CIFAR-100")])
def test_hics_cifar_items_count_their_runs(tmp_path, monkeypatch, name, runs, minutes, data):
    """The CIFAR comparisons: their profiles' jobs in their own store folders, and the data they need."""
    monkeypatch.setenv("FLKIT_RESULTS", str(tmp_path))
    item = next(it for it in owed.ITEMS if it.id == name)
    assert item.progress() == (0, runs, pytest.approx(minutes))
    assert item.needs == f"the {data} files" and not item.cpu and item.document == "004"
    assert item.command == f"python scripts/hics_sweep.py paper-{name.split('-')[1]} --device cuda"
    df = owed.frame()
    assert df.set_index("id").loc[name, "needs"] == f"the {data} files"
