"""The replication scorecard: every item of the five documents, our number beside theirs, one verdict.

Two halves make the record:

* the **items**, typed once per document in ``flkit/papers/items/<doc>.yaml``: the item as the document
  names it, where it stands in the document, the document's value where it gives one, the book page that
  reproduces it and the label it carries there, or why it is not executed (``status``);
* the **checks**, computed by the chapter's code when a page is executed: a page ends with
  :func:`record`, which stores its claim checks, each under the item it tests, in the executed notebook.
  :func:`collect` reads them back from the book's executed pages, with the profile and git commit each
  page was computed with (``metadata.flkit``).

:func:`verdict` is the one rule that turns an item's checks into a verdict; :func:`table` joins the two
halves, :func:`counts` and :func:`status_table` summarise them (the scorecard page and the introduction's
status table).  ``python -m flkit.papers.scorecard --intro`` rewrites the introduction's table from the
record; a test fails when the committed one differs.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pandas as pd
import yaml

from flkit.papers import claims
from flkit.papers.claims import Check

__all__ = ["DOCUMENTS", "VERDICTS", "Item", "items", "record", "collect", "page_checks", "verdict", "table",
           "counts", "status_table", "main"]

_REPO = Path(__file__).resolve().parents[2]
_ITEMS = Path(__file__).resolve().parent / "items"
BOOK = _REPO / "book"
DOCUMENTS = ("000", "001", "002", "003", "004")
GLUE_KEY = "scorecard"
_GLUE_PREFIX = "application/papermill.record/"      # MyST-NB's glue prefix: stored in the notebook, not shown
_GLUE_MIME = _GLUE_PREFIX + "application/json"    # holds a JSON string: nbformat takes structures only under application/*json

# the verdicts, in the order the scorecard lists them
VERDICTS = ("reproduced", "partly", "not reproduced", "owed at the document's scale", "not executable here",
            "not attempted yet")
STATUSES = ("checked", "not executable", "not attempted")
KINDS = ("figure", "table", "table cell", "theorem", "lemma", "corollary", "proposition", "assumption",
         "equation", "algorithm", "claim", "remark", "example")
RULE = ("An item is reproduced when every check of it agrees or is confirmed (the book's agreement rule), not "
        "reproduced when none does, partly otherwise; an item whose page ran at a smaller profile than the "
        "document's, or whose runs in the document's setting are still in the owed-work ledger, is owed at the "
        "document's scale whatever its checks say; an item whose data cannot be "
        "obtained here is not executable here.")


@dataclass(frozen=True)
class Item:
    """One item of a document (see the module docstring and ``items/README.md`` for the fields)."""
    doc: str
    id: str
    kind: str
    where: str
    page: str | None = None          # "fedau/table": book/fedau/table.ipynb
    shown_as: str | None = None      # the label our page gives it ("Table 2", "Fig. 3"); must appear on the page
    status: str = "checked"
    value: float | None = None       # the document's number, where it gives one and no check carries it
    sd: float | None = None
    text: str | None = None          # the document's statement or number as printed
    missing: str | None = None       # what is missing here ("the CIFAR-10 images"), for "not executable"
    owed: str | None = None          # the owed-work ledger id that completes it at the document's scale
    note: str | None = None
    extra: dict = field(default_factory=dict, compare=False)


def _check_item(doc: str, raw: dict) -> Item:
    where = f"items/{doc}.yaml, item {raw.get('id')!r}"
    known = {f for f in Item.__dataclass_fields__ if f not in ("doc", "extra")}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {unknown}; allowed: {sorted(known)}")
    for f in ("id", "kind", "where"):
        if not raw.get(f):
            raise ValueError(f"{where}: field {f!r} is required")
    it = Item(doc=doc, **raw)
    if it.kind not in KINDS:
        raise ValueError(f"{where}: kind {it.kind!r} is not one of {KINDS}")
    if it.status not in STATUSES:
        raise ValueError(f"{where}: status {it.status!r} is not one of {STATUSES}")
    if it.status == "checked" and not (it.page and it.shown_as):
        raise ValueError(f"{where}: a checked item needs `page` and `shown_as`")
    if it.status == "not executable" and not it.missing:
        raise ValueError(f"{where}: a not-executable item needs `missing` (which data or hardware)")
    return it


@cache
def _load(doc: str) -> tuple[dict, tuple[Item, ...]]:
    path = _ITEMS / f"{doc}.yaml"
    if not path.is_file():
        return {"document": doc, "title": f"document {doc}", "chapter": None}, ()
    raw = yaml.safe_load(path.read_text())
    items = tuple(_check_item(doc, r) for r in raw.get("items", []))
    ids = [i.id for i in items]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ValueError(f"items/{doc}.yaml: duplicate item ids {dup}")
    return {k: v for k, v in raw.items() if k != "items"}, items


def document(doc: str) -> dict:
    """The document's header (title, short name, chapter)."""
    return _load(doc)[0]


def items(doc: str | None = None) -> list[Item]:
    """The items of one document, or of all five."""
    docs = DOCUMENTS if doc is None else (doc,)
    return [it for d in docs for it in _load(d)[1]]


# --------------------------------------------------------------------------------------------------------
# the page side


def _finite(x):
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


def rows(doc: str, checks: Mapping[str, Iterable[Check]] | Iterable[tuple[str, Check]]) -> list[dict]:
    """The record's rows for a page: one per check, under the id of the document item it tests."""
    pairs = [(k, c) for k, cs in checks.items() for c in cs] if isinstance(checks, Mapping) else list(checks)
    if doc not in DOCUMENTS:
        raise ValueError(f"doc {doc!r} is not one of {DOCUMENTS}")
    out = []
    for item, c in pairs:
        if not isinstance(c, Check):
            raise TypeError(f"item {item!r}: expected a claims.Check, got {type(c).__name__}")
        out.append(dict(doc=doc, item=str(item), what=c.what, verdict=c.verdict, ours=_finite(float(c.ours)),
                        spread=_finite(float(c.spread)), reference=_finite(float(c.reference)),
                        margin=_finite(float(c.margin)), rule=c.rule))
    return out


def record(doc: str, checks: Mapping[str, Iterable[Check]] | Iterable[tuple[str, Check]], *,
           show: bool = True) -> pd.DataFrame:
    """Store this page's claim checks for the scorecard (call once, in the page's last cell) and, with
    `show`, display them: every check the page makes, under the document item it tests. `checks` maps each
    item id (as in ``flkit/papers/items/<doc>.yaml``) to its checks, or is a list of (item id, check) pairs."""
    rs = rows(doc, checks)
    known = {i.id: i for i in items(doc)}
    unknown = sorted({r["item"] for r in rs} - set(known))
    if unknown:
        raise ValueError(f"document {doc}: item id(s) {unknown} are not in flkit/papers/items/{doc}.yaml")
    from IPython.display import display
    display({_GLUE_MIME: json.dumps(rs)}, raw=True, metadata={"scrapbook": dict(name=GLUE_KEY, mime_prefix=_GLUE_PREFIX)})
    df = pd.DataFrame(rs, columns=["doc", "item", "what", "verdict", "ours", "spread", "reference", "margin", "rule"])
    if show:
        n_ok = int(df["verdict"].isin(["agrees", "confirmed"]).sum())
        print(textwrap.fill(f"The checks of this page, as the scorecard records them: {n_ok} of {len(df)} agree or "
                            f"are confirmed, over {df['item'].nunique()} items of document {doc}.", 88))
        view = df[["item", "what", "verdict", "ours", "reference"]].copy()
        for c in ("ours", "reference"):
            view[c] = [claims.number(x) for x in view[c]]
        display(view.style.hide(axis="index"))
        print("Rules applied:\n" + "\n".join(textwrap.fill(r, 88, initial_indent="- ", subsequent_indent="  ")
                                               for r in dict.fromkeys(df["rule"])))
    return df


def _text(v) -> str:
    return "".join(v) if isinstance(v, list) else v


def page_checks(path: Path) -> tuple[list[dict], dict]:
    """(the checks a page recorded, its `metadata.flkit`) from an executed notebook."""
    nb = json.loads(Path(path).read_text())
    found = []
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []):
            if out.get("metadata", {}).get("scrapbook", {}).get("name") == GLUE_KEY and _GLUE_MIME in out.get("data", {}):
                found.append(json.loads(_text(out["data"][_GLUE_MIME])))
    if len(found) > 1:
        raise ValueError(f"{path}: the page records its checks {len(found)} times; call scorecard.record once")
    return (found[0] if found else []), nb.get("metadata", {}).get("flkit", {})


def collect(book: Path = BOOK) -> pd.DataFrame:
    """Every check recorded by the book's executed pages, with the page, its profile and git commit."""
    out = []
    for nb in sorted(book.glob("*/*.ipynb")):
        rs, meta = page_checks(nb)
        page = f"{nb.parent.name}/{nb.stem}"
        for r in rs:
            out.append(dict(r, page=page, profile=meta.get("parameters", {}).get("profile"),
                            commit=(meta.get("commit") or "")[:12]))
    cols = ["doc", "item", "what", "verdict", "ours", "spread", "reference", "margin", "rule", "page", "profile",
            "commit"]
    return pd.DataFrame(out, columns=cols)


# --------------------------------------------------------------------------------------------------------
# the verdict


def verdict(item: Item, checks: pd.DataFrame, unpaid: frozenset[str] | set[str] = frozenset()) -> str:
    """The item's verdict from its checks (rows of :func:`collect` for this item) and the ledger ids still
    `unpaid` (:func:`flkit.owed.ledger`). See :data:`RULE`."""
    if item.status == "not attempted":
        return "not attempted yet"
    if item.status == "not executable":
        return "not executable here"
    if checks.empty:
        raise ValueError(f"document {item.doc}, item {item.id!r}: checked, but page {item.page!r} records no "
                         "check of it")
    if (checks["profile"] != "paper").any() or item.owed in unpaid:
        return "owed at the document's scale"
    ok = checks["verdict"].isin(["agrees", "confirmed"])
    if ok.all():
        return "reproduced"
    return "partly" if ok.any() else "not reproduced"


def _fmt(x, spread=None) -> str:
    return claims.number(x, spread if isinstance(spread, float) else None, na="")


def table(book: Path = BOOK) -> pd.DataFrame:
    """One row per item of the five documents: the document's value, ours, the verdict and provenance."""
    from flkit import owed
    ck = collect(book)
    unpaid = owed.unpaid_ids()
    out = []
    for it in items():
        mine = ck[(ck["doc"] == it.doc) & (ck["item"] == it.id)]
        v = verdict(it, mine, unpaid)
        n_ok = int(mine["verdict"].isin(["agrees", "confirmed"]).sum())
        refs = mine["reference"].dropna()
        doc_value = _fmt(it.value, it.sd) if it.value is not None else (
            _fmt(float(refs.iloc[0])) if len(refs) == 1 and mine["rule"].iloc[0].startswith("|ours - document|")
            else "")
        ours = ""
        if len(mine) == 1 and mine["ours"].notna().all():
            ours = _fmt(float(mine["ours"].iloc[0]), mine["spread"].iloc[0])
        if v == "not executable here":
            detail = f"needs {it.missing}"
        elif v == "not attempted yet":
            detail = it.note or ""
        else:
            detail = f"{n_ok} of {len(mine)} agree or confirmed"
            if v == "owed at the document's scale":
                detail += f" (profile {', '.join(sorted(set(mine['profile'])))})"
                if it.owed in unpaid:
                    detail += f"; owed: {it.owed}"
        out.append(dict(document=it.doc, item=it.id, kind=it.kind, where=it.where, page=it.page or "",
                        shown_as=it.shown_as or "", document_value=doc_value or (it.text or ""), ours=ours,
                        verdict=v, checks=detail, profile=", ".join(sorted(set(mine["profile"].dropna()))),
                        commit=", ".join(sorted(set(mine["commit"].dropna()))), owed=it.owed or ""))
    cols = ["document", "item", "kind", "where", "page", "shown_as", "document_value", "ours", "verdict", "checks",
            "profile", "commit", "owed"]
    return pd.DataFrame(out, columns=cols)


def counts(t: pd.DataFrame) -> pd.DataFrame:
    """Items per document and verdict."""
    c = pd.DataFrame(0, index=pd.Index(DOCUMENTS, name="document"), columns=list(VERDICTS))
    for (d, v), n in (t.groupby(["document", "verdict"]).size().items() if len(t) else []):
        c.loc[d, v] = n
    c["items"] = c.sum(axis=1)
    return c


def numbers(c: pd.DataFrame) -> dict[str, int]:
    """The counts the scorecard page quotes in its text: n_items and n_<first words of each verdict>."""
    keys = dict(zip(VERDICTS, ("n_reproduced", "n_partly", "n_not_reproduced", "n_owed", "n_not_executable",
                               "n_not_attempted")))
    return {"n_items": int(c["items"].sum()), **{keys[v]: int(c[v].sum()) for v in VERDICTS}}


def status_table(t: pd.DataFrame) -> str:
    """The introduction's status table (Markdown), from the record, followed by what each document still
    lacks: the data that cannot be obtained here and the GPU minutes owed (from :mod:`flkit.owed`)."""
    from flkit import owed
    c = counts(t)
    # one narrow column per verdict (the scorecard page names them in full), the document linked to its chapter
    head = "| Document | Items | Reproduced | Partly | Not reproduced | Owed | Not executable | Not attempted |"
    lines = [head, "|---|" + "--:|" * 7]
    for d in DOCUMENTS:
        meta = document(d)
        name = f"{d} {meta.get('short', '')}".strip()
        doc = f"{{doc}}`{name} <{meta['chapter']}/index>`" if meta.get("chapter") else f"{name} (no chapter yet)"
        r = c.loc[d]
        lines.append(f"| {doc} | {r['items']} | " + " | ".join(str(int(r[v])) for v in VERDICTS) + " |")
    ledger = owed.frame()
    lines.append("")
    for d in DOCUMENTS:
        missing = sorted({it.missing for it in items(d) if it.status == "not executable"})
        gpu = ledger[ledger["document"] == d] if len(ledger) else ledger
        parts = []
        if missing:
            parts.append("not executable here for want of " + ", ".join(missing))
        if len(gpu):
            cost = [f"about {int(gpu[c].sum())} {unit}" for c, unit in
                    (("gpu_minutes", "GPU minutes"), ("cpu_minutes", "minutes of one CPU thread")) if gpu[c].sum()]
            parts.append(f"{' and '.join(cost)} owed at the document's scale "
                         f"({len(gpu)} ledger item{'s' if len(gpu) > 1 else ''})")
        if parts:
            lines.append(f"- {d} {document(d).get('short', '')}: " + "; ".join(parts) + ".")
    return "\n".join(lines)


COLOURS = {"reproduced": "#2a9d5c", "partly": "#9fd08a", "not reproduced": "#d1495b",
           "owed at the document's scale": "#f2b134", "not executable here": "#8d99ae", "not attempted yet": "#e5e5e5"}


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
    attempted yet with the reason, each folded."""
    import html

    from IPython.display import HTML
    mine = t[t["document"] == doc]
    if mine.empty:
        return HTML("<p>No item listed yet: not attempted.</p>")
    shown = mine[~mine["verdict"].isin(["not executable here", "not attempted yet"])]
    view = shown[["item", "document_value", "ours", "verdict", "checks", "page"]].rename(columns={
        "document_value": "document's value", "ours": "ours (± se)", "checks": "our checks", "page": "our page"})
    parts = [_TABLE_CSS, _html_table(view, colour="verdict") if len(view) else "<p>No item is checked yet.</p>"]
    ne = mine[mine["verdict"] == "not executable here"]
    if len(ne):
        groups = "".join(f"<p><b>{html.escape(need)}</b> ({len(g)}): {html.escape('; '.join(g['item']))}</p>"
                         for need, g in ne.groupby("checks", sort=False))
        parts.append(f'<details class="scorecard"><summary>{len(ne)} items not executable here</summary>{groups}'
                     "</details>")
    na = mine[mine["verdict"] == "not attempted yet"]
    if len(na):
        tab = _html_table(na[["item", "checks"]].rename(columns={"checks": "why"}))
        parts.append(f'<details class="scorecard"><summary>{len(na)} items not attempted yet</summary>{tab}'
                     "</details>")
    return HTML("".join(parts))


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
            out.append(dict(page=f"{nb.parent.name}/{nb.stem}", checks=len(rs),
                            profile=meta.get("parameters", {}).get("profile"), commit=(meta.get("commit") or "")[:12],
                            machine=meta.get("machine", ""), minutes=round(meta.get("wall_time_s", 0) / 60, 1)))
    return pd.DataFrame(out, columns=["page", "checks", "profile", "commit", "machine", "minutes"])


def publish(t: pd.DataFrame, key: str = "scorecard_table") -> None:
    """Store the scorecard table in the executed scorecard page (to test that the page is current)."""
    from IPython.display import display
    display({_GLUE_MIME: t.to_json(orient="records")}, raw=True, metadata={"scrapbook": dict(name=key, mime_prefix=_GLUE_PREFIX)})


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
    from flkit.reproduce import generated
    return generated(text, _BEGIN, _END)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="The replication scorecard.")
    ap.add_argument("--intro", action="store_true", help="rewrite the introduction's status table from the record")
    args = ap.parse_args(argv)
    t = table()
    if args.intro:
        from flkit.reproduce import regenerate
        path = BOOK / "intro.md"
        regenerate(path, status_table(t), _BEGIN, _END)
        print(f"rewrote the status table in {path.relative_to(_REPO)}")
        return 0
    print(counts(t).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
