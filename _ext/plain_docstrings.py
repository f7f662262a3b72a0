"""Sphinx extension: flkit's docstrings, written as plain text for a terminal, rendered without reST errors.

Most of flkit's docstrings are plain text: aligned tables of symbols, formulas with ``|x|`` and ``*``,
indented continuation lines, underlined headings. reST reads those as substitutions, emphasis, block quotes
or section titles and reports errors, which the book's build (warnings are errors) does not accept. For each
docstring autodoc reads (after napoleon's Google-style sections), this hook leaves it alone when docutils
parses it cleanly; otherwise it rewrites it:

* an underlined heading becomes a bold line;
* a paragraph whose lines are not all at its first line's indentation, or that is laid out in columns (two
  or more spaces inside a line), becomes a literal block, shown as written;
* in the other paragraphs, ``|``, ``*`` and a word's trailing ``_`` outside code spans are escaped, so they
  print as themselves.

If the result still does not parse cleanly, the whole docstring is shown as one literal block. The text is
never changed otherwise: the API reference shows what ``help()`` shows.
"""
from __future__ import annotations

import io
import re

from docutils.core import publish_doctree

_HEADING_RULE = re.compile(r"^\s*([-=~^\"'`#*+])\1{2,}\s*$")
_SPAN = re.compile(r"(:[\w:.-]+:`[^`]*`|``[^`]*``|`[^`]*`_{0,2})")   # roles, literals, interpreted text
_COLUMNS = re.compile(r"\S {2,}\S")
_IGNORED = ("Unknown interpreted text role", "No role entry", "Unknown directive type", 'No directive entry')


def problems(lines: list[str]) -> list[str]:
    """The warnings and errors docutils reports for the text (unknown Sphinx roles and directives aside)."""
    stream = io.StringIO()
    try:
        publish_doctree("\n".join(lines), settings_overrides={
            "report_level": 2, "halt_level": 5, "warning_stream": stream, "file_insertion_enabled": False,
            "raw_enabled": False})
    except Exception as e:  # pragma: no cover - a parser crash counts as a problem
        return [repr(e)]
    return [m for m in stream.getvalue().split("<string>:")
            if m.strip() and not any(k in m for k in _IGNORED)]


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _escape(text: str) -> str:
    """`|`, `*` and a word's trailing `_` escaped outside code spans and roles."""
    out = []
    for i, part in enumerate(_SPAN.split(text)):
        if i % 2:
            out.append(part)
        else:
            part = part.replace("\\", "\\\\").replace("|", "\\|").replace("*", "\\*")
            out.append(re.sub(r"(?<=\w)_(?=\W|$)", r"\\_", part))
    return "".join(out)


def _blocks(lines: list[str]) -> list[list[str]]:
    blocks, cur = [], []
    for line in lines:
        if line.strip():
            cur.append(line)
        elif cur:
            blocks.append(cur)
            cur = []
    if cur:
        blocks.append(cur)
    return blocks


def rewrite(lines: list[str]) -> list[str]:
    """The docstring as reST that shows it as written (see the module docstring)."""
    text, headings = [], set()
    i = 0
    while i < len(lines):                  # underlined headings -> bold lines
        if i + 1 < len(lines) and lines[i].strip() and _HEADING_RULE.match(lines[i + 1]) \
                and len(lines[i + 1].strip()) >= len(lines[i].strip()) - 1:
            heading = f"**{_escape(lines[i].strip())}**"
            headings.add(heading)
            text += [heading, ""]
            i += 2
            continue
        text.append(lines[i])
        i += 1
    out: list[str] = []
    for block in _blocks(text):
        base = _indent(block[0])
        said = [ln for ln in out if ln.strip()]
        literal_intro = bool(said) and said[-1].rstrip().endswith("::")
        if literal_intro:                  # the author's own literal block: keep it as written
            out += [""] + ["    " + ln for ln in _dedent(block)] + [""]
            continue
        mixed = any(_indent(ln) != base for ln in block) or base > 0
        columns = sum(bool(_COLUMNS.search(ln.strip())) for ln in block) >= 2 or \
            (len(block) == 1 and _COLUMNS.search(block[0].strip()) and base > 0)
        if block[0].lstrip().startswith(">>>") or (len(block) == 1 and block[0] in headings):
            out += [ln for ln in block] + [""]
        elif mixed or columns:
            out += ["::", ""] + ["    " + ln for ln in _dedent(block)] + [""]
        else:
            out += [_escape(ln) for ln in block] + [""]
    return out


def _dedent(block: list[str]) -> list[str]:
    cut = min(_indent(ln) for ln in block)
    return [ln[cut:] for ln in block]


def literal(lines: list[str]) -> list[str]:
    body = [ln for ln in lines]
    while body and not body[-1].strip():
        body.pop()
    return ["::", ""] + ["    " + ln for ln in body] + [""]


def process(app, what, name, obj, options, lines: list[str]) -> None:
    if not lines or not problems(lines):
        return
    new = rewrite(lines)
    if problems(new):
        new = literal(lines)
    lines[:] = new


def setup(app):
    app.connect("autodoc-process-docstring", process, priority=600)   # after napoleon (500)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
