"""Reads for agents."""

from agents.models import Agent
from common.api import Conflict, NotFound


def agent_get(*, ref) -> Agent:
    """An agent by id or by name (commands take either)."""
    ref = str(ref).strip()
    agent = Agent.objects.filter(pk=int(ref)).first() if ref.isdigit() else Agent.objects.filter(name=ref).first()
    if agent is None:
        raise NotFound(f"Agent {ref} not found.", field="agent")
    return agent


def agent_shared_required(*, agent: Agent) -> None:
    """Refuse (409) work that hands an agent's private user data to the shared agents while it is still private."""
    if agent.private_user_data:
        raise Conflict(
            f"Agent {agent.name!r} still keeps its user data private; switch private_user_data off first (admin, Agents).",
            field="agent",
            code="still_private",
        )


def agents_private(*, ids) -> set[int]:
    """Of these agent ids, those of agents with private user data."""
    return set(Agent.objects.filter(pk__in=list(ids), private_user_data=True).values_list("pk", flat=True))
