"""Celery application. With no CELERY_BROKER_URL, tasks run eagerly in-process.

Services send work with ``common.tasks.task_send`` (inline when the broker is down, see there).
"""

import os
import sys

from celery import Celery
from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
if {"worker", "beat"} & set(sys.argv[1:]):
    # Workers and the beat see every tenant outside a task's own scope (tenants/tasks.py), even when they
    # inherit a web process's environment.
    os.environ["DB_TENANT_DEFAULT"] = "*"


app = Celery("agent_learning", task_cls="tenants.tasks:TenantTask")
app.config_from_object("django.conf:settings", namespace="CELERY")


def _result_store_timeouts() -> dict:
    """Bounds on reaching the Redis result store, unless the settings set their own: sending a task that keeps
    its result first subscribes to it there, and Celery's default (20 retries a second apart, no connect
    timeout) held a send ~20 s when Redis was down before ``task_send`` could fall back. Now a refused connection
    gives up within half a second; a store that does not answer at all costs a second per attempt, after which
    ``task_send`` does not ask again for ``CELERY_BROKER_DOWN_SKIP_S``."""
    defaults = {
        "redis_socket_connect_timeout": 1,
        "redis_socket_timeout": settings.CELERY_BROKER_TIMEOUT_S,  # a store that accepts and never answers
        "result_backend_transport_options": {
            "retry_policy": {"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}
        },
    }
    return {k: v for k, v in defaults.items() if not hasattr(settings, "CELERY_" + k.upper())}


app.add_defaults(_result_store_timeouts)
app.autodiscover_tasks()
