"""Tasks run in the tenant scope of whoever sent them: a header carries it, the task enters it.

The scope (one transaction with ``SET LOCAL app.tenant_ids``) is entered around the task's own call
(``TenantTask.__call__``, the base of every task of ``config.celery.app``), not in a ``task_prerun`` handler:
Celery's Django fixup closes the worker's database connection at ``task_prerun`` when it is not in autocommit,
which would close the scope's open transaction under the task ("the connection is closed").
"""

from celery import Task

from common.tasks import task_headers_register
from tenants.context import ALL, tenant_scope, tenant_scope_value, tenant_session

HEADER = "alg_tenants"


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


class TenantTask(Task):
    """Runs in the scope its sender's header names; without one (a command, the beat), in the worker's default.
    The scope is one transaction (``tenant_scope``), or for a task declared with ``one_transaction=False`` (long
    work that commits as it goes, such as a decision fit) the connection's (``tenant_session``)."""

    one_transaction = True

    def __call__(self, *args, **kwargs):
        scope = _sent_scope(self.request)
        if scope is None:
            return super().__call__(*args, **kwargs)
        with (tenant_scope if self.one_transaction else tenant_session)(scope):
            return super().__call__(*args, **kwargs)


task_headers_register(_headers)
