"""Reads for the action catalogue."""

from actions.models import ACTION_NAME_PATTERN, Action
from common.api import ApplicationError, NotFound


def action_get(*, name: str) -> Action:
    if not isinstance(name, str) or not ACTION_NAME_PATTERN.match(name.strip()):
        raise ApplicationError("Action names are lowercase dotted identifiers such as 'email.send'.", field="action")
    action = Action.objects.filter(name=name.strip()).first()
    if action is None:
        raise NotFound(f"Action {name} is not in the catalogue.", field="action")
    return action


def action_list() -> list[Action]:
    """The action catalogue, by name."""
    return list(Action.objects.order_by("name"))


def action_by_id(pk: int) -> Action | None:
    return Action.objects.filter(pk=pk).first()
