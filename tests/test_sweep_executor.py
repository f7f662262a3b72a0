"""flkit.results sweeps on an executor: the same stored files in-process, on a process pool and on Dask."""
from __future__ import annotations

import concurrent.futures
import multiprocessing
import time

import numpy as np
import pandas as pd
import pytest

from flkit import results
from flkit.results import Store, sweep, sweep_batched
from flkit.seeding import rng

CONFIGS = [{"seed": s, "lr": lr, "rounds": 5} for s in range(3) for lr in (0.1, 0.5)]
COPY = {"seed": 0, "lr": 0.1, "rounds": 5.0}  # the same config as CONFIGS[0] (5 == 5.0): run once


def job(config):
    """A small deterministic run: x <- x/2 + lr * noise for `rounds` rounds, noise from the config's
    "data" stream; records |x| and mean(x) per round."""
    if config.get("fail"):
        raise RuntimeError(f"job failed on purpose (seed {config['seed']})")
    time.sleep(config.get("sleep", 0))
    g = rng(config["seed"], "data")
    x = g.normal(size=4)
    rows = []
    for r in range(int(config["rounds"])):
        x = 0.5 * x + config["lr"] * g.normal(size=4)
        rows += [{"round": r, "metric": "norm", "value": float(np.linalg.norm(x))},
                 {"round": r, "metric": "mean", "value": float(x.mean())}]
    return pd.DataFrame(rows)


def job_many(batch):
    tables = [job(c) for c in batch]
    for t in tables:
        t.attrs["how"] = "batched"  # attrs travel back from the worker into the manifest
    return tables


class Counting(concurrent.futures.Executor):
    """Forwards to `inner` and counts the submitted jobs."""

    def __init__(self, inner):
        self.inner, self.submitted = inner, 0

    def submit(self, fn, /, *args, **kwargs):
        self.submitted += 1
        return self.inner.submit(fn, *args, **kwargs)


class Synchronous(concurrent.futures.Executor):
    """Runs each job at submit time: every future is already finished when the sweep waits."""

    def submit(self, fn, /, *args, **kwargs):
        f = concurrent.futures.Future()
        try:
            f.set_result(fn(*args, **kwargs))
        except Exception as e:
            f.set_exception(e)
        return f


class Handle:
    """A job handle that is not a concurrent.futures.Future (like a submitit Job)."""

    def __init__(self, value, late):
        self.value, self.late = value, late

    def done(self):
        if self.late:
            self.late = False
            return False
        return True

    def result(self):
        return self.value

    def exception(self):
        return None

    def cancel(self):
        return False


class HandleExecutor:
    """submit() returns Handles; the odd-numbered jobs report done one poll late, so the completion
    order differs from the submission order."""

    def __init__(self):
        self.n = 0

    def submit(self, fn, *args):
        self.n += 1
        return Handle(fn(*args), late=self.n % 2 == 0)


def stored_bytes(store, configs):
    return {results.config_key(c): store.path(c).read_bytes() for c in configs}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The in-process sweep: the store and the returned table every executor must reproduce."""
    store = Store(tmp_path_factory.mktemp("inprocess"))
    df = sweep(CONFIGS + [COPY], job, store, progress=False)
    return store, df


@pytest.fixture(scope="module")
def pool():
    with concurrent.futures.ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn")) as ex:
        yield ex


def test_in_process_reference_is_the_job_itself(reference):
    store, df = reference
    assert sorted(p.name for p in store.root.glob("*.csv")) == sorted(f"{results.config_key(c)}.csv" for c in CONFIGS)
    for c in CONFIGS:
        # the store writes the rows in its canonical order (round, metric): job emits norm before mean
        pd.testing.assert_frame_equal(store.load(c), results.canonical_order(job(c)), check_exact=False,
                                      rtol=1e-7, atol=0)
    assert df["run_key"].nunique() == len(CONFIGS) and len(df) == len(CONFIGS) * 10


def test_process_pool_stores_the_same_bytes_and_resumes(reference, pool, tmp_path):
    ref_store, ref_df = reference
    store, ex = Store(tmp_path), Counting(pool)
    df = sweep(CONFIGS + [COPY], job, store, progress=False, executor=ex)
    assert ex.submitted == len(CONFIGS)  # the duplicate config runs once
    assert stored_bytes(store, CONFIGS) == stored_bytes(ref_store, CONFIGS)
    pd.testing.assert_frame_equal(df, ref_df)
    m = store.manifest(CONFIGS[0])
    assert m["device"] == "cpu" and m["wall_time_s"] is not None and m["rows"] == 10

    store.remove(CONFIGS[3])
    df = sweep(CONFIGS, job, store, progress=False, executor=ex)
    assert ex.submitted == len(CONFIGS) + 1  # only the missing run
    pd.testing.assert_frame_equal(df, ref_df)


def test_sweep_batched_on_process_pool(reference, pool, tmp_path):
    ref_store, ref_df = reference
    store, ex = Store(tmp_path), Counting(pool)
    df = sweep_batched(CONFIGS, job_many, store, batch_size=2, group_by="lr", progress=False, executor=ex)
    assert ex.submitted == 4  # lr=0.1: 2 + 1 configs, lr=0.5: 2 + 1
    assert stored_bytes(store, CONFIGS) == stored_bytes(ref_store, CONFIGS)
    pd.testing.assert_frame_equal(df, ref_df)
    sizes = [store.manifest(c)["batch_size"] for c in CONFIGS]  # seeds 0, 1 batch together, seed 2 alone
    assert sizes == [2, 2, 2, 2, 1, 1]
    assert {store.manifest(c)["how"] for c in CONFIGS} == {"batched"}


def test_wall_time_is_measured_inside_the_job(tmp_path):
    store = Store(tmp_path)
    configs = [{"seed": s, "lr": 0.1, "rounds": 1, "sleep": 0.15} for s in range(3)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as ex:  # the jobs queue one after the other
        sweep(configs, job, store, progress=False, executor=ex)
    walls = [store.manifest(c)["wall_time_s"] for c in configs]
    assert all(0.15 <= w < 0.3 for w in walls), walls  # timed in the caller, the third would take 0.45 s


def test_job_error_propagates_after_finished_runs_are_saved(reference, tmp_path):
    ref_store, _ = reference
    bad = {"seed": 9, "lr": 0.1, "rounds": 5, "fail": True}
    configs = CONFIGS[:2] + [bad] + CONFIGS[2:]
    store = Store(tmp_path / "threads")
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as ex:  # first in, first run
        with pytest.raises(RuntimeError, match="on purpose"):
            sweep(configs, job, store, progress=False, executor=ex)
    assert store.done(CONFIGS[0]) and store.done(CONFIGS[1]) and not store.done(bad)
    assert stored_bytes(store, CONFIGS[:2]) == stored_bytes(ref_store, CONFIGS[:2])

    store = Store(tmp_path / "sync")  # all jobs finished before the failure is seen: all are kept
    with pytest.raises(RuntimeError, match="on purpose"):
        sweep(configs, job, store, progress=False, executor=Synchronous())
    assert [store.done(c) for c in CONFIGS] == [True] * len(CONFIGS) and not store.done(bad)
    assert stored_bytes(store, CONFIGS) == stored_bytes(ref_store, CONFIGS)

    store = Store(tmp_path / "batched")
    with pytest.raises(ValueError, match="returned 1 tables for a batch of 2"), \
            pytest.warns(UserWarning, match="could not save a finished job"):  # the other two batches
        sweep_batched(CONFIGS, lambda b: [job(b[0])], store, batch_size=2, progress=False, executor=Synchronous())
    assert not any(store.root.glob("*.json"))


def test_handles_that_are_not_futures_are_polled(reference, tmp_path):
    ref_store, ref_df = reference
    store = Store(tmp_path)
    df = sweep(CONFIGS, job, store, progress=False, executor=HandleExecutor())
    assert stored_bytes(store, CONFIGS) == stored_bytes(ref_store, CONFIGS)
    pd.testing.assert_frame_equal(df, ref_df)


def test_arguments_are_checked_before_anything_is_submitted(tmp_path):
    ex = Counting(Synchronous())
    with pytest.raises(TypeError, match="executor must be"):
        sweep(CONFIGS, job, Store(tmp_path), progress=False, executor=object())
    with pytest.raises(ValueError, match="lr"):
        sweep(CONFIGS + [{"seed": 5, "lr": float("nan")}], job, Store(tmp_path), progress=False, executor=ex)
    with pytest.raises(ValueError, match="batch_size"):
        sweep_batched(CONFIGS, job_many, Store(tmp_path), batch_size=0, progress=False, executor=ex)
    with pytest.raises(TypeError, match="executor must be"):
        sweep_batched(CONFIGS, job_many, Store(tmp_path), progress=False, executor="dask")
    assert ex.submitted == 0 and not any(tmp_path.iterdir())


def test_dask_distributed_stores_the_same_bytes(reference, tmp_path):
    distributed = pytest.importorskip("distributed")
    ref_store, ref_df = reference
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        ex = client.get_executor()
        df = sweep(CONFIGS + [COPY], job, Store(tmp_path / "sweep"), progress=False, executor=ex)
        df_b = sweep_batched(CONFIGS, job_many, Store(tmp_path / "batched"), batch_size=4, progress=False,
                             executor=ex)
    assert stored_bytes(Store(tmp_path / "sweep"), CONFIGS) == stored_bytes(ref_store, CONFIGS)
    assert stored_bytes(Store(tmp_path / "batched"), CONFIGS) == stored_bytes(ref_store, CONFIGS)
    pd.testing.assert_frame_equal(df, ref_df)
    pd.testing.assert_frame_equal(df_b, ref_df)
