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

from lineage_defs.assets.definitions import LineageSettings, build_definitions


class LineageDefsComponent(dg.Component, dg.Model, dg.Resolvable):
    """Every annotated script (and dbt project) in a folder as assets of this component."""

    pipelines_dir: str = "pipelines"
    state_dir: str = ".lineage"
    on_invalid: str = "raise"

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        root = Path(self.pipelines_dir)
        if not root.is_absolute():
            root = context.path / root
        state = Path(self.state_dir) if Path(self.state_dir).is_absolute() else context.project_root / self.state_dir
        # The same settings path as the code location (connections from the
        # environment, secrets as EnvVars), with this component's folders.
        from lineage_defs.definitions import settings_from_env

        _, _, env_resource = settings_from_env()
        settings = LineageSettings(on_invalid=self.on_invalid, state_dir=str(state))
        resource = env_resource.model_copy(update={"pipelines_dir": str(root), "state_dir": str(state)})
        return build_definitions(root, settings=settings, resource=resource)
