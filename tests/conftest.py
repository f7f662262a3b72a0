"""Shared test fixtures."""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

# flkit.fused's Triton kernels run in Triton's interpreter on the CPU (exact, slow): must be set before
# triton is imported. flkit.fastsgd.FastSGD's "auto" backend never picks the interpreter, only CUDA.
os.environ.setdefault("TRITON_INTERPRET", "1")
torch.set_num_threads(1)  # CI machines have 2 cores; keep tests predictable

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real MNIST / Fashion-MNIST files beside the checkout (skip when absent)."""
    root = Path(os.environ.get("FLKIT_SHARED_DATA", SHARED_DATA))
    if not (root / "mnist").is_dir():
        pytest.skip(f"real datasets not found under {root}")
    return root


@dataclass(frozen=True)
class BookBuild:
    html: Path          # _build/html of the build
    returncode: int     # jupyter-book's exit status (non-zero on any Sphinx warning)
    log: str            # the tail of its output


@pytest.fixture(scope="session")
def book_build(tmp_path_factory) -> BookBuild:
    """One `jupyter-book build --warningiserror` of the committed book per test session, shared by
    tests/test_book.py and tests/test_browser.py so that CI builds the book once."""
    out = tmp_path_factory.mktemp("book")
    jb = Path(sys.executable).parent / "jupyter-book"
    proc = subprocess.run([str(jb), "build", str(REPO), "--warningiserror", "--keep-going",
                           "--path-output", str(out)], capture_output=True, text=True)
    return BookBuild(out / "_build" / "html", proc.returncode, proc.stdout[-4000:] + proc.stderr[-4000:])
