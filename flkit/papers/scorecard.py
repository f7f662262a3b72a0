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
the document's scale (the owed-work ledger, :func:`still_to_run`). :func:`table` joins the two halves, :func:`counts` and :func:`status_table` summarise them (the scorecard page and the introduction's
status table).  ``python -m flkit.papers.scorecard --intro`` rewrites the introduction's table from the
record; a test fails when the committed one differs.

Besides the five documents, ``items/book.yaml`` holds the book's own items (:data:`OWN`, source
:data:`OWN_SOURCE`): what the book states across the documents, checked by the chapter "Across the documents"
(its errata and equivalences). They are recorded, verdicted and listed like the others, but apart, and counted in
no document (:func:`own`, :func:`beyond`).
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

__all__ = ["DOCUMENTS", "OWN", "OWN_SOURCE", "VERDICTS", "SCALES", "SOURCES", "own", "beyond", "page_verdicts", "verdict_box", "box", "Item", "items", "record", "collect", "page_checks", "page_scale",
           "scale_kind", "item_scale", "verdict", "still_to_run", "table", "counts", "status_table", "main"]

_REPO = Path(__file__).resolve().parents[2]
_ITEMS = Path(__file__).resolve().parent / "items"
BOOK = _REPO / "book"
DOCUMENTS = ("000", "001", "002", "003", "004")
# the book's own items (``items/book.yaml``): statements the book makes across the documents (the errata, the
# rules that go under different names), checked by the chapter "Across the documents"; scored and listed apart,
# never counted among any document's items
OWN = "book"
OWN_SOURCE = "the book's own"
GLUE_KEY = "scorecard"
_GLUE_PREFIX = "application/papermill.record/"      # MyST-NB's glue prefix: stored in the notebook, not shown
_GLUE_MIME = _GLUE_PREFIX + "application/json"    # holds a JSON string: nbformat takes structures only under application/*json

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
        params = meta.get("parameters", {})
        scale = page_scale(page, params) if rs else DOCUMENT_SCALE
        for r in rs:
            out.append(dict(r, page=page, profile=params.get("profile"), commit=(meta.get("commit") or "")[:12],
                            scale=r.get("scale") or scale))
    cols = ["doc", "item", "what", "verdict", "ours", "spread", "reference", "margin", "rule", "page", "profile",
            "commit", "scale"]
    return pd.DataFrame(out, columns=cols)


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


def _cvar_scale(experiment: str):
    def derive(params: Mapping) -> list[str]:
        from flkit.papers.cvar import experiments as ex
        known = ex.settings(experiment, params.get("profile") or "paper")
        s = ex.settings(experiment, params.get("profile") or "paper",
                        **{k: v for k, v in params.items() if k in known and k != "profile"})
        ram = {"random-draw": "a random draw of 27 of the 30 RAM probabilities", "authors": "the authors' 30"}
        return _departures(s, ex.PAPER[experiment], {"ram": "RAM", "input_scaling": "input scaling", "model": "model",
                                                      "dataset": "data"},
                           {"rounds": "rounds", "seeds": "seeds", "panels": "panels", "alphas": "alphas",
                            "train_subset": "training images", "test_subset": "test images"},
                           words=lambda k, v: ram.get(v, v) if k == "ram" else f"{k} {ex._short(v, k)}" if k in ("input_scaling", "model", "dataset") else ex._short(v, k))
    return derive


def _fedau_scale(params: Mapping) -> list[str]:
    from flkit.papers.fedau import table as tb
    s = tb.profile(params.get("profile") or "paper", **{k: params.get(k) for k in ("dataset", "model", "rounds", "seeds")
                                                       if params.get(k) is not None})
    data = [] if s["dataset"] in tb.DOCUMENT_DATASETS else [
        f"stand-in: {tb.NAMES.get(s['dataset'], s['dataset'])} for the document's data sets "
        f"({', '.join(tb.NAMES[d] for d in tb.DOCUMENT_DATASETS)})"]
    words = lambda k, v: ("the authors' CNN" if v is None else tb.MODEL_WORDS.get(v, str(v))) if k == "model" else (  # noqa: E731
        f"{v:,}" if isinstance(v, int) else f"{len(v)} seeds" if k == "seeds" else str(v))
    return data + _departures(s, tb.PROFILES["paper"], {"model": "model"},
                              {"rounds": "rounds", "clients": "clients", "seeds": "seeds",
                               "train_subset": "training images", "test_subset": "test images"}, words)


def _hics_scale(params: Mapping) -> list[str]:
    from flkit.papers.hics import experiments as ex
    s = ex.profile(params.get("profile") or "paper", **{k: params.get(k) for k in ("rounds", "seeds")
                                                       if params.get(k) is not None})
    paper = ex.profile("paper")
    words = lambda k, v: {"logreg": "multinomial logistic regression", "hics_fmnist_paper": "the document's CNN"}.get(  # noqa: E731
        v, str(v)) if k == "model" else (s["rounds"] if v is None and k == "divfl_table1_rounds" else v)
    return _departures(s, paper, {"model": "model"},
                       {"rounds": "rounds", "seeds": "seeds", "clients": "clients", "subset": "training images",
                        "divfl_table1_rounds": "DivFL's rounds in Table 1's setting"}, words)


def _fedau_table_scale(params: Mapping) -> list[str]:
    """The FedAU table's departures, and, where the page read the table with step sizes retuned on the stand-in
    (``retune``), that replacement of the authors' CIFAR-10 step sizes."""
    steps = ["stand-in: step sizes tuned on the stand-in (validation accuracy, tuning seeds apart from the "
             "table's) for the authors' CIFAR-10 step sizes"] if params.get("retune") else []
    return _fedau_scale(params) + steps


def _sensitivity_scale(params: Mapping) -> list[str]:
    """The sensitivity page's departures: those of the stored runs each of its claims reads."""
    from flkit.papers.across import sensitivity
    return sensitivity.scale_parts(params)


def _rare_users_scale(params: Mapping) -> list[str]:
    from flkit.papers.across import rare_users
    return rare_users.scale_of(params)


# pages whose scale follows from the parameters they ran with (their chapter's own profiles)
_DERIVED = {"across/sensitivity": _sensitivity_scale, "across/rare_users": _rare_users_scale,
            "cvar/synthetic_2d": _cvar_scale("synthetic_2d"), "cvar/mnist": _cvar_scale("mnist"),
            "cvar/fmnist_table": _cvar_scale("fmnist"), "fedau/table": _fedau_table_scale, "fedau/cutoff": _fedau_scale,
            "hics/fmnist": _hics_scale}


def page_scale(page: str, parameters: Mapping) -> str:
    """The scale of a page's checks, from the parameters it ran with (``metadata.flkit.parameters``): what its
    settings replace or make smaller against the document's setting (for the pages that run the chapter's
    profiles), any stand-in its document's items file states for the whole page (``scale:`` in the header),
    and, for another page run at a profile other than "paper", that profile."""
    parts = []
    for d in DOCUMENTS:
        hand = (document(d).get("scale") or {}).get(page)
        if hand:
            scale_kind(hand, f"items/{d}.yaml, scale of {page}")
            parts.append(hand)
    if page in _DERIVED:
        parts += _DERIVED[page](parameters)
    elif parameters.get("profile") not in (None, "paper"):
        parts.append(f"reduced: the '{parameters['profile']}' profile")
    return _join(parts)


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
    hs = item_scale(known[head], pd.DataFrame(dict(scale=[scale])))
    lines = [f"**What this page tests.** {tests[:1].upper() + tests[1:]}.",
             f"**Scale.** {scale}.",
             f"**Headline: {head}.** {c.what}{': ' + numbers if numbers else ''}; rule: {c.rule.rstrip('.')}. "
             f"Verdict: **{vs[head]}**" + ("" if hs == DOCUMENT_SCALE or vs[head] not in CHECKED else
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
    from flkit import owed
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
    from flkit import owed
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
    return ", ".join(f"{int(k[s])} {'at the document' + chr(39) + 's setting' if s == DOCUMENT_SCALE else _SCALE_WORDS[s]}"
                     for s in SCALES if s in k)


_SCALE_WORDS = {"stand-in": "on a stand-in", "reduced": "reduced"}


def chapter_block(t: pd.DataFrame, doc: str) -> str:
    """The chapter index's verdicts (Markdown): per page, the verdicts of the document's items it checks
    (:func:`_verdict_words`, as its verdict box says them) and at which scale, the claims of other sources
    apart, then the items on no page; the same rows as the scorecard (:func:`table`)."""
    mine = t[t["document"] == doc]
    ch = document(doc).get("chapter")
    lines = [f"Every verdict below is computed from the pages' stored checks by the book's one rule (the "
             f"{{doc}}`scorecard <../scorecard/index>` lists each item with its numbers and scale).\n"]
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
    from flkit.reproduce import regenerate
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
        from flkit.reproduce import regenerate
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
