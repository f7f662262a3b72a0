"""scripts/mutation_probe.py on a tiny repository of its own (one module, one test file, four mutations):
stale and no-op mutations are reported and skipped, the unmutated suite runs first, and a failing baseline
scores nothing. The project's own suite is never run."""
from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("mutation_probe", REPO / "scripts" / "mutation_probe.py")
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)

MUTATIONS = '''
MUTATIONS = [
    dict(id="calc-sign", file="pkg/calc.py", old="return a + b", new="return a - b", why="subtracts"),
    dict(id="calc-comment", file="pkg/calc.py", old="# the sum", new="# the difference", why="a comment"),
    dict(id="calc-spacing", file="pkg/calc.py", old="a + b", new="a  +  b", why="whitespace"),
    dict(id="calc-stale", file="pkg/calc.py", old="return a * b", new="return a / b", why="gone"),
    dict(id="calc-gone", file="pkg/old.py", old="x", new="y", why="its file was removed"),
    dict(id="other-survives", file="pkg/calc.py", old="def unused():\\n    return 1",
         new="def unused():\\n    return 2", why="untested"),
]
'''


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A repository with pkg/calc.py, tests/test_calc.py and scripts/mutations/calc.py; the probe's REPO and
    COPY point at it. `fake(expect=...)` rewrites the test's expected sum (6 makes the baseline fail)."""
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "pkg" / "calc.py").write_text("def add(a, b):\n    return a + b  # the sum\n\n\n"
                                          "def unused():\n    return 1\n")
    (repo / "scripts" / "mutations").mkdir(parents=True)
    (repo / "scripts" / "mutations" / "calc.py").write_text(textwrap.dedent(MUTATIONS))
    (repo / "tests").mkdir()
    monkeypatch.setattr(probe, "REPO", repo)
    monkeypatch.setattr(probe, "COPY", ("pkg", "tests"))

    def write(expect=5):
        (repo / "tests" / "test_calc.py").write_text(f"from pkg.calc import add\n\n\n"
                                                     f"def test_add():\n    assert add(2, 3) == {expect}\n")
        return repo
    write()
    return write


@pytest.fixture
def suites(monkeypatch):
    """Records every run of the test suite (the baseline, then one per mutant)."""
    calls, real = [], probe.run_suite

    def run_suite(work, timeout, tests):
        calls.append(tests)
        return real(work, timeout, tests)
    monkeypatch.setattr(probe, "run_suite", run_suite)
    return calls


def test_stale_and_no_op_mutations_are_reported_not_raised(fake):
    usable, skipped = probe.load_mutations()
    assert [m["id"] for m in usable] == ["calc-sign", "other-survives"]
    assert [(s["id"], s["status"], s["reason"]) for s in skipped] == [
        ("calc-comment", "no-op", "the code is unchanged (only a comment or whitespace differs)"),
        ("calc-spacing", "no-op", "the code is unchanged (only a comment or whitespace differs)"),
        ("calc-stale", "stale", "`old` occurs 0 times in pkg/calc.py (must be exactly once)"),
        ("calc-gone", "stale", "pkg/old.py does not exist")]


def test_same_code():
    assert probe.same_code("x = 1  # one\n", "x = 1   # two\n", "a.py")
    assert not probe.same_code("x = 1\n", "x = 2\n", "a.py")
    assert not probe.same_code("x = 1\n", "x = (\n", "a.py")              # does not parse: a change
    assert probe.same_code("a: 1\n", "a:  1\n", "a.yml") and not probe.same_code("a: 1", "a: 2", "a.yml")


def test_baseline_first_then_the_mutants(fake, suites, tmp_path, capsys):
    out = tmp_path / "report.md"
    assert probe.main(["--out", str(out), "--timeout", "120"]) == 0
    assert len(suites) == 3 and suites[0] == ["tests"]                 # baseline, calc-sign, other-survives
    console = capsys.readouterr().out
    assert "skip calc-stale (stale): `old` occurs 0 times in pkg/calc.py" in console
    assert "skip calc-comment (no-op)" in console
    assert "[baseline] passed (" in console
    assert "[1/2] calc-sign: caught" in console and "[2/2] other-survives: SURVIVED" in console
    text = out.read_text()
    assert text.startswith("# Mutation probe: 1 of 2 mutations caught (50 %)\n")
    assert "Baseline (the unmutated copy, the same command): passed in " in text and "1 passed" in text
    assert "| calc-sign | subtracts | yes | FAILED tests/test_calc.py::test_add" in text
    assert "| other-survives | untested | **no** |  |" in text
    assert "| calc-stale | stale | `old` occurs 0 times in pkg/calc.py (must be exactly once) |" in text
    assert "| calc-comment | no-op |" in text and "| calc-gone | stale | pkg/old.py does not exist |" in text


def test_a_failing_baseline_scores_nothing(fake, suites, tmp_path, capsys):
    fake(expect=6)
    out = tmp_path / "report.md"
    assert probe.main(["--out", str(out), "--only", "calc", "--tests", "tests/test_calc.py"]) == 1
    assert suites == [["tests/test_calc.py"]], "no mutant runs after a failing baseline"
    captured = capsys.readouterr()
    assert "[baseline] FAILED (" in captured.out and "FAILED tests/test_calc.py::test_add" in captured.out
    assert "error: the unmutated tests fail: no mutant run, nothing scored" in captured.err
    text = out.read_text()
    assert text.startswith("# Mutation probe: baseline fails, no mutation scored\n")
    assert "**failed**" in text and "No mutant was run" in text and "| calc-sign |" not in text


def test_list_and_only(fake, suites, capsys):
    assert probe.main(["--list", "--only", "calc-s"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("skip calc-spacing (no-op)") and lines[1].startswith("skip calc-stale (stale)")
    assert lines[2].split() == ["calc-sign", "pkg/calc.py:", "subtracts"] and len(lines) == 3
    assert probe.main(["--only", "calc-st"]) == 2
    assert capsys.readouterr().out.endswith("no mutation matches (only skipped ones)\n")
    assert suites == []


def test_only_a_whole_run_replaces_the_committed_report(fake, suites, capsys):
    """A partial run (--only) writes its report to results/tmp/, never over results/benchmarks/'s."""
    repo = fake()
    assert probe.main(["--only", "calc", "--timeout", "120"]) == 0
    assert (repo / "results" / "tmp" / "mutation_report.md").is_file()
    assert not (repo / "results" / "benchmarks").exists()
    assert probe.main(["--timeout", "120"]) == 0
    assert (repo / "results" / "benchmarks" / "mutation_report.md").is_file()
