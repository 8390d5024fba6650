"""A change of embedding model, end to end: the backfill, the fits and the answers while rows carry either model.

"The other model" is the local MiniLM's vectors turned by a fixed rotation, under another name: within one model
the cosines are MiniLM's (resolution behaves as usual); across models they are noise. A switch is what a restart
with new EMBEDDING_* settings does: the process embeds with the new model while stored rows keep the old vectors.
"""

import numpy as np
import pytest

from embeddings.embedders import EmbeddingError, get_embedder, set_embedder
from embeddings.selectors import embedded_models, other_model_rows_forget
from embeddings.services import DEAD_BATCHES_MAX, embeddings_backfill
from learning.selectors import decision_cache_clear

pytestmark = pytest.mark.django_db

OTHER = "rotated-minilm"


def _local():
    """The process's local MiniLM embedder (the unwrapped backend), loaded once."""
    inner = get_embedder().inner
    while hasattr(inner, "inner"):
        inner = inner.inner
    return inner


_LOCAL = None


def local_inner():
    global _LOCAL
    if _LOCAL is None:
        set_embedder(None)
        _LOCAL = _local()
    return _LOCAL


class RotatedEmbedder:
    """MiniLM turned by a fixed orthogonal matrix: another vector space under another model name."""

    dimension = 384
    in_process = True

    def __init__(self, base, model_name: str = OTHER, seed: int = 7, refuse=None, fail_after: int | None = None, hook=None):
        self.base, self.model_name = base, model_name
        q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(384, 384)))
        self.q = q.astype(np.float32)
        self.refuse = refuse or set()
        self.fail_after = fail_after
        self.calls = 0
        self.texts: list[str] = []
        self.hook = hook

    def embed(self, text):
        return self.embed_batch([text])[0]

    def embed_batch(self, texts):
        self.calls += 1
        texts = list(texts)
        if self.hook is not None:
            self.hook(texts)
        if self.fail_after is not None and self.calls > self.fail_after:
            raise EmbeddingError("embedding server down")
        if any(t in self.refuse for t in texts):
            raise EmbeddingError("embedding server refused a text")
        self.texts += texts
        out = []
        for v in self.base.embed_batch(texts):
            r = self.q @ np.asarray(v, dtype=np.float32)
            out.append((r / np.linalg.norm(r)).astype(np.float32))
        return out


class DownEmbedder:
    """A remote server that is down: every call fails (counted)."""

    dimension = 384
    in_process = True

    def __init__(self, model_name: str = OTHER):
        self.model_name = model_name
        self.calls = 0

    def embed(self, text):
        return self.embed_batch([text])[0]

    def embed_batch(self, texts):
        self.calls += 1
        raise EmbeddingError("embedding server down")


def use(embedder) -> None:
    """Switch the process to ``embedder`` (what a restart with new EMBEDDING_* settings does)."""
    set_embedder(embedder)
    other_model_rows_forget()
    decision_cache_clear()


@pytest.fixture
def switch():
    """Yields a function switching to the rotated model (or back to MiniLM with ``back=True``); restores MiniLM."""
    base = local_inner()
    current = {}

    def _switch(back: bool = False, **kw):
        e = base if back else RotatedEmbedder(base, **kw)
        use(e)
        current["e"] = e
        return e

    yield _switch
    use(base)


def minilm_name() -> str:
    return local_inner().model_name


# --------------------------------------------------------------------------------------------------------------------


def _one_row_of_every_embedded_model(catalogue):
    from learning.models import EntityAlias, LearnedPhrase, PhraseBlock, PhraseEvidence, VerbPhrase
    from learning.services.blocks import phrase_block_create as phrase_block
    from learning.services.evidence import phrase_evidence_add
    from learning.services.phrases import learned_phrase_upsert
    from memories.models import Memory
    from memories.services import memories_embed
    from tests.conftest import make_memory

    learned_phrase_upsert(phrase="display all my business units", verb=catalogue["cbu.list"], user_id="alice")
    phrase_block(phrase="wipe out the client units", verb=catalogue["cbu.delete"], user_id=None, reason="test")
    text = "find the quarterly report"
    vector = get_embedder().embed(text)
    phrase_evidence_add(user_id="alice", phrase=text, verb="document.search", negative=1.0, vector=vector, model=minilm_name())
    alias = EntityAlias(alias="Big Co", normalized="big co", canonical_name="Big Company Ltd", entity_type="client")
    alias.embedding = get_embedder().embed("big co")
    alias.embedding_model = minilm_name()
    from common.text import text_hash

    alias.embedding_hash = text_hash("big co")
    alias.save()
    m = make_memory()
    memories_embed(memory_ids=[m.pk])
    models = {m._meta.label for m in embedded_models()}
    assert models == {
        "learning.VerbPhrase",
        "learning.LearnedPhrase",
        "learning.EntityAlias",
        "learning.PhraseBlock",
        "learning.PhraseEvidence",
        "memories.Memory",
    }, models
    for m in (VerbPhrase, LearnedPhrase, EntityAlias, PhraseBlock, PhraseEvidence, Memory):
        assert m.objects.exists() and not m.objects.exclude(embedding_model=minilm_name()).exists(), m


def test_a_server_that_is_down_stops_the_whole_backfill_after_two_batches_not_two_per_table(catalogue, switch):
    """A down server stops the run after DEAD_BATCHES_MAX dead batches in all, not that many per table: with a
    remote server each dead batch costs three calls, each with its retries and timeout."""
    _one_row_of_every_embedded_model(catalogue)
    down = DownEmbedder()
    use(down)
    try:
        totals = embeddings_backfill(batch_size=1)  # one row a batch: one call a batch
    finally:
        use(local_inner())
    assert totals["embedded"] == 0
    assert totals.get("stopped") and down.calls == DEAD_BATCHES_MAX, f"{down.calls} dead batches for a server that is down"


def test_a_prior_fitted_on_part_of_the_phrases_says_so_when_the_backfill_ends_during_the_fit(db, switch, monkeypatch):
    """The prior reads the phrases embedded so far, then fits for minutes; a backfill that ends meanwhile must not
    make it look fitted on all of them, or the refresh would leave its floors, cut and head in force."""
    from learning.models import VerbPhrase
    from learning.services import decisions as svc
    from learning.services.catalogue import verb_catalogue_load
    from learning.services.decisions import decision_prior_fit, decision_prior_refresh
    from tests.test_learning_decision import BIG

    verb_catalogue_load(entries=BIG)
    total = VerbPhrase.objects.count()
    switch(fail_after=1)
    embeddings_backfill(batch_size=total * 2 // 3)  # two thirds of the catalogue carry the new model's vectors
    switch()
    part = VerbPhrase.objects.filter(embedding_model=OTHER).count()
    assert 20 <= part < total

    read = svc.selectors.decision_anchor_rows

    def read_then_backfill_finishes(**kw):
        rows = read(**kw)
        embeddings_backfill()  # the sweep finishes while the prior is being fitted
        other_model_rows_forget()
        return rows

    monkeypatch.setattr(svc.selectors, "decision_anchor_rows", read_then_backfill_finishes)
    fit = decision_prior_fit()
    monkeypatch.undo()
    assert fit is not None and fit.params["anchors"] == part < total
    assert fit.params["reembedding"] is True  # so that the refresh fits it again
    refreshed = decision_prior_refresh()
    assert refreshed is not None and refreshed.params["anchors"] == total


def test_switching_back_to_the_previous_model_puts_a_prior_of_it_live_again(db, switch):
    """MiniLM, the other model, MiniLM again (a change rolled back), with the same catalogue: once the second
    backfill is done the refresh puts a MiniLM prior live over the other model's, and answers are not degraded."""
    from learning.models import DecisionFit
    from learning.resolution import resolve
    from learning.services.catalogue import verb_catalogue_load
    from learning.services.decisions import decision_prior_fit, decision_refit
    from learning.tasks import decision_prior_refresh_task
    from tests.test_learning_decision import BIG

    verb_catalogue_load(entries=BIG)
    first = decision_prior_fit()
    assert first.status == "live" and first.embedding_model == minilm_name()

    switch()
    embeddings_backfill()
    other_model_rows_forget()
    (version,) = decision_prior_refresh_task().values()
    assert DecisionFit.objects.get(version=version).status == "live"

    switch(back=True)  # the rollback
    assert embeddings_backfill()["embedded"] > 0
    other_model_rows_forget()
    decision_prior_refresh_task()  # the beat, every RESOLVE_PRIOR_CHECK_S
    decision_refit()  # and the daily refit
    decision_cache_clear()
    live = DecisionFit.objects.get(status="live")
    assert live.embedding_model == minilm_name(), f"live fit v{live.version} is still of {live.embedding_model}"
    r = resolve(text="which cbus do i have")
    assert r.explanation["rule"] == "prior" and r.explanation["version"] == live.version
    assert not r.degraded, r.degraded_reason
    decision_prior_refresh_task()
    assert DecisionFit.objects.filter(embedding_model=minilm_name()).count() == 2  # once: a steady state fits nothing


# --------------------------------------------------------------------------------------------------------------------
# Entity aliases
# --------------------------------------------------------------------------------------------------------------------


def _alias(alias: str, canonical: str):
    from common.text import normalize_phrase, text_hash
    from learning.models import EntityAlias

    normalized = normalize_phrase(alias)
    row = EntityAlias(alias=alias, normalized=normalized, canonical_name=canonical, entity_type="client")
    row.embedding, row.embedding_model, row.embedding_hash = (
        get_embedder().embed(normalized),
        minilm_name(),
        text_hash(normalized),
    )
    row.save()
    return row


def test_an_alias_lookup_mid_switch_says_that_aliases_were_not_compared(db, switch):
    """Aliases of the old model are not compared (no cosine across models), and the answer says so: an agent that
    reads a plain no_match could create a duplicate entity."""
    from learning.selectors import entity_alias_resolve

    _alias("Acme Holdings", "Acme Holdings International plc")
    query = "the acme holdings group"
    before = entity_alias_resolve(text=query)
    assert before["outcome"] == "semantic" and before["canonical_name"] == "Acme Holdings International plc", before
    switch()
    during = entity_alias_resolve(text=query)
    assert during["outcome"] == "no_match" and during["degraded"]
    assert "re-embedding" in during["degraded_reason"]
    embeddings_backfill()
    other_model_rows_forget()
    after = entity_alias_resolve(text=query)
    assert after["canonical_name"] == "Acme Holdings International plc" and not after["degraded"], after


def test_the_admin_shows_a_row_of_the_old_model_as_not_embedded_until_the_backfill(catalogue, switch, admin_client):
    """A block of the old model blocks its verb outright mid-switch: its list says it is not embedded (and with which
    model), so a reviewer sees why."""
    from learning.services.blocks import phrase_block_create

    phrase_block_create(phrase="wipe out the client units", verb=catalogue["cbu.delete"], user_id=None, reason="test")

    def embedded_icons():
        page = admin_client.get("/admin/learning/phraseblock/").content.decode()
        assert "wipe out the client units" in page
        return page.count("icon-yes.svg"), page.count("icon-no.svg")

    assert embedded_icons() == (1, 0)
    switch()
    assert embedded_icons() == (0, 1)
    assert minilm_name() in admin_client.get("/admin/learning/phraseblock/").content.decode()
    embeddings_backfill()
    assert embedded_icons() == (1, 0)


def test_a_correction_mid_switch_embeds_the_users_own_rows_again_and_reaches_their_paraphrase(
    catalogue, switch, written_for_floors
):
    """A user's correction decays their own phrases for the verb turned down near its text; mid-switch those still
    carry the old model's vectors, so they are embedded again first (a handful), not skipped for good."""
    from learning.models import LearnedPhrase, PhraseEvidence
    from learning.services.corrections import phrase_correction_apply
    from learning.services.evidence import phrase_evidence_add
    from learning.services.phrases import learned_phrase_upsert

    anchor = learned_phrase_upsert(phrase="get rid of the business unit", verb=catalogue["cbu.list"], user_id="alice")
    other_user = learned_phrase_upsert(phrase="get rid of the business unit", verb=catalogue["cbu.list"], user_id="bob")
    text = "get rid of the business unit now"
    phrase_evidence_add(
        user_id="alice",
        phrase=text,
        verb="cbu.list",
        negative=0.0,
        positive=1.0,
        vector=get_embedder().embed(text),
        model=minilm_name(),
    )
    switch()
    result = phrase_correction_apply(
        text="get rid of that business unit", wrong_verb="cbu.list", correct_verb="cbu.delete", user_id="alice"
    )
    assert [d["id"] for d in result["decayed"]] == [anchor.pk]
    anchor.refresh_from_db()
    assert anchor.embedding_model == OTHER and anchor.confidence == pytest.approx(0.7)
    assert LearnedPhrase.objects.get(pk=other_user.pk).embedding_model == minilm_name()  # another user's: the backfill's
    assert PhraseEvidence.objects.get(user_id="alice", verb="cbu.list").embedding_model == OTHER


def test_a_text_the_new_model_refuses_does_not_hold_the_change_of_model_open_for_ever(catalogue, switch):
    """The new server refuses one catalogue phrase (every sweep): the row drops the old model's vector and waits for
    its first one, so resolve stops saying "re-embedding" and the prior of the new model is fitted."""
    from learning.models import VerbPhrase
    from learning.resolution import resolve
    from learning.selectors import vectors_of_another_model_left

    refused = VerbPhrase.objects.get(normalized="email my manager")
    switch(refuse={"email my manager"})
    totals = embeddings_backfill()
    assert totals["failed"] == 1 and totals["embedded"] >= 1
    refused.refresh_from_db()
    assert refused.embedding is None and refused.embedding_model == ""
    assert not VerbPhrase.objects.exclude(pk=refused.pk).exclude(embedding_model=OTHER).exists()
    assert not vectors_of_another_model_left(OTHER, fresh=True)
    assert "re-embedding" not in resolve(text="send an email to the team").degraded_reason
    switch()  # the server embeds it now: the next sweep gives it its vector
    assert embeddings_backfill()["embedded"] == 1
    refused.refresh_from_db()
    assert refused.embedding_model == OTHER
