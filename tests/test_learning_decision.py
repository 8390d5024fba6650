"""The learned auto-resolve decision: the pure fit, the catalogue prior, records and labels, shadow and promotion,
pin / roll back, fallbacks on corrupt fits, the explanation."""

import datetime
import uuid

import numpy as np
import pytest
from cachetools import LRUCache
from django.core.cache.backends.locmem import LocMemCache
from django.utils import timezone

from common.api import ApplicationError
from learning import decision
from learning.catalogue import VerbEntry
from learning.models import DecisionFit, DecisionFitEvent, DecisionHead, ResolutionRecord
from learning.resolution import resolve
from learning.selectors import decision_cache_clear, decision_head, head_cache_bytes
from learning.services.catalogue import verb_catalogue_load
from learning.services.corrections import phrase_confirmation_apply, phrase_correction_apply
from learning.services.decisions import (
    decision_fit_pin,
    decision_fit_retire_live,
    decision_fit_unpin,
    decision_heads_prune,
    decision_prior_fit,
    decision_refit,
    promotion_verdict,
    resolution_label,
    resolution_records_purge,
)
from learning.services.disambiguations import disambiguation_abandon, disambiguation_select
from tests.conftest import make_client

URL = "/api/v1/resolve"

BIG = [
    VerbEntry(
        "cbu.list",
        "cbu",
        "",
        "",
        ["list all cbus", "show my client business units", "which cbus do i have", "display the cbus", "cbu overview"],
    ),
    VerbEntry(
        "cbu.create",
        "cbu",
        "",
        "",
        ["create a cbu", "open a new client business unit", "add a cbu", "make a new cbu", "set up a client unit"],
    ),
    VerbEntry(
        "email.send",
        "email",
        "",
        "",
        ["send an email", "email my manager", "write a mail to bob", "send a message by email", "mail the team"],
    ),
    VerbEntry(
        "document.search",
        "document",
        "",
        "",
        ["search documents", "find a document", "look for the contract file", "where is the report", "search my files"],
    ),
    VerbEntry(
        "meeting.book",
        "calendar",
        "",
        "",
        [
            "book a meeting",
            "schedule a call tomorrow",
            "set up a meeting with anna",
            "put a meeting in my calendar",
            "arrange a call",
        ],
    ),
    VerbEntry(
        "weather.get",
        "weather",
        "",
        "",
        ["what is the weather", "will it rain today", "weather forecast for paris", "is it cold outside", "how hot is it"],
    ),
]


@pytest.fixture
def big(db):
    verb_catalogue_load(entries=BIG)


# --- the pure fit ---


def _synthetic(n=1200, seed=0):
    rng = np.random.default_rng(seed)
    F = rng.normal(size=(n, len(decision.FEATURES)))
    logit = 2.5 * F[:, 1] + 1.5 * F[:, 3] + 1.0
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)
    return F, y


def test_fit_keeps_held_out_wrong_within_target_and_signs_monotone():
    F, y = _synthetic()
    fit = decision.fit_decision(F, y, max_wrong_rate=0.03, min_labels=200)
    assert fit["cut"] is not None and fit["held_out"]["wrong"] <= 0.03
    coef = dict(zip(decision.FEATURES, fit["coef"], strict=True))
    assert all(coef[f] >= 0 for f in decision.MONOTONE)
    auto = decision.decide(fit, F)
    assert 0 < auto.mean() < 1
    assert decision.fit_decision(F[:100], y[:100], max_wrong_rate=0.03, min_labels=200) is None  # too few labels
    assert decision.fit_decision(F, np.ones(len(y)), max_wrong_rate=0.03, min_labels=200) is None  # one class


def test_a_stricter_target_never_resolves_more():
    F, y = _synthetic(seed=1)
    loose = decision.fit_decision(F, y, max_wrong_rate=0.05, min_labels=200)
    strict = decision.fit_decision(F, y, max_wrong_rate=0.01, min_labels=200)
    assert strict["held_out"]["wrong"] <= loose["held_out"]["wrong"]
    assert strict["held_out"]["right"] <= loose["held_out"]["right"]


def test_an_open_set_bound_raises_the_cut_until_few_out_of_scope_rows_pass():
    """With ``max_open_rate`` the cut is also high enough that at most that share of the open-set rows (held out)
    would auto-resolve; the held-out figures are those of the raised cut; without open rows nothing changes."""
    F, y = _synthetic(seed=2)
    rng = np.random.default_rng(5)
    F_open = rng.normal(size=(600, len(decision.FEATURES)))
    F_open[:, 1] += 1.0  # out-of-scope rows that look rather confident
    free = decision.fit_decision(F, y, max_wrong_rate=0.03, min_labels=200, F_open=F_open)
    bound = decision.fit_decision(F, y, max_wrong_rate=0.03, min_labels=200, F_open=F_open, max_open_rate=0.02)
    assert bound["cut"] >= free["cut"] and bound["open_cut_binds"]
    assert bound["held_out_open_auto"] <= 0.02 < free["held_out_open_auto"]
    assert bound["held_out"]["right"] <= free["held_out"]["right"] and bound["held_out"]["wrong"] <= 0.03
    assert decision.open_cut(np.array([0.9, 0.8, 0.1]), 0.34) > 0.8 >= decision.open_cut(np.array([0.9, 0.8, 0.1]), 0.67)
    assert decision.open_cut(np.array([]), 0.05) == float("-inf") == decision.open_cut(np.array([0.5]), None)


def test_the_prior_scores_learned_anchors_as_the_resolver_does():
    """The vectorised prior rows equal the per-query scoring, with learned anchors held to their own floor and
    counted at their trust, and each verb's best anchor known to be learned or not."""
    rng = np.random.default_rng(3)
    a, n, n_verbs = 40, 40, 7  # verb 6 has no anchors; 40 queries cross chunks of 16
    anchors = rng.normal(size=(a, 16))
    anchors /= np.linalg.norm(anchors, axis=1, keepdims=True)
    queries = anchors[rng.integers(0, a, n)] + rng.normal(0, 0.6, (n, 16))
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    verbs = rng.integers(0, n_verbs - 1, a)
    learned = rng.random(a) < 0.5
    trust = np.where(learned, rng.uniform(0.4, 1.0, a), 1.0)
    for dup, of in ((9, 2), (17, 2), (30, 11)):  # the same phrase again (a tie), learned the other way
        anchors[dup], verbs[dup], learned[dup], trust[dup] = anchors[of], verbs[of], not learned[of], 1.0
        trust[of] = 1.0
    p = {"learned_threshold": 0.35, "min_score": 0.1, "anchor_weights": (1.0, 0.5, 0.25)}
    S = queries @ anchors.T
    exclude = rng.integers(0, n_verbs, n)
    for ex in (None, exclude):
        score, top_cos, knn, learned_top = decision._prior_rows(S, verbs, n_verbs, p, ex, chunk=16, learned=learned, trust=trust)
        for i in range(n):
            one, one_learned, one_cos, one_knn = decision.anchor_scores(
                S[i], verbs, trust, learned, n_verbs, p, exclude=None if ex is None else int(ex[i])
            )
            np.testing.assert_allclose(score[i], one, atol=1e-9)
            assert top_cos[i] == pytest.approx(one_cos)
            assert [k for k in knn[i] if k >= 0] == one_knn
            assert (learned_top[i] == one_learned).all()  # a verb with no anchor above its floor: not learned
    assert learned_top.any() and not learned_top.all()


def test_a_large_prior_asks_a_bounded_sample_and_a_small_one_is_untouched():
    rng = np.random.default_rng(5)
    centres = rng.normal(size=(8, 16))
    verbs = np.repeat(np.arange(8), 50)
    X = centres[verbs] + rng.normal(0, 0.9, (400, 16))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    p = {"learned_threshold": 0.3, "min_score": 0.1, "anchor_weights": (1.0, 0.5, 0.25)}
    args = dict(max_wrong_rate=0.03, min_labels=20)
    full, n_full = decision.catalogue_prior(X, verbs, 8, p, **args)
    assert full is not None and n_full == 400  # every anchor asked once (its verb exists: all score > 0)
    same, n_same = decision.catalogue_prior(X, verbs, 8, p, max_queries=400, max_train=400, **args)
    assert n_same == n_full and same["coef"] == full["coef"]  # under the caps nothing changes
    capped, n_capped = decision.catalogue_prior(X, verbs, 8, p, max_queries=100, max_train=150, **args)
    assert n_capped == 100 and capped is not None
    # both heads in one pass (shared folds, samples and anchor scores) fit what two separate passes fit
    texts = [f"phrase {v} number {i}" for i, v in enumerate(verbs)]
    args_capped = dict(args, max_queries=100, max_train=150)
    both = decision.catalogue_priors(X, verbs, 8, p, texts_options=[None, texts], **args_capped)
    words, n_words = decision.catalogue_prior(X, verbs, 8, p, texts=texts, **args_capped)
    assert [n for _, n in both] == [n_capped, n_words]
    np.testing.assert_allclose(both[0][0]["coef"], capped["coef"])
    np.testing.assert_allclose(both[1][0]["coef"], words["coef"])
    assert both[1][0]["held_out"] == words["held_out"]


def test_corrupt_params_and_heads_are_rejected():
    with pytest.raises(ValueError):
        decision.check_params({"features": ["x"]})
    with pytest.raises(ValueError):
        decision.check_params({"features": list(decision.FEATURES), "mean": [0.0], "scale": [1.0], "coef": [1.0], "intercept": 0})
    with pytest.raises(ValueError):
        decision.head_loads(b"not an npz")
    head = decision.head_train(np.eye(3, 4, dtype=np.float32), np.array([0, 1, 2]), 3)
    back, verbs = decision.head_loads(decision.head_dumps(head, ["a.x", "b.y", "c.z"]))
    assert verbs == ["a.x", "b.y", "c.z"] and back["W"].shape == (4, 3)


def test_the_head_learns_words_the_embeddings_blur_and_needs_the_text_to_use_them():
    # two verbs whose anchors embed alike: only a word tells them apart
    rng = np.random.default_rng(0)
    base = rng.normal(size=8).astype(np.float32)
    X = np.stack([base + 0.01 * rng.normal(size=8).astype(np.float32) for _ in range(8)])
    texts = ["turn on the lamp", "lamp on", "switch the lamp on", "lamp please"] + [
        "turn on the fan",
        "fan on",
        "switch the fan on",
        "fan please",
    ]
    y = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    plain = decision.head_train(X, y, 2)
    lexical = decision.head_train(X, y, 2, texts=texts)
    assert lexical["W"].shape == (8 + decision.LEX_FEATURES, 2) and plain["W"].shape == (8, 2)
    q = X[:1]
    assert decision.head_predict(lexical, q, ["the lamp"])[0].argmax() == 0
    assert decision.head_predict(lexical, q, ["the fan"])[0].argmax() == 1
    assert decision.head_predict(lexical, q, ["the fan"])[0, 1] > decision.head_predict(plain, q)[0, 1]
    with pytest.raises(ValueError):  # a lexical head never scores a query without its text (the resolver falls back)
        decision.head_predict(lexical, q)
    back, _ = decision.head_loads(decision.head_dumps(lexical, ["a.lamp", "a.fan"]))
    np.testing.assert_allclose(decision.head_predict(back, q, ["fan"]), decision.head_predict(lexical, q, ["fan"]))
    # the lexical rows are unit length, like the embeddings beside them, and the same text gives the same row
    L = decision.lexical(["turn on the lamp", "turn on the lamp", ""]).toarray()
    assert np.linalg.norm(L[0]) == pytest.approx(1.0, abs=1e-6) and (L[0] == L[1]).all() and not L[2].any()


def test_a_head_starts_from_another_heads_weights_for_the_verbs_and_inputs_they_share():
    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(30, 4)).astype(np.float32), np.arange(30) % 3
    head = decision.head_train(X, y, 3)  # over embeddings only, verbs a, b, c
    start = decision.head_warm_start(head, ["a", "b", "c"], ["b", "c", "d"], 4 + decision.LEX_FEATURES)
    assert start["W"].shape == (4 + decision.LEX_FEATURES, 3) and list(start["classes"]) == [0, 1, 2]
    np.testing.assert_array_equal(start["W"][:4, :2], head["W"][:, 1:])  # b and c by name, not by position
    np.testing.assert_array_equal(start["b"][:2], head["b"][1:])
    assert not start["W"][4:].any() and not start["W"][:, 2].any() and start["b"][2] == 0  # words and d: from zero
    assert decision.head_warm_start(head, ["a", "b", "c"], ["d", "e"], 4) is None  # nothing in common
    assert decision.head_warm_start(head, ["a", "b", "c"], ["a", "b"], 3) is None  # more inputs than the new head
    # a verb the head never predicts (no anchors when it trained) starts from zero, not from its -1e4 bias
    two = decision.head_train(X[y < 2], y[y < 2], 3)
    assert decision.head_warm_start(two, ["a", "b", "c"], ["a", "c"], 4)["b"][1] == 0
    # a head started from one trained on the same rows converges in fewer iterations to the same answers
    cold = decision.head_train(X, y, 3, texts=[f"word{i % 3}" for i in range(30)])
    warm = decision.head_train(
        X,
        y,
        3,
        texts=[f"word{i % 3}" for i in range(30)],
        warm=decision.head_warm_start(head, ["a", "b", "c"], ["a", "b", "c"], 4 + decision.LEX_FEATURES),
    )
    assert (decision.head_predict(cold, X, [f"word{i % 3}" for i in range(30)]).argmax(1) == y).all()
    assert (decision.head_predict(warm, X, [f"word{i % 3}" for i in range(30)]).argmax(1) == y).all()


def test_a_solver_that_stops_before_converging_is_logged(monkeypatch, caplog):
    import scipy.optimize

    real = scipy.optimize.minimize

    def stopped(*args, **kwargs):
        r = real(*args, **{**kwargs, "options": {"maxiter": 1}})
        r.success, r.message = False, "STOP: TOTAL NO. OF ITERATIONS REACHED LIMIT"
        return r

    monkeypatch.setattr(scipy.optimize, "minimize", stopped)
    rng = np.random.default_rng(0)
    Z, y = rng.normal(size=(40, 3)), np.r_[np.zeros(20), np.ones(20)]
    with caplog.at_level("WARNING", logger="learning.decision"):
        fit = decision.MonoLR([1, 0, -1]).fit(Z, y)
    assert np.isfinite(fit.coef_).all() and "stopped before converging" in caplog.text and "LIMIT" in caplog.text


def test_one_text_is_scored_as_the_batch_scores_it():
    # a resolve scores one text through lexical_row; fits score many through lexical: the same row, the same answer
    texts = ["turn on the lamp", "", "a", "çà et là, naïve café 東京 🙂", "card  card card", "x" * 3000, "!!! ???"]
    rng = np.random.default_rng(1)
    head = {"W": rng.normal(size=(8 + decision.LEX_FEATURES, 3)).astype(np.float32), "b": np.zeros(3, np.float32)}
    Q = rng.normal(size=(len(texts), 8)).astype(np.float32)
    batch = decision.head_predict(head, Q, texts)
    L = decision.lexical(texts)
    for i, text in enumerate(texts):
        columns, values = decision.lexical_row(text)
        row = L.getrow(i)
        assert list(columns) == list(row.indices)
        np.testing.assert_allclose(values, row.data, rtol=1e-6)
        np.testing.assert_allclose(decision.head_predict(head, Q[i : i + 1], [text]), batch[i : i + 1], rtol=1e-5, atol=1e-7)
    # remembered: a second head scoring the same text (the shadow fit's) hashes nothing again, and no caller can
    # change what the next one reads
    again = decision.lexical_row(texts[0])
    assert again is decision.lexical_row(texts[0])
    with pytest.raises(ValueError, match="read-only"):
        again[1][0] = 0.0


def test_texts_hashed_before_are_not_hashed_again_and_give_the_same_rows(monkeypatch):
    """A refit trains on the same phrases again: their lexical rows come from the process's memo, equal to hashing
    them now, duplicates and order kept; the memo keeps at most LEX_MEMO_TEXTS texts."""
    from sklearn.preprocessing import normalize

    def hashed(texts):
        M = decision._lex().transform(list(texts)).astype(np.float32)
        M.data = 1.0 + np.log(M.data)
        return normalize(M, copy=False)

    monkeypatch.setattr(decision, "_lex_memo", LRUCache(maxsize=5))
    texts = ["turn on the lamp", "", "card  card card", "turn on the lamp", "çà et là 東京 🙂", "x" * 3000, "a", "b"]
    for batch in (texts, texts[::-1], texts[:3]):
        M = decision.lexical(batch)
        assert M.shape == (len(batch), decision.LEX_FEATURES) and M.dtype == np.float32
        assert (M != hashed(batch)).nnz == 0
    assert len(decision._lex_memo) <= 5
    expected = hashed(texts[:3])
    monkeypatch.setattr(decision, "_lex", lambda: pytest.fail("a text in the memo was hashed again"))
    assert (decision.lexical(texts[:3]) != expected).nnz == 0  # the newest texts: all from the memo


def test_the_lexical_memos_keep_no_text():
    """A user's erased phrases and queries must not stay readable in a process that hashed them: both memos are
    keyed by a digest, and the one-text memo keeps at most LEX_ROW_TEXTS rows, the least recently used let go."""
    private = "send my payslip to alice@example.com"
    decision.lexical([private, "other"])
    first = decision.lexical_row(private)
    rows = decision.lexical_row.cache
    assert rows.maxsize == decision.LEX_ROW_TEXTS
    for memo in (decision._lex_memo, rows):
        assert memo and all(isinstance(k, bytes) and len(k) == 16 for k in memo)
        assert private not in memo and not any(b"alice" in k for k in memo)
    assert decision.lexical_row(private) is first  # found by its digest
    for i in range(decision.LEX_ROW_TEXTS - 1):
        decision.lexical_row(f"filler {i}")
    assert decision.lexical_row(private) is first  # looked up last: the newest, kept
    decision.lexical_row("one more")
    decision.lexical_row("and another")
    assert len(rows) == decision.LEX_ROW_TEXTS and decision.lexical_row(private) is first
    for i in range(decision.LEX_ROW_TEXTS):
        decision.lexical_row(f"newer {i}")
    assert len(rows) == decision.LEX_ROW_TEXTS and decision.lexical_row(private) is not first  # let go, hashed again
    assert decision.lexical([]).shape == (0, decision.LEX_FEATURES)


# --- the prior, the explanation, fallbacks ---


def test_catalogue_prior_goes_live_and_explains_every_answer(big):
    fit = decision_prior_fit()
    assert fit is not None and fit.status == "live" and fit.source == "prior"
    assert DecisionHead.objects.filter(fit=fit, user_id=None).exists()
    assert DecisionFitEvent.objects.filter(fit=fit, action="prior").exists()
    # the catalogue's folds chose whether the head learns words; the stored head is the one chosen
    head = decision_head(fit.version, None)[0]
    assert head["W"].shape[0] == 384 + decision.LEX_FEATURES * fit.params["head_words"]
    r = resolve(text="please send an email to my manager")
    e = r.explanation
    assert e["rule"] == "prior" and e["fit_version"] == "prior" and e["version"] == fit.version
    assert 0.0 <= e["probability"] <= 1.0 and "cut" in e and "margin" in e and e["blocks"] == [] and e["penalties"] == {}
    assert r.candidates[0].verb == "email.send"
    assert r.outcome == (
        "resolved" if e["cut"] is not None and e["probability"] >= e["cut"] and e["top_cos"] >= e["min_top_cos"] else "ambiguous"
    )


def test_each_tenant_counts_its_own_fits_and_decides_with_its_own_head(big):
    """A second tenant fits its own prior (version 1 too, not a clash with the first tenant's v1) and its resolves
    use its own fit and head, never a head another tenant's fit of the same version left in the process."""
    from tenants.context import tenant_scope
    from tenants.selectors import tenant_default
    from tenants.services import tenant_create

    home, other = tenant_default(), tenant_create(slug="second")
    with tenant_scope([home.pk]):
        first = decision_prior_fit()
        assert resolve(text="send an email to bob").explanation["version"] == first.version == 1
    with tenant_scope([other.pk]):
        verb_catalogue_load(entries=[VerbEntry(e.name.replace("cbu.", "unit."), e.domain, "", "", e.phrases) for e in BIG])
        second = decision_prior_fit()
        assert second.version == 1 and second.tenant_id == other.pk
        r = resolve(text="show my client business units")
        assert r.explanation["version"] == 1 and r.candidates[0].verb == "unit.list"
        assert {c.verb for c in r.candidates} <= {e.name.replace("cbu.", "unit.") for e in BIG}
        assert "unit.list" in decision_head(1, None)[1]
        assert decision_prior_fit().version == 2
    with tenant_scope([home.pk]):
        assert DecisionFit.objects.get(status="live").version == 1
        assert resolve(text="show my client business units").candidates[0].verb == "cbu.list"
        assert "cbu.list" in decision_head(1, None)[1]


def test_floors_are_quantiles_of_the_cosines_between_phrases_of_different_verbs():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 16)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    verbs = np.repeat(np.arange(6), 10)
    S = X @ X.T
    i, j = np.triu_indices(60, 1)
    cross = S[i, j][verbs[i] != verbs[j]]  # 1,500 pairs; same-verb pairs never count
    got = decision.floors(X, verbs, {"min_score": 0.75, "blocklist_threshold": 0.999, "correction_decay_threshold": 0.9999})
    assert got["min_score"] == pytest.approx(np.quantile(cross, 0.75), abs=1e-4)
    assert got["blocklist_threshold"] == pytest.approx(np.quantile(cross, 0.999), abs=1e-4)
    assert "correction_decay_threshold" not in got  # 1,500 pairs cannot resolve a 1-in-10,000 quantile
    # a domain whose unrelated phrases sit closer together gets higher floors
    tight = X + 2.0 * rng.normal(size=(1, 16)).astype(np.float32)
    tight /= np.linalg.norm(tight, axis=1, keepdims=True)
    assert decision.floors(tight, verbs, {"min_score": 0.75})["min_score"] > got["min_score"]
    # more anchors than the sample: a fixed sample, the same answer twice
    sampled = decision.floors(X, verbs, {"min_score": 0.75}, sample=30)
    assert sampled == decision.floors(X, verbs, {"min_score": 0.75}, sample=30) and sampled["min_score"] != got["min_score"]
    assert decision.floors(X[:10], np.zeros(10), {"min_score": 0.75}) == {}  # one verb: nothing to measure


def test_the_prior_measures_the_deployments_floors_and_the_resolver_applies_them(
    big, settings, django_capture_on_commit_callbacks
):
    from learning.resolution import profile

    assert profile()["min_score"] == settings.RESOLUTION_PROFILES["default"]["min_score"]  # no prior yet: seed values
    with django_capture_on_commit_callbacks(execute=True):  # the fit clears the cached state once it commits
        fit = decision_prior_fit()
    floors = fit.params["floors"]
    # 25 phrases, 250 pairs of different verbs: enough for the 75% and 95% quantiles, not for 1 in 1,000
    assert set(floors) == {"min_score", "learned_threshold"}
    assert 0.0 < floors["min_score"] < floors["learned_threshold"] < 1.0
    assert "floors min_score" in fit.note
    p = profile()
    assert {k: p[k] for k in floors} == floors
    for unresolved in ("blocklist_threshold", "correction_decay_threshold", "evidence_similarity", "decide_similarity"):
        assert p[unresolved] == settings.RESOLUTION_PROFILES["default"][unresolved]
    # the resolver offers semantic candidates down to the measured floor, not the seed's
    r = resolve(text="please send an email to my manager")
    semantic = [c.score for c in r.candidates if c.source != "head"]
    assert all(s >= floors["min_score"] for s in semantic)
    assert any(s < settings.RESOLUTION_PROFILES["default"]["min_score"] for s in semantic)  # the seed would drop it
    assert r.explanation["version"] == fit.version
    # an operator's RESOLVE_<NAME> still wins; the floors follow the newest prior, live or not
    settings.RESOLUTION_OVERRIDES = {"min_score": 0.42}
    assert profile()["min_score"] == 0.42
    settings.RESOLUTION_OVERRIDES = {}
    settings.RESOLVE_FLOOR_QUANTILES = {**settings.RESOLVE_FLOOR_QUANTILES, "min_score": 0.5}
    with django_capture_on_commit_callbacks(execute=True):
        again = decision_prior_fit()
    assert (
        again.params["floors"]["min_score"] < floors["min_score"]
        and profile()["min_score"] == again.params["floors"]["min_score"]
    )
    # a damaged value is skipped (that floor keeps the seed value), never a 500
    DecisionFit.objects.filter(pk=again.pk).update(
        params={**again.params, "floors": {"min_score": "low", "learned_threshold": 7.0, "blocklist_threshold": 0.61}}
    )
    decision_cache_clear()
    seed = settings.RESOLUTION_PROFILES["default"]
    p = profile()
    assert (p["min_score"], p["learned_threshold"], p["blocklist_threshold"]) == (
        seed["min_score"],
        seed["learned_threshold"],
        0.61,
    )
    DecisionFit.objects.filter(pk=again.pk).update(params={**again.params, "floors": "junk"})
    decision_cache_clear()
    assert profile()["min_score"] == seed["min_score"] and resolve(text="send an email to bob").candidates
    # another embedding model's prior says nothing about this model's cosines: this model's newest prior counts
    DecisionFit.objects.filter(pk=again.pk).update(embedding_model="another-model")
    decision_cache_clear()
    assert profile()["min_score"] == floors["min_score"]
    DecisionFit.objects.filter(source="prior").update(embedding_model="another-model")
    decision_cache_clear()
    assert profile()["min_score"] == settings.RESOLUTION_PROFILES["default"]["min_score"]


def test_loading_the_catalogue_or_importing_global_phrases_refits_the_prior(db, django_capture_on_commit_callbacks):
    from learning.importing import ImportRow
    from learning.services.imports import phrases_import

    with django_capture_on_commit_callbacks(execute=True):
        verb_catalogue_load(entries=BIG)
    prior = DecisionFit.objects.get(source="prior")
    assert prior.status == "live" and prior.params["floors"]
    with django_capture_on_commit_callbacks(execute=True):
        verb_catalogue_load(entries=BIG)  # nothing new: no refit
        phrases_import(rows=[ImportRow(number=1, phrase="show me my units", verb="cbu.list")], user_id="bob")  # a user's
    assert DecisionFit.objects.filter(source="prior").count() == 1
    with django_capture_on_commit_callbacks(execute=True):
        phrases_import(rows=[ImportRow(number=1, phrase="give me the units", verb="cbu.list")])
    newest = DecisionFit.objects.filter(source="prior").order_by("-version").first()
    assert newest.version > prior.version and newest.status == "live"


def test_the_top_verbs_best_anchor_says_whose_phrase_it_is(big):
    """The source tier of the top verb's best anchor: the catalogue (neither feature), a global learned phrase
    (top_is_learned), the asking user's own phrase (top_is_learned and top_is_own). Another user's phrase is never
    seen; the prior, fitted on no user's phrase, gives top_is_own no weight."""
    from learning.importing import ImportRow
    from learning.services.imports import phrases_import

    phrases_import(rows=[ImportRow(number=1, phrase="give me the units", verb="cbu.list")])
    phrases_import(rows=[ImportRow(number=1, phrase="show me my units", verb="cbu.list")], user_id="bob")
    prior = decision_prior_fit()
    assert prior.params["features"] == list(decision.FEATURES)
    assert prior.params["coef"][decision.FEATURES.index("top_is_own")] == 0.0
    learned, own = decision.FEATURES.index("top_is_learned"), decision.FEATURES.index("top_is_own")

    def tier(text, user_id):
        r = resolve(text=text, user_id=user_id)
        assert r.trace["top_verb"] == "cbu.list", r.trace
        return r.trace["features"][learned], r.trace["features"][own], r.trace["features_open"][own]

    assert tier("list all the cbus", "bob") == (0.0, 0.0, 0.0)  # the catalogue's phrase
    assert tier("show me my units please", "bob")[:2] == (1.0, 1.0)  # bob's own
    assert tier("give me the units please", "bob")[:2] == (1.0, 0.0)  # the deployment's, not bob's
    assert tier("show me my units please", "carol")[1] == 0.0  # bob's phrase is not carol's


def test_the_refit_replaces_a_stale_prior_and_keeps_a_current_one(big, settings):
    from learning.models import Verb

    settings.RESOLVE_PROMOTE_MIN_LABELS = 10**6  # no fit from labels here: only the prior's upkeep
    first = decision_prior_fit()
    assert first.params["anchors"] == 30
    assert decision_refit()["prior"] is None  # current: kept
    Verb.objects.filter(name="weather.get").update(is_active=False)  # 5 fewer anchors
    second = decision_refit()["prior"]
    assert second > first.version and DecisionFit.objects.get(version=second).params["anchors"] == 25
    # a prior from before floors were measured is refitted too
    DecisionFit.objects.filter(version=second).update(params={k: v for k, v in first.params.items() if k != "floors"})
    assert decision_refit()["prior"] > second


@pytest.mark.django_db(transaction=True)
def test_a_fit_waits_for_the_one_under_way_and_then_fits_what_is_there(settings):
    """Two fits of one tenant never overlap: one that started on older phrases cannot commit after a newer one."""
    import threading

    from django.db import connection

    from learning.services.decisions import decision_fits_serialised

    settings.RESOLVE_PROMOTE_MIN_LABELS = 10**6
    verb_catalogue_load(entries=BIG)
    before = DecisionFit.objects.filter(source="prior").count()
    held, release, done = threading.Event(), threading.Event(), []

    def hold():
        with decision_fits_serialised():
            held.set()
            release.wait(30)
        connection.close()

    def fit():
        done.append(decision_prior_fit())
        connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(10)
    waiter = threading.Thread(target=fit)
    try:
        waiter.start()
        waiter.join(1.5)
        assert waiter.is_alive() and not done  # waits for the fit under way
        assert DecisionFit.objects.filter(source="prior").count() == before
        from learning.models import Verb

        Verb.objects.filter(name="weather.get").update(is_active=False)  # the phrases change meanwhile
    finally:
        release.set()
        holder.join()
        waiter.join(60)
    assert done and done[0].params["anchors"] == 25  # it fitted what was there once it had the lock
    assert DecisionFit.objects.filter(source="prior").order_by("-version").first() == done[0]
    with decision_fits_serialised(), decision_fits_serialised():  # re-entrant (a refit fits the prior under it)
        assert decision_refit()["prior"] is None


def _fit_locks_held() -> int:
    from django.db import connection

    from learning.services.decisions import LOCK_NAMESPACE_FIT

    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND pid = pg_backend_pid()",
            [LOCK_NAMESPACE_FIT],
        )
        return cur.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_in_a_tenant_scope_the_fit_lock_ends_with_its_transaction_even_when_the_fit_fails(monkeypatch):
    """A task runs the fit inside its tenant's transaction: the lock is that transaction's, so the next fit reads
    what this one committed, and a failed statement (which aborts the transaction) cannot leave it held."""
    from django.db import DatabaseError, connection

    from learning import selectors
    from tenants.context import tenant_scope
    from tenants.selectors import tenant_default

    home = tenant_default()
    with tenant_scope([home.pk]):
        verb_catalogue_load(entries=BIG)
        assert decision_prior_fit() is not None
        assert _fit_locks_held() == 2  # the tenant's, and every tenant's key taken shared; held to the commit
    assert _fit_locks_held() == 0

    def failing(**kwargs):
        with connection.cursor() as cur:
            cur.execute("SELECT 1 / 0")  # aborts the transaction

    monkeypatch.setattr(selectors, "decision_anchor_rows", failing)
    with pytest.raises(DatabaseError), tenant_scope([home.pk]):
        decision_prior_fit()
    assert _fit_locks_held() == 0
    # outside a transaction (autocommit) the session's lock is released at the end
    monkeypatch.undo()
    decision_prior_fit()
    assert _fit_locks_held() == 0


@pytest.mark.django_db(transaction=True)
def test_a_fit_task_trains_in_its_tenants_scope_with_no_transaction_open(settings, monkeypatch):
    """A fit over many phrases trains for minutes: the task runs it in its sender's scope (the app's filter and
    row-level security) without one transaction around it, and stores the fit in a short one of its own."""
    from django.db import connection

    from common.tasks import task_send
    from tenants.context import tenant_scope
    from tenants.selectors import tenant_default
    from tenants.services import tenant_create
    from tenants.tasks import HEADER

    settings.RESOLVE_PROMOTE_MIN_LABELS = 10**6
    home, other = tenant_default(), tenant_create(slug="second")
    with tenant_scope([home.pk]):
        verb_catalogue_load(entries=BIG)
    with tenant_scope([other.pk]):
        verb_catalogue_load(entries=BIG[:3])
    from learning import selectors

    seen = []

    def watched(work):
        def run(*args, **kwargs):
            with connection.cursor() as cur:
                cur.execute("SELECT current_setting('app.tenant_ids'), count(*) FROM learning_verb")  # RLS alone
                seen.append((connection.in_atomic_block, *cur.fetchone()))
            return work(*args, **kwargs)

        return run

    monkeypatch.setattr(decision, "catalogue_priors", watched(decision.catalogue_priors))
    monkeypatch.setattr(selectors, "decision_labels", watched(selectors.decision_labels))
    with connection.cursor() as cur:
        cur.execute("SELECT current_setting('app.tenant_ids')")
        before = cur.fetchone()[0]
    fits = {}
    for t in (home, other):  # the loads above fitted a prior each already
        with tenant_scope([t.pk]):
            fits[t.pk] = DecisionFit.objects.count()
    task_send("learning.decision_prior_fit", headers={HEADER: str(home.pk)})
    assert seen == [(False, str(home.pk), len(BIG))]  # no transaction open; this tenant's rows only
    with connection.cursor() as cur:
        cur.execute("SELECT current_setting('app.tenant_ids')")
        assert cur.fetchone()[0] == before  # the connection's scope is put back
    assert _fit_locks_held() == 0
    with tenant_scope([home.pk]):
        assert DecisionFit.objects.count() == fits[home.pk] + 1
        assert DecisionFit.objects.order_by("-version").first().params["anchors"] == len(BIG) * 5
    with tenant_scope([other.pk]):
        assert DecisionFit.objects.count() == fits[other.pk]
    task_send("learning.decision_refit", headers={HEADER: str(other.pk)})  # the refit runs the same way
    assert seen[-1] == (False, str(other.pk), 3)


def test_the_fit_decision_command_fits_one_tenants_decision(big, capsys):
    from django.core.management import CommandError, call_command

    before = DecisionFit.objects.filter(source="prior").count()
    call_command("fit_decision", "--prior")
    assert DecisionFit.objects.filter(source="prior").count() == before + 1
    assert "prior folds" in capsys.readouterr().err  # a fit can take minutes: the command shows its progress
    with pytest.raises(CommandError):
        call_command("fit_decision", "--tenant", "nobody")


def test_a_prior_that_cannot_be_fitted_is_not_attempted_again_until_the_phrases_change(db, settings, monkeypatch):
    """One phrase a verb: every fold asks for a verb it holds out, so no prior fits; the refit every 200 labels must
    not pay for that fit again and again, only once the phrases change."""
    from learning.models import Verb

    settings.RESOLVE_PROMOTE_MIN_LABELS = 10**6
    entries = [VerbEntry(f"{e.name}.{i}", e.domain, "", "", [p]) for e in BIG for i, p in enumerate(e.phrases)]
    verb_catalogue_load(entries=entries)
    calls = []
    real = decision.catalogue_priors
    monkeypatch.setattr(decision, "catalogue_priors", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert decision_refit()["prior"] is None and calls  # attempted: no prior fits one phrase a verb
    tried = len(calls)
    assert decision_refit()["prior"] is None and len(calls) == tried  # the same phrases: not attempted again
    Verb.objects.filter(name="weather.get.0").update(is_active=False)
    decision_refit()
    assert len(calls) > tried  # the phrases changed: attempted again
    assert decision_prior_fit() is None and len(calls) > tried + 1  # asked for directly, it always tries


def test_the_all_tenants_prior_task_goes_on_past_a_failing_tenant(big, monkeypatch):
    from learning import tasks
    from tenants.context import tenant_current_id, tenant_scope
    from tenants.selectors import tenant_default
    from tenants.services import tenant_create

    home, other = tenant_default(), tenant_create(slug="second")
    with tenant_scope([other.pk]):
        verb_catalogue_load(entries=[VerbEntry(e.name.replace("cbu.", "unit."), e.domain, "", "", e.phrases) for e in BIG])
    real = tasks.decision_prior_fit

    def failing_at_home(**kwargs):
        if tenant_current_id() == home.pk:
            raise RuntimeError("the home tenant's fit fails")
        return real(**kwargs)

    monkeypatch.setattr(tasks, "decision_prior_fit", failing_at_home)
    out = tasks.decision_prior_fit_task()
    assert out[home.pk] == "error" and out[other.pk] == 1
    with tenant_scope([other.pk]):
        assert DecisionFit.objects.get(source="prior").params["floors"]


def test_tiny_catalogue_has_no_prior_and_the_fixed_rule_says_so(catalogue):
    assert decision_prior_fit() is None
    r = resolve(text="List all CBUs!")
    assert (r.outcome, r.verb, r.explanation["rule"]) == ("resolved", "cbu.list", "fixed")


def test_corrupt_live_fit_falls_back_to_the_prior_never_a_500(big):
    prior = decision_prior_fit()
    bad = DecisionFit.objects.create(
        version=prior.version + 1,
        source="labels",
        status="candidate",
        embedding_model=prior.embedding_model,
        params={"features": ["junk"]},
    )
    DecisionFit.objects.filter(pk=prior.pk).update(status="retired")
    DecisionFit.objects.filter(pk=bad.pk).update(status="live")
    decision_cache_clear()
    r = resolve(text="what is the weather like")
    assert r.explanation["rule"] == "prior" and r.degraded_reason.startswith(f"decision fit v{bad.version} unusable")
    DecisionHead.objects.filter(fit=prior).update(weights=b"garbage")
    decision_cache_clear()
    api = make_client(["resolve"])
    response = api.post(URL, {"text": "what is the weather like"}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert body["explanation"]["rule"] == "fixed" and "unusable" in body["degraded_reason"]


# --- records and labels ---


def test_every_resolution_is_recorded_and_labelled_by_the_users_answer(big):
    decision_prior_fit()
    api = make_client(["resolve", "feedback"])
    body = api.post(URL, {"text": "will it rain today", "user_id": "alice"}, format="json").json()
    assert "explanation" in body and "trace" not in body
    row = ResolutionRecord.objects.get(request_id=body["request_id"])
    assert row.user_id == "alice" and row.rule == "prior" and len(row.features) == len(decision.FEATURES)
    assert row.label is None
    phrase_confirmation_apply(text="will it rain today", verb=row.top_verb, user_id="alice")
    row.refresh_from_db()
    assert (row.label, row.label_source, row.gold_verb) == (True, "confirmation", row.top_verb)

    api.post(URL, {"text": "mail the weather report", "user_id": "alice"}, format="json")
    wrong = ResolutionRecord.objects.filter(normalized="mail the weather report").get()
    correct = "document.search" if wrong.top_verb != "document.search" else "email.send"
    phrase_correction_apply(text="mail the weather report", wrong_verb=wrong.top_verb, correct_verb=correct, user_id="alice")
    wrong.refresh_from_db()
    assert (wrong.label, wrong.label_source, wrong.gold_verb) == (False, "correction", correct)


def test_a_record_from_the_plain_insert_reads_back_as_the_orm_would_write_it(big):
    """Records are written with common.db.row_insert: every field as the ORM prepares it (defaults, JSON, the
    creation time, the tenant from the database default, the agent)."""
    from agents.models import Agent
    from common.db import row_insert
    from tenants.selectors import tenant_default

    decision_prior_fit()
    agent = Agent.objects.create(name="recorder")
    r = resolve(text="send an email to bob", user_id="bea")
    before = timezone.now()
    record = ResolutionRecord(
        request_id=uuid.UUID(r.request_id), agent=agent, user_id="bea", text=r.text, normalized="send an email to bob",
        outcome=r.outcome, rule="prior", features=r.trace["features"], penalties={"email.send": 0.1},
    )  # fmt: skip
    row_insert(record)
    row = ResolutionRecord.objects.get(pk=record.pk)
    assert row.tenant_id == tenant_default().pk and row.agent_id == agent.pk and row.user_id == "bea"
    assert row.features == r.trace["features"] and row.penalties == {"email.send": 0.1}
    assert row.top_verbs == [] and row.blocks == [] and row.domain == "" and row.label is None
    assert before <= row.created_at <= timezone.now() and not record._state.adding


def test_the_record_keeps_the_answers_whole_explanation(big, settings):
    decision_prior_fit()
    api = make_client(["resolve"])
    body = api.post(URL, {"text": "send an email to bob", "user_id": "bea"}, format="json").json()
    row = ResolutionRecord.objects.get(request_id=body["request_id"])
    assert row.explanation == body["explanation"]
    assert body["explanation"]["max_wrong_rate"] == settings.RESOLVE_MAX_WRONG_RATE
    assert {"top_cos", "min_top_cos", "name_margin", "cut", "probability"} <= set(row.explanation)
    # a number JSON cannot hold is stored as null, never a failed record
    from learning.services.decisions import resolution_row

    r = resolve(text="send an email to bob")
    r.explanation = {**r.explanation, "probability": float("nan"), "odd": [np.float32(0.5), np.int64(3), np.bool_(True)]}
    stored = resolution_row(resolution=r).explanation
    assert stored["probability"] is None and stored["odd"] == [0.5, 3, True]


def test_a_process_of_the_code_before_the_explanation_column_still_stores_its_records(big):
    """During a rolling upgrade, processes of the code before it insert records without the column: the insert
    succeeds and the record reads back with no explanation."""
    from django.db import connection

    from common.db import _insert_statement
    from learning.services.decisions import resolution_row

    record = resolution_row(resolution=resolve(text="send an email to bob"))
    sql, values = _insert_statement(record)
    columns = sql[sql.index("(") + 1 : sql.index(")")].split(", ")
    keep = [i for i, c in enumerate(columns) if c != '"explanation"']
    assert len(keep) == len(columns) - 1
    table = ResolutionRecord._meta.db_table
    old_sql = (
        f'INSERT INTO "{table}" ({", ".join(columns[i] for i in keep)}) VALUES ({", ".join(["%s"] * len(keep))}) RETURNING "id"'
    )
    with connection.cursor() as cursor:
        cursor.execute(old_sql, [values[i] for i in keep])
        pk = cursor.fetchone()[0]
    assert ResolutionRecord.objects.get(pk=pk).explanation is None


@pytest.mark.parametrize("prepared", [True, False])
def test_an_ambiguous_answer_stores_its_two_rows_in_one_round_trip_with_the_commit_setting(big, prepared):
    """resolution_store: the disambiguation request and the resolution record go in one pipeline with the SET LOCAL
    line before them (common.db.rows_insert; with prepared statements off, one statement each), and both read back."""
    from django.db import connection, transaction

    from learning.models import DisambiguationRequest
    from learning.services.disambiguations import resolution_store

    r = resolve(text="send an email to bob", user_id="bea")
    r.outcome = "ambiguous"  # whatever this text resolves to: store it as an ambiguous answer
    connection.ensure_connection()
    threshold = connection.connection.prepare_threshold
    in_pipeline = []

    def watch(execute, sql, params, many, context):
        in_pipeline.append((sql.split()[0], connection.connection._pipeline is not None))
        return execute(sql, params, many, context)

    try:
        connection.connection.prepare_threshold = 0 if prepared else None
        with transaction.atomic(), connection.execute_wrapper(watch):
            resolution_store(resolution=r, domain="mail")
            with connection.cursor() as cursor:
                cursor.execute("SELECT current_setting('synchronous_commit')")
                assert cursor.fetchone()[0] == "off"
    finally:
        connection.connection.prepare_threshold = threshold
    if prepared:
        assert in_pipeline[:-1] == [("SET", True), ("INSERT", True), ("INSERT", True)]
    else:
        assert not any(piped for _, piped in in_pipeline)
    request = DisambiguationRequest.objects.get(request_id=uuid.UUID(r.request_id))
    record = ResolutionRecord.objects.get(request_id=uuid.UUID(r.request_id))
    assert (request.user_id, request.domain, request.status) == ("bea", "mail", "open")
    assert (record.outcome, record.domain, record.user_id) == ("ambiguous", "mail", "bea")


@pytest.mark.parametrize("prepared", [True, False])
def test_rows_sent_together_fail_together(big, prepared):
    """common.db.rows_insert: a row the database refuses (a request id stored already) fails the call as Django's own
    error, and the transaction it ran in keeps neither row."""
    from django.db import IntegrityError, connection, transaction

    from common.db import rows_insert
    from learning.models import DisambiguationRequest

    taken = uuid.uuid4()
    DisambiguationRequest.objects.create(request_id=taken, text="x", normalized="x", options=[])
    connection.ensure_connection()
    threshold = connection.connection.prepare_threshold
    fresh = uuid.uuid4()
    try:
        connection.connection.prepare_threshold = 0 if prepared else None
        with pytest.raises(IntegrityError), transaction.atomic():
            rows_insert(
                [
                    ResolutionRecord(request_id=fresh, text="y", normalized="y", outcome="resolved"),
                    DisambiguationRequest(request_id=taken, text="x", normalized="x", options=[]),
                ]
            )
    finally:
        connection.connection.prepare_threshold = threshold
    assert not ResolutionRecord.objects.filter(request_id=fresh).exists()
    assert DisambiguationRequest.objects.filter(request_id=taken).count() == 1


@pytest.mark.parametrize("binding", ["client", "server"])
def test_a_statement_and_its_set_local_lines_travel_together_and_the_settings_hold(db, binding):
    """common.db.rows_fetch: the statement's own rows come back, the SET LOCAL lines before it apply to it and
    those after it to what follows, with client-side binding (one simple query) and server-side (one each)."""
    import psycopg
    from django.db import connection, transaction
    from django.db.backends.utils import CursorWrapper

    from common.db import rows_fetch

    with transaction.atomic():
        connection.ensure_connection()
        cls = psycopg.ClientCursor if binding == "client" else psycopg.Cursor
        cursor = CursorWrapper(cls(connection.connection), connection)
        rows = rows_fetch(
            cursor,
            "SELECT current_setting('enable_sort'), %s::int + 1",
            [41],
            before=("SET LOCAL enable_sort = off", "SET LOCAL synchronous_commit TO OFF"),
            after=("SET LOCAL enable_sort = on",),
        )
        assert rows == [("off", 42)]
        cursor.execute("SELECT current_setting('enable_sort'), current_setting('synchronous_commit')")
        assert cursor.fetchone() == ("on", "off")
        assert rows_fetch(cursor, "SELECT %s::text", ["plain"]) == [("plain",)]


def test_a_query_vector_goes_in_pgvectors_binary_form_to_a_prepared_statement_and_as_text_otherwise(db):
    from django.db import connection, transaction

    from common.db import VectorParam, rows_fetch

    vector = VectorParam(np.random.default_rng(1).normal(size=384))
    sql = "SELECT %(q)s::vector::text, vector_dims(%(q)s::vector), %(q)s::vector <=> %(t)s::vector"
    params = {"q": vector, "t": vector.literal()}
    with transaction.atomic(), connection.cursor() as cursor:
        binary = rows_fetch(cursor, sql, params, prepared=True)
        text = rows_fetch(cursor, sql, params)
    assert binary[0][0] == text[0][0] and binary[0][1] == text[0][1] == 384
    assert binary[0][2] == pytest.approx(0.0, abs=1e-6) and text[0][2] == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("keeps_prepared", [True, False])
def test_a_prepared_statement_runs_from_its_plan_with_its_lines_and_without_one_when_turned_off(db, keeps_prepared):
    """rows_fetch(prepared=True): the statement is prepared once per connection and its SET LOCAL lines travel in
    the same pipeline; with DB_PREPARED_STATEMENTS off (no prepare threshold) it runs as any other statement."""
    from django.db import connection, transaction

    from common.db import rows_fetch

    connection.ensure_connection()
    raw = connection.connection
    saved = raw.prepare_threshold
    raw.prepare_threshold = saved if keeps_prepared else None
    sql = "SELECT current_setting('enable_sort'), %s::int * 2 AS prepared_probe"
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            for n in range(3):
                rows = rows_fetch(
                    cursor,
                    sql,
                    [n],
                    before=("SET LOCAL enable_sort = off",),
                    after=("SET LOCAL enable_sort = on",),
                    prepared=True,
                )
                assert rows == [("off", 2 * n)]
            cursor.execute("SELECT current_setting('enable_sort')")
            assert cursor.fetchone()[0] == "on"
            cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE '%%prepared_probe%%'")
            assert cursor.fetchone()[0] == (1 if keeps_prepared else 0)
    finally:
        raw.prepare_threshold = saved


def test_clicks_and_abandons_label_by_request_id(big, settings, written_for_floors):
    settings.RESOLVE_DECISION = "fixed"
    settings.RESOLUTION_OVERRIDES = {**settings.RESOLUTION_OVERRIDES, "resolve_threshold": 1.01}  # always ask
    api = make_client(["resolve", "feedback"])
    a = api.post(URL, {"text": "find the report", "user_id": "bob"}, format="json").json()
    b = api.post(URL, {"text": "schedule something", "user_id": "bob"}, format="json").json()
    top = a["options"][0]["verb"]
    other = a["options"][1]["verb"] if len(a["options"]) > 1 else top
    disambiguation_select(request_id=a["request_id"], selected_verb=other, agent_id=api.agent.pk, user_id="bob")
    disambiguation_abandon(request_id=b["request_id"], reason="typed_new_input", agent_id=api.agent.pk)
    ra, rb = ResolutionRecord.objects.get(request_id=a["request_id"]), ResolutionRecord.objects.get(request_id=b["request_id"])
    assert (ra.label, ra.label_source, ra.gold_verb) == (other == top, "click", other)
    assert (rb.label, rb.label_source) == (False, "abandon")


def test_purge_keeps_recent_records(big):
    decision_prior_fit()
    resolve_and_record = make_client(["resolve"])
    resolve_and_record.post(URL, {"text": "book a meeting"}, format="json")
    resolve_and_record.post(URL, {"text": "find a document"}, format="json")
    ResolutionRecord.objects.filter(normalized="book a meeting").update(created_at=timezone.now() - datetime.timedelta(days=91))
    assert resolution_records_purge() == 1
    assert ResolutionRecord.objects.count() == 1
    with pytest.raises(ApplicationError, match="must be 1 to 36500 days"):
        resolution_records_purge(days=0)  # would delete every label as it arrives
    assert ResolutionRecord.objects.count() == 1


# --- refit, shadow, promotion, pin, roll back ---


def labelled_records(F, y, fit, shadow=None) -> None:
    """One labelled resolution per feature row of ``F`` (label ``y``), answered by ``fit``; with ``shadow``, that
    fit judged them too (it asked where the label says the top verb was wrong)."""
    ResolutionRecord.objects.bulk_create(
        _labelled_record(
            f"t{i}",
            bool(y[i]),
            outcome="ambiguous",
            rule="prior",
            features=list(F[i]),
            features_open=list(np.asarray(F[i]) - 2),
            fit_version=fit.version,
            shadow_version=shadow.version if shadow else None,
            shadow_outcome=("resolved" if y[i] else "ambiguous") if shadow else "",
            shadow_verb="x" if shadow else "",
            shadow_label=bool(y[i]) if shadow else None,
        )
        for i in range(len(y))
    )


def _labelled_record(text: str, label: bool, **fields) -> ResolutionRecord:
    """A resolution of ``text`` the user answered (``label``: the top verb was right), not yet stored."""
    return ResolutionRecord(
        request_id=uuid.uuid4(), text=text, normalized=text, label=label, labelled_at=timezone.now(), **fields
    )


def _labelled(n, rng, prior):
    """``n`` labelled resolutions answered by ``prior``, judged by the fit in shadow if one runs."""
    F, y = _synthetic(n, seed=int(rng.integers(1000)))
    labelled_records(F.tolist(), y, prior, DecisionFit.objects.filter(status="shadow").first())


def test_a_fit_runs_in_shadow_then_goes_live_and_a_reviewer_can_pin_and_roll_back(big, settings):
    prior = decision_prior_fit()
    rng = np.random.default_rng(0)
    _labelled(100, rng, prior)
    out = decision_refit()
    assert out["shadow"] is None and "labels" in out["reason"]  # never on fewer than the minimum
    _labelled(300, rng, prior)
    out = decision_refit()
    shadow = DecisionFit.objects.get(version=out["shadow"])
    assert shadow.status == "shadow" and shadow.n_labels == 400 and shadow.in_use_version == prior.version
    assert shadow.held_out["wrong"] <= settings.RESOLVE_MAX_WRONG_RATE and shadow.held_out_in_use
    assert DecisionHead.objects.filter(fit=shadow, user_id=None).exists()
    decision_cache_clear()
    r = resolve(text="send an email")
    assert r.explanation["rule"] == "prior" and r.trace["shadow_version"] == shadow.version  # shadow answers recorded
    assert not decision_refit()["promoted"]  # no label has judged it in shadow yet
    shadow = DecisionFit.objects.get(status="shadow")
    _labelled(50, rng, prior)  # labels arrive while it runs in shadow
    out = decision_refit()
    shadow.refresh_from_db()
    assert out["promoted"] == shadow.version and shadow.status == "live"
    assert DecisionFitEvent.objects.filter(fit=shadow, action="promoted", previous_version=prior.version).exists()
    decision_cache_clear()
    assert resolve(text="send an email").explanation["fit_version"] == shadow.version

    rolled = decision_fit_retire_live()
    assert rolled.pk == prior.pk and rolled.status == "live" and rolled.pinned
    shadow.refresh_from_db()
    assert shadow.status == "retired"
    out = decision_refit()  # a new shadow, but nothing replaces a pinned fit
    assert DecisionFit.objects.get(status="live").pk == prior.pk
    pinned = decision_fit_pin(fit=shadow)
    assert pinned.status == "live" and DecisionFitEvent.objects.filter(fit=shadow, action="rolled_back").exists()


def test_a_new_fit_is_compared_with_the_fit_in_use_on_labels_neither_learned_from(big, client, django_user_model):
    prior = decision_prior_fit()
    rng = np.random.default_rng(5)
    _labelled(400, rng, prior)
    first = DecisionFit.objects.get(version=decision_refit()["shadow"])
    # the prior learned from no label: it is judged on all of them, and so is the new fit (out of fold)
    assert first.held_out_in_use["n"] == 400 and first.params["held_out_judged"]["n"] == 400
    assert first.params["held_out_judged"]["wrong"] == first.held_out["wrong"]
    _labelled(50, rng, prior)
    assert decision_refit()["promoted"] == first.version
    _labelled(250, rng, prior)
    second = DecisionFit.objects.get(version=decision_refit()["shadow"])
    in_use = DecisionFit.objects.get(version=second.in_use_version, source="labels")
    assert second.n_labels == 700 and in_use.n_labels == 450  # the shadow fitted with the promotion went live since
    # the fit in use learned from the first 450: only the 250 labels given since it was made compare the two
    unseen = ResolutionRecord.objects.filter(label__isnull=False, created_at__gt=in_use.created_at).count()
    assert unseen == 250
    assert second.held_out_in_use["n"] == unseen and second.params["held_out_judged"]["n"] == unseen
    su = django_user_model.objects.create_superuser("fits-admin", "a@example.com", "pw")
    client.force_login(su)
    page = client.get("/admin/learning/decisionfit/")
    assert page.status_code == 200 and f"{unseen} labels: right".encode() in page.content
    # a damaged stored figure shows "-" and never breaks the list
    for params, in_use_figures in (
        ({**second.params, "held_out_judged": {"n": unseen}}, second.held_out_in_use),
        (second.params, {**second.held_out_in_use, "right": "x"}),
        ([1], second.held_out_in_use),
        (second.params, [1]),
        ({**second.params, "held_out_judged": {**second.params["held_out_judged"], "n": unseen + 1}}, second.held_out_in_use),
    ):
        DecisionFit.objects.filter(pk=second.pk).update(params=params, held_out_in_use=in_use_figures)
        page = client.get("/admin/learning/decisionfit/")
        assert page.status_code == 200 and f"{unseen} labels: right".encode() not in page.content


def _exact_answers(n_right: int, n_wrong: int) -> None:
    ResolutionRecord.objects.bulk_create(
        _labelled_record(f"e{i}", i < n_right, outcome="resolved", rule="exact", verb="v", top_verb="v")
        for i in range(n_right + n_wrong)
    )


def test_each_fit_reports_how_often_trusted_exact_phrases_answered_wrong(big, client, django_user_model, settings, caplog):
    """No fit gates a trusted exact phrase's answer: a refit counts those answers among the newest labels, says when
    they are wrong more often than the target (logged, flagged in the admin), and never fits on them."""
    prior = decision_prior_fit()
    rng = np.random.default_rng(7)
    _labelled(300, rng, prior)
    _exact_answers(97, 3)  # 3% wrong: not shown above the 3% target
    first = DecisionFit.objects.get(version=decision_refit()["shadow"])
    assert first.params["exact_answers"] == {"n": 100, "right": 97, "wrong": 3, "above_target": False}
    assert first.n_labels == 300  # the exact answers carry no features: no fit learns from them
    _exact_answers(30, 20)
    _labelled(250, rng, prior)
    with caplog.at_level("WARNING", logger="learning.services.decisions"):
        second = DecisionFit.objects.get(version=decision_refit(force=True)["shadow"])
    assert second.params["exact_answers"] == {"n": 150, "right": 127, "wrong": 23, "above_target": True}
    assert "trusted exact phrases answered wrong 23 of 150" in caplog.text
    su = django_user_model.objects.create_superuser("exact-admin", "e@example.com", "pw")
    client.force_login(su)
    page = client.get("/admin/learning/decisionfit/").content.decode()
    assert "3 wrong of 100 (3.0%)" in page and "23 wrong of 150 (15.3%) (above the target)" in page
    DecisionFit.objects.filter(pk=second.pk).update(params={**second.params, "exact_answers": {"n": 1, "wrong": 5}})
    page = client.get("/admin/learning/decisionfit/")
    assert page.status_code == 200 and b"wrong of 1 " not in page.content  # damaged figures show "-"


def test_pinning_and_rolling_back_in_a_scope_of_every_tenant_change_only_the_fits_tenant(big):
    """A superuser's admin sees every tenant: a pin retires only the live fit of the pinned fit's tenant, and a roll
    back names the tenant it rolls back."""
    from common.api import ApplicationError
    from tenants.context import ALL, tenant_scope
    from tenants.services import tenant_create

    prior = decision_prior_fit()
    other = tenant_create(slug="other")
    copy = {"source": "prior", "embedding_model": prior.embedding_model, "params": prior.params, "tenant": other}
    with tenant_scope([other.pk]):
        other_prior = DecisionFit.objects.create(version=1, status="live", **copy)
        other_fit = DecisionFit.objects.create(
            version=2, status="retired", n_labels=500, held_out={"right": 0.9, "wrong": 0.02, "asked": 0.08},
            **{**copy, "source": "labels"},
        )  # fmt: skip
    with tenant_scope(ALL):
        assert decision_fit_pin(fit=other_fit).status == "live"
        with pytest.raises(ApplicationError, match="name the tenant"):
            decision_fit_retire_live()
        assert decision_fit_retire_live(tenant_id=other.pk).pk == other_prior.pk
    prior.refresh_from_db()
    assert prior.status == "live" and not prior.pinned  # the default tenant's decision never moved
    assert DecisionFit.objects.filter(tenant=other, status="live").get().pk == other_prior.pk
    assert decision_fit_pin(fit=prior).pinned and decision_fit_pin(fit=prior).pinned  # pinning twice: one event
    assert DecisionFitEvent.objects.filter(fit=prior, action="pinned").count() == 1


def test_old_retired_fits_lose_their_heads_and_can_no_longer_be_pinned(big, settings):
    from common.api import ApplicationError

    prior = decision_prior_fit()
    rng = np.random.default_rng(2)
    versions = []
    for _ in range(4):
        _labelled(250, rng, prior)
        versions.append(decision_refit()["shadow"])
    fits = {f.version: f for f in DecisionFit.objects.all()}
    assert decision_heads_prune(keep=2) >= 1
    for f in DecisionFit.objects.all():
        has_heads = DecisionHead.objects.filter(fit=f).exists()
        newest_two = f.version >= sorted(fits)[-2]
        kept = f.source == "prior" or f.status in ("live", "shadow") or newest_two
        assert has_heads == kept and (f.heads_pruned_at is None) == kept, f
    pruned = DecisionFit.objects.filter(heads_pruned_at__isnull=False).first()
    with pytest.raises(ApplicationError, match="heads were deleted"):
        decision_fit_pin(fit=pruned)
    assert DecisionHead.objects.filter(fit=prior).exists() and decision_fit_retire_live().pk == prior.pk
    assert decision_heads_prune(keep=2) == 0  # nothing left to prune
    # a newer prior (the catalogue changed) supersedes the old one once the old one is no longer in use
    decision_fit_unpin(fit=prior)
    newer = decision_prior_fit()
    assert DecisionFit.objects.get(pk=prior.pk).status == "retired" and newer.status == "live"
    assert decision_heads_prune(keep=2) >= 1  # the old prior (and a fit from labels the new version pushed out)
    assert not DecisionHead.objects.filter(fit=prior).exists() and DecisionHead.objects.filter(fit=newer).exists()


def test_promotion_refuses_few_labels_a_high_wrong_rate_or_a_bad_shadow(settings):
    fit = DecisionFit(params={"cut": 0.5}, n_labels=150, held_out={"wrong": 0.01})
    assert not promotion_verdict(fit=fit)[0]
    fit.n_labels = 500
    assert not promotion_verdict(fit=fit)[0]  # no label judged it in shadow yet
    fit.shadow_figures = {"n": 50, "wrong": 0, "right": 40}
    assert promotion_verdict(fit=fit)[0]
    fit.held_out = {"wrong": 0.05}
    assert not promotion_verdict(fit=fit)[0]
    fit.held_out, fit.shadow_figures = {"wrong": 0.01}, {"n": 200, "wrong": 30, "right": 150}
    assert not promotion_verdict(fit=fit)[0]
    fit.params = {"cut": None}
    fit.shadow_figures = {}
    assert not promotion_verdict(fit=fit)[0]


def test_a_shadow_trial_of_a_few_labels_all_wrong_keeps_the_fit_out(settings):
    """The trial's bound is exact on a handful of labels: 2 wrong of 2 went live under the normal approximation
    (its bound was below zero whenever 2 or fewer were wrong)."""
    settings.RESOLVE_MAX_WRONG_RATE = 0.03
    fit = DecisionFit(params={"cut": 0.5}, n_labels=500, held_out={"wrong": 0.01})
    for wrong, n, live in [(2, 2, False), (3, 10, False), (1, 7, True), (0, 1, True), (8, 200, True), (12, 200, False)]:
        fit.shadow_figures = {"n": n, "wrong": wrong, "right": n - wrong}
        assert promotion_verdict(fit=fit)[0] is live, (wrong, n)


def test_labels_of_one_user_never_train_another_users_head(big, settings):
    from learning.models import Verb
    from learning.services.phrases import learned_phrase_upsert

    settings.RESOLVE_USER_HEAD_MIN_PHRASES = 3
    prior = decision_prior_fit()
    verb = Verb.objects.get(name="weather.get")
    for text in ["umbrella needed?", "sunny or not", "degrees outside now"]:
        learned_phrase_upsert(phrase=text, verb=verb, user_id="alice")
    _labelled(300, np.random.default_rng(1), prior)
    out = decision_refit()
    heads = {h.user_id: h.anchors for h in DecisionHead.objects.filter(fit__version=out["shadow"])}
    assert set(heads) == {None, "alice"}
    assert heads["alice"]["weather.get"] == heads[None]["weather.get"] + 3
    # the deployment's head learns words as the catalogue's folds chose; a user's head, on taught phrases, always
    decision_cache_clear()
    assert decision_head(out["shadow"], None)[0]["W"].shape[0] == 384 + decision.LEX_FEATURES * prior.params["head_words"]
    assert decision_head(out["shadow"], "alice")[0]["W"].shape[0] == 384 + decision.LEX_FEATURES
    assert resolution_label(source="click", request_id=uuid.uuid4()) is None


def _three_users_with_heads(settings):
    """The prior, and three users with enough phrases of their own for a personal head (answers the prior and
    the verb they taught)."""
    from learning.models import Verb
    from learning.services.phrases import learned_phrase_upsert

    settings.RESOLVE_USER_HEAD_MIN_PHRASES = 3
    prior = decision_prior_fit()
    verb = Verb.objects.get(name="weather.get")
    for user in ("alice", "bob", "carol"):
        for text in ["umbrella needed?", "sunny or not", f"degrees outside now for {user}"]:
            learned_phrase_upsert(phrase=text, verb=verb, user_id=user)
    return prior, verb


def test_a_refit_trains_only_the_heads_whose_phrases_changed_and_at_most_its_cap(big, settings, monkeypatch):
    """Every refit trained every user's head again over all shared phrases (28 users over 20,000 shared phrases:
    13 minutes a refit). A head trained on the same inputs is reused; a refit trains at most
    RESOLVE_USER_HEADS_PER_REFIT personal heads (no head first, then the least recently trained); the others keep
    their newest head while it covers the same verbs."""
    from learning.services.phrases import learned_phrase_upsert

    prior, verb = _three_users_with_heads(settings)
    from learning.services import decisions as fitting

    trained = []
    real = fitting._train_head
    monkeypatch.setattr(fitting, "_train_head", lambda *a, **k: trained.append(1) or real(*a, **k))

    def heads(version):
        return {h.user_id: h for h in DecisionHead.objects.filter(fit__version=version)}

    rng = np.random.default_rng(4)
    _labelled(300, rng, prior)
    first = heads(decision_refit()["shadow"])
    assert set(first) == {None, "alice", "bob", "carol"} and len(trained) == 3  # the deployment's: the prior's
    assert first[None].inputs_digest == DecisionHead.objects.get(fit=prior, user_id=None).inputs_digest
    assert len({h.inputs_digest for h in first.values()}) == 4
    learned_phrase_upsert(phrase="is it going to snow", verb=verb, user_id="bob")  # only bob's phrases change
    _labelled(300, rng, prior)
    second = heads(decision_refit()["shadow"])
    assert len(trained) == 4  # bob's head only
    for user in (None, "alice", "carol"):
        assert (bytes(second[user].weights), second[user].inputs_digest) == (
            bytes(first[user].weights),
            first[user].inputs_digest,
        )
    assert (
        second["bob"].inputs_digest != first["bob"].inputs_digest
        and second["bob"].anchors["weather.get"] == first["bob"].anchors["weather.get"] + 1
    )
    # a global phrase changes every head's inputs; with a cap of one personal head a refit, the other users keep theirs
    settings.RESOLVE_USER_HEADS_PER_REFIT = 1
    learned_phrase_upsert(phrase="will it be windy", verb=verb, user_id=None)
    _labelled(300, rng, prior)
    third = heads(decision_refit()["shadow"])
    assert len(trained) == 6  # the deployment's head and one user's
    assert set(third) == {None, "alice", "bob", "carol"}
    fresh = [u for u in ("alice", "bob", "carol") if third[u].inputs_digest != second[u].inputs_digest]
    assert len(fresh) == 1 and third[None].inputs_digest != second[None].inputs_digest
    _labelled(300, rng, prior)
    fourth = heads(decision_refit()["shadow"])
    assert len(trained) == 7  # the next user's, the others reused (up to date) or kept for the refit after
    assert len([u for u in ("alice", "bob", "carol") if fourth[u].inputs_digest != second[u].inputs_digest]) == 2
    # a new verb: a head kept past the cap would give it no probability at all, so the deployment's serves instead
    verb_catalogue_load(entries=[VerbEntry("tide.get", "weather", "", "", ["when is high tide", "tide times today"])])
    _labelled(300, rng, prior)
    fifth = heads(decision_refit()["shadow"])
    assert len(trained) == 9 and len(fifth) == 2 and None in fifth  # the deployment's and one user's (the oldest)
    assert all("tide.get" in h.anchors for h in fifth.values())


def test_a_new_personal_head_starts_from_the_deployments_head_of_the_same_refit(big, settings, monkeypatch):
    """A personal head trains on every shared anchor plus its user's few: trained from zero, each took as long as
    the deployment's head (about 20 s at 20,000 shared phrases, and a refit trains up to
    RESOLVE_USER_HEADS_PER_REFIT of them); from the deployment's head, which those shared anchors already
    trained, it converges in a few iterations. A user's own earlier head still comes first."""
    from learning.services import decisions as fitting
    from learning.services.phrases import learned_phrase_upsert

    prior, verb = _three_users_with_heads(settings)
    calls = {}  # user id -> (where its head started, the head): the heads of a refit, not the prior's folds
    scope = []
    real_train, real_head = fitting._train_head, fitting.decision.head_train

    def train_head(rows, user_id, *args, **kwargs):
        scope[:] = [user_id]
        try:
            return real_train(rows, user_id, *args, **kwargs)
        finally:
            scope.clear()

    def head_train(*args, **kwargs):
        head = real_head(*args, **kwargs)
        if scope:
            calls[scope[0]] = (kwargs.get("warm"), head)
        return head

    monkeypatch.setattr(fitting, "_train_head", train_head)
    monkeypatch.setattr(fitting.decision, "head_train", head_train)
    rng = np.random.default_rng(5)
    _labelled(300, rng, prior)
    first = decision_refit()["shadow"]
    # the deployment's head serves again (the prior's, read from the database): the three users' heads start from it
    assert set(calls) == {"alice", "bob", "carol"}
    decision_cache_clear()
    deployment, verbs = decision_head(first, None)[:2]
    width = 384 + decision.LEX_FEATURES
    expected = decision.head_warm_start(deployment, verbs, verbs, width)
    for warm, head in calls.values():
        np.testing.assert_array_equal(warm["W"], expected["W"])
        assert not np.allclose(head["W"], expected["W"])  # and learns its user's phrases from there
    # a global phrase: the deployment's head is trained first and a new user's head starts from it, while a
    # user with a head of their own in the fit in use starts from that
    decision_fit_pin(fit=DecisionFit.objects.get(version=first))
    decision_cache_clear()
    learned_phrase_upsert(phrase="will it be windy", verb=verb, user_id=None)
    for text in ["rain later?", "is it cold out", "forecast for the weekend"]:
        learned_phrase_upsert(phrase=text, verb=verb, user_id="dave")
    _labelled(300, rng, prior)
    calls.clear()
    second = decision_refit()["shadow"]
    decision_cache_clear()
    assert set(calls) - {None} == {"alice", "bob", "carol", "dave"}  # (None: the prior's head, fitted again)
    deployment, verbs = decision_head(second, None)[:2]
    np.testing.assert_array_equal(calls["dave"][0]["W"], decision.head_warm_start(deployment, verbs, verbs, width)["W"])
    alice, alice_verbs = decision_head(first, "alice")[:2]
    np.testing.assert_array_equal(calls["alice"][0]["W"], decision.head_warm_start(alice, alice_verbs, verbs, width)["W"])


def test_an_agent_that_reads_only_its_own_user_data_decides_without_personal_heads(big, settings):
    """A personal head learns from the user's phrases whatever agent wrote them; an agent with
    ``private_user_data`` reads only what it wrote, so it must not decide with that head."""
    from agents.services import agent_key_create
    from learning.models import Verb
    from learning.services.phrases import learned_phrase_upsert
    from tenants.context import acting_agent

    settings.RESOLVE_USER_HEAD_MIN_PHRASES = 3
    prior = decision_prior_fit()
    shared = agent_key_create(agent_name="shared", scopes=["resolve"])[0].agent
    private = agent_key_create(agent_name="private", scopes=["resolve"])[0].agent
    private.private_user_data = True
    private.save()
    verb = Verb.objects.get(name="weather.get")
    with acting_agent(shared):
        for text in ["umbrella needed?", "sunny or not", "degrees outside now"]:
            learned_phrase_upsert(phrase=text, verb=verb, user_id="alice")
    _labelled(300, np.random.default_rng(5), prior)
    version = decision_refit()["shadow"]
    decision_cache_clear()
    with acting_agent(shared):
        assert decision_head(version, "alice")[3] == "alice"
    with acting_agent(private):
        assert decision_head(version, "alice")[3] is None  # the deployment's head
        r = resolve(text="is it sunny outside", user_id="alice")
        assert r.trace["fit_version"] is not None


def test_a_process_keeps_at_most_its_budget_of_head_weights(big, settings):
    prior, verb = _three_users_with_heads(settings)
    _labelled(300, np.random.default_rng(3), prior)
    version = decision_refit()["shadow"]
    decision_cache_clear()
    one = decision_head(version, "alice")[0]["W"].nbytes
    assert head_cache_bytes() >= one
    settings.RESOLVE_HEAD_CACHE_MB = 2.5 * one / 2**20  # room for two heads
    decision_cache_clear()
    heads = {user: decision_head(version, user) for user in ("alice", "bob", "carol", None)}
    assert {h[3] for h in heads.values()} == {"alice", "bob", "carol", None}  # each scope its own head
    assert 2 * one <= head_cache_bytes() <= 2.5 * one  # the two read last; the others were let go
    again = decision_head(version, "alice")  # read again from the database, the same weights
    np.testing.assert_array_equal(again[0]["W"], heads["alice"][0]["W"])
    assert head_cache_bytes() <= 2.5 * one


def test_a_refit_due_is_never_run_inside_the_labelling_request(db, settings, monkeypatch, django_capture_on_commit_callbacks):
    """A refit due after N labels is sent once the label commits, never trained inline, and once: while it is
    queued the next labels do not send it again. With the broker down it is left for the next label."""
    from django.db import transaction

    from learning.services import decisions as decision_services

    sent, broker_up = [], {"up": False}

    def send(name, **kw):
        sent.append((name, kw))
        return broker_up["up"]

    monkeypatch.setattr(decision_services, "task_send", send)
    monkeypatch.setattr(decision_services, "cache", LocMemCache("refit-sent", {}))
    settings.RESOLVE_REFIT_EVERY_LABELS = 0

    def label():
        before = len(sent)
        with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
            decision_services._refit_if_due()
            assert len(sent) == before  # nothing is sent before the commit

    with pytest.raises(RuntimeError), django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        decision_services._refit_if_due()
        raise RuntimeError("the labelling request failed later")
    assert sent == []  # rolled back: nothing sent, nothing remembered
    label()  # the broker refuses it
    assert len(sent) == 1 and sent[0][0] == "learning.decision_refit"
    assert sent[0][1]["due"] is True and sent[0][1]["fallback_inline"] is False
    broker_up["up"] = True
    label()  # the next label sends it again
    assert len(sent) == 2
    label()  # queued already: not sent again for every further label
    assert len(sent) == 2


def test_a_candidate_only_the_classifier_head_proposes_is_documented_in_the_schema(big):
    """The head may propose a verb no phrase matched (source "head", score 0, no matched phrase): a real option,
    so the answer stays valid by the OpenAPI schema."""
    from jsonschema import Draft4Validator

    decision_prior_fit()
    api = make_client(["resolve"])
    body = api.post(URL, {"text": "rain"}, format="json").json()
    heads = [c for c in body["candidates"] if c["source"] == "head"]
    assert heads and all(c["score"] == 0.0 and c["matched_phrase"] == "" for c in heads)
    components = api.get("/api/schema/", {"format": "json"}).json()["components"]["schemas"]

    def resolved(prop):  # an enum is its own component, behind a $ref (or an allOf of one)
        ref = prop.get("$ref") or next((p["$ref"] for p in prop.get("allOf", []) if "$ref" in p), None)
        return components[ref.rsplit("/", 1)[-1]] if ref else prop

    properties = components["Candidate"]["properties"]
    assert "head" in resolved(properties["source"])["enum"]
    assert properties["source"].get("description") and "head" in properties["source"]["description"]
    for c in body["candidates"]:
        for name in ("source", "matched_phrase"):
            assert Draft4Validator(resolved(properties[name])).is_valid(c[name]), (name, c[name], properties[name])


def test_a_refit_sent_for_labels_that_another_refit_fitted_meanwhile_does_nothing(big, settings):
    """Refits sent one after another (a duplicate, the beat beside a label-sent one) neither fit the same labels again
    nor put the previous one's shadow live untried."""
    prior = decision_prior_fit()
    rng = np.random.default_rng(5)
    _labelled(300, rng, prior)
    first = decision_refit(due=True)
    assert first["shadow"] is not None
    assert decision_refit(due=True) == {
        "prior": None,
        "promoted": None,
        "shadow": None,
        "reason": "not due: another refit fitted them",
    }
    second = decision_refit()  # the daily beat right after: the untried shadow neither goes live nor is replaced
    assert second["promoted"] is None and second["shadow"] is None and "no label has judged it" in second["reason"]
    assert DecisionFit.objects.get(status="live").pk == prior.pk
    assert DecisionFit.objects.get(status="shadow").version == first["shadow"]


def test_a_refit_with_no_label_since_the_shadow_fit_leaves_it_in_shadow(big):
    """The daily refit right after the one the labels sent retired the untried shadow fit and made another on the
    same labels: no label could ever judge either."""
    prior = decision_prior_fit()
    _labelled(300, np.random.default_rng(7), prior)
    first = decision_refit()["shadow"]
    assert first is not None
    again = decision_refit()
    assert again["shadow"] is None and "stays in shadow" in again["reason"]
    assert DecisionFit.objects.get(version=first).status == "shadow"
    _labelled(50, np.random.default_rng(8), prior)  # labels arrive: the next refit judges it and fits them
    assert decision_refit()["shadow"] not in (None, first)
    assert decision_refit(force=True)["shadow"] is not None  # forced: always fits


def test_prior_fits_sent_for_changes_a_newer_fit_already_read_do_nothing(big, django_capture_on_commit_callbacks, monkeypatch):
    """Imports or catalogue edits in a row each sent a prior fit, run one after another for minutes each on the same
    phrases (the import jobs queued behind them). A fit that read the phrases after a change was committed covers
    it; the fit a later change sends still runs."""
    from common import tasks as common_tasks
    from learning import tasks
    from learning.services.decisions import decision_prior_fit_send

    sent = []
    monkeypatch.setattr(common_tasks, "task_send", lambda name, **kw: sent.append(kw["changed_at"]) or True)  # queued
    with django_capture_on_commit_callbacks(execute=True):
        decision_prior_fit_send()  # an import committed
    with django_capture_on_commit_callbacks(execute=True):
        decision_prior_fit_send()  # another, before any fit ran
    monkeypatch.undo()
    from tenants.context import tenant_scope
    from tenants.selectors import tenant_default

    with tenant_scope([tenant_default().pk]):  # as the task runs: in the sending tenant's scope
        before = DecisionFit.objects.count()
        first = tasks.decision_prior_fit_task(changed_at=sent[0])
        assert isinstance(first, int) and DecisionFit.objects.count() == before + 1
        assert tasks.decision_prior_fit_task(changed_at=sent[1]) is None  # the first fit read both changes
        assert DecisionFit.objects.count() == before + 1
        later = DecisionFit.objects.get(version=first).params["read_at"] + 1  # a change after that fit read
        assert isinstance(tasks.decision_prior_fit_task(changed_at=later), int)
        assert isinstance(tasks.decision_prior_fit_task(), int)  # sent without a stamp (the beat, a command): it fits
