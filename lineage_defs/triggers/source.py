"""What a trigger source is, as data: its ``on <keyword>`` line, its stream, its settings, its runtime. No Dagster.

Each source's folder has a ``source.py`` holding the record its line parses to
and one ``Source``; ``sources.SOURCES`` lists them. The parser (``on`` lines),
the settings (``LINEAGE_<VAR>[_<CONNECTION>]``), the naming of streams and
sensors and the sensor builder (``triggers.build``) all read that table. This
module and every ``source.py`` import no Dagster and no client library (the
parser runs where neither is wanted): what runs on a tick is named by a
``"module:function"`` string and imported only when sensors are built.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from lineage_defs.errors import Location

# A parse-time value check: the value as written → what the record holds; raises ``BadValue``.
Check = Callable[[str], Any]


class BadValue(ValueError):
    """An option's value a source refuses: the parser points a caret at the value, with the fix."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix


class Trigger(Protocol):
    """What every source's record has (each record is a frozen dataclass of its own)."""

    @property
    def partition_from(self) -> str | None: ...

    @property
    def at(self) -> Location: ...


@dataclass(frozen=True)
class Option:
    """One ``name=value`` of an ``on <keyword>`` line.

    ``check``: the steps the value goes through, in order — the name of one of the parser's
    shared checks (``text``, ``connection``, ``integer``) or a plain ``Check`` of the source's
    own. A ``required`` option missing from the line is reported as ``'on <kw>' needs <name>=``
    with ``write on <kw> <name>=<example>``, or as ``missing`` (message, fix; formatted with the
    line's other options) when given."""

    name: str
    check: tuple[str | Check, ...] = ("text",)
    required: bool = False
    default: Any = None
    example: str = ""
    missing: tuple[str, str] | None = None


@dataclass(frozen=True)
class Source:
    """One trigger source: everything the rest of the package needs to know about it.

    - ``keyword``: ``on <keyword> …``; ``record``: the frozen dataclass a line parses to (its fields:
      the options by name, ``partition_from``, ``max_batch`` for a pull source, ``at``).
    - ``options``: the line's own options, in the order error messages list them; every source also
      takes ``partition_from=``, and a pull source ``max_batch=``.
    - ``identity``: (step name, record) → the parts that name the stream; ``per_step``: the stream is
      the step's own (``<keyword>:<step>:<parts>``) rather than the project's (``<keyword>:<parts>``,
      a hook or a mailbox, which one step reads). The sensor is ``<step>__<keyword>_<parts slugged>``.
    - ``env``: the variable naming a connection's address, ``<env>`` for the default connection and
      ``<env>_<CONNECTION>`` for others; ``settings_field``: the settings read those variables into
      ``LineageSettings.connections[keyword]`` (False: another setting already holds them).
    - ``pull``: a sensor tick reads the source through ``connect`` (``"module:function"``, called as
      ``(step, record, settings, partition_of) -> triggers.build.Pull``); ``label``: the source in the
      sensor's skip reasons (``str.format`` with ``t`` = the record).
    - a push source (``pull=False``) is written to the store by a receiver, its own command
      (``receiver``: the module serving it); ``text`` and ``note`` describe its sensor (``{0}``: the
      first identity part).
    - ``interval``: seconds between sensor ticks (None: ``settings.event_interval``).
    """

    keyword: str
    record: type
    options: tuple[Option, ...]
    identity: Callable[[str, Any], tuple[str, ...]]
    per_step: bool = True
    env: str | None = None
    settings_field: bool = True
    pull: bool = True
    connect: str = ""
    label: str = ""
    receiver: str = ""
    text: str = ""
    note: str = ""
    interval: int | None = None

    def stream(self, step_name: str, trigger: Any) -> str:
        """The event store's stream a line of this source feeds (two lines naming one stream share a sensor)."""
        return ":".join((self.keyword, *((step_name,) if self.per_step else ()), *self.identity(step_name, trigger)))

    def sensor_name(self, step_name: str, trigger: Any) -> str:
        return f"{step_name}__{self.keyword}_" + "_".join(slug(p) for p in self.identity(step_name, trigger))

    def connection_env(self, connection: str) -> str:
        """The variable holding a connection's address: ``LINEAGE_KAFKA_BOOTSTRAP[_<CONNECTION>]``."""
        return f"{self.env}" + ("" if connection == "default" else f"_{connection.upper()}")

    def head(self, trigger: Any) -> str:
        """``on nats subject=… stream=…``: the line as its required options name it."""
        return " ".join((f"on {self.keyword}", *(f"{o.name}={getattr(trigger, o.name)}" for o in self.options if o.required)))


def slug(text: str) -> str:
    """A part of a sensor's name: Dagster names take letters, digits and _ only."""
    return re.sub(r"[^A-Za-z0-9_]", "_", text)
