// Cells of the notebooks' tables holding at most 24 characters in at most three words (a number, "mean ± sd",
// a short label) are kept on one line (CSS class flkit-short); longer text wraps.
// A header may break after each "_" of a snake_case name (a <wbr>), so that it does not widen its column.
document.addEventListener("DOMContentLoaded", () => {
  for (const cell of document.querySelectorAll("div.cell_output table td")) {
    const text = cell.textContent.trim();
    if (text.length <= 24 && text.split(/\s+/).length <= 3) cell.classList.add("flkit-short");
    else if (text.split(/\s+/).some(word => word.length > 16)) cell.classList.add("flkit-token");
  }
  for (const th of document.querySelectorAll("article table th")) {
    const walker = document.createTreeWalker(th, NodeFilter.SHOW_TEXT);
    const texts = [];
    for (let n; (n = walker.nextNode());) if (n.data.includes("_")) texts.push(n);
    for (const n of texts) {
      const parts = n.data.split("_");
      const frag = document.createDocumentFragment();
      parts.forEach((part, i) => {
        frag.append(part + (i < parts.length - 1 ? "_" : ""));
        if (i < parts.length - 1) frag.append(document.createElement("wbr"));
      });
      n.replaceWith(frag);
    }
  }
});

// A table still wider than the text column is drawn in a smaller font, down to FLKIT_TABLE_FLOOR of its own
// (about 8.5 px); beyond that it scrolls sideways in its box, which tests/test_browser.py reports.
const FLKIT_TABLE_FLOOR = 0.75;
function flkitFitTables() {
  for (const table of document.querySelectorAll("article table")) {
    const box = table.closest("div.cell_output") || table.closest("article");
    if (!box) continue;
    table.style.fontSize = "";
    const base = parseFloat(getComputedStyle(table).fontSize);
    for (let i = 0; i < 4; i++) {
      const room = box.getBoundingClientRect().right - table.getBoundingClientRect().left;
      const width = table.getBoundingClientRect().width;
      if (width <= room + 0.5) break;
      const now = parseFloat(getComputedStyle(table).fontSize);
      const next = Math.max(base * FLKIT_TABLE_FLOOR, now * room / width - 0.05);
      if (next >= now) break;
      table.style.fontSize = `${next.toFixed(2)}px`;
    }
  }
}
window.addEventListener("load", flkitFitTables);
document.fonts.ready.then(flkitFitTables);
window.addEventListener("resize", flkitFitTables);

// Figures on a narrow screen (a phone): drawn at no less than MIN_SCALE of their pixels, so that their text
// stays readable (figures are made with >= ~10 px fonts), inside a box that scrolls sideways when the figure is
// wider than the column. On wider screens nothing changes (max-width: 100%, as the theme draws them).
const FLKIT_NARROW = window.matchMedia("(max-width: 700px)");
const FLKIT_MIN_SCALE = 0.75;
function flkitFitFigures() {
  for (const img of document.querySelectorAll("article img")) {
    if (!img.naturalWidth) continue;
    let box = img.parentElement.classList.contains("flkit-figure-scroll") ? img.parentElement : null;
    if (FLKIT_NARROW.matches) {
      if (!box) {
        box = document.createElement("div");
        box.className = "flkit-figure-scroll";
        img.parentElement.insertBefore(box, img);
        box.appendChild(img);
      }
      const room = box.clientWidth;
      const width = Math.max(Math.min(img.naturalWidth, room), Math.ceil(FLKIT_MIN_SCALE * img.naturalWidth));
      img.style.width = `${width}px`;
    } else if (box) {
      img.style.width = "";
    }
  }
}
window.addEventListener("load", flkitFitFigures);
FLKIT_NARROW.addEventListener("change", flkitFitFigures);

// A display equation wider than the text column is scaled down to fit (to at most 60 %; beyond that it
// scrolls sideways in its own box), once MathJax has typeset it.
function flkitFitEquations() {
  for (const eq of document.querySelectorAll('article mjx-container[display="true"]')) {
    eq.style.fontSize = "";
    const ratio = eq.clientWidth / eq.scrollWidth;
    if (ratio < 1) eq.style.fontSize = `${Math.max(60, Math.floor(ratio * 100) - 1)}%`;
  }
}
window.addEventListener("load", () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    MathJax.startup.promise.then(flkitFitEquations);
  }
});

// Search results: the summaries and titles Sphinx shows are cut from the pages' HTML, where math is its TeX
// source ("\(\eta_t\)"). They are shown as text instead: Greek letters as letters, \frac{a}{b} as a/b, other
// commands and braces dropped.
const FLKIT_GREEK = {alpha: "α", beta: "β", gamma: "γ", delta: "δ", epsilon: "ε", varepsilon: "ε", eta: "η",
  theta: "θ", kappa: "κ", lambda: "λ", mu: "μ", nu: "ν", pi: "π", rho: "ρ", sigma: "σ", tau: "τ", phi: "φ",
  chi: "χ", psi: "ψ", omega: "ω", Gamma: "Γ", Delta: "Δ", Theta: "Θ", Lambda: "Λ", Sigma: "Σ", Phi: "Φ",
  Omega: "Ω", le: "≤", leq: "≤", ge: "≥", geq: "≥", neq: "≠", approx: "≈", times: "×", cdot: "·", infty: "∞",
  sum: "Σ", in: "∈", to: "→", pm: "±", star: "*", ldots: "…", dots: "…", sim: "~", mid: "|"};
function flkitTexText(tex) {
  let s = tex;
  for (let i = 0; i < 3; i++) s = s.replace(/\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}/g, "($1)/($2)");
  s = s.replace(/\\(?:mathrm|mathbf|mathcal|mathbb|text|operatorname|boldsymbol|hat|bar|tilde)\{([^{}]*)\}/g, "$1");
  s = s.replace(/\\([A-Za-z]+)/g, (m, name) => FLKIT_GREEK[name] ?? "");
  s = s.replace(/\\[,;:! ]/g, " ").replace(/[{}]/g, "").replace(/\s+/g, " ");
  return s.trim();
}
function flkitNoTex(text) {
  return text.replace(/\\\((.*?)\\\)|\\\[(.*?)\\\]|\$\$(.*?)\$\$|\$([^$\n]+?)\$/gs,
                      (m, a, b, c, d) => flkitTexText(a ?? b ?? c ?? d ?? ""))
             .replace(/\\([A-Za-z]+)/g, (m, name) => FLKIT_GREEK[name] ?? m);   // titles: "Choosing \beta"
}
function flkitPatchSearch() {
  if (typeof Search === "undefined" || Search.flkitPatched || !Search.htmlToText) return;   // a const of searchtools.js
  const original = Search.htmlToText;
  Search.htmlToText = (html, anchor) => flkitNoTex(original(html, anchor));
  Search.flkitPatched = true;
  const results = document.getElementById("search-results");
  if (!results) return;
  new MutationObserver(() => {
    const walker = document.createTreeWalker(results, NodeFilter.SHOW_TEXT);
    for (let n; (n = walker.nextNode());) {
      if (/\\[(\[A-Za-z]|\$/.test(n.data)) n.data = flkitNoTex(n.data);
    }
  }).observe(results, {childList: true, subtree: true, characterData: true});
}
flkitPatchSearch();
document.addEventListener("DOMContentLoaded", flkitPatchSearch);
