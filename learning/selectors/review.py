"""Reads for the review inbox: what of learning waits for a human, and the evidence beside each decision."""

from django.db.models import Q, QuerySet

from learning.models import (
    FittedResolutionProfile,
    LearnedPhrase,
    LearningCandidate,
    LearningSignal,
    PhraseBlock,
    PhraseEvidence,
)

# Per-user candidates from these sources accumulate and apply themselves (learning/services/disambiguations.py):
# they are the user's own choices and never wait for a human.
SELF_APPLYING_SOURCES = (LearningSignal.Source.USER_DISAMBIGUATION, LearningSignal.Source.GENERATED_VARIANT)


def candidates_waiting() -> QuerySet[LearningCandidate]:
    """Candidates a human decides: pending global ones, and per-user ones that do not apply themselves."""
    return LearningCandidate.objects.filter(status=LearningCandidate.Status.PENDING).exclude(
        user_id__isnull=False, source__in=SELF_APPLYING_SOURCES
    )


def candidates_by_ids(ids: list[int]) -> QuerySet[LearningCandidate]:
    return LearningCandidate.objects.filter(pk__in=ids).select_related("proposed_by_agent")


def profiles_waiting() -> QuerySet[FittedResolutionProfile]:
    return FittedResolutionProfile.objects.filter(status=FittedResolutionProfile.Status.PROPOSED)


def profiles_by_ids(ids: list[int]) -> QuerySet[FittedResolutionProfile]:
    return FittedResolutionProfile.objects.filter(pk__in=ids)


def candidate_evidence(candidate: LearningCandidate, *, limit: int = 50) -> dict:
    """What produced a candidate and what approving it would touch, in the candidate's tenant (a reviewer of several
    sees all of them in one scope: another tenant's vocabulary is neither a conflict nor a duplicate).

    ``signals``: the interactions that fed it (linked by candidate id, else by phrase and verb);
    ``conflicts``: learned phrases or users' positive evidence mapping the same text to another verb;
    ``duplicates``: other pending candidates of the same type mapping the same text or a near spelling of it to the
    same verb, which may be decided together;
    ``alternatives``: pending candidates of the same type mapping that text to another verb: conflicting choices,
    each decided on its own;
    ``users``: the users it would affect (its own user, or every user of the tenant for a global phrase).
    """
    signals = list(
        LearningSignal.objects.filter(tenant_id=candidate.tenant_id)
        .filter(Q(candidate_id=candidate.pk) | Q(normalized=candidate.normalized, verb=candidate.suggested_output))
        .select_related("request")
        .order_by("-created_at", "-id")[:limit]
    )
    conflicts = candidate_conflicts(candidate, limit=limit)
    duplicates, alternatives = candidate_similar(candidate, limit=limit)
    if candidate.user_id:
        users = [candidate.user_id]
    else:
        users = list(
            LearnedPhrase.objects.filter(tenant_id=candidate.tenant_id, user_id__isnull=False, normalized=candidate.normalized)
            .values_list("user_id", flat=True)
            .distinct()[:limit]
        )
    return {
        "signals": signals,
        "conflicts": conflicts,
        "duplicates": duplicates,
        "alternatives": alternatives,
        "users": users,
    }


def candidate_conflicts(candidate: LearningCandidate, *, limit: int = 50) -> list[dict]:
    """Learned phrases and users' positive evidence that map the candidate's text to another verb (two queries; what a
    decision checks, without the rest of the evidence)."""
    conflicts = []
    if candidate.candidate_type == LearningCandidate.Type.INVOCATION_PHRASE:
        phrases = (
            LearnedPhrase.objects.filter(tenant_id=candidate.tenant_id, normalized=candidate.normalized, is_active=True)
            .exclude(verb__name=candidate.suggested_output)
            .select_related("verb")
            .order_by("-confidence", "id")[:limit]
        )
        for row in phrases:
            conflicts.append(
                {
                    "kind": f"learned phrase ({row.source})",
                    "user_id": row.user_id or "global",
                    "verb": row.verb.name,
                    "weight": round(row.confidence, 2),
                }
            )
        evidence = (
            PhraseEvidence.objects.filter(tenant_id=candidate.tenant_id, normalized=candidate.normalized, positive__gt=0)
            .exclude(verb=candidate.suggested_output)
            .order_by("-positive", "id")[:limit]
        )
        for row in evidence:
            conflicts.append(
                {
                    "kind": "confirmations and choices",
                    "user_id": row.user_id or "global",
                    "verb": row.verb,
                    "weight": round(row.positive, 2),
                }
            )
    return conflicts


def candidate_similar(candidate: LearningCandidate, *, limit: int = 50) -> tuple[list, list]:
    """Other pending candidates of the same type for the same text or a near spelling: (same verb, another verb)."""
    similar = (
        LearningCandidate.objects.filter(
            tenant_id=candidate.tenant_id, status=LearningCandidate.Status.PENDING, candidate_type=candidate.candidate_type
        )
        .filter(Q(normalized=candidate.normalized) | Q(normalized__in=_near_spellings(candidate.normalized)))
        .exclude(pk=candidate.pk)
        .order_by("-occurrence_count", "id")
    )
    duplicates = list(similar.filter(suggested_output=candidate.suggested_output)[:limit])
    alternatives = list(similar.exclude(suggested_output=candidate.suggested_output)[:limit])
    return duplicates, alternatives


def _near_spellings(normalized: str) -> list[str]:
    """The same text with or without a trailing "s" on its last word, and without articles."""
    words = normalized.split()
    if not words:
        return []
    spellings = set()
    last = words[-1]
    spellings.add(" ".join([*words[:-1], last[:-1]]) if last.endswith("s") else " ".join([*words[:-1], last + "s"]))
    bare = [w for w in words if w not in {"a", "an", "the", "my", "your"}]
    if bare != words:
        spellings.add(" ".join(bare))
    spellings.discard(normalized)
    return sorted(spellings)


def learned_phrase_by_id(pk: int) -> LearnedPhrase | None:
    return LearnedPhrase.objects.select_related("verb").filter(pk=pk).first()


def phrase_block_by_id(pk: int) -> PhraseBlock | None:
    return PhraseBlock.objects.select_related("verb").filter(pk=pk).first()
