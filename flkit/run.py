"""Execute source notebooks with papermill.

    python -m flkit.run notebooks/mifa/quadratic.ipynb -p profile paper
    python -m flkit.run notebooks/cvar/mnist.ipynb -p profile smoke -p seeds "[0, 1]" --out results/tmp/x.ipynb
    python -m flkit.run --all -p profile smoke
    python -m flkit.run --list [NOTEBOOK ...]       # the notebooks, their parameters, defaults, allowed values
    python -m flkit.run --all --published           # every page again with its published parameters

Where the executed copy goes. `notebooks/<chapter>/<name>.ipynb` is written to `book/<chapter>/<name>.ipynb`,
the page the book renders, only when the run's parameters are the page's published ones: those recorded in
the metadata (`flkit.parameters`) of the committed executed copy, defaults included, the device aside ("paper"
or "reduced" may create a page that has no executed copy yet), or with `--to-book`. Every other run (a smoke
test, a trial at another profile, the published profile with other seeds) goes to
`results/tmp/notebooks/<chapter>/<name>.ipynb` (git-ignored), so it never puts other numbers under prose
written for the published ones; `--out PATH` puts it anywhere.

Checks before a kernel starts. Values after `-p` are read as YAML (`-p seeds "[0, 1, 2]"`, `-p rounds 100`),
as papermill's own command line does. Each problem is one line naming the parameter, the value and what is
allowed, and the exit status is 2: a value that is not YAML, a parameter the notebook does not declare, a
value of the wrong kind (what a parameter takes is read from its name, its default and the profiles of its
page, see `flkit.params.value_problem`), an out-of-range value of a Fed-CVaR-Avg page
(`flkit.params.check_values`), the book's executed copy given instead of its source, a notebook that does not
exist. With `--all`, a parameter that a notebook does not declare is skipped for that notebook (one line each),
and so is a notebook that has no profile of the given name.

A parameter whose profile value is a dict (MIFA's `rounds`, p -> rounds) takes a dict with an entry for every p
of `p_values`; a number is refused with a hint that shows the dict (`flkit.params.dict_problem`).

What a run records. The executed copy's metadata (`flkit` key) holds the source, every parameter, the wall
time of this execution, the machine, the commit (HEAD's short hash) and `modified`, the files of flkit/,
notebooks/, scripts/ and pyproject.toml that differed from it (empty: a clean record), and `stored_runs`: the
results-store runs the kernel used, read or computed (`flkit.results.used_runs`, passed on through the file
$FLKIT_READS_LOG), whose manifests say on what device, in how much compute time and on which platform they
were computed (the reproduce appendix, `flkit.reproduce`, shows it per page).

Errors in the notebook. An exception raised inside the notebook (a chapter's profile check, a missing
dataset) is reported as one line, its class and message, with exit status 1; `--debug` adds the traceback.

Interrupted runs. Every temporary of a process (papermill's output while it runs, the kernel's connection
file, the private Jupyter data dir) lies in one folder, `<tmp>/flkit-run-<pid>-<random>/`, outside the book,
removed when the process exits; the finished notebook is copied next to its target and renamed onto it
(`os.replace`, atomic on one filesystem). On SIGTERM the temporary files are removed and the run stops (exit
status 143); papermill shuts its kernel down on the way out. SIGKILL cannot be handled: every invocation
first removes the `flkit-run-<pid>-*` folders whose pid no longer runs, the `.<name>-*.part` files older
than 10 minutes beside its output, and what versions before the per-process folder left (`flkit-run-*.ipynb`,
`flkit-jupyter-*`) once an hour old. Nothing half-written is ever left in `book/`.
"""
from __future__ import annotations

import argparse
import atexit
import contextlib
import difflib
import glob
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from flkit.numerics import cpu_model
from flkit.params import (DEFAULT_PROFILES, _yaml, allowed, check_values, declared_parameters, dict_problem,
                          dict_setting, page_profiles, parameter_cell, profile_table, value_problem)

REPO = Path(__file__).resolve().parents[1]
SOURCES = REPO / "notebooks"
BOOK = REPO / "book"
RUN_DIR_PREFIX = "flkit-run-"  # <tmp>/flkit-run-<pid>-<random>/: one process's temporaries (see `run_dir`)
PART_AGE_S = 600               # a `.<name>-*.part` beside an output lives milliseconds; older ones were left
LEGACY_AGE_S = 3600            # flkit-run-*.ipynb files and flkit-jupyter-* folders of older versions
READS_LOG_ENV = "FLKIT_READS_LOG"   # where the kernel lists the stored runs it used (flkit.results.READS_LOG_ENV)
PUBLISHED = ("paper", "reduced")                  # the profiles a book page may be executed with


class ParameterError(ValueError):
    """What is wrong with a command line, found before any kernel starts: one line per problem."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class Terminated(BaseException):
    """SIGTERM arrived while a notebook ran (a BaseException, so that no `except Exception` swallows it)."""


# ------------------------------------------------------------------------------------------------------------
# where notebooks are and where their executed copies go
# ------------------------------------------------------------------------------------------------------------
def sources() -> list[Path]:
    """All source notebooks, in a stable order."""
    return sorted(p for p in SOURCES.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def _under(path: Path, root: Path) -> Path | None:
    """`path` relative to `root`, None when it is not under it."""
    path, root = Path(path).resolve(), Path(root).resolve()
    return path.relative_to(root) if path.is_relative_to(root) else None


def _show(path: Path) -> str:
    """A path as the reader wrote it from the repository root: relative to it when inside."""
    rel = _under(path, REPO)
    return str(rel) if rel is not None else str(path)


def _page(source: Path) -> Path:
    """`<chapter>/<name>.ipynb` of a source notebook; a ParameterError for one outside notebooks/."""
    rel = _under(source, SOURCES)
    if rel is None:
        raise ParameterError([f"{_show(source)} is not under {_show(SOURCES)}/: give --out PATH for it"])
    return rel


def book_path(source: Path) -> Path:
    """Where the executed copy of a source notebook lives in the book."""
    return BOOK / _page(source)


def scratch_path(source: Path) -> Path:
    """Where a run that is not for the book goes (git-ignored)."""
    return REPO / "results" / "tmp" / "notebooks" / _page(source)


def published_profile(source: Path) -> str | None:
    """The profile the committed executed copy of `source` was run with (`metadata.flkit.parameters.profile`
    of `book/<chapter>/<name>.ipynb`); None when there is no executed copy or it records none."""
    copy = book_path(source)
    if not copy.is_file():
        return None
    meta = json.loads(copy.read_text()).get("metadata", {})
    return meta.get("flkit", {}).get("parameters", {}).get("profile")


def published_parameters(source: Path) -> dict | None:
    """Every parameter of the run that made the committed executed copy of `source` (its defaults included:
    `metadata.flkit.parameters`); None when there is no executed copy or it records none."""
    copy = book_path(source)
    if not copy.is_file():
        return None
    return json.loads(copy.read_text()).get("metadata", {}).get("flkit", {}).get("parameters")


def destination(source: Path, parameters, to_book: bool = False) -> tuple[Path, str]:
    """(where a run of `source` writes, why). `parameters`: the run's parameters, defaults included (or only
    its profile). The book page only for a run of the page's published parameters (all of them but the
    device: prose and figures were written for those numbers; a page that has no executed copy yet takes a
    "paper" or "reduced" run), or with `to_book`; else results/tmp/notebooks/."""
    run_ = dict(parameters) if isinstance(parameters, Mapping) else {"profile": parameters}
    book, published = book_path(source), published_parameters(source) or {}
    if to_book:
        return book, "--to-book"
    profile = published.get("profile")
    if profile not in PUBLISHED:
        if run_.get("profile") in PUBLISHED:
            return book, "a first executed copy for the book"
        profiles = " or ".join(map(repr, PUBLISHED))
        return scratch_path(source), f"not the book: only a {profiles} run goes there, or --to-book"
    differ = [k for k in run_ if k != "device" and k in published and run_[k] != published[k]]
    if not differ:
        return book, "the page's published parameters"
    what = ", ".join(f"{k}={_yaml(run_[k])} (published: {_yaml(published[k])})" for k in differ)
    return scratch_path(source), (f"not the book: {_show(book)} keeps its published {profile!r} run; this run "
                                  f"differs in {what}; --to-book replaces it")


def source_problem(path: Path) -> str | None:
    """Why `path` cannot be run (missing, not a notebook, the book's executed copy), None when it can."""
    path = Path(path)
    in_book = _under(path, BOOK)
    if in_book is not None and in_book.suffix == ".ipynb":
        return (f"{_show(path)} is the book's executed copy, not a source: pass the source "
                f"{_show(SOURCES / in_book)}")
    if not path.is_file():
        known = [_show(p) for p in sources()]
        near = difflib.get_close_matches(_show(path), known, n=1)
        return f"no such notebook: {path}" + (f"; did you mean {near[0]}?" if near else "")
    if path.suffix != ".ipynb":
        return f"{_show(path)} is not a notebook (.ipynb)"
    return None


# ------------------------------------------------------------------------------------------------------------
# a run's parameters: --list, the -p values read and checked (what each parameter takes: flkit.params)
# ------------------------------------------------------------------------------------------------------------
def describe(source: Path) -> list[str]:
    """Lines for `--list`: the notebook, where its published run goes and the command that remakes it, then each
    parameter with its default, what it accepts and the comment of its line in the parameters cell."""
    source = Path(source)
    cell = parameter_cell(source)
    profiles = page_profiles(source) if "profile" in cell else list(DEFAULT_PROFILES)
    given = published_given(source)
    head = [_show(source)]
    if given is not None:
        head.append(f"  published in {_show(book_path(source))} by: python -m flkit.run {_show(source)}"
                    + "".join(f" -p {k} {shlex.quote(_yaml(v))}" for k, v in given.items()))
    else:
        head.append("  no published page yet")
    width = max(len(n) for n in cell)
    for name, (default, comment) in cell.items():
        head.append(f"  -p {name:<{width}}  default {_yaml(default)}; takes {allowed(source, name, default, profiles)}")
        if comment:
            head.append(f"     {'':<{width}}  ({comment})")
    return head


def published_given(source: Path) -> dict | None:
    """The -p values of the run that made the committed executed copy of `source` (papermill's record of the
    parameters passed; the defaults are not in it); None when there is no executed copy."""
    copy = book_path(source)
    if not copy.is_file():
        return None
    meta = json.loads(copy.read_text()).get("metadata", {})
    return dict(meta.get("papermill", {}).get("parameters", {}))


def parse_values(pairs: list[tuple[str, str]]) -> dict:
    """The `-p NAME VALUE` pairs read as YAML; a ParameterError for text that is not YAML or a name given twice."""
    values, problems = {}, []
    for name, text in pairs:
        if name in values:
            problems.append(f"-p {name} is given twice: give it once")
            continue
        try:
            values[name] = yaml.safe_load(text)
        except yaml.YAMLError as e:
            why = getattr(e, "problem", None) or str(e).splitlines()[0]
            problems.append(f"-p {name} {shlex.quote(text)}: the value must be YAML ({why}), "
                            f"e.g. -p seeds \"[0, 1, 2]\", -p rounds 100, -p profile paper")
    if problems:
        raise ParameterError(problems)
    return values


def check(source: Path, values: dict, skip_undeclared: bool = False,
          texts: dict | None = None) -> tuple[dict, list[str]]:
    """(the parameters to pass to `source`, one line per parameter skipped), checked before any kernel
    starts; a ParameterError with one line per problem. `skip_undeclared` (for --all) skips parameters
    the notebook does not declare instead of refusing them; `texts` are the values as typed, for the messages."""
    source, texts = Path(source), texts or {}
    try:
        cell = parameter_cell(source)
    except ValueError as e:
        raise ParameterError([str(e)]) from None
    where, known = _show(source), {name: default for name, (default, _) in cell.items()}
    problems, skipped = [], []
    for name in sorted(set(values) - set(known)):
        if skip_undeclared:
            skipped.append(f"skip -p {name} for {where}: it has no such parameter")
            continue
        near = difflib.get_close_matches(name, known, n=1)
        problems.append(f"{where}: -p {name}: no such parameter" + (f" (did you mean {near[0]}?)" if near else "")
                        + f"; it takes {', '.join(sorted(known))}")
    parameters = {k: v for k, v in values.items() if k in known}
    profiles = page_profiles(source) if "profile" in parameters else list(DEFAULT_PROFILES)
    profile = parameters.get("profile", known.get("profile"))
    for name, value in parameters.items():
        example = dict_setting(source, name, profile) if value is not None else None
        if example is not None:
            p_values = parameters.get("p_values") or _profile_value(source, profile, "p_values")
            need = [float(p) for p in p_values] if name == "rounds" and isinstance(p_values, list) else None
            why = dict_problem(name, value, example, profile if profile in (profile_table(source) or {}) else "paper",
                               need)
        else:
            why = value_problem(name, value, known[name], profiles)
        if why:
            comment = cell[name][1]
            problems.append(f"{where}: -p {name} {shlex.quote(texts.get(name, _yaml(value)))}: {why}"
                            + (f" [parameters cell: {comment}]" if comment else ""))
    if problems:
        raise ParameterError(problems)
    try:
        check_values(source, {**known, **parameters})
    except ValueError as e:
        raise ParameterError([f"{where}: {e}"]) from None
    return parameters, skipped


def _profile_value(source: Path, profile: str | None, name: str):
    """Setting `name` of the page's profile `profile` (None where the page has no such profile or setting)."""
    return (profile_table(source) or {}).get(profile, {}).get(name)


# ------------------------------------------------------------------------------------------------------------
# execution
# ------------------------------------------------------------------------------------------------------------
TRACKED = ("flkit", "notebooks", "scripts", "pyproject.toml")   # what a page's numbers depend on besides results/


def _git_state() -> tuple[str, list[str]]:
    """(HEAD's short hash, the files of TRACKED that differ from it: modified, added or deleted, untracked
    files left out); ("unknown", []) without git."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", *TRACKED],
                               cwd=REPO, capture_output=True, text=True)
    except OSError:
        return "unknown", []
    head = out.stdout.strip()
    if out.returncode != 0 or not head:
        return "unknown", []
    return head, sorted(line[3:].split(" -> ")[-1] for line in dirty.stdout.splitlines() if line.strip())


def _git_commit() -> str:
    """HEAD's short hash, with "+modified" when a file of TRACKED differs from it (the list: `_git_state`)."""
    head, modified = _git_state()
    return head + ("+modified" if modified else "")


def _machine() -> str:
    """The machine that executed a notebook, in words (its GPU, else its CPU and core count)."""
    import torch

    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)} (CUDA), {os.cpu_count()} CPU cores"
    cpu = cpu_model() or platform.processor() or platform.machine()
    return f"CPU only: {cpu}, {os.cpu_count()} cores"


def _remove(paths: list) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


@contextlib.contextmanager
def _sigterm_removes(paths: list):
    """While a notebook runs, SIGTERM removes the files in `paths` (the list may grow meanwhile) and raises
    Terminated, so that papermill's clean-up shuts the kernel down. Signal handlers can only be set in the
    main thread; elsewhere nothing is installed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        _remove(paths)
        raise Terminated(signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


_RUN_DIR: Path | None = None
_RUN_DIR_NAME = re.compile(rf"{RUN_DIR_PREFIX}(\d+)-[^.]+")


def run_dir() -> Path:
    """This process's folder for its temporaries, `<tmp>/flkit-run-<pid>-<random>/`: created on first use,
    removed when the process exits, and by `clean_stale` once its pid no longer runs (after a SIGKILL)."""
    global _RUN_DIR
    if _RUN_DIR is None or not _RUN_DIR.is_dir():
        _RUN_DIR = Path(tempfile.mkdtemp(prefix=f"{RUN_DIR_PREFIX}{os.getpid()}-"))
        atexit.register(shutil.rmtree, _RUN_DIR, ignore_errors=True)
    return _RUN_DIR


def _alive(pid: int) -> bool:
    """Whether process `pid` runs; another user's process (EPERM), or any doubt, counts as running."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):
        return True
    return True


def _newest_mtime(folder: str) -> float:
    """The latest modification time of `folder` and of everything in it."""
    times = [os.lstat(folder).st_mtime]
    for root, dirs, files in os.walk(folder):
        times += [os.lstat(os.path.join(root, name)).st_mtime for name in dirs + files]
    return max(times)


def clean_stale(tmp: Path | None = None) -> list[Path]:
    """Remove from `tmp` (default: the system's temporary directory) what runs killed by a signal that
    cannot be handled left: the `flkit-run-<pid>-*` folders whose pid no longer runs, and the names older
    versions used, `flkit-run-*.ipynb` files and `flkit-jupyter-*` folders, once LEGACY_AGE_S old. Returns
    what was removed; anything that cannot be read or removed is left."""
    tmp, removed, now = Path(tmp or tempfile.gettempdir()), [], time.time()
    try:
        entries = list(os.scandir(tmp))
    except OSError:
        return removed
    for entry in entries:
        with contextlib.suppress(OSError):
            folder = entry.is_dir(follow_symlinks=False)
            if folder and (m := _RUN_DIR_NAME.fullmatch(entry.name)):
                stale = not _alive(int(m[1]))
            elif folder and entry.name.startswith("flkit-jupyter-"):
                stale = now - _newest_mtime(entry.path) > LEGACY_AGE_S
            elif not folder and entry.name.startswith(RUN_DIR_PREFIX) and entry.name.endswith(".ipynb"):
                stale = now - entry.stat(follow_symlinks=False).st_mtime > LEGACY_AGE_S
            else:
                continue
            if stale:
                shutil.rmtree(entry.path) if folder else os.remove(entry.path)
                removed.append(Path(entry.path))
    return removed


def clean_parts(out: Path) -> list[Path]:
    """Remove the `.<name>-*.part` files beside `out` older than PART_AGE_S (a run killed between writing
    one and renaming it onto `out` leaves it); return them."""
    out, removed = Path(out), []
    for part in out.parent.glob(f".{glob.escape(out.stem)}-*.part"):
        with contextlib.suppress(OSError):
            if time.time() - part.lstat().st_mtime > PART_AGE_S:
                part.unlink()
                removed.append(part)
    return removed


def _private_jupyter_dir() -> None:
    """The kernel is this interpreter, never a stale user-level 'python3' kernelspec: an empty private
    JUPYTER_DATA_DIR in `run_dir()` (unless one is set)."""
    if "JUPYTER_DATA_DIR" not in os.environ:
        path = run_dir() / "jupyter"
        path.mkdir(exist_ok=True)
        os.environ["JUPYTER_DATA_DIR"] = str(path)


def _relative_or_name(path: Path) -> str:
    rel = _under(path, REPO)
    return str(rel) if rel is not None else Path(path).name


def _run_papermill(source: Path, parameters: dict, known: dict, out: Path, kernel: str, log_output: bool,
                   debug: bool = False) -> Path:
    """Execute `source` into a temporary file in `run_dir()`, record the run in its metadata (`flkit`
    key) and move it onto `out` in one rename. The kernel's own log (warnings about its transport, its
    shutdown) is silenced unless `debug`; what the cells print and raise is unaffected."""
    import nbformat
    import papermill
    from traitlets.config import Config

    source, out = Path(source).resolve(), Path(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    clean_parts(out)
    _private_jupyter_dir()
    fd, work = tempfile.mkstemp(suffix=".ipynb", prefix=f"{out.stem}-", dir=run_dir())
    os.close(fd)
    connection = str(Path(work).with_suffix(".kernel.json"))   # else jupyter_client's goes to the temp dir
    reads = str(Path(work).with_suffix(".reads.txt"))         # the stored runs the kernel used (flkit.results)
    temporaries = [work, connection, reads]
    head, modified = _git_state()
    start = time.time()
    with _sigterm_removes(temporaries), _environ(**{READS_LOG_ENV: reads}):
        try:
            papermill.execute_notebook(str(source), work, parameters=parameters, kernel_name=kernel,
                                       cwd=str(source.parent), log_output=log_output, progress_bar=False,
                                       extra_arguments=[] if debug else ["--Application.log_level=CRITICAL"],
                                       config=Config(KernelManager={"connection_file": connection}))
            nb = nbformat.read(work, as_version=4)
            pm = nb.metadata.get("papermill", {})      # no local paths in what the book publishes
            pm["input_path"], pm["output_path"] = _relative_or_name(source), _relative_or_name(out)
            nb.metadata["flkit"] = {
                "source": _relative_or_name(source),
                "parameters": {**known, **parameters},
                "wall_time_s": round(time.time() - start, 1),
                "machine": _machine(),
                "commit": head,
                "modified": modified,        # files of TRACKED that differed from the commit: empty for a clean record
                "stored_runs": stored_runs(reads),
            }
            nbformat.write(nb, work)
            fd, part = tempfile.mkstemp(suffix=".part", prefix=f".{out.stem}-", dir=out.parent)  # same filesystem
            os.close(fd)
            temporaries.append(part)
            shutil.copyfile(work, part)
            os.chmod(part, 0o644)
            os.replace(part, out)
        finally:
            _remove(temporaries)
    return out


@contextlib.contextmanager
def _environ(**values):
    """Environment variables set while the block runs (the kernel inherits them), restored after."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def stored_runs(log: str | Path) -> dict[str, list[str]]:
    """The stored runs a kernel used, from the file it wrote ($FLKIT_READS_LOG, see `flkit.results.used_runs`):
    {"read": [...], "computed": [...]}, each "<store>/<key>" (the store relative to the repository, or to
    $FLKIT_RESULTS as "$FLKIT_RESULTS/...": no local paths), sorted."""
    out: dict[str, set] = {"read": set(), "computed": set()}
    try:
        lines = Path(log).read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = []
    base = os.environ.get("FLKIT_RESULTS")
    for line in lines:
        name, _, how = line.partition("\t")
        if Path(name).is_absolute():
            rel = _under(Path(name), Path(base)) if base else None
            name = f"$FLKIT_RESULTS/{rel}" if rel is not None else f"(outside the repository)/{Path(name).name}"
        out["computed" if how == "computed" else "read"].add(name)
    return {k: sorted(v) for k, v in out.items()}


def execute(source: Path, parameters: dict | None = None, out: Path | None = None,
            kernel: str = "python3", log_output: bool = False, to_book: bool = False) -> Path:
    """Run one source notebook with papermill; return the path of the executed copy: `out`, else
    `destination(...)` (the book page for its published parameters or with `to_book`, else
    results/tmp/notebooks/). A ParameterError (a ValueError) before any kernel starts for a bad source or
    parameter; papermill's PapermillExecutionError for an exception inside the notebook."""
    clean_stale()
    problem = source_problem(source)
    if problem:
        raise ParameterError([problem])
    parameters, _ = check(source, dict(parameters or {}))
    known = declared_parameters(source)
    if out is None:
        out, _ = destination(source, {**known, **parameters}, to_book)
    return _run_papermill(source, parameters, known, Path(out), kernel, log_output)


def html_path(source: Path, out: Path) -> Path:
    """Where `--html` writes the page of a run: beside an `--out` path; for a source under notebooks/ that
    went to the book or to the scratch folder, results/tmp/notebooks/<chapter>/<name>.html (never into book/,
    which the book renders itself)."""
    try:
        scratch = scratch_path(source)
    except ParameterError:          # a source outside notebooks/ (run with --out)
        return Path(out).with_suffix(".html")
    if _under(out, BOOK) is None and _under(out, scratch.parent) is None:
        return Path(out).with_suffix(".html")
    return scratch.with_suffix(".html")


def to_html(notebook: Path, target: Path) -> Path:
    """The executed `notebook` as one self-contained HTML page (its figures are in the notebook) at `target`."""
    import nbformat
    from nbconvert import HTMLExporter

    with warnings.catch_warnings():   # glued values (papermill records) have no HTML form: left out, silently
        warnings.filterwarnings("ignore", message="Your element with mimetype")
        body, _ = HTMLExporter().from_notebook_node(nbformat.read(notebook, as_version=4))
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(body, encoding="utf-8")
    os.replace(tmp, target)
    return target


# ------------------------------------------------------------------------------------------------------------
# the command line
# ------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Job:
    source: Path
    parameters: dict
    known: dict
    out: Path
    why: str


def plan(args: argparse.Namespace) -> tuple[list[Job], list[str]]:
    """Every run the command line asks for, all checked before the first starts, and the lines saying what
    was skipped (--all); a ParameterError listing every problem."""
    values = parse_values(args.parameter)
    texts = dict(args.parameter)
    jobs, notes, problems, declared = [], [], [], set()
    for nb in sources() if args.all else args.notebooks:
        problem = source_problem(nb)
        if problem:
            problems.append(problem)
            continue
        try:
            known = declared_parameters(nb)
            declared |= set(known)
            if getattr(args, "published", False):
                given = published_given(nb)
                if given is None:
                    notes.append(f"skip {_show(nb)}: it has no published page")
                    continue
                parameters, _ = check(nb, given)
                out, why = destination(nb, {**known, **parameters})
                jobs.append(Job(Path(nb), parameters, known, Path(out), why))
                continue
            if args.all:
                parameters, skipped = _check_page(nb, known, values, texts)
            else:
                parameters, skipped = check(nb, values, texts=texts)
            notes += skipped
            if parameters is None:
                continue
            out, why = (args.out, "") if args.out else destination(nb, {**known, **parameters}, args.to_book)
        except (ParameterError, ValueError) as e:
            problems += e.problems if isinstance(e, ParameterError) else [str(e)]
            continue
        jobs.append(Job(Path(nb), parameters, known, Path(out), why))
    if args.all and not getattr(args, "published", False):
        problems += [f"-p {name}: no notebook declares this parameter" for name in sorted(set(values) - declared)]
        if not jobs and not problems and "profile" in values:
            problems.append(f"-p profile {texts['profile']}: no notebook has this profile")
    if problems:
        raise ParameterError(problems)
    return jobs, notes


def _check_page(source: Path, known: dict, values: dict, texts: dict) -> tuple[dict | None, list[str]]:
    """`check` for --all: undeclared parameters skipped, and the whole page skipped (None) when it has no
    profile of the name given."""
    if "profile" in values and "profile" in known and values["profile"] not in (profiles := page_profiles(source)):
        return None, [f"skip {_show(source)}: it has no profile {values['profile']!r} "
                      f"(its profiles: {', '.join(profiles)})"]
    return check(source, values, skip_undeclared=True, texts=texts)


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, s = divmod(round(seconds), 60)
    return f"{minutes} min {s:02d} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def _one_line(e: BaseException) -> str:
    """An exception as one line: its class and message (for an error inside the notebook, the notebook's)."""
    from papermill.exceptions import PapermillExecutionError

    if isinstance(e, PapermillExecutionError):
        return " ".join((f"{e.ename}: {e.evalue}" if e.evalue else e.ename).split())
    return " ".join(f"{type(e).__name__}: {e}".split())


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m flkit.run", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="notebooks (--list prints each one's parameters, defaults, allowed values and published command):\n"
               + "\n".join(f"  {_show(p)}" for p in sources())
               + "\n\nexamples:\n"
                 "  python -m flkit.run --list notebooks/mifa/quadratic.ipynb\n"
                 "  python -m flkit.run notebooks/mifa/quadratic.ipynb -p profile paper -p seeds \"[0, 1, 2]\" --html\n"
                 "  python -m flkit.run --all --published   # every page as published (writes book/)\n"
                 "  python -m flkit.run --all -p profile smoke")
    ap.add_argument("notebooks", nargs="*", type=Path, help="source notebooks under notebooks/")
    ap.add_argument("--list", action="store_true", help="list the notebooks (those given, else all) with their "
                                                        "parameters, defaults and allowed values; run nothing")
    ap.add_argument("--published", action="store_true", help="run each notebook with the parameters of its "
                                                             "published page (its command on the reproduce page)")
    ap.add_argument("--all", action="store_true", help="every source notebook")
    ap.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                    help="override a parameter (value read as YAML); repeatable")
    ap.add_argument("--out", type=Path, help="output path (one notebook only); default: the book page for its "
                                             "published parameters, else results/tmp/notebooks/")
    ap.add_argument("--to-book", action="store_true", help="write the book page whatever the profile")
    ap.add_argument("--kernel", default="python3")
    ap.add_argument("--log-output", action="store_true", help="stream cell output to the terminal")
    ap.add_argument("--debug", action="store_true", help="print the full traceback of an error")
    ap.add_argument("--dry-run", action="store_true", help="check the command line, say where each run would "
                                                           "write, run nothing")
    ap.add_argument("--html", action="store_true", help="also write the executed notebook as an HTML page to open "
                                                        "in a browser (see html_path)")
    args = ap.parse_args(argv)
    if args.list:
        return args
    if args.published and args.parameter:
        ap.error("--published takes no -p: it uses the published page's parameters")
    if args.all == bool(args.notebooks):
        ap.error("give notebook paths or --all (not both)")
    if args.out and (args.all or len(args.notebooks) > 1):
        ap.error("--out takes a single notebook")
    if args.out and args.to_book:
        ap.error("--out and --to-book exclude each other")
    return args


def main(argv: list[str] | None = None) -> int:
    """Exit status 0: every run finished; 1: an error while running (one line, --debug for the traceback);
    2: a problem with the command line, found before any kernel started; 130/143: interrupted/terminated."""
    args = _parse(argv)
    if args.list:
        missing = [problem for nb in args.notebooks if (problem := source_problem(nb))]
        for line in missing:
            print(f"error: {line}", file=sys.stderr)
        if missing:
            return 2
        for i, nb in enumerate(args.notebooks or sources()):
            print(("\n" if i else "") + "\n".join(describe(nb)))
        return 0
    clean_stale()
    try:
        jobs, notes = plan(args)
    except ParameterError as e:
        for line in e.problems:
            print(f"error: {line}", file=sys.stderr)
        return 2
    for line in notes:
        print(line)
    t_all = time.time()
    for job in jobs:
        profile = {**job.known, **job.parameters}.get("profile")
        print(f"{'would run' if args.dry_run else 'run'} {_show(job.source)} (profile {profile!r}) -> "
              f"{_show(job.out)}" + (f" ({job.why})" if job.why.startswith("not the book") else ""), flush=True)
        if args.dry_run:
            continue
        t0 = time.time()
        try:
            _run_papermill(job.source, job.parameters, job.known, job.out, args.kernel, args.log_output, args.debug)
        except Terminated:
            print(f"error: terminated (SIGTERM) while running {_show(job.source)}; nothing written to "
                  f"{_show(job.out)}", file=sys.stderr)
            return 143
        except KeyboardInterrupt:
            print(f"error: interrupted while running {_show(job.source)}; nothing written to {_show(job.out)}",
                  file=sys.stderr)
            return 130
        except Exception as e:
            if args.debug:
                traceback.print_exc()
            print(f"error: {_show(job.source)}: {_one_line(e)}; nothing written to {_show(job.out)}"
                  + ("" if args.debug else " (--debug prints the traceback)"), file=sys.stderr)
            return 1
        print(f"done {_show(job.source)} in {_duration(time.time() - t0)} -> {_show(job.out)}", flush=True)
        if args.html:
            print(f"html {_show(to_html(job.out, html_path(job.source, job.out)))}", flush=True)
    if len(jobs) > 1 and not args.dry_run:
        in_book = sum(_under(j.out, BOOK) is not None for j in jobs)
        print(f"{len(jobs)} notebooks in {_duration(time.time() - t_all)}: {in_book} written into "
              f"{_show(BOOK)}/, {len(jobs) - in_book} elsewhere")
    return 0


if __name__ == "__main__":
    sys.exit(main())
