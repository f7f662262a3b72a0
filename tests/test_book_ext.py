"""The book's own Sphinx extensions (_ext/) and the API reference's pages, without building the book."""
from __future__ import annotations

import importlib
import inspect
import json
import re
import pkgutil
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "_ext"))
sys.path.insert(0, str(REPO / "scripts"))

import api_pages  # noqa: E402
import code_links  # noqa: E402
import fold_cells  # noqa: E402
import plain_docstrings  # noqa: E402
import verdicts  # noqa: E402


# ----------------------------------------------------------------------------------------- the API reference
def test_api_pages_are_current():
    assert api_pages.problems() == [], "run `.venv/bin/python scripts/api_pages.py`"


def test_every_module_has_its_page_and_the_toc_lists_them():
    documented = {m for mods in api_pages.pages().values() for m in mods}
    assert set(api_pages.modules()) - {"flkit"} == documented
    toc = yaml.safe_load((REPO / "_toc.yml").read_text())
    appendix = next(p for p in toc["parts"] if p["caption"] == "Appendix")["chapters"]
    api = next(c for c in appendix if c["file"] == "book/appendix/api/index")
    assert [s["file"] for s in api["sections"]] == api_pages.toc_entries()


def test_toc_entries_are_rewritten_in_place():
    text = (REPO / "_toc.yml").read_text()
    shuffled = text.replace("          - file: book/appendix/api/fl\n", "")
    assert shuffled != text and api_pages.toc_text(shuffled) == text
    with pytest.raises(ValueError, match="lists no"):
        api_pages.toc_text("format: jb-book\n")


def test_a_stale_page_is_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(api_pages, "OUT", tmp_path)
    monkeypatch.setattr(api_pages, "TOC", tmp_path / "_toc.yml")
    (tmp_path / "gone.md").write_text("x")
    found = api_pages.problems()
    assert any(p.endswith("gone.md: no such module any more") for p in found)
    assert any(p.endswith("index.md: missing") for p in found)


# ------------------------------------------------------------------------------------ "Code for this page"
def test_imported_modules():
    known = {"flkit.results", "flkit.plots", "flkit.papers.mifa", "flkit.papers.cvar", "flkit.papers.cvar.report",
             "flkit.papers"}
    code = ("import numpy as np\nfrom flkit import results, plots\nfrom flkit.papers import mifa\n"
            "from flkit.papers.cvar import report, TABLE1\nimport flkit.papers.cvar.report as r\n"
            "from flkit.results import sweep\nfrom flkit import nothing_known")
    assert code_links.imported_modules(code, known) == ["flkit.results", "flkit.plots", "flkit.papers.mifa",
                                                        "flkit.papers.cvar.report", "flkit.papers.cvar"]
    assert code_links.imported_modules("this is not python (", known) == []


def test_every_page_notebook_imports_a_documented_module():
    known = {m for mods in api_pages.pages().values() for m in mods}
    for nb in sorted((REPO / "notebooks").glob("*/*.ipynb")):
        mods = code_links.imported_modules(code_links.notebook_code(nb), known)
        assert mods, f"{nb.relative_to(REPO)} imports no flkit module"


# ------------------------------------------------------------------------------------------ folded cells
@pytest.mark.parametrize("tags, lines, shows, fold", [
    (set(), 25, True, True),                    # a long set-up or plotting cell
    (set(), 10, True, False), (set(), 11, True, True),
    (set(), 5, False, True),                    # plumbing that shows nothing
    (set(), 3, False, False),
    ({"parameters"}, 30, False, False), ({"injected-parameters"}, 30, True, False),
    ({"show-input"}, 40, True, False), ({"hide-output"}, 40, True, False), ({"remove-cell"}, 40, True, False),
])
def test_fold_rule(tags, lines, shows, fold):
    assert fold_cells.should_fold(tags, lines, shows, 10) is fold
    assert fold_cells.should_fold(tags, lines, shows, 0) is False      # flkit_fold_lines: 0 turns it off


# ---------------------------------------------------------------------------------- plain-text docstrings
BAD = """Summary |x - y| <= eps for **kwargs of run_batch_.

Symbols
-------
K            users
rho_i        RAM probabilities
             (sum 1)

    G = (1 - gamma) t + f
the end"""


def test_a_plain_docstring_is_rewritten_into_clean_rest():
    lines = BAD.splitlines()
    assert plain_docstrings.problems(lines), "the sample must be bad reST, else the test shows nothing"
    new = plain_docstrings.rewrite(lines)
    assert plain_docstrings.problems(new) == []
    assert "**Symbols**" in new and "    rho_i        RAM probabilities" in new


def test_clean_rest_is_left_alone():
    lines = ["One line with ``code`` and :func:`flkit.fl.run`.", "", "Another::", "", "    literal"]
    kept = list(lines)
    plain_docstrings.process(None, "function", "f", None, {}, lines)
    assert lines == kept


def test_every_flkit_docstring_renders_without_rest_errors():
    import flkit

    names = ["flkit"] + [m.name for m in pkgutil.walk_packages(flkit.__path__, "flkit.")]
    bad = []
    for name in names:
        mod = importlib.import_module(name)
        objs = [mod] + [v for v in vars(mod).values()
                        if (inspect.isfunction(v) or inspect.isclass(v)) and getattr(v, "__module__", "") == name]
        for obj in objs:
            doc = inspect.getdoc(obj)
            if doc:
                lines = doc.splitlines()
                plain_docstrings.process(None, "", name, obj, {}, lines)
                if plain_docstrings.problems(lines):
                    bad.append(f"{name}: {getattr(obj, '__name__', '')}")
    assert not bad, bad


# ----------------------------------------------------------------------------------------- verdicts in prose
_ROLE = re.compile(r"\{verdict\}`([^`]*)`")
# a verdict word typed in prose (not quoted or in italics as the vocabulary's name, not a glued count)
_TYPED = re.compile(r"(?<![*\"'`])\b(partly|(?:not )?reproduced)\b(?![*\"'])")
_ALLOWED = ("reproduced figure by figure",                     # the book's subtitle
            "make the figure reproduced")                      # the rule, stated in general


def _prose():
    """(name, text) of every chapter index, the intro and every source notebook's Markdown, with the
    scorecard's generated blocks taken out."""
    from flkit.papers import scorecard
    from flkit.reproduce import generated
    book = REPO / "book"
    for p in sorted(book.glob("*/index.md")) + [book / "intro.md"]:
        text = p.read_text()
        for begin, end in [(scorecard._CH_BEGIN, scorecard._CH_END), (scorecard._BEGIN, scorecard._END)]:
            if begin in text:
                i, j = generated(text, begin, end)
                text = text[:i] + text[j:]
        yield p.relative_to(REPO).as_posix(), text
    for p in sorted((REPO / "notebooks").glob("*/*.ipynb")):
        cells = json.loads(p.read_text())["cells"]
        yield p.relative_to(REPO).as_posix(), "\n".join("".join(c["source"]) for c in cells
                                                       if c["cell_type"] == "markdown")


def test_verdict_role_parses_document_and_item():
    assert verdicts.parse("003::Fig. 3(c)") == ("003", "Fig. 3(c)")
    assert verdicts.parse(" 004 :: Claim (appendix 6.11): a: b ") == ("004", "Claim (appendix 6.11): a: b")
    for bad in ["Fig. 3(c)", "003::", "::Fig. 3(c)", "003: Fig. 3(c)"]:
        with pytest.raises(ValueError, match="<document>::<item id>"):
            verdicts.parse(bad)


def test_every_verdict_role_names_an_item_of_the_scorecard():
    known = verdicts.verdicts(str(REPO))
    used = [(name, verdicts.parse(m)) for name, text in _prose() for m in _ROLE.findall(text)]
    assert len(used) >= 8, "the chapter indexes state item verdicts through the role"
    assert not [u for u in used if u[1] not in known], "a {verdict} role names an item the scorecard lacks"
    assert ("003", "Fig. 3(c)") in known and known[("003", "Fig. 3(c)")] in (
        "reproduced", "partly", "not reproduced", "not testable at this scale")


def test_no_item_verdict_is_typed_in_prose():
    """Verdict words in prose come from the scorecard ({verdict} role, glued counts): a typed "partly" or
    "not reproduced" would go stale when a re-run changes the verdict."""
    typed = []
    for name, text in _prose():
        text = _ROLE.sub("", text)
        for m in _TYPED.finditer(text):
            before, around = text[max(0, m.start() - 40):m.start()], text[max(0, m.start() - 30):m.end() + 30]
            if re.search(r"\{glue:text\}`\w+`( are)? $", before) or any(a in around for a in _ALLOWED):
                continue
            typed.append(f"{name}: ...{around!r}...")
    assert not typed, typed
