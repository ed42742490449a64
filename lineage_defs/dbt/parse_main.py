"""``python -m lineage_defs.dbt.parse_main <json>``: dbt parse, then the selection, in one dbt process.

Run by ``manifest.py`` in a subprocess (dbt keeps global state and
costs seconds to import; one process pays that once). Writes
``manifest.json`` and ``partial_parse.msgpack`` into ``target`` (dbt's own
artifacts) and ``selected.json`` (unique ids, or null for everything).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import cast


def main(spec: dict[str, object]) -> int:
    from dbt.cli.main import dbtRunner
    from dbt.contracts.graph.manifest import Manifest

    target = str(spec["target"])
    common = ["--project-dir", str(spec["project_dir"]), "--profiles-dir", str(spec["profiles_dir"]), "--target-path", target, "--log-path", target]
    extra = [str(a) for a in spec["args"]]  # type: ignore[attr-defined]
    parsed = dbtRunner().invoke(["parse", "--quiet", *common, *extra])
    if not parsed.success:
        print(f"dbt parse failed: {parsed.exception or 'see the dbt log above'}", file=sys.stderr)
        return 1
    selected = None
    selection = [str(a) for a in spec["selection"]]  # type: ignore[attr-defined]
    if selection:
        listed = dbtRunner(manifest=cast(Manifest, parsed.result)).invoke(["ls", "--quiet", *common, *extra, *selection, "--output", "json", "--output-keys", "unique_id"])
        if not listed.success:
            print(f"dbt ls failed for the selection {selection}: {listed.exception}", file=sys.stderr)
            return 1
        selected = [json.loads(line)["unique_id"] for line in cast("list[str]", listed.result or [])]
    Path(target, "selected.json").write_text(json.dumps(selected))
    return 0


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
