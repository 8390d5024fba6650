"""Writes for the action catalogue."""

from django.db import connection, transaction

from actions.models import ACTION_NAME_PATTERN, Action, AutonomyLevel
from common.api import ApplicationError, Conflict


def action_name_validate(*, name) -> str:
    if not isinstance(name, str) or not ACTION_NAME_PATTERN.match(name.strip()) or len(name.strip()) > 100:
        raise ApplicationError(
            "Action names are lowercase dotted identifiers such as 'email.send' (at most 100 characters).", field="action"
        )
    return name.strip()


def action_register(*, name: str, description: str = "") -> Action:
    """The catalogue entry for ``name``; a new name is registered at level 1 (propose only)."""
    name = action_name_validate(name=name)
    with transaction.atomic():
        action, _ = Action.objects.get_or_create(
            name=name, defaults={"description": description, "autonomy_level": AutonomyLevel.PROPOSE, "auto_registered": True}
        )
    return action


def action_create(*, name: str, description: str = "", autonomy_level: int = AutonomyLevel.PROPOSE) -> Action:
    """Add an action to the catalogue at a chosen starting level (catalogue loading, admin)."""
    name = action_name_validate(name=name)
    if autonomy_level not in AutonomyLevel.values:
        raise ApplicationError("autonomy_level must be 1, 2 or 3.", field="autonomy_level")
    with transaction.atomic():
        if Action.objects.filter(name=name).exists():
            raise Conflict(f"Action {name} already exists.", field="name")
        return Action.objects.create(name=name, description=description, autonomy_level=autonomy_level)


def actions_claim_for_evaluation(*, actions, now) -> list[int]:
    """Stamp ``last_evaluated_at`` on the actions of this queryset that are still due and answer their ids.

    One UPDATE … RETURNING, so of two cycles evaluating at once each action goes to exactly one."""
    with connection.cursor() as cur:
        sql, params = actions.values("pk").query.sql_with_params()
        cur.execute(f"UPDATE {Action._meta.db_table} SET last_evaluated_at = %s WHERE id IN ({sql}) RETURNING id", [now, *params])
        return sorted(r[0] for r in cur.fetchall())
