"""Tasks run in the tenant scope of whoever sent them: a header carries it, a worker enters it."""

from contextlib import ExitStack

from celery.signals import task_postrun, task_prerun

from common.tasks import task_headers_register
from tenants.context import ALL, tenant_scope, tenant_scope_value

HEADER = "alg_tenants"
_open: dict[str, ExitStack] = {}


def _headers() -> dict:
    value = tenant_scope_value()
    return {} if value is None else {HEADER: value}


def _sent_scope(request):
    value = getattr(request, HEADER, None)
    if value is None:
        value = (getattr(request, "headers", None) or {}).get(HEADER)
    if value is None:
        return None
    if value == ALL:
        return ALL
    return tuple(int(t) for t in str(value).split(",") if t.strip().isdigit())


@task_prerun.connect
def _scope_enter(task_id=None, task=None, **kwargs):
    scope = _sent_scope(task.request) if task is not None else None
    if scope is None:
        return  # sent by a command or the beat: the worker's own default (every tenant)
    stack = ExitStack()
    stack.enter_context(tenant_scope(scope))
    _open[task_id] = stack


@task_postrun.connect
def _scope_exit(task_id=None, **kwargs):
    stack = _open.pop(task_id, None)
    if stack is not None:
        stack.close()


task_headers_register(_headers)
