"""MkDocs hooks for the Runlane docs site.

The docstrings cross-reference with Sphinx roles (``:func:`schedule```). The API
reference renders those as code; this drops the leftover role prefix.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE_BEFORE_CODE = re.compile(r":(?:func|class|meth|data|mod|attr|exc):(?=<code>)")


def on_page_content(html: str, **kwargs: Any) -> str:
    """Remove ``:role:`` prefixes left in front of inline code."""
    return _ROLE_BEFORE_CODE.sub("", html)
