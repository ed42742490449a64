"""Sessions: what they attach, and what they never leak (connections, secrets)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest

from lineage_defs.errors import RunError
from lineage_defs.settings import LineageSettings
from lineage_defs.run.substrates import Session, redact
from tests.conftest import free_port


def test_a_failed_session_closes_its_connection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[Any] = []
    real = duckdb.connect

    def spy(*a: Any, **kw: Any) -> Any:
        made.append(real(*a, **kw))
        return made[-1]

    monkeypatch.setattr(duckdb, "connect", spy)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "warehouse.duckdb").write_text("not a database")  # the warehouse cannot attach
    with pytest.raises(RunError):
        Session(LineageSettings(state_dir=str(tmp_path / "state")))
    (conn,) = made
    with pytest.raises(duckdb.ConnectionException):
        conn.execute("SELECT 1")  # closed
    # and the state lock was given back: another session can start
    (tmp_path / "state" / "warehouse.duckdb").unlink()
    with Session(LineageSettings(state_dir=str(tmp_path / "state"))) as s:
        assert s.conn.execute("SELECT 1").fetchone() == (1,)


def test_a_failing_attach_does_not_echo_the_dsn(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    dsn = f"host=127.0.0.1 port={port} dbname=crm user=app password=s3cr3t-pw connect_timeout=2"
    settings = LineageSettings(state_dir=str(tmp_path), postgres_dsn=dsn, ducklake_catalog=f"postgres:{dsn}")
    with Session(settings, attach_defaults=False) as s:
        for uri in ("datatable://crm", "ducklake://main"):
            with pytest.raises(RunError) as e:
                s.attach(uri, "x")
            text = str(e.value) + repr(e.value.__cause__) + repr(e.value.__context__)
            assert "s3cr3t-pw" not in text and dsn not in text, text
            assert "could not attach" in text and e.value.fix


def test_redact_blanks_configured_secrets_and_passwords() -> None:
    settings = LineageSettings(state_dir=".", s3_secret_access_key="AKIAsecretkey", postgres_dsns={"crm": "host=h user=u"})
    text = "key AKIAsecretkey; dsn host=h user=u; url postgresql://app:pw123@db/x; password = 'a b'"
    out = redact(text, settings)
    assert "AKIAsecretkey" not in out and "host=h user=u" not in out and "pw123" not in out and "'a b'" not in out
