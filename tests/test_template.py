"""Every chapter follows one template, read from the source (no page is executed):

* the chapter is a package ``flkit/papers/<chapter>/`` with ``common.py`` (what its pages share: the document,
  its reference numbers, the settings common to its pages) and ``items.py`` (the document's items and how the
  page checks map onto them, for the scorecard);
* each page ``notebooks/<chapter>/<page>.ipynb`` has its module ``flkit/papers/<chapter>/<page>.py`` (other modules
  of the chapter are its own pieces: an algorithm, a diagnosis, a bound), which defines ``PROFILES`` (at least
  "smoke" and "paper") and ``profile(name, **overrides) -> dict`` (a ValueError naming the allowed profiles for
  any other name): the same two names in every chapter;
* the page imports its module by its name (``from flkit.papers.<chapter> import <page>``, no alias) and defines
  no function in its cells (the code lives in the package, where it is tested), and glues its numbers for the
  prose with the one helper, ``flkit.display.put``.
"""
from __future__ import annotations

import ast
import importlib
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHAPTERS = ("across", "availability", "cvar", "fedau", "hics", "mifa")
# chapters still moving to the template; empty when every chapter follows it
NOT_YET: set[str] = set()


def pages(chapter: str) -> list[str]:
    return sorted(p.stem for p in (REPO / "notebooks" / chapter).glob("*.ipynb"))


def code_cells(chapter: str, page: str) -> list[str]:
    nb = json.loads((REPO / "notebooks" / chapter / f"{page}.ipynb").read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def _parse(cell: str) -> ast.Module:
    """A cell's code without its IPython magics (``%matplotlib inline``)."""
    return ast.parse("\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in cell.splitlines()))


def problems(chapter: str) -> list[str]:
    """What keeps `chapter` from the template, in words (empty: it follows it)."""
    out = []
    root = REPO / "flkit" / "papers" / chapter
    if not (root / "__init__.py").is_file():
        return [f"flkit/papers/{chapter} is not a package"]
    for f in ("common.py", "items.py"):
        if not (root / f).is_file():
            out.append(f"flkit/papers/{chapter}/{f} is missing")
    for page in pages(chapter):
        if not (root / f"{page}.py").is_file():
            out.append(f"page {chapter}/{page} has no module flkit/papers/{chapter}/{page}.py")
        else:
            mod = importlib.import_module(f"flkit.papers.{chapter}.{page}")
            profiles = getattr(mod, "PROFILES", None)
            if not isinstance(profiles, dict) or not {"smoke", "paper"} <= set(profiles):
                out.append(f"flkit.papers.{chapter}.{page}.PROFILES is not a dict with 'smoke' and 'paper'")
            if not callable(getattr(mod, "profile", None)):
                out.append(f"flkit.papers.{chapter}.{page} has no function profile(name, **overrides)")
        imported, aliased = False, []
        for i, cell in enumerate(code_cells(chapter, page)):
            tree = _parse(cell)
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    out.append(f"page {chapter}/{page} defines {node.name!r} in code cell {i}")
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("flkit.papers"):
                    for a in node.names:
                        if node.module == f"flkit.papers.{chapter}" and a.name == page and a.asname is None:
                            imported = True
                        if a.asname is not None and a.asname != a.name:
                            aliased.append(f"{node.module}.{a.name} as {a.asname}")
        if not imported:
            out.append(f"page {chapter}/{page} does not import its module as 'from flkit.papers.{chapter} "
                       f"import {page}'")
        if aliased:
            out.append(f"page {chapter}/{page} imports chapter code under aliases: {', '.join(aliased)}")
    return out


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_follows_the_template(chapter):
    found = problems(chapter)
    if chapter in NOT_YET:
        if not found:
            pytest.fail(f"{chapter} follows the template now: take it off NOT_YET")
        pytest.xfail(f"{chapter} is still moving to the template: " + "; ".join(found[:3]))
    assert not found, "\n".join(found)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_profile_rejects_an_unknown_name(chapter):
    if chapter in NOT_YET:
        pytest.skip(f"{chapter} is still moving to the template")
    for page in pages(chapter):
        mod = importlib.import_module(f"flkit.papers.{chapter}.{page}")
        with pytest.raises(ValueError, match="smoke"):
            mod.profile("no-such-profile")


def test_the_checker_sees_a_page_that_breaks_the_template(tmp_path):
    """A chapter with a page without module, a function in a cell and an aliased import fails the checker."""
    nb = tmp_path / "notebooks" / "toy"
    nb.mkdir(parents=True)
    (tmp_path / "flkit" / "papers" / "toy").mkdir(parents=True)
    (tmp_path / "flkit" / "papers" / "toy" / "__init__.py").write_text("")
    cells = [{"cell_type": "code", "source": ["from flkit.papers.toy import page as P\n", "def f():\n", "    pass\n"]}]
    (nb / "page.ipynb").write_text(json.dumps({"cells": cells}))
    saved = REPO
    globals()["REPO"] = tmp_path
    try:
        found = problems("toy")
    finally:
        globals()["REPO"] = saved
    text = "\n".join(found)
    assert "common.py is missing" in text and "items.py is missing" in text
    assert "has no module" in text and "defines 'f'" in text and "under aliases" in text
    assert "does not import its module" in text
