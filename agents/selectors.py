"""Reads for agents."""

from agents.models import Agent
from common.api import NotFound


def agent_get(*, ref) -> Agent:
    """An agent by id or by name (commands take either)."""
    ref = str(ref).strip()
    agent = Agent.objects.filter(pk=int(ref)).first() if ref.isdigit() else Agent.objects.filter(name=ref).first()
    if agent is None:
        raise NotFound(f"Agent {ref} not found.", field="agent")
    return agent
