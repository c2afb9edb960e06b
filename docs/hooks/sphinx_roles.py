"""griffe extension for the API reference: docstrings written for Sphinx show their roles
as code in Markdown.

The packages' docstrings cite each other with Sphinx roles (``:func:`init```,
``:class:`~torch.nn.Module```); mkdocstrings reads docstrings as Markdown, where a role would
print as ``:func:init``. This turns each role into a code span of its target (``init``;
``Module`` for a ``~`` target). Plain code, not a link: a target outside the rendered pages
would otherwise be an unresolved cross-reference, a warning that fails ``mkdocs build
--strict``.
"""

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|exc|obj|const):`(~?)([^`]+)`")
"""A Sphinx cross-reference role: its ``~`` (show the last name only) and its target."""


def _code(match: re.Match[str]) -> str:
    short, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


def plain(text: str) -> str:
    """``text`` with each Sphinx role replaced by a code span of its target."""
    return ROLE.sub(_code, text)


class SphinxRoles(griffe.Extension):
    """Rewrites every loaded object's docstring with :func:`plain`."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain(obj.docstring.value)
