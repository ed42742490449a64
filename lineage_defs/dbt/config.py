"""``lineage.yml`` beside ``dbt_project.yml`` (SPEC section 8) → a frozen ``DbtConfig``.

Strict like the annotations: an unknown key or a bad value is a ``SpecError``
with ``file:line:col``, the quoted line, a caret and a fix; every problem of
the file is returned, none raised.

>>> cfg, errs = parse_lineage_yml("shop/dbt/lineage.yml", "select: tag:daily\\nthreads: 2\\n")
>>> cfg.select, cfg.threads, errs
('tag:daily', 2, [])
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from lineage_defs.errors import Location, SpecError, did_you_mean


class TestBehavior(StrEnum):
    """When dbt tests run: with their model (``dbt build``), after all models (``run`` then ``test``), or not at all."""

    __test__ = False  # not a pytest class

    BUILD = "build"
    AFTER_ALL = "after_all"
    NONE = "none"


KEYS = ("select", "exclude", "selector", "vars", "target", "threads", "test_behavior", "column_lineage")


@dataclass(frozen=True)
class DbtConfig:
    """What ``lineage.yml`` sets; the defaults are what a project without one gets."""

    select: str = "fqn:*"
    exclude: str = ""
    selector: str = ""
    vars_json: str = ""  # `vars` as canonical JSON (frozen data; passed to dbt as --vars)
    target: str | None = None
    threads: int | None = None
    test_behavior: TestBehavior = TestBehavior.BUILD
    column_lineage: bool = True
    errors: tuple[SpecError, ...] = field(default=(), compare=False)

    @property
    def vars(self) -> dict[str, Any]:
        return json.loads(self.vars_json) if self.vars_json else {}

    def cli_args(self) -> list[str]:
        """The flags every dbt invocation of the project gets (parse, build, compile)."""
        out: list[str] = []
        if self.vars_json:
            out += ["--vars", self.vars_json]
        if self.target:
            out += ["--target", self.target]
        return out


def parse_lineage_yml(path: str, text: str) -> tuple[DbtConfig, list[SpecError]]:
    """Parse one ``lineage.yml``; ``path`` is how errors name the file."""
    import yaml  # type: ignore[import-untyped]  # PyYAML ships no types (dbt and dagster depend on it)

    lines = text.splitlines()
    errors: list[SpecError] = []

    def loc(node: Any, width: int | None = None) -> Location:
        line, col = node.start_mark.line, node.start_mark.column
        src = lines[line] if line < len(lines) else ""
        w = width if width is not None else max(len(src) - col, 1)
        return Location(path, line + 1, col + 1, src, max(w, 1))

    try:
        root = yaml.compose(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line if mark else 0
        where = Location(path, line + 1, (mark.column + 1) if mark else 1, lines[line] if line < len(lines) else "", 1)
        problem = getattr(e, "problem", None) or str(e)
        errors.append(SpecError(f"lineage.yml is not valid YAML: {problem}", where, "fix the YAML syntax at the caret"))
        return DbtConfig(errors=tuple(errors)), errors
    if root is None:
        return DbtConfig(), []
    if not isinstance(root, yaml.MappingNode):
        errors.append(SpecError("lineage.yml must be a mapping of settings", loc(root), f"write 'key: value' lines; keys: {', '.join(KEYS)}"))
        return DbtConfig(errors=tuple(errors)), errors

    values: dict[str, Any] = {}
    seen: set[str] = set()
    for key_node, value_node in root.value:
        key = str(key_node.value)
        if key not in KEYS:
            guess = did_you_mean(key, KEYS)
            fix = f"did you mean '{guess}'?" if guess else f"the keys are {', '.join(KEYS)}"
            errors.append(SpecError(f"unknown key '{key}' in lineage.yml", loc(key_node, len(key)), fix))
            continue
        if key in seen:
            errors.append(SpecError(f"'{key}' is set twice", loc(key_node, len(key)), "keep one of them"))
            continue
        seen.add(key)
        value = _value(key, value_node, loc, errors)
        if value is not None:
            values["vars_json" if key == "vars" else key] = value
    if values.get("selector") and ("select" in values or "exclude" in values):
        node = next(k for k, _ in root.value if k.value == "selector")
        errors.append(SpecError("'selector' cannot be combined with 'select' or 'exclude'", loc(node, len("selector")), "use either a selector or select/exclude"))
    cfg = DbtConfig(**values, errors=tuple(errors))
    return cfg, errors


def _value(key: str, node: Any, loc: Any, errors: list[SpecError]) -> Any:
    import yaml

    scalar = isinstance(node, yaml.ScalarNode)
    raw = node.value if scalar else None
    if key in ("select", "exclude", "selector", "target"):
        if not scalar or not str(raw).strip() or node.tag == "tag:yaml.org,2002:null":
            errors.append(SpecError(f"'{key}' must be a non-empty string", loc(node), f"e.g. {key}: {_EXAMPLES[key]}"))
            return None
        return str(raw)
    if key == "threads":
        if not scalar or not str(raw).isdigit() or int(str(raw)) < 1:
            errors.append(SpecError(f"'threads' must be a positive integer, not '{raw if scalar else '…'}'", loc(node), "e.g. threads: 4"))
            return None
        return int(str(raw))
    if key == "test_behavior":
        choices = [b.value for b in TestBehavior]
        if not scalar or raw not in choices:
            guess = did_you_mean(str(raw), choices) if scalar else None
            fix = f"did you mean '{guess}'?" if guess else f"one of {', '.join(choices)}"
            errors.append(SpecError(f"bad test_behavior '{raw if scalar else '…'}'", loc(node), fix))
            return None
        return TestBehavior(raw)
    if key == "column_lineage":
        value = yaml.safe_load(yaml.serialize(node)) if scalar else None
        if not isinstance(value, bool):
            errors.append(SpecError(f"'column_lineage' must be true or false, not '{raw if scalar else '…'}'", loc(node), "write column_lineage: true (or false)"))
            return None
        return value
    # vars: a mapping, passed to dbt as JSON
    value = yaml.safe_load(yaml.serialize(node))
    if not isinstance(value, Mapping):
        errors.append(SpecError("'vars' must be a mapping", loc(node), "e.g. vars: {start_date: '2025-01-01'}"))
        return None
    try:
        return json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError) as e:  # pragma: no cover - yaml gives JSON-able data with default=str
        errors.append(SpecError(f"'vars' cannot be passed to dbt: {e}", loc(node), "use strings, numbers, lists and mappings"))
        return None


_EXAMPLES = {"select": "tag:daily", "exclude": "staging.legacy_*", "selector": "nightly", "target": "prod"}
