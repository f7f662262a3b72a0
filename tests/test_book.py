"""The book builds from the committed executed notebooks with Sphinx warnings as errors."""
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_book_builds_without_warnings(repo, tmp_path):
    jb = Path(sys.executable).parent / "jupyter-book"
    proc = subprocess.run([str(jb), "build", str(repo), "--warningiserror", "--keep-going",
                           "--path-output", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    html = tmp_path / "_build" / "html"
    assert (html / "index.html").is_file()
    for page in ("book/intro.html", "book/mifa/index.html", "book/cvar/index.html", "book/appendix/reproduce.html"):
        assert (html / page).is_file(), page
