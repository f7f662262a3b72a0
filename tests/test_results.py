"""flkit.results: keys, atomic saves, resume, divergence, collect, sweeps."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time

import numpy as np
import pandas as pd
import pytest

from flkit import results
from flkit.results import Store, config_key, first_divergence, sweep, sweep_batched


def table(seed=0, rounds=4, metrics=("acc", "loss")):
    rows = [{"round": r, "metric": m, "value": (r + 1) * 0.25 + seed + (m == "loss")}
            for r in range(rounds) for m in metrics]
    return pd.DataFrame(rows)


CFG = {"method": "fedavg", "alpha": 0.1, "seed": 0, "model": {"name": "cnn", "width": 32}, "lrs": [0.1, 0.01]}


# ---------------------------------------------------------------------------------------------- keys

def test_key_is_pinned_sha256_of_canonical_json():
    cfg = {"b": [1, 2.5, None, True], "a": "x", "c": {"z": 1, "y": "é"}}
    canonical = '{"a":"x","b":[1,2.5,null,true],"c":{"y":"\\u00e9","z":1}}'
    assert results.canonical_json(cfg) == canonical
    assert config_key(cfg) == hashlib.sha256(canonical.encode()).hexdigest()[:16]
    assert Store("unused").key(cfg) == config_key(cfg)
    assert len(config_key(cfg)) == 16 and int(config_key(cfg), 16) >= 0


def test_key_independent_of_dict_order_including_nested():
    a = {"x": 1, "y": {"p": 0.5, "q": [1, 2]}, "z": None}
    b = {"z": None, "y": {"q": [1, 2], "p": 0.5}, "x": 1}
    assert config_key(a) == config_key(b)


def test_key_type_policy():
    base = {"alpha": 1, "seed": 3}
    # numbers compare like Python's ==: an integral float is the same value as the int
    assert config_key(base) == config_key({"alpha": 1.0, "seed": 3})
    assert config_key({"lr": 0.1}) == config_key({"lr": 0.10})
    assert config_key({"seed": np.int64(3), "alpha": np.float64(1.0)}) == config_key(base)
    # ... but booleans are not numbers, tuples are lists, None is not "None"
    assert config_key({"flag": True}) != config_key({"flag": 1})
    assert config_key({"flag": np.bool_(True)}) == config_key({"flag": True})
    assert config_key({"v": (1, 2)}) == config_key({"v": [1, 2]})
    assert config_key({"v": None}) != config_key({"v": "None"})
    assert config_key({"lr": 0.1}) != config_key({"lr": 0.1 + 1e-12})
    assert config_key({"alpha": 1}) != config_key({"alpha": 1.5})
    assert config_key({"v": [1, 2]}) != config_key({"v": [2, 1]})
    assert config_key({"v": "1"}) != config_key({"v": 1})


@pytest.mark.parametrize("bad, exc, name", [
    ({"opt": {"lr": float("nan")}}, ValueError, "opt.lr"),
    ({"opt": {"clip": float("inf")}}, ValueError, "opt.clip"),
    ({"p": object()}, TypeError, "p"),
    ({"sizes": [1, {1, 2}]}, TypeError, "sizes[1]"),
    ({"w": np.zeros(3)}, TypeError, "w"),
    ({"m": {1: "a"}}, TypeError, "m"),
])
def test_non_json_config_rejected_naming_the_field(bad, exc, name):
    with pytest.raises(exc, match=name.replace("[", r"\[").replace("]", r"\]")):
        config_key(bad)


def test_config_must_be_a_dict():
    with pytest.raises(TypeError):
        config_key([("a", 1)])


# ---------------------------------------------------------------------------------------------- save/load

def test_save_load_round_trip_and_files(tmp_path):
    store = Store(tmp_path)
    t = table()
    t["method"] = "fedau"
    t["client"] = np.arange(len(t)) % 3
    t["weight"] = 2.0  # an integral float column is written "2" and must come back as float
    assert not store.done(CFG)
    path = store.save(CFG, t, wall_time_s=1.23456, note="hello")
    assert path == tmp_path / f"{config_key(CFG)}.csv" == store.path(CFG)
    assert store.done(CFG)
    back = store.load(CFG)
    pd.testing.assert_frame_equal(back, t)

    text = path.read_text()
    assert text.splitlines()[0] == "round,metric,value,method,client,weight"  # no index column
    m = json.loads(store.manifest_path(CFG).read_text())
    assert m["key"] == config_key(CFG)
    assert m["config"] == json.loads(json.dumps(CFG))
    assert m["rows"] == len(t)
    assert m["diverged"] is False and m["diverged_round"] is None
    assert m["wall_time_s"] == pytest.approx(1.235)
    assert m["note"] == "hello"
    assert m["flkit_version"] == __import__("flkit").__version__
    # where it was computed: this CPU, torch's kernel path and library versions (flkit.numerics)
    import torch
    assert m["platform"]["cpu"] and m["platform"]["kernel_path"].startswith(torch.backends.cpu.get_cpu_capability())
    assert m["platform"]["torch"] == torch.__version__ and m["platform"]["threads"] == torch.get_num_threads()
    for field in ("git_commit", "device", "timestamp", "csv_sha256"):
        assert field in m
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left


def test_compact_float_format_and_exact_option(tmp_path):
    t = pd.DataFrame({"round": [0, 1], "metric": ["loss", "loss"], "value": [1 / 3, 2.0]})
    compact = Store(tmp_path / "c")
    compact.save(CFG, t)
    assert "0.33333333\n" in compact.path(CFG).read_text()
    np.testing.assert_allclose(compact.load(CFG)["value"], t["value"], rtol=1e-8, atol=0)
    exact = Store(tmp_path / "e", float_format=None)
    exact.save(CFG, t)
    pd.testing.assert_frame_equal(exact.load(CFG), t)


def test_key_equal_configs_share_a_result(tmp_path):
    store = Store(tmp_path)
    store.save({"alpha": 1, "seed": 0}, table())
    assert store.done({"seed": 0, "alpha": 1.0})
    assert not store.done({"seed": 0, "alpha": 1.5})


def test_save_rejects_bad_tables(tmp_path):
    store = Store(tmp_path)
    with pytest.raises(ValueError, match="lacks the columns"):
        store.save(CFG, pd.DataFrame({"round": [0], "value": [1.0]}))
    with pytest.raises(ValueError, match="numeric"):
        store.save(CFG, pd.DataFrame({"round": [0], "metric": ["a"], "value": ["high"]}))
    with pytest.raises(ValueError, match="empty"):
        store.save(CFG, table().iloc[:0])
    with pytest.raises(ValueError, match="integers"):
        store.save(CFG, pd.DataFrame({"round": [0.5], "metric": ["a"], "value": [1.0]}))
    with pytest.raises(TypeError):
        store.save(CFG, {"round": [0]})
    with pytest.raises(ValueError, match="overwrite"):
        store.save(CFG, table(), rows=3)
    assert not store.done(CFG) and not any(tmp_path.iterdir())


def test_load_missing_raises(tmp_path):
    with pytest.raises(FileNotFoundError, match=config_key(CFG)):
        Store(tmp_path).load(CFG)


# ---------------------------------------------------------------------------------------------- crashes

def test_done_false_when_manifest_missing_csv_present(tmp_path):
    store = Store(tmp_path)
    store.save(CFG, table())
    store.manifest_path(CFG).unlink()  # killed between the CSV and the manifest
    assert store.path(CFG).exists() and not store.done(CFG)
    with pytest.raises(FileNotFoundError):
        store.load(CFG)


def test_done_false_when_only_temp_file_left(tmp_path):
    store = Store(tmp_path)
    key = config_key(CFG)
    (tmp_path / f".{key}.csv.999.abcd.tmp").write_text("round,metric,value\n0,a,1\n")
    (tmp_path / f".{key}.json.999.abcd.tmp").write_text("{}")
    assert not store.done(CFG)
    assert store.collect().empty


def test_done_false_on_row_count_mismatch(tmp_path):
    store = Store(tmp_path)
    store.save(CFG, table())
    csv = store.path(CFG)
    lines = csv.read_text().splitlines(keepends=True)
    csv.write_text("".join(lines[:-1]))  # a truncated table
    assert not store.done(CFG)

    store.save(CFG, table())
    m = json.loads(store.manifest_path(CFG).read_text())
    m["rows"] += 1
    store.manifest_path(CFG).write_text(json.dumps(m))
    assert not store.done(CFG)


def test_done_false_when_csv_replaced_by_other_content(tmp_path):
    store = Store(tmp_path)
    store.save(CFG, table(seed=0))
    m = store.manifest_path(CFG).read_text()
    store.save(CFG, table(seed=1))  # same row count, other numbers
    store.manifest_path(CFG).write_text(m)  # old manifest beside the new CSV
    assert not store.done(CFG)


def test_crash_while_writing_manifest_leaves_nothing_done(tmp_path, monkeypatch):
    store = Store(tmp_path)
    store.save(CFG, table(seed=0))  # an older complete result
    real_replace = os.replace

    def replace(src, dst):
        if str(dst).endswith(".json"):
            raise KeyboardInterrupt("killed")
        real_replace(src, dst)

    monkeypatch.setattr(results.os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        store.save(CFG, table(seed=1))
    monkeypatch.undo()
    assert not store.done(CFG)  # neither the old result nor the half-written new one counts
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # our temp file was removed


def test_stale_temp_files_are_cleaned(tmp_path):
    store = Store(tmp_path)
    key = config_key(CFG)
    old = tmp_path / f".{key}.csv.1.dead.tmp"
    other_old = tmp_path / ".0123456789abcdef.json.1.dead.tmp"
    fresh = tmp_path / ".0123456789abcdef.csv.2.beef.tmp"
    for p in (old, other_old, fresh):
        p.write_text("partial")
    past = time.time() - 3600
    os.utime(old, (past, past))
    os.utime(other_old, (past, past))
    store.save(CFG, table())
    assert not old.exists() and not other_old.exists()  # save cleans every key's stale leftovers
    assert fresh.exists()  # may belong to a writer in another process
    assert store.cleanup() == []
    assert store.cleanup(older_than_s=0) == [fresh]


def test_a_killed_checkpoint_writers_temp_file_in_a_store_folder_is_cleaned(tmp_path):
    """flkit.fl.run writes its checkpoint through a temp file named like the store's
    (.<name>.<pid>.<hex>.tmp): a stale one in a store folder goes with the next save."""
    from flkit import fl
    ckpt_tmp = fl.temp_path(tmp_path / "batch-0123.pt")
    assert ckpt_tmp.parent == tmp_path and ckpt_tmp.name.startswith(".batch-0123.pt.")
    ckpt_tmp.write_bytes(b"partial")
    past = time.time() - 3600
    os.utime(ckpt_tmp, (past, past))
    Store(tmp_path).save(CFG, table())
    assert not ckpt_tmp.exists()


# ---------------------------------------------------------------------------------------------- divergence

def test_nan_inf_stored_and_flagged(tmp_path):
    store = Store(tmp_path)
    t = table(rounds=6)
    t.loc[(t["round"] == 3) & (t["metric"] == "loss"), "value"] = np.nan
    t.loc[(t["round"] == 4) & (t["metric"] == "acc"), "value"] = np.inf
    t.loc[(t["round"] == 5) & (t["metric"] == "acc"), "value"] = -np.inf
    store.save(CFG, t)
    text = store.path(CFG).read_text()
    assert "\n3,loss,nan\n" in text and "\n4,acc,inf\n" in text and "\n5,acc,-inf\n" in text
    m = store.manifest(CFG)
    assert m["diverged"] is True and m["diverged_round"] == 3 and m["diverged_metrics"] == ["loss"]
    pd.testing.assert_frame_equal(store.load(CFG), t)


def test_first_divergence():
    t = table(rounds=5)
    assert first_divergence(t) is None
    t.loc[7, "value"] = np.inf  # round 3
    t.loc[9, "value"] = np.nan  # round 4
    assert first_divergence(t) == 3
    t2 = pd.concat([table(rounds=5).assign(seed=0), t.assign(seed=1)], ignore_index=True)
    by = first_divergence(t2, by="seed")
    assert np.isnan(by.loc[0]) and by.loc[1] == 3


# ---------------------------------------------------------------------------------------------- collect

def _fill(store):
    cfgs = []
    for method in ("fedavg", "fedau"):
        for alpha in (0.1, 1.0):
            cfg = {"method": method, "alpha": alpha, "seed": 0, "model": {"name": "cnn", "width": 8}}
            store.save(cfg, table(seed=int(alpha * 10)))
            cfgs.append(cfg)
    store.save({"method": "mifa", "alpha": 0.1, "seed": 0, "model": {"name": "mlp"}, "lr": [0.1, 0.2]}, table())
    return cfgs


def test_collect_joins_config_columns_and_filters(tmp_path):
    store = Store(tmp_path)
    cfgs = _fill(store)
    every = store.collect()
    assert len(every) == 5 * len(table())
    assert {"run_key", "method", "alpha", "seed", "model.name", "model.width", "lr", "round", "metric",
            "value"} <= set(every.columns)
    assert set(every["run_key"]) == {config_key(c) for c in cfgs} | {config_key(
        {"method": "mifa", "alpha": 0.1, "seed": 0, "model": {"name": "mlp"}, "lr": [0.1, 0.2]})}
    mifa = every[every["method"] == "mifa"]
    assert mifa["lr"].iloc[0] == (0.1, 0.2) and mifa["model.width"].isna().all()
    # the joined values belong to the right table
    one = every[(every["method"] == "fedau") & (every["alpha"] == 1.0)].reset_index(drop=True)
    pd.testing.assert_series_equal(one["value"], table(seed=10)["value"], check_names=False)

    fedau = store.collect(method="fedau")
    assert set(fedau["method"]) == {"fedau"} and set(fedau["alpha"]) == {0.1, 1.0}
    assert len(store.collect(method="fedau", alpha=1)) == len(table())  # 1 == 1.0 like the key
    assert set(store.collect(method={"fedau", "mifa"})["method"]) == {"fedau", "mifa"}
    assert set(store.collect(alpha=lambda a: a > 0.5)["alpha"]) == {1.0}
    assert set(store.collect(where={"model.name": "mlp"})["method"]) == {"mifa"}
    assert set(store.collect(model={"name": "cnn"})["method"]) == {"fedavg", "fedau"}
    assert len(store.collect(lr=[0.1, 0.2])) == len(table())
    assert store.collect(method="nope").empty
    with pytest.raises(KeyError, match="metod"):
        store.collect(metod="fedau")


def test_collect_renames_config_field_clashing_with_table_column(tmp_path):
    store = Store(tmp_path)
    t = pd.concat([table().assign(seed=s) for s in (0, 1)], ignore_index=True)
    store.save({"method": "fedavg", "seed": 7}, t)
    df = store.collect()
    assert set(df["seed"]) == {0, 1} and set(df["config.seed"]) == {7}
    assert len(store.collect(seed=7)) == len(t)


def test_collect_empty_and_missing_store(tmp_path):
    df = Store(tmp_path / "nothing").collect()
    assert df.empty and {"round", "metric", "value"} <= set(df.columns)


def test_collect_skips_and_warns_about_inconsistent_results(tmp_path):
    store = Store(tmp_path)
    cfgs = _fill(store)
    store.path(cfgs[0]).write_text("round,metric,value\n")
    with pytest.warns(UserWarning, match="inconsistent"):
        df = store.collect()
    assert config_key(cfgs[0]) not in set(df["run_key"]) and df["run_key"].nunique() == 4


# ---------------------------------------------------------------------------------------------- sweeps

def test_sweep_resumes_after_interruption(tmp_path):
    store = Store(tmp_path)
    configs = [{"method": "fedavg", "seed": s} for s in range(5)]
    calls = []

    def flaky(cfg):
        if len(calls) == 3:
            raise KeyboardInterrupt("interrupted")
        calls.append(cfg["seed"])
        return table(seed=cfg["seed"])

    with pytest.raises(KeyboardInterrupt):
        sweep(configs, flaky, store, progress=False)
    assert calls == [0, 1, 2] and [store.done(c) for c in configs] == [True] * 3 + [False] * 2

    calls.clear()

    def fn(cfg):
        calls.append(cfg["seed"])
        return table(seed=cfg["seed"])

    df = sweep(configs + [dict(configs[0])], fn, store, progress=False, desc="test")
    assert calls == [3, 4]  # only the missing ones
    assert list(pd.unique(df["seed"])) == [0, 1, 2, 3, 4]
    assert len(df) == 5 * len(table())
    for s in range(5):
        got = df[df["seed"] == s].reset_index(drop=True)
        pd.testing.assert_series_equal(got["value"], table(seed=s)["value"], check_names=False)
    assert all(store.manifest(c)["wall_time_s"] is not None for c in configs)

    calls.clear()
    sweep(configs, fn, store, progress=False)
    assert calls == []


def test_sweep_validates_all_configs_before_any_work(tmp_path):
    calls = []
    with pytest.raises(ValueError, match="lr"):
        sweep([{"seed": 0}, {"seed": 1, "lr": float("nan")}], lambda c: calls.append(c) or table(), Store(tmp_path),
              progress=False)
    assert calls == []


def test_sweep_batched_computes_only_missing(tmp_path):
    store = Store(tmp_path)
    configs = [{"method": m, "seed": s} for m in ("fedavg", "fedau") for s in range(4)]
    for c in configs[::3]:  # 0, 3, 6 are already done
        store.save(c, table(seed=c["seed"]))
    batches = []

    def fn_many(batch):
        batches.append([(c["method"], c["seed"]) for c in batch])
        return [table(seed=c["seed"]) for c in batch]

    df = sweep_batched(configs, fn_many, store, batch_size=2, progress=False)
    computed = [x for b in batches for x in b]
    assert sorted(computed) == sorted((c["method"], c["seed"]) for i, c in enumerate(configs) if i % 3)
    assert all(len(b) <= 2 for b in batches) and len(batches) == 3
    assert all(store.done(c) for c in configs) and df["run_key"].nunique() == len(configs)
    assert store.manifest(configs[1])["batch_size"] == 2

    batches.clear()
    sweep_batched(configs, fn_many, store, batch_size=2, progress=False)
    assert batches == []


def test_sweep_batched_group_by_and_errors(tmp_path):
    store = Store(tmp_path)
    configs = [{"method": m, "seed": s} for s in range(3) for m in ("fedavg", "fedau")]
    batches = []

    def fn_many(batch):
        batches.append({c["method"] for c in batch})
        return [table() for _ in batch]

    sweep_batched(configs, fn_many, store, batch_size=None, group_by="method", progress=False)
    assert batches == [{"fedavg"}, {"fedau"}]

    with pytest.raises(ValueError, match="returned 1 tables for a batch of 2"):
        sweep_batched([{"seed": 10}, {"seed": 11}], lambda b: [table()], store, batch_size=2, progress=False)
    assert not store.done({"seed": 10})
    with pytest.raises(ValueError, match="batch_size"):
        sweep_batched(configs, fn_many, store, batch_size=0)


# ---------------------------------------------------------------------------------------------- git

def test_git_commit_tolerates_absence(tmp_path, monkeypatch):
    results.git_commit.cache_clear()
    assert results.git_commit(tmp_path) is None  # not a repository

    def no_git(*a, **k):
        raise FileNotFoundError("git")

    monkeypatch.setattr(results.subprocess, "run", no_git)
    results.git_commit.cache_clear()
    assert results.git_commit() is None
    store = Store(tmp_path / "store")
    store.save(CFG, table())
    assert store.manifest(CFG)["git_commit"] is None and store.done(CFG)
    results.git_commit.cache_clear()


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_git_commit_reads_head_and_tolerates_no_commits(tmp_path):
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, env=env)
    results.git_commit.cache_clear()
    assert results.git_commit(tmp_path) is None  # repository without commits
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "x"],
                   cwd=tmp_path, check=True, env=env)
    results.git_commit.cache_clear()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True,
                          env=env).stdout.strip()
    assert results.git_commit(tmp_path) == head and len(head) == 40
    results.git_commit.cache_clear()


def test_book_store_location(tmp_path, monkeypatch):
    monkeypatch.setenv("FLKIT_RESULTS", str(tmp_path))
    assert results.book_store("fedau").root == tmp_path / "fedau"
    monkeypatch.delenv("FLKIT_RESULTS")
    assert results.book_store("cvar").root.parts[-2:] == ("results", "cvar")


def test_sweep_batched_takes_wall_time_from_table_attrs(tmp_path):
    store = Store(tmp_path)

    def fn_many(batch):
        tables = [pd.DataFrame({"round": [0], "metric": ["m"], "value": [1.0]}) for _ in batch]
        for t in tables:
            t.attrs["wall_time_s"] = 123.0  # e.g. a batch resumed from a checkpoint
            t.attrs["local_steps"] = "fused"  # other attrs go to the manifest as they are
        return tables

    sweep_batched([{"a": 1}, {"a": 2}], fn_many, store, progress=False)
    assert store.manifest({"a": 1})["wall_time_s"] == 123.0
    assert store.manifest({"a": 2})["local_steps"] == "fused"


def test_sweep_takes_a_resumed_runs_wall_time_from_table_attrs(tmp_path):
    """A run resumed from a checkpoint reports the wall time of all its pieces in attrs; the manifest records it,
    not the last piece's measured time. Without attrs the measured time is recorded."""
    store = Store(tmp_path)

    def fn(c):
        t = pd.DataFrame({"round": [0], "metric": ["m"], "value": [1.0]})
        if c["a"] == 1:
            t.attrs["wall_time_s"] = 4567.0
        return t

    sweep([{"a": 1}, {"a": 2}], fn, store, progress=False)
    assert store.manifest({"a": 1})["wall_time_s"] == 4567.0
    assert store.manifest({"a": 2})["wall_time_s"] < 60


# ---------------------------------------------------------------------------------------------- row order

def test_store_writes_rows_in_canonical_order_whatever_the_emission_order(tmp_path):
    """Rows sorted by round, metric, then the other columns but value (stable): a table emitted in any
    order (e.g. by a run resumed from a checkpoint) gives the same bytes."""
    rows = [(1, "t", 0.4, -1), (0, "test_acc", 0.1, -1), (0, "t", 0.0, -1), (1, "test_acc_class", 0.7, 1),
            (1, "test_acc_class", 0.6, 0), (10, "t", 0.5, -1), (2, "t", 0.45, -1), (1, "test_acc", 0.65, -1)]
    t = pd.DataFrame(rows, columns=["round", "metric", "value", "class"])
    want = [(0, "t", 0.0, -1), (0, "test_acc", 0.1, -1), (1, "t", 0.4, -1), (1, "test_acc", 0.65, -1),
            (1, "test_acc_class", 0.6, 0), (1, "test_acc_class", 0.7, 1), (2, "t", 0.45, -1), (10, "t", 0.5, -1)]
    assert list(results.canonical_order(t).itertuples(index=False, name=None)) == want
    a, b = Store(tmp_path / "a"), Store(tmp_path / "b")
    a.save(CFG, t)
    b.save(CFG, t.iloc[::-1])
    assert a.path(CFG).read_bytes() == b.path(CFG).read_bytes()
    assert list(a.load(CFG).itertuples(index=False, name=None)) == want
    assert a.path(CFG).read_text().splitlines()[1:3] == ["0,t,0,-1", "0,test_acc,0.1,-1"]
    # ties (same round, metric and class) keep their order: duplicates are not silently reordered
    dup = pd.DataFrame({"round": [3, 3, 0], "metric": ["m", "m", "m"], "value": [2.0, 1.0, 5.0]})
    assert results.canonical_order(dup)["value"].tolist() == [5.0, 2.0, 1.0]
    # missing values last; a column of mixed types compares as text
    gaps = pd.DataFrame({"round": [0, 0, 0, 0], "metric": ["m"] * 4, "value": [1.0, 2.0, 3.0, 4.0],
                         "who": ["b", None, "a", "a"], "x": [np.nan, 1.0, np.nan, 0.5]})
    assert results.canonical_order(gaps)["value"].tolist() == [4.0, 3.0, 1.0, 2.0]
    mixed = pd.DataFrame({"round": [0] * 4, "metric": ["m"] * 4, "value": [1.0, 2.0, 3.0, 4.0],
                          "who": pd.Series([2, "a", 10, None], dtype=object)})
    assert results.canonical_order(mixed)["value"].tolist() == [3.0, 1.0, 2.0, 4.0]  # "10" < "2" < "a", None


def test_sweep_batched_stores_each_table_under_its_own_config(tmp_path):
    store = Store(tmp_path)
    configs = [{"seed": s} for s in range(5)]

    def fn_many(batch):
        return [table(seed=10 * c["seed"]) for c in batch]

    df = sweep_batched(configs, fn_many, store, batch_size=3, progress=False)
    for c in configs:
        pd.testing.assert_frame_equal(store.load(c), table(seed=10 * c["seed"]))
        got = df[df["seed"] == c["seed"]].reset_index(drop=True)
        pd.testing.assert_series_equal(got["value"], table(seed=10 * c["seed"])["value"], check_names=False)


def test_melt_wide_and_back():
    import numpy as np
    import pandas as pd
    from flkit.results import melt_wide, pivot_wide
    df = pd.DataFrame(dict(kind=["a", "b"], n=[1.0, np.nan], x=[0.5, 2.0], ok=[True, False]))
    t = melt_wide(df, ["kind", "n"])
    assert {"round", "metric", "value"} <= set(t.columns) and (t["round"] == 0).all()
    back = pivot_wide(t, ["kind", "n"])
    assert back["x"].tolist() == [0.5, 2.0] and back["ok"].tolist() == [1.0, 0.0] and back["n"].tolist() == [1.0, -1.0]
    rounds = melt_wide(pd.DataFrame(dict(round=[3, 7], x=[1.0, 2.0])), ["round"])
    assert rounds["round"].tolist() == [3, 7] and pivot_wide(rounds, ["round"])["x"].tolist() == [1.0, 2.0]
