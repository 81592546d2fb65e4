"""Sphinx configuration of irgrad's documentation (``sphinx-build -W docs build/docs``).

Sphinx, not MkDocs: irgrad's docstrings are reStructuredText (``literal``, ``::`` blocks),
which autodoc renders as written, and MyST reads the Markdown pages, whose code blocks
tests/test_readme.py runs. tests/test_docs.py builds the site with warnings as errors.
"""
from __future__ import annotations

import irgrad

project = "irgrad"
author = "irgrad's authors"
copyright = "irgrad's authors"  # noqa: A001 (Sphinx's name)
release = version = irgrad.__version__

extensions = [
    "myst_parser",             # Markdown pages (their code blocks are run by tests/test_readme.py)
    "sphinx.ext.autodoc",      # the API reference, from the docstrings
    "sphinx.ext.napoleon",     # Google-style "Args:" / "Returns:" sections in docstrings
    "sphinx.ext.viewcode",     # links from the reference to the source
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
root_doc = "index"

# Markdown: ::: fences hold directives (tests/test_readme.py runs ``` blocks, and a ::: block
# is not one); headings get anchors for links into sections.
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"show-inheritance": False}
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "furo"
html_title = f"irgrad {release}"
# Links between pages are checked (-W); the source tree's own files are linked on GitHub-less
# installs as plain paths, so nothing here reaches the network.




def setup(app):
    """``mlir`` blocks: Pygments has no MLIR lexer (LLVM IR's stops at StableHLO's attributes), so
    they are shown as plain text; tests/test_readme.py parses and verifies them."""
    from pygments.lexers.special import TextLexer

    app.add_lexer("mlir", TextLexer)
