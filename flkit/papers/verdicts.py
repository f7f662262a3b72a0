"""The documents' items and the one verdict rule: the half of the scorecard that a chapter's code reads.

The items of the five documents (and the book's own, :data:`OWN`) are typed once in
``flkit/papers/items/<doc>.yaml`` (:func:`items`, :func:`document`); a page stores its claim checks under them with
:func:`record`, and :func:`page_checks` reads them back from an executed notebook. :func:`verdict` turns an item's
checks into one verdict of :data:`VERDICTS` (the rule :data:`RULE`); :func:`page_verdicts` does so for the items a
page checks. The scale vocabulary (:data:`SCALES`, :func:`scale_kind`) lives here too; the scale of a page's
checks from its parameters is :mod:`flkit.papers.scales` (and :func:`flkit.papers.scorecard.page_scale`).

This module imports no chapter: chapters import it. :mod:`flkit.papers.scorecard`, the book-level record
(every item beside the owed-work ledger, the introduction's tables), re-exports every name defined here.
"""
from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pandas as pd
import yaml

from flkit.papers import claims
from flkit.papers.claims import Check

__all__ = ["DOCUMENTS", "OWN", "OWN_SOURCE", "VERDICTS", "CHECKED", "DOCUMENT_SCALE", "SCALES", "STATUSES", "SOURCES",
           "KINDS", "RULE", "GLUE_KEY", "Item", "document", "items", "rows", "record", "page_checks", "scale_kind",
           "item_scale", "verdict", "page_verdicts"]

_ITEMS = Path(__file__).resolve().parent / "items"
DOCUMENTS = ("000", "001", "002", "003", "004")
# the book's own items (``items/book.yaml``): statements the book makes across the documents (the errata, the
# rules that go under different names), checked by the chapter "Across the documents"; scored and listed apart,
# never counted among any document's items
OWN = "book"
OWN_SOURCE = "the book's own"
GLUE_KEY = "scorecard"
_GLUE_PREFIX = "application/papermill.record/"      # MyST-NB's glue prefix: stored in the notebook, not shown
# holds a JSON string: nbformat takes structures only under application/*json
_GLUE_MIME = _GLUE_PREFIX + "application/json"

# the verdicts, in the order the scorecard lists them: the book's one vocabulary
VERDICTS = ("reproduced", "partly", "not reproduced", "not testable at this scale", "nothing to compare with",
            "finding", "not attempted", "not executable here")
CHECKED = VERDICTS[:6]           # the verdicts of an item that a page checks
# the scale of a check or item: "document's setting", "stand-in: <what replaces what>", "reduced: <what is smaller>"
DOCUMENT_SCALE = "document's setting"
SCALES = (DOCUMENT_SCALE, "stand-in", "reduced")
STATUSES = ("checked", "not executable", "not attempted")
# where an item comes from when it is not the document's own: listed apart, never counted in the document's counts
SOURCES = ("beyond the notes", OWN_SOURCE)
KINDS = ("figure", "table", "table cell", "theorem", "lemma", "corollary", "proposition", "assumption",
         "equation", "algorithm", "claim", "remark", "example")
RULE = ("An item is reproduced when every check of it agrees or is confirmed (the book's agreement rule); "
        "partly when some do and the others differ, are contradicted or cannot tell; not reproduced when none "
        "does and at least one differs or is contradicted; not testable at this scale when no check can tell. "
        "An item where the document gives no number or image to compare with is 'nothing to compare with'; an "
        "item whose checks show the document's statement or assumption false or infeasible is a finding. The "
        "scale of the checks (the document's setting, a stand-in, reduced) is stated beside every verdict and "
        "never changes it; so is what is still to run at the document's scale. An "
        "item whose data cannot be obtained here is not executable here.")


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
    scale: str | None = None         # "stand-in: ..." / "reduced: ...": where this item's runs depart from its page's
    finding: str | None = None       # what the checks show false or infeasible in the document's statement
    nothing_to_compare: str | None = None   # why the document gives no number or image to compare ours with
    source: str | None = None        # "beyond the notes": a claim of another source that a page checks; scored,
    #                                  listed apart and not counted among the document's items (SOURCES)
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
    if it.scale is not None:
        scale_kind(it.scale, where)
    if it.source is not None and it.source not in SOURCES:
        raise ValueError(f"{where}: source {it.source!r} is not one of {SOURCES}")
    if (doc == OWN) != (it.source == OWN_SOURCE):
        raise ValueError(f"{where}: the book's own items are those of items/{OWN}.yaml, each with "
                         f"`source: {OWN_SOURCE}`, and only those")
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
    """The items of one document (or of the book's own, :data:`OWN`), or of all five and the book's own."""
    docs = DOCUMENTS + (OWN,) if doc is None else (doc,)
    return [it for d in docs for it in _load(d)[1]]


# --------------------------------------------------------------------------------------------------------
# the page side


def _finite(x):
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


def rows(doc: str, checks: Mapping[str, Iterable[Check]] | Iterable[tuple[str, Check]]) -> list[dict]:
    """The record's rows for a page: one per check, under the id of the document item it tests."""
    pairs = [(k, c) for k, cs in checks.items() for c in cs] if isinstance(checks, Mapping) else list(checks)
    if doc not in DOCUMENTS + (OWN,):
        raise ValueError(f"doc {doc!r} is not one of {DOCUMENTS + (OWN,)}")
    out = []
    for item, c in pairs:
        if not isinstance(c, Check):
            raise TypeError(f"item {item!r}: expected a claims.Check, got {type(c).__name__}")
        out.append(dict(doc=doc, item=str(item), what=c.what, verdict=c.verdict, ours=_finite(float(c.ours)),
                        spread=_finite(float(c.spread)), reference=_finite(float(c.reference)),
                        margin=_finite(float(c.margin)), rule=c.rule, **({"scale": c.scale} if c.scale else {})))
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
    display({_GLUE_MIME: json.dumps(rs)}, raw=True,
            metadata={"scrapbook": dict(name=GLUE_KEY, mime_prefix=_GLUE_PREFIX)})
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
            if (out.get("metadata", {}).get("scrapbook", {}).get("name") == GLUE_KEY
                    and _GLUE_MIME in out.get("data", {})):
                found.append(json.loads(_text(out["data"][_GLUE_MIME])))
    if len(found) > 1:
        raise ValueError(f"{path}: the page records its checks {len(found)} times; call scorecard.record once")
    return (found[0] if found else []), nb.get("metadata", {}).get("flkit", {})


# --------------------------------------------------------------------------------------------------------
# the scale


def scale_kind(scale: str, where: str = "scale") -> str:
    """"document's setting", "stand-in" or "reduced": the kind of a scale text. A text that joins several
    departures ("stand-in: ...; reduced: ...") is a stand-in when any part is."""
    if scale == DOCUMENT_SCALE:
        return DOCUMENT_SCALE
    parts = [p.strip() for p in str(scale).split("; ") if p.strip()]
    kinds = [p.split(":", 1)[0] for p in parts]
    if not parts or any(k not in SCALES[1:] or not p.split(":", 1)[1:] or not p.split(":", 1)[1].strip()
                        for k, p in zip(kinds, parts)):
        raise ValueError(f"{where}: {scale!r} is not a scale: write {DOCUMENT_SCALE!r}, 'stand-in: <what replaces "
                         "what>' or 'reduced: <what is smaller>' (several joined by '; ')")
    return "stand-in" if "stand-in" in kinds else "reduced"


def _join(parts: Iterable[str]) -> str:
    parts = [p for p in dict.fromkeys(parts) if p and p != DOCUMENT_SCALE]
    parts.sort(key=lambda p: not p.startswith("stand-in"))      # stand-ins first, then what is smaller
    return "; ".join(parts) or DOCUMENT_SCALE


def _departures(ours: Mapping, paper: Mapping, stand_in: Mapping[str, str], reduced: Mapping[str, str],
                words=lambda k, v: str(v)) -> list[str]:
    """'stand-in: <ours> for <the document's>' for each key of `stand_in` where the settings differ (`words`
    names the values),
    'reduced: <key> <ours> (document: <theirs>)' for each key of `reduced`; the mappings name each key."""
    out = []
    for keys, kind in ((stand_in, "stand-in"), (reduced, "reduced")):
        for k, name in keys.items():
            if k in ours and k in paper and ours[k] != paper[k]:
                if kind == "stand-in":
                    out.append(f"stand-in: {words(k, ours[k])} for {words(k, paper[k])}")
                else:
                    out.append(f"reduced: {name} {words(k, ours[k])} (document: {words(k, paper[k])})")
    return out


def item_scale(item: Item, checks: pd.DataFrame) -> str:
    """The item's scale: its own (``scale:`` in the items file) where its runs depart from its page's, else
    the departures of the pages that check it (``scale`` of :func:`collect`'s rows); the document's setting
    when there are none."""
    if item.scale:
        return item.scale
    if "scale" not in checks or checks.empty:
        return DOCUMENT_SCALE
    return _join(s for v in checks["scale"].dropna() for s in str(v).split("; "))


# --------------------------------------------------------------------------------------------------------
# the verdict


def verdict(item: Item, checks: pd.DataFrame) -> str:
    """The item's verdict from its checks (rows of :func:`collect` for this item: their ``verdict``), in the
    book's vocabulary (:data:`VERDICTS`); the one rule, :data:`RULE`. Neither the scale of the checks nor the
    runs still owed change it: they are stated beside it (:func:`item_scale`, :func:`still_to_run`)."""
    if item.status == "not attempted":
        return "not attempted"
    if item.status == "not executable":
        return "not executable here"
    if checks.empty:
        raise ValueError(f"document {item.doc}, item {item.id!r}: checked, but page {item.page!r} records no "
                         "check of it")
    unknown = sorted(set(checks["verdict"]) - set(claims.CHECK_VERDICTS))
    if unknown:
        raise ValueError(f"document {item.doc}, item {item.id!r}: unknown check verdict(s) {unknown}")
    if item.nothing_to_compare:
        return "nothing to compare with"
    ok = checks["verdict"].isin(claims.OK)
    failed = checks["verdict"].isin(claims.FAILED)
    if ok.all():
        return "reproduced"
    if item.finding and failed.any():
        return "finding"
    if ok.any():
        return "partly"
    return "not reproduced" if failed.any() else "not testable at this scale"


def _verdict_words(vs: Iterable[str]) -> str:
    """"reproduced (2 of 3 items) and partly (1 of 3 items)", in the order of :data:`VERDICTS`."""
    vs = list(vs)
    n = pd.Series(vs, dtype=object).value_counts()
    parts = [f"{v} ({int(n[v])} of {len(vs)} item{'s' if len(vs) > 1 else ''})" for v in VERDICTS if v in n]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def page_verdicts(doc: str, checks: Mapping[str, Iterable[Check]]) -> dict[str, str]:
    """{item id: its verdict} (:func:`verdict`, the one rule) for the items a page's `checks` are filed under."""
    known = {it.id: it for it in items(doc)}
    unknown = sorted(set(checks) - set(known))
    if unknown:
        raise ValueError(f"document {doc}: item id(s) {unknown} are not in flkit/papers/items/{doc}.yaml")
    return {i: verdict(known[i], pd.DataFrame(rows(doc, {i: list(cs)}))) for i, cs in checks.items()}
