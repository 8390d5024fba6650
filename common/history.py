"""Who made a change, for django-simple-history's audit trail (how long it is kept: ``common/retention.py``)."""

from django.contrib.auth import get_user_model


def history_user(instance=None, request=None, **kwargs):
    """History rows name a human only: API requests authenticate an agent, which is not a user.

    A service that knows the reviewer sets ``instance._history_user``; otherwise the request's user counts
    when it is a signed-in Django user."""
    user = getattr(instance, "_history_user", None)
    if user is None and request is not None:
        user = getattr(request, "user", None)
    return user if isinstance(user, get_user_model()) and user.is_authenticated else None
