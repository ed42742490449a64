"""Find a script's leading comment block: the lines the grammar reads.

Parsing stops at the first line of code. A shebang and a Python coding line
are skipped; blank lines inside the block are allowed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lineage_defs.parse.model import Language

_CODING = re.compile(r"^#.*coding[:=]")
_MARKERS = {"sql": ("--", "//"), "hash": ("#", "//")}


@dataclass(frozen=True)
class CommentLine:
    line: int  # 1-based
    offset: int  # 0-based column where the content starts in `raw`
    content: str  # the comment text without its marker, right-stripped
    raw: str  # the whole source line


_EXTENSIONS = ((".pg.sql", Language.POSTGRES), (".sql", Language.DUCKDB), (".py", Language.PYTHON), (".sh", Language.BASH))


def language_of(path: str) -> Language | None:
    """The script's language from its file name, or None when it is no script."""
    return next((lang for ext, lang in _EXTENSIONS if path.endswith(ext)), None)


def leading_comments(text: str, language: Language | str) -> tuple[list[CommentLine], int]:
    """The comment lines of the leading block and the 1-based line of the first code line."""
    markers = _MARKERS["sql" if Language(language).is_sql else "hash"]
    out: list[CommentLine] = []
    lines = text.splitlines()
    if lines and lines[0].startswith("\ufeff"):  # a UTF-8 BOM (Windows editors) is not code
        lines[0] = lines[0][1:]
    for i, raw in enumerate(lines):
        stripped = raw.strip()
        if i == 0 and stripped.startswith("#!"):
            continue
        if not stripped:
            continue
        if language is Language.PYTHON and i < 2 and _CODING.match(stripped):
            continue
        marker = next((m for m in markers if stripped.startswith(m)), None)
        if marker is None:
            return out, i + 1
        start = raw.index(marker) + len(marker)
        # `---` rulers and `#` banners: drop the extra marker characters.
        while start < len(raw) and raw[start] == marker[0]:
            start += 1
        while start < len(raw) and raw[start] in " \t":
            start += 1
        out.append(CommentLine(i + 1, start, raw[start:].rstrip(), raw.rstrip("\n")))
    return out, len(lines) + 1


def split_body(text: str, language: Language | str) -> tuple[str, int]:
    """(the code after the leading comment block, its 1-based first line)."""
    _, body_line = leading_comments(text, language)
    return body_from(text, body_line), body_line


def body_from(text: str, body_line: int) -> str:
    """The code from the 1-based line ``body_line`` on (a parsed header's ``body_line``: no second scan)."""
    return "".join(text.splitlines(keepends=True)[body_line - 1 :])
