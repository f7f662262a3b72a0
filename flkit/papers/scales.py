"""The scale of a page's checks, derived from the parameters it ran with, for the pages of the five documents'
chapters: what their settings replace (a stand-in) or make smaller (reduced) against the document's setting.

:func:`page_scale` joins the stand-in a document's items file states for a whole page (``scale:`` in its
header), the departures of the pages that run their chapter's profiles (:data:`DERIVED`) and, for another page
run at a profile other than "paper", that profile. :func:`flkit.papers.scorecard.page_scale` adds the pages of
the chapter "Across the documents", whose scale is that of the runs they read (this module sits below that
chapter, which reads it).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

from flkit.papers.cvar import common as cvar_ex
from flkit.papers.fedau import table as tb
from flkit.papers.hics import fmnist as hics_ex
from flkit.papers.verdicts import DOCUMENTS, _departures, _join, document, scale_kind

__all__ = ["DERIVED", "page_scale"]

def _cvar_scale(experiment: str):
    def derive(params: Mapping) -> list[str]:
        known = cvar_ex.settings(experiment, params.get("profile") or "paper")
        s = cvar_ex.settings(experiment, params.get("profile") or "paper",
                             **{k: v for k, v in params.items() if k in known and k != "profile"})
        ram = {"random-draw": "a random draw of 27 of the 30 RAM probabilities", "authors": "the authors' 30"}
        return _departures(s, cvar_ex.PAPER[experiment], {"ram": "RAM", "input_scaling": "input scaling",
                                                          "model": "model", "dataset": "data"},
                           {"rounds": "rounds", "seeds": "seeds", "panels": "panels", "alphas": "alphas",
                            "train_subset": "training images", "test_subset": "test images"},
                           words=lambda k, v: (ram.get(v, v) if k == "ram"
                                               else f"{k} {cvar_ex._short(v, k)}"
                                               if k in ("input_scaling", "model", "dataset")
                                               else cvar_ex._short(v, k)))
    return derive


def _fedau_scale(params: Mapping) -> list[str]:
    s = tb.profile(params.get("profile") or "paper",
                   **{k: params.get(k) for k in ("dataset", "model", "rounds", "seeds")
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
    s = hics_ex.profile(params.get("profile") or "paper", **{k: params.get(k) for k in ("rounds", "seeds")
                                                            if params.get(k) is not None})
    paper = hics_ex.profile("paper")
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


# pages whose scale follows from the parameters they ran with (their chapter's own profiles)
DERIVED: dict[str, Callable[[Mapping], list[str]]] = {
    "cvar/synthetic_2d": _cvar_scale("synthetic_2d"), "cvar/mnist": _cvar_scale("mnist"),
    "cvar/fmnist_table": _cvar_scale("fmnist"), "fedau/table": _fedau_table_scale, "fedau/cutoff": _fedau_scale,
    "hics/fmnist": _hics_scale}


def page_scale(page: str, parameters: Mapping,
               derived: Mapping[str, Callable[[Mapping], list[str]]] = DERIVED) -> str:
    """The scale of a page's checks, from the parameters it ran with (``metadata.flkit.parameters``): what its
    settings replace or make smaller against the document's setting (for the pages that run the chapter's
    profiles: `derived`, by default :data:`DERIVED`), any stand-in its document's items file states for the whole
    page (``scale:`` in the header), and, for another page run at a profile other than "paper", that profile."""
    parts = []
    for d in DOCUMENTS:
        hand = (document(d).get("scale") or {}).get(page)
        if hand:
            scale_kind(hand, f"items/{d}.yaml, scale of {page}")
            parts.append(hand)
    if page in derived:
        parts += derived[page](parameters)
    elif parameters.get("profile") not in (None, "paper"):
        parts.append(f"reduced: the '{parameters['profile']}' profile")
    return _join(parts)
