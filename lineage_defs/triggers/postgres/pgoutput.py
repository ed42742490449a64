"""A decoder for PostgreSQL's built-in ``pgoutput`` plugin, protocol version 1. No Dagster, no server.

Message layout: https://www.postgresql.org/docs/15/protocol-logicalrep-message-formats.html
(no maintained pure-Python decoder exists on PyPI; the format is small and
stable). Tuple values arrive as text: int, float, bool and json become JSON
types, everything else stays text; an unchanged TOASTed value is left out.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

_BEGIN = struct.Struct(">qqi")  # final (commit) LSN, commit time, xid
_COMMIT = struct.Struct(">bqqq")  # flags, commit LSN, end LSN, commit time
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
OPS = {"I": "insert", "U": "update", "D": "delete"}
_EPOCH_2000_MS = 946_684_800_000  # PostgreSQL timestamps count microseconds from 2000-01-01


def _value(oid: int, text: str) -> Any:
    if oid in (20, 21, 23, 26):  # int8 int2 int4 oid
        return int(text)
    if oid in (700, 701):  # float4 float8
        return float(text)
    if oid == 16:  # bool
        return text == "t"
    if oid in (114, 3802):  # json jsonb
        return json.loads(text)
    return text


@dataclass(frozen=True)
class Change:
    """One row change of a committed transaction."""

    commit_lsn: int
    ordinal: int  # position in its transaction: rows of one COPY share WAL records, so the LSN alone is not unique
    op: str  # insert | update | delete
    table: str  # schema.table
    new: dict[str, Any] | None
    old_key: dict[str, Any] | None
    xid: int
    commit_ms: int | None  # the transaction's commit time (epoch ms); known once its commit is read

    def as_json(self) -> bytes:
        return json.dumps({"op": self.op, "table": self.table, "new": self.new, "old_key": self.old_key, "xid": self.xid}, default=str).encode()


@dataclass(frozen=True)
class Commit:
    end_lsn: int  # where the slot may be advanced once the transaction's changes are stored
    commit_ms: int


Column = tuple[str, int, bool]  # name, type oid, part of the replica identity key


class Decoder:
    """Messages in slot order → ``Change``s and ``Commit``s (Begin, Relation and the rest are state, not output)."""

    def __init__(self) -> None:
        self.relations: dict[int, tuple[str, str, list[Column]]] = {}
        self.lsn = 0
        self.xid = 0
        self.ordinal = 0

    @staticmethod
    def _cstr(buf: bytes, pos: int) -> tuple[str, int]:
        end = buf.index(0, pos)
        return buf[pos:end].decode(), end + 1

    def _tuple(self, buf: bytes, pos: int, cols: list[Column]) -> tuple[dict[str, Any], int]:
        (n,) = _I16.unpack_from(buf, pos)
        pos += 2
        row: dict[str, Any] = {}
        for i in range(n):
            kind = buf[pos]
            pos += 1
            name, oid, _ = cols[i]
            if kind == 0x74:  # 't': text
                (ln,) = _I32.unpack_from(buf, pos)
                pos += 4
                row[name] = _value(oid, buf[pos : pos + ln].decode())
                pos += ln
            elif kind == 0x6E:  # 'n': null
                row[name] = None
            elif kind != 0x75:  # 'u': an unchanged TOASTed value, not sent
                raise ValueError(f"unsupported tuple value kind {chr(kind)!r}")
        return row, pos

    def decode(self, data: bytes) -> Change | Commit | None:
        buf = bytes(data)
        tag = chr(buf[0])
        if tag == "B":
            self.lsn, _, self.xid = _BEGIN.unpack_from(buf, 1)
            self.ordinal = 0
            return None
        if tag == "C":
            _, _, end_lsn, ts = _COMMIT.unpack_from(buf, 1)
            return Commit(end_lsn, _EPOCH_2000_MS + ts // 1000)
        if tag == "R":
            (relid,) = _I32.unpack_from(buf, 1)
            schema, pos = self._cstr(buf, 5)
            table, pos = self._cstr(buf, pos)
            pos += 1  # the replica identity setting
            (ncol,) = _I16.unpack_from(buf, pos)
            pos += 2
            cols: list[Column] = []
            for _ in range(ncol):
                flags = buf[pos]
                name, pos = self._cstr(buf, pos + 1)
                oid, _typmod = struct.unpack_from(">ii", buf, pos)
                pos += 8
                cols.append((name, oid, bool(flags & 1)))
            self.relations[relid] = (schema or "public", table, cols)
            return None
        if tag in OPS:
            (relid,) = _I32.unpack_from(buf, 1)
            schema, table, cols = self.relations[relid]
            pos = 5
            old: dict[str, Any] | None = None
            new: dict[str, Any] | None = None
            if chr(buf[pos]) in "KO":  # the old key ('K') or the whole old row ('O', REPLICA IDENTITY FULL)
                old, pos = self._tuple(buf, pos + 1, cols)
            if tag != "D":
                new, pos = self._tuple(buf, pos + 1, cols)
            keys = [c[0] for c in cols if c[2]]
            if old is not None:
                old = {k: old[k] for k in keys if k in old} or old
            elif tag == "U" and new is not None:  # the key did not change: it is the new row's
                old = {k: new.get(k) for k in keys} or None
            self.ordinal += 1
            return Change(self.lsn, self.ordinal - 1, OPS[tag], f"{schema}.{table}", new, old, self.xid, None)
        return None  # 'Y' type, 'O' origin, 'M' message, 'T' truncate: not row changes


def lsn_text(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"
