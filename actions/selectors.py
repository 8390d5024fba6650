"""Reads for the action catalogue."""

from actions.models import ACTION_NAME_PATTERN, Action
from common.api import ApplicationError
from common.lookups import tenant_one


def action_get(*, name: str, tenant: str | None = None) -> Action:
    """The action with this name among the tenants in scope, in the tenant with slug ``tenant`` when given. Names are
    unique per tenant only, and a reviewer or a command sees several tenants: a name several of them use is refused
    without the tenant (409 ``ambiguous``), never one picked at random."""
    if not isinstance(name, str) or not ACTION_NAME_PATTERN.match(name.strip()):
        raise ApplicationError("Action names are lowercase dotted identifiers such as 'email.send'.", field="action")
    name = name.strip()
    return tenant_one(
        Action.objects.filter(name=name),
        tenant=tenant,
        label=f"Action {name}",
        field="action",
        missing=f"Action {name} is not in the catalogue",
        hint="name its tenant (the API's ?tenant=SLUG or body field tenant, a command's --tenant SLUG)",
    )


def action_count() -> int:
    return Action.objects.count()


def action_list(*, limit: int | None = None, offset: int = 0) -> list[Action]:
    """The action catalogue, by name (``limit`` of them after ``offset``; all without a limit)."""
    qs = Action.objects.order_by("name", "id")
    return list(qs[offset : offset + limit] if limit is not None else qs[offset:])


def action_by_id(pk: int) -> Action | None:
    return Action.objects.filter(pk=pk).first()
