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


# Readers of an agent's ``private_user_data`` as stored now (registered by the agents app, above this one)
_agent_readers: list = []


def agent_reader_register(reader) -> None:
    """``reader(pk)`` answers the agent's ``private_user_data`` as stored now (None: no such agent). A task acts
    with that, not with the flag its sender knew: one that waited in the queue past the agent's switch to shared,
    and the share of its data, must not write private rows that nothing shares any more."""
    _agent_readers.append(reader)


def _agent_now(agent: SentAgent) -> SentAgent:
    for reader in _agent_readers:
        private = reader(agent.pk)
        if private is not None:
            return SentAgent(agent.pk, bool(private))
    return agent  # no reader (a process without the agents app) or no such agent: as sent


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
            if scope is not None:
                stack.enter_context((tenant_scope if self.one_transaction else tenant_session)(scope))
            if agent is not None:
                stack.enter_context(acting_agent(_agent_now(agent)))  # read in the sender's scope
            return super().__call__(*args, **kwargs)


task_headers_register(_headers)
