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

from django.conf import settings

from common.text import normalize_phrase
from embeddings.embedders import current_model_name, embed_query
from learning import selectors
from learning.scoring import Source, semantic_scores
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

    def as_dict(self) -> dict:
        return asdict(self)


def profile(model_name: str | None = None) -> dict:
    """Thresholds for the given (default: configured) embedding model."""
    model_name = model_name or current_model_name()
    values = dict(settings.RESOLUTION_PROFILES["default"])
    values.update(settings.RESOLUTION_PROFILES.get(model_name, {}))
    values.update(_fitted_profile_values(model_name))  # a reviewer-activated fit
    values.update(settings.RESOLUTION_OVERRIDES)
    return values


def _substring_score(phrase: str, normalized: str, base: float) -> float:
    shorter, longer = sorted((len(normalize_phrase(phrase)), len(normalized)))
    return round(base * math.sqrt(shorter / max(longer, 1)), 4)


def resolve(*, text: str, user_id: str | None = None, domain: str | None = None, limit: int | None = None) -> Resolution:
    """Resolve ``text`` for ``user_id`` (None: global data only) within ``domain``."""
    limit = limit or settings.RESOLVE_DEFAULT_LIMIT
    normalized = normalize_phrase(text)
    p = profile()
    request_id = str(uuid.uuid4())
    best: dict[str, Candidate] = {}

    def offer(verb: str, score: float, source: str, matched: str) -> None:
        current = best.get(verb)
        if current is None or score > current.score:
            best[verb] = Candidate(verb=verb, score=round(float(score), 4), source=source, matched_phrase=matched)

    # Tiers 1-2: exact learned phrases, the user's before global ones.
    exact = selectors.learned_exact(normalized=normalized, user_id=user_id, domain=domain)
    for row in exact:
        source = Source.USER_LEARNED_EXACT if row.user_id else Source.LEARNED_EXACT
        offer(row.verb, row.confidence, source, row.phrase)
        best[row.verb].description = row.description

    vector, model, reason = None, current_model_name(), ""
    if exact and exact[0].confidence >= p["resolve_threshold"]:
        # Fast path: a confident exact match wins, unless a block could apply to it.
        top = exact[0]
        if not top.blocked:
            candidate = best[top.verb]
            return _finish(request_id, text, user_id, [candidate], p, limit, degraded_reason="", model=model)

    vector, model, reason = embed_query(normalized)
    # Tiers 3-7 come back from one query (see selectors.tier_rows).
    k_learned, k_catalogue = max(limit * 4, 20), max(limit * 6, 30)
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
        evidence_similarity=settings.FEEDBACK_EVIDENCE_SIMILARITY,
    )
    # Tier 5: the semantic blocklist (blocked verbs are dropped below).
    blocked = rows.blocked
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
    unpenalized = _decide([c for c in candidates if c.score >= p["min_score"]], p)
    endorsed = _apply_feedback_penalties(candidates, rows.evidence)
    if endorsed is not None:
        candidates.sort(key=lambda c: (-c.score, c.verb))
    return _finish(
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
    )


def _decide(candidates: list[Candidate], p: dict) -> tuple[str, str | None]:
    """(outcome, verb) for candidates ranked best first: resolved when the top score reaches the resolve
    threshold and leads the next by at least the margin."""
    if not candidates:
        return Outcome.NO_MATCH, None
    if candidates[0].score < p["resolve_threshold"]:
        return Outcome.AMBIGUOUS, None
    if len(candidates) > 1 and candidates[0].score - candidates[1].score < p["margin"]:
        return Outcome.AMBIGUOUS, None
    return Outcome.RESOLVED, candidates[0].verb


def _finish(
    request_id, text, user_id, candidates, p, limit, *, degraded_reason, model, unpenalized=None, endorsed=None
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
        details = selectors.verb_details([c.verb for c in shown])
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


def _apply_feedback_penalties(candidates: list[Candidate], evidence) -> set[str] | None:
    """Lower the score of verbs this user turned down for similar phrases (net of positive evidence within
    FEEDBACK_EVIDENCE_SIMILARITY).

    Answers None when no score changed, else the verbs this user chose for near-paraphrases of the query
    (net positive evidence within FEEDBACK_DECIDE_SIMILARITY): the only ones a penalty may let resolve."""
    if not evidence or not candidates or not settings.RESOLVE_USE_FEEDBACK_PENALTY:
        return None

    verbs = [c.verb for c in candidates]
    balance = verb_evidence_balance(evidence, verbs=verbs, similarity=settings.FEEDBACK_EVIDENCE_SIMILARITY)
    changed = False
    for c in candidates:
        net = balance.get(c.verb, 0.0)
        if net > 0.0:
            c.score = round(max(0.0, c.score - min(settings.FEEDBACK_PENALTY_MAX, settings.FEEDBACK_PENALTY_PER_UNIT * net)), 4)
            changed = True
    if not changed:
        return None
    close = verb_evidence_balance(evidence, verbs=verbs, similarity=settings.FEEDBACK_DECIDE_SIMILARITY)
    return {v for v, net in close.items() if net < 0.0}


def _fitted_profile_values(model_name: str) -> dict:
    """Threshold and margin of the fitted profile a reviewer activated for this model (cached briefly; {} if none)."""

    return active_profile_values(model_name)
