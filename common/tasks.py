"""Sending Celery tasks, by name, so a service never imports the tasks module that calls it back.

When the broker is down, the request that caused the work must still succeed: the task runs inline
(``CELERY_FALLBACK_INLINE``, the default) or is left for the periodic sweep that picks up unfinished work
(unembedded rows, unprocessed signals). A send the configuration makes impossible (an unknown transport or result
store, a bad port: the settings refuse most of them at the start) is treated the same way, with an error logged.
A send that waited on a broker that turned out to be down makes this process skip the broker for
``CELERY_BROKER_DOWN_SKIP_S`` seconds, so requests meanwhile do not each pay the wait.

With no broker configured (``CELERY_TASK_ALWAYS_EAGER``) a task runs here, as Celery's eager ``apply_async`` would
run it, but without taking a producer from the broker connection pool that does not exist.
"""

import logging
import threading
import time

from celery import current_app, shared_task
from celery.exceptions import ImproperlyConfigured as CeleryImproperlyConfigured
from celery.result import denied_join_result
from celery.utils import uuid
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from kombu import serialization
from kombu.exceptions import OperationalError as KombuOperationalError

from common.retention import history_purge

logger = logging.getLogger(__name__)


def task_get(name: str):
    """The registered task ``name``. Tasks register when their module is imported; a web process may not have
    imported them yet, so a miss asks Celery's loader to import every installed app's tasks (as a worker does)."""
    if name not in current_app.tasks:
        current_app.loader.import_default_modules()
    return current_app.tasks[name]


_header_providers: list = []


def task_headers_register(provider) -> None:
    """Add headers to every task sent from here on: ``provider()`` answers a dict (the caller's tenant, say)."""
    _header_providers.append(provider)


def task_headers() -> dict:
    headers: dict = {}
    for provider in _header_providers:
        headers.update(provider())
    return headers


def _result_store_unreachable(exc: RuntimeError, task) -> bool:
    """Whether ``exc`` is the result store giving up reconnecting (Celery raises RuntimeError from the connection error)."""
    errors = (KombuOperationalError, ConnectionError, OSError, *getattr(task.backend, "connection_errors", ()))
    return isinstance(exc.__cause__, errors)


def _run_eager(task, args, kwargs, headers) -> None:
    """Run ``task`` here as ``apply_async`` does with ``task_always_eager`` (arguments checked, and passed through the
    task serializer as a worker would receive them; the task's exception propagates with
    ``task_eager_propagates``), without acquiring a producer: with no broker configured, kombu would log "No hostname
    was supplied" for each send."""
    check_arguments = getattr(task, "__header__", None) if task.typing else None
    if check_arguments is not None:
        check_arguments(*(args or ()), **(kwargs or {}))
    serializer = task.serializer or task.app.conf.task_serializer
    content_type, encoding, data = serialization.dumps((args or (), kwargs or {}), serializer)
    args, kwargs = serialization.loads(data, content_type, encoding, accept=[content_type])
    with denied_join_result():
        task.apply(args, kwargs, task_id=uuid(), headers=headers)


# A send that failed after waiting at least this long (timeouts, retries) marks the broker down for this process.
SLOW_FAILURE_S = 0.2
# (broker URL, result store) -> (monotonic time until which sends are not tried, why the last one failed)
_down_until: dict[tuple, tuple[float, str]] = {}
_down_lock = threading.Lock()


def _broker_key(task) -> tuple:
    conf = task.app.conf
    return (str(conf.broker_url), str(conf.result_backend))


def _broker_down(task) -> str | None:
    """Why this process does not ask the broker (or result store) of ``task`` now; None: ask it."""
    until, failure = _down_until.get(_broker_key(task), (0.0, ""))
    left = until - time.monotonic()
    return f"{failure}, not asked again for {left:.1f} s" if left > 0 else None


def _broker_down_remember(task, failure: str, waited: float) -> None:
    """After a failed send that waited ``waited`` seconds: skip this broker for ``CELERY_BROKER_DOWN_SKIP_S``. A
    refusal that cost nothing is not remembered: asking again is as cheap, and sees the broker back at once."""
    skip = getattr(settings, "CELERY_BROKER_DOWN_SKIP_S", 5.0)
    if skip > 0 and waited >= SLOW_FAILURE_S:
        with _down_lock:
            _down_until[_broker_key(task)] = (time.monotonic() + skip, failure)


def broker_down_forget() -> None:
    """Forget every "broker down" memo of this process (the next send asks the broker again)."""
    with _down_lock:
        _down_until.clear()


CONFIGURATION_ERRORS = (KeyError, ValueError, ImproperlyConfigured, CeleryImproperlyConfigured)


def _queue(task, args, kwargs, headers) -> str | None:
    """Send to the broker; None when sent (or, with no broker configured, run here), else why not (nothing was
    sent)."""
    if task.app.conf.task_always_eager:
        _run_eager(task, args, kwargs, headers)
        return None
    down = _broker_down(task)
    if down:
        return down
    started = time.monotonic()
    try:
        task.apply_async(args=args, kwargs=kwargs, retry=False, headers=headers)
        return None
    except (KombuOperationalError, ConnectionError, OSError) as exc:
        failure = f"broker unavailable ({exc.__class__.__name__})"
    except RuntimeError as exc:
        if not _result_store_unreachable(exc, task):
            raise
        failure = f"result store unavailable ({exc.__cause__.__class__.__name__})"
    except CONFIGURATION_ERRORS as exc:  # an unknown transport or result store, a bad port: never silently lost
        logger.error("cannot send %s, the broker configuration is wrong (%s: %s)", task.name, exc.__class__.__name__, exc)
        failure = f"broker misconfigured ({exc.__class__.__name__})"
    _broker_down_remember(task, failure, time.monotonic() - started)
    return failure


def task_queue(task, *args, headers: dict | None = None, **kwargs) -> bool:
    """Send ``task`` (a task or its registered name) to the broker; answer False, with nothing sent, when the broker
    or the result store cannot be reached (their retries are bounded in ``config/celery.py``). With no broker
    configured (``CELERY_TASK_ALWAYS_EAGER``) the task runs here and the answer is True."""
    task = task_get(task) if isinstance(task, str) else task
    failure = _queue(task, args, kwargs, task_headers() if headers is None else headers)
    if failure:
        logger.warning("%s: %s not queued", failure, task.name)
    return failure is None


def task_send(task, *args, headers: dict | None = None, fallback_inline: bool = True, **kwargs) -> bool:
    """Queue ``task`` (a task or its registered name); answer False when it ran inline or was deferred instead.

    ``headers`` (default: ``task_headers()`` now) travel with the task, inline runs included. With the broker
    or the result store down the task runs inline (CELERY_FALLBACK_INLINE), unless ``fallback_inline`` is
    False: work too long for a request, which a periodic sweep catches up on."""
    task = task_get(task) if isinstance(task, str) else task
    headers = task_headers() if headers is None else headers
    failure = _queue(task, args, kwargs, headers)
    if failure is None:
        return True
    if fallback_inline and getattr(settings, "CELERY_FALLBACK_INLINE", True):
        logger.warning("%s: running %s inline", failure, task.name)
        task.apply(args=args, kwargs=kwargs, headers=headers)
    else:
        logger.warning("%s: %s deferred to the periodic sweep", failure, task.name)
    return False


def task_send_each(task, calls: list[tuple], *, fallback_inline: bool = True) -> int:
    """``task_send(task, *args)`` for each ``args`` of ``calls``, in order; answers how many were queued. Once the
    broker or the result store refuses one, the rest are not offered to it (each refusal costs its bounded
    retries, about a second): they run inline, or wait for the periodic sweep, as ``task_send`` would decide."""
    task = task_get(task) if isinstance(task, str) else task
    headers = task_headers()
    queued, failure = 0, None
    for args in calls:
        if failure is None:
            failure = _queue(task, args, {}, headers)
            if failure is None:
                queued += 1
                continue
            inline = fallback_inline and getattr(settings, "CELERY_FALLBACK_INLINE", True)
            logger.warning(
                "%s: %s of %s %s call(s) %s",
                failure,
                len(calls) - queued,
                len(calls),
                task.name,
                "run inline" if inline else "deferred to the periodic sweep",
            )
        if fallback_inline and getattr(settings, "CELERY_FALLBACK_INLINE", True):
            task.apply(args=args, headers=headers)
    return queued


def task_send_on_commit(task, *args, fallback_inline: bool = True, **kwargs) -> None:
    """Send ``task`` once the current transaction commits, with the headers of now (the caller's tenant)."""
    headers = task_headers()
    transaction.on_commit(lambda: task_send(task, *args, headers=headers, fallback_inline=fallback_inline, **kwargs), robust=True)


@shared_task(name="common.history_purge", ignore_result=True, one_transaction=False)
def history_purge_task() -> dict:
    """Delete audit-trail rows older than HISTORY_RETENTION_DAYS but each live object's latest (beat: daily)."""

    return history_purge()
