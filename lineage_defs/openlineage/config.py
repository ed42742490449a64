"""Is the OpenLineage client configured? The client's own places, read the way it reads them, without importing it.

The client (openlineage-python) takes its transport from ``$OPENLINEAGE_CONFIG``,
``./openlineage.yml`` or ``~/.openlineage/openlineage.yml``, then from
``OPENLINEAGE__TRANSPORT__…`` variables, then from ``OPENLINEAGE_URL``;
``OPENLINEAGE_DISABLED=true`` turns it off. Unconfigured, it would print
every event to the console: nothing is emitted then.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def configured(env: Mapping[str, str] | None = None, cwd: Path | None = None) -> bool:
    """True when the client has a transport configured and is not disabled.

    >>> configured({"OPENLINEAGE_URL": "http://127.0.0.1:5000"}), configured({}, Path("/nonexistent"))
    (True, False)
    """
    e = os.environ if env is None else env
    if e.get("OPENLINEAGE_DISABLED", "").strip().lower() in ("true", "1", "yes"):
        return False
    if e.get("OPENLINEAGE_URL") or e.get("OPENLINEAGE_CONFIG") or any(k.startswith("OPENLINEAGE__") for k in e):
        return True
    here = cwd or Path.cwd()
    home = Path(e.get("HOME") or Path.home())
    return (here / "openlineage.yml").is_file() or (home / ".openlineage" / "openlineage.yml").is_file()
