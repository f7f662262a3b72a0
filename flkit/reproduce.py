"""What re-running each page costs: the command that re-executes it as published, how long its last
execution took, on what machine and at which commit, and the stored runs it read (how many, on which device
and platform, how long they took to compute: the compute behind its numbers, which a re-execution that reads
them does not repeat). Read from the executed pages' metadata (`flkit.run` records the stored runs a page
used) and the results stores' manifests, never typed in::

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

from flkit.results import compute_summary, computed_on, run_compute_s

_REPO = Path(__file__).resolve().parents[1]
_PAGE = _REPO / "book" / "appendix" / "reproduce.md"
_BEGIN = "<!-- reproduce: per-page table (python -m flkit.reproduce --write) -->"
_END = "<!-- /reproduce -->"

__all__ = ["pages", "page_runs", "stores", "computed_on", "markdown", "generated", "regenerate", "main"]


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
                        machine=fl.get("machine", ""), commit=_commit(fl), stored_runs=fl.get("stored_runs")))
    return pd.DataFrame(out)


def _commit(fl: dict) -> str:
    """The commit a page was executed at, in words: "d9dcc86", "d9dcc86 with 2 files modified (flkit/x.py, ...)";
    records of older versions of flkit.run ("<hash>+modified") do not list the files."""
    commit = str(fl.get("commit") or "not recorded")
    if commit.endswith("+modified"):
        return f"{commit.removesuffix('+modified')} with files modified (not listed)"
    modified = fl.get("modified") or []
    if modified:
        shown = ", ".join(modified[:3]) + (", ..." if len(modified) > 3 else "")
        return f"{commit} with {len(modified)} file{'s' * (len(modified) > 1)} modified ({shown})"
    return commit


def page_runs(record: dict | None) -> str:
    """The stored runs a page used (its metadata's `stored_runs`), in words: per device and platform, how many
    and their compute time; "not recorded" for a page executed before flkit.run recorded them."""
    if record is None or (isinstance(record, float) and pd.isna(record)):
        return "not recorded (executed before pages recorded it)"
    names = list(record.get("read", [])) + list(record.get("computed", []))
    if not names:
        return "none (computed in the execution)"
    groups: dict = defaultdict(list)
    missing = 0
    for name in names:
        path = _REPO / f"{name}.json"
        try:
            m = json.loads(path.read_text())
        except (OSError, ValueError):
            missing += 1
            continue
        device = str(m.get("device")).split(" (")[0]
        groups[(device, computed_on(m.get("platform")))].append(m)
    parts = []
    for (device, where), ms in sorted(groups.items()):
        s = compute_summary(ms)
        parts.append(f"{s['runs']} run{'s' * (s['runs'] > 1)} on {device} "
                     f"({'platform not recorded' if where == 'not recorded' else where}), {_minutes(s['compute_s'])}")
    if missing:
        parts.append(f"{missing} not in the stores here")
    computed = len(record.get("computed", []))
    return "; ".join(parts) + (f" ({computed} of them computed in the execution)" if computed else "")


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 6 else f"{seconds:.1f} s"


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
        a["seconds"] += run_compute_s(m)
        a["no_commit"] += m.get("git_commit") is None
        a["platforms"].add(computed_on(m.get("platform")))
    rows = [dict(store=f"results/{k}", runs=v["runs"], device=", ".join(sorted(v["devices"])),
                 compute_minutes=round(v["seconds"] / 60, 1), without_commit=v["no_commit"],
                 computed_on="; ".join(sorted(v["platforms"])))
            for k, v in sorted(agg.items())]
    return pd.DataFrame(rows)


def _duration(s) -> str:
    if s is None:
        return "n/a"
    return f"{s:.0f} s" if s < 90 else f"{s / 60:.1f} min"


def markdown() -> str:
    """The three tables of the reproduce page, in Markdown: each page's command; each page's last execution
    and the stored runs it read; each results store."""
    p = pages()
    lines = ["| Page | Command (from the repository root) |", "|---|---|"]
    for _, r in p.iterrows():
        lines.append(f"| {r.page} | `{r.command}` |")
    lines += ["", "| Page | Its last execution: time, machine, commit | The stored runs it read: device, "
                  "compute time |", "|---|---|---|"]
    for _, r in p.iterrows():
        lines.append(f"| {r.page} | {_duration(r.seconds)}, {r.machine}, at {r.commit} | {page_runs(r.stored_runs)} |")
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
