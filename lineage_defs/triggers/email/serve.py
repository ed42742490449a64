"""Build the receiver's mailboxes from a pipelines folder and the environment, and serve them.

The CLI entry (``lineage-defs email serve``) reads the environment here:
``LINEAGE_PIPELINES_DIR``, ``LINEAGE_STATE_DIR`` / ``LINEAGE_EVENTS_DSN`` (the
event store) and ``LINEAGE_EMAIL_MAX_BYTES`` (``settings.email_max_bytes``).
"""

from __future__ import annotations

from collections.abc import Mapping

from lineage_defs.plan.graph import mailboxes
from lineage_defs.plan.names import stream_of
from lineage_defs.plan.spec import Project
from lineage_defs.triggers.email.receiver import Mailbox, serve_forever
from lineage_defs.triggers.push import partition_rule, receiver_project


def build_mailboxes(project: Project) -> dict[str, Mailbox]:
    """Every `on email` line of the project as a Mailbox with its partition rule."""
    out: dict[str, Mailbox] = {}
    for name, step, m in mailboxes(project.steps):
        source, to_key = partition_rule(step, m.partition_from)
        out[name] = Mailbox(name=name, stream=stream_of(step.name, m), step_path=step.path, partition_from=source, partition_key=to_key)
    return out


def serve(host: str, port: int, env: Mapping[str, str], folder: str | None = None) -> int:
    import asyncio
    import sys

    settings, project = receiver_project(env, folder)
    boxes = build_mailboxes(project)

    def ready() -> None:
        for name, box in sorted(boxes.items()):
            print(f"mail to {name}@… at smtp://{host}:{port}  → {box.step_path}", file=sys.stderr)
        if not boxes:
            print(f"smtp://{host}:{port}: no `on email` step in {settings.pipelines_dir}: every recipient is refused", file=sys.stderr)

    try:
        asyncio.run(serve_forever(boxes, settings.events_location, host, port, settings.email_max_bytes, ready))
    except KeyboardInterrupt:
        pass
    return 0
