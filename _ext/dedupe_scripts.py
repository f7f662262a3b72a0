"""Sphinx extension: write each inline <script> once per page.

Sphinx 7.4 keeps an inline script that an extension adds at ``env-before-read-docs`` twice in the page's
script list: once with ``filename=None`` (added directly to the builder) and once with ``filename=''``
(re-added from the registry), and the two do not compare equal. sphinx-thebe's ``const THEBE_JS_URL``
then runs twice and the browser reports "SyntaxError: Identifier 'THEBE_JS_URL' has already been
declared" on every page. This handler drops the second copy; the builder's own list is left as it is.
"""
from __future__ import annotations


def _key(script) -> tuple:
    return (script.filename or "", script.priority, tuple(sorted(script.attributes.items())))


def dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    seen, unique = set(), []
    for script in context.get("script_files", []):
        if _key(script) not in seen:
            seen.add(_key(script))
            unique.append(script)
    context["script_files"] = unique


def setup(app):
    app.connect("html-page-context", dedupe_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
