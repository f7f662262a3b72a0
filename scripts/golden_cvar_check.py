"""Bit-for-bit guard for refactors of Fed-CVaR-Avg's local steps and batching.

Runs `flkit.papers.cvar.run_batch` on the smoke configs of the three experiments of document 003 on the CPU
(one vectorized batch per `batch_group`; both the fast path, ``fast=True``, and `cvar.run_round`'s,
``fast=False``) with this checkout's flkit, and either saves the tables (``--save PATH``) or compares
them with saved ones (``--check PATH``) with ``pd.testing.assert_frame_equal(check_exact=True)``
(the frames only: attrs such as wall times and the name of the local-step path are not compared).

    python scripts/golden_cvar_check.py --save /tmp/golden.pkl     # before the change
    python scripts/golden_cvar_check.py --check /tmp/golden.pkl    # after it
"""
from __future__ import annotations

import argparse
import json
import pickle
import sys

from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's flkit, not an installed one
from flkit.papers import cvar  # noqa: E402


def tables() -> dict:
    out = {}
    for exp in ("synthetic_2d", "mnist", "fmnist"):
        configs = cvar.run_configs(cvar.settings(exp, "smoke"))
        groups: dict = {}
        for c in configs:
            groups.setdefault(json.dumps(cvar.batch_group(c), sort_keys=True), []).append(c)
        for fast in (True, False):
            for g, batch in groups.items():
                tabs = cvar.run_batch(batch, "cpu", progress=False, fast=fast, log=lambda _: None)
                for c, t in zip(batch, tabs):
                    out[(exp, fast, json.dumps(c, sort_keys=True))] = (t, t.attrs.get("local_steps"))
        print(f"{exp}: {len(configs)} runs in {len(groups)} batch(es)", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--save", metavar="PATH")
    mode.add_argument("--check", metavar="PATH")
    a = ap.parse_args()
    print(f"flkit: {Path(cvar.__file__).parents[1]}", flush=True)
    now = tables()
    if a.save:
        with open(a.save, "wb") as f:
            pickle.dump({k: t for k, (t, _) in now.items()}, f)
        print(f"saved {len(now)} tables to {a.save}")
        return 0
    with open(a.check, "rb") as f:
        ref = pickle.load(f)
    if set(ref) != set(now):
        print(f"different runs: {len(ref)} saved, {len(now)} now")
        return 1
    for k, t in ref.items():
        got = now[k][0]
        t, got = t.copy(), got.copy()
        t.attrs, got.attrs = {}, {}
        pd.testing.assert_frame_equal(got, t, check_exact=True)
    print(f"all {len(ref)} tables exactly equal "
          f"(local steps now: {sorted({s for _, s in now.values()})})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
