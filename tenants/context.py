"""The tenants a request or job may see: a context variable for the app, ``app.tenant_ids`` for PostgreSQL.

``tenant_scope`` opens a transaction, sets ``app.tenant_ids`` for it with ``set_config(..., true)`` (the
``SET LOCAL`` of a function call) and the context variable for the managers of tenant-owned models. Row-level
security policies read the same setting, so a query the app forgets to filter still sees only the scope's rows.

Values of ``app.tenant_ids``: ``*`` all tenants (commands, workers, superusers); ``3`` or ``3,7`` those
tenants; empty: none. Connections of web processes start with none (``DB_TENANT_DEFAULT``); others with all.
"""

from contextlib import contextmanager
from contextvars import ContextVar

import psycopg
from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.backends.signals import connection_created
from django.dispatch import receiver

from common.db import rows_fetch

ALL = "*"
SETTING = "app.tenant_ids"
DEFAULT_SLUG = "default"  # the tenant of a single-tenant deployment and of rows written outside any scope

# None: no scope entered (the process default applies); ALL; or a tuple of tenant ids.
_scope: ContextVar = ContextVar("tenant_scope", default=None)
# The agent whose key made the request: rows it writes record it; a private agent reads only its own.
_agent: ContextVar = ContextVar("tenant_agent", default=None)
# True inside ``tenant_request``: only there may authentication name the tenant.
_in_request: ContextVar = ContextVar("tenant_in_request", default=False)


def _normalised(tenants):
    """``ALL``, or the tenant ids as a sorted tuple without repeats."""
    return ALL if tenants == ALL else tuple(sorted({int(t) for t in tenants}))


def _value(scope) -> str:
    if scope == ALL:
        return ALL
    return ",".join(str(int(t)) for t in scope)


def tenant_filter_ids() -> tuple[int, ...] | None:
    """The tenant ids the app must filter by, or None when every tenant is visible."""
    scope = _scope.get()
    return None if scope is None or scope == ALL else scope


def tenant_current_id() -> int | None:
    """The one tenant in scope, or None (no scope, all tenants, or several)."""
    scope = _scope.get()
    if scope is None or scope == ALL or len(scope) != 1:
        return None
    return scope[0]


def _aborted() -> bool:
    """True when PostgreSQL refuses further statements in this transaction (an error the view answered)."""
    raw = connection.connection
    return raw is not None and (
        raw.closed or raw.info.transaction_status in (psycopg.pq.TransactionStatus.INERROR, psycopg.pq.TransactionStatus.UNKNOWN)
    )


def _restore(previous: str | None) -> None:
    """Put back the setting the scope replaced (None: nothing to put back, the transaction ends here); an
    aborted transaction is rolled back instead (which also undoes the SET LOCAL)."""
    if connection.connection is None or connection.needs_rollback:
        return
    if _aborted():
        transaction.set_rollback(True)
        return
    if previous is not None:
        _setting_set(previous)


def _setting_get() -> str | None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting(%s, true)", [SETTING])
        return cursor.fetchone()[0]


def _setting_set(value: str) -> None:
    with connection.cursor() as cursor:
        rows_fetch(cursor, "SELECT set_config(%s, %s, true)", [SETTING, value], prepared=True)  # with the BEGIN


@contextmanager
def tenant_scope(tenants):
    """Run the block in one transaction that sees only ``tenants`` (ids, or ``ALL``)."""
    scope = _normalised(tenants)
    with _transaction() as previous:
        _setting_set(_value(scope))
        token = _scope.set(scope)
        try:
            yield
        finally:
            _scope.reset(token)
            _restore(previous)


# The scope ``tenant_session`` gave the connection (None outside one): a connection opened inside the block (after
# the old one was closed) takes it too, instead of the process default.
_session: ContextVar = ContextVar("tenant_session", default=None)


@contextmanager
def tenant_session(tenants):
    """``tenant_scope`` for long work (a decision fit over many phrases): the scope is the connection's for the
    block (``set_config(..., false)`` in autocommit), so the work's own short transactions see it and no
    transaction stays open for the block's length (an open one holds back vacuum and keeps what it locked).
    Inside a transaction, or behind a pooler in transaction mode (``DB_TRANSACTION_POOLER``), it is
    ``tenant_scope``. The connection's setting is put back at the end; when that fails the connection is
    closed, so nothing later runs in the block's scope."""
    if connection.in_atomic_block or settings.DB_TRANSACTION_POOLER:
        with tenant_scope(tenants):
            yield
        return
    scope = _normalised(tenants)
    previous = _setting_get()
    _session_set(connection, _value(scope))
    token, session_token = _scope.set(scope), _session.set(_value(scope))
    try:
        yield
    finally:
        _session.reset(session_token)
        _scope.reset(token)
        try:
            _session_set(connection, previous or "")  # unset: none (fail closed)
        except DatabaseError:
            connection.close()


def _session_set(conn, value: str) -> None:
    with conn.cursor() as cursor:
        cursor.execute("SELECT set_config(%s, %s, false)", [SETTING, value])


@receiver(connection_created, dispatch_uid="tenants.session_scope")
def _session_reapply(sender, connection, **kwargs) -> None:
    """A connection opened inside ``tenant_session`` (the previous one closed under it) gets the block's scope."""
    value = _session.get()
    if value is not None:
        _session_set(connection, value)


@contextmanager
def tenant_request():
    """The transaction of one API request: no tenant until ``tenant_enter`` names the caller's."""
    with _transaction() as previous:
        if previous is not None or settings.DB_TENANT_DEFAULT != "none":
            _setting_set("")
        token = _scope.set(())
        agent_token = _agent.set(None)
        request_token = _in_request.set(True)
        try:
            yield
        finally:
            _in_request.reset(request_token)
            _agent.reset(agent_token)
            _scope.reset(token)
            _restore(previous)


@contextmanager
def _transaction():
    """A transaction; yields the setting to restore when it is nested in an outer one (else None: the
    ``SET LOCAL`` ends with the transaction, no query needed)."""
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        yield None if outermost else (_setting_get() or "")


def tenant_enter(tenants, *, agent=None) -> None:
    """Inside ``tenant_request``: from here on the request sees ``tenants`` (ids, or ``ALL``), acting as ``agent``."""
    scope = _normalised(tenants)
    if not _in_request.get():
        return  # a view that reads no tenant's rows (the schema): nothing to scope, nothing left behind
    _setting_set(_value(scope))
    _scope.set(scope)
    _agent.set(agent)


@contextmanager
def acting_agent(agent):
    """Run the block as ``agent`` (jobs and tests that act for an agent outside a request)."""
    token = _agent.set(agent)
    try:
        yield
    finally:
        _agent.reset(token)


def acting_agent_get():
    """The agent whose key made the current request, or None (a reviewer, a command, a worker)."""
    return _agent.get()


def acting_agent_id() -> int | None:
    agent = _agent.get()
    return agent.pk if agent is not None else None


def private_agent_id() -> int | None:
    """The acting agent's id when its users' data is private to it (``Agent.private_user_data``), else None."""
    agent = _agent.get()
    return agent.pk if agent is not None and agent.private_user_data else None


def tenant_scope_current():
    """The scope entered (``ALL`` or a tuple of tenant ids), None outside any: to enter it again later, as a streamed
    answer's rows are read after the request's scope ended."""
    return _scope.get()


def tenant_scope_value() -> str | None:
    """The scope as text for a task header: ``*``, ``3`` or ``3,7``; None outside any scope."""
    scope = _scope.get()
    return None if scope is None else _value(scope)
