"""Sending Celery tasks, by name, so a service never imports the tasks module that calls it back.

When the broker is down, the request that caused the work must still succeed: the task runs inline
(``CELERY_FALLBACK_INLINE``, the default) or is left for the periodic sweep that picks up unfinished work
(unembedded rows, unprocessed signals).
"""

import logging

from celery import current_app
from django.conf import settings
from django.db import transaction
from kombu.exceptions import OperationalError as KombuOperationalError

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


def task_send(task, *args, headers: dict | None = None, fallback_inline: bool = True, **kwargs) -> bool:
    """Queue ``task`` (a task or its registered name); answer False when it ran inline or was deferred instead.

    ``headers`` (default: ``task_headers()`` now) travel with the task, inline runs included. With the broker
    down the task runs inline (CELERY_FALLBACK_INLINE), unless ``fallback_inline`` is False: work too long for
    a request, which a periodic sweep catches up on."""
    task = task_get(task) if isinstance(task, str) else task
    headers = task_headers() if headers is None else headers
    try:
        task.apply_async(args=args, kwargs=kwargs, retry=False, headers=headers)
        return True
    except (KombuOperationalError, ConnectionError, OSError) as exc:
        if fallback_inline and getattr(settings, "CELERY_FALLBACK_INLINE", True):
            logger.warning("broker unavailable (%s): running %s inline", exc.__class__.__name__, task.name)
            task.apply(args=args, kwargs=kwargs, headers=headers)
        else:
            logger.warning("broker unavailable (%s): %s deferred to the periodic sweep", exc.__class__.__name__, task.name)
        return False


def task_send_on_commit(task, *args, fallback_inline: bool = True, **kwargs) -> None:
    """Send ``task`` once the current transaction commits, with the headers of now (the caller's tenant)."""
    headers = task_headers()
    transaction.on_commit(lambda: task_send(task, *args, headers=headers, fallback_inline=fallback_inline, **kwargs), robust=True)
