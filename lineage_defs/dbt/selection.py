"""Which dbt nodes a run selects: a project's multi-assets, a subset, the tests on sources. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from lineage_defs.dbt.project import DbtProject
from lineage_defs.plan.spec import DbtStep, DbtTest


def groups(steps: Sequence[DbtStep]) -> list[tuple[str, list[DbtStep]]]:
    """(op name suffix, steps): the unpartitioned models together, each microbatch model on its own."""
    plain = [s for s in steps if s.partitioning is None]
    out: list[tuple[str, list[DbtStep]]] = [("", plain)] if plain else []
    out.extend((f"__{s.uri.rsplit('/', 1)[-1]}", [s]) for s in steps if s.partitioning is not None)
    return out


def source_tests(steps: Sequence[DbtStep]) -> list[DbtTest]:
    """The tests on dbt sources these steps carry (checks of the assets the sources are)."""
    return [t for s in steps for t in s.tests if t.select]


def by_name(models: Sequence[DbtStep], tests: Sequence[DbtTest]) -> list[str]:
    """`--select` of these models by fqn, and of these source tests (a model's selection does not reach them)."""
    return ["--select", " ".join([f"fqn:{s.fqn}" for s in models] + [t.select for t in tests])]


def selection_args(project: DbtProject, group: Sequence[DbtStep], whole_project: bool) -> list[str]:
    """The dbt selection of a non-subset run of this group: lineage.yml's, or the group's models by name."""
    if whole_project:
        cfg = project.config
        if cfg.selector:
            return ["--selector", cfg.selector]
        return ["--select", cfg.select] + (["--exclude", cfg.exclude] if cfg.exclude else [])
    return by_name(group, source_tests(group))
