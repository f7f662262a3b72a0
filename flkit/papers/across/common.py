"""What the pages of "Across the documents" share: the book's own items (document id :data:`DOC`), the results
stores of the pages' runs, and the one way a page reads a profile, reads or makes a stored run and reports its
own cost (the availability chapter's helpers, which the two chapters share).

    from flkit.papers.across import common, fedau_cafed
    clock = common.start()                     # one CPU thread; the page's wall and CPU clocks
    store = common.store(profile)              # results/across/ for the published profile
    table = common.cached(store, config, lambda: compute())   # the stored run of `config`, made when missing
    print(clock.line(profile))                 # the page's last line: its wall and CPU time, machine, versions

The chapter reads the other chapters (their stored runs, their settings, their checks); it trains only where a
comparison needs runs of its own (``fedau_cafed``, ``rare_users``).
"""
from __future__ import annotations

from flkit import results
from flkit.papers.availability.common import Clock, cached, profile_of, start, stored_at

__all__ = ["DOC", "CHAPTER", "PUBLISHED", "store", "stored_at", "cached", "profile_of", "Clock", "start"]

DOC = "book"                # scorecard.OWN: the book's own items (flkit/papers/items/book.yaml)
CHAPTER = "across"          # results/across/: the stored runs of the published pages
PUBLISHED = "paper"         # the profile whose runs the book keeps


def store(profile: str, chapter: str = CHAPTER) -> results.Store:
    """The results store of `chapter` for the published profile ("paper"), its scratch copy results/tmp/<chapter>
    for any other (smoke runs never mix with the book's)."""
    return results.book_store(chapter if profile == PUBLISHED else f"tmp/{chapter}")
