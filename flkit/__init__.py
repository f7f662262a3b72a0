"""flkit: the thin simulation package behind the flkit-book replications."""

__version__ = "0.1.0"
