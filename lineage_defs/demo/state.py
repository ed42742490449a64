"""What a running demo leaves for `demo send` and `demo stop`, and the webhook credentials it generated.

Both live in ``<state dir>/demo/``, readable by the user alone (0600):
``running.json`` while the demo runs (its pid, where each service listens),
``credentials.json`` for good (a bearer token and an HMAC secret per hook,
generated on the first start and kept, so a request that worked keeps working).
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lineage_defs.errors import LineageDefsError
from lineage_defs.plan.names import hook_env


@dataclass(frozen=True)
class Running:
    pid: int  # the `lineage-defs demo up` process
    ui: str  # http://host:port
    kafka: dict[str, str] = field(default_factory=dict)  # connection → bootstrap
    topics: list[str] = field(default_factory=list)
    webhooks: str | None = None  # the receiver's base URL
    hooks: list[str] = field(default_factory=list)
    email: str | None = None  # the e-mail receiver, smtp://host:port
    mailboxes: list[str] = field(default_factory=list)
    groups: dict[str, int] = field(default_factory=dict)  # service → process group id


@dataclass(frozen=True)
class Credential:
    token: str
    secret: str


def demo_dir(state_dir: str | Path) -> Path:
    return Path(state_dir) / "demo"


def _write_private(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
    tmp.replace(path)


def save_running(state_dir: str | Path, running: Running) -> None:
    _write_private(demo_dir(state_dir) / "running.json", asdict(running))


def load_running(state_dir: str | Path) -> Running | None:
    """The running demo's record; None when there is none (or its process is gone)."""
    path = demo_dir(state_dir) / "running.json"
    try:
        running = Running(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return running if is_demo_process(running.pid) else None


def clear_running(state_dir: str | Path) -> None:
    (demo_dir(state_dir) / "running.json").unlink(missing_ok=True)


def is_demo_process(pid: int) -> bool:
    """Whether ``pid`` is a `lineage-defs demo up` (not another process that got the pid since)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"demo" in argv and b"up" in argv


def credentials(state_dir: str | Path, hooks: Iterable[str], env: Mapping[str, str]) -> dict[str, Credential]:
    """Each hook's token and secret: the environment's if set, else the demo's own (generated once, kept)."""
    path = demo_dir(state_dir) / "credentials.json"
    try:
        kept = {k: Credential(**v) for k, v in json.loads(path.read_text()).items()}
    except (OSError, ValueError, TypeError):
        kept = {}
    out: dict[str, Credential] = {}
    for name in hooks:
        suffix = hook_env(name)
        own = kept.get(name) or Credential(secrets.token_urlsafe(24), secrets.token_urlsafe(32))
        kept[name] = own
        out[name] = Credential(env.get(f"LINEAGE_WEBHOOK_TOKEN_{suffix}") or own.token, env.get(f"LINEAGE_WEBHOOK_SECRET_{suffix}") or own.secret)
    _write_private(path, {k: asdict(v) for k, v in kept.items()})
    return out


def require_running(state_dir: str | Path) -> Running:
    running = load_running(state_dir)
    if running is None:
        raise LineageDefsError(f"no demo is running for the state dir {state_dir}", fix="start it with `make demo` (or `lineage-defs demo up`) first")
    return running
