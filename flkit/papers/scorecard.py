"""The replication scorecard: every item of the five documents, our number beside theirs, one verdict.

Two halves make the record:

* the **items**, typed once per document in ``flkit/papers/items/<doc>.yaml``: the item as the document
  names it, where it stands in the document, the document's value where it gives one, the book page that
  reproduces it and the label it carries there, or why it is not executed (``status``);
* the **checks**, computed by the chapter's code when a page is executed: a page ends with
  :func:`record`, which stores its claim checks, each under the item it tests, in the executed notebook.
  :func:`collect` reads them back from the book's executed pages, with the profile and git commit each
  page was computed with (``metadata.flkit``).

:func:`verdict` is the one rule that turns an item's checks into a verdict, in one vocabulary (:data:`VERDICTS`);
the *scale* of every check (the document's setting, a stand-in, or reduced: :func:`page_scale`, derived from the
profile a page ran with) is kept beside it and never folded into it, and so are the runs still to be made at
the document's scale (the owed-work ledger, :func:`still_to_run`). :func:`table` joins the two halves, :func:`counts`
and :func:`status_table` summarise them (the scorecard page and the introduction's
status table).  ``python -m flkit.papers.scorecard --intro`` rewrites the introduction's table from the
record; a test fails when the committed one differs.

Besides the five documents, ``items/book.yaml`` holds the book's own items (:data:`OWN`, source
:data:`OWN_SOURCE`): what the book states across the documents, checked by the chapter "Across the documents"
(its errata and equivalences). They are recorded, verdicted and listed like the others, but apart, and counted in
no document (:func:`own`, :func:`beyond`).

The items, :func:`record`, :func:`page_checks` and the verdict rule live in :mod:`flkit.papers.verdicts` (which
chapters import; re-exported here under the same names), the scale of the five documents' pages in
:mod:`flkit.papers.scales`. This module sits above the chapters and the owed-work ledger (:mod:`flkit.owed`) and
is imported by none of them.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import pandas as pd

from flkit import owed
from flkit.papers import claims, scales
from flkit.papers.across import rare_users, sensitivity
from flkit.papers.claims import Check
from flkit.papers.verdicts import (  # noqa: F401  (re-exported: the scorecard's names, as before the split)
    _GLUE_MIME, _GLUE_PREFIX, _ITEMS, CHECKED, DOCUMENT_SCALE, DOCUMENTS, GLUE_KEY, KINDS, OWN, OWN_SOURCE, RULE,
    SCALES, SOURCES, STATUSES, VERDICTS, Item, _check_item, _departures, _finite, _join, _load, _text,
    _verdict_words, document, item_scale, items, page_checks, page_verdicts, record, rows, scale_kind, verdict)
from flkit.reproduce import generated, regenerate

__all__ = ["DOCUMENTS", "OWN", "OWN_SOURCE", "VERDICTS", "SCALES", "SOURCES", "own", "beyond", "page_verdicts",
           "verdict_box", "box", "Item", "items", "record", "collect", "page_checks", "page_scale",
           "scale_kind", "item_scale", "verdict", "still_to_run", "table", "counts", "status_table", "main"]

_REPO = Path(__file__).resolve().parents[2]
BOOK = _REPO / "book"


def collect(book: Path = BOOK) -> pd.DataFrame:
    """Every check recorded by the book's executed pages, with the page, its profile and git commit."""
    out = []
    for nb in sorted(book.glob("*/*.ipynb")):
        rs, meta = page_checks(nb)
        page = f"{nb.parent.name}/{nb.stem}"
        params = meta.get("parameters", {})
        scale = page_scale(page, params) if rs else DOCUMENT_SCALE
        for r in rs:
            out.append(dict(r, page=page, profile=params.get("profile"), commit=(meta.get("commit") or "")[:12],
                            scale=r.get("scale") or scale))
    cols = ["doc", "item", "what", "verdict", "ours", "spread", "reference", "margin", "rule", "page", "profile",
            "commit", "scale"]
    return pd.DataFrame(out, columns=cols)


def _sensitivity_scale(params: Mapping) -> list[str]:
    """The sensitivity page's departures: those of the stored runs each of its claims reads."""
    return sensitivity.scale_parts(params)


def _rare_users_scale(params: Mapping) -> list[str]:
    return rare_users.scale_of(params)


# pages whose scale follows from the parameters they ran with: the five documents' chapters'
# (flkit.papers.scales.DERIVED) and those of the chapter "Across the documents"
_DERIVED = {"across/sensitivity": _sensitivity_scale, "across/rare_users": _rare_users_scale, **scales.DERIVED}


def page_scale(page: str, parameters: Mapping) -> str:
    """The scale of a page's checks, from the parameters it ran with (``metadata.flkit.parameters``): what its
    settings replace or make smaller against the document's setting (for the pages that run the chapter's
    profiles), any stand-in its document's items file states for the whole page (``scale:`` in the header),
    and, for another page run at a profile other than "paper", that profile (:func:`flkit.papers.scales.page_scale`
    with the pages of every chapter, "Across the documents" included)."""
    return scales.page_scale(page, parameters, _DERIVED)


def verdict_box(doc: str, checks: Mapping[str, Iterable[Check]], *, page: str, tests: str,
                parameters: Mapping | None = None, headline: str | None = None) -> str:
    """The page's verdict first, as Markdown (glued into the page's first cell as ``verdict_box``): what the page
    tests, at which scale (:func:`page_scale` of its `parameters`), our number beside the document's for the
    `headline` item (default: the first item of `checks`) and the verdicts of the items it checks, each from
    :func:`verdict`; the same verdicts as the scorecard's (a test recomputes them)."""
    checks = {k: list(v) for k, v in checks.items()}
    vs = page_verdicts(doc, checks)
    head = headline if headline is not None else next(iter(checks))
    if head not in checks:
        raise ValueError(f"headline {head!r} is not an item of this page's checks")
    known = {it.id: it for it in items(doc)}
    mine = (lambda i: True) if doc == OWN else (lambda i: not known[i].source)
    own_items = {i: v for i, v in vs.items() if mine(i)}
    other = {i: v for i, v in vs.items() if not mine(i)}
    scale = page_scale(page, dict(parameters or {}))
    c = next((x for x in checks[head] if math.isfinite(x.ours)), checks[head][0])
    document_side = c.rule.startswith(("|ours - document|", "ours - document", "document - ours", "measured",
                                       "mean over seeds"))
    if not math.isfinite(c.ours) and not math.isfinite(c.reference):
        numbers = ""            # a pass/fail criterion: its words and its rule say it all
    elif not document_side:
        numbers = f"ours {claims.number(c.ours, c.spread)}, tested against {claims.number(c.reference)}"
    elif math.isfinite(c.reference):
        numbers = f"ours {claims.number(c.ours, c.spread)}, the document's {claims.number(c.reference)}"
    else:
        numbers = f"ours {claims.number(c.ours, c.spread)}"
    hs = item_scale(known[head], pd.DataFrame(dict(scale=[x.scale or scale for x in checks[head]])))
    own = sorted({x.scale for cs in checks.values() for x in cs if x.scale and x.scale != scale})
    if c.scale and c.scale != scale:
        numbers += f"{', ' if numbers else ''}{c.scale}"
    lines = [f"**What this page tests.** {tests[:1].upper() + tests[1:]}.",
             f"**Scale.** {scale}." + (f" Checks from other runs carry their own: {'; '.join(own)}." if own else ""),
             f"**Headline: {head}.** {c.what}{': ' + numbers if numbers else ''}; rule: {c.rule.rstrip('.')}. "
             f"Verdict: **{vs[head]}**"
             + ("" if hs == DOCUMENT_SCALE or vs[head] not in CHECKED else
                f" ({_SCALE_WORDS[scale_kind(hs)]}, as the scale above says)" if hs == scale else
                f" ({hs})") + ".",
             f"**Verdicts of the {len(own_items)} item{'s' if len(own_items) != 1 else ''} "
             f"{'of the book' + chr(39) + 's own' if doc == OWN else 'of document ' + doc} this page checks.** "
             f"{_verdict_words(own_items.values())}."]
    if other:
        lines.append(f"**Beyond the document** ({len(other)} claims of other sources, not counted in its items): "
                     f"{_verdict_words(other.values())}.")
    if len(vs) <= 8:
        lines += [f"- {i}: **{v}**" for i, v in vs.items()]
    return "\n\n".join(lines[:-len(vs)] if len(vs) <= 8 else lines) + (
        "\n\n" + "\n".join(lines[-len(vs):]) if len(vs) <= 8 else "")


def box(doc: str, checks: Mapping[str, Iterable[Check]], **kw) -> str:
    """Glue :func:`verdict_box` as ``verdict_box`` (Markdown) into the executing page; returns it."""
    from myst_nb import glue
    from IPython.display import Markdown
    text = verdict_box(doc, checks, **kw)
    glue("verdict_box", Markdown(text), display=False)
    return text


def still_to_run(item: Item, unpaid: Iterable[str]) -> str:
    """The runs at the document's scale still to be made for `item` (its owed-work ledger id while unpaid),
    listed beside its verdict; "" when none."""
    return item.owed if item.owed and item.owed in set(unpaid) else ""


def label(v: str, scale: str) -> str:
    """A verdict as a reader sees it: with its scale beside it unless the checks ran in the document's setting
    (\"reproduced (stand-in: ...)\")."""
    return v if scale == DOCUMENT_SCALE or v not in CHECKED else f"{v} ({scale})"


def _fmt(x, spread=None) -> str:
    return claims.number(x, spread if isinstance(spread, float) else None, na="")


def table(book: Path = BOOK) -> pd.DataFrame:
    """One row per item of the five documents: the document's value, ours, the verdict (:func:`verdict`), the
    scale of its checks (:func:`item_scale`), the runs still to be made at the document's scale
    (:func:`still_to_run`) and provenance."""
    ck = collect(book)
    unpaid = owed.unpaid_ids()
    out = []
    for it in items():
        mine = ck[(ck["doc"] == it.doc) & (ck["item"] == it.id)]
        v = verdict(it, mine)
        n_ok = int(mine["verdict"].isin(claims.OK).sum())
        refs = mine["reference"].dropna()
        doc_value = _fmt(it.value, it.sd) if it.value is not None else (
            _fmt(float(refs.iloc[0])) if len(refs) == 1 and mine["rule"].iloc[0].startswith("|ours - document|")
            else "")
        ours = ""
        if len(mine) == 1 and mine["ours"].notna().all():
            ours = _fmt(float(mine["ours"].iloc[0]), mine["spread"].iloc[0])
        if v == "not executable here":
            detail = f"needs {it.missing}"
        elif v == "not attempted":
            detail = it.note or ""
        else:
            detail = f"{n_ok} of {len(mine)} agree or confirmed"
            n_bad = int(mine["verdict"].isin(claims.FAILED).sum())
            if n_bad:
                detail += f", {n_bad} differ or contradicted"
            if v == "finding":
                detail += f"; {it.finding}"
            elif v == "nothing to compare with":
                detail += f"; {it.nothing_to_compare}"
        out.append(dict(document=it.doc, item=it.id, kind=it.kind, where=it.where, page=it.page or "",
                        shown_as=it.shown_as or "", document_value=doc_value or (it.text or ""), ours=ours,
                        verdict=v, scale=item_scale(it, mine) if v in CHECKED else "", checks=detail,
                        still_to_run=still_to_run(it, unpaid),
                        profile=", ".join(sorted(set(mine["profile"].dropna()))),
                        commit=", ".join(sorted(set(mine["commit"].dropna()))), owed=it.owed or "",
                        source=it.source or ""))
    cols = ["document", "item", "kind", "where", "page", "shown_as", "document_value", "ours", "verdict", "scale",
            "checks", "still_to_run", "profile", "commit", "owed", "source"]
    return pd.DataFrame(out, columns=cols)


def _kinds(t: pd.DataFrame) -> pd.Series:
    return pd.Series([scale_kind(x) if x else "" for x in t["scale"]], index=t.index, dtype=object)


def own(t: pd.DataFrame) -> pd.DataFrame:
    """The rows of `t` that are the documents' own items (not those of another source: ``source``)."""
    return t[t["source"].fillna("") == ""] if "source" in t else t


def beyond(t: pd.DataFrame) -> pd.DataFrame:
    """The rows of `t` that a page checks from another source (``source``, e.g. "beyond the notes"): scored
    and listed apart, not counted among the document's items."""
    return t[t["source"].fillna("") != ""] if "source" in t else t.iloc[0:0]


def counts(t: pd.DataFrame) -> pd.DataFrame:
    """Items per document and verdict, and how many of them have runs still to be made at the document's
    scale ("still to run": beside the verdicts, not one of them); the documents' own items only (:func:`own`)."""
    t = own(t)
    c = pd.DataFrame(0, index=pd.Index(DOCUMENTS, name="document"), columns=list(VERDICTS))
    for (d, v), n in (t.groupby(["document", "verdict"]).size().items() if len(t) else []):
        c.loc[d, v] = n
    c["items"] = c[list(VERDICTS)].sum(axis=1)
    c["still to run"] = [int((t[t["document"] == d]["still_to_run"] != "").sum()) for d in DOCUMENTS]
    return c


def by_scale(t: pd.DataFrame) -> pd.DataFrame:
    """Checked items per document, verdict and scale (the document's setting, a stand-in, reduced); the
    documents' own items only (:func:`own`)."""
    t = own(t)
    chk = t[t["verdict"].isin(CHECKED)]
    idx = pd.MultiIndex.from_product([DOCUMENTS, SCALES], names=["document", "scale"])
    c = pd.DataFrame(0, index=idx, columns=list(CHECKED))
    for (d, k, v), n in (chk.assign(kind=_kinds(chk)).groupby(["document", "kind", "verdict"]).size().items()
                         if len(chk) else []):
        c.loc[(d, k), v] = n
    return c


def numbers(c: pd.DataFrame) -> dict[str, int]:
    """The counts the scorecard page quotes in its text: n_items and n_<first words of each verdict>."""
    keys = {v: "n_" + v.replace("'", "").replace(" ", "_") for v in VERDICTS}
    return {"n_items": int(c["items"].sum()), **{keys[v]: int(c[v].sum()) for v in VERDICTS},
            "n_still_to_run": int(c["still to run"].sum())}


def _cell(n: int, sc: pd.Series) -> str:
    """A count with the part of it that ran on a stand-in or reduced beside it: "12 (3 stand-in, 1 reduced)"."""
    extra = [f"{int(sc[k])} {k}" for k in SCALES[1:] if sc[k]]
    return f"{n} ({', '.join(extra)})" if extra else str(n)


def status_table(t: pd.DataFrame) -> str:
    """The introduction's status table (Markdown), from the record: items per verdict, each count of a checked
    verdict with how many of its items ran on a stand-in or reduced, and the items with runs still to be made
    at the document's scale; followed by what each document still lacks: the data that cannot be obtained
    here and the GPU minutes owed (from :mod:`flkit.owed`)."""
    c = counts(t)
    sc = by_scale(t)
    names = [v[0].upper() + v[1:] for v in VERDICTS]
    head = "| Document | Items | " + " | ".join(names) + " | Still to run |"
    lines = [head, "|---|" + "--:|" * (len(VERDICTS) + 2)]
    for d in DOCUMENTS:
        meta = document(d)
        name = f"{d} {meta.get('short', '')}".strip()
        doc = f"{{doc}}`{name} <{meta['chapter']}/index>`" if meta.get("chapter") else f"{name} (no chapter yet)"
        r = c.loc[d]
        cells = [_cell(int(r[v]), sc.loc[d][v]) if v in CHECKED else str(int(r[v])) for v in VERDICTS]
        lines.append(f"| {doc} | {r['items']} | " + " | ".join(cells) + f" | {int(r['still to run'])} |")
    ledger = owed.frame()
    lines.append("")
    extra = beyond(t)
    for (d, src), g in extra.groupby(["document", "source"], sort=True):
        n = g["verdict"].value_counts()
        counted = ", ".join(f"{k} {v}" for v, k in n.items())
        if src == OWN_SOURCE:
            meta = document(d)
            lines.append(f"- {src[0].upper() + src[1:]} ({{doc}}`{meta.get('short', '')} <{meta['chapter']}/index>`, "
                         f"not counted above): {len(g)} items that the book states across the documents and "
                         f"checks: {counted}.")
            continue
        lines.append(f"- {d} {document(d).get('short', '')}, {src} (not counted above): {len(g)} claims of other "
                     "sources that the pages check: " + counted + ".")
    for d in DOCUMENTS:
        missing = sorted({it.missing for it in items(d) if it.status == "not executable"})
        gpu = ledger[ledger["document"] == d] if len(ledger) else ledger
        parts = []
        if missing:
            parts.append("not executable here for want of " + ", ".join(missing))
        if len(gpu):
            cost = [f"about {int(gpu[c].sum())} {unit}" for c, unit in
                    (("gpu_minutes", "GPU minutes"), ("cpu_minutes", "minutes of one CPU thread")) if gpu[c].sum()]
            parts.append(f"{' and '.join(cost)} still to run at the document's scale "
                         f"({len(gpu)} ledger item{'s' if len(gpu) > 1 else ''})")
        if parts:
            lines.append(f"- {d} {document(d).get('short', '')}: " + "; ".join(parts) + ".")
    return "\n".join(lines)


COLOURS = {"reproduced": "#2a9d5c", "partly": "#9fd08a", "not reproduced": "#d1495b",
           "not testable at this scale": "#f2b134", "nothing to compare with": "#c9b8e8", "finding": "#5fa8d3",
           "not executable here": "#8d99ae", "not attempted": "#e5e5e5"}


_TABLE_CSS = ("<style>.scorecard td, .scorecard th {font-size: 0.8em; padding: 2px 6px; vertical-align: top; "
              "text-align: left} .scorecard details {margin: 0.4em 0}</style>")


def _html_table(df: pd.DataFrame, colour: str | None = None) -> str:
    import html
    head = "".join(f"<th>{html.escape(c)}</th>" for c in df.columns)
    body = []
    for _, r in df.iterrows():
        cells = []
        for c in df.columns:
            style = f' style="background-color: {COLOURS[r[c]]}"' if c == colour and r[c] in COLOURS else ""
            cells.append(f"<td{style}>{html.escape(str(r[c]))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<table class="scorecard"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def items_view(t: pd.DataFrame, doc: str):
    """One document's items as the scorecard page shows them: the checked items in a table (document order,
    verdicts coloured), then the items not executable here grouped by what is missing, then the items not
    attempted with the reason, each folded."""
    import html

    from IPython.display import HTML
    if doc == OWN:
        return _own_view(t[t["document"] == doc])
    mine, extra = own(t[t["document"] == doc]), beyond(t[t["document"] == doc])
    if mine.empty:
        return HTML("<p>No item listed yet: not attempted.</p>")
    shown = mine[mine["verdict"].isin(CHECKED)]
    view = shown[["item", "document_value", "ours", "verdict", "scale", "checks", "still_to_run", "page"]].rename(
        columns={"document_value": "document's value", "ours": "ours (± se)", "checks": "our checks",
                 "still_to_run": "still to run at the document's scale", "page": "our page"})
    parts = [_TABLE_CSS, _html_table(view, colour="verdict") if len(view) else "<p>No item is checked yet.</p>"]
    ne = mine[mine["verdict"] == "not executable here"]
    if len(ne):
        groups = "".join(f"<p><b>{html.escape(need)}</b> ({len(g)}): {html.escape('; '.join(g['item']))}</p>"
                         for need, g in ne.groupby("checks", sort=False))
        parts.append(f'<details class="scorecard"><summary>{len(ne)} items not executable here</summary>{groups}'
                     "</details>")
    na = mine[mine["verdict"] == "not attempted"]
    if len(na):
        tab = _html_table(na[["item", "checks"]].rename(columns={"checks": "why"}))
        parts.append(f'<details class="scorecard"><summary>{len(na)} items not attempted</summary>{tab}'
                     "</details>")
    for src, g in extra.groupby("source", sort=True):
        tab = _html_table(g[["item", "verdict", "scale", "checks", "page"]].rename(
            columns={"checks": "our checks", "page": "our page"}), colour="verdict")
        parts.append(f"<p><b>{html.escape(src[0].upper() + src[1:])}</b>: {len(g)} claims of other sources that "
                     f"the pages check, scored here and not counted among the document's items.</p>{tab}")
    return HTML("".join(parts))


def _own_view(t: pd.DataFrame):
    """The book's own items (:data:`OWN`) as the scorecard page shows them: one table, verdicts coloured; a
    finding's "our checks" names the slip."""
    from IPython.display import HTML
    if t.empty:
        return HTML("<p>No item of the book's own is listed yet.</p>")
    view = t[["item", "verdict", "scale", "checks", "page"]].rename(columns={"checks": "our checks",
                                                                           "page": "our page"})
    return HTML(_TABLE_CSS + f"<p><b>The book's own</b>: {len(t)} items, scored here and not counted among any "
                "document's items.</p>" + _html_table(view, colour="verdict"))


def bars(c: pd.DataFrame, ax=None):
    """Items per document, stacked by verdict (one bar per document)."""
    import matplotlib.pyplot as plt
    if ax is None:
        _, ax = plt.subplots()
    labels = [f"{d} {document(d).get('short', '')}".strip() for d in c.index]
    left = pd.Series(0, index=c.index, dtype=float)
    for v in VERDICTS:
        ax.barh(labels, c[v], left=left, color=COLOURS[v], label=v, edgecolor="white", linewidth=0.5)
        left += c[v]
    ax.invert_yaxis()
    ax.set_xlabel("items of the document")
    ax.grid(axis="y", visible=False)
    ax.legend(ncols=3, loc="upper center", bbox_to_anchor=(0.5, -0.28), frameon=False)
    return ax


def pages(book: Path = BOOK) -> pd.DataFrame:
    """Each executed page that records checks: its profile, the git commit and the machine it ran on."""
    out = []
    for nb in sorted(book.glob("*/*.ipynb")):
        rs, meta = page_checks(nb)
        if rs:
            page = f"{nb.parent.name}/{nb.stem}"
            out.append(dict(page=page, checks=len(rs), profile=meta.get("parameters", {}).get("profile"),
                            scale=page_scale(page, meta.get("parameters", {})), commit=(meta.get("commit") or "")[:12],
                            machine=meta.get("machine", ""), minutes=round(meta.get("wall_time_s", 0) / 60, 1)))
    return pd.DataFrame(out, columns=["page", "checks", "profile", "scale", "commit", "machine", "minutes"])


def publish(t: pd.DataFrame, key: str = "scorecard_table") -> None:
    """Store the scorecard table in the executed scorecard page (to test that the page is current)."""
    from IPython.display import display
    display({_GLUE_MIME: t.to_json(orient="records")}, raw=True,
            metadata={"scrapbook": dict(name=key, mime_prefix=_GLUE_PREFIX)})


def published(path: Path, key: str = "scorecard_table") -> pd.DataFrame | None:
    """The table :func:`publish` stored in an executed notebook; None when there is none."""
    nb = json.loads(Path(path).read_text())
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []):
            if out.get("metadata", {}).get("scrapbook", {}).get("name") == key:
                return pd.DataFrame(json.loads(_text(out["data"][_GLUE_MIME])))
    return None


_BEGIN, _END = "<!-- scorecard: status table (python -m flkit.papers.scorecard --intro) -->", "<!-- /scorecard -->"


def intro_block(text: str) -> tuple[int, int]:
    """(start, end) of the generated status table in the introduction's text."""
    return generated(text, _BEGIN, _END)


# --------------------------------------------------------------------------------------------------------
# the chapter indexes: one generated block each, from the same table as the scorecard and the intro

_CH_BEGIN = "<!-- scorecard: chapter verdicts (python -m flkit.papers.scorecard --intro) -->"
_CH_END = "<!-- /scorecard chapter verdicts -->"


def _scale_words(t: pd.DataFrame) -> str:
    """'all at the document's setting' or '3 at the document's setting, 2 on a stand-in, 1 reduced'."""
    k = _kinds(t[t["verdict"].isin(CHECKED)]).value_counts()
    if not len(k):
        return ""
    if len(k) == 1:
        only = k.index[0]
        return "all at the document's setting" if only == DOCUMENT_SCALE else f"all {_SCALE_WORDS[only]}"
    return ", ".join(f"{int(k[s])} "
                     f"{'at the document' + chr(39) + 's setting' if s == DOCUMENT_SCALE else _SCALE_WORDS[s]}"
                     for s in SCALES if s in k)


_SCALE_WORDS = {"stand-in": "on a stand-in", "reduced": "reduced"}


def chapter_block(t: pd.DataFrame, doc: str) -> str:
    """The chapter index's verdicts (Markdown): per page, the verdicts of the document's items it checks
    (:func:`_verdict_words`, as its verdict box says them) and at which scale, the claims of other sources
    apart, then the items on no page; the same rows as the scorecard (:func:`table`)."""
    mine = t[t["document"] == doc]
    ch = document(doc).get("chapter")
    lines = ["Every verdict below is computed from the pages' stored checks by the book's one rule (the "
             "{doc}`scorecard <../scorecard/index>` lists each item with its numbers and scale).\n"]
    for page, g in mine[mine["page"] != ""].groupby("page", sort=False):
        stem = page.split("/", 1)[1] if page.startswith(f"{ch}/") else f"../{page}"
        o, b = own(g), beyond(g)
        parts = []
        if len(o):
            parts.append(_verdict_words(o["verdict"]) + (f"; {_scale_words(o)}" if _scale_words(o) else ""))
        if len(b):
            parts.append(f"{len(b)} claim{'s' if len(b) > 1 else ''} of other sources, not counted: "
                         + _verdict_words(b["verdict"]))
        still = int((g["still_to_run"] != "").sum())
        if still:
            parts.append(f"{still} with runs still to make at the document's scale")
        lines.append(f"- {{doc}}`{stem}`: " + "; ".join(parts) + ".")
    rest = own(mine[mine["page"] == ""])
    if len(rest):
        lines.append("- On no page: " + _verdict_words(rest["verdict"]) + ".")
    o = own(mine)
    lines.append(f"\nIn all, the document's {len(o)} items: {_verdict_words(o['verdict'])}.")
    return "\n".join(lines)


def write_chapter_blocks(t: pd.DataFrame, book: Path = BOOK) -> list[Path]:
    """Rewrite the generated verdicts block of every chapter index; returns the files written."""
    out = []
    for d in DOCUMENTS:
        ch = document(d).get("chapter")
        if ch and (book / ch / "index.md").is_file():
            regenerate(book / ch / "index.md", chapter_block(t, d), _CH_BEGIN, _CH_END)
            out.append(book / ch / "index.md")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="The replication scorecard.")
    ap.add_argument("--intro", action="store_true", help="rewrite the introduction's status table from the record")
    args = ap.parse_args(argv)
    t = table()
    if args.intro:
        path = BOOK / "intro.md"
        regenerate(path, status_table(t), _BEGIN, _END)
        print(f"rewrote the status table in {path.relative_to(_REPO)}")
        for p in write_chapter_blocks(t):
            print(f"rewrote the verdicts of {p.relative_to(_REPO)}")
        return 0
    print(counts(t).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
