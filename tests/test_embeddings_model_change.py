"""After a change of embedding model, until the backfill has embedded every row again: answers say that rows of the
old model were not compared (they are never compared with the new model's query), and the backfill takes the
blocks first (a block not embedded again keeps its verb from every answer)."""

import pytest

from embeddings.embedders import get_embedder
from embeddings.selectors import embedded_models, other_model_rows_forget
from embeddings.services import embeddings_backfill
from learning.models import LearnedPhrase, PhraseBlock
from learning.resolution import REEMBEDDING, resolve
from learning.services.phrases import learned_phrase_upsert
from memories.models import Memory
from memories.services import memory_retrieve
from tests.conftest import make_memory

pytestmark = pytest.mark.django_db


def _old_model(queryset):
    queryset.update(embedding_model="an-older-model")
    other_model_rows_forget()


def test_a_resolve_says_phrases_of_another_model_were_not_compared_until_the_backfill_embeds_them(catalogue):
    learned_phrase_upsert(phrase="display all my business units", verb=catalogue["cbu.list"], user_id="alice")
    assert resolve(text="display all my business units please", user_id="alice").degraded_reason == ""
    _old_model(LearnedPhrase.objects.all())
    during = resolve(text="display all my business units please", user_id="alice")
    assert during.degraded and during.degraded_reason == REEMBEDDING
    assert all(c.source != "user_learned_semantic" for c in during.candidates)  # never compared across models
    assert embeddings_backfill()["embedded"] >= 1
    other_model_rows_forget()
    after = resolve(text="display all my business units please", user_id="alice")
    assert not after.degraded and after.verb == "cbu.list"


def test_a_resolve_probes_for_other_models_rows_once_in_a_while_not_on_every_request(catalogue):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def probes(text):
        with CaptureQueriesContext(connection) as seen:
            assert not resolve(text=text).degraded
        return [q["sql"] for q in seen.captured_queries if '"embedding_model" >' in q["sql"]]

    assert len(probes("list my business units")) == 3  # blocks, catalogue phrases, learned phrases: one probe each
    assert probes("show every business unit") == []  # kept OTHER_MODEL_CHECK_S


def test_a_memory_retrieve_ranks_what_it_can_and_says_the_rest_waits_for_its_vectors(db):
    from django.conf import settings

    current = make_memory(content="Always run the database migrations before deploying the web application.")
    older = make_memory(content="Rotate the staging credentials every Monday before the standup meeting.")
    memory_retrieve(user_id="alice", query="deploying the web application")  # embeds both lazily
    assert Memory.objects.filter(embedding__isnull=False).count() == 2
    _old_model(Memory.objects.filter(pk=older.pk))
    result = memory_retrieve(user_id="alice", query="deploying the web application")
    assert result.degraded and result.degraded_reason == "reembedding"
    assert [i.memory.pk for i in result.items][:1] == [current.pk]  # ranked as usual, not the recent-verified fallback
    assert settings.MEMORY_RETRIEVE_TOP_K >= 1


def test_the_backfill_embeds_blocks_first_then_the_anchors_then_what_grows_with_every_signal():
    from learning.models import EntityAlias, PhraseEvidence, VerbPhrase

    order = embedded_models()
    assert order[:3] == [PhraseBlock, VerbPhrase, LearnedPhrase]
    assert {EntityAlias, PhraseEvidence, Memory} <= set(order[3:])
    assert get_embedder().model_name


def test_a_prior_fitted_while_phrases_were_re_embedded_is_fitted_again_once_none_is_left(db):
    """A refit during the backfill fits the prior on the phrases embedded so far; once every phrase carries the new
    model's vectors, the periodic refresh fits it again on all of them (not a day later), and then leaves it."""
    from learning.models import DecisionFit, VerbPhrase
    from learning.services.catalogue import verb_catalogue_load
    from learning.services.decisions import decision_prior_fit, decision_prior_refresh
    from learning.tasks import decision_prior_refresh_task
    from tests.test_learning_decision import BIG

    verb_catalogue_load(entries=BIG)
    first = decision_prior_fit()
    assert first is not None and not first.params["reembedding"]
    assert decision_prior_refresh() is None  # a steady state: the daily refit follows other changes

    waiting = list(VerbPhrase.objects.order_by("pk"))[::9]  # a few phrases of several verbs
    _old_model(VerbPhrase.objects.filter(pk__in=[p.pk for p in waiting]))
    during = decision_prior_fit()  # e.g. a catalogue load while the backfill runs
    assert during.params["reembedding"] and during.params["anchors"] < first.params["anchors"]
    assert decision_prior_refresh() is None  # still at work: nothing yet

    embeddings_backfill()
    other_model_rows_forget()
    (version,) = decision_prior_refresh_task().values()  # the beat: each tenant's
    after = DecisionFit.objects.get(version=version)
    assert after.status == "live" and not after.params["reembedding"]
    assert after.params["anchors"] == first.params["anchors"]
    assert decision_prior_refresh() is None


def test_labels_measured_with_another_model_train_no_fit_of_the_current_one(api, catalogue):
    """Each record keeps the model its features were measured with; a fit of the current model reads only its own
    labels (and those recorded before the model was, when the fit they were answered with is of the current model)."""
    from learning.models import DecisionFit

    DecisionFit.objects.create(version=7, source="prior", status="retired", embedding_model=get_embedder().model_name)
    import uuid

    from learning.models import ResolutionRecord
    from learning.selectors.decisions import decision_labels

    r = api.post("/api/v1/resolve", {"text": "show my business units", "user_id": "alice"}, format="json")
    assert r.status_code == 200
    record = ResolutionRecord.objects.get(request_id=r.json()["request_id"])
    assert record.embedding_model == get_embedder().model_name
    features = [0.5] * len(record.features) if record.features else [0.5]
    for model, version in (("an-older-model", None), (get_embedder().model_name, None), ("", 7), ("", 99), ("", None)):
        ResolutionRecord.objects.create(
            fit_version=version,
            request_id=uuid.uuid4(),
            text=model or f"unrecorded {version}",
            normalized=model or f"unrecorded {version}",
            outcome="resolved",
            rule="learned",
            features=features,
            label=True,
            embedding_model=model,
        )
    seen = ResolutionRecord.objects.filter(label=True).values_list("embedding_model", flat=True)
    assert set(seen) == {"an-older-model", get_embedder().model_name, ""}
    assert len(decision_labels(window=10, model=get_embedder().model_name)) == 2  # its own, and the one of v7
    assert len(decision_labels(window=10, model="an-older-model")) == 1


def test_a_memory_written_while_others_wait_for_their_vectors_embeds_a_batch_of_them_and_says_if_that_was_not_all(api, settings):
    """The dedupe compares vectors of the current model only: after a change of model a write first embeds a batch
    (MEMORY_LAZY_EMBED_BATCH) of the user's memories again, so a paraphrase of one is merged; with more of them
    left, the write says its semantic check was not complete."""
    from tests.conftest import OBSERVE

    body = {"user_id": "alice", "user_message": "How do we deploy?"}

    def observe(text):
        return api.post(OBSERVE, {**body, "assistant_message": text}, format="json").json()

    first = observe("Always run the database migrations before deploying the web application to production.")
    assert first["decision"] == "saved" and first["evidence"]["semantic_checked"] is True
    observe("Rotate the staging credentials every Monday before the standup meeting.")
    _old_model(Memory.objects.all())
    settings.MEMORY_SEMANTIC_DUPLICATE_THRESHOLD = 0.85
    settings.MEMORY_LAZY_EMBED_BATCH = 1  # the newest of the two only
    partial = observe("Book the meeting room for the quarterly planning session on Thursday afternoon.")
    assert partial["evidence"]["semantic_checked"] is False
    settings.MEMORY_LAZY_EMBED_BATCH = 64
    again = observe("Run the database migrations before you deploy the web application to production, always.")
    assert again["evidence"]["semantic_checked"] is True
    assert again["memory_id"] == first["memory_id"] and again["decision"] != "saved", again
    assert not Memory.objects.exclude(embedding_model=get_embedder().model_name).exists()


def test_a_resolve_right_after_a_change_of_model_gives_every_reason_it_is_degraded(catalogue):
    """The live fit is the old model's (the resolver falls back) and phrases wait for their new vectors: the answer
    says both, not only the last."""
    from learning.models import DecisionFit
    from learning.selectors import decision_cache_clear

    DecisionFit.objects.create(version=1, source="labels", status="live", embedding_model="an-older-model", params={})
    decision_cache_clear()
    _old_model(LearnedPhrase.objects.all())
    learned_phrase_upsert(phrase="display all my business units", verb=catalogue["cbu.list"], user_id="alice")
    _old_model(LearnedPhrase.objects.all())
    reason = resolve(text="display all my business units please", user_id="alice").degraded_reason
    assert "decision fit v1 is for embedding model an-older-model" in reason and REEMBEDDING in reason
