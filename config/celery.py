"""Celery application. With no CELERY_BROKER_URL, tasks run eagerly in-process.

``enqueue`` is how the app sends work: when the broker is down, the request
that caused the work must still succeed, so the task either runs inline
(``CELERY_FALLBACK_INLINE``, the default) or is left for the periodic sweep
that picks up unfinished work (unembedded rows, unprocessed signals).
"""

import logging
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

logger = logging.getLogger(__name__)

app = Celery("agent_learning")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def enqueue(task, *args, **kwargs) -> bool:
    """Send ``task`` to the broker; answer False when it ran inline or was deferred instead."""
    from django.conf import settings
    from kombu.exceptions import OperationalError as KombuOperationalError

    try:
        task.apply_async(args=args, kwargs=kwargs, retry=False)
        return True
    except (KombuOperationalError, ConnectionError, OSError) as exc:
        if getattr(settings, "CELERY_FALLBACK_INLINE", True):
            logger.warning("broker unavailable (%s): running %s inline", exc.__class__.__name__, task.name)
            task.apply(args=args, kwargs=kwargs)
        else:
            logger.warning("broker unavailable (%s): %s deferred to the periodic sweep", exc.__class__.__name__, task.name)
        return False
