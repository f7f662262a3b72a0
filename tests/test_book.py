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
    # the API reference (autodoc), the package's source rendered beside it (viewcode) and the source notebooks
    # that the pages' "Code for this page" lines link (_ext/code_links.py)
    api = (html / "book/appendix/api/index.html").read_text(encoding="utf-8")
    assert "flkit.results" in api and (html / "book/appendix/api/results.html").is_file()
    assert 'id="flkit.results.sweep"' in (html / "book/appendix/api/results.html").read_text(encoding="utf-8")
    assert (html / "_modules/flkit/results.html").is_file()
    assert (html / "_notebooks/mifa/quadratic.ipynb").is_file()
    page = (html / "book/mifa/quadratic.html").read_text(encoding="utf-8")
    assert "Code for this page:" in page and "../../_notebooks/mifa/quadratic.ipynb" in page
    assert "../appendix/api/papers-mifa.html#module-flkit.papers.mifa" in page
