"""Where a run's steps execute: Dagster's default executor, or Dagster's Celery executor on workers.

``LINEAGE_CELERY_BROKER_URL`` (``celery_broker_url``) turns the Celery
executor on: each step of a run is a Celery task that any worker started with
``dagster-celery worker start`` (or ``celery -A dagster_celery.app worker``)
on the same broker picks up. Values that came from the environment are given
to the executor as ``{"env": VARIABLE}``: a worker resolves the executor's
config again, from its own environment, and the UI shows the variable's name
rather than a password in the URL.
"""

from __future__ import annotations

from typing import Any

from lineage_defs.errors import RunError
from lineage_defs.settings import ENV_VARS, LineageSettings


def _value(settings: LineageSettings, field: str) -> Any:
    var = settings.secret_env.get(field)
    return {"env": var} if var else getattr(settings, field)


def executor_for(settings: LineageSettings) -> Any:
    """The executor the settings ask for (None: Dagster's default)."""
    if not settings.celery_broker_url:
        return None
    try:
        from dagster_celery import celery_executor
    except ImportError as e:
        raise RunError(
            f"{ENV_VARS['celery_broker_url']} is set but dagster-celery is not installed ({e})",
            fix="install the celery extra: pip install 'lineage_defs[celery]', or unset the variable to run steps in the run process",
        ) from None
    # without a backend the results go to the broker (dagster-celery's own default, rpc://, needs AMQP)
    backend = "celery_backend_url" if settings.celery_backend_url else "celery_broker_url"
    config = {"broker": _value(settings, "celery_broker_url"), "backend": _value(settings, backend)}
    return celery_executor.configured(config, name="celery")
