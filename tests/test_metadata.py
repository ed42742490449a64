"""Definition metadata built without Dagster's validating constructors is the value they would build."""

from __future__ import annotations

import warnings
from pathlib import Path

from dagster import CodeReferencesMetadataValue, LocalFileCodeReference
from dagster._serdes import deserialize_value, serialize_value

from lineage_defs.assets.metadata import code_reference


def test_code_reference_is_the_validated_value(tmp_path: Path) -> None:
    path = str(tmp_path / "sales" / "orders.sql")
    with warnings.catch_warnings():  # the validated constructors warn: a beta API
        warnings.simplefilter("ignore")
        validated = CodeReferencesMetadataValue(code_references=[LocalFileCodeReference(file_path=path, line_number=1)])
    built = code_reference(path)
    assert built == validated
    # what the code server sends the UI
    assert serialize_value(built) == serialize_value(validated)
    assert deserialize_value(serialize_value(built), CodeReferencesMetadataValue) == validated
    assert [r.source for r in built.code_references] == [f"{path}:1"]
