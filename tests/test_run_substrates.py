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


# A step of bound values (the partition's, a data test's) in a process that has not imported pandas: run
# as a run worker runs it, then the thread rule of `without_pandas` (other threads import as usual).
_WITHOUT_PANDAS = """
import json, sys, threading
from pathlib import Path
from lineage_defs.project import load_project
from lineage_defs.run.context import PartitionWindow
from lineage_defs.run.ranges import run_windows
from lineage_defs.run.substrates import Session, execute, without_pandas
from lineage_defs.settings import LineageSettings
import datetime as dt

root, state = Path(sys.argv[1]), sys.argv[2]
settings = LineageSettings(pipelines_dir=str(root), state_dir=state)
step = load_project(root, settings).steps[0]
days = [PartitionWindow(d, dt.datetime.fromisoformat(d), dt.datetime.fromisoformat(d) + dt.timedelta(days=1)) for d in ("2025-01-01", "2025-01-02")]
results = list(run_windows(settings, step, days))
out = {"errors": [str(r.error) for r in results if r.error], "pandas_after_the_step": "pandas" in sys.modules}
if out["errors"]:
    sys.exit(json.dumps(out))
with Session(settings) as s:
    out["rows"] = s.conn.execute("SELECT _partition, n FROM lake.main.daily ORDER BY 1").fetchall()
    with without_pandas():
        try:
            import pandas
            out["here"] = "imported"
        except ImportError as e:
            out["here"] = str(e)
        seen = []
        t = threading.Thread(target=lambda: seen.append(__import__("pandas").__name__))
        t.start(); t.join()
        out["other_thread"] = seen
    import pandas as pd
    out["after"] = execute(s.conn, "SELECT ? IS NULL, ? || '!'", [pd.NA, "x"]).fetchone()
print(json.dumps(out, default=str))
"""


def test_a_sql_steps_bound_values_import_no_pandas_and_other_threads_still_can(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    step = tmp_path / "p" / "g" / "daily.sql"
    step.parent.mkdir(parents=True)
    step.write_text(
        "-- pipeline\n-- partitioned daily start=2025-01-01\n-- materialize ducklake://main/daily\n-- data_test row_count min=1\n"
        "SELECT $partition AS day, 7 AS n WHERE $partition_start::TIMESTAMP < $partition_end::TIMESTAMP\n"
    )
    done = subprocess.run([sys.executable, "-c", _WITHOUT_PANDAS, str(tmp_path / "p"), str(tmp_path / "state")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["errors"] == [] and out["rows"] == [["2025-01-01", 7], ["2025-01-02", 7]], out
    assert out["pandas_after_the_step"] is False, "DuckDB imported pandas for the step's bound values"
    assert "not while lineage_defs binds" in out["here"]  # this thread, inside the block
    assert out["other_thread"] == ["pandas"]  # another thread meanwhile: as usual
    assert out["after"] == [True, "x!"]  # pandas imported: its values bind as DuckDB documents
