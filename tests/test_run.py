"""The papermill runner: where outputs go, one-line errors before any kernel starts, one-line errors from
inside a notebook, --all skipping, atomic output, SIGTERM, and the removal of what a killed run left. Most
tests replace papermill's execution with a copy (no kernel); four (marked slow) run a real kernel on a
two-cell notebook."""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import papermill
import pytest
from nbformat.v4 import new_code_cell, new_notebook
from papermill.exceptions import PapermillExecutionError

from flkit import params, run

PARAMS = 'profile = "smoke"   # smoke | reduced | paper\nseeds = None\nrounds = None\ndevice = "auto"'


def _nb(path, body="x = profile", params=PARAMS, profile=None):
    """A two-cell notebook; `profile` records an executed copy's profile in its metadata as the runner does."""
    nb = new_notebook(cells=[new_code_cell(params, metadata={"tags": ["parameters"]}), new_code_cell(body)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    if profile:
        nb.metadata["flkit"] = {"parameters": {"profile": profile}}
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A tiny repository: notebooks/ch/a.ipynb (published in the book with profile 'paper'),
    notebooks/ch/b.ipynb (no executed copy; takes `seed`, not `seeds`), notebooks/ch/c.ipynb (published
    'reduced'). run.REPO, SOURCES and BOOK point into it."""
    monkeypatch.setattr(run, "REPO", tmp_path)
    monkeypatch.setattr(run, "SOURCES", tmp_path / "notebooks")
    monkeypatch.setattr(run, "BOOK", tmp_path / "book")
    monkeypatch.chdir(tmp_path)
    _nb(tmp_path / "notebooks/ch/a.ipynb")
    _nb(tmp_path / "notebooks/ch/b.ipynb", params='profile = "smoke"\nseed = 0\ndevice = "auto"')
    _nb(tmp_path / "notebooks/ch/c.ipynb")
    _nb(tmp_path / "book/ch/a.ipynb", profile="paper")
    _nb(tmp_path / "book/ch/c.ipynb", profile="reduced")
    return tmp_path


def _snapshot(root):
    """Every file's bytes and every folder's mtime (a file created and removed again changes it)."""
    return {p: p.read_bytes() if p.is_file() else p.stat().st_mtime_ns for p in [root, *sorted(root.rglob("*"))]}


@pytest.fixture
def fake_papermill(monkeypatch):
    """papermill.execute_notebook replaced by a copy with the parameters injected (no kernel); records calls."""
    calls = []

    def execute_notebook(input_path, output_path, parameters=None, **kwargs):
        calls.append((input_path, dict(parameters or {})))
        nb = nbformat.read(input_path, as_version=4)
        nb.cells.insert(1, new_code_cell(repr(parameters), metadata={"tags": ["injected-parameters"]}))
        nbformat.write(nb, output_path)

    monkeypatch.setattr(papermill, "execute_notebook", execute_notebook)
    monkeypatch.setattr(run, "_machine", lambda: "test machine")
    return calls


@pytest.fixture
def no_kernel(monkeypatch):
    """Fails the test if a notebook is executed."""
    def refuse(*args, **kwargs):
        raise AssertionError("a kernel was started")
    monkeypatch.setattr(papermill, "execute_notebook", refuse)


# ------------------------------------------------------------------------------------------------ destinations
def test_destination_follows_the_published_parameters(tree):
    a, b, c = (tree / f"notebooks/ch/{n}.ipynb" for n in "abc")
    book, scratch = tree / "book/ch", tree / "results/tmp/notebooks/ch"
    assert run.published_profile(a) == "paper" and run.published_profile(b) is None
    assert run.destination(a, "paper")[0] == book / "a.ipynb"
    for profile in ("smoke", "reduced", None):
        out, why = run.destination(a, profile)
        assert out == scratch / "a.ipynb"
        assert why == (f"not the book: book/ch/a.ipynb keeps its published 'paper' run; this run differs in "
                       f"profile={params._yaml(profile)} (published: paper); --to-book replaces it")
    assert run.destination(a, "smoke", to_book=True)[0] == book / "a.ipynb"
    assert [run.destination(b, p)[0] for p in ("paper", "reduced", "smoke")] == \
        [book / "b.ipynb", book / "b.ipynb", scratch / "b.ipynb"]
    assert [run.destination(c, p)[0] for p in ("paper", "reduced")] == [scratch / "c.ipynb", book / "c.ipynb"]


def test_all_at_smoke_leaves_the_book_untouched(tree, fake_papermill, capsys):
    before = _snapshot(tree / "book")
    assert run.main(["--all", "-p", "profile", "smoke", "-p", "seeds", "[1, 2]"]) == 0
    assert _snapshot(tree / "book") == before
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "skip -p seeds for notebooks/ch/b.ipynb: it has no such parameter"
    assert [p for _, p in fake_papermill] == [{"profile": "smoke", "seeds": [1, 2]}, {"profile": "smoke"},
                                              {"profile": "smoke", "seeds": [1, 2]}]
    for name in "abc":
        written = tree / f"results/tmp/notebooks/ch/{name}.ipynb"
        assert nbformat.read(written, as_version=4).metadata["flkit"]["parameters"]["profile"] == "smoke"
        done = [line for line in out if line.startswith(f"done notebooks/ch/{name}.ipynb in ")]
        assert len(done) == 1 and done[0].endswith(f" s -> results/tmp/notebooks/ch/{name}.ipynb")
    assert out[-1].startswith("3 notebooks in ") and out[-1].endswith(": 0 written into book/, 3 elsewhere")
    assert not list((tree / "results/tmp/notebooks/ch").glob(".*")), "no temporary file left beside the output"


def test_published_profile_writes_the_page_and_out_anywhere(tree, fake_papermill, capsys):
    assert run.main(["notebooks/ch/a.ipynb", "-p", "profile", "paper"]) == 0
    meta = nbformat.read(tree / "book/ch/a.ipynb", as_version=4).metadata
    assert meta["flkit"]["parameters"] == {"profile": "paper", "seeds": None, "rounds": None, "device": "auto"}
    assert meta["flkit"]["source"] == "notebooks/ch/a.ipynb" and meta["flkit"]["machine"] == "test machine"
    assert run.main(["notebooks/ch/c.ipynb", "--to-book"]) == 0      # smoke, but asked for
    assert run.published_profile(tree / "notebooks/ch/c.ipynb") == "smoke"
    assert run.main(["notebooks/ch/b.ipynb", "--out", str(tree / "x" / "b.ipynb")]) == 0
    assert (tree / "x/b.ipynb").is_file() and not (tree / "book/ch/b.ipynb").exists()
    assert capsys.readouterr().out.splitlines()[0] == "run notebooks/ch/a.ipynb (profile 'paper') -> book/ch/a.ipynb"


def test_html_writes_a_page_to_look_at_never_into_the_book(tree, fake_papermill, capsys):
    assert run.main(["notebooks/ch/a.ipynb", "-p", "profile", "paper", "--html"]) == 0     # the book page
    page = tree / "results/tmp/notebooks/ch/a.html"
    assert page.is_file() and "<span class=\"n\">profile</span>" in page.read_text()
    assert not list((tree / "book").rglob("*.html"))
    assert capsys.readouterr().out.splitlines()[-1] == "html results/tmp/notebooks/ch/a.html"
    assert run.main(["notebooks/ch/b.ipynb", "--out", str(tree / "x" / "b.ipynb"), "--html"]) == 0
    assert (tree / "x" / "b.html").is_file()
    assert not list(tree.rglob(".*.tmp"))


def test_dry_run_runs_nothing(tree, no_kernel, capsys):
    assert run.main(["notebooks/ch/a.ipynb", "--dry-run"]) == 0
    assert capsys.readouterr().out == ("would run notebooks/ch/a.ipynb (profile 'smoke') -> "
                                       "results/tmp/notebooks/ch/a.ipynb (not the book: book/ch/a.ipynb keeps its "
                                       "published 'paper' run; this run differs in profile=smoke (published: "
                                       "paper); --to-book replaces it)\n")
    assert not (tree / "results").exists()


def test_only_the_published_parameters_replace_a_page(tree, fake_papermill, capsys):
    """The published profile with other seeds (the README's example of a re-run with new parameters) leaves
    the page alone; the published parameters, on another device, replace it."""
    assert run.main(["notebooks/ch/a.ipynb", "-p", "profile", "paper"]) == 0        # publishes every parameter
    page = (tree / "book/ch/a.ipynb").read_bytes()
    assert run.main(["notebooks/ch/a.ipynb", "-p", "profile", "paper", "-p", "seeds", "[0, 1, 2]"]) == 0
    assert (tree / "book/ch/a.ipynb").read_bytes() == page
    out = capsys.readouterr().out
    assert "-> results/tmp/notebooks/ch/a.ipynb (not the book: book/ch/a.ipynb keeps its published 'paper' run; " \
           "this run differs in seeds=[0, 1, 2] (published: null); --to-book replaces it)" in out
    assert run.destination(tree / "notebooks/ch/a.ipynb", {"profile": "paper", "seeds": None, "rounds": None,
                                                           "device": "cuda"})[0] == tree / "book/ch/a.ipynb"


# ------------------------------------------------------------------------- one line per problem, exit status 2
@pytest.mark.parametrize("argv, line", [
    (["-p", "seeds", "[0, 1"], "error: -p seeds '[0, 1': the value must be YAML (expected ',' or ']', but got "
                               "'<stream end>'), e.g. -p seeds \"[0, 1, 2]\", -p rounds 100, -p profile paper"),
    (["-p", "profil", "paper"], "error: notebooks/ch/a.ipynb: -p profil: no such parameter (did you mean profile?); "
                                "it takes device, profile, rounds, seeds"),
    (["-p", "seeds", "3"], "error: notebooks/ch/a.ipynb: -p seeds 3: seeds must be a list of distinct ints >= 0, "
                           "e.g. [0, 1, 2], or null (the profile's)"),
    (["-p", "seeds", "[1, 1]"], "error: notebooks/ch/a.ipynb: -p seeds '[1, 1]': seeds must be a list of distinct "
                                "ints >= 0, e.g. [0, 1, 2], or null (the profile's)"),
    (["-p", "rounds", "abc"], "error: notebooks/ch/a.ipynb: -p rounds abc: rounds must be an int >= 1, got 'abc', "
                              "or null (the profile's)"),
    (["-p", "profile", "5"], "error: notebooks/ch/a.ipynb: -p profile 5: profile must be one of paper, reduced, smoke "
                             "(the profiles of this page) [parameters cell: smoke | reduced | paper]"),
    (["-p", "device", "null"], "error: notebooks/ch/a.ipynb: -p device null: device has no null form here; "
                               "the default is auto"),
    (["-p", "device", "0"], "error: notebooks/ch/a.ipynb: -p device 0: device must be auto, cpu, cuda or cuda:<index>"),
    (["-p", "device", "gpu"],
     "error: notebooks/ch/a.ipynb: -p device gpu: device must be auto, cpu, cuda or cuda:<index>"),
])
def test_bad_value_is_one_line_before_any_kernel(tree, no_kernel, capsys, argv, line):
    assert run.main(["notebooks/ch/a.ipynb", *argv]) == 2
    err = capsys.readouterr().err
    assert err == line + "\n"
    assert not (tree / "results").exists()


@pytest.mark.parametrize("argv, line", [
    (["book/ch/a.ipynb"], "error: book/ch/a.ipynb is the book's executed copy, not a source: pass the source "
                          "notebooks/ch/a.ipynb"),
    (["notebooks/ch/aa.ipynb"], "error: no such notebook: notebooks/ch/aa.ipynb; did you mean notebooks/ch/a.ipynb?"),
    (["--all", "-p", "seds", "[0]"], "error: -p seds: no notebook declares this parameter"),
    (["--all", "-p", "profile", "full"], "error: -p profile full: no notebook has this profile"),
    (["--all", "-p", "seed", "-1"], "error: notebooks/ch/b.ipynb: -p seed -1: seed must be an int >= 0, e.g. 0"),
])
def test_bad_notebook_or_all_is_one_line(tree, no_kernel, capsys, argv, line):
    assert run.main(argv) == 2
    assert capsys.readouterr().err == line + "\n"


def test_every_problem_reported_at_once(tree, no_kernel, capsys):
    assert run.main(["notebooks/ch/a.ipynb", "-p", "seeds", "3", "-p", "rounds", "0", "-p", "sed", "1"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(": ")[2] for line in lines] == ["-p sed", "-p seeds 3", "-p rounds 0"]


@pytest.mark.parametrize("name, value, default, expected", [
    ("seeds", [0, 3], None, None), ("seeds", None, None, None), ("seeds", 3, None, "seeds must be a list"),
    ("seeds", [], None, "seeds must be a list"), ("seeds", [-1], None, "seeds must be a list"),
    ("mnist_seeds", [True], None, "mnist_seeds must be a list"), ("seed", 0, 0, None),
    ("setting_seed", 1.5, None, "setting_seed must be an int >= 0"), ("rounds", 100, None, None),
    ("rounds", {0.1: 200}, None, None), ("rounds", {0.1: 0}, None, "rounds[0.1] must be an int >= 1, got 0"),
    ("rounds", 2.5, None, "rounds must be an int >= 1, got 2.5"), ("local_steps", 5, None, None),
    ("local_steps", 0, None, "local_steps must be an int >= 1"),
    ("mc_draws", True, None, "mc_draws must be an int >= 1"),
    ("eta", 0.1, None, None), ("beta", 1.0, None, "beta must lie in [0, 1), got 1.0"),
    ("checkpoints", [0, 10], None, None), ("checkpoints", 10, None, "checkpoints must be a list of ints >= 0"),
    ("compute_missing", False, True, None), ("compute_missing", 0, True, "compute_missing must be true or false"),
    ("smooth", 1, 0.9, None), ("smooth", "x", 0.9, "smooth must be a number, e.g. 0.9"),
    ("dataset", "cifar10", None, None), ("dataset", 3, None, None), ("profile", "paper", "smoke", None),
    ("profile", "reduced", "smoke", "profile must be one of paper, smoke"),
])
def test_value_problem(name, value, default, expected):
    why = params.value_problem(name, value, default, ["paper", "smoke"])
    assert why == expected if expected is None else why.startswith(expected)


def test_page_profiles_come_from_the_chapter_code():
    profiles = params.page_profiles
    assert profiles(run.SOURCES / "mifa" / "quadratic.ipynb") == ["paper", "smoke"]                # PROFILES[page]
    assert profiles(run.SOURCES / "cvar" / "fmnist_table.ipynb") == ["paper", "reduced", "smoke"]  # experiment
    assert profiles(run.SOURCES / "availability" / "markov.ipynb") == ["paper", "smoke"]           # module per page
    assert profiles(run.SOURCES / "appendix" / "engine.ipynb") == ["paper", "smoke"]               # from the comment


def test_needs_exactly_one_parameters_cell(tmp_path):
    nb = new_notebook(cells=[new_code_cell("profile = 'smoke'")])
    nbformat.write(nb, tmp_path / "b.ipynb")
    with pytest.raises(ValueError, match="exactly one cell tagged 'parameters', found 0"):
        params.declared_parameters(tmp_path / "b.ipynb")


def test_execute_refuses_before_running(tmp_path, no_kernel):
    src = _nb(tmp_path / "a.ipynb")
    with pytest.raises(run.ParameterError, match=r"-p profil: no such parameter \(did you mean profile\?\); "
                                                  r"it takes device, profile, rounds, seeds"):
        run.execute(src, {"profil": "paper"}, out=tmp_path / "out.ipynb")
    with pytest.raises(run.ParameterError, match="is not under notebooks/: give --out PATH"):
        run.execute(src, {"profile": "paper"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.ipynb"]


def test_cli_rejects_bad_arguments(capsys):
    for argv, message in [([], "give notebook paths or --all"),
                          (["x.ipynb", "--out", "y.ipynb", "--to-book"], "--out and --to-book exclude each other")]:
        with pytest.raises(SystemExit):
            run.main(argv)
        assert message in capsys.readouterr().err


# ------------------------------------------------------------------------------- errors inside the notebook
def _raise_in_notebook(*args, **kwargs):
    raise PapermillExecutionError(1, 2, "s = profile(p)", "ValueError", "unknown profile 'full'; choose one of\n"
                                  "['paper', 'smoke']", ["Traceback line 1", "ValueError: unknown profile"])


@pytest.mark.parametrize("debug", [False, True])
def test_error_inside_the_notebook_is_one_line(tree, monkeypatch, capsys, debug):
    monkeypatch.setattr(papermill, "execute_notebook", _raise_in_notebook)
    before = _snapshot(tree / "book")
    assert run.main(["notebooks/ch/a.ipynb", "-p", "profile", "paper"] + ["--debug"] * debug) == 1
    err = capsys.readouterr().err
    line = ("error: notebooks/ch/a.ipynb: ValueError: unknown profile 'full'; choose one of "
            "['paper', 'smoke']; nothing written to book/ch/a.ipynb")
    if debug:
        assert err.startswith("Traceback (most recent call last):") and "Traceback line 1" in err
        assert err.endswith("\n" + line + "\n")
    else:
        assert err == line + " (--debug prints the traceback)\n"
    assert _snapshot(tree / "book") == before


def test_other_errors_are_one_line_too(tree, monkeypatch, capsys):
    def dead(*args, **kwargs):
        raise RuntimeError("Kernel died before replying to kernel_info")
    monkeypatch.setattr(papermill, "execute_notebook", dead)
    assert run.main(["notebooks/ch/b.ipynb"]) == 1
    assert capsys.readouterr().err == ("error: notebooks/ch/b.ipynb: RuntimeError: Kernel died before replying to "
                                       "kernel_info; nothing written to results/tmp/notebooks/ch/b.ipynb "
                                       "(--debug prints the traceback)\n")


# --------------------------------------------------------------------------- Fed-CVaR-Avg range checks
CVAR_PAGES = run.SOURCES / "cvar"


@pytest.mark.parametrize("params, match", [
    ({"rounds": -5}, "rounds must be an int >= 1, got -5"),
    ({"rounds": 0, "profile": "paper"}, "rounds must be an int >= 1, got 0"),
    ({"seeds": []}, r"seeds must be a list of distinct ints >= 0, e.g. \[0, 1, 2\]"),
    ({"profile": "full"}, "profile must be one of paper, reduced, smoke"),
    ({"rounds": {0.1: 5}}, r"cvar/mnist.ipynb: rounds must be an integer >= 1, got \{0.1: 5\}"),  # check_values
])
def test_cvar_page_values_refused_before_running(tmp_path, no_kernel, params, match):
    with pytest.raises(run.ParameterError, match=match):
        run.execute(CVAR_PAGES / "mnist.ipynb", params, out=tmp_path / "mnist.ipynb")
    assert not list(tmp_path.iterdir())


def test_cli_rejects_a_cvar_value_its_settings_refuse(tmp_path, no_kernel, capsys):
    argv = [str(CVAR_PAGES / "fmnist_table.ipynb"), "-p", "rounds", "{0.5: 3}", "--out", str(tmp_path / "x.ipynb")]
    assert run.main(argv) == 2
    assert capsys.readouterr().err == ("error: notebooks/cvar/fmnist_table.ipynb: rounds must be an integer >= 1, "
                                       "got {0.5: 3}\n")
    assert not list(tmp_path.iterdir())


def test_every_cvar_page_is_checked_and_in_range_values_pass():
    pages = sorted(CVAR_PAGES.glob("*.ipynb"))
    assert [p.stem for p in pages] == sorted(params.CVAR_EXPERIMENTS)
    for page in pages:
        defaults = params.declared_parameters(page)
        params.check_values(page, defaults)
        params.check_values(page, {**defaults, "rounds": 3, "seeds": [0, 2]})
        with pytest.raises(ValueError, match="rounds must be an integer >= 1( or None)?, got -1"):
            params.check_values(page, {**defaults, "rounds": -1})


# ------------------------------------------------------------------------ parameters that take a dict (MIFA)
MIFA_QUADRATIC = run.SOURCES / "mifa" / "quadratic.ipynb"
DICT_HINT = ("rounds takes a dict with one entry per participation probability p of p_values (0.01, 0.1, 0.5), "
             "e.g. -p rounds '{{0.01: {}, 0.1: {}, 0.5: {}}}' (profile {}'s), or null (the profile's) "
             "[parameters cell: dict p -> number of rounds T]")


@pytest.mark.parametrize("argv, line", [
    (["-p", "profile", "paper", "-p", "rounds", "100"],
     "-p rounds 100: " + DICT_HINT.format(10000, 2000, 2000, "paper")),
    (["-p", "rounds", "-5"], "-p rounds -5: " + DICT_HINT.format(600, 300, 200, "smoke")),
    (["-p", "rounds", "{0.01: 10, 0.1: 10}"], "-p rounds '{0.01: 10, 0.1: 10}': rounds has no entry for 0.5: "
                                             + DICT_HINT.format(600, 300, 200, "smoke")),
    (["-p", "rounds", "{0.01: 10, 0.1: 10, 0.5: -3}"], "-p rounds '{0.01: 10, 0.1: 10, 0.5: -3}': "
                                                        "rounds[0.5] must be an int >= 1, got -3 "
                                                        "[parameters cell: dict p -> number of rounds T]"),
])
def test_a_dict_parameter_refuses_a_number_with_the_right_hint(no_kernel, capsys, argv, line):
    """MIFA's `rounds` is a dict p -> rounds: a number (on which the notebook's first cell would crash) is
    refused before any kernel, with a hint that shows the dict it takes."""
    assert run.main([str(MIFA_QUADRATIC), *argv, "--dry-run"]) == 2
    assert capsys.readouterr().err == f"error: notebooks/mifa/quadratic.ipynb: {line}\n"


def test_a_dict_parameter_accepts_a_dict_for_every_p(no_kernel, capsys):
    ok = [[], ["-p", "rounds", "{0.01: 10, 0.1: 10, 0.5: 10}"],
          ["-p", "p_values", "[0.2]", "-p", "rounds", "{0.2: 30}"], ["-p", "rounds", "null"]]
    for argv in ok:
        assert run.main([str(MIFA_QUADRATIC), *argv, "--dry-run"]) == 0, capsys.readouterr().err
    assert run.main([str(MIFA_QUADRATIC), "-p", "p_values", "[0.2]", "-p", "rounds", "{0.5: 30}", "--dry-run"]) == 2
    assert "rounds has no entry for 0.2" in capsys.readouterr().err


# ------------------------------------------------------------------------ --list, --help, --published
def test_list_shows_every_parameter_with_default_and_allowed_values(tree, no_kernel, capsys):
    assert run.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert out.split("\n\n")[0].splitlines() == [
        "notebooks/ch/a.ipynb",
        "  published in book/ch/a.ipynb by: python -m flkit.run notebooks/ch/a.ipynb",
        "  -p profile  default smoke; takes one of paper, reduced, smoke",
        "              (smoke | reduced | paper)",
        "  -p seeds    default null; takes a list of distinct ints >= 0, or null (the profile's)",
        "  -p rounds   default null; takes an int >= 1, or null (the profile's)",
        "  -p device   default auto; takes auto, cpu, cuda or cuda:<index>"]
    assert "notebooks/ch/b.ipynb\n  no published page yet\n" in out
    assert "-p seed     default 0; takes an int >= 0" in out
    assert run.main(["--list", "notebooks/ch/c.ipynb"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "notebooks/ch/c.ipynb"
    assert run.main(["--list", "notebooks/ch/zz.ipynb"]) == 2
    assert capsys.readouterr().err.startswith("error: no such notebook: notebooks/ch/zz.ipynb")


def test_list_of_the_book_names_the_published_command_and_the_dict(capsys):
    assert run.main(["--list", str(MIFA_QUADRATIC)]) == 0
    out = capsys.readouterr().out
    assert "  published in book/mifa/quadratic.ipynb by: python -m flkit.run notebooks/mifa/quadratic.ipynb " \
           "-p profile paper\n" in out
    assert ("  -p rounds    default null; takes a dict like {0.01: 10000, 0.1: 2000, 0.5: 2000} (profile paper's), "
            "or null (the profile's)\n") in out


def test_help_names_list_and_every_notebook(capsys):
    with pytest.raises(SystemExit):
        run.main(["--help"])
    out = capsys.readouterr().out
    assert "--list" in out and "--published" in out
    assert all(f"  {run._show(p)}\n" in out for p in run.sources())


def test_published_runs_each_page_as_published(tree, fake_papermill, capsys):
    run.main(["notebooks/ch/a.ipynb", "-p", "profile", "paper", "-p", "rounds", "7"]) == 0   # records its -p values
    page = nbformat.read(tree / "book/ch/a.ipynb", as_version=4)
    page.metadata["papermill"] = {"parameters": {"profile": "paper", "rounds": 7}}
    nbformat.write(page, tree / "book/ch/a.ipynb")
    fake_papermill.clear()
    capsys.readouterr()
    assert run.main(["--all", "--published"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "skip notebooks/ch/b.ipynb: it has no published page"
    assert [p for _, p in fake_papermill] == [{"profile": "paper", "rounds": 7}, {}]  # c: published with defaults only
    assert "run notebooks/ch/a.ipynb (profile 'paper') -> book/ch/a.ipynb" in out
    with pytest.raises(SystemExit):
        run.main(["--all", "--published", "-p", "seeds", "[1]"])


# ------------------------------------------------------------------------ what a page records of its run
def _git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env=dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
                            GIT_COMMITTER_EMAIL="t@t"))


def test_commit_is_recorded_clean_or_with_the_modified_files(tree, fake_papermill):
    _git(tree, "init", "-q")
    (tree / "flkit").mkdir()
    (tree / "flkit" / "x.py").write_text("a = 1\n")
    (tree / "results").mkdir(exist_ok=True)
    _git(tree, "add", "flkit", "notebooks")
    _git(tree, "commit", "-q", "-m", "x")
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True,
                          text=True).stdout.strip()
    (tree / "results" / "new.csv").write_text("results are no code\n")                 # untracked, and no code
    assert run._git_state() == (head, []) and run._git_commit() == head
    assert run.main(["notebooks/ch/a.ipynb", "-p", "profile", "paper"]) == 0
    meta = nbformat.read(tree / "book/ch/a.ipynb", as_version=4).metadata["flkit"]
    assert (meta["commit"], meta["modified"]) == (head, [])
    (tree / "flkit" / "x.py").write_text("a = 2\n")
    assert run._git_state() == (head, ["flkit/x.py"]) and run._git_commit() == head + "+modified"
    assert run.main(["notebooks/ch/a.ipynb", "-p", "profile", "paper"]) == 0
    meta = nbformat.read(tree / "book/ch/a.ipynb", as_version=4).metadata["flkit"]
    assert (meta["commit"], meta["modified"]) == (head, ["flkit/x.py"])


def test_the_stored_runs_a_page_used_are_recorded(tree, fake_papermill, monkeypatch, tmp_path):
    """The kernel lists each stored run it used in $FLKIT_READS_LOG (flkit.results); the run records them."""
    import pandas as pd
    from flkit import results

    store_root = tmp_path / "elsewhere"
    monkeypatch.setenv("FLKIT_RESULTS", str(store_root))
    table = pd.DataFrame({"round": [0, 1], "metric": ["loss", "loss"], "value": [1.0, 0.5]})
    old = results.book_store("x")
    old.save({"run": 0}, table, wall_time_s=60.0, device="cuda", batch_size=3)
    monkeypatch.setattr(results, "_USED", {})
    monkeypatch.setattr(results, "_COMPUTED", set())
    seen = {}

    def kernel(input_path, output_path, parameters=None, **kwargs):   # what a page's cells would do
        seen["log"] = os.environ.get(run.READS_LOG_ENV)
        store = results.book_store("x")
        store.load({"run": 0})
        store.save({"run": 1}, table, wall_time_s=2.0)
        store.load({"run": 1})
        store.load({"run": 0})                                        # once only
        nbformat.write(nbformat.read(input_path, as_version=4), output_path)

    monkeypatch.setattr(papermill, "execute_notebook", kernel)
    assert run.main(["notebooks/ch/a.ipynb", "-p", "profile", "paper"]) == 0
    meta = nbformat.read(tree / "book/ch/a.ipynb", as_version=4).metadata["flkit"]
    k0, k1 = results.config_key({"run": 0}), results.config_key({"run": 1})
    assert meta["stored_runs"] == {"read": [f"$FLKIT_RESULTS/x/{k0}"], "computed": [f"$FLKIT_RESULTS/x/{k1}"]}
    assert seen["log"] and not Path(seen["log"]).exists() and run.READS_LOG_ENV not in os.environ
    assert run.READS_LOG_ENV == results.READS_LOG_ENV
    used = results.used_runs()
    assert used["computed"].tolist() == [False, True] and used["compute_s"].tolist() == [20.0, 2.0]
    summary = results.compute_summary([results.book_store("x").manifest({"run": k}) for k in (0, 1)])
    assert {k: summary[k] for k in ("runs", "devices", "compute_s")} == dict(runs=2, devices=["cpu", "cuda"],
                                                                             compute_s=22.0)
    assert len(summary["computed_on"]) == 1 and summary["computed_on"] != ["not recorded"]   # this machine's CPU


# ------------------------------------------------------------------------ what killed runs left behind
def test_clean_stale_removes_dead_runs_and_old_legacy_names_only(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()                                                   # its pid no longer runs
    hour_ago = time.time() - run.LEGACY_AGE_S - 60
    made = {}
    for name, kind in [(f"flkit-run-{dead.pid}-ab12", "dir"), (f"flkit-run-{os.getpid()}-cd34", "dir"),
                       ("flkit-run-a-x1.ipynb", "old"), ("flkit-run-a-x2.ipynb", "file"),
                       ("flkit-jupyter-old", "olddir"), ("flkit-jupyter-used", "olddir"), ("flkit-jupyter-new", "dir"),
                       ("flkit-run-notes.txt", "old"), ("other", "olddir")]:
        path = made[name] = tmp_path / name
        if "dir" in kind:
            (path / "runtime").mkdir(parents=True)
            (path / "runtime" / "kernel.json").write_text("{}")
        else:
            path.write_text("{}")
        if kind.startswith("old"):
            for p in [*path.rglob("*"), path]:
                os.utime(p, (hour_ago, hour_ago))
    (made["flkit-jupyter-used"] / "runtime" / "kernel.json").touch()   # a recent file inside: in use
    removed = run.clean_stale(tmp_path)
    assert sorted(p.name for p in removed) == sorted([f"flkit-run-{dead.pid}-ab12", "flkit-run-a-x1.ipynb",
                                                      "flkit-jupyter-old"])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"flkit-run-{os.getpid()}-cd34", "flkit-run-a-x2.ipynb", "flkit-jupyter-used", "flkit-jupyter-new",
         "flkit-run-notes.txt", "other"])


def test_clean_parts_removes_old_parts_of_that_output_only(tmp_path):
    old = time.time() - run.PART_AGE_S - 60
    for name in (".a-1.part", ".a-2.part", ".b-1.part", "a.ipynb"):
        (tmp_path / name).write_text("{}")
        if name != ".a-2.part":
            os.utime(tmp_path / name, (old, old))
    assert run.clean_parts(tmp_path / "a.ipynb") == [tmp_path / ".a-1.part"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".a-2.part", ".b-1.part", "a.ipynb"]


def test_a_run_writes_its_temporaries_into_its_own_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.setattr(run, "_RUN_DIR", None)
    monkeypatch.setattr(run, "_machine", lambda: "test machine")
    monkeypatch.setenv("JUPYTER_DATA_DIR", "")
    monkeypatch.delenv("JUPYTER_DATA_DIR")                 # restored after the test, whether it was set or not
    (tmp_path / "tmp").mkdir()
    seen = []

    def execute_notebook(source, work, **kwargs):
        seen.append((work, kwargs["config"]))
        shutil.copyfile(source, work)

    monkeypatch.setattr(papermill, "execute_notebook", execute_notebook)
    assert run.execute(_nb(tmp_path / "a.ipynb"), out=tmp_path / "out" / "a.ipynb").is_file()
    [(work, config)] = seen
    folder = run.run_dir()
    assert folder.parent == tmp_path / "tmp" and folder.name.startswith(f"flkit-run-{os.getpid()}-")
    assert Path(work).parent == folder and Path(config.KernelManager.connection_file).parent == folder
    assert os.environ["JUPYTER_DATA_DIR"] == str(folder / "jupyter")
    assert sorted(p.name for p in folder.iterdir()) == ["jupyter"], "the run's files are removed"


# ------------------------------------------------------------------------------- real kernels (two cells each)
@pytest.mark.slow
def test_real_run_at_smoke_goes_to_results_tmp(tree, capsys):
    _nb(tree / "notebooks/ch/a.ipynb", body="assert profile == 'smoke' and seeds == [3]")
    before = _snapshot(tree / "book")
    assert run.main(["notebooks/ch/a.ipynb", "-p", "seeds", "[3]"]) == 0
    assert _snapshot(tree / "book") == before
    meta = nbformat.read(tree / "results/tmp/notebooks/ch/a.ipynb", as_version=4).metadata
    assert meta["flkit"]["parameters"] == {"profile": "smoke", "seeds": [3], "rounds": None, "device": "auto"}
    assert meta["flkit"]["wall_time_s"] >= 0 and meta["papermill"]["output_path"] == "results/tmp/notebooks/ch/a.ipynb"


@pytest.mark.slow
def test_real_kernel_records_the_stored_runs_it_used(tree, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("FLKIT_RESULTS", str(tmp_path / "stores"))
    body = ("import pandas as pd\nfrom flkit import results\ns = results.book_store('ch')\n"
            "s.save({'r': 0}, pd.DataFrame({'round': [0], 'metric': ['m'], 'value': [1.0]}))\n"
            "t = s.load({'r': 0})")
    _nb(tree / "notebooks/ch/a.ipynb", body=body)
    assert run.main(["notebooks/ch/a.ipynb"]) == 0
    meta = nbformat.read(tree / "results/tmp/notebooks/ch/a.ipynb", as_version=4).metadata
    from flkit.results import config_key
    assert meta["flkit"]["stored_runs"] == {"read": [], "computed": [f"$FLKIT_RESULTS/ch/{config_key({'r': 0})}"]}


@pytest.mark.slow
def test_real_error_inside_the_notebook(tree, capsys):
    _nb(tree / "notebooks/ch/a.ipynb", body="raise ValueError(f'unknown profile {profile!r}')")
    before = _snapshot(tree / "book")
    assert run.main(["notebooks/ch/a.ipynb", "-p", "profile", "paper"]) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert lines == ["error: notebooks/ch/a.ipynb: ValueError: unknown profile 'paper'; nothing "
                     "written to book/ch/a.ipynb (--debug prints the traceback)"]
    assert _snapshot(tree / "book") == before


@pytest.mark.slow
def test_sigterm_leaves_nothing_behind(tmp_path):
    src = _nb(tmp_path / "sleep.ipynb", body="import pathlib, time\npathlib.Path('started').touch()\ntime.sleep(60)")
    out, tmp = tmp_path / "book" / "ch" / "sleep.ipynb", tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=str(run.REPO))
    proc = subprocess.Popen([sys.executable, "-m", "flkit.run", str(src), "--out", str(out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 15
    while not (tmp_path / "started").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert (tmp_path / "started").exists(), "the notebook did not start"
    [folder] = tmp.iterdir()                                   # this process's one folder of temporaries
    assert folder.name.startswith(f"flkit-run-{proc.pid}-")
    assert [p.name.startswith("sleep-") for p in folder.glob("*.ipynb")] == [True]  # papermill's file
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=8)
    assert proc.returncode == 143
    assert f"error: terminated (SIGTERM) while running {src}; nothing written to {out}" in err.splitlines()
    assert list(out.parent.iterdir()) == []
    assert list(tmp.iterdir()) == [], "temporary files and the private Jupyter data dir are removed"


@pytest.mark.slow
def test_sigkill_leftovers_are_removed_by_the_next_run(tmp_path):
    """SIGKILL cannot be handled: what the killed run left in the temporary directory is removed by the next
    invocation (here a --dry-run), as its owner's pid no longer runs."""
    body = "import os, pathlib, time\npathlib.Path('started').write_text(str(os.getpid()))\ntime.sleep(60)"
    src, tmp, started = _nb(tmp_path / "sleep.ipynb", body=body), tmp_path / "tmp", tmp_path / "started"
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "JUPYTER_DATA_DIR"}
    env.update(TMPDIR=str(tmp), PYTHONPATH=str(run.REPO))
    cmd = [sys.executable, "-m", "flkit.run", str(src), "--out", str(tmp_path / "out" / "sleep.ipynb")]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 30
    while not (started.exists() and started.read_text()) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    try:
        assert started.exists(), "the notebook did not start"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        if started.exists() and started.read_text():      # the kernel runs in a session of its own
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(started.read_text()), signal.SIGKILL)
    [folder] = tmp.iterdir()          # the killed run's folder: papermill's file, the kernel's, Jupyter's dir
    assert folder.name.startswith(f"flkit-run-{proc.pid}-")
    assert sorted(p.suffix for p in folder.iterdir()) == ["", ".ipynb", ".json"]
    again = subprocess.run([*cmd, "--dry-run"], env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert list(tmp.iterdir()) == [], "the next run removed them"
