"""Sphinx extension: fold the plumbing of the notebook pages, keep the short calls in view.

A code cell's source is folded (MyST-NB's "hide-input": a "Show code cell source" bar above its outputs,
which stay in view) when

* it is longer than ``flkit_fold_lines`` lines (_config.yml; default 10): the set-up cells (imports, helpers),
  figure code and table building that feed the prose, or
* it shows nothing (no output a reader sees: only values glued for the prose) and is longer than 3 lines.

Never folded: the ``parameters`` cell and papermill's ``injected-parameters`` cell (what a reader changes to
re-run the page), a cell tagged ``show-input``, and a cell whose tags already hide or remove something
(``hide-input``, ``remove-cell``, ...), which keeps what its tags say. The notebooks are not changed: the rule
runs when the book is built (``flkit_fold_lines: 0`` turns it off).
"""
from __future__ import annotations

from docutils import nodes
from sphinx.transforms.post_transforms import SphinxPostTransform


KEEP = {"parameters", "injected-parameters", "show-input"}
_VISIBLE = ("text/plain", "text/html", "text/markdown", "text/latex", "image/png", "image/svg+xml", "image/jpeg")


def _tags(node) -> set[str]:
    meta = node.get("cell_metadata") or {}
    return set(meta.get("tags", []) or [])


def _source_lines(node) -> int:
    block = node.next_node(nodes.literal_block)
    return len(block.astext().strip("\n").splitlines()) if block is not None else 0


def _shows_something(node) -> bool:
    """Whether the cell has an output a reader sees (a figure, a table, printed text, an error)."""
    for child in node.children:
        if child.get("nb_element") == "cell_code_output" and child.astext().strip() or \
                child.get("nb_element") == "cell_code_output" and child.next_node(nodes.image) is not None:
            return True
    return False


def should_fold(tags: set[str], lines: int, shows: bool, limit: int) -> bool:
    """The rule of the module docstring."""
    if limit <= 0 or tags & KEEP or any(t.startswith(("hide", "remove")) for t in tags):
        return False
    return lines > limit or (not shows and lines > 3)


class FoldPlumbing(SphinxPostTransform):
    default_priority = 150     # before MyST-NB's HideInputCells (199), which draws the fold
    formats = ("html",)

    def run(self, **kwargs):
        limit = int(self.config.flkit_fold_lines)
        show = self.config.nb_code_prompt_show
        hide = self.config.nb_code_prompt_hide
        for node in self.document.findall(nodes.container):
            if node.get("nb_element") != "cell_code" or node.get("hide_mode") or not node.children:
                continue
            if node.children[0].get("nb_element") != "cell_code_source":
                continue
            if should_fold(_tags(node), _source_lines(node), _shows_something(node), limit):
                node["hide_mode"] = "input"
                node["prompt_show"] = show
                node["prompt_hide"] = hide
                node["classes"].append("flkit-folded")


def setup(app):
    app.add_config_value("flkit_fold_lines", 10, "env")
    app.add_post_transform(FoldPlumbing)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
