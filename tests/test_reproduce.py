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
