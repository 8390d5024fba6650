"""Writes for memories: observe (extract → gate → dedupe → store), retrieve, feedback, review, purge.

Each service is one transaction. Vectors are computed before it opens; a new or
changed memory is stored without a vector and embedded by the ``memory_embed``
Celery task (eager in the embedded default) or, failing that, lazily at the next
retrieval. Writes of one user's memories are serialised with a transaction-level
advisory lock, so concurrent observes of the same lesson cannot both insert it
(a partial unique constraint backs this up). Counters use ``F()`` expressions.
"""

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Q, Value
from django.db.models.functions import Greatest
from django.utils import timezone

from common.api import ApplicationError, NotFound
from common.tasks import task_send
from common.text import text_hash
from embeddings.embedders import current_model_name, embed_query
from embeddings.services import embeddings_refresh
from memories import write_gate
from memories.dedupe import MERGE, NEW_VERSION, SAVE, SKIP, decide, semantic_duplicate_threshold
from memories.extraction import Artifact, extract
from memories.models import Memory, MemoryQuarantine, MemoryRetrieval, MemoryStatus, MemoryType, QuarantineStatus
from memories.selectors import (
    LIVE,
    RetrievedMemory,
    memories_of,
    memory_block,
    memory_has_embedded,
    memory_last_retrieval,
    memory_neighbours,
    memory_recent_verified,
    memory_semantic_candidates,
    rank_key,
)
from memories.simhash import simhash, to_hex

logger = logging.getLogger(__name__)

DECISION_NAMES = {SAVE: "saved", SKIP: "skipped", MERGE: "merged", NEW_VERSION: "new_version"}
BLOCKED = "blocked"


@dataclass
class ObserveResult:
    decision: str  # saved | skipped | merged | new_version | blocked
    memory_id: int | None
    evidence: dict = field(default_factory=dict)


@dataclass
class RetrieveResult:
    items: list[RetrievedMemory]
    block: str
    degraded: bool
    degraded_reason: str
    retrieval_id: int | None


# --- Helpers ---


def _namespace(value: str | None) -> str:
    return value or settings.MEMORY_DEFAULT_NAMESPACE


def _lock_user(namespace: str, user_id: str) -> None:
    """Serialise writes to one user's memories until the transaction ends."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"memory:{namespace}:{user_id}"])


def _validate_tags(tags) -> list[str]:
    if tags is None:
        return []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise ApplicationError("Tags must be a list of strings.", field="meta.tags")
    return list(dict.fromkeys(t.strip() for t in tags if t.strip()))


def _redact_value(value):
    if isinstance(value, str):
        return write_gate.redact(value)
    if isinstance(value, list):
        return [_redact_value(v) for v in value]
    if isinstance(value, dict):
        return {write_gate.redact(str(k)): _redact_value(v) for k, v in value.items()}
    return value


def _metadata_text(value) -> str:
    if isinstance(value, dict):
        return " ".join(f"{k}={_metadata_text(v)}" for k, v in value.items())
    if isinstance(value, list):
        return " ".join(_metadata_text(v) for v in value)
    return str(value)


def _embedding_schedule(ids: list[int]) -> None:
    """Embed these memories through the Celery task: now when eager, else after commit. Never raises."""
    if not ids:
        return

    def send():
        try:
            task_send("memories.tasks.memory_embed", ids)
        except Exception as exc:  # broker down or embedder down: the next retrieval embeds lazily
            logger.warning("memory_embed for %s not run: %s: %s", ids, exc.__class__.__name__, exc)

    if settings.CELERY_TASK_ALWAYS_EAGER:
        send()
    else:
        transaction.on_commit(send)


def _auto_promote(ids: list[int]) -> int:
    """One UPDATE: candidates among ``ids`` with streak >= N or hits >= M become verified (lower confidence)."""
    if not ids:
        return 0
    return (
        Memory.objects.filter(pk__in=ids, status=MemoryStatus.CANDIDATE)
        .filter(Q(streak__gte=settings.MEMORY_AUTO_PROMOTE_STREAK) | Q(hits__gte=settings.MEMORY_AUTO_PROMOTE_HITS))
        .update(
            status=MemoryStatus.VERIFIED,
            confidence=Greatest(F("confidence"), Value(settings.MEMORY_AUTO_PROMOTE_CONFIDENCE)),
            verified_at=timezone.now(),
            status_changed_by="auto",
            status_reason=(
                f"auto-promoted: streak >= {settings.MEMORY_AUTO_PROMOTE_STREAK} or hits >= {settings.MEMORY_AUTO_PROMOTE_HITS}"
            ),
        )
    )


# --- Observe ---


def memory_observe(*, user_id: str, user_message: str, assistant_message: str, meta: dict | None = None) -> ObserveResult:
    """Learn from one turn: extract a lesson, gate it, deduplicate it against the user's memories, store it."""
    meta = dict(meta or {})
    if not user_id:
        raise ApplicationError("A user id is required.", field="user_id")
    for name, text in (("user_message", user_message), ("assistant_message", assistant_message)):
        if not (text or "").strip():
            raise ApplicationError("This message must not be empty.", field=name)
        if len(text) > settings.MEMORY_MAX_MESSAGE_CHARS:
            raise ApplicationError(f"At most {settings.MEMORY_MAX_MESSAGE_CHARS} characters.", field=name)
    hints = {"tags": _validate_tags(meta.get("tags")) if meta.get("tags") is not None else None}
    if meta.get("type"):
        if meta["type"] not in MemoryType.values:
            raise ApplicationError(f"Unknown type; use one of {', '.join(MemoryType.values)}.", field="meta.type")
        hints["type"] = meta["type"]
    if meta.get("topic"):
        hints["topic"] = str(meta["topic"])
    metadata = meta.get("filters") or {}
    if not isinstance(metadata, dict):
        raise ApplicationError("Filters must be an object.", field="meta.filters")
    artifact, extractor = extract(user_message=user_message, assistant_message=assistant_message, hints=hints)
    if artifact is None:
        return ObserveResult(DECISION_NAMES[SKIP], None, {"rule": "nothing_reusable", "extractor": extractor})
    return memory_store(
        user_id=user_id,
        namespace=_namespace(meta.get("namespace")),
        artifact=artifact,
        metadata=metadata,
        source_session_id=str(meta.get("session_id") or "")[:200],
        source_message_id=str(meta.get("message_id") or "")[:200],
        extractor=extractor,
    )


def memory_store(
    *,
    user_id: str,
    namespace: str,
    artifact: Artifact,
    metadata: dict | None = None,
    source_session_id: str = "",
    source_message_id: str = "",
    extractor: str = "deterministic",
    quarantine_on_block: bool = True,
) -> ObserveResult:
    """Gate, deduplicate and store one artifact for the user (the write half of observe)."""
    metadata = metadata or {}
    gate = write_gate.check(artifact.content)
    # Every field stored beside the lesson is scanned too (and redacted if the lesson is quarantined).
    side_text = "\n".join(
        [artifact.topic, " ".join(artifact.tags), _metadata_text(metadata), source_session_id, source_message_id]
    )
    side_secrets = write_gate.secret_findings(side_text)
    if not gate.allowed or side_secrets:
        if gate.allowed:  # the lesson is clean but its topic, tags or filters hold a secret
            gate = write_gate.blocked(side_secrets)
        evidence = {"reason": gate.reason, "kinds": gate.kinds, "message": gate.message, "extractor": extractor}
        if quarantine_on_block:
            item = MemoryQuarantine.objects.create(
                namespace=namespace,
                user_id=user_id,
                memory_type=artifact.memory_type,
                topic=write_gate.redact(artifact.topic)[:200],
                tags=[write_gate.redact(t) for t in artifact.tags],
                reason=gate.reason,
                reason_detail=gate.message,
                finding_kinds=gate.kinds,
                redacted_preview=write_gate.redact(artifact.content),
                source_session_id=write_gate.redact(source_session_id)[:200],
                source_message_id=write_gate.redact(source_message_id)[:200],
                metadata=_redact_value(metadata),
            )
            evidence["quarantine_id"] = item.pk
        return ObserveResult(BLOCKED, None, evidence)

    content = artifact.content
    sha = text_hash(content)
    fingerprint = simhash(content)
    vector, model, _ = embed_query(content)  # bounded by RESOLVE_EMBED_TIMEOUT_S; None when the embedder is down
    try:
        with transaction.atomic():
            _lock_user(namespace, user_id)
            neighbours = memory_neighbours(
                user_id=user_id,
                namespace=namespace,
                content_sha256=sha,
                simhash=fingerprint,
                vector=vector,
                model=model,
                k=settings.MEMORY_DEDUPE_NEIGHBOURS,
                max_distance=settings.MEMORY_SIMHASH_MAX_DISTANCE,
            )
            decision = decide(
                content=content,
                content_sha256=sha,
                memory_type=artifact.memory_type,
                topic=artifact.topic,
                neighbours=neighbours,
                simhash_max_distance=settings.MEMORY_SIMHASH_MAX_DISTANCE,
                semantic_threshold=semantic_duplicate_threshold(model),
                topic_threshold=settings.MEMORY_TOPIC_SIMILARITY_THRESHOLD,
            )
            to_embed: list[int] = []
            if decision.action == SKIP:
                memory_id = decision.target_id
            elif decision.action == MERGE:
                memory_id = decision.target_id
                if _merge(memory_id=memory_id, artifact=artifact, sha=sha, fingerprint=fingerprint, metadata=metadata):
                    to_embed.append(memory_id)
            else:
                new = Memory(
                    namespace=namespace,
                    user_id=user_id,
                    memory_type=artifact.memory_type,
                    topic=artifact.topic,
                    tags=list(artifact.tags),
                    content=content,
                    status=MemoryStatus.CANDIDATE,
                    confidence=settings.MEMORY_CANDIDATE_CONFIDENCE,
                    simhash=to_hex(fingerprint),
                    content_sha256=sha,
                    source_session_id=source_session_id,
                    source_message_id=source_message_id,
                    metadata=metadata,
                )
                if decision.action == NEW_VERSION:
                    old = Memory.objects.select_for_update().get(pk=decision.target_id)
                    new.supersedes = old
                    new.version = old.version + 1
                    new.save()
                    old.status = MemoryStatus.DEPRECATED
                    old.deprecated_at = timezone.now()
                    old.status_reason = f"superseded by memory {new.pk} (contradicting content)"
                    old.status_changed_by = "dedupe"
                    old.streak = 0
                    old.save(
                        update_fields=["status", "deprecated_at", "status_reason", "status_changed_by", "streak", "updated_at"]
                    )
                else:
                    new.save()
                memory_id = new.pk
                to_embed.append(memory_id)
    except IntegrityError:
        # Another writer stored the same text between our lock-free reads: answer its row.
        existing = memories_of(user_id=user_id, namespace=namespace).filter(status__in=LIVE, content_sha256=sha).first()
        if existing is None:
            raise
        return ObserveResult(
            DECISION_NAMES[SKIP], existing.pk, {"rule": "exact", "matched_memory_id": existing.pk, "extractor": extractor}
        )
    _embedding_schedule(to_embed)
    evidence = {
        "rule": decision.rule,
        "matched_memory_id": decision.target_id,
        "hamming": decision.hamming,
        "similarity": decision.similarity,
        "semantic_checked": vector is not None,
        "thresholds": {
            "simhash_max_distance": settings.MEMORY_SIMHASH_MAX_DISTANCE,
            "semantic_duplicate": semantic_duplicate_threshold(model),
            "topic_similarity": settings.MEMORY_TOPIC_SIMILARITY_THRESHOLD,
        },
        "type": artifact.memory_type,
        "topic": artifact.topic,
        "extractor": extractor,
    }
    if decision.action == NEW_VERSION:
        evidence["deprecated_memory_id"] = decision.target_id
    return ObserveResult(DECISION_NAMES[decision.action], memory_id, evidence)


def _merge(*, memory_id: int, artifact: Artifact, sha: str, fingerprint: int, metadata: dict) -> bool:
    """Fold a duplicate into the existing memory: version+1, hits+1, tags and metadata unioned; the longer text wins.

    Answers whether the content changed (then the vector is cleared for re-embedding).
    """
    target = Memory.objects.select_for_update().get(pk=memory_id)
    fields = ["version", "hits", "tags", "metadata", "updated_at"]
    target.version += 1
    target.hits += 1
    target.tags = list(dict.fromkeys([*target.tags, *artifact.tags]))
    target.metadata = {**target.metadata, **metadata}
    changed = len(artifact.content) > len(target.content)
    if changed:
        target.content, target.content_sha256, target.simhash = artifact.content, sha, to_hex(fingerprint)
        target.embedding, target.embedding_model, target.embedding_hash = None, "", ""
        fields += ["content", "content_sha256", "simhash", "embedding", "embedding_model", "embedding_hash"]
    target._change_reason = "merged a duplicate observation" + (" (longer text kept)" if changed else "")
    # A save (not QuerySet.update) so the history keeps a row per merge, and with it the text it replaced.
    target.save(update_fields=fields)
    _auto_promote([memory_id])
    return changed


# --- Retrieve ---


def _lazy_embed(*, user_id: str, namespace: str, model: str, other_models: bool = False) -> int:
    """Embed (a batch of) the user's live memories without a vector; with ``other_models``, also those
    embedded by another model. The first check is a partial-index lookup, so it costs nothing when all is embedded."""
    missing = Q(embedding__isnull=True) | ~Q(embedding_model=model) if other_models else Q(embedding__isnull=True)
    rows = list(
        memories_of(user_id=user_id, namespace=namespace)
        .filter(missing, status__in=LIVE)
        .order_by("-updated_at")[: settings.MEMORY_LAZY_EMBED_BATCH]
    )
    return embeddings_refresh(rows=rows) if rows else 0


def memory_retrieve(*, user_id: str, query: str, filters: dict | None = None) -> RetrieveResult:
    """The user's best memories for ``query`` and the prompt block; updates hits and streaks.

    Ranking: status (verified first) > semantic score > recency > hits; limits TopK, MaxItems,
    MaxChars. Deprecated memories never come back. Without a query vector (embedder down)
    or without any embedded memory, the most recent verified memories answer, flagged degraded.
    """
    filters = dict(filters or {})
    namespace = _namespace(filters.pop("namespace", None))
    vector, model, _ = embed_query(query)  # bounded by RESOLVE_EMBED_TIMEOUT_S; None when the embedder is down
    degraded_reason = ""
    items: list[RetrievedMemory] = []
    if vector is None:
        degraded_reason = "embedder_unavailable"
    else:
        _lazy_embed(user_id=user_id, namespace=namespace, model=model)

        def search():
            return memory_semantic_candidates(
                user_id=user_id,
                namespace=namespace,
                vector=vector,
                model=model,
                filters=filters,
                k=settings.MEMORY_RETRIEVE_TOP_K,
                min_score=settings.MEMORY_RETRIEVE_MIN_SCORE,
            )

        items = search()
        if not items and not memory_has_embedded(user_id=user_id, namespace=namespace, model=model, filters=filters):
            # Perhaps every vector is from another model (the model changed): embed a batch now and search again.
            if _lazy_embed(user_id=user_id, namespace=namespace, model=model, other_models=True):
                items = search()
            if not items and not memory_has_embedded(user_id=user_id, namespace=namespace, model=model, filters=filters):
                degraded_reason = "no_embeddings"
    if degraded_reason:
        items = memory_recent_verified(
            user_id=user_id, namespace=namespace, filters=filters, limit=settings.MEMORY_RETRIEVE_MAX_ITEMS
        )
    items.sort(key=lambda i: rank_key(i, settings.MEMORY_SCORE_DECIMALS))
    kept, block = memory_block(items, max_items=settings.MEMORY_RETRIEVE_MAX_ITEMS, max_chars=settings.MEMORY_RETRIEVE_MAX_CHARS)
    ids = [i.memory.pk for i in kept]
    with transaction.atomic():
        # Hits, streaks and the log are statistics: don't make the caller wait for the WAL flush.
        # A crash may lose the last few hundred milliseconds of them, never a memory.
        with connection.cursor() as cur:
            cur.execute("SET LOCAL synchronous_commit = off")
        if ids:
            Memory.objects.filter(pk__in=ids).update(hits=F("hits") + 1, streak=F("streak") + 1, last_retrieved_at=timezone.now())
            _auto_promote(ids)
        retrieval = MemoryRetrieval.objects.create(
            namespace=namespace, user_id=user_id, query_sha256=text_hash(query), memory_ids=ids, degraded=bool(degraded_reason)
        )
    if ids:
        fresh = Memory.objects.defer("embedding").in_bulk(ids)
        for item in kept:
            item.memory = fresh.get(item.memory.pk, item.memory)
    return RetrieveResult(kept, block, bool(degraded_reason), degraded_reason, retrieval.pk)


# --- Feedback, promotion, demotion ---


def memory_feedback(
    *, user_id: str, memory_ids: list[int] | str, outcome: str, reason: str = "", namespace: str | None = None
) -> list[Memory]:
    """``success`` promotes the memories to verified; ``failure`` deprecates them and ends their streak.

    ``memory_ids`` may be ``"last"``: the memories of the user's last retrieval. Ids of other users
    are answered exactly like unknown ids (404), and then nothing changes.
    """
    if outcome not in ("success", "failure"):
        raise ApplicationError("Use success or failure.", field="outcome")
    namespace = _namespace(namespace)
    if memory_ids == "last":
        last = memory_last_retrieval(user_id=user_id, namespace=namespace)
        if last is None:
            raise NotFound("This user has no retrieval yet.", field="memory_ids")
        ids = [i for i in last.memory_ids]
        strict = False
    else:
        ids = list(dict.fromkeys(int(i) for i in memory_ids))
        strict = True
    now = timezone.now()
    with transaction.atomic():
        rows = list(Memory.objects.select_for_update().filter(user_id=user_id, pk__in=ids).order_by("pk"))
        if strict and len(rows) != len(ids):
            missing = sorted(set(ids) - {m.pk for m in rows})
            raise NotFound(f"Unknown memory id(s): {', '.join(map(str, missing))}.", field="memory_ids")
        if not rows:
            raise NotFound("The last retrieval returned no memories.", field="memory_ids")
        for m in rows:
            if outcome == "success":
                if m.status == MemoryStatus.DEPRECATED:
                    continue  # a deprecated memory comes back only through a reviewer
                if m.status != MemoryStatus.VERIFIED or m.verified_at is None:
                    m.verified_at = now
                m.status = MemoryStatus.VERIFIED
                m.confidence = max(m.confidence, settings.MEMORY_PROMOTE_CONFIDENCE)
                m.status_changed_by = "feedback"
                m.status_reason = reason or "positive feedback"
                m.save(update_fields=["status", "confidence", "verified_at", "status_changed_by", "status_reason", "updated_at"])
            else:
                if m.status != MemoryStatus.DEPRECATED:
                    m.deprecated_at = now
                m.status = MemoryStatus.DEPRECATED
                m.streak = 0
                m.status_changed_by = "feedback"
                m.status_reason = reason or "negative feedback"
                m.save(update_fields=["status", "streak", "deprecated_at", "status_changed_by", "status_reason", "updated_at"])
    return rows


def memory_promote(*, memory: Memory, actor: str, reason: str = "") -> Memory:
    """A reviewer verifies a memory (also a deprecated one)."""
    with transaction.atomic():
        m = Memory.objects.select_for_update().get(pk=memory.pk)
        m.status = MemoryStatus.VERIFIED
        m.confidence = max(m.confidence, settings.MEMORY_PROMOTE_CONFIDENCE)
        m.verified_at = timezone.now()
        m.deprecated_at = None
        m.status_changed_by = actor
        m.status_reason = reason or "promoted by a reviewer"
        m.save()
    return m


def memory_deprecate(*, memory: Memory, actor: str, reason: str) -> Memory:
    """A reviewer deprecates a memory; the reason is required."""
    if not (reason or "").strip():
        raise ApplicationError("Give a reason for deprecating.", field="reason")
    with transaction.atomic():
        m = Memory.objects.select_for_update().get(pk=memory.pk)
        if m.status != MemoryStatus.DEPRECATED:
            m.deprecated_at = timezone.now()
        m.status = MemoryStatus.DEPRECATED
        m.streak = 0
        m.status_changed_by = actor
        m.status_reason = reason.strip()
        m.save()
    return m


# --- Quarantine ---


def quarantine_release(*, item: MemoryQuarantine, actor: str, content: str | None = None) -> ObserveResult:
    """Store a quarantined lesson after a reviewer edited out what the gate caught.

    The (edited) preview must pass the write-gate now and hold no ``[REDACTED`` marker; then it
    goes through the normal dedupe and is saved as a candidate. All or nothing: the item is
    locked, so two reviewers cannot release it twice.
    """
    text = (content if content is not None else item.redacted_preview).strip()
    if "[REDACTED" in text:
        raise ApplicationError("Edit out the [REDACTED:…] markers before releasing.", field="redacted_preview")
    gate = write_gate.check(text)
    if not gate.allowed:
        raise ApplicationError(f"Still blocked: {gate.message}", field="redacted_preview")
    with transaction.atomic():
        locked = MemoryQuarantine.objects.select_for_update().get(pk=item.pk)
        if locked.status != QuarantineStatus.PENDING:
            raise ApplicationError(f"This item is already {locked.status}.", field="status")
        artifact = Artifact(
            memory_type=locked.memory_type, topic=locked.topic, content=text, tags=list(locked.tags), extractor="reviewer"
        )
        result = memory_store(
            user_id=locked.user_id,
            namespace=locked.namespace,
            artifact=artifact,
            metadata=locked.metadata,
            source_session_id=locked.source_session_id,
            source_message_id=locked.source_message_id,
            extractor="reviewer",
            quarantine_on_block=False,
        )
        if result.decision == BLOCKED:  # the topic, tags or filters still hold a secret
            raise ApplicationError(f"Still blocked: {result.evidence.get('message', '')}", field="redacted_preview")
        locked.status = QuarantineStatus.RELEASED
        locked.redacted_preview = text
        locked.released_memory_id = result.memory_id
        locked.reviewed_by = actor
        locked.reviewed_at = timezone.now()
        locked.save(update_fields=["status", "redacted_preview", "released_memory", "reviewed_by", "reviewed_at"])
    item.refresh_from_db()
    return result


def quarantine_discard(*, item: MemoryQuarantine, actor: str) -> None:
    """A reviewer drops a quarantined lesson (it stays listed as discarded)."""
    with transaction.atomic():
        updated = MemoryQuarantine.objects.filter(pk=item.pk, status=QuarantineStatus.PENDING).update(
            status=QuarantineStatus.DISCARDED, reviewed_by=actor, reviewed_at=timezone.now()
        )
    if not updated:
        raise ApplicationError("This item is not pending any more.", field="status")


# --- Purge and embedding ---


def memories_purge_deprecated(*, older_than: timedelta, user_id: str | None = None, dry_run: bool = False) -> dict:
    """Delete deprecated memories deprecated (or, without that date, last updated) before now - ``older_than``,
    and retrieval logs older than that. Answers counts."""
    cutoff = timezone.now() - older_than
    memories = Memory.objects.filter(status=MemoryStatus.DEPRECATED).filter(
        Q(deprecated_at__lt=cutoff) | Q(deprecated_at__isnull=True, updated_at__lt=cutoff)
    )
    retrievals = MemoryRetrieval.objects.filter(created_at__lt=cutoff)
    if user_id:
        memories = memories.filter(user_id=user_id)
        retrievals = retrievals.filter(user_id=user_id)
    counts = {"memories": memories.count(), "retrievals": retrievals.count()}
    if not dry_run:
        with transaction.atomic():
            counts["memories"] = memories.delete()[1].get(Memory._meta.label, 0)
            counts["retrievals"] = retrievals.delete()[0]
    return counts


def memories_embed(*, memory_ids: list[int]) -> int:
    """Embed the given memories whose vector is missing or from another model; answers how many were embedded."""
    model = current_model_name()
    rows = list(Memory.objects.filter(pk__in=memory_ids).filter(Q(embedding__isnull=True) | ~Q(embedding_model=model)))
    return embeddings_refresh(rows=rows) if rows else 0
