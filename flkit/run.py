"""Execute source notebooks with papermill into their place in the book.

    python -m flkit.run notebooks/mifa/quadratic.ipynb -p profile paper
    python -m flkit.run notebooks/cvar/mnist.ipynb -p profile smoke -p seeds "[0, 1]" --out /tmp/x.ipynb
    python -m flkit.run --all -p profile smoke

`notebooks/<chapter>/<name>.ipynb` is written to `book/<chapter>/<name>.ipynb`. Values after `-p` are
read as YAML (`-p seeds "[0, 1, 2]"`, `-p rounds 100`), as papermill's own command line does. Unknown
parameter names are refused before any cell runs, and so are out-of-range values of the Fed-CVaR-Avg
pages (`check_values`: `-p rounds -5` is a ValueError). The executed copy is written to a temporary file and
renamed at the end, so an interrupted run never leaves a half-executed page in the book.
"""
from __future__ import annotations

import argparse
import ast
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SOURCES = REPO / "notebooks"
BOOK = REPO / "book"


def sources() -> list[Path]:
    """All source notebooks, in a stable order."""
    return sorted(p for p in SOURCES.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def book_path(source: Path) -> Path:
    """Where the executed copy of a source notebook lives in the book."""
    return BOOK / Path(source).resolve().relative_to(SOURCES)


def declared_parameters(source: Path) -> dict:
    """The names and defaults of the notebook's `parameters` cell; error unless there is exactly one."""
    import nbformat
    import papermill

    nb = nbformat.read(source, as_version=4)
    tagged = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(tagged) != 1:
        raise ValueError(f"{source}: expected exactly one cell tagged 'parameters', found {len(tagged)}")
    return {name: _literal(spec["default"]) for name, spec in papermill.inspect_notebook(str(source)).items()}


def _literal(text: str):
    """A default as written in the parameters cell, evaluated when it is a plain literal."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


CVAR_EXPERIMENTS = {"mnist": "mnist", "fmnist_table": "fmnist", "synthetic_2d": "synthetic_2d"}  # page -> experiment


def check_values(source: Path, parameters: dict) -> None:
    """Range checks before any cell runs, where a chapter has them: the Fed-CVaR-Avg pages pass their
    profile, seeds and rounds through `flkit.papers.cvar.settings` (a ValueError for rounds <= 0, an
    empty seed list, an unknown profile, ...). Other pages check their values in their first cells."""
    source = Path(source)
    if source.parent.name != "cvar" or source.stem not in CVAR_EXPERIMENTS:
        return
    from flkit.papers import cvar
    cvar.settings(CVAR_EXPERIMENTS[source.stem], parameters.get("profile", "smoke"),
                  seeds=parameters.get("seeds"), rounds=parameters.get("rounds"))


def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def _machine() -> str:
    import torch

    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)} (CUDA), {os.cpu_count()} CPU cores"
    return f"CPU only: {platform.processor() or platform.machine()}, {os.cpu_count()} cores"


def execute(source: Path, parameters: dict | None = None, out: Path | None = None,
            kernel: str = "python3", log_output: bool = False) -> Path:
    """Run one source notebook with papermill; return the path of the executed copy."""
    import nbformat
    import papermill

    source = Path(source).resolve()
    if not source.is_file():
        raise FileNotFoundError(f"no such notebook: {source}")
    parameters = dict(parameters or {})
    known = declared_parameters(source)
    unknown = sorted(set(parameters) - set(known))
    if unknown:
        raise ValueError(f"{source.name}: unknown parameter(s) {unknown}; this notebook takes {sorted(known)}")
    check_values(source, {**known, **parameters})
    out = Path(out) if out else book_path(source)
    out.parent.mkdir(parents=True, exist_ok=True)
    # The kernel is this interpreter: never a stale user-level 'python3' kernelspec.
    os.environ.setdefault("JUPYTER_DATA_DIR", tempfile.mkdtemp(prefix="flkit-jupyter-"))
    fd, tmp = tempfile.mkstemp(suffix=".ipynb", dir=out.parent, prefix=f".{out.stem}-")
    os.close(fd)
    start = time.time()
    try:
        papermill.execute_notebook(str(source), tmp, parameters=parameters, kernel_name=kernel,
                                   cwd=str(source.parent), log_output=log_output, progress_bar=False)
        nb = nbformat.read(tmp, as_version=4)
        pm = nb.metadata.get("papermill", {})      # no local paths in what the book publishes
        pm["input_path"] = str(source.relative_to(REPO)) if source.is_relative_to(REPO) else source.name
        pm["output_path"] = str(out.resolve().relative_to(REPO)) if out.resolve().is_relative_to(REPO) else out.name
        nb.metadata["flkit"] = {
            "source": str(source.relative_to(REPO)) if source.is_relative_to(REPO) else str(source),
            "parameters": {**known, **parameters},
            "wall_time_s": round(time.time() - start, 1),
            "machine": _machine(),
            "commit": _git_commit(),
        }
        nbformat.write(nb, tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return out


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m flkit.run", description=__doc__.split("\n\n")[0])
    ap.add_argument("notebooks", nargs="*", type=Path, help="source notebooks under notebooks/")
    ap.add_argument("--all", action="store_true", help="every source notebook")
    ap.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                    help="override a parameter (value read as YAML); repeatable")
    ap.add_argument("--out", type=Path, help="output path (one notebook only); default: its place in book/")
    ap.add_argument("--kernel", default="python3")
    ap.add_argument("--log-output", action="store_true", help="stream cell output to the terminal")
    args = ap.parse_args(argv)
    if args.all == bool(args.notebooks):
        ap.error("give notebook paths or --all (not both)")
    if args.out and (args.all or len(args.notebooks) > 1):
        ap.error("--out takes a single notebook")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    params = {name: yaml.safe_load(value) for name, value in args.parameter}
    todo = sources() if args.all else args.notebooks
    for nb in todo:
        t0 = time.time()
        out = execute(nb, params, args.out, kernel=args.kernel, log_output=args.log_output)
        print(f"{nb} -> {out.relative_to(REPO) if out.is_relative_to(REPO) else out} ({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
