"""Inferred reads of Python and Bash steps: asset-URI string constants."""

from __future__ import annotations

import ast
import re

from lineage_defs import uris

_URI = re.compile(r"""(?:%s)://[^\s'"`;)]*""" % "|".join(uris.KINDS))


def _keep(found: list[str], text: str) -> None:
    try:
        found.append(uris.normalize(text))
    except uris.UriError:
        pass  # a prefix like "s3://" alone is not an asset reference


def python_uris(body: str) -> tuple[str, ...]:
    """URI string constants in a Python body (f-strings' literal parts included)."""
    found: list[str] = []
    try:
        tree = ast.parse(body)
    except SyntaxError:
        return ()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "://" in node.value:
            for m in _URI.finditer(node.value):
                if m.start() == 0 and m.end() == len(node.value):
                    _keep(found, m.group(0))
    return tuple(sorted(set(found)))


def bash_uris(body: str) -> tuple[str, ...]:
    """URI words in a Bash body, outside comments."""
    found: list[str] = []
    for line in body.splitlines():
        code = line.split("#", 1)[0] if not line.lstrip().startswith("#") else ""
        for m in _URI.finditer(code):
            _keep(found, m.group(0))
    return tuple(sorted(set(found)))
