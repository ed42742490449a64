"""Stage 1: script text → annotations (``Header``). Knows nothing of Dagster."""

from lineage_defs.parse.grammar import parse_header
from lineage_defs.parse.tokens import parse_duration
from lineage_defs.parse.header import language_of
from lineage_defs.parse.model import Header

__all__ = ["Header", "language_of", "parse_duration", "parse_header"]
