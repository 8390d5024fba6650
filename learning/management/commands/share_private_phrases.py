"""Give an agent's private learned phrases and phrase evidence to the tenant's shared agents."""

from agents.management.agent_command import AgentCommand
from learning.services.owners import private_phrases_share


class Command(AgentCommand):
    help = (
        "After an agent's private_user_data was switched off: its users' learned phrases and phrase evidence become "
        "shared. A text its user already has the same shared phrase for is added into it; one the shared agents "
        "answer with another verb stays the agent's and is listed. "
        "memories: share_private_memories."
    )

    def run(self, *, agent, dry_run: bool) -> None:
        result = private_phrases_share(agent=agent, dry_run=dry_run)
        verb = "would be" if result["dry_run"] else "are"
        self.stdout.write(
            f"Agent {result['agent']}: {result['phrases_shared']} learned phrase(s) {verb} shared, "
            f"{result['phrases_merged']} added into the same shared phrase, "
            f"{result['phrases_kept']} kept (a shared phrase holds the text for another verb); "
            f"{result['evidence_shared']} evidence row(s) {verb} shared, {result['evidence_merged']} added into shared rows; "
            f"{result['candidates_shared']} candidate(s) {verb} shared, {result['candidates_merged']} added into the "
            "shared candidate of the same text and verb."
        )
        for c in result["conflicts"]:
            self.stdout.write(f"  kept: user {c['user_id']}: {c['phrase']!r} → {c['verb']} (shared: {c['shared_verb']})")
