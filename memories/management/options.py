"""Checks shared by the memories commands: each refuses bad input with a CommandError naming the argument."""

import re
from contextlib import nullcontext

from django.core.management.base import CommandError

from common.text import terminal_safe
from common.validators import USER_ID_RE
from memories.models import Memory, MemoryRetrieval
from tenants.context import tenant_session
from tenants.selectors import tenant_get

SEARCH_MAX_LIMIT = 1000
EMBED_MAX_BATCH = 10_000


def user_checked(user_id: str | None) -> str | None:
    """``--user`` as given, or CommandError when it is not a user id."""
    if user_id is not None and not re.fullmatch(USER_ID_RE, user_id):
        raise CommandError("Malformed --user id.")
    return user_id


def bounded(value: int, *, option: str, high: int) -> int:
    """``value`` when 1 <= value <= ``high``, else CommandError naming ``option``."""
    if not 1 <= value <= high:
        raise CommandError(f"{option} must be between 1 and {high} (got {value}).")
    return value


def tenant_scoped(tenant: str | None, *, user_id: str | None = None, must_choose: bool = False):
    """The scope of ``--tenant`` (that tenant only), or every tenant's without it. A user id is one tenant's user:
    with ``must_choose`` (work that deletes), ``--user`` without ``--tenant`` is refused when that user id has
    memories or retrieval logs in several tenants, naming them, never run for each of them."""
    if tenant is not None:
        workspace = tenant_get(slug=tenant)
        if workspace is None:
            raise CommandError(f"No tenant {terminal_safe(tenant)!r}.")
        return tenant_session([workspace.pk])  # the work's own transactions (batches commit one by one)
    if must_choose and user_id is not None:
        slugs = set()
        for model in (Memory, MemoryRetrieval):  # the purge deletes both
            rows = model.objects.filter(user_id=user_id).order_by().values_list("tenant__slug", flat=True).distinct()
            slugs.update(rows)
        if len(slugs) > 1:
            raise CommandError(
                f"User {user_id!r} has memories or retrieval logs in several tenants ({', '.join(sorted(slugs))}); "
                "a user id is one tenant's user: name the tenant (--tenant SLUG)."
            )
    return nullcontext()
