"""What re-running each page costs: the command that re-executes it as published, how long its last
execution took and on what machine, and the stored runs it reads (how many, on which device, how long they
took to compute). Read from the executed pages' metadata and the results stores' manifests, never typed in::

    python -m flkit.reproduce            # print the tables
    python -m flkit.reproduce --write    # rewrite them in book/appendix/reproduce.md (a test compares)
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import pandas as pd
import yaml

_REPO = Path(__file__).resolve().parents[1]
_PAGE = _REPO / "book" / "appendix" / "reproduce.md"
_BEGIN = "<!-- reproduce: per-page table (python -m flkit.reproduce --write) -->"
_END = "<!-- /reproduce -->"

__all__ = ["pages", "stores", "computed_on", "markdown", "generated", "regenerate", "main"]


def _arg(value) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    text = text.removesuffix("...").strip()
    return f'"{text}"' if any(ch in text for ch in " []{},") else text


def pages() -> pd.DataFrame:
    """One row per executed page: its re-execution command, last wall time and machine."""
    out = []
    for nb in sorted((_REPO / "book").glob("*/*.ipynb")):
        meta = json.loads(nb.read_text()).get("metadata", {})
        given = meta.get("papermill", {}).get("parameters", {})
        src = meta.get("flkit", {}).get("source", f"notebooks/{nb.parent.name}/{nb.name}")
        cmd = ".venv/bin/python -m flkit.run " + src + "".join(f" -p {k} {_arg(v)}" for k, v in given.items())
        fl = meta.get("flkit", {})
        out.append(dict(page=f"{nb.parent.name}/{nb.stem}", command=cmd, seconds=fl.get("wall_time_s"),
                        machine=fl.get("machine", "")))
    return pd.DataFrame(out)


def stores() -> pd.DataFrame:
    """One row per results store: runs, the devices they ran on and their compute time (a run trained in a
    batch of b runs records the batch's wall time and b: it counts for wall time / b)."""
    agg = defaultdict(lambda: dict(runs=0, devices=set(), seconds=0.0, no_commit=0, platforms=set()))
    for f in sorted((_REPO / "results").rglob("*.json")):
        rel = f.relative_to(_REPO / "results")
        if rel.parts[0] in ("tmp", "benchmarks") or "checkpoints" in rel.parts:
            continue
        try:
            m = json.loads(f.read_text())
        except ValueError:
            continue
        if not isinstance(m, dict) or "csv_sha256" not in m:
            continue
        a = agg["/".join(rel.parts[:-1])]
        a["runs"] += 1
        a["devices"].add(str(m.get("device")))
        a["seconds"] += float(m.get("wall_time_s") or 0.0) / int(m.get("batch_size") or 1)
        a["no_commit"] += m.get("git_commit") is None
        a["platforms"].add(computed_on(m.get("platform")))
    rows = [dict(store=f"results/{k}", runs=v["runs"], device=", ".join(sorted(v["devices"])),
                 compute_minutes=round(v["seconds"] / 60, 1), without_commit=v["no_commit"],
                 computed_on="; ".join(sorted(v["platforms"])))
            for k, v in sorted(agg.items())]
    return pd.DataFrame(rows)


def computed_on(platform: dict | None) -> str:
    """Where a run was computed, from its manifest's platform (flkit.numerics): the GPU, or the CPU model and
    ATen's kernel path; "not recorded" for runs stored before manifests recorded it."""
    if not platform:
        return "not recorded"
    if platform.get("gpu"):
        return platform["gpu"]
    path = str(platform.get("kernel_path", "")).split(",")[0]
    return f"{platform.get('cpu', 'CPU')}, {path} kernels" if path else str(platform.get("cpu", "CPU"))


def _duration(s) -> str:
    if s is None:
        return "n/a"
    return f"{s:.0f} s" if s < 90 else f"{s / 60:.1f} min"


def markdown() -> str:
    """The two tables of the reproduce page, in Markdown."""
    p = pages()
    lines = ["| Page | Command (from the repository root) | Last execution |", "|---|---|---|"]
    for _, r in p.iterrows():
        lines.append(f"| {r.page} | `{r.command}` | {_duration(r.seconds)}, {r.machine} |")
    s = stores()
    lines += ["", "| Results store | Runs | Device | Computed on | Compute time of the runs | "
                  "Runs without a recorded commit |", "|---|---|---|---|---|---|"]
    for _, r in s.iterrows():
        lines.append(f"| `{r.store}` | {r.runs} | {r.device} | {r.computed_on} | {r.compute_minutes:.1f} min | "
                     f"{r.without_commit} |")
    return "\n".join(lines)


def generated(text: str, begin: str = _BEGIN, end: str = _END) -> tuple[int, int]:
    """(start, end) of the generated part of a page's text: between the markers `begin` and `end`."""
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        raise ValueError(f"no generated block between {begin!r} and {end!r}")
    return i + len(begin), j


def regenerate(path: Path, content: str, begin: str = _BEGIN, end: str = _END) -> None:
    """Replace the generated block of the page at `path` by `content`."""
    text = path.read_text()
    i, j = generated(text, begin, end)
    path.write_text(text[:i] + "\n" + content + "\n" + text[j:])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Per-page re-execution commands and costs.")
    ap.add_argument("--write", action="store_true", help=f"rewrite the tables in {_PAGE.relative_to(_REPO)}")
    args = ap.parse_args(argv)
    if args.write:
        regenerate(_PAGE, markdown())
        print(f"rewrote the tables in {_PAGE.relative_to(_REPO)}")
    else:
        print(markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
