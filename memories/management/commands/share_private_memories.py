"""Give an agent's private memories to the tenant's shared agents."""

from agents.management.agent_command import AgentCommand
from memories.services.owners import private_memories_share


class Command(AgentCommand):
    help = (
        "After an agent's private_user_data was switched off: its users' memories, quarantined lessons and retrieval "
        "log become shared. A memory its user already has a live shared copy of stays the agent's and is listed. "
        "Learned phrases: share_private_phrases."
    )

    def run(self, *, agent, dry_run: bool) -> None:
        result = private_memories_share(agent=agent, dry_run=dry_run)
        verb = "would be" if result["dry_run"] else "are"
        self.stdout.write(
            f"Agent {result['agent']}: {result['memories_shared']} of its memories {verb} shared, {result['memories_kept']} kept (a live shared copy holds the text); "
            f"{result['quarantined_shared']} quarantined lesson(s) and {result['retrievals_shared']} retrieval(s) {verb} shared."
        )
        for c in result["conflicts"]:
            self.stdout.write(f"  kept: #{c['id']} of user {c['user_id']}: {c['content']!r}")
