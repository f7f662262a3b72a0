"""Mutation probe of the test suite: plausible one-line bugs, each applied to a fresh copy of the package,
with the fast tests run against it. A mutation is *caught* when the tests fail.

    python scripts/mutation_probe.py                  # every mutation in scripts/mutations/*.py
    python scripts/mutation_probe.py --only engine    # the mutations whose id starts with "engine"
    python scripts/mutation_probe.py --list
    python scripts/mutation_probe.py --only cvar-table1 --tests tests/test_cvar.py   # fewer test paths

Each file in scripts/mutations/ defines ``MUTATIONS``: a list of dicts with
``id`` (unique), ``file`` (path in the repository), ``old`` (a substring that occurs exactly once in that
file), ``new`` (its replacement: the bug) and ``why`` (what the bug is, in words).

Before any mutant runs, the probe sorts out what cannot be scored: a *stale* mutation (its file is gone or
``old`` does not occur exactly once: the code moved on) and a *no-op* (the mutated file parses to the same
syntax tree, ``ast.dump``, as the original: only a comment or whitespace changes; for a file that is not
Python, the same words). Both are listed with their reason, in the report and on the console, and skipped.
Then the unmutated copy runs the same pytest command: the *baseline*. When it fails, a failure of a mutant
proves nothing: the probe reports the baseline, runs no mutant and exits with status 1.

The report (markdown) goes to results/benchmarks/mutation_report.md: the baseline's result and duration,
per mutation caught or survived and the first failing test, then the stale and no-op mutations.
"""
from __future__ import annotations

import argparse
import ast
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
PYTEST = ("-x", "-q", "-m", "not slow", "-p", "no:cacheprovider")   # before the test paths


def load_mutations() -> tuple[list[dict], list[dict]]:
    """(the mutations that apply to the repository as it is, the skipped ones). A skipped one is the
    mutation with `status` "stale" or "no-op" and `reason`. A malformed file (a key missing, an id used
    twice) is an error."""
    out, skipped, seen = [], [], set()
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
            status, reason = skip_reason(m)
            if status:
                skipped.append({**m, "status": status, "reason": reason})
            else:
                out.append(m)
    return out, skipped


def skip_reason(m: dict) -> tuple[str, str]:
    """("stale" or "no-op", why) when mutation `m` cannot be scored against REPO, else ("", "")."""
    target = REPO / m["file"]
    if not target.is_file():
        return "stale", f"{m['file']} does not exist"
    text = target.read_text()
    n = text.count(m["old"])
    if n != 1:
        return "stale", f"`old` occurs {n} times in {m['file']} (must be exactly once)"
    if same_code(text, text.replace(m["old"], m["new"], 1), m["file"]):
        return "no-op", "the code is unchanged (only a comment or whitespace differs)"
    return "", ""


def same_code(before: str, after: str, name: str) -> bool:
    """Whether two versions of a file are the same code: for Python the same syntax tree (`ast.dump`, no
    comments, no layout), else the same whitespace-separated words. A version that does not parse differs."""
    if not name.endswith(".py"):
        return before.split() == after.split()
    try:
        return ast.dump(ast.parse(before)) == ast.dump(ast.parse(after))
    except SyntaxError:
        return False


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


def run_suite(work: Path, timeout: int, tests: list[str]) -> dict:
    """Run the pytest command on the copy `work`: {"failed", "first" (failing test), "summary", "seconds"}."""
    t0 = time.time()
    try:
        env = dict(os.environ, PYTHONPATH=str(work), PYTHONDONTWRITEBYTECODE="1")
        proc = subprocess.run([sys.executable, "-m", "pytest", *PYTEST, *tests], cwd=work, env=env,
                              capture_output=True, text=True, timeout=timeout)
        failed = proc.returncode != 0
        first = next((line for line in proc.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))), "")
        last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr.strip()[-200:]
    except subprocess.TimeoutExpired:
        failed, first, last = True, "timeout", f"timeout after {timeout} s"
    return dict(failed=failed, first=first, summary=last, seconds=round(time.time() - t0, 1))


def run_one(m: dict, work: Path, timeout: int, tests: list[str]) -> dict:
    """Apply `m` to the copy `work`, run the suite, restore the file: the mutation's row of the report."""
    target = work / m["file"]
    original = target.read_text()
    target.write_text(original.replace(m["old"], m["new"], 1))
    try:
        r = run_suite(work, timeout, tests)
    finally:
        target.write_text(original)
    return dict(id=m["id"], why=m["why"], file=m["file"], caught=r["failed"], first=r["first"],
                summary=r["summary"], seconds=r["seconds"])


def report(baseline: dict, rows: list[dict], skipped: list[dict], tests: list[str], path: Path) -> str:
    """Write the markdown report to `path` and return it."""
    command = f"pytest {' '.join(PYTEST[:2])} -m 'not slow' {' '.join(tests)}"
    state = "**failed**" if baseline["failed"] else "passed"
    if baseline["failed"]:
        title = "# Mutation probe: baseline fails, no mutation scored"
    else:
        caught = sum(r["caught"] for r in rows)
        title = (f"# Mutation probe: {caught} of {len(rows)} mutations caught "
                 f"({100 * caught / max(1, len(rows)):.0f} %)")
    lines = [title, "",
             "Each mutation is a one-line bug applied to a copy of the package; the fast tests "
             f"(`{command}`) run against it. Command: `python scripts/mutation_probe.py`.", "",
             f"Baseline (the unmutated copy, the same command): {state} in {baseline['seconds']} s "
             f"({baseline['summary'].strip('= ')})" + (f"; first failure: {baseline['first']}" if baseline["first"]
                                                       else "") + ".", ""]
    if rows:
        lines += ["| id | bug | caught | first failing test |", "|---|---|---|---|"]
        for r in rows:
            first = r["first"].replace("|", "/")[:140]
            lines.append(f"| {r['id']} | {r['why']} | {'yes' if r['caught'] else '**no**'} | {first} |")
        lines.append("")
    elif baseline["failed"]:
        lines += ["No mutant was run: with a failing baseline a failing mutant proves nothing.", ""]
    if skipped:
        lines += [f"Skipped ({len(skipped)}): stale (no longer applies to the code) or no-op (changes no code).",
                  "", "| id | status | reason |", "|---|---|---|"]
        lines += [f"| {s['id']} | {s['status']} | {s['reason'].replace('|', '/')} |" for s in skipped]
    text = "\n".join(lines).rstrip("\n") + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return text


def main(argv=None) -> int:
    """Exit status 0: the baseline passed and every selected mutant ran; 1: the baseline failed (no mutant
    run); 2: no mutation matches --only."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="run the mutations whose id starts with this prefix")
    ap.add_argument("--list", action="store_true", help="list the mutations (and the skipped ones), run nothing")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per run of the tests (baseline, each mutant)")
    ap.add_argument("--tests", nargs="+", default=["tests"], metavar="PATH",
                    help="the test paths pytest runs (default: tests)")
    ap.add_argument("--out", type=Path, default=None,
                    help="the report (default: results/benchmarks/mutation_report.md for the whole set; a partial "
                         "run, --only or --tests, writes results/tmp/mutation_report.md)")
    args = ap.parse_args(argv)
    if args.out is None:  # only a run of every mutation on the whole suite replaces the committed report
        whole = not args.only and args.tests == ["tests"]
        args.out = REPO / "results" / ("benchmarks" if whole else "tmp") / "mutation_report.md"
    usable, skipped = load_mutations()
    muts = [m for m in usable if m["id"].startswith(args.only)]
    skipped = [s for s in skipped if s["id"].startswith(args.only)]
    for s in skipped:
        print(f"skip {s['id']} ({s['status']}): {s['reason']}", flush=True)
    if args.list:
        for m in muts:
            print(f"{m['id']:<40} {m['file']}: {m['why']}")
        return 0
    if not muts:
        print("no mutation matches" + (" (only skipped ones)" if skipped else ""))
        return 2
    with tempfile.TemporaryDirectory(prefix="mutation-") as tmp:
        work = Path(tmp) / "main"
        work.mkdir()
        _copy_repo(work)
        baseline = run_suite(work, args.timeout, args.tests)
        print(f"[baseline] {'FAILED' if baseline['failed'] else 'passed'} ({baseline['seconds']} s) "
              f"{baseline['first'] or baseline['summary']}", flush=True)
        rows = []
        if baseline["failed"]:
            print("error: the unmutated tests fail: no mutant run, nothing scored", file=sys.stderr)
        else:
            for i, m in enumerate(muts, 1):
                r = run_one(m, work, args.timeout, args.tests)
                rows.append(r)
                print(f"[{i}/{len(muts)}] {m['id']}: {'caught' if r['caught'] else 'SURVIVED'} ({r['seconds']} s) "
                      f"{r['first']}", flush=True)
    print(report(baseline, rows, skipped, args.tests, args.out))
    return 1 if baseline["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
