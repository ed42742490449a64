"""Inferred reads of Python and Bash steps: asset-URI string constants.

A URI built at run time (an f-string, or a constant followed by ``+ name``)
is not an asset by itself: its shape (``s3:///reports/x_{*}.json``) is kept as
a template, which step assembly matches against the URIs steps produce
(``s3:///reports/x_{partition}.json``) — or drops; it never becomes an asset of
its own literal prefix.
"""

from __future__ import annotations

import ast
import re

from lineage_defs import uris

_URI = re.compile(r"""(?:%s)://[^\s'"`;)]*""" % "|".join(uris.KINDS))
_STARTS_URI = re.compile(r"^(?:%s)://" % "|".join(uris.KINDS))
HOLE = "{*}"  # where a template takes a run-time value


def _keep(found: list[str], text: str) -> None:
    try:
        found.append(uris.normalize(text))
    except uris.UriError:
        pass  # a prefix like "s3://" alone is not an asset reference


def python_uris(body: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(URI string constants, templates of URIs built at run time) in a Python body."""
    found: list[str] = []
    templates: list[str] = []
    try:
        tree = ast.parse(body)
    except SyntaxError:
        return (), ()
    inside: set[int] = set()  # constants that are parts of a template
    for node in ast.walk(tree):
        template = _template(node)
        if template is not None:
            inside.update(id(n) for n in ast.walk(node))
            if _STARTS_URI.match(template):
                templates.append(template)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "://" in node.value and id(node) not in inside:
            for m in _URI.finditer(node.value):
                if m.start() == 0 and m.end() == len(node.value):
                    _keep(found, m.group(0))
    return tuple(sorted(set(found))), tuple(sorted(set(templates)))


def _template(node: ast.AST) -> str | None:
    """``f"s3:///x/{k}.json"`` or ``"s3:///x/" + k`` as ``s3:///x/{*}.json``; None for anything else."""
    if isinstance(node, ast.JoinedStr):
        parts = [v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else HOLE for v in node.values]
        return "".join(parts) if HOLE in parts else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left = node.left
        if isinstance(left, ast.Constant) and isinstance(left.value, str):
            right = node.right
            tail = right.value if isinstance(right, ast.Constant) and isinstance(right.value, str) else HOLE
            return left.value + tail if tail == HOLE else None
        inner = _template(left)
        if inner is not None:
            right = node.right
            return inner + (right.value if isinstance(right, ast.Constant) and isinstance(right.value, str) else HOLE)
    return None


def match_template(template: str, produced: list[str] | tuple[str, ...] | set[str]) -> list[str]:
    """The produced URIs a template can name (each hole stands for any text, `{partition}` included).

    >>> match_template("s3:///reports/x_{*}.json", ["s3:///reports/x_{partition}.json", "s3:///reports/y.json"])
    ['s3:///reports/x_{partition}.json']
    """
    pattern = re.compile(".+".join(re.escape(p) for p in template.split(HOLE)))
    # templates are written against the URI as the user spells it; compare in normal form
    return sorted(u for u in produced if pattern.fullmatch(u) or pattern.fullmatch(u.replace("://main/", ":///").replace("://warehouse/", ":///")))


def bash_uris(body: str) -> tuple[str, ...]:
    """URI words in a Bash body, outside comments."""
    found: list[str] = []
    for line in body.splitlines():
        code = line.split("#", 1)[0] if not line.lstrip().startswith("#") else ""
        for m in _URI.finditer(code):
            _keep(found, m.group(0))
    return tuple(sorted(set(found)))
