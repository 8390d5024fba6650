from django.apps import AppConfig


class AutonomyConfig(AppConfig):
    name = "autonomy"
    verbose_name = "Autonomy"
