"""Tasks run in the tenant scope, and as the agent, of whoever sent them: headers carry both, the task enters them.

The agent matters to the rows a task writes for a request (a learned phrase, a candidate record the agent that
proposed it: an agent never decides its own proposal, and a private agent's users' phrases are its own).

The scope (one transaction with ``SET LOCAL app.tenant_ids``) is entered around the task's own call
(``TenantTask.__call__``, the base of every task of ``config.celery.app``), not in a ``task_prerun`` handler:
Celery's Django fixup closes the worker's database connection at ``task_prerun`` when it is not in autocommit,
which would close the scope's open transaction under the task ("the connection is closed").
"""

from contextlib import ExitStack
from typing import NamedTuple

from celery import Task

from common.tasks import task_headers_register
from tenants.context import ALL, acting_agent, acting_agent_get, tenant_scope, tenant_scope_value, tenant_session

HEADER = "alg_tenants"
AGENT_HEADER = "alg_agent"


class SentAgent(NamedTuple):
    """The agent a task acts for, as its sender knew it (what the services read of an acting agent)."""

    pk: int
    private_user_data: bool


def _headers() -> dict:
    headers = {}
    value = tenant_scope_value()
    if value is not None:
        headers[HEADER] = value
    agent = acting_agent_get()
    if agent is not None:
        headers[AGENT_HEADER] = f"{agent.pk}:{int(bool(agent.private_user_data))}"
    return headers


def _header(request, name: str):
    value = getattr(request, name, None)
    if value is None:
        value = (getattr(request, "headers", None) or {}).get(name)
    return value


def _sent_agent(request) -> SentAgent | None:
    pk, _, private = str(_header(request, AGENT_HEADER) or "").partition(":")
    if not (pk.isascii() and pk.isdecimal()):
        return None
    return SentAgent(int(pk), private == "1")


def _sent_scope(request):
    value = _header(request, HEADER)
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
        scope, agent = _sent_scope(self.request), _sent_agent(self.request)
        with ExitStack() as stack:
            if agent is not None:
                stack.enter_context(acting_agent(agent))
            if scope is not None:
                stack.enter_context((tenant_scope if self.one_transaction else tenant_session)(scope))
            return super().__call__(*args, **kwargs)


task_headers_register(_headers)
