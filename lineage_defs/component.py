"""The same pipelines folder as a Dagster Component, for projects built with ``dg``.

``dg scaffold defs lineage_defs.LineageDefsComponent shop`` writes
``defs/shop/defs.yaml`` (and, without ``--pipelines-dir``, a ``pipelines/``
folder beside it with a first step)::

    type: lineage_defs.LineageDefsComponent
    attributes:
      pipelines_dir: pipelines      # relative to this defs folder
      on_invalid: raise
      library_dirs: [checks]        # optional: shared test-type folders, relative to this defs folder
                                    # (default: LINEAGE_LIBRARY_DIRS)
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from lineage_defs.location import build_definitions
from lineage_defs.settings import DEFAULT_STATE_DIR, LineageSettings, OnInvalid


STARTER = """-- A first step: edit it, or add scripts beside it (`lineage-defs new <pipeline>/<name> ...`).
-- pipeline
-- materialize ducklake://main/hello
SELECT 1 AS id, 'hello' AS greeting
"""


class ScaffoldParams(dg.Model):
    pipelines_dir: str | None = None  # an existing pipelines folder (absolute, or relative to the defs folder)
    state_dir: str | None = None  # default: .lineage in the project root


class LineageDefsScaffolder(dg.Scaffolder[ScaffoldParams]):
    """``dg scaffold defs``: a defs.yaml that loads as it is — given a folder, or a new one with a first step."""

    @classmethod
    def get_scaffold_params(cls) -> type[ScaffoldParams]:
        return ScaffoldParams

    def scaffold(self, request: dg.ScaffoldRequest[ScaffoldParams]) -> None:
        params = request.params
        attributes: dict[str, str] = {"pipelines_dir": params.pipelines_dir or "pipelines"}
        if params.state_dir:
            attributes["state_dir"] = params.state_dir
        dg.scaffold_component(request, attributes)
        if not params.pipelines_dir:
            starter = Path(request.target_path) / "pipelines" / "example" / "hello.sql"
            if not starter.exists():
                starter.parent.mkdir(parents=True, exist_ok=True)
                starter.write_text(STARTER)


@dg.scaffold_with(LineageDefsScaffolder)
class LineageDefsComponent(dg.Component, dg.Model, dg.Resolvable):
    """Every annotated script (and dbt project) in a folder as assets of this component."""

    pipelines_dir: str = "pipelines"
    state_dir: str = DEFAULT_STATE_DIR
    on_invalid: str = "raise"
    library_dirs: list[str] | None = None  # shared test-type folders; None: LINEAGE_LIBRARY_DIRS

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        root = context.path / self.pipelines_dir  # an absolute path stays itself
        state = Path(self.state_dir) if Path(self.state_dir).is_absolute() else context.project_root / self.state_dir
        # Connections from the environment (secrets as EnvVars), with this component's folders.
        settings = LineageSettings.from_env().replace(pipelines_dir=str(root), state_dir=str(state), on_invalid=OnInvalid(self.on_invalid))
        if self.library_dirs is not None:
            settings = settings.replace(library_dirs=tuple(str(context.path / d) for d in self.library_dirs))
        return build_definitions(settings=settings)
