"""A model whose package macro queries the database while compiling (``run_query``) cannot be compiled
at load time: the one batched ``dbt compile`` used to abort on it ("connection never acquired"), leaving
every macro-using model without load-time lineage, silently. Now the others compile without it and the
load (and ``lineage-defs check``) warns, naming the model.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dbt_projects import write_files
from lineage_defs import LineageSettings
from lineage_defs.project import load_project
from lineage_defs.plan.spec import DbtStep

pytestmark = [pytest.mark.dbt]

W = "dbt://warehouse/main/"
FILES = {
    "shop/dbt/dbt_project.yml": 'name: shop_dbt\nversion: "1.0"\nprofile: shop_dbt\n',
    # a package, as `dbt deps` installs it: one macro queries while compiling, one dispatches
    "shop/dbt/dbt_packages/qpkg/dbt_project.yml": 'name: qpkg\nversion: "1.0"\nconfig-version: 2\n',
    "shop/dbt/dbt_packages/qpkg/macros/macros.sql": """
        {% macro max_discount() -%}
            {%- if execute -%}{%- set r = run_query('select 42 as x') -%}{{ r.columns[0].values()[0] }}{%- else -%}0{%- endif -%}
        {%- endmacro %}
        {% macro halve(c) -%}{{ return(adapter.dispatch('halve', 'qpkg')(c)) }}{%- endmacro %}
        {% macro default__halve(c) -%}({{ c }} / 2){%- endmacro %}
    """,
    "shop/dbt/models/sources.yml": """
        version: 2
        sources:
          - name: raw
            schema: raw
            tables:
              - name: orders
    """,
    # the source's columns are unknown at load time: `subtotal` is its column, not the later alias
    "shop/dbt/models/stg_orders.sql": """
        select order_id, subtotal as subtotal_cents, {{ qpkg.halve('subtotal') }} as subtotal
        from {{ source('raw', 'orders') }}
    """,
    "shop/dbt/models/discounted.sql": """
        select order_id, subtotal_cents - {{ qpkg.max_discount() }} as net_cents from {{ ref('stg_orders') }}
    """,
    "shop/dbt/models/discounted_halves.sql": """
        select order_id, {{ qpkg.halve('net_cents') }} as half_net from {{ ref('discounted') }}
    """,
    "shop/dbt/models/totals.sql": """
        select sum({{ qpkg.halve('subtotal') }}) as half_total from {{ ref('stg_orders') }}
    """,
}


def _edges(step: DbtStep) -> set[tuple[str, str, str]]:
    return {(e.source, e.target[len(step.uri) + 1 :] if e.target != step.uri else "", str(e.kind)) for e in step.column_edges}


def test_a_model_querying_while_compiling_is_named_and_the_others_keep_their_lineage(tmp_path: Path) -> None:
    pipelines = write_files(tmp_path / "pipelines", FILES)
    project = load_project(pipelines, LineageSettings(state_dir=str(tmp_path / "state")))
    assert project.errors == ()
    steps = {s.uri: s for s in project.steps if isinstance(s, DbtStep)}
    src = "duckdb://warehouse/raw.orders"  # an external: no step produces it
    assert _edges(steps[W + "stg_orders"]) == {
        (f"{src}.order_id", "order_id", "copy"), (f"{src}.subtotal", "subtotal_cents", "copy"), (f"{src}.subtotal", "subtotal", "mod"),
    }  # fmt: skip
    # a child of the failing model (dbt skipped it with its parent) and a sibling: both compiled
    assert _edges(steps[W + "discounted_halves"]) == {(f"{W}discounted.order_id", "order_id", "copy"), (f"{W}discounted.net_cents", "half_net", "mod")}
    assert _edges(steps[W + "totals"]) == {(f"{W}stg_orders.subtotal", "half_total", "mod")}
    assert steps[W + "discounted"].column_edges == ()  # known after a build only
    named = [w for w in project.warnings if "discounted" in w.message]
    assert len(named) == 1, [w.render() for w in project.warnings]
    assert named[0].path == "shop/dbt/models/discounted.sql" and "dbt model discounted cannot be compiled at load time" in named[0].message
    assert "(connection never acquired)" in named[0].message

    script = Path(sys.executable).with_name("lineage-defs")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "lineage_defs.cli"]
    env = {**{k: v for k, v in os.environ.items() if k != "LINEAGE_PIPELINES_DIR"}, "LINEAGE_STATE_DIR": str(tmp_path / "state2")}
    done = subprocess.run([*cmd, "check", str(pipelines)], capture_output=True, text=True, env=env, timeout=300)
    assert "shop/dbt/models/discounted.sql:1:1: warning: dbt model discounted cannot be compiled at load time (connection never acquired)" in done.stderr, done.stderr
    assert "1 warning" in done.stdout, done.stdout
