"""The same pipelines folder as a Dagster Component, for projects built with ``dg``.

``defs/shop/defs.yaml``::

    type: lineage_defs.assets.component.LineageDefsComponent
    attributes:
      pipelines_dir: pipelines      # relative to this defs folder
      on_invalid: raise
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from lineage_defs.assets.definitions import build_definitions
from lineage_defs.settings import DEFAULT_STATE_DIR, LineageSettings, OnInvalid


class LineageDefsComponent(dg.Component, dg.Model, dg.Resolvable):
    """Every annotated script (and dbt project) in a folder as assets of this component."""

    pipelines_dir: str = "pipelines"
    state_dir: str = DEFAULT_STATE_DIR
    on_invalid: str = "raise"

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        root = Path(self.pipelines_dir)
        if not root.is_absolute():
            root = context.path / root
        state = Path(self.state_dir) if Path(self.state_dir).is_absolute() else context.project_root / self.state_dir
        # Connections from the environment (secrets as EnvVars), with this component's folders.
        settings = LineageSettings.from_env().replace(pipelines_dir=str(root), state_dir=str(state), on_invalid=OnInvalid(self.on_invalid))
        return build_definitions(settings=settings)
