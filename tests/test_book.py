"""The book builds from the committed executed notebooks with Sphinx warnings as errors."""
import pytest


@pytest.mark.slow
def test_book_builds_without_warnings(book_build):
    assert book_build.returncode == 0, book_build.log
    html = book_build.html
    assert (html / "index.html").is_file()
    for page in ("book/intro.html", "book/mifa/index.html", "book/cvar/index.html", "book/appendix/reproduce.html"):
        assert (html / page).is_file(), page
    # MathJax is served from the build itself (sphinx-mathjax-offline), so math typesets offline
    assert (html / "_static" / "mathjax" / "tex-chtml.js").is_file()
