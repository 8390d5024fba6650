"""The resolution pipeline: from what a user typed to a verb, options or no match.

Tiers, in order: user exact, global exact (learned phrases); user semantic,
global semantic (learned phrases, pgvector); the semantic blocklist; catalogue
phrases (exact, then substring); catalogue semantic (cold start). Candidates
are deduplicated per verb, blocked verbs are dropped, and the rest are ranked
by score. The outcome is ``resolved``, ``ambiguous`` (top two within the
margin, or the top score under the resolve threshold) or ``no_match``.

If the embedder fails or times out, the exact and phrase tiers still answer
and the result says it is ``degraded``.
"""

import logging
import math
import uuid
from dataclasses import asdict, dataclass, field

import numpy as np
from django.conf import settings

from common.text import normalize_phrase
from common.timing import timed
from embeddings.embedders import current_model_name, embed_query
from learning import decision, selectors
from learning.scoring import Source, anchor_trust, semantic_scores
from learning.selectors import active_profile_values, verb_evidence_balance

logger = logging.getLogger(__name__)


class Outcome:
    RESOLVED = "resolved"
    AMBIGUOUS = "ambiguous"
    NO_MATCH = "no_match"


@dataclass
class Candidate:
    verb: str
    score: float
    source: str
    matched_phrase: str
    description: str = ""


@dataclass
class Option:
    verb: str
    display_name: str
    example: str
    score: float


@dataclass
class Resolution:
    request_id: str
    text: str
    outcome: str
    verb: str | None
    candidates: list[Candidate]
    degraded: bool = False
    degraded_reason: str = ""
    options: list[Option] = field(default_factory=list)
    user_id: str | None = None
    model: str = ""
    explanation: dict = field(default_factory=dict)
    trace: dict = field(default_factory=dict)  # what ResolutionRecord stores (features, shadow); not part of the answer

    def as_dict(self) -> dict:
        body = asdict(self)
        body.pop("trace")
        return body


def profile(model_name: str | None = None, floors: dict | None = None) -> dict:
    """Thresholds for the given (default: configured) embedding model: the seed values, the model's own, the
    retrieval floors measured on the deployment's phrases (``floors``; default: those of the newest catalogue
    prior for this model), a reviewer-activated fitted profile, then RESOLVE_* overrides."""
    model_name = model_name or current_model_name()
    values = dict(settings.RESOLUTION_PROFILES["default"])
    values.update(settings.RESOLUTION_PROFILES.get(model_name, {}))
    values.update(catalogue_floors(model_name) if floors is None else floors)
    values.update(_fitted_profile_values(model_name))  # a reviewer-activated fit
    values.update(settings.RESOLUTION_OVERRIDES)
    # a measured evidence level with a seed decide level: "chose it for nearly these words" is never looser
    values["decide_similarity"] = max(values["decide_similarity"], values["evidence_similarity"])
    return values


FLOOR_NAMES = (
    "min_score",
    "learned_threshold",
    "blocklist_threshold",
    "evidence_similarity",
    "correction_decay_threshold",
    "decide_similarity",
)


def catalogue_floors(model_name: str) -> dict:
    """The retrieval floors the newest catalogue prior of ``model_name`` measured ({} if none). A value that is
    not a cosine (a damaged fit) is skipped: that floor keeps the seed value."""
    prior = selectors.decision_state()["priors"].get(model_name)
    if prior is None or not isinstance(prior.params, dict):
        return {}
    stored = prior.params.get("floors")
    if not isinstance(stored, dict):
        return {}
    out = {}
    for name in FLOOR_NAMES:
        value = stored.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool) and -1.0 <= value <= 1.0:  # NaN fails too
            out[name] = float(value)
    return out


def _substring_score(phrase: str, normalized: str, base: float) -> float:
    shorter, longer = sorted((len(normalize_phrase(phrase)), len(normalized)))
    return round(base * math.sqrt(shorter / max(longer, 1)), 4)


# After a change of embedding model, until the backfill has embedded every phrase again, the phrases still on the
# old model are not compared (their cosines to a query of the new model mean nothing): an answer says so.
REEMBEDDING = "re-embedding: some phrases still carry another embedding model's vectors and were not compared"


def _reasons(*parts: str) -> str:
    """Every reason an answer is degraded, once each: "the fit is for another model; fell back; re-embedding: ..."."""
    return "; ".join(dict.fromkeys(p for p in parts if p))


def resolve(*, text: str, user_id: str | None = None, domain: str | None = None, limit: int | None = None) -> Resolution:
    """Resolve ``text`` for ``user_id`` (None: global data only) within ``domain``."""
    limit = limit or settings.RESOLVE_DEFAULT_LIMIT
    normalized = normalize_phrase(text)
    p = profile()
    request_id = str(uuid.uuid4())
    best: dict[str, Candidate] = {}
    learned_rule = settings.RESOLVE_DECISION != "fixed"

    def offer(verb: str, score: float, source: str, matched: str) -> None:
        current = best.get(verb)
        if current is None or score > current.score:
            best[verb] = Candidate(verb=verb, score=round(float(score), 4), source=source, matched_phrase=matched)

    # Tiers 1-2: exact learned phrases, the user's before global ones.
    with timed("exact"):
        exact = selectors.learned_exact(normalized=normalized, user_id=user_id, domain=domain)
    for row in exact:
        source = Source.USER_LEARNED_EXACT if row.user_id else Source.LEARNED_EXACT
        offer(row.verb, row.confidence, source, row.phrase)
        best[row.verb].description = row.description

    vector, model, reason = None, current_model_name(), ""
    trusted = settings.RESOLVE_TRUSTED_CONFIDENCE if learned_rule else p["resolve_threshold"]

    def exact_answer(top, blocks: list[str], reason: str = "", unchecked: list[str] = ()) -> Resolution:
        r = _finish(request_id, text, user_id, [best[top.verb]], p, limit, degraded_reason=reason, model=model)
        r.explanation = {
            "rule": "exact",
            "probability": None,  # nothing was computed: a trusted exact phrase answers as it is
            "cut": None,
            "fit_version": None,
            "margin": None,
            "blocks": blocks,  # blocks that applied to other verbs (none on the fast path)
            "blocks_unchecked": list(unchecked),
            "penalties": {},
            "confidence": round(float(top.confidence), 4),
            "trusted_confidence": trusted,
        }
        return r

    trusted_exact = exact[0] if exact and exact[0].confidence >= trusted else None
    if trusted_exact is not None and not trusted_exact.blocked:
        # Fast path: a trusted exact match wins at once when no block of its verb is in force.
        return exact_answer(trusted_exact, [])

    with timed("embed"):
        vector, model, reason = embed_query(normalized)
    if vector is not None and not reason and selectors.vectors_of_another_model_left(model):
        reason = REEMBEDDING
    # Tiers 3-7 come back from one query (see selectors.tier_rows).
    k_learned, k_catalogue = max(limit * 4, 20), max(limit * 6, 30)
    with timed("tiers"):
        rows = selectors.tier_rows(
            normalized=normalized,
            vector=vector,
            model=model,
            user_id=user_id,
            domain=domain,
            k_learned=k_learned,
            k_catalogue=k_catalogue,
            k_blocks=20,
            block_threshold=p["blocklist_threshold"],
            learned=settings.RESOLVE_USE_LEARNED_SEMANTIC,
            k_evidence=settings.FEEDBACK_EVIDENCE_K if settings.RESOLVE_USE_FEEDBACK_PENALTY else 0,
            evidence_similarity=p["evidence_similarity"],
            stamp=exact.stamp,
            own_exact=exact.own_exact,
            global_exact=exact.global_exact,
            evidence_exact=exact.evidence_exact,
        )
    # Tier 5: the semantic blocklist (blocked verbs are dropped below).
    blocked = rows.blocked
    if trusted_exact is not None and trusted_exact.verb not in blocked:
        # its verb has blocks, but none applies to this text: the trusted exact match wins as on the fast path
        return exact_answer(trusted_exact, sorted(blocked), reason, sorted(rows.unchecked))
    # Tier 6: catalogue phrases, exact then substring (first, so they win ties with the anchors below).
    for verb, phrase, kind in rows.phrases:
        if kind == "exact":
            offer(verb, 1.0, Source.PHRASE_EXACT, phrase)
        else:
            offer(verb, _substring_score(phrase, normalized, p["substring_score"]), Source.PHRASE_SUBSTRING, phrase)
    # Tiers 3-4 and 7: learned and catalogue phrases are semantic anchors (see learning.scoring).
    scored = semantic_scores(learned=rows.learned, catalogue=rows.catalogue, k_learned=k_learned, k_catalogue=k_catalogue, p=p)
    for verb, (score, source, matched) in scored.items():
        offer(verb, score, source, matched)
    for verb, description in rows.descriptions.items():
        if verb in best:
            best[verb].description = description

    candidates = [c for v, c in best.items() if v not in blocked]
    candidates.sort(key=lambda c: (-c.score, c.verb))
    before = {c.verb: c.score for c in candidates}
    unpenalized = _decide([c for c in candidates if c.score >= p["min_score"]], p)
    endorsed = _apply_feedback_penalties(candidates, rows.evidence, p)
    if endorsed is not None:
        candidates.sort(key=lambda c: (-c.score, c.verb))
    penalties = {c.verb: round(before[c.verb] - c.score, 4) for c in candidates if before[c.verb] != c.score}
    context = {"blocks": sorted(blocked), "blocks_unchecked": sorted(rows.unchecked), "penalties": penalties}
    if learned_rule and vector is not None:
        with timed("decide"):
            learned, fallback = _learned_finish(
                request_id,
                text,
                user_id,
                domain,
                candidates,
                rows,
                vector,
                p,
                limit,
                model=model,
                reason=reason,
                before=before,
                endorsed=endorsed,
                context=context,
                normalized=normalized,
                taught=exact.taught,
            )
        if learned is not None:
            return learned
        reason = _reasons(reason, fallback)
    r = _finish(
        request_id,
        text,
        user_id,
        candidates,
        p,
        limit,
        degraded_reason=reason,
        model=model,
        unpenalized=unpenalized,
        endorsed=endorsed,
        known=rows.details,
    )
    ranked = [c for c in candidates if c.score >= p["min_score"]]
    r.explanation = {
        "rule": "fixed",
        "probability": None,
        "cut": None,
        "fit_version": None,
        "resolve_threshold": p["resolve_threshold"],
        "margin_required": p["margin"],
        "margin": round(ranked[0].score - ranked[1].score, 4) if len(ranked) > 1 else None,
        **context,
    }
    return r


# --- The learned decision (learning.decision; docs/thresholds.md) ---

_LEARNED_SOURCES = {Source.USER_LEARNED_EXACT, Source.USER_LEARNED_SEMANTIC, Source.LEARNED_EXACT, Source.LEARNED_SEMANTIC}
_OWN_SOURCES = {Source.USER_LEARNED_EXACT, Source.USER_LEARNED_SEMANTIC}


def _fits_in_force(user_id: str | None, model: str):
    """The fits to decide with, best first, each as (FitState, head tuple or None, why the fits before it were
    skipped): the live fit, then the catalogue prior of the query's embedding model, then (None, None, reasons). A
    fit of another model (its cut and head were measured in another vector space), one whose params or head cannot
    be read, and one whose head is missing are skipped for the next, with the reason; none left: the fixed rule
    decides."""
    state = selectors.decision_state()
    reason = ""
    live = state["live"]
    if live is not None and live.embedding_model not in ("", model):
        reason = f"decision fit v{live.version} is for embedding model {live.embedding_model}; fell back"
        live = None
    prior = state["priors"].get(model)
    for fs in (live, prior if live is None or prior is None or prior.version != live.version else None):
        if fs is None:
            continue
        if fs.params is None:
            reason = f"decision fit v{fs.version} has no params; fell back"
            continue
        try:
            decision.check_params(fs.params)
            head = selectors.decision_head(fs.version, user_id)
        except (ValueError, TypeError, KeyError) as exc:
            logger.error("decision fit v%s unusable: %s", fs.version, exc)
            reason = f"decision fit v{fs.version} unusable; fell back"
            continue
        if head is None and fs.params.get("heads"):
            logger.error("decision fit v%s: its head is missing", fs.version)
            reason = f"decision head v{fs.version} missing; fell back"
            continue
        yield fs, head, reason
    yield None, None, reason  # the end: why the fits were skipped


def _head_knows(head_tuple, verb: str) -> bool:
    """Whether the head was trained with phrases of ``verb`` (one trained before the verb existed, or before it had
    any phrase, gives it no probability however well the text matches its phrases now)."""
    if head_tuple is None:
        return True
    head, verbs = head_tuple[0], head_tuple[1]
    try:
        j = verbs.index(verb)
    except ValueError:
        return False
    return bool(np.any(np.asarray(head["classes"]) == j))


class _View:
    """One query seen through one fit: dense anchor / head arrays over the verbs in play."""

    def __init__(self, verbs, anchor, head_p, hits, n_anchors, names=None, taught=False):
        self.verbs, self.anchor, self.head_p, self.hits, self.n_anchors = verbs, anchor, head_p, hits, n_anchors
        self.taught = taught  # the asking user has phrases of their own in scope
        # (cosine of the query to each catalogue verb's name, NaN for a blocked verb or one without a name; verb
        # -> its index), or None: the head has no name vectors
        self.names = names

    def name_margin(self, top: int, exclude: int | None) -> float:
        if self.names is None:
            return 0.0
        cos, at = self.names
        j = at.get(self.verbs[top])
        if j is None:  # a verb added since the head was trained: no name to compare
            return 0.0
        gone = at.get(self.verbs[exclude]) if exclude is not None else None
        return float(decision.name_margins(cos, [j], None if gone is None else [gone])[0])

    def top(self, eligible):
        comb = decision.combine(self.anchor, self.head_p)
        comb = np.where(eligible, comb, -np.inf)
        return int(np.argmax(comb)), comb

    def features(self, top, exclude: int | None = None):
        hits = [h for h in self.hits if self.verbs[h[1]] != (self.verbs[exclude] if exclude is not None else None)]
        top_cos = max((h[2] for h in hits), default=0.0)
        knn = [h[1] for h in sorted((h for h in hits if h[3]), key=lambda h: -h[0])[: decision.KNN]]
        mine = [h for h in hits if h[1] == top and h[3]]
        best = max(mine, key=lambda h: h[0]) if mine else None
        return decision.features(
            anchor=self.anchor,
            head_p=self.head_p,
            top=top,
            top_cos=top_cos,
            knn=knn,
            learned_top=bool(best[4]) if best else False,
            n_anchors=self.n_anchors.get(self.verbs[top], 0),
            name_margin=self.name_margin(top, exclude),
            own_top=bool(best[5]) if best else False,
            user_taught=self.taught,
        )


def _view(candidates, rows, vector, head_tuple, blocked, p, *, allow_head_only: bool, normalized: str, taught: bool):
    index = {c.verb: i for i, c in enumerate(candidates)}
    verbs = [c.verb for c in candidates]
    head = anchors_n = names = None
    P = None
    if head_tuple is not None:
        head, head_verbs, anchors_n, _ = head_tuple
        probs = decision.head_predict(head, vector, [normalized])[0]
        if head.get("names") is not None:
            cos = head["names"] @ np.asarray(vector, dtype=np.float32)
            at = head["name_index"]
            for v in blocked:  # a blocked verb is not in play
                if v in at:
                    cos[at[v]] = np.nan
            names = (cos, at)
        active = selectors.active_verb_names(stamp=rows.stamp) if allow_head_only else frozenset()
        order = np.argsort(-probs)
        shown = 0
        for j in order[: settings.RESOLVE_MAX_OPTIONS * 2]:
            v = head_verbs[j]
            if shown >= settings.RESOLVE_MAX_OPTIONS or probs[j] < 0.01:
                break
            if v not in index and v in active and v not in blocked:
                index[v] = len(verbs)
                verbs.append(v)
                candidates.append(Candidate(verb=v, score=0.0, source=Source.HEAD, matched_phrase=""))
            shown += 1
        keep = np.array([v not in blocked for v in head_verbs])
        mass = float(probs[keep].sum()) or 1.0
        P = np.zeros(len(verbs))
        rest = 0.0
        for j, v in enumerate(head_verbs):
            if not keep[j]:
                continue
            if v in index:
                P[index[v]] = probs[j] / mass
            else:
                rest = max(rest, probs[j] / mass)
        # the best verb outside the candidates still counts for the head's margin
        P = np.r_[P, rest]
        verbs = verbs + [""]
    anchor = np.array([c.score for c in candidates] + ([0.0] if P is not None else []), dtype=np.float64)
    # (effective score, verb index, raw cosine, counts as an anchor, is learned, is the asking user's own)
    hits = []
    for h in rows.learned:  # the asking user's own phrases and global ones (tiers.scope_q)
        if h.verb in index:
            ok = h.similarity >= p["learned_threshold"]
            hits.append((h.similarity * anchor_trust(h.confidence), index[h.verb], h.similarity, ok, True, h.user_id is not None))
    for h in rows.catalogue:
        if h.verb in index:
            hits.append((h.similarity, index[h.verb], h.similarity, h.similarity >= p["min_score"], False, False))
    for i, c in enumerate(candidates):  # exact and substring tiers: the candidate's own score is its anchor
        if c.source in _LEARNED_SOURCES or c.source in (Source.PHRASE_EXACT, Source.PHRASE_SUBSTRING):
            raw = c.score if c.source != Source.PHRASE_SUBSTRING else 0.0
            hits.append((c.score, i, raw, True, c.source in _LEARNED_SOURCES, c.source in _OWN_SOURCES))
    return _View(verbs, anchor, P, hits, anchors_n or {}, names, taught)


def _with_names(head_tuple, version: int):
    """A personal head trained before the heads held the verbs' names (kept by refits that reach a few users at a
    time) compares with its fit's deployment head's names: the same verbs' names for every head of a fit."""
    if head_tuple is None or head_tuple[0].get("names") is not None or head_tuple[3] is None:
        return head_tuple
    shared = selectors.decision_head(version, None)
    if shared is None or shared[0].get("names") is None:
        return head_tuple
    names = {k: shared[0][k] for k in ("names", "name_verbs", "name_index")}
    return ({**head_tuple[0], **names}, *head_tuple[1:])


def _learned_finish(
    request_id,
    text,
    user_id,
    domain,
    candidates,
    rows,
    vector,
    p,
    limit,
    *,
    model,
    reason,
    before,
    endorsed,
    context,
    normalized,
    taught,
):
    # The first fit in force whose head can be used decides; one whose head was trained before the top verb had
    # phrases (a verb added or first taught since the live fit) gives way to the prior when the prior's head knows
    # the verb: the catalogue refits the prior at once, a fit from labels comes at the next refit. One whose labels
    # do not hold the query's situation (decision.SITUATIONS: a newcomer's verbs with only their catalogue phrases,
    # when every label came from users who taught theirs) gives way to the prior when the prior's rows hold it.
    chosen, passed_over, outside, degraded = None, None, None, ""
    for fs, head_tuple, skipped in _fits_in_force(user_id, model):
        if chosen is None:  # once a fit decides, why a later one was skipped degrades nothing
            degraded = _reasons(degraded, skipped)
        if fs is None:
            break
        pool = [c for c in candidates if c.score >= p["min_score"]]
        try:
            head_tuple = _with_names(head_tuple, fs.version)
            view = _view(
                pool,
                rows,
                vector,
                head_tuple,
                rows.blocked,
                p,
                allow_head_only=domain is None,
                normalized=normalized,
                taught=taught,
            )
        except ValueError as exc:  # an unreadable head: the next fit decides, or the fixed rule; say so
            logger.error("decision head of v%s unusable: %s", fs.version, exc)
            if chosen is None:
                degraded = _reasons(degraded, f"decision head v{fs.version} unusable; fell back")
            continue
        eligible = np.array([bool(v) for v in view.verbs])
        if chosen is not None:  # the live fit did not know its top verb, or its labels not the query's situation
            if passed_over is not None:  # this one decides if it knows that verb
                if _head_knows(head_tuple, passed_over["verb"]):
                    chosen = (fs, pool, view, eligible, None)
            elif eligible.any():
                top = view.top(eligible)[0]
                f = view.features(top)
                if decision.situation_outside(fs.params, f, skip=decision.PRIOR_SKIPS) is None:  # the prior holds it
                    chosen = (fs, pool, view, eligible, (top, f))
                else:
                    outside = None  # neither fit's rows hold it: the live fit decides
            else:
                outside = None
            break
        chosen = (fs, pool, view, eligible, None)
        if fs.source == "prior" or not eligible.any():
            break
        top = view.top(eligible)[0]
        if not _head_knows(head_tuple, view.verbs[top]):
            passed_over = {"fit_version": fs.version, "verb": view.verbs[top]}
            continue
        f = view.features(top)
        chosen = (fs, pool, view, eligible, (top, f))  # the features are read once
        outside = decision.situation_outside(fs.params, f)
        if outside is None:
            break
        outside = {"fit_version": fs.version, **outside}
    if chosen is None:
        return None, degraded
    reason = _reasons(reason, degraded)
    fs, pool, view, eligible, top_f = chosen
    explanation = {
        "rule": "prior" if fs.source == "prior" else "learned",
        "fit_version": fs.version if fs.source != "prior" else "prior",
        "version": fs.version,
        "probability": None,
        "cut": fs.params.get("cut"),
        # the operator's target the cut was chosen for: at most this share of answers wrong
        "max_wrong_rate": fs.params.get("max_wrong_rate"),
        "margin": None,
        **context,
    }
    if passed_over is not None and fs.version != passed_over["fit_version"]:
        # the live fit's head was trained before this verb had phrases: the prior, which knows it, decided
        explanation["fit_passed_over"] = passed_over
    if outside is not None and fs.version != outside["fit_version"]:
        # the live fit's labels held the query's situation too rarely: the prior, whose rows hold it, decided
        explanation["fit_outside_labels"] = outside
    trace = {"rule": explanation["rule"], "fit_version": fs.version}
    if not pool or not eligible.any():
        r = _result(request_id, text, user_id, Outcome.NO_MATCH, None, [], [], limit, reason, model)
        r.explanation = explanation
        r.trace = trace
        return r, reason
    top, comb = view.top(eligible)
    f = top_f[1] if top_f is not None and top_f[0] == top else view.features(top)
    prob = float(decision.probability(fs.params, f)[0])
    auto = bool(decision.decide(fs.params, f)[0])
    ranked_idx = [int(i) for i in np.argsort(-comb, kind="stable") if eligible[i] and np.isfinite(comb[i])]
    if not ranked_idx or not np.isfinite(prob):  # scores that are not numbers: decide with the fixed rule, say so
        logger.error("decision fit v%s gave no finite score", fs.version)
        return None, f"decision fit v{fs.version} gave no finite score; fell back"
    runner = comb[ranked_idx[1]] if len(ranked_idx) > 1 else None
    explanation.update(  # the values compared, unrounded: a rounded probability could read above a cut it missed
        probability=prob,
        margin=round(float(comb[top] - runner), 4) if runner is not None else None,
        min_top_cos=fs.params.get("min_top_cos"),
        top_cos=float(f[0]),
        # how much closer the text is to the top verb's name than to any other verb's (None: no names to compare)
        name_margin=round(float(f[decision.FEATURES.index("name_margin")]), 4) if view.names is not None else None,
    )
    if auto and _penalty_decided(view, top, before, endorsed):
        auto = False
        explanation["penalty_guard"] = True
    # the same query as if its top verb did not exist: an open-set example for the fit
    eligible_open = eligible.copy()
    eligible_open[top] = False
    f_open = None
    if eligible_open.any():
        saved = (view.anchor.copy(), None if view.head_p is None else view.head_p.copy())
        view.anchor[top] = 0.0
        view.head_p = decision.without(view.head_p, top)
        top_o, _ = view.top(eligible_open)
        f_open = view.features(top_o, exclude=top).tolist()
        view.anchor, view.head_p = saved
    # without names the name margin is unknown, not 0: the record keeps the features before it, so a fit from
    # labels never reads a placeholder as a measured margin
    width = len(decision.FEATURES) if view.names is not None else decision.BASE_FEATURES
    trace.update(
        features=f[:width].tolist(),
        features_open=f_open[:width] if f_open is not None else None,
        probability=prob,
        cut=fs.params.get("cut"),
        top_verb=view.verbs[top],
        top_verbs=[view.verbs[i] for i in ranked_idx[: settings.RESOLVE_MAX_OPTIONS]],
        margin=explanation["margin"],
        **context,
    )
    now = {"prior": fs.source == "prior", "params": fs.params, "features": f, "auto": auto, "verb": view.verbs[top]}
    _shadow(trace, user_id, candidates, rows, vector, p, domain, normalized, model, before, endorsed, taught, now)
    by_verb = {c.verb: c for c in pool}
    ordered = [by_verb[view.verbs[i]] for i in ranked_idx]
    if auto:
        r = _result(request_id, text, user_id, Outcome.RESOLVED, view.verbs[top], ordered, [], limit, reason, model)
    else:
        best_anchor = float(max(view.anchor[i] for i in ranked_idx))
        shown = [i for i in ranked_idx if i == top or view.anchor[i] >= best_anchor - p["options_window"]][
            : settings.RESOLVE_MAX_OPTIONS
        ]
        details = selectors.verb_details([view.verbs[i] for i in shown], rows.details)
        options = []
        for i in shown:
            c, d = by_verb[view.verbs[i]], details.get(view.verbs[i], {})
            options.append(
                Option(c.verb, d.get("display_name", c.verb), d.get("example") or c.matched_phrase, round(float(comb[i]), 4))
            )
        r = _result(request_id, text, user_id, Outcome.AMBIGUOUS, None, ordered, options, limit, reason, model)
    r.explanation = explanation
    r.trace = trace
    return r, reason


def _penalty_decided(view, top: int, before: dict, endorsed) -> bool:
    """Whether feedback penalties alone put ``top`` first for a verb this user never chose for a near-paraphrase: a
    penalty may decide an auto-resolution only for a verb the user endorsed, so such an answer asks."""
    if endorsed is None:
        return False
    unpen = max((v for v in before if v in view.verbs), key=lambda v: before[v], default=None)
    return unpen != view.verbs[top] and view.verbs[top] not in endorsed


def _shadow(trace, user_id, candidates, rows, vector, p, domain, normalized, model, before, endorsed, taught, now) -> None:
    """What the shadow fit would have answered were it live (recorded with the resolution; never shown), with the
    live rule's penalty guard; nothing for a fit of another embedding model. A query whose situation the shadow
    fit's labels held too rarely (``decision.situation_outside``) it would give to the prior when the prior's rows
    hold it, as the live fit does: when the prior answered it now (``now``: who decided, and what), that answer is
    the shadow's; when the live fit answered it, the prior's answer is unknown and no shadow answer is recorded, so
    the shadow's figures judge only answers it would give."""
    shadow = selectors.decision_state()["shadow"]
    if shadow is None or shadow.params is None or shadow.embedding_model not in ("", model):
        return
    try:
        decision.check_params(shadow.params)
        pool = [c for c in candidates if c.score >= p["min_score"] and c.source != "head"]
        view = _view(
            list(pool),
            rows,
            vector,
            _with_names(selectors.decision_head(shadow.version, user_id), shadow.version),
            rows.blocked,
            p,
            allow_head_only=domain is None,
            normalized=normalized,
            taught=taught,
        )
        eligible = np.array([bool(v) for v in view.verbs])
        if not eligible.any():
            return
        top, _ = view.top(eligible)
        f = view.features(top)
        if decision.situation_outside(shadow.params, f) is not None:
            if not now["prior"]:
                return
            if decision.situation_outside(now["params"], now["features"], skip=decision.PRIOR_SKIPS) is None:
                trace.update(
                    shadow_version=shadow.version,
                    shadow_outcome=Outcome.RESOLVED if now["auto"] else Outcome.AMBIGUOUS,
                    shadow_verb=now["verb"],
                )
                return
        auto = bool(decision.decide(shadow.params, f)[0]) and not _penalty_decided(view, top, before, endorsed)
        trace.update(
            shadow_version=shadow.version,
            shadow_outcome=Outcome.RESOLVED if auto else Outcome.AMBIGUOUS,
            shadow_verb=view.verbs[top],
        )
    except (ValueError, TypeError, KeyError) as exc:
        logger.warning("shadow fit v%s unusable: %s", shadow.version, exc)


def _result(request_id, text, user_id, outcome, verb, ordered, options, limit, reason, model) -> Resolution:
    return Resolution(
        request_id=request_id,
        text=text,
        outcome=outcome,
        verb=verb,
        candidates=ordered[:limit],
        degraded=bool(reason),
        degraded_reason=reason,
        options=options,
        user_id=user_id,
        model=model,
    )


def _decide(candidates: list[Candidate], p: dict) -> tuple[str, str | None]:
    """(outcome, verb) for candidates ranked best first: resolved when the top score reaches the resolve
    threshold and leads the next by at least the margin."""
    if not candidates:
        return Outcome.NO_MATCH, None
    if candidates[0].score < p["resolve_threshold"]:
        return Outcome.AMBIGUOUS, None
    # scores carry 4 decimals: their difference is compared as the explanation shows it (0.85 - 0.80 is 0.05)
    if len(candidates) > 1 and round(candidates[0].score - candidates[1].score, 4) < p["margin"]:
        return Outcome.AMBIGUOUS, None
    return Outcome.RESOLVED, candidates[0].verb


def _finish(
    request_id, text, user_id, candidates, p, limit, *, degraded_reason, model, unpenalized=None, endorsed=None, known=None
) -> Resolution:
    # Decided and offered on every ranked candidate: how many the caller wants listed (limit) changes neither.
    ranked = [c for c in candidates if c.score >= p["min_score"]]
    outcome, verb = _decide(ranked, p)
    if outcome == Outcome.RESOLVED and endorsed is not None and unpenalized != (outcome, verb) and verb not in endorsed:
        # Negative evidence reorders and demotes options, but it decides an auto-resolution only for a verb
        # this user chose for a near-paraphrase of the text ("B, not A" for nearly these words is a reason to
        # run B). Otherwise a verb runs without asking only when its own evidence would have chosen it.
        outcome, verb = Outcome.AMBIGUOUS, None

    options = []
    if outcome == Outcome.AMBIGUOUS:
        shown = ranked[: settings.RESOLVE_MAX_OPTIONS]
        details = selectors.verb_details([c.verb for c in shown], known)
        floor = shown[0].score - p["options_window"]
        for c in shown:
            if c is shown[0] or c.score >= floor:
                d = details.get(c.verb, {})
                options.append(Option(c.verb, d.get("display_name", c.verb), d.get("example") or c.matched_phrase, c.score))
    return Resolution(
        request_id=request_id,
        text=text,
        outcome=outcome,
        verb=verb,
        candidates=ranked[:limit],
        degraded=bool(degraded_reason),
        degraded_reason=degraded_reason,
        options=options,
        user_id=user_id,
        model=model,
    )


# --- Disambiguation feedback loop ---


def _apply_feedback_penalties(candidates: list[Candidate], evidence, p: dict) -> set[str] | None:
    """Lower the score of verbs this user turned down for similar phrases (net of positive evidence within the
    profile's ``evidence_similarity``).

    Answers None when no score changed, else the verbs this user chose for near-paraphrases of the query
    (net positive evidence within ``decide_similarity``): the only ones a penalty may let resolve."""
    if not evidence or not candidates or not settings.RESOLVE_USE_FEEDBACK_PENALTY:
        return None

    verbs = [c.verb for c in candidates]
    balance = verb_evidence_balance(evidence, verbs=verbs, similarity=p["evidence_similarity"])
    changed = False
    for c in candidates:
        net = balance.get(c.verb, 0.0)
        if net > 0.0:
            c.score = round(max(0.0, c.score - min(settings.FEEDBACK_PENALTY_MAX, settings.FEEDBACK_PENALTY_PER_UNIT * net)), 4)
            changed = True
    if not changed:
        return None
    close = verb_evidence_balance(evidence, verbs=verbs, similarity=p["decide_similarity"])
    return {v for v, net in close.items() if net < 0.0}


def _fitted_profile_values(model_name: str) -> dict:
    """Threshold and margin of the fitted profile a reviewer activated for this model (cached briefly; {} if none)."""

    return active_profile_values(model_name)
