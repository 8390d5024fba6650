"""Two different writers on one object at once: each answers as if they had run one after the other (no deadlock,
no 500, no lost pin, no proposal from a level the action no longer has). Each test holds one writer at the point
where it has taken its first lock and lets the other run into it."""

import threading
import time
import types
from unittest import mock

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone as dj_timezone
from rest_framework.test import APIClient

from actions.models import Action
from agents.models import Agent
from autonomy.models import AutonomyTransition
from autonomy.services import action_autonomy_stop, autonomy_evaluate, autonomy_transition_approve
from autonomy.services import evaluation as ev_mod
from common.api import Conflict
from embeddings.embedders import current_model_name
from learning import decision
from learning.models import DecisionFit, DecisionFitEvent, FittedResolutionProfile, LearnedPhrase, Verb
from learning.resolution import resolve as pipeline
from learning.services import candidates as cand_mod
from learning.services import corrections as corr_mod
from learning.services import decisions as dec_mod
from learning.services import profiles as prof_mod
from learning.services.candidates import candidate_approve, candidate_record
from learning.services.catalogue import verb_catalogue_load
from learning.services.corrections import phrase_correction_apply
from learning.services.decisions import decision_fit_pin, decision_refit
from learning.services.disambiguations import disambiguation_record, disambiguation_select, disambiguation_signals_process
from learning.services.phrases import learned_phrase_upsert
from learning.services.profiles import resolution_profile_activate
from tests.conftest import CBU_CATALOGUE, fill_history, make_client, reviewer_user

pytestmark = pytest.mark.django_db(transaction=True)

HOLD_S = 2  # how long a writer waits for the other to reach its pause; with one order of locks, the other never does


def _two(fa, fb):
    """``fa`` and ``fb`` at once, each in its own thread and connection: {"a"|"b": ("ok", answer) or ("error", exc)}."""
    raw = {}
    threads = [_start(raw, "a", fa), _start(raw, "b", fb)]
    for thread in threads:
        thread.join(60)
    return {k: ("error", v) if isinstance(v, Exception) else ("ok", v) for k, v in raw.items()}


def _start(out: dict, name: str, fn) -> threading.Thread:
    """A thread (named ``name``, its own connection) running ``fn``; its answer or exception goes to ``out[name]``."""

    def run():
        try:
            out[name] = fn()
        except Exception as exc:  # noqa: BLE001
            out[name] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=run, name=name)
    thread.start()
    return thread


def _paused(real, both: threading.Barrier, late: float = 0.0):
    """``real`` run after both writers reached this point (or HOLD_S passed: the other waits for a lock this one
    holds), ``late`` seconds after the other."""

    def run(**kw):
        try:
            both.wait()
        except threading.BrokenBarrierError:
            pass
        time.sleep(late)
        return real(**kw)

    return run


def test_a_users_correction_and_the_approval_of_the_candidate_it_closes_at_once(monkeypatch):
    verb_catalogue_load(entries=CBU_CATALOGUE)
    # alice's clicks proposed "wipe my units" -> cbu.delete; it waits for a reviewer
    cand = candidate_record(
        input_pattern="wipe my units", suggested_output="cbu.delete", user_id="alice", source="click", confidence=0.5
    )
    both = threading.Barrier(2, timeout=HOLD_S)
    # each pauses here holding the rows it has locked: the correction its phrase, the approval the candidate
    monkeypatch.setattr(corr_mod, "phrase_evidence_overrule", _paused(corr_mod.phrase_evidence_overrule, both))
    monkeypatch.setattr(cand_mod, "block_refusal_check", _paused(cand_mod.block_refusal_check, both))

    out = _two(
        lambda: phrase_correction_apply(text="wipe my units", wrong_verb="cbu.delete", correct_verb="cbu.list", user_id="alice"),
        lambda: candidate_approve(candidate=cand),
    )
    errors = {k: v[1] for k, v in out.items() if v[0] == "error"}
    cand.refresh_from_db()
    if cand.status == "rejected":  # the correction closed it first: the approval is refused, not a deadlock
        assert list(errors) == ["b"] and isinstance(errors["b"], Conflict) and errors["b"].code == "invalid_status", errors
    else:  # approved first: the correction then re-points the phrase the approval wrote
        assert cand.status == "applied" and errors == {}, errors
    assert list(LearnedPhrase.objects.filter(user_id="alice").values_list("normalized", "verb__name")) == [
        ("wipe my units", "cbu.list")
    ]


def _pause_pair(monkeypatch):
    """Hold the correction right after it locked the phrase row and the approval right after it locked the candidate
    row. Both take the text's lock before (``phrase_text_lock``), so the one that holds it pauses alone, the other
    waits for it, and the barrier gives up after HOLD_S: they run one after the other, in either order, and never
    deadlock (a deadlock would answer the correction 503 or the inbox 500, which the test refuses)."""

    both = threading.Barrier(2, timeout=HOLD_S)
    monkeypatch.setattr(corr_mod, "phrase_evidence_overrule", _paused(corr_mod.phrase_evidence_overrule, both))
    monkeypatch.setattr(cand_mod, "block_refusal_check", _paused(cand_mod.block_refusal_check, both))


def test_an_inbox_approval_and_an_api_correction_of_one_text_at_once(monkeypatch):
    verb_catalogue_load(entries=CBU_CATALOGUE)
    cand = candidate_record(
        input_pattern="wipe my units", suggested_output="cbu.delete", user_id="alice", source="click", confidence=0.5
    )
    agent = make_client(["resolve", "feedback"], name="agent-a")
    auth = agent._credentials["HTTP_AUTHORIZATION"]
    root = reviewer_user("root", superuser=True)
    _pause_pair(monkeypatch)

    def correct():
        c = APIClient(raise_request_exception=False)  # the test client's exception signal is process-wide
        c.credentials(HTTP_AUTHORIZATION=auth)
        r = c.post(
            "/api/v1/resolutions/correct",
            {"text": "wipe my units", "wrong_verb": "cbu.delete", "correct_verb": "cbu.list", "user_id": "alice"},
            format="json",
        )
        return r.status_code

    def approve_in_inbox():
        c = Client(raise_request_exception=False)
        c.force_login(root)
        r = c.post(f"/admin/inbox/candidate/{cand.pk}/", {"action": "approve", "confirmed": "1", "acknowledged": "1"})
        return r.status_code

    out = _two(correct, approve_in_inbox)
    cand.refresh_from_db()
    phrases = list(LearnedPhrase.objects.filter(user_id="alice").values_list("normalized", "verb__name"))
    assert out["a"] == ("ok", 200) and phrases == [("wipe my units", "cbu.list")], (out, phrases)
    assert out["b"][0] == "ok" and out["b"][1] != 500, out  # the inbox answers the decision or that it came too late
    assert cand.status in ("rejected", "applied")


def test_a_global_correction_and_the_approval_of_the_global_candidate_at_once(monkeypatch):
    verb_catalogue_load(entries=CBU_CATALOGUE)
    # a global phrase exists (cbu.show), and a pending global candidate says it should be cbu.list
    learned_phrase_upsert(phrase="units overview", verb=Verb.objects.get(name="cbu.show"), user_id=None)
    cand = candidate_record(
        input_pattern="units overview", suggested_output="cbu.list", user_id=None, source="click", confidence=0.5
    )
    both = threading.Barrier(2, timeout=HOLD_S)
    # each pauses here holding the rows it has locked: the correction the global phrase, the approval the candidate
    monkeypatch.setattr(corr_mod, "candidate_record", _paused(corr_mod.candidate_record, both))
    monkeypatch.setattr(cand_mod, "block_refusal_check", _paused(cand_mod.block_refusal_check, both, 0.3))
    out = _two(
        lambda: phrase_correction_apply(text="units overview", wrong_verb="cbu.show", correct_verb="cbu.list", user_id=None),
        lambda: candidate_approve(candidate=cand),
    )
    errors = {k: v[1] for k, v in out.items() if v[0] == "error"}
    assert errors == {}, errors
    cand.refresh_from_db()
    assert cand.status == "applied"  # the correction only counted once more on the pending candidate, or after it
    assert list(LearnedPhrase.objects.filter(user_id=None).values_list("normalized", "verb__name")) == [
        ("units overview", "cbu.list")
    ]


def _profile(**kw):
    return FittedResolutionProfile.objects.create(
        embedding_model="all-MiniLM-L6-v2-onnx-int8",
        resolve_threshold=kw.pop("t", 0.6),
        margin=0.05,
        max_wrong_pct=5.0,
        gold_count=100,
        train_count=70,
        held_out_count=30,
        baseline={"resolve_threshold": 0.5, "margin": 0.04},
        **kw,
    )


def _pause_after_retiring(monkeypatch):
    both = threading.Barrier(2, timeout=HOLD_S)

    def now():
        try:
            both.wait()  # each has retired "the" active profile it could see, and holds only its own row
        except threading.BrokenBarrierError:
            pass
        return dj_timezone.now()

    monkeypatch.setattr(prof_mod, "timezone", types.SimpleNamespace(now=now))


def test_two_activations_of_different_profiles_of_one_model_at_once(monkeypatch):
    a, b = _profile(t=0.6), _profile(t=0.7)
    _pause_after_retiring(monkeypatch)
    out = _two(lambda: resolution_profile_activate(fitted=a), lambda: resolution_profile_activate(fitted=b))
    errors = {k: v[1] for k, v in out.items() if v[0] == "error"}
    assert errors == {}, errors
    assert sorted(FittedResolutionProfile.objects.values_list("status", flat=True)) == ["active", "retired"]


def test_two_inbox_activations_of_different_profiles_of_one_model(monkeypatch):
    a, b = _profile(t=0.6), _profile(t=0.7)
    r1, r2 = reviewer_user("rev1", superuser=True), reviewer_user("rev2", superuser=True)
    _pause_after_retiring(monkeypatch)

    def decide(user, pk):
        def go():
            c = Client(raise_request_exception=False)
            c.force_login(user)
            return c.post(f"/admin/inbox/profile/{pk}/", {"action": "approve", "confirmed": "1"}).status_code

        return go

    out = _two(decide(r1, a.pk), decide(r2, b.pk))
    assert sorted(v[1] for v in out.values()) == [302, 302], out  # the second activation retires the first
    assert sorted(FittedResolutionProfile.objects.values_list("status", flat=True)) == ["active", "retired"]


def _params():
    n = len(decision.FEATURES)
    return {
        "features": list(decision.FEATURES),
        "mean": [0.0] * n,
        "scale": [1.0] * n,
        "coef": [0.0] * n,
        "intercept": 0.0,
        "cut": 0.5,
    }


def test_a_pin_of_the_live_fit_while_the_refit_promotes_the_shadow_holds(monkeypatch):
    model = current_model_name()
    live = DecisionFit.objects.create(
        version=1, source="prior", status="live", embedding_model=model, params=_params(), n_labels=0, held_out={"wrong": 0.0}
    )
    shadow = DecisionFit.objects.create(
        version=2,
        source="labels",
        status="shadow",
        embedding_model=model,
        params=_params(),
        n_labels=1000,
        held_out={"wrong": 0.0},
    )
    read_live, pinned = threading.Event(), threading.Event()

    def verdict_then_wait(*, fit):  # the refit has locked the live fit (not pinned) and judges the shadow fit
        read_live.set()
        pinned.wait(10)
        return True, "held-out wrong within the target"

    monkeypatch.setattr(dec_mod, "promotion_verdict", verdict_then_wait)
    monkeypatch.setattr(dec_mod, "_prior_stale", lambda: False)
    out = {}
    t = _start(out, "refit", decision_refit)
    assert read_live.wait(20)
    # the reviewer pins v1 (hold it live, no automatic promotion until unpinned) while the refit is deciding
    pin = threading.Thread(target=lambda: (decision_fit_pin(fit=live), connection.close()))
    pin.start()
    pin.join(0.5)
    assert pin.is_alive()  # it waits for the refit, which holds the live fit
    pinned.set()
    t.join(30)
    pin.join(30)
    live.refresh_from_db()
    shadow.refresh_from_db()
    assert out["refit"]["promoted"] == 2  # the refit, first, promoted v2; then the pin put v1 back, pinned
    assert (live.status, live.pinned) == ("live", True) and shadow.status == "retired"
    assert list(DecisionFitEvent.objects.order_by("pk").values_list("fit__version", "action")) == [
        (2, "promoted"),
        (1, "rolled_back"),
    ]


def test_an_emergency_stop_while_the_evaluation_proposes_a_promotion_leaves_none_open(monkeypatch):
    agent = Agent.objects.create(name="ops")
    send = Action.objects.create(name="email.send", autonomy_level=2)
    fill_history(send, agent, completed=25)  # the evidence calls for 2 -> 3
    boss = reviewer_user("boss", "approve_autonomytransition")
    read, stopped = threading.Event(), threading.Event()
    real = ev_mod.recent_patterns

    def patterns_then_wait(**kw):  # the evaluation has read level 2 and found no open proposal
        read.set()
        stopped.wait(10)
        return real(**kw)

    monkeypatch.setattr(ev_mod, "recent_patterns", patterns_then_wait)
    out = {}
    t = _start(out, "eval", lambda: autonomy_evaluate(action_ids=[send.pk]))
    assert read.wait(20)
    action_autonomy_stop(action=send, user=boss, reason="it emailed the CEO")
    stopped.set()
    t.join(30)
    send.refresh_from_db()
    open_rows = list(AutonomyTransition.objects.filter(action=send, status="proposed").values_list("from_level", "to_level"))
    assert send.autonomy_level == 1
    if open_rows:  # what a reviewer who opens it gets: a promotion that can only be refused
        with pytest.raises(Conflict) as refused:
            autonomy_transition_approve(transition=AutonomyTransition.objects.get(action=send, status="proposed"), user=boss)
        print("approve ->", refused.value.code)
    assert open_rows == [], "after the stop an open promotion from a level the action no longer has waits in the inbox"


def test_two_corrections_whose_phrases_are_each_others_anchors_at_once(monkeypatch):
    verb_catalogue_load(entries=CBU_CATALOGUE)
    delete = Verb.objects.get(name="cbu.delete")
    texts = ["close my unit now", "close my unit now please"]  # near-paraphrases: each decays with the other's correction
    for text in texts:
        learned_phrase_upsert(phrase=text, verb=delete, user_id="alice")
    both = threading.Barrier(2, timeout=HOLD_S)
    real = corr_mod.learned_phrase_lock_or_create

    def locked_then_wait(**kw):  # each holds its own phrase here and next wants the other, an anchor of its text
        out = real(**kw)
        try:
            both.wait()
        except threading.BrokenBarrierError:
            pass
        return out

    monkeypatch.setattr(corr_mod, "learned_phrase_lock_or_create", locked_then_wait)
    out = _two(
        *(
            lambda text=text: phrase_correction_apply(
                text=text, wrong_verb="cbu.delete", correct_verb="cbu.list", user_id="alice"
            )
            for text in texts
        )
    )
    assert {k: v[0] for k, v in out.items()} == {"a": "ok", "b": "ok"}, out
    assert all(v[1]["decayed"] or v[1]["phrase"]["verb"] == "cbu.list" for v in out.values())
    assert set(LearnedPhrase.objects.filter(user_id="alice").values_list("verb__name", flat=True)) == {"cbu.list"}


def _fit(version, status, source="prior", **kw):
    return DecisionFit.objects.create(
        version=version,
        source=source,
        status=status,
        embedding_model=current_model_name(),
        params=_params(),
        n_labels=kw.pop("n_labels", 0),
        held_out={"wrong": 0.0},
        **kw,
    )


def _waiting_on_a_lock() -> bool:
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()")
        return cur.fetchone()[0] > 0


def test_a_rollback_pin_committed_while_the_refit_waits_for_the_live_fit_holds(monkeypatch):
    older = _fit(1, "retired")
    _fit(2, "live")
    _fit(3, "shadow", source="labels", n_labels=1000)
    retired_live, go = threading.Event(), threading.Event()

    def now():
        if threading.current_thread().name == "pin":  # in the switch: the live fit is retired, the pinned one not yet live
            retired_live.set()
            go.wait(20)
        return dj_timezone.now()

    monkeypatch.setattr(dec_mod, "timezone", types.SimpleNamespace(now=now))
    monkeypatch.setattr(dec_mod, "promotion_verdict", lambda *, fit: (True, "held-out wrong within the target"))
    monkeypatch.setattr(dec_mod, "_prior_stale", lambda: False)
    out = {}
    pin = _start(out, "pin", lambda: decision_fit_pin(fit=older))
    assert retired_live.wait(20)
    refit = _start(out, "refit", decision_refit)
    deadline = time.monotonic() + 20
    while not _waiting_on_a_lock() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _waiting_on_a_lock()  # the refit waits for the live fit the pin holds
    go.set()
    pin.join(30)
    refit.join(30)
    assert not isinstance(out["pin"], Exception) and not isinstance(out["refit"], Exception), out
    assert out["refit"]["promoted"] is None and "pinned" in out["refit"]["reason"]
    # the reviewer rolled back to v1 and pinned it: no automatic promotion until it is unpinned
    assert {f.version: (f.status, f.pinned) for f in DecisionFit.objects.all()} == {
        1: ("live", True),
        2: ("retired", False),
        3: ("shadow", False),
    }


def test_a_clicks_automatic_promotion_and_the_users_correction_of_the_text_at_once(monkeypatch):
    verb_catalogue_load(entries=CBU_CATALOGUE)
    # dave's earlier clicks left a pending candidate "list all cbus" -> cbu.list below the promotion threshold
    candidate_record(input_pattern="list all cbus", suggested_output="cbu.list", user_id="dave", source="click", confidence=0.3)
    row = disambiguation_record(resolution=pipeline(text="list all cbus", user_id="dave"))
    with mock.patch("learning.services.disambiguations._signals_enqueue"):
        disambiguation_select(request_id=row.request_id, selected_verb="cbu.list", agent_id=None)
    both = threading.Barrier(2, timeout=HOLD_S)
    real_lock = cand_mod.phrase_text_lock

    def correction_lock(**kw):  # the correction holds the text's lock here, and next locks the candidate to close it
        real_lock(**kw)
        try:
            both.wait()
        except threading.BrokenBarrierError:
            pass

    # the click's learning pauses where its promotion asks for the text's lock, the candidate bumped
    monkeypatch.setattr(cand_mod, "phrase_text_lock", _paused(real_lock, both))
    monkeypatch.setattr(corr_mod, "phrase_text_lock", correction_lock)
    out = _two(
        lambda: disambiguation_signals_process(request_pk=row.pk),
        lambda: phrase_correction_apply(text="list all cbus", wrong_verb="cbu.list", correct_verb="cbu.create", user_id="dave"),
    )
    assert {k: v[0] for k, v in out.items()} == {"a": "ok", "b": "ok"}, out
    assert list(LearnedPhrase.objects.filter(user_id="dave").values_list("normalized", "verb__name")) == [
        ("list all cbus", "cbu.create")
    ]


def test_a_writer_of_several_texts_holds_each_texts_lock_once_and_a_writer_of_one_waits():
    from django.db import transaction

    from learning.services.phrases import phrase_texts_lock

    taken, released = threading.Event(), threading.Event()

    def several():
        with transaction.atomic():
            phrase_texts_lock(texts=["show the cbus", "list all cbus", "show the cbus"])
            with connection.cursor() as cur:
                cur.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()")
                held = cur.fetchone()[0]
            taken.set()
            released.wait(10)
        return held

    def one():
        taken.wait(10)
        started = time.monotonic()
        with transaction.atomic():
            cand_mod.phrase_text_lock(normalized="list all cbus")
        return time.monotonic() - started

    def release_later():
        taken.wait(10)
        time.sleep(0.5)
        released.set()

    raw = {}
    threads = [_start(raw, "a", several), _start(raw, "b", one), _start(raw, "c", release_later)]
    for thread in threads:
        thread.join(30)
    assert raw["a"] == 2  # two texts, each once
    assert raw["b"] >= 0.4  # the one-text writer waited for the several-text writer's transaction


def test_a_correction_and_an_import_of_its_text_and_its_anchor_at_once(monkeypatch):
    from learning.importing import ImportRow
    from learning.services.imports import phrases_import

    verb_catalogue_load(entries=CBU_CATALOGUE)
    anchor, text = "close my unit now", "close my unit now please"  # near-paraphrases: the correction decays the anchor
    learned_phrase_upsert(phrase=anchor, verb=Verb.objects.get(name="cbu.delete"), user_id="alice")
    holds_anchor, go = threading.Event(), threading.Event()
    real = corr_mod.learned_phrase_lock_or_create

    def create_later(**kw):  # the correction holds its anchors' rows here, and next creates its text's phrase
        holds_anchor.set()
        go.wait(20)
        return real(**kw)

    monkeypatch.setattr(corr_mod, "learned_phrase_lock_or_create", create_later)
    out = {}
    correction = _start(
        out,
        "correction",
        lambda: phrase_correction_apply(text=text, wrong_verb="cbu.delete", correct_verb="cbu.list", user_id="alice"),
    )
    assert holds_anchor.wait(20)
    # the import adds the correction's text and re-points its anchor
    imported = _start(
        out,
        "import",
        lambda: phrases_import(rows=[ImportRow(1, text, "cbu.list"), ImportRow(2, anchor, "cbu.list")], user_id="alice"),
    )
    deadline = time.monotonic() + 10
    while not _waiting_on_a_lock() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _waiting_on_a_lock()  # the import waits for the anchor the correction holds, before it inserts anything
    go.set()
    correction.join(60)
    imported.join(60)
    assert not isinstance(out["correction"], Exception), out
    # the import, second, finds the correction's phrase added meanwhile: a 409 to retry, never a deadlock
    assert isinstance(out["import"], Conflict), out
    assert LearnedPhrase.objects.get(user_id="alice", normalized=text).verb.name == "cbu.list"
    retried = phrases_import(rows=[ImportRow(1, text, "cbu.list"), ImportRow(2, anchor, "cbu.list")], user_id="alice")
    assert retried["updated"] + retried["unchanged"] == 2
    assert LearnedPhrase.objects.get(user_id="alice", normalized=anchor).verb.name == "cbu.list"


def test_a_quarantine_release_while_the_owners_private_memories_are_shared_moves_the_released_memory(monkeypatch, settings):
    from memories.models import Memory, MemoryQuarantine
    from memories.services import quarantine as quarantine_mod
    from memories.services.owners import private_memories_share
    from tests.test_memories_private import OBSERVE, _shared_and_private

    settings.API_KEY_CACHE_S = 0  # no settling wait after the switch
    _, private = _shared_and_private()
    body = {
        "user_id": "alice",
        "user_message": "How do I reach the S3 bucket for the nightly export?",
        "assistant_message": "Use the access key AKIAIOSFODNN7EXAMPLQ with the deploy role for the nightly export job.",
    }
    item = MemoryQuarantine.objects.get(pk=private.post(OBSERVE, body, format="json").json()["evidence"]["quarantine_id"])
    edited = "Use the deploy role's own credentials from the vault for the nightly export job to the S3 bucket."
    holding, go = threading.Event(), threading.Event()
    real_store = quarantine_mod.memory_store

    def store_later(**kw):  # the release holds the owner and the item here, and next stores the memory as the owner's
        holding.set()
        go.wait(20)
        return real_store(**kw)

    monkeypatch.setattr(quarantine_mod, "memory_store", store_later)
    agent = private.agent

    def switch_and_share():  # the admin switches the agent to shared, then its private data is shared
        row = Agent.objects.get(pk=agent.pk)
        row.private_user_data = False
        row.save()  # as the admin saves it: with its history, which dates the switch
        return private_memories_share(agent=row)

    out = {}
    release = _start(out, "release", lambda: quarantine_mod.quarantine_release(item=item, actor="rita", content=edited))
    assert holding.wait(20)
    share = _start(out, "share", switch_and_share)
    deadline = time.monotonic() + 10
    while not _waiting_on_a_lock() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _waiting_on_a_lock()  # the switch waits for the release, which holds the agent
    go.set()
    release.join(30)
    share.join(30)
    assert not isinstance(out["release"], Exception) and not isinstance(out["share"], Exception), out
    assert out["share"]["memories_shared"] == 1
    released = Memory.objects.get(pk=out["release"].memory_id)
    assert released.private_agent_id is None  # shared with the rest, not left behind as the agent's
    assert not Memory.objects.filter(private_agent=agent).exists()


def test_work_on_a_shared_agents_former_private_data_holds_the_agent_against_a_switch_back(settings):
    from django.db import transaction

    from agents.selectors import agent_shared_required

    settings.API_KEY_CACHE_S = 0
    agent = Agent.objects.create(name="formerly-private", private_user_data=False)
    checked, done = threading.Event(), threading.Event()

    def work():
        with transaction.atomic():
            agent_shared_required(agent=agent)
            checked.set()
            done.wait(10)

    def switch_back():
        checked.wait(10)
        row = Agent.objects.get(pk=agent.pk)
        row.private_user_data = True
        row.save()

    raw = {}
    threads = [_start(raw, "work", work), _start(raw, "switch", switch_back)]
    assert checked.wait(10)
    deadline = time.monotonic() + 5
    while not _waiting_on_a_lock() and time.monotonic() < deadline:
        time.sleep(0.05)
    waited = _waiting_on_a_lock()
    done.set()
    for thread in threads:
        thread.join(30)
    assert waited  # the switch back to private waits for the work, which read the agent as shared
    assert raw == {"work": None, "switch": None}
    assert Agent.objects.get(pk=agent.pk).private_user_data
