"""Whose a user's learned phrase is. The tenant's agents share their users' phrases, except an agent with private
user data (``Agent.private_user_data``): its users' phrases are its own (``LearnedPhrase.private_agent``), read and
written by no other agent. Global phrases (no user) are everyone's."""

from tenants.context import private_agent_id


def phrase_owner(user_id: str | None) -> int | None:
    """The owner of the acting agent's phrase in this scope: the agent itself when its user data is private and the
    phrase is a user's, else none (shared)."""
    return private_agent_id() if user_id else None
