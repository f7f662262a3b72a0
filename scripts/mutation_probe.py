"""Mutation probe of the test suite: plausible one-line bugs, each applied to a fresh copy of the package,
with the fast tests run against it. A mutation is *caught* when the tests fail.

    python scripts/mutation_probe.py                  # every mutation in scripts/mutations/*.py
    python scripts/mutation_probe.py --only engine    # the mutations whose id starts with "engine"
    python scripts/mutation_probe.py --list

Each file in scripts/mutations/ defines ``MUTATIONS``: a list of dicts with
``id`` (unique), ``file`` (path in the repository), ``old`` (a substring that occurs exactly once in that
file), ``new`` (its replacement: the bug) and ``why`` (what the bug is, in words). The probe checks that
``old`` occurs exactly once before running anything. The report (markdown) goes to
results/benchmarks/mutation_report.md: per mutation caught or survived, and the first failing test.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COPY = ("flkit", "tests", "scripts", "benchmarks", "pyproject.toml", "notebooks", "book", "results", "_toc.yml",
        "_config.yml", "environment.yml", "data")


def load_mutations() -> list[dict]:
    out, seen = [], set()
    for path in sorted((REPO / "scripts" / "mutations").glob("*.py")):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        for m in mod.MUTATIONS:
            missing = {"id", "file", "old", "new", "why"} - set(m)
            if missing:
                raise ValueError(f"{path.name}: mutation {m.get('id')!r} lacks {sorted(missing)}")
            if m["id"] in seen:
                raise ValueError(f"mutation id {m['id']!r} is used twice")
            seen.add(m["id"])
            text = (REPO / m["file"]).read_text()
            n = text.count(m["old"])
            if n != 1:
                raise ValueError(f"mutation {m['id']!r}: `old` occurs {n} times in {m['file']} (must be exactly once)")
            if m["old"] == m["new"]:
                raise ValueError(f"mutation {m['id']!r} changes nothing")
            out.append(m)
    return out


def _copy_repo(dst: Path) -> None:
    for name in COPY:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dst / name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints", "tmp"))
        elif src.exists():
            shutil.copy2(src, dst / name)
    if (REPO.parent / "shared").exists() and not (dst.parent / "shared").exists():
        os.symlink(REPO.parent / "shared", dst.parent / "shared")


def run_one(m: dict, work: Path, timeout: int) -> dict:
    target = work / m["file"]
    original = target.read_text()
    target.write_text(original.replace(m["old"], m["new"], 1))
    t0 = time.time()
    try:
        env = dict(os.environ, PYTHONPATH=str(work), PYTHONDONTWRITEBYTECODE="1")
        proc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-m", "not slow", "-p", "no:cacheprovider",
                               "tests"], cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
        failed = proc.returncode != 0
        first = next((line for line in proc.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))), "")
        last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    except subprocess.TimeoutExpired:
        failed, first, last = True, "timeout", f"timeout after {timeout} s"
    finally:
        target.write_text(original)
    return dict(id=m["id"], why=m["why"], file=m["file"], caught=failed, first=first, summary=last,
                seconds=round(time.time() - t0, 1))


def report(rows: list[dict], path: Path) -> str:
    caught = sum(r["caught"] for r in rows)
    lines = [f"# Mutation probe: {caught} of {len(rows)} mutations caught ({100 * caught / max(1, len(rows)):.0f} %)", "",
             "Each mutation is a one-line bug applied to a copy of the package; the fast tests "
             "(`pytest -x -m 'not slow'`) run against it. Command: `python scripts/mutation_probe.py`.", "",
             "| id | bug | caught | first failing test |", "|---|---|---|---|"]
    for r in rows:
        first = r["first"].replace("|", "/")[:140]
        lines.append(f"| {r['id']} | {r['why']} | {'yes' if r['caught'] else '**no**'} | {first} |")
    text = "\n".join(lines) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="run the mutations whose id starts with this prefix")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per mutation")
    ap.add_argument("--out", type=Path, default=REPO / "results" / "benchmarks" / "mutation_report.md")
    args = ap.parse_args(argv)
    muts = [m for m in load_mutations() if m["id"].startswith(args.only)]
    if args.list:
        for m in muts:
            print(f"{m['id']:<40} {m['file']}: {m['why']}")
        return 0
    if not muts:
        print("no mutation matches")
        return 2
    with tempfile.TemporaryDirectory(prefix="mutation-") as tmp:
        work = Path(tmp) / "main"
        work.mkdir()
        _copy_repo(work)
        rows = []
        for i, m in enumerate(muts, 1):
            r = run_one(m, work, args.timeout)
            rows.append(r)
            print(f"[{i}/{len(muts)}] {m['id']}: {'caught' if r['caught'] else 'SURVIVED'} ({r['seconds']} s) {r['first']}",
                  flush=True)
    print(report(rows, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
