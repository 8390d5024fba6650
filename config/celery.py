"""Celery application. With no CELERY_BROKER_URL, tasks run eagerly in-process.

Services send work with ``common.tasks.task_send`` (inline when the broker is down, see there).
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")


app = Celery("agent_learning")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
