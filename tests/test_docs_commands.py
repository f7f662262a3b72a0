"""The commands that the README and the reproduce appendix print, checked as written (nothing is executed):
every line of their ``bash`` blocks, and the appendix's inline ``.venv/bin/python -m flkit...`` commands.

* ``flkit.run``: ``--dry-run`` must accept it; a run that would write into book/ must use exactly the page's
  published parameters (the README's examples with other parameters leave the book alone).
* ``papermill``: an existing source notebook, its parameters accepted by ``flkit.run``'s checks, ``--cwd`` its
  folder (the notebooks read paths relative to it), and its output under the git-ignored results/tmp/, never
  in book/ or the repository root; the flags must parse with papermill's own command line.
* ``flkit.owed``, ``flkit.sweep`` and ``scripts/*.py``: their own argument parsers accept the arguments (``--pay`` is
  stubbed; a sweep's settings are checked, nothing runs).
* ``bash scripts/...``, ``mkdir -p``, ``make``: the script or the make target exists.
A command of any other kind fails the test, so that a new kind of command gets a check.
"""
from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest

from flkit import params, run

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", REPO / "book" / "appendix" / "reproduce.md"]
FENCE = re.compile(r"```bash\n(.*?)```", re.S)
INLINE = re.compile(r"`(\.venv/bin/python -m flkit\.[^`]*)`")


def commands(path: Path) -> list[str]:
    """The command lines of the file's bash blocks (comments dropped), then its inline flkit commands; the
    generated tables of the reproduce page are left out (tests/test_reproduce.py checks them)."""
    text = path.read_text()
    if "<!-- reproduce:" in text:
        i, j = text.index("<!-- reproduce:"), text.index("<!-- /reproduce -->")
        text = text[:i] + text[j:]
    out = []
    for block in FENCE.findall(text):
        out += [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    out += [c for c in INLINE.findall(text) if "..." not in c]
    return out


CASES = [(f"{p.relative_to(REPO)}: {c}", c) for p in DOCS for c in commands(p)]


def test_the_documents_have_commands():
    kinds = {shlex.split(c, comments=True)[0] for _, c in CASES}
    assert {".venv/bin/python", ".venv/bin/papermill", "bash"} <= kinds, kinds
    assert sum("flkit.run" in c for _, c in CASES) >= 5


def _flkit_run(argv: list[str], capsys) -> None:
    if "--list" in argv:
        assert run.main(argv) == 0, capsys.readouterr().err
        assert capsys.readouterr().out.startswith("notebooks/")
        return
    assert run.main(argv + ["--dry-run"]) == 0, capsys.readouterr().err
    for line in capsys.readouterr().out.splitlines():
        m = re.fullmatch(r"would run (\S+) \(profile '[^']*'\) -> (\S+)(?: \(.*\))?", line)
        assert m, line
        if m[2].startswith("book/") and "--to-book" not in argv:
            source = REPO / m[1]
            values = run.published_given(source) if "--published" in argv else \
                run.parse_values([tuple(argv[i + 1:i + 3]) for i, a in enumerate(argv) if a == "-p"])
            known = params.declared_parameters(source)
            ran = {**known, **values}
            published = run.published_parameters(source) or {}
            differ = {k for k in ran if k != "device" and k in published and ran[k] != published[k]}
            assert not differ, f"{line}: writes the book with parameters other than the published ones: {differ}"


def _papermill(argv: list[str]) -> None:
    from papermill.cli import papermill as cli

    cli.make_context("papermill", list(argv))          # papermill's own parser: unknown flags fail here
    source, out = REPO / argv[0], REPO / argv[1]
    assert run.source_problem(source) is None, run.source_problem(source)
    assert run._under(out, REPO / "results" / "tmp") is not None, f"{argv[1]}: write under results/tmp/"
    assert "--cwd" in argv and (REPO / argv[argv.index("--cwd") + 1]).resolve() == source.parent.resolve(), \
        "papermill runs the kernel where it is started: give --cwd <the notebook's folder>"
    values = run.parse_values([tuple(argv[i + 1:i + 3]) for i, a in enumerate(argv) if a == "-p"])
    run.check(source, values)


def _owed(argv: list[str], monkeypatch) -> None:
    from flkit import owed

    monkeypatch.setattr(owed, "pay", lambda *a, **k: 0)
    monkeypatch.setattr(owed, "frame", lambda: __import__("pandas").DataFrame(
        columns=["command", "gpu_minutes", "basis", "cpu_hours", "cpu_basis"]))
    if "--device" in argv and argv[argv.index("--device") + 1] == "cuda":
        import torch
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert owed.main(argv) == 0


def _script(path: str, argv: list[str]) -> None:
    spec = importlib.util.spec_from_file_location(Path(path).stem, REPO / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module._parse(argv)                                 # argparse: SystemExit on a bad argument


@pytest.mark.parametrize("command", [c for _, c in CASES], ids=[i for i, _ in CASES])
def test_command_works_as_written(command, capsys, monkeypatch):
    argv = shlex.split(command, comments=True)
    head, rest = argv[0], argv[1:]
    if head == ".venv/bin/python" and rest[:2] == ["-m", "flkit.run"]:
        _flkit_run(rest[2:], capsys)
    elif head == ".venv/bin/python" and rest[:2] == ["-m", "flkit.owed"]:
        _owed(rest[2:], monkeypatch)
    elif head == ".venv/bin/python" and rest[:2] == ["-m", "flkit.sweep"]:
        from flkit import sweep
        sweep.parse(rest[2:])                          # SystemExit on a bad argument or setting
    elif head == ".venv/bin/python" and rest[0].startswith("scripts/"):
        _script(rest[0], rest[1:])
    elif head == ".venv/bin/papermill":
        _papermill(rest)
    elif head == "bash":
        assert (REPO / rest[0]).is_file(), rest[0]
    elif head == "mkdir" and rest[0] == "-p":
        assert all(run._under(REPO / d, REPO / "results" / "tmp") is not None for d in rest[1:])
    else:
        pytest.fail(f"no check for this kind of command: {command}")


def test_a_bad_papermill_command_is_caught():
    """The checks above fail on the command this page used to print (output in the repository root, no --cwd)."""
    with pytest.raises(AssertionError, match="results/tmp"):
        _papermill(["notebooks/cvar/mnist.ipynb", "out.ipynb", "-p", "profile", "paper", "-p", "device", "cuda"])
    with pytest.raises(AssertionError, match="--cwd"):
        _papermill(["notebooks/cvar/mnist.ipynb", "results/tmp/x.ipynb", "-p", "profile", "paper"])
    with pytest.raises(run.ParameterError, match="rounds takes a dict"):
        _papermill(["notebooks/mifa/quadratic.ipynb", "results/tmp/x.ipynb", "--cwd", "notebooks/mifa",
                    "-p", "rounds", "100"])


def test_a_run_that_would_replace_a_page_with_other_numbers_is_caught(capsys):
    with pytest.raises(AssertionError, match="other than the published"):
        _flkit_run(["notebooks/mifa/quadratic.ipynb", "-p", "profile", "paper", "-p", "seeds", "[0]",
                    "--out", "book/mifa/quadratic.ipynb"], capsys)
