"""Celery tasks of the feedback app."""

from celery import shared_task

# --- Disambiguation feedback loop (issue 4, dis) ---------------------------------


@shared_task(name="feedback.disambiguation_signals_process", acks_late=True, ignore_result=True, autoretry_for=(ConnectionError,), max_retries=3)
def disambiguation_signals_process_task(request_pk: int) -> dict:
    """Learn from one disambiguation's signals (idempotent: a second run does nothing)."""
    from feedback.services import disambiguation_signals_process

    return disambiguation_signals_process(request_pk=request_pk)


@shared_task(name="feedback.disambiguations_expire", ignore_result=True)
def disambiguations_expire_task() -> int:
    """Mark stale open disambiguation requests ``expired`` (beat: every minute)."""
    from feedback.services import disambiguations_expire

    return disambiguations_expire()
