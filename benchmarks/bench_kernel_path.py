"""What pinning the CPU's numerical path would cost (flkit.numerics, item 3).

Runs small seeded workloads of the book (the golden cases of tests/golden.py: float32 Fed-CVaR-Avg runs with
an MLP on MNIST and a LeNet on Fashion-MNIST, the float64 MIFA logistic runs) in fresh processes under each
kernel path: this machine's own choice, ATen's AVX2 kernels, and the pinned path (flkit.numerics.SECOND_PATH:
ATen's scalar kernels, MKL's SSE2-compatible branch). The paths take turns (A B C A B C ...), so a drift of the
machine's speed hits all of them; the table gives each path's median wall time and its ratio to the
machine's own path, on one thread::

    .venv/bin/python benchmarks/bench_kernel_path.py --repeats 3 --out results/benchmarks/kernel_path_cpu.csv
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from flkit import numerics  # noqa: E402

PATHS = {"own": {}, "avx2": {"ATEN_CPU_CAPABILITY": "avx2"}, "pinned": numerics.SECOND_PATH}
CASES = ("cvar_mnist", "cvar_fmnist", "mifa_logistic")
_CHILD = ("import sys, time; sys.path[:0] = [{tests!r}, {repo!r}]; import golden, torch; from flkit import numerics; "
          "golden.compute({case!r}); t = time.perf_counter(); golden.compute({case!r}); "
          "print(time.perf_counter() - t, numerics.kernel_path(), sep='|')")


def once(case: str, env: dict) -> tuple[float, str]:
    """(seconds of the second of two computations of `case`, the kernel path) in a fresh process."""
    base = {k: v for k, v in os.environ.items() if k not in numerics.SECOND_PATH}
    code = _CHILD.format(tests=str(REPO / "tests"), repo=str(REPO), case=case)
    out = subprocess.run([sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True,
                         check=True, cwd=REPO)
    seconds, path = out.stdout.strip().splitlines()[-1].split("|")
    return float(seconds), path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated golden cases (default {CASES})")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None, help="CSV of the medians and ratios")
    args = ap.parse_args(argv)
    rows = []
    for case in args.cases.split(","):
        for r in range(args.repeats):
            for name, env in PATHS.items():
                s, path = once(case, env)
                rows.append(dict(case=case, path=name, kernel_path=path, repeat=r, seconds=s))
                print(f"{case:<14} {name:<7} {path:<30} {s:7.2f} s", flush=True)
    df = pd.DataFrame(rows)
    med = df.groupby(["case", "path", "kernel_path"], sort=False)["seconds"].median().reset_index()
    own = med[med.path == "own"].set_index("case")["seconds"]
    med["ratio_to_own"] = (med["seconds"] / med["case"].map(own)).round(2)
    med["seconds"] = med["seconds"].round(2)
    med["cpu"] = numerics.cpu_model()
    med["measured"] = time.strftime("%Y-%m-%d")
    print(med.to_string(index=False))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        med.to_csv(args.out, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
