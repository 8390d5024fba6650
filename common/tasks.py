"""Sending Celery tasks by name, so a service never imports the tasks module that calls it back."""

from celery import current_app


def task_send(name: str, *args) -> None:
    """Queue the registered task ``name`` (runs at once when tasks are eager). Raises what the broker raises.

    Tasks register when their module is imported; a web process may not have imported them yet, so the first
    send asks Celery's loader to import every installed app's tasks (what a worker does at start)."""
    if name not in current_app.tasks:
        current_app.loader.import_default_modules()
    current_app.tasks[name].delay(*args)
