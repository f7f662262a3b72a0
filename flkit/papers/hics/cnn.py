"""The document's CNN on the FMNIST page: the stored runs of Table 1's setting (2) with the four cheap methods.

The ``paper`` profile of :mod:`flkit.papers.hics.fmnist` trains the document's CNN
(:func:`flkit.models.hics_fmnist_paper`); its jobs in setting (2) with random, pow-d, CS and HiCS-FL (one job per
seed, :func:`~flkit.papers.hics.fmnist.is_setting2_main`) are the runs that decide Table 1's FMNIST column and Fig.
2's setting (2). They are paid in pieces (``python -m flkit.sweep hics paper --setting '(2)' --group main``) and
the page reads whichever of them are stored, whatever profile it runs at: :func:`runs` never trains.

The checks these runs give (:func:`checks`: Table 1's rounds to 0.75 and speed-ups, the claims of setting (2))
carry their own scale: the document's setting when every seed of the profile is stored, else "reduced: seeds".
:func:`prefer` files them in place of the linear stand-in's checks of the same item and wording, so that an item
is decided by the runs closest to the document's setting; the stand-in's checks stay on the page.
"""
from __future__ import annotations

import dataclasses

import pandas as pd

from flkit.papers import claims, scales, verdicts
from flkit.papers.hics import fmnist, items
from flkit.papers.hics.common import DOC_SPEEDUP, DOC_TABLE1, DOC_TARGET

__all__ = ["PROFILE", "PAGE", "METHODS", "source", "model_words", "jobs", "runs", "powd_runs", "scale", "checks",
           "prefer", "figure", "table1", "values"]

PROFILE = "paper"                     # the profile whose setting-(2) runs are read
PAGE = "hics/fmnist"
METHODS = ("random", "pow-d", "CS", "HiCS-FL")


def source(page_profile: str) -> str:
    """The profile whose runs the page reads here: the smoke profile's own (seconds, stored by the smoke run
    itself) for "smoke", else :data:`PROFILE`."""
    return "smoke" if page_profile == "smoke" else PROFILE


def model_words(name: str = PROFILE) -> str:
    """"the document's CNN", or the model profile ``name`` trains in its place."""
    m = fmnist.profile(name)["model"]
    return "the document's CNN" if m == "hics_fmnist_paper" else f"the '{name}' profile's {m}"


def jobs(seeds=None, name: str = PROFILE) -> list[dict]:
    """Profile ``name``'s setting-(2) jobs of the four cheap methods (``seeds``: the profile's when None)."""
    return [j for j in fmnist.jobs(fmnist.profile(name, seeds=seeds)) if fmnist.is_setting2_main(j)]


def runs(store, seeds=None, name: str = PROFILE) -> pd.DataFrame:
    """The stored runs among :func:`jobs` (tidy rows as :func:`flkit.papers.hics.fmnist.run_job` returns, with
    the config columns); an empty frame when none is stored. Nothing is trained."""
    return _stored(store, jobs(seeds, name))


def _stored(store, js: list[dict]) -> pd.DataFrame:
    """The stored runs among the jobs ``js`` (an empty frame with the tidy columns when none is); nothing trains."""
    stored = [j for j in js if store.done(j)]
    if not stored:
        return pd.DataFrame(columns=["group", "setting", "method", "seed", "round", "metric", "value"])
    return store.load_many(stored)


def powd_runs(store, name: str = PROFILE) -> pd.DataFrame:
    """The stored runs of profile ``name``'s pow-d diagnostic (group "powd_d": pow-d with the authors' d = 2K in
    setting (2)); an empty frame when none is stored. Nothing is trained."""
    return _stored(store, [j for j in fmnist.jobs(fmnist.profile(name)) if j["group"] == "powd_d"])


def scale(table: pd.DataFrame, name: str = PROFILE) -> str:
    """The scale of the checks of ``table``'s runs: the ``paper`` profile's departures with the seeds stored
    (:func:`flkit.papers.scales.page_scale`), each naming these runs ("reduced: the document's CNN runs, seeds
    [0, 1] (document: [0, 1, 2])"): the document's setting when every seed is there."""
    seeds = sorted(int(s) for s in table["seed"].unique())
    sc = scales.page_scale(PAGE, dict(profile=name, seeds=seeds))
    if sc == verdicts.DOCUMENT_SCALE:
        return sc
    runs = f"{model_words(name)} runs, "        # which runs a departure is of, on a page whose own runs are others
    return "; ".join(part.replace(": ", f": {runs}", 1) for part in sc.split("; "))


def checks(table: pd.DataFrame, name: str = PROFILE) -> tuple[dict, float]:
    """({item: checks}, target): Table 1's checks (:func:`~flkit.papers.hics.fmnist.table1_checks`) and the claim
    checks of setting (2) (:func:`~flkit.papers.hics.fmnist.claim_checks` at the page's own target, random's
    smoothed accuracy at round 100, computed on these runs), filed like the page's, each with :func:`scale`.
    Empty with a NaN target when no run is stored."""
    if table.empty:
        return {}, float("nan")
    T = int(fmnist.profile(name)["rounds"])
    shared = fmnist.truncate(table, T)
    target = fmnist.target_accuracy(fmnist.smoothed_mean(shared, "test_acc"), T)
    rt = fmnist.rounds_table(shared, target)
    filed = items.merge(items.by_item("fmnist", fmnist.claim_checks(rt, fmnist.variability(shared, start=T // 2), T)),
                        fmnist.table1_checks(table))
    sc = scale(table, name)
    return {it: [dataclasses.replace(c, scale=sc) for c in cs] for it, cs in filed.items()}, target


def prefer(first: dict, then: dict) -> dict:
    """{item: checks}: ``first``'s checks, and those of ``then`` whose (item, wording) ``first`` does not check."""
    have = {(it, c.what) for it, cs in first.items() for c in cs}
    out = {it: list(cs) for it, cs in first.items()}
    for it, cs in then.items():
        keep = [c for c in cs if (it, c.what) not in have]
        if keep:
            out.setdefault(it, []).extend(keep)
    return out


def figure(table: pd.DataFrame, name: str = PROFILE):
    """Fig. 2's setting (2) on these runs: the smoothed mean test accuracy over seeds per method, over the
    profile's rounds; None when no run is stored."""
    if table.empty:
        return None
    T = int(fmnist.profile(name)["rounds"])
    acc = fmnist.smoothed_mean(fmnist.truncate(table, T), "test_acc")
    n = table["seed"].nunique()
    return fmnist.plot_metric(acc, "smoothed", "test accuracy", f"Fig. 2 of the HiCS-FL paper (FMNIST), setting (2), "
                              f"{model_words(name)}: mean over {n} seed{'s' * (n > 1)}, smoothed")


def table1(table: pd.DataFrame, target: float) -> pd.DataFrame:
    """Table 1's FMNIST column on these runs (:func:`~flkit.papers.hics.fmnist.table1`: the document's numbers
    beside ours), the four methods run; before any run is stored, the document's numbers with ours "no run stored"."""
    if table.empty:
        return pd.DataFrame([{"method": m, "document: rounds to 0.75": DOC_TABLE1[m],
                              "document: speed-up": f"{DOC_SPEEDUP[m]:.1f}x", "ours": "no run stored"}
                             for m in METHODS]).set_index("method")
    return fmnist.table1(table, target).loc[list(METHODS)]


def values(table: pd.DataFrame, filed: dict, target: float, name: str = PROFILE) -> dict:
    """The page's numbers and words on these runs: seeds stored (and a clause saying so), the scale, the target (as
    text), per method the rounds to 0.75 (mean over the seeds that reach it) and speed-up over random beside the
    document's, and the checks' verdicts."""
    seeds = sorted(int(s) for s in table["seed"].unique()) if not table.empty else []
    out = dict(cnn_runs=len(seeds), cnn_of=len(fmnist.profile(name)["seeds"]),
               cnn_seeds=", ".join(map(str, seeds)) or "none",
               cnn_target=f"{target:.3f}" if seeds else "none (no run stored)",
               cnn_scale=scale(table, name) if seeds else "no run stored")
    allseeds = ", ".join(map(str, fmnist.profile(name)["seeds"]))
    out["cnn_run_words"] = (f"of it, setting (2)'s runs of {', '.join(METHODS[:-1])} and {METHODS[-1]} are stored for "
                            f"seed{'s' * (len(seeds) > 1)} {out['cnn_seeds']} (of {allseeds}) and read in their own "
                            "section" if seeds else "no run of it is stored here yet")
    if not seeds:
        out["cnn_words"] = (f"No run of {model_words(name)} in setting (2) is stored yet: Table 1's FMNIST column "
                            "and Fig. 2 are read on the linear stand-in only.")
        out["cnn_checks"] = "none"
        return out
    t1 = table1(table, target)                  # the words read the table's cells: one computation of both
    col, spc = f"ours: rounds to {DOC_TARGET:.3f}", f"ours: speed-up ({DOC_TARGET:.3f})"
    parts = [f"{m} {row[col]}" + (" rounds" if row[col][0].isdigit() else "")
             + ("" if m == "random" or row[spc] == "n/a" else f", {row[spc]}")
             + f" (document: {row['document: rounds to 0.75']} rounds, {row['document: speed-up']})"
             for m, row in t1.iterrows()]
    out["cnn_words"] = (f"With {model_words(name)} ({len(seeds)} of {out['cnn_of']} seeds stored), to a smoothed test "
                        f"accuracy of {DOC_TARGET}: " + "; ".join(parts) + ".")
    flat = [c for cs in filed.values() for c in cs]
    out["cnn_checks"] = claims.summary(list({c.what: c for c in flat}.values()))
    return out
