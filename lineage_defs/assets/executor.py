"""Where a run's steps execute: in the run worker, a process per step, or Celery workers.

Without Celery, every job uses ``default_executor``: Dagster's default
executor (``multi_or_in_process_executor``, the same config) except that a run
executing exactly one step runs it in the run worker itself (Dagster's
``InProcessExecutor``) instead of starting a second process that imports
Dagster and loads the code location again just for that step — seconds of
every backfill run, cascade run and single-asset materialization. A run of two
or more steps gets Dagster's ``MultiprocessExecutor`` built from the same
config; ``execution: config: multiprocess:`` written in a run's own config keeps
a process per step even for one step, and ``in_process:`` runs every step in
the run worker, both as in Dagster.

``LINEAGE_CELERY_BROKER_URL`` (``celery_broker_url``) turns the Celery
executor on instead: each step of a run is a Celery task that any worker
started with ``dagster-celery worker start`` (or ``celery -A dagster_celery.app
worker``) on the same broker picks up. Values that came from the environment
are given to the executor as ``{"env": VARIABLE}``: a worker resolves the
executor's config again, from its own environment, and the UI shows the
variable's name rather than a password in the URL.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from dagster import (
    DagsterEvent,
    Definitions,
    Executor,
    ExecutorDefinition,
    InitExecutorContext,
    in_process_executor,
    multi_or_in_process_executor,
    multiprocess_executor,
)

from lineage_defs.errors import RunError
from lineage_defs.settings import ENV_VARS, LineageSettings

# Typed Any below: the plan context, the plan and the retry mode are Dagster's private types (the
# package imports only Dagster's public API, tests/test_layout.py).


def asks_for_processes(run_config: Mapping[str, Any]) -> bool:
    """Whether the run's own config (not the default) selects ``execution: config: multiprocess:``."""
    execution = run_config.get("execution")
    config = execution.get("config") if isinstance(execution, Mapping) else None
    return isinstance(config, Mapping) and "multiprocess" in config


class OneStepInProcessExecutor(Executor):
    """Dagster's multiprocess executor, except that a plan of one step executes in this process."""

    def __init__(self, multiprocess: Executor, in_process: Executor) -> None:
        self.multiprocess = multiprocess
        self.in_process = in_process

    @property
    def retries(self) -> Any:
        return self.multiprocess.retries

    @property
    def step_dependency_config(self) -> Any:
        return self.multiprocess.step_dependency_config

    def execute(self, plan_context: Any, execution_plan: Any) -> Iterator[DagsterEvent]:
        one = len(execution_plan.step_keys_to_execute) == 1 and not asks_for_processes(plan_context.run_config)
        yield from (self.in_process if one else self.multiprocess).execute(plan_context, execution_plan)


def _build(definition: ExecutorDefinition, init: InitExecutorContext, config: Mapping[str, object]) -> Executor:
    """The executor Dagster's ``definition`` makes from ``config``."""
    creation = definition.executor_creation_fn
    assert creation is not None  # Dagster's own executors all have one
    return creation(InitExecutorContext(job=init.job, executor_def=definition, executor_config=config, instance=init.instance))


def _create(init: InitExecutorContext) -> Executor:
    config = init.executor_config
    multi = config.get("multiprocess")
    if not isinstance(multi, Mapping):  # `in_process`: Dagster's InProcessExecutor, as Dagster builds it
        return _build(multi_or_in_process_executor, init, config)
    # the in-process executor of a one-step plan keeps the run's retries and step dependency config
    shared = {"retries": multi["retries"], "step_dependency_config": multi.get("step_dependency_config")}
    return OneStepInProcessExecutor(_build(multiprocess_executor, init, multi), _build(in_process_executor, init, shared))


default_executor = ExecutorDefinition(
    name="lineage_multi_or_in_process",
    config_schema=multi_or_in_process_executor.config_schema.as_field(),
    # the same requirements as Dagster's: `multiprocess` needs a reconstructable job and a persistent instance
    requirements=multi_or_in_process_executor.get_requirements,
    executor_creation_fn=_create,
    description="Dagster's default executor (multi_or_in_process_executor), except that a run of one step executes it in the run worker.",
)


def _value(settings: LineageSettings, field: str) -> Any:
    var = settings.secret_env.get(field)
    return {"env": var} if var else getattr(settings, field)


def executor_for(settings: LineageSettings, theirs: Sequence[Definitions] = ()) -> Any:
    """The executor the settings ask for: Celery, else ``default_executor`` (None: the one of ``theirs``, your own Definitions)."""
    if not settings.celery_broker_url:
        return None if any(d.executor is not None for d in theirs) else default_executor
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
