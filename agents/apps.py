from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"
    verbose_name = "Agents and API keys"

    def ready(self):
        # a task acts as its sender's agent with the agent's private flag as stored when it runs (tenants.tasks)
        from agents.selectors import agent_private_user_data
        from tenants.tasks import agent_reader_register

        agent_reader_register(agent_private_user_data)
