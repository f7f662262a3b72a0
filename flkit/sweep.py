"""One command computes and stores the runs behind the book's pages, for every chapter::

    python -m flkit.sweep cvar mnist --profile paper --device cuda --max-minutes 8.5
    python -m flkit.sweep cvar fmnist --profile paper --device cpu --threads 1 --estimate
    python -m flkit.sweep fedau --profile cnn-spot --study table --device cpu --threads 1 --max-minutes 30
    python -m flkit.sweep hics paper --setting '(2)' --group main --device cuda --max-minutes 8
    python -m flkit.sweep hics-fig6 --model hics_fmnist_paper --device cuda --max-minutes 8
    python -m flkit.sweep rare-users --profile paper --device cuda --max-minutes 8.5
    python -m flkit.sweep cvar --help                 # a sweep's own options

The first word names the sweep (:data:`SWEEPS`); what it runs is the chapter's (``flkit.papers.<chapter>.sweeps``:
its runs, how they are batched, where they are stored, how a trial is projected). Runs are stored through
:mod:`flkit.results` (one CSV + JSON per run, skipped when already there; ``$FLKIT_RESULTS`` replaces
``results/``) and a batch stopped by ``--max-minutes`` is checkpointed under its store's ``checkpoints/``, so a
long sweep is paid in several shorter calls, on one machine or several.

Options every sweep takes, checked here once (a bad value is one line naming it and what is allowed, exit
status 2, before any computation):

* ``--device auto|cpu|cuda[:i]``: where to compute (a device this machine lacks is refused before any work);
* ``--max-minutes M``: stop cleanly (checkpoint) before M minutes have passed since the call started;
* ``--threads N``: torch's CPU threads (each sweep's default: its ``threads``);
* ``--set NAME=VALUE``: replace a setting of the profile (the value read as YAML, not null); ``--seeds S ...`` and
  ``--rounds T`` are the same as ``--set seeds=[S, ...]`` and ``--set rounds=T``;
* ``--estimate``: time ``--estimate-rounds`` rounds (default 3) of the pending work, print the projected time of
  the whole sweep on this device, store nothing.

Exit status: 0 when every run of the sweep is stored (or ``--estimate`` printed its projection), 75
(:data:`EXIT_UNFINISHED`) when it stopped early with runs left (call again: it resumes), 1 when the sweep ended
without an error yet runs are missing, 2 for bad input.
"""
from __future__ import annotations

import argparse
import math
import re
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol

import yaml

import flkit.papers.across.sweeps
import flkit.papers.cvar.sweeps
import flkit.papers.fedau.sweeps
import flkit.papers.hics.sweeps
from flkit.seeding import resolve_device

__all__ = ["EXIT_UNFINISHED", "SWEEPS", "Sweep", "parser", "parse", "main"]

EXIT_UNFINISHED = 75
PROG = "python -m flkit.sweep"


class Sweep(Protocol):
    """What a chapter provides for one sweep (``flkit.papers.<chapter>.sweeps``).

    ``name`` (the command's first word), ``summary`` (one line), ``device`` and ``threads`` (the defaults of
    ``--device`` and ``--threads``; ``None``: torch's own thread count), ``stopped`` (the exceptions its run raises
    when it stops at the deadline, its state checkpointed). ``arguments(ap)`` adds the sweep's own options;
    ``plan(args, overrides)`` reads them (``overrides``: the ``--set``/``--seeds``/``--rounds`` settings) into what
    ``estimate``/``run``/``progress`` take, raising one ValueError for bad input, before any computation;
    ``describe(plan)``: a few words for the first line of output; ``progress(plan) -> (stored, total, where)``."""

    name: str
    summary: str
    device: str
    threads: int | None
    stopped: tuple[type[BaseException], ...]

    def arguments(self, ap: argparse.ArgumentParser) -> None: ...

    def plan(self, args: argparse.Namespace, overrides: dict) -> Any: ...

    def describe(self, plan: Any) -> str: ...

    def estimate(self, plan: Any, device, rounds: int, threads: int | None, out: Callable = print) -> None: ...

    def run(self, plan: Any, device, deadline: float | None, threads: int | None, out: Callable = print) -> None: ...

    def progress(self, plan: Any) -> tuple[int, int, str]: ...


SWEEPS: dict[str, Sweep] = {s.name: s for s in (flkit.papers.cvar.sweeps.SWEEP, flkit.papers.fedau.sweeps.SWEEP,
                                                   flkit.papers.hics.sweeps.JOBS, flkit.papers.hics.sweeps.FIG6,
                                                   flkit.papers.across.sweeps.RARE_USERS)}


class BadInput(ValueError):
    """Bad input: reported as one line, exit status 2, before any work."""


class _OneLine(argparse.ArgumentParser):
    def error(self, message):      # one line (no usage block), exit status 2
        print(f"{self.prog}: error: {' '.join(str(message).split())}", file=sys.stderr)
        sys.exit(2)


def _positive(kind):
    """An argparse type: a number of ``kind`` (int or float), finite and > 0."""
    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            v = None
        if v is None or not math.isfinite(v) or v <= 0:
            what = "an integer >= 1" if kind is int else "a finite number > 0"
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return v
    return parse


def _device(text: str) -> str:
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", text):
        raise argparse.ArgumentTypeError(f"must be auto, cpu or cuda[:i], got {text!r}")
    return text


def overrides(items: list[str], seeds: list[int] | None = None, rounds: int | None = None) -> dict:
    """The ``--set`` items (and ``--seeds``, ``--rounds``) as {name: value}; BadInput for an item that is not
    NAME=VALUE with a YAML value other than null (a profile takes null for "the profile's value" and would
    ignore it), and for a setting given twice."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            v = yaml.safe_load(value) if sep and name.strip() else None
        except yaml.YAMLError:
            v = None
        if v is None:
            raise BadInput(f"--set {item!r}: expected NAME=VALUE with a YAML value that is not null")
        if name.strip() in out:
            raise BadInput(f"--set {name.strip()} is given twice")
        out[name.strip()] = v
    for name, v in (("seeds", seeds), ("rounds", rounds)):
        if v is not None:
            if name in out:
                raise BadInput(f"--{name} and --set {name}=... are both given: give one")
            out[name] = v
    return out


def parser(name: str) -> argparse.ArgumentParser:
    """The command line of sweep ``name``: its own options, then the shared ones (module docstring)."""
    sw = SWEEPS[name]
    ap = _OneLine(prog=f"{PROG} {name}", description=sw.summary)
    sw.arguments(ap)
    g = ap.add_argument_group("options of every sweep")
    g.add_argument("--device", type=_device, default=sw.device, help=f"auto | cpu | cuda[:i] (default {sw.device})")
    g.add_argument("--max-minutes", type=_positive(float), default=None,
                   help="stop cleanly (checkpoint) before this many minutes have passed")
    g.add_argument("--threads", type=_positive(int), default=sw.threads,
                   help=f"torch CPU threads (default: {sw.threads or 'torch default'})")
    g.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="override a setting of the profile (value read as YAML), e.g. --set 'seeds=[0, 1]'")
    g.add_argument("--seeds", type=int, nargs="+", default=None, help="override the profile's seeds")
    g.add_argument("--rounds", type=_positive(int), default=None, help="override the profile's rounds")
    g.add_argument("--estimate", action="store_true", help="time a few rounds and project; store nothing")
    g.add_argument("--estimate-rounds", type=_positive(int), default=3, help="rounds of the --estimate trial")
    return ap


def _usage() -> str:
    width = max(map(len, SWEEPS))
    lines = [f"usage: {PROG} SWEEP [options]   ({PROG} SWEEP --help: its options)", "", "sweeps:"]
    lines += [f"  {n:<{width}}  {s.summary}" for n, s in SWEEPS.items()]
    return "\n".join(lines)


def parse(argv: list[str]) -> tuple[Sweep, argparse.Namespace, Any]:
    """(the sweep, its arguments, its plan); bad input exits here with one line, status 2, before any work."""
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage(), file=sys.stdout if argv else sys.stderr)
        sys.exit(0 if argv else 2)
    name = argv[0]
    if name not in SWEEPS:
        print(f"{PROG}: error: unknown sweep {name!r}; choose one of {', '.join(SWEEPS)}", file=sys.stderr)
        sys.exit(2)
    ap = parser(name)
    args = ap.parse_args(argv[1:])
    try:
        plan = SWEEPS[name].plan(args, overrides(args.set, args.seeds, args.rounds))
    except (ValueError, RuntimeError) as e:   # RuntimeError: torch's, for a malformed "cuda:..."
        ap.error(e)
    return SWEEPS[name], args, plan


def main(argv: list[str] | None = None) -> int:
    t_start = time.time()                     # --max-minutes counts from here
    argv = sys.argv[1:] if argv is None else list(argv)
    sw, args, plan = parse(argv)
    try:                                      # a well-formed device this machine lacks: one line, before any work
        device = resolve_device(args.device)
    except (ValueError, RuntimeError) as e:
        print(f"{PROG} {sw.name}: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    print(f"{sw.name}: {sw.describe(plan)} on {device}", flush=True)
    if args.estimate:
        sw.estimate(plan, device, args.estimate_rounds, args.threads)
        return 0
    deadline = None if args.max_minutes is None else t_start + 60 * args.max_minutes
    stopped = None
    try:
        sw.run(plan, device, deadline, args.threads)
    except sw.stopped as e:
        stopped = e
    done, total, where = sw.progress(plan)
    print(f"{done} of {total} runs stored in {where} ({(time.time() - t_start) / 60:.1f} min)")
    if done >= total:
        return 0
    if stopped is not None:
        print(f"STOPPED before the deadline: {stopped}. Call again to continue.")
        return EXIT_UNFINISHED
    print(f"{PROG} {sw.name}: the sweep ended but {total - done} runs are not stored", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
