"""Every page of the built book, opened in headless Chromium (Debian's ``chromium`` package).

For each page of _toc.yml, at a 1280 x 1000 window and device scale 1, the page must show
  * no console error: console.error, an uncaught exception or a failed load logged by the browser;
  * every <img> loaded (naturalWidth > 0) and, in the article, displayed at >= MIN_SCALE of its natural
    width. Figures are made <= ~840 px wide with fonts >= ~10 px, so their text stays >= 7.5 px on screen;
  * its math typeset by MathJax: every Sphinx math element holds a MathJax container, no TeX error, and no
    raw ``$...$``, ``$$``, ``\\(`` or ``\\[`` left in the visible text outside code;
  * no local path (/work/, /tmp/, /home/, /root/), no ``Traceback`` and no unrendered MyST role
    (``{glue:text}`...```) anywhere in its visible text;
  * every link to a file of the site resolving to a file of the build, and its #anchor to an id there;
  * no table cell reading NaN, nan, None or NaT (a table says "n/a" and why) or cut off by pandas ("...");
  * output-table cells padded (numbers of neighbouring cells do not run together) and short values (a number,
    "mean ± sd") kept on one line (_static/book.css and book.js);
  * nothing cut off at 1280 px: no line of code or printed output (a page's check summary) runs past its box,
    and no table is wider than the text column (book.js shrinks a wide table's font down to 3/4 before
    that; a table that still needs a sideways scrollbar fails);
  * a "Code for this page" line (_ext/code_links.py), except on the API reference's own pages;
  * at a phone's width (390 x 844), every figure of the article drawn at >= MIN_SCALE of its natural width
    (book.js keeps it at that scale and lets it scroll sideways in its own box): a figure shrunk to the
    column's width, about 44 % of its pixels, has text of 4 to 5 px, which nobody can read.
A full-page screenshot of each page is written to results/tmp/screenshots/ (gitignored) for a person to
look at; the test checks that it is a PNG of the window's width and not trivially small.

FLKIT_BOOK_HTML=<path to _build/html> tests an existing build instead of building the book.
"""
from __future__ import annotations

import contextlib
import functools
import html as html_lib
import http.server
import os
import re
import shutil
import struct
import threading
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml

from chromium import INSTALL_HINT, Browser, find_chromium

REPO = Path(__file__).resolve().parents[1]
WIDTH, HEIGHT = 1280, 1000
NARROW = (390, 844)           # a phone's viewport in CSS pixels
MIN_SCALE = 0.75              # displayed width / natural width of every figure in the article, at both widths
SHOTS = REPO / "results" / "tmp" / "screenshots"
MIN_SHOT_BYTES = 20_000       # a page with a title, a sidebar and text is larger than this as a PNG
LOCAL_PATH = re.compile(r"(?<![\w.~])/(?:work|tmp|home|root)/|Traceback")  # absolute paths; results/tmp/ is fine
RAW_MATH = re.compile(r"\\\(.{0,300}?\\\)|\\\[.{0,300}?\\\]|\\\(|\\\[|\$\$|\\begin\{"
                      r"|(?<![\w$\\])\$(?=[^\s$])[^$\n]{0,300}?(?<=[^\s$\\])\$(?![\w$])")


def toc_pages() -> list[str]:
    """The HTML path of every document of _toc.yml, in reading order."""
    def walk(node):
        if isinstance(node, dict):
            if "file" in node or "root" in node:
                yield f"{node.get('file', node.get('root'))}.html"
            for key in ("parts", "chapters", "sections"):
                for child in node.get(key, []):
                    yield from walk(child)
    return list(walk(yaml.safe_load((REPO / "_toc.yml").read_text())))


# Runs in the page after its load event: waits for MathJax's first typesetting, web fonts and images,
# then returns what the checks need.
PAGE_JS = r"""(async () => {
  let mathjax = "none on page";
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
    mathjax = "typeset";
  } else if (document.querySelector('script[src*="mathjax"]')) {
    mathjax = "script did not load";
  }
  await document.fonts.ready;
  await Promise.all([...document.images].map(i => i.decode().catch(() => null)));
  const shown = e => e.checkVisibility();
  const skip = "pre, code, script, style, textarea, mjx-container, .highlight";
  const prose = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n; (n = walker.nextNode());) {
    const p = n.parentElement;
    if (p && !p.closest(skip) && shown(p) && n.data.trim()) prose.push(n.data);
  }
  return {
    mathjax,
    math: document.querySelectorAll(".math").length,
    untypeset: [...document.querySelectorAll(".math")].filter(e => !e.querySelector("mjx-container"))
                 .map(e => e.textContent.trim().slice(0, 80)),
    tex_errors: [...document.querySelectorAll("mjx-merror")]
                  .map(e => e.getAttribute("data-mjx-error") || e.textContent),
    images: [...document.images].map(i => ({src: i.getAttribute("src"), natural: i.naturalWidth,
               shown: i.getBoundingClientRect().width, visible: shown(i), article: !!i.closest("article")})),
    prose,
    text: document.body.innerText,
    links: [...document.querySelectorAll("a[href]")].map(a => a.href),
    // output-table cells whose numbers could run into the next cell's, or whose short value (<= 24 characters
    // in <= 3 words: a number, "mean ± sd", a short label) may break
    cramped: [...document.querySelectorAll("div.cell_output table td")].filter(td => {
      const cs = getComputedStyle(td);
      const text = td.textContent.trim();
      return parseFloat(cs.paddingLeft) + parseFloat(cs.paddingRight) < 6
             || (text.length <= 24 && text.split(/\s+/).length <= 3 && cs.whiteSpace !== "nowrap");
    }).map(td => td.textContent.trim().slice(0, 40)),
    // lines of code or printed output that run past their box (cut off, or behind a scrollbar)
    overflowing: [...document.querySelectorAll("article pre")].filter(shown)
                   .filter(e => e.scrollWidth > e.clientWidth + 1)
                   .map(e => e.textContent.split("\n").reduce((a, b) => b.length > a.length ? b : a, "")),
    // tables wider than the text column (the output box of their cell, or the article)
    wide_tables: [...document.querySelectorAll("article table")].filter(shown).map(t => {
      const box = t.closest("div.cell_output") || t.closest("article");
      const over = t.getBoundingClientRect().right - box.getBoundingClientRect().right;
      return {over, width: t.getBoundingClientRect().width, box: box.getBoundingClientRect().width,
              head: [...t.querySelectorAll("th, td")].slice(0, 4).map(c => c.textContent.trim()).join(" | ")};
    }).filter(t => t.over > 1),
    code_line: !!document.querySelector("article p.flkit-code"),
  };
})()"""

# Runs at a phone's width (NARROW): the figures of the article, as drawn there.
NARROW_JS = r"""(async () => {
  await document.fonts.ready;
  await Promise.all([...document.images].map(i => i.decode().catch(() => null)));
  return [...document.querySelectorAll("article img")].filter(i => i.checkVisibility() && i.naturalWidth)
    .map(i => ({src: i.getAttribute("src"), natural: i.naturalWidth, shown: i.getBoundingClientRect().width}));
})()"""


@pytest.fixture(scope="module")
def browser():
    binary = find_chromium()
    if binary is None:
        pytest.skip(f"headless Chromium not found: {INSTALL_HINT}; scripts/test.sh does this when run as root")
    b = Browser(binary, WIDTH, HEIGHT)
    yield b
    b.close()


@pytest.fixture(scope="module")
def book_html(request) -> Path:
    if os.environ.get("FLKIT_BOOK_HTML"):
        html = Path(os.environ["FLKIT_BOOK_HTML"])
    else:
        build = request.getfixturevalue("book_build")
        html = build.html
    if not (html / "index.html").is_file():
        pytest.fail(f"no built book at {html} (see tests/test_book.py for the build's log)")
    return html


@contextlib.contextmanager
def serve(directory: Path):
    """A local HTTP server for ``directory`` on a free port; yields its base URL."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(directory)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def site(book_html):
    shutil.rmtree(SHOTS, ignore_errors=True)
    SHOTS.mkdir(parents=True)
    with serve(book_html) as base:
        yield base


@functools.lru_cache(maxsize=None)
def _ids(path: Path) -> frozenset[str]:
    return frozenset(re.findall(r'\s(?:id|name)="([^"]*)"', path.read_text(encoding="utf-8")))


def link_problems(links: list[str], base: str, html: Path) -> list[str]:
    """Links into the site whose file is not in the build, or whose #anchor is no id of that file."""
    out = []
    for link in sorted(set(links)):
        if not link.startswith(base + "/"):
            continue
        parts = urlsplit(link)
        target = html / unquote(parts.path).lstrip("/")
        if parts.path.endswith("/"):
            target = target / "index.html"
        if not target.is_file():
            out.append(f"broken link: {link[len(base):]} (no file {target.relative_to(html)})")
        elif parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in _ids(target):
            out.append(f"broken anchor: {link[len(base):]} (no id {unquote(parts.fragment)!r})")
    return out


def image_problems(images: list[dict]) -> list[str]:
    out = []
    for img in images:
        if img["natural"] == 0:
            out.append(f"image did not load: {img['src']}")
        elif img["article"] and img["visible"] and img["shown"] < MIN_SCALE * img["natural"]:
            out.append(f"image shown at {img['shown']:.0f} of {img['natural']} px "
                       f"(< {MIN_SCALE:.0%}; its text is too small): {img['src']}")
        elif img["article"] and not img["visible"]:
            out.append(f"image not displayed: {img['src']}")
    return out


def narrow_problems(images: list[dict], width: int = NARROW[0]) -> list[str]:
    """Figures drawn at less than MIN_SCALE of their natural width on a phone: their text is too small to read
    (a figure may be wider than the screen: it scrolls sideways in its box, at a readable size)."""
    return [f"figure unreadable at {width} px: shown at {img['shown']:.0f} of {img['natural']} px "
            f"(< {MIN_SCALE:.0%}): {img['src']}" for img in images if img["shown"] < MIN_SCALE * img["natural"] - 0.5]


def cut_off_problems(report: dict, page: str) -> list[str]:
    """What is cut off or pushed sideways at WIDTH, and a missing "Code for this page" line."""
    out = _first([f"text runs past its box at {WIDTH} px: {line.strip()[:100]!r}" for line in report["overflowing"]])
    out += _first([f"table wider than the text column at {WIDTH} px: {t['width']:.0f} px in {t['box']:.0f}, "
                   f"{t['head'][:80]!r}" for t in report["wide_tables"]])
    if not report["code_line"] and not page.startswith("book/appendix/api/"):
        out.append("no 'Code for this page' line under the title (_ext/code_links.py)")
    return out


def _first(items: list[str], n: int = 5) -> list[str]:
    return items[:n] + ([f"... and {len(items) - n} more like these"] if len(items) > n else [])


def text_problems(report: dict) -> list[str]:
    out = []
    if report["math"] and report["mathjax"] != "typeset":
        out.append(f"MathJax {report['mathjax']} ({report['math']} math elements)")
    out += _first([f"math not typeset: {m!r}" for m in report["untypeset"]])
    out += _first([f"TeX error: {e!r}" for e in report["tex_errors"]])
    out += _first([f"raw math in text: {m.group(0)[:80]!r} in {chunk.strip()[:120]!r}"
                   for chunk in report["prose"] for m in RAW_MATH.finditer(chunk)])
    out += _first([f"output-table cell without room or broken across lines: {c!r}" for c in report["cramped"]])
    text = report["text"]
    out += _first([f"{m.group(0)!r} in page text: {text[max(0, m.start() - 60):m.end() + 60]!r}"
                   for m in LOCAL_PATH.finditer(text)])
    out += _first([f"unrendered role in page text: {text[max(0, m.start() - 40):m.end() + 40]!r}"
                   for m in re.finditer(r"\{(?:glue|doc|ref|math|eq)(?::\w+)?\}", text)])
    return out


CELL = re.compile(r"<td[^>]*>(.*?)</td>", re.S)
MISSING = re.compile(r"\s*(?:NaN|nan|None|NaT|<NA>)\s*")


def table_problems(page_html: str) -> list[str]:
    """Table cells that show a missing number as NaN/None or whose text pandas cut off with "..."."""
    cells = [html_lib.unescape(re.sub(r"<[^>]+>", "", c)) for c in CELL.findall(page_html)]
    out = [f"table cell shows {c.strip()!r}: write n/a and say why" for c in cells if MISSING.fullmatch(c)]
    out += [f"table cell cut off: {c.strip()[-60:]!r}" for c in cells if c.rstrip().endswith(("...", "\u2026"))]
    return _first(out)


def screenshot_problems(png: Path) -> list[str]:
    data = png.read_bytes() if png.is_file() else b""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return [f"screenshot {png} missing or not a PNG"]
    width, height = struct.unpack(">II", data[16:24])
    if width != WIDTH or height < HEIGHT // 2 or len(data) < MIN_SHOT_BYTES:
        return [f"screenshot {png} looks empty: {width} x {height} px, {len(data)} bytes"]
    return []


def test_toc_lists_pages():
    pages = toc_pages()
    assert pages[0] == "book/intro.html" and len(pages) == len(set(pages)) > 20


def page_problems(browser: Browser, base: str, html: Path, page: str, shot: Path) -> list[str]:
    """Open ``page`` of the site served at ``base`` from ``html``, screenshot it, and list what is wrong."""
    browser.goto(f"{base}/{page}")
    report = browser.evaluate(PAGE_JS)
    browser.screenshot(shot)
    # the browser's own request for /favicon.ico (the book has no favicon) is no error of the page
    problems = [f"console: {e}" for e in browser.console_errors() if not e.endswith("/favicon.ico")]
    problems += image_problems(report["images"])
    problems += text_problems(report)
    problems += link_problems(report["links"], base, html)
    problems += table_problems((html / page).read_text(encoding="utf-8"))
    problems += cut_off_problems(report, page)
    problems += screenshot_problems(shot)
    browser.resize(*NARROW)
    try:
        browser.goto(f"{base}/{page}")
        problems += narrow_problems(browser.evaluate(NARROW_JS))
    finally:
        browser.resize(WIDTH, HEIGHT)
    return problems


@pytest.mark.slow
@pytest.mark.parametrize("page", toc_pages())
def test_page_in_browser(page, browser, site, book_html):
    assert (book_html / page).is_file(), f"{page} is in _toc.yml but not in the build"
    shot = SHOTS / (page.removesuffix(".html").replace("/", "__") + ".png")
    problems = page_problems(browser, site, book_html, page, shot)
    assert not problems, f"{page}:\n  " + "\n  ".join(problems)


WIDE_CELL = "<td style='white-space: nowrap; padding: 4px'>0.0123</td>"
BAD_PAGE = r"""<!DOCTYPE html><html><head><meta charset="utf-8"></head><body><article style="max-width: 900px">
<p>Raw inline $x_i$ and \(y\) math.</p><p><span class="math">\(z\)</span></p>
<img src="wide.png" style="width: 500px"><img src="missing.png">
<img src="phone.png" style="max-width: 100%">
<div class="cell_output"><pre>4 of 4 checks agree or are confirmed. Rule: agrees when |ours - document| <= 2 """ \
    + "combined se; " + "the line goes on " * 12 + r"""</pre></div>
<div class="cell_output"><table><tr>""" + WIDE_CELL * 90 + r"""</tr></table></div>
<p><a href="nowhere.html">a</a> <a href="bad.html#nope">b</a> <a href="bad.html#here" id="here">c</a></p>
<p>saved to /work/secret/run.csv</p><p><code>ram="{glue:text}`x`"</code></p><pre>Traceback (most recent call last)</pre>
<table><tr><td>NaN</td><td>a claim that pandas cut off...</td><td>1.5</td></tr></table>
<div class="cell_output"><table><tr><td style="padding: 1px">0.9</td><td style="padding: 1px">9</td></tr></table></div>
<script>console.error("boom")</script>""" + "<p>filler</p>" * 200 + "</article></body></html>"


@pytest.mark.slow
def test_checks_catch_a_bad_page(browser, tmp_path):
    """The checks above find each planted fault of a hand-made page, and nothing else."""
    from PIL import Image

    (tmp_path / "bad.html").write_text(BAD_PAGE)
    Image.new("RGB", (800, 300), "white").save(tmp_path / "wide.png")
    Image.new("RGB", (600, 300), "white").save(tmp_path / "phone.png")   # fits at 1280 px, shrunk on a phone
    with serve(tmp_path) as base:
        problems = page_problems(browser, base, tmp_path, "bad.html", tmp_path / "bad.png")
    kinds = sorted(p.split(":")[0] for p in problems)
    assert kinds == sorted(["console", "console", "image did not load", "image shown at 500 of 800 px (< 75%; its "
                            "text is too small)", "MathJax none on page (1 math elements)", "math not typeset",
                            "raw math in text", "raw math in text", "raw math in text", "'/work/' in page text",
                            "'Traceback' in page text", "broken link", "broken anchor", "table cell shows 'NaN'",
                            "table cell cut off", "output-table cell without room or broken across lines",
                            "output-table cell without room or broken across lines", "unrendered role in page text",
                            f"text runs past its box at {WIDTH} px", f"table wider than the text column at {WIDTH} px",
                            "no 'Code for this page' line under the title (_ext/code_links.py)",
                            f"figure unreadable at {NARROW[0]} px", f"figure unreadable at {NARROW[0]} px"]), \
        "\n".join(problems)
    assert any("phone.png" in p and p.startswith("figure unreadable") for p in problems)


SEARCH_JS = r"""(async () => {
  for (let i = 0; i < 300 && !/found|did not match/.test(document.getElementById("search-progress")?.innerText
                                                          || Search.status?.innerText || ""); i++) {
    await new Promise(r => setTimeout(r, 100));
  }
  await new Promise(r => setTimeout(r, 300));
  return {items: [...document.querySelectorAll("#search-results li")].map(li => li.innerText),
          raw: Search.flkitPatched ? null : "not patched",
          plain: flkitNoTex("the step size \\(\\eta_t = \\frac{1}{t}\\) and $\\alpha$")};
})()"""


@pytest.mark.slow
def test_search_results_show_no_math_source(browser, site, book_html):
    """A search for words of a page with math lists its summary and title as text, not as TeX source (which is
    what the pages' HTML holds and Sphinx cuts its summaries from: book.js converts it)."""
    assert "\\\\beta" in (book_html / "searchindex.js").read_text(encoding="utf-8"), "no TeX in the index to hide"
    browser.goto(f"{site}/search.html?q=momentum+beta+sweep")
    got = browser.evaluate(SEARCH_JS)
    assert got["raw"] is None and got["plain"] == "the step size η_t = (1)/(t) and α"
    assert len(got["items"]) >= 3, got
    raw = [m.group(0) for item in got["items"] for m in RAW_MATH.finditer(item)]
    assert not raw and not any(re.search(r"\\[A-Za-z]", i) for i in got["items"]), raw or got["items"]
    assert any(re.search("[α-ωΓ-Ω]", i) for i in got["items"]), got["items"]   # math was there, now as text
