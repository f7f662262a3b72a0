"""What the availability chapter's pages share (document 001, the lecture notes on heterogeneous and correlated
client availability): the document's id, the results store of the pages' runs, the one way a page reads a
profile, reads or makes a stored run, and reports its own cost.

    from flkit.papers.availability import common, markov
    clock = common.start()                     # one CPU thread; the page's wall and CPU clocks
    store = common.store(profile)              # results/availability/ for the published profile
    table = common.cached(store, config, lambda: compute())   # the stored run of `config`, made when missing
    print(clock.line(profile))                 # the page's last line: its wall and CPU time, machine, versions

Every page runs on the CPU in one thread: its stored runs were computed so, and their numbers are read back.
"""
from __future__ import annotations

import copy
import os
import platform
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pandas as pd
import torch

import flkit
from flkit import results
from flkit.papers import settings

__all__ = ["DOC", "CHAPTER", "PUBLISHED", "profile_of", "store", "stored_at", "cached", "Clock", "start"]

DOC = "001"                     # the lecture notes (flkit/papers/items/001.yaml)
CHAPTER = "availability"        # results/availability/: the stored runs of the published pages
PUBLISHED = "paper"             # the profile whose runs the book keeps


def profile_of(page: str, profiles: Mapping[str, dict], name: str, overrides: Mapping) -> dict:
    """The settings of profile `name` of a page (a deep copy of ``profiles[name]``) with its top-level settings
    replaced by `overrides` that are not None, every setting checked before any work (`settings.with_overrides`).
    A name that is not a profile is a ValueError that names the allowed ones."""
    if name not in profiles:
        raise ValueError(f"unknown profile {name!r}; choose one of {sorted(profiles)}")
    return settings.with_overrides(copy.deepcopy(profiles[name]), overrides, f"{page} profile {name!r}")


def store(profile: str) -> results.Store:
    """The store of the pages' runs: results/availability/ (committed with the book) for the published profile,
    results/tmp/availability/ for any other (smoke runs never mix with the book's)."""
    return results.book_store(CHAPTER if profile == PUBLISHED else f"tmp/{CHAPTER}")


def stored_at(where: results.Store) -> str:
    """Where the store's runs lie, relative to the repository ("results/availability")."""
    return os.path.relpath(where.root, os.path.dirname(os.path.dirname(flkit.__file__)))


def cached(where: results.Store, config: Mapping, compute: Callable[[], pd.DataFrame]) -> pd.DataFrame:
    """The stored run of `config` in `where`, made by `compute()` (and stored) when it is missing; the table
    comes back with the config's columns (`results.sweep` of one config)."""
    return results.sweep([config], lambda c: compute(), where, progress=False)


@dataclass
class Clock:
    """A page's wall and CPU clocks from its start (:func:`start`)."""
    wall0: float
    cpu0: float

    def line(self, profile: str) -> str:
        """The page's last line: profile, wall and CPU time since the start, processor, cores, versions."""
        wall, cpu = time.time() - self.wall0, time.process_time() - self.cpu0
        return (f"profile={profile}; wall time {wall:.1f} s, CPU time {cpu:.1f} s (1 thread) on "
                f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores shared, torch "
                f"{torch.__version__}, flkit {flkit.__version__}")


def start() -> Clock:
    """Start a page: torch in one CPU thread (as the stored runs were computed), the clocks started."""
    torch.set_num_threads(1)
    return Clock(time.time(), time.process_time())
