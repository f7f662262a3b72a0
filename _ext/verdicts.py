"""Sphinx extension: the role ``{verdict}`003::Fig. 3(c)``` writes an item's verdict, as the scorecard has it.

Prose that names a verdict (a chapter's index, a page's "What we found") takes it from the scorecard's stored
table (book/scorecard/index.ipynb, itself tested against the pages' recorded checks) instead of typing it, so
page, chapter index, scorecard and intro cannot disagree. The text is ``<document>::<item id>``; an item the
scorecard does not list is a build error (the book builds with warnings as errors), so a renamed item cannot
leave a stale verdict behind. The verdict is printed in italics, as the vocabulary is everywhere in the book.
"""
from __future__ import annotations

import sys
from pathlib import Path

from docutils import nodes

_TABLES: dict[str, dict] = {}


def verdicts(srcdir: str) -> dict[tuple[str, str], str]:
    """(document, item) -> verdict, from the scorecard page's stored table (read once per build)."""
    if srcdir not in _TABLES:
        repo = Path(srcdir)
        if str(repo) not in sys.path:
            sys.path.insert(0, str(repo))
        from flkit.papers import scorecard
        table = scorecard.published(repo / "book" / "scorecard" / "index.ipynb")
        if table is None:
            raise RuntimeError("the scorecard page stores no table: execute notebooks/scorecard/index.ipynb")
        _TABLES[srcdir] = {(str(r.document), str(r.item)): str(r.verdict) for r in table.itertuples()}
    return _TABLES[srcdir]


def parse(text: str) -> tuple[str, str]:
    """'003::Fig. 3(c)' -> ('003', 'Fig. 3(c)'); anything else raises ValueError naming the expected form."""
    doc, sep, item = text.partition("::")
    if not sep or not doc.strip() or not item.strip():
        raise ValueError(f"{{verdict}} expects '<document>::<item id>', e.g. '003::Fig. 3(c)'; got {text!r}")
    return doc.strip(), item.strip()


def verdict_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    env = inliner.document.settings.env
    try:
        key = parse(text)
        found = verdicts(env.srcdir).get(key)
        if found is None:
            raise ValueError(f"the scorecard lists no item {key[1]!r} of document {key[0]}")
    except (ValueError, RuntimeError) as exc:
        msg = inliner.reporter.error(str(exc), line=lineno)
        return [inliner.problematic(rawtext, rawtext, msg)], [msg]
    return [nodes.emphasis(rawtext, found, classes=["verdict"])], []


def setup(app):
    app.add_role("verdict", verdict_role)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
