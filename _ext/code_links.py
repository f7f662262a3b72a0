"""Sphinx extension: a "Code for this page" line under each page's title, linking the page to its code.

* A page executed from a notebook (book/<chapter>/<name>.ipynb, source notebooks/<chapter>/<name>.ipynb)
  links its source notebook, copied into the site (``_notebooks/<chapter>/<name>.ipynb``, to download), and
  the flkit modules its cells import (``from flkit.papers import mifa``, ``from flkit import results``),
  each to its place in the API reference (book/appendix/api/, written by scripts/api_pages.py), whose
  [source] links show the code itself.
* A Markdown page links the flkit modules it names in code spans (``flkit.owed``) and, for a chapter's
  index, the chapter's package (flkit.papers.<chapter>); a page that names none links the API reference.
* When _config.yml sets ``flkit_repository_url`` (the repository's file view, e.g.
  ``https://github.com/<owner>/<repo>/blob/main``), the notebook is also linked there. (Jupyter Book's own
  ``repository: url:`` defaults to Jupyter Book's repository, so it is not used.)

The API reference's own pages get no line. Nothing is read from the executed outputs: only the cells' code.
"""
from __future__ import annotations

import ast
import json
import posixpath
import re
import shutil
import sys
from pathlib import Path

from docutils import nodes

API = "book/appendix/api"
NOTEBOOKS = "_notebooks"
_NAMED = re.compile(r"\bflkit(?:\.\w+)+")


def _repo(app) -> Path:
    return Path(app.srcdir)


def _api_pages(app) -> dict[str, str]:
    """module -> API page docname, from scripts/api_pages.py (the one list of pages)."""
    scripts = str(_repo(app) / "scripts")
    if scripts not in sys.path:
        sys.path.insert(0, scripts)
    import api_pages

    return {m: f"{API}/{api_pages.file_name(page)}" for page, mods in api_pages.pages().items() for m in mods}


def imported_modules(source: str, known: set[str]) -> list[str]:
    """The flkit modules that the Python code imports, in order of first import; a name imported from a module
    (``from flkit.results import sweep``) counts as that module."""
    out: list[str] = []
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return out
    for node in ast.walk(tree):
        found = []
        if isinstance(node, ast.Import):
            found = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
                     for a in node.names]
        for name in found:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != "flkit" and name not in out:
                out.append(name)
    return out


def notebook_code(path: Path) -> str:
    """The code of a notebook's code cells, IPython magics and shell lines dropped."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    lines = []
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            src = "".join(cell.get("source", []))
            lines += [ln for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!"))]
            lines.append("")
    return "\n".join(lines)


def page_code(app, docname: str) -> tuple[str | None, list[str]]:
    """(the page's source notebook relative to the repository, or None; the flkit modules it links)."""
    repo, known = _repo(app), set(_api_pages(app))
    parts = docname.split("/")
    source = None
    if len(parts) == 3 and parts[0] == "book":
        nb = repo / "notebooks" / parts[1] / f"{parts[2]}.ipynb"
        if nb.is_file():
            source = f"notebooks/{parts[1]}/{parts[2]}.ipynb"
            return source, imported_modules(notebook_code(nb), known)
    path = Path(app.env.doc2path(docname))
    text = path.read_text(encoding="utf-8") if path.suffix == ".md" else ""
    mods = []
    if len(parts) == 3 and parts[2] == "index" and f"flkit.papers.{parts[1]}" in known:
        mods.append(f"flkit.papers.{parts[1]}")
    for name in _NAMED.findall(text):
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != "flkit" and name not in mods:
            mods.append(name)
    return source, mods


def _ref(uri: str, text: str, literal: bool = True) -> nodes.reference:
    ref = nodes.reference("", "", refuri=uri, internal=not uri.startswith("http"))
    ref += nodes.literal(text, text) if literal else nodes.Text(text)
    return ref


def add_line(app, doctree, docname: str) -> None:
    if app.builder.format != "html" or docname.startswith(API + "/"):
        return
    source, mods = page_code(app, docname)
    pages = _api_pages(app)
    para = nodes.paragraph(classes=["flkit-code"])
    para += nodes.strong("Code for this page:", "Code for this page:")
    para += nodes.Text(" ")
    if source:
        target = posixpath.relpath(f"{NOTEBOOKS}/{source.removeprefix('notebooks/')}",
                                   posixpath.dirname(app.builder.get_target_uri(docname)) or ".")
        para += nodes.Text("the source notebook ")
        para += _ref(target, source)
        repo = app.config.flkit_repository_url
        if repo:
            para += nodes.Text(" (")
            para += _ref(f"{repo.rstrip('/')}/{source}", "in the repository", literal=False)
            para += nodes.Text(")")
        para += nodes.Text("; the flkit modules it calls: " if mods else "; it calls no flkit module directly. ")
    elif mods:
        para += nodes.Text("the flkit modules it names: ")
    for i, m in enumerate(mods):
        if i:
            para += nodes.Text(", ")
        uri = app.builder.get_relative_uri(docname, pages[m]) + f"#module-{m}"
        para += _ref(uri, m)
    para += nodes.Text(" (" if mods else "")
    para += _ref(app.builder.get_relative_uri(docname, f"{API}/index"), "API reference", literal=False)
    para += nodes.Text(", with each function's source)." if mods else ": every module, with its source.")
    section = doctree.next_node(nodes.section)
    if section is None:
        doctree.insert(0, para)
        return
    title = section.next_node(nodes.title)
    section.insert(section.index(title) + 1 if title is not None and title.parent is section else 0, para)


def copy_notebooks(app, exception) -> None:
    """The source notebooks into the site, for the pages' links."""
    if exception is not None or app.builder.format != "html":
        return
    src, out = _repo(app) / "notebooks", Path(app.outdir) / NOTEBOOKS
    for nb in sorted(src.glob("*/*.ipynb")):
        dest = out / nb.relative_to(src)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(nb, dest)


def setup(app):
    app.add_config_value("flkit_repository_url", "", "html")
    app.connect("doctree-resolved", add_line)
    app.connect("build-finished", copy_notebooks)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
