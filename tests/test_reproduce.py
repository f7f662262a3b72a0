"""The reproduce page's per-page commands run as written (checked with --dry-run) and its tables are
generated from the pages' metadata and the stores' manifests."""
from __future__ import annotations

import shlex

import pytest

from flkit import reproduce, run

PAGES = reproduce.pages()


def test_reproduce_page_tables_are_current():
    text = reproduce._PAGE.read_text()
    i, j = reproduce.generated(text)
    assert text[i:j].strip() == reproduce.markdown().strip(), "run `python -m flkit.reproduce --write`"


def test_every_source_notebook_has_a_row():
    assert sorted(PAGES["page"]) == sorted(f"{p.parent.name}/{p.stem}" for p in run.sources())


@pytest.mark.parametrize("command", list(PAGES["command"]), ids=list(PAGES["page"]))
def test_command_parses(command, capsys):
    argv = shlex.split(command)
    assert argv[:3] == [".venv/bin/python", "-m", "flkit.run"]
    assert run.main(argv[3:] + ["--dry-run"]) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "book/" in out, out      # the published parameters write the page itself


def test_store_compute_time_divides_batches(tmp_path, monkeypatch):
    import json
    (tmp_path / "results" / "x").mkdir(parents=True)
    where = [None, None, dict(cpu="AMD EPYC", kernel_path="AVX512, MKL_CBWR=AUTO"),
             dict(cpu="Intel Xeon", kernel_path="AVX2, MKL_CBWR=AUTO", gpu="NVIDIA H100")]
    for k, (wall, b) in enumerate([(60.0, 3), (60.0, 3), (60.0, 3), (30.0, 1)]):
        (tmp_path / "results" / "x" / f"{k}.json").write_text(json.dumps(
            dict(key=str(k), csv_sha256="h", wall_time_s=wall, batch_size=b, device="cpu", git_commit=None,
                 **({"platform": where[k]} if where[k] else {}))))
    monkeypatch.setattr(reproduce, "_REPO", tmp_path)
    s = reproduce.stores()
    assert s.to_dict("records") == [dict(store="results/x", runs=4, device="cpu", compute_minutes=1.5,
                                         without_commit=4,
                                         computed_on="AMD EPYC, AVX512 kernels; NVIDIA H100; not recorded")]


def test_page_runs_say_what_computed_the_runs_a_page_read(tmp_path, monkeypatch):
    """cvar/mnist read 20 runs computed on CUDA in one batch and 3 on a CPU: the page's row says so, per device,
    with the compute time that made them (not the seconds its execution took to read them)."""
    import json
    store = tmp_path / "results" / "cvar" / "mnist"
    store.mkdir(parents=True)
    names = []
    for k in range(23):
        gpu = k < 20
        (store / f"k{k}.json").write_text(json.dumps(dict(
            key=f"k{k}", wall_time_s=223.2 if gpu else 3429.8, batch_size=20 if gpu else 3,
            device="cuda" if gpu else "cpu",
            **({} if gpu else {"platform": dict(cpu="AMD EPYC", kernel_path="AVX512, MKL_CBWR=AUTO")}))))
        names.append(f"results/cvar/mnist/k{k}")
    monkeypatch.setattr(reproduce, "_REPO", tmp_path)
    record = {"read": names[:22], "computed": names[22:] + ["results/cvar/mnist/gone"]}
    assert reproduce.page_runs(record) == ("3 runs on cpu (AMD EPYC, AVX512 kernels), 57.2 min; "
                                           "20 runs on cuda (platform not recorded), 3.7 min; "
                                           "1 not in the stores here (2 of them computed in the execution)")
    assert reproduce.page_runs({"read": [], "computed": []}) == "none (computed in the execution)"
    assert reproduce.page_runs(None).startswith("not recorded")


def test_commit_in_words():
    assert reproduce._commit({"commit": "abc1234", "modified": []}) == "abc1234"
    assert reproduce._commit({"commit": "abc1234", "modified": ["flkit/a.py", "notebooks/b.ipynb"]}) == \
        "abc1234 with 2 files modified (flkit/a.py, notebooks/b.ipynb)"
    assert reproduce._commit({"commit": "4133ba4+modified"}) == "4133ba4 with files modified (not listed)"
    assert reproduce._commit({}) == "not recorded"
