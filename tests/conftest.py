"""Shared fixtures. Tests run on PostgreSQL + pgvector (embedded unless DATABASE_URL is set) with the real local model."""

import numpy as np
import pytest
from rest_framework.test import APIClient

from agents.models import Scope
from agents.services import agent_key_create
from embeddings.embedders import EmbeddingError, get_embedder, set_embedder
from learning.catalogue import VerbEntry
from learning.services.catalogue import verb_catalogue_load

CATALOGUE = [
    VerbEntry("cbu.list", "cbu", "List CBUs", "List client business units.", ["list all cbus", "show my client business units"]),
    VerbEntry("cbu.create", "cbu", "Create a CBU", "Open a new client business unit.", ["create a cbu", "open a new client business unit"]),
    VerbEntry("cbu.delete", "cbu", "Delete a CBU", "Remove a client business unit.", ["delete a cbu", "remove a client business unit"]),
    VerbEntry("document.search", "document", "Search documents", "Find documents.", ["search documents", "find a document"]),
    VerbEntry("email.send", "email", "Send an email", "Send an email.", ["send an email", "email my manager"]),
]


@pytest.fixture(autouse=True)
def _fresh_verb_details():
    """Each test starts without the per-process verb details cache (tests roll the catalogue back)."""
    from learning.selectors import verb_details_forget

    verb_details_forget()


@pytest.fixture
def catalogue(db):
    verb_catalogue_load(entries=CATALOGUE)
    from learning.models import Verb

    return {v.name: v for v in Verb.objects.all()}


def make_client(scopes, name="agent-a"):
    key, raw = agent_key_create(agent_name=name, scopes=scopes)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    client.agent = key.agent
    client.key = key
    return client


@pytest.fixture
def api(db):
    """An agent key with the default scopes (resolve, feedback)."""
    return make_client([Scope.RESOLVE, Scope.FEEDBACK])


@pytest.fixture
def gov_api(db):
    """A key with every scope, governance included."""
    return make_client([s.value for s in Scope], name="reviewer-tool")


class FailingEmbedder:
    model_name = "all-MiniLM-L6-v2-onnx-int8"
    dimension = 384

    def embed(self, text):
        raise EmbeddingError("embedder down (test)")

    def embed_batch(self, texts):
        raise EmbeddingError("embedder down (test)")


@pytest.fixture
def failing_embedder():
    set_embedder(FailingEmbedder())
    yield
    set_embedder(None)


@pytest.fixture
def embed():
    def _embed(text: str) -> np.ndarray:
        from common.text import normalize_phrase

        return get_embedder().embed(normalize_phrase(text))

    return _embed
