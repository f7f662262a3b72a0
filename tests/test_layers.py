"""The layers of the flkit package, read from the source: every import of an flkit module (at module top and
inside functions, absolute and relative) is an edge of the import graph, and the graph must have no cycle and
no edge that goes up a layer.

Layers, lowest first (a module may import its own layer and those below it):

* ``core``: the simulation package (flkit/*.py): data, models, samplers, the FL loop, local training, the
  results stores, plots and display helpers. It knows nothing of any document.
* ``support``: what every chapter reads and that reads no chapter: the claim rules (``flkit.papers.claims``),
  the documents' items and the one verdict rule (``flkit.papers.verdicts``), the chapters' shared settings.
* ``chapters``: flkit/papers/** (one package or module per document, and the chapter "Across the documents",
  which reads the other chapters), including the scale of the documents' pages (``flkit.papers.scales``).
* ``tooling``: the book's machinery above the chapters: the owed-work ledger (``flkit.owed``), the scorecard
  (``flkit.papers.scorecard``), page execution and regeneration (``flkit.run``, with the pages' parameters read
  and checked by ``flkit.params``, and ``flkit.reproduce``), the one sweep command over the chapters' sweeps
  (``flkit.sweep``) and the GPU-window runner (``flkit.window``).

Importing ``a.b.c`` also runs the ``__init__`` of ``a`` and ``a.b``: those parent packages count as imported
too (except the importer's own ancestors, which run first anyway). Every module must be placed in
:data:`LAYER`; a new module fails :func:`test_every_module_is_placed` until it is.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LAYERS = ("core", "support", "chapters", "tooling")

_CORE = ["flkit", "flkit.aggregate", "flkit.batches", "flkit.datasets", "flkit.display", "flkit.engine",
         "flkit.fastsgd", "flkit.fl", "flkit.fused",
         "flkit.grouped", "flkit.models", "flkit.numerics", "flkit.objectives", "flkit.participation",
         "flkit.partition", "flkit.plots", "flkit.protocols", "flkit.results", "flkit.seeding", "flkit.tasks",
         "flkit.sample.*"]      # a module today; ".*": also its submodules if it becomes a package
_SUPPORT = ["flkit.papers", "flkit.papers.claims", "flkit.papers.settings", "flkit.papers.verdicts"]
_CHAPTERS = [
    "flkit.papers.scales",
    "flkit.papers.across", "flkit.papers.across.common", "flkit.papers.across.equivalences",
    "flkit.papers.across.errata", "flkit.papers.across.fedau_cafed", "flkit.papers.across.items",
    "flkit.papers.across.rare_users", "flkit.papers.across.sensitivity",
    "flkit.papers.availability", "flkit.papers.availability.cafed", "flkit.papers.availability.common",
    "flkit.papers.availability.items", "flkit.papers.availability.markov", "flkit.papers.availability.moments",
    "flkit.papers.availability.sampling", "flkit.papers.availability.schemes", "flkit.papers.availability.server_step",
    "flkit.papers.availability.theorem1", "flkit.papers.availability.weights",
    "flkit.papers.cvar", "flkit.papers.cvar.algorithm", "flkit.papers.cvar.common", "flkit.papers.cvar.diagnosis",
    "flkit.papers.cvar.fmnist_table", "flkit.papers.cvar.items", "flkit.papers.cvar.mnist", "flkit.papers.cvar.ram",
    "flkit.papers.cvar.runs", "flkit.papers.cvar.synthetic_2d", "flkit.papers.cvar.weights",
    "flkit.papers.fedau", "flkit.papers.fedau.bounds", "flkit.papers.fedau.common", "flkit.papers.fedau.cutoff",
    "flkit.papers.fedau.items", "flkit.papers.fedau.overfitting", "flkit.papers.fedau.table",
    "flkit.papers.fedau.theory", "flkit.papers.fedau.weights",
    "flkit.papers.hics", "flkit.papers.hics.cnn", "flkit.papers.hics.common", "flkit.papers.hics.costs",
    "flkit.papers.hics.diagnosis", "flkit.papers.hics.dissimilarity", "flkit.papers.hics.entropy",
    "flkit.papers.hics.fmnist", "flkit.papers.hics.items", "flkit.papers.hics.theory",
    "flkit.papers.mifa", "flkit.papers.mifa.bounds", "flkit.papers.mifa.common", "flkit.papers.mifa.complexity",
    "flkit.papers.mifa.experiments", "flkit.papers.mifa.items", "flkit.papers.mifa.logistic",
    "flkit.papers.mifa.methods", "flkit.papers.mifa.problems", "flkit.papers.mifa.quadratic",
    "flkit.papers.mifa.theory",
    # each chapter's part of the one sweep command (flkit.sweep)
    "flkit.papers.across.sweeps", "flkit.papers.cvar.sweeps", "flkit.papers.fedau.sweeps", "flkit.papers.hics.sweeps",
]
_TOOLING = ["flkit.owed", "flkit.papers.scorecard", "flkit.params", "flkit.reproduce", "flkit.run", "flkit.sweep",
            "flkit.window"]
# the one mapping: module (or "package.*": the package and everything under it) -> layer
LAYER = {m: layer for layer, ms in zip(LAYERS, (_CORE, _SUPPORT, _CHAPTERS, _TOOLING)) for m in ms}

# (importer, imported) -> why this upward import is allowed. None today: a new one must say why here.
ALLOWED: dict[tuple[str, str], str] = {}


# ------------------------------------------------------------------------------------------- the checker
def modules(root: Path, package: str = "flkit") -> dict[str, Path]:
    """Every module of `package` under `root`: dotted name -> file (a package is its ``__init__.py``)."""
    out = {}
    for p in sorted((root / package).rglob("*.py")):
        parts = list(p.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _resolve(name: str, known) -> str | None:
    """The longest prefix of a dotted name that is a known module (``flkit.engine.stack`` -> ``flkit.engine``)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports(mods: dict[str, Path]) -> dict[str, dict[str, list[tuple[int, str]]]]:
    """module -> {imported module -> [(line, "top" or "function")]}: every import statement of every module,
    wherever it stands, resolved to known modules, with the parent packages it runs."""
    graph = {}
    for m, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        package = m if path.name == "__init__.py" else m.rpartition(".")[0]
        out: dict[str, list[tuple[int, str]]] = {}

        def add(target, line, where):
            if target and target != m:
                out.setdefault(target, []).append((line, where))

        def visit(node, where):
            for ch in ast.iter_child_nodes(node):
                w = "function" if isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) else where
                if isinstance(ch, ast.Import):
                    for a in ch.names:
                        add(_resolve(a.name, mods), ch.lineno, w)
                elif isinstance(ch, ast.ImportFrom):
                    if ch.level:
                        base = package.split(".")[:len(package.split(".")) - (ch.level - 1)]
                        base = ".".join(base + ([ch.module] if ch.module else []))
                    else:
                        base = ch.module or ""
                    for a in ch.names:        # "from pkg import sub" imports the module pkg.sub
                        full = f"{base}.{a.name}"
                        add(full if full in mods else _resolve(base, mods), ch.lineno, w)
                visit(ch, w)

        visit(tree, "top")
        own = {".".join(m.split(".")[:i]) for i in range(1, m.count(".") + 2)}
        for t in list(out):
            for i in range(1, t.count(".") + 1):
                parent = ".".join(t.split(".")[:i])
                if parent in mods and parent not in own:
                    out.setdefault(parent, []).append(out[t][0])
        graph[m] = out
    return graph


def cycles(graph) -> list[list[str]]:
    """The import cycles: strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            strong(v)
    return sorted(found)


def layer_of(module: str, layer: dict[str, str]) -> str | None:
    if module in layer:
        return layer[module]
    for key, value in layer.items():
        if key.endswith(".*") and (module == key[:-2] or module.startswith(key[:-1])):
            return value
    return None


def upward(graph, layer: dict[str, str], allowed=ALLOWED, layers=LAYERS) -> list[str]:
    """Every import of a module from a higher layer than its own, not in `allowed`: "a (core) -> b (tooling)"."""
    rank = {name: i for i, name in enumerate(layers)}
    out = []
    for a, targets in sorted(graph.items()):
        for b in sorted(targets):
            la, lb = layer_of(a, layer), layer_of(b, layer)
            if la is not None and lb is not None and rank[lb] > rank[la] and (a, b) not in allowed:
                out.append(f"{a} ({la}) -> {b} ({lb}), line {targets[b][0][0]}")
    return out


# ------------------------------------------------------------------------------------------- the package
@pytest.fixture(scope="module")
def graph():
    return imports(modules(REPO))


def test_every_module_is_placed():
    found = set(modules(REPO))
    unplaced = sorted(m for m in found if layer_of(m, LAYER) is None)
    stale = sorted(k for k in LAYER if not k.endswith(".*") and k not in found)
    assert not unplaced, f"place these modules in tests/test_layers.py LAYER: {unplaced}"
    assert not stale, f"LAYER names modules that no longer exist: {stale}"
    assert set(LAYER.values()) <= set(LAYERS)


def test_no_import_cycles(graph):
    assert cycles(graph) == []


def test_no_module_imports_a_higher_layer(graph):
    assert upward(graph, LAYER) == []


def test_allowed_exceptions_are_still_needed(graph):
    """An allowed upward import that the code no longer makes is removed from ALLOWED."""
    assert [k for k in ALLOWED if k[1] not in graph.get(k[0], {})] == []


def test_the_fixed_cycles_stay_broken(graph):
    """The cycles this layering broke: engine <-> fused (the grouped forward now lives below both, and the
    fused kernels' one user, FastSGD, above both in flkit.fastsgd), and the ledger -> chapters -> scorecard ->
    ledger (chapters read flkit.papers.verdicts; the scorecard reads the ledger, never the reverse)."""
    assert "flkit.engine" not in graph["flkit.fused"] and "flkit.fastsgd" not in graph["flkit.fused"]
    assert "flkit.fused" in graph["flkit.fastsgd"] and graph["flkit.fastsgd"]["flkit.fused"][0][1] == "top"
    assert "flkit.engine" in graph["flkit.fastsgd"] and "flkit.fastsgd" not in graph["flkit.engine"]
    assert "flkit.papers.scorecard" not in graph["flkit.owed"]
    assert "flkit.owed" in graph["flkit.papers.scorecard"]
    chapters = [m for m in graph if layer_of(m, LAYER) == "chapters"]
    assert [m for m in chapters if "flkit.papers.scorecard" in graph[m]] == []


# ------------------------------------------------------------------------------------------- the checker can fail
def test_checker_reports_a_cycle_and_an_upward_import():
    """A synthetic graph with a cycle (a -> b -> c -> a) and a core module importing a chapter: both reported;
    an allowed exception is not. (The chapter's import of core.b closes a second loop through c: one cycle of four.)"""
    g = {"core.a": {"core.b": [(1, "top")]}, "core.b": {"core.c": [(2, "function")]},
         "core.c": {"core.a": [(3, "top")], "chap.x": [(4, "function")]}, "chap.x": {"core.b": [(1, "top")]},
         "tool.t": {"chap.x": [(1, "top")]}}
    layer = {"core.a": "core", "core.b": "core", "core.c": "core", "chap.x": "chapters", "tool.t": "tooling"}
    assert cycles(g) == [["chap.x", "core.a", "core.b", "core.c"]]
    assert cycles({k: {t: v for t, v in ts.items() if t != "chap.x"} for k, ts in g.items()}) == [
        ["core.a", "core.b", "core.c"]]
    assert upward(g, layer, allowed={}) == ["core.c (core) -> chap.x (chapters), line 4"]
    assert upward(g, layer, allowed={("core.c", "chap.x"): "because"}) == []
    assert cycles({"a": {"b": []}, "b": {}}) == []


def test_parser_sees_imports_inside_functions_relative_ones_and_parent_packages(tmp_path):
    """The parser finds an import hidden in a function, a relative import and "from pkg import submodule", and
    counts the parent package an import runs: a cycle through them is found."""
    pkg = tmp_path / "flkit"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("def f():\n    from flkit.sub import high\n    return high\n")
    (pkg / "sub" / "__init__.py").write_text("from . import high\n")
    (pkg / "sub" / "high.py").write_text("from .. import low\n")
    (pkg / "other.py").write_text("import flkit.sub.high\n")
    g = imports(modules(tmp_path))
    assert g["flkit.low"] == {"flkit.sub.high": [(2, "function")], "flkit.sub": [(2, "function")]}
    assert g["flkit.sub.high"] == {"flkit.low": [(1, "top")]}
    assert set(g["flkit.other"]) == {"flkit.sub.high", "flkit.sub"}
    assert cycles(g) == [["flkit.low", "flkit.sub", "flkit.sub.high"]]
    assert upward(g, {"flkit.low": "core", "flkit.sub.*": "chapters", "flkit": "core", "flkit.other": "core"},
                  allowed={}) == ["flkit.low (core) -> flkit.sub (chapters), line 2",
                                  "flkit.low (core) -> flkit.sub.high (chapters), line 2",
                                  "flkit.other (core) -> flkit.sub (chapters), line 1",
                                  "flkit.other (core) -> flkit.sub.high (chapters), line 1"]


# ------------------------------------------------------------------------------------------- imports at the top
# (importer, imported) -> why this import stands inside a function rather than at the top of the module. Every
# other import of an flkit module is at module top, where a reader sees what a module depends on.
INSIDE_FUNCTIONS: dict[tuple[str, str], str] = {
    ("flkit.params", "flkit.papers.cvar"): "only the Fed-CVaR-Avg pages' check needs it; at the top it would load "
                                           "torch and the chapter's training code for every `python -m flkit.run`",
    **{("flkit.owed", m): "to move" for m in (
        "flkit.datasets", "flkit.results", "flkit.papers.fedau.cutoff", "flkit.papers.fedau.table",
        "flkit.papers.hics.fmnist", "flkit.papers.hics.dissimilarity", "flkit.papers.across.rare_users",
        "flkit.papers.cvar")},
    **{("flkit.window", m): "to move" for m in (
        "flkit.datasets", "flkit.fl", "flkit.owed", "flkit.papers.hics.entropy", "flkit.papers.hics.fmnist",
        "flkit.seeding")},
}


def function_imports(mods: dict[str, Path]) -> dict[tuple[str, str], int]:
    """(importer, imported module) -> line, for every import of an flkit module inside a function (or method),
    absolute or relative; "from pkg import name" counts as pkg.name when that is a module, else pkg."""
    out = {}
    for m, path in mods.items():
        package = m if path.name == "__init__.py" else m.rpartition(".")[0]
        for fn in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    targets = [_resolve(a.name, mods) for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    if node.level:
                        base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                        base = ".".join(base + ([node.module] if node.module else []))
                    else:
                        base = node.module or ""
                    targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else _resolve(base, mods)
                               for a in node.names]
                else:
                    continue
                for t in targets:
                    if t:
                        out.setdefault((m, t), node.lineno)
    return out


def test_flkit_imports_stand_at_the_top():
    found = function_imports(modules(REPO))
    inside = sorted(f"{a} -> {b}, line {line}" for (a, b), line in found.items() if (a, b) not in INSIDE_FUNCTIONS)
    assert not inside, ("import these flkit modules at the top of the module (or say in tests/test_layers.py "
                        f"INSIDE_FUNCTIONS why one cannot be): {inside}")
    assert sorted(k for k in INSIDE_FUNCTIONS if k not in found) == [], "INSIDE_FUNCTIONS lists imports no longer made"
    assert all(why.strip() for why in INSIDE_FUNCTIONS.values())


def test_function_import_check_can_fail(tmp_path):
    """An import inside a function (absolute, relative, "from pkg import module") is found; one at the top is not."""
    pkg = tmp_path / "flkit"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("import flkit.b\n\ndef f():\n    from flkit import b\n\nclass C:\n    def g(self):\n"
                              "        from . import c\n        import flkit.c.x\n")
    (pkg / "b.py").write_text("")
    (pkg / "c.py").write_text("")
    assert function_imports(modules(tmp_path)) == {("flkit.a", "flkit.b"): 4, ("flkit.a", "flkit.c"): 8}
