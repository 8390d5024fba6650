from django.apps import AppConfig


class EmbeddingsConfig(AppConfig):
    name = "embeddings"
    verbose_name = "Embeddings"
