"""Celery application. With no CELERY_BROKER_URL, tasks run eagerly in-process.

Services send work with ``common.tasks.task_send`` (inline when the broker is down, see there).
"""

import os
import sys

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
if {"worker", "beat"} & set(sys.argv[1:]):
    # Workers and the beat see every tenant outside a task's own scope (tenants/tasks.py), even when they
    # inherit a web process's environment.
    os.environ["DB_TENANT_DEFAULT"] = "*"


app = Celery("agent_learning", task_cls="tenants.tasks:TenantTask")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
