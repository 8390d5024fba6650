"""Observe and store: extract → gate → dedupe → store, under a per-user advisory lock.

Vectors are computed before the transaction opens; a new or changed memory is stored without a
vector and embedded by the ``memory_embed`` Celery task (eager in the embedded default) or, failing
that, lazily at the next retrieval. A partial unique constraint backs up the lock.
"""

import logging
from dataclasses import dataclass, field

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from common.api import ApplicationError, NotFound
from common.text import text_hash
from embeddings.embedders import embed_query
from embeddings.selectors import other_model_rows_left
from embeddings.services import embeddings_compute, embeddings_refresh
from memories import write_gate
from memories.dedupe import MERGE, NEW_VERSION, SAVE, SKIP, Decision, decide, semantic_duplicate_threshold
from memories.extraction import Artifact, extract
from memories.models import Memory, MemoryQuarantine, MemoryStatus, MemoryType, MemoryWriteDecision, WriteDecisionKind
from memories.selectors import LIVE, memories_of, memories_readable, memory_neighbours, memory_retrieval_exists
from memories.services.outcomes import memory_outcome_signal_apply
from memories.services.shared import embedding_schedule, memories_auto_promote, namespace_or_default, user_lock
from memories.simhash import simhash, to_hex
from tenants.context import acting_agent_id, private_agent_id

logger = logging.getLogger(__name__)

DECISION_NAMES = {SAVE: "saved", SKIP: "skipped", MERGE: "merged", NEW_VERSION: "new_version"}
BLOCKED = "blocked"


@dataclass
class ObserveResult:
    decision: str  # saved | skipped | merged | new_version | blocked
    memory_id: int | None
    evidence: dict = field(default_factory=dict)
    embedding_pending: bool = False  # the stored or changed memory has no vector yet


def _validate_tags(tags) -> list[str]:
    if tags is None:
        return []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise ApplicationError("Tags must be a list of strings.", field="meta.tags")
    return list(dict.fromkeys(t.strip() for t in tags if t.strip()))


class _SideText:
    """The fields stored beside a lesson (topic, tags, metadata keys and values, source ids) joined into the one text
    the gate scans, each field's offsets known. Built again with ``redacting``, each field comes back with what the
    gate found redacted: the part of it a finding spans, every secret found anywhere, each answered value."""

    def __init__(self, *, redacting: bool = False, findings=(), found=None, answered=()):
        self.text = ""
        self.redacting, self.findings, self.found, self.answered = redacting, list(findings), found or {}, list(answered)

    def field(self, value: str) -> str:
        start, end = len(self.text), len(self.text) + len(value)
        self.text += value
        if not self.redacting:
            return value
        spans = [
            (max(f.start, start) - start, min(f.end, end) - start, f.kind)
            for f in self.findings
            if f.start < end and f.end > start
        ]
        return write_gate.redact_known(value, spans=spans, found=self.found, values=self.answered)

    def gap(self, separator: str) -> None:
        self.text += separator


def _side_fields(side: _SideText, *, topic: str, tags: list[str], metadata: dict, session_id: str, message_id: str):
    """Topic, tags, metadata and source ids read into ``side`` (one line each, tags and metadata entries spaced, a
    metadata entry ``key=value``); answered as ``side`` gives them back."""
    topic = side.field(topic)
    side.gap("\n")
    kept_tags = []
    for i, tag in enumerate(tags):
        if i:
            side.gap(" ")
        kept_tags.append(side.field(tag))
    side.gap("\n")
    metadata = _metadata_fields(side, metadata)
    side.gap("\n")
    session_id = side.field(session_id)
    side.gap("\n")
    return topic, kept_tags, metadata, session_id, side.field(message_id)


def _metadata_fields(side: _SideText, value):
    """``value`` (metadata: objects, lists, scalars) read into ``side``, keys and scalars each a field."""
    if isinstance(value, dict):
        out = {}
        for i, (key, item) in enumerate(value.items()):
            if i:
                side.gap(" ")
            name = side.field(str(key))
            side.gap("=")
            item = _metadata_fields(side, item)
            while name in out:  # two keys redacted alike
                name += "'"
            out[name] = item
        return out
    if isinstance(value, list):
        out = []
        for i, item in enumerate(value):
            if i:
                side.gap(" ")
            out.append(_metadata_fields(side, item))
        return out
    text = str(value)
    kept = side.field(text)
    return value if kept == text else kept


def memory_observe(*, user_id: str, user_message: str, assistant_message: str, meta: dict | None = None) -> ObserveResult:
    """Learn from one turn: extract a lesson, gate it, deduplicate it against the user's memories and store it;
    then give an outcome the user reports ("that worked", "that's wrong") to the memories retrieved before.
    Each step is its own transaction."""
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
    validation_passed = meta.get("validation_passed")
    if validation_passed is not None and not isinstance(validation_passed, bool):
        raise ApplicationError("Must be true or false.", field="meta.validation_passed")
    retrieval_id = meta.get("retrieval_id")
    if retrieval_id is not None and (isinstance(retrieval_id, bool) or not isinstance(retrieval_id, int)):
        raise ApplicationError("Must be a retrieval id.", field="meta.retrieval_id")
    namespace = namespace_or_default(value=meta.get("namespace"))
    if retrieval_id is not None and not memory_retrieval_exists(user_id=user_id, namespace=namespace, retrieval_id=retrieval_id):
        raise NotFound(f"Unknown retrieval id: {retrieval_id}.", field="meta.retrieval_id")
    artifact, extractor = extract(user_message=user_message, assistant_message=assistant_message, hints=hints)
    if artifact is None:
        result = ObserveResult(DECISION_NAMES[SKIP], None, {"rule": "nothing_reusable", "extractor": extractor})
    else:
        result = memory_store(
            user_id=user_id,
            namespace=namespace,
            artifact=artifact,
            metadata=metadata,
            source_session_id=str(meta.get("session_id") or "")[:200],
            source_message_id=str(meta.get("message_id") or "")[:200],
            extractor=extractor,
            answered_secrets=write_gate.answered_secrets(user_message, assistant_message),
        )
    # After the store, so a correction keeps its version chain: what it superseded is not judged again.
    signal = memory_outcome_signal_apply(
        user_id=user_id,
        namespace=namespace,
        user_message=user_message,
        validation_passed=validation_passed,
        retrieval_id=retrieval_id,
        skip_memory_ids=[result.evidence["deprecated_memory_id"]] if "deprecated_memory_id" in result.evidence else [],
    )
    if signal is not None:
        result.evidence["outcome_signal"] = signal
    return result


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
    answered_secrets: list[str] = (),
) -> ObserveResult:
    """Gate, deduplicate and store one artifact for the user (the write half of observe). ``answered_secrets``: the
    values the turn's answer gave to a question asking for a password, PIN or key (``write_gate.answered_secrets``):
    a lesson holding one is blocked as a secret, and they are redacted wherever the quarantine keeps text."""
    metadata = metadata or {}
    answered = list(answered_secrets)
    content = artifact.content
    lesson = artifact.uncut_content or content  # a secret past the cut blocks the lesson too
    gate = write_gate.check(content)
    if lesson != content:
        lesson_secrets = write_gate.secret_findings(lesson)
    else:
        lesson_secrets = list(gate.findings) if gate.reason == write_gate.SECRET else []
    lesson_secrets += write_gate.value_findings(lesson, answered)
    if lesson_secrets and (gate.reason != write_gate.SECRET or lesson != content):
        gate = write_gate.blocked(lesson_secrets)
    # Every field stored beside the lesson is scanned too (and redacted if the lesson is quarantined).
    fields = {
        "topic": artifact.topic,
        "tags": list(artifact.tags),
        "metadata": metadata,
        "session_id": source_session_id,
        "message_id": source_message_id,
    }
    side = _SideText()
    _side_fields(side, **fields)
    side_secrets = write_gate.secret_findings(side.text) + write_gate.value_findings(side.text, answered)
    if not gate.allowed or side_secrets:
        if gate.allowed:  # the lesson is clean but its topic, tags or filters hold a secret
            gate = write_gate.blocked(side_secrets)
        evidence = {"reason": gate.reason, "kinds": gate.kinds, "message": gate.message, "extractor": extractor}
        if quarantine_on_block:
            # What the gate found anywhere is redacted everywhere: a value found in the side text ("db_password=...")
            # is no secret in its field alone, nor a password the topic names in the lesson.
            found = {**write_gate.found_secrets(lesson, lesson_secrets), **write_gate.found_secrets(side.text, side_secrets)}
            kept = content.removesuffix("…")
            kept = len(kept) if lesson.startswith(kept) else 0  # the content is the lesson's start
            preview = write_gate.redact_known(
                content,
                spans=[(f.start, min(f.end, kept), f.kind) for f in lesson_secrets if 0 <= f.start < kept],
                found=found,
                values=answered,
            )
            redacting = _SideText(redacting=True, findings=side_secrets, found=found, answered=answered)
            topic, tags, redacted_metadata, session_id, message_id = _side_fields(redacting, **fields)
            item = MemoryQuarantine.objects.create(
                namespace=namespace,
                user_id=user_id,
                memory_type=artifact.memory_type,
                topic=topic[:200],
                tags=tags,
                reason=gate.reason,
                reason_detail=gate.message,
                finding_kinds=gate.kinds,
                redacted_preview=preview,
                source_session_id=session_id[:200],
                source_message_id=message_id[:200],
                metadata=redacted_metadata,
                private_agent_id=private_agent_id(),
            )
            evidence["quarantine_id"] = item.pk
        return ObserveResult(BLOCKED, None, evidence)

    sha = text_hash(content)
    fingerprint = simhash(content)
    vector, model, _ = embed_query(content)  # bounded by RESOLVE_EMBED_TIMEOUT_S; None when the embedder is down
    thresholds = {
        "simhash_max_distance": settings.MEMORY_SIMHASH_MAX_DISTANCE,
        "semantic_duplicate": semantic_duplicate_threshold(model),
        "topic_similarity": settings.MEMORY_TOPIC_SIMILARITY_THRESHOLD,
    }
    stale: list[Memory] = []
    if vector is not None and other_model_rows_left([Memory], current_model=model):
        # After a change of embedding model the user's memories not embedded again are no semantic neighbours: a
        # batch of them is embedded again under the user's lock below (here first, outside it: the embedder's cache
        # then serves the write), so a paraphrase of one is merged, not stored twice for good.
        stale = list(
            memories_of(user_id=user_id, namespace=namespace)
            .filter(status__in=LIVE)
            .exclude(embedding_model=model)
            .order_by("-updated_at")[: settings.MEMORY_LAZY_EMBED_BATCH]
        )
        embeddings_compute(texts=[m.embedding_text for m in stale])
    record = {
        "incoming_text": write_gate.redact(content),
        "incoming_simhash": to_hex(fingerprint),
        # memories of the user still without a vector of this model are no semantic neighbours: not a full check
        "thresholds": {**thresholds, "semantic_checked": vector is not None},
        "extractor": extractor[:80],
        "source_session_id": source_session_id[:200],
        "source_message_id": source_message_id[:200],
    }
    try:
        with transaction.atomic():
            user_lock(namespace=namespace, user_id=user_id)
            if stale:
                embeddings_refresh(rows=stale)
            if vector is not None and other_model_rows_left([Memory], current_model=model):
                record["thresholds"]["semantic_checked"] = not (
                    memories_of(user_id=user_id, namespace=namespace)
                    .filter(status__in=LIVE, embedding__isnull=False)
                    .exclude(embedding_model=model)
                    .exists()
                )
            decision = _decision_on_live(
                user_id=user_id,
                namespace=namespace,
                artifact=artifact,
                content=content,
                sha=sha,
                fingerprint=fingerprint,
                vector=vector,
                model=model,
            )
            to_embed: list[int] = []
            if decision.action == SKIP:
                memory_id = decision.target_id
                _decision_record(kind=WriteDecisionKind.SKIP, memory_id=memory_id, decision=decision, **record)
            elif decision.action == MERGE:
                memory_id = decision.target_id
                changed = _merge(memory_id=memory_id, artifact=artifact, sha=sha, fingerprint=fingerprint, metadata=metadata)
                if changed:
                    to_embed.append(memory_id)
                _decision_record(
                    kind=WriteDecisionKind.MERGE, memory_id=memory_id, decision=decision, text_changed=changed, **record
                )
            else:
                new = Memory(
                    namespace=namespace,
                    user_id=user_id,
                    agent_id=acting_agent_id(),
                    private_agent_id=private_agent_id(),  # an agent with private user data owns what it writes
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
                    old = memories_readable().select_for_update().get(pk=decision.target_id)
                    new.supersedes = old
                    new.private_agent_id = old.private_agent_id  # a new version keeps its predecessor's owner
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
        # Another writer stored the same text between our lock-free reads: answer its row (the live copy of the
        # same owner, as the unique constraint counts them).
        existing = memories_of(user_id=user_id, namespace=namespace).filter(status__in=LIVE, content_sha256=sha).first()
        if existing is None:
            raise
        with transaction.atomic():
            MemoryWriteDecision.objects.create(memory=existing, kind=WriteDecisionKind.SKIP, rule="exact", hamming=0, **record)
        return ObserveResult(
            DECISION_NAMES[SKIP], existing.pk, {"rule": "exact", "matched_memory_id": existing.pk, "extractor": extractor}
        )
    embedding_schedule(ids=to_embed)
    evidence = {
        "rule": decision.rule,
        "matched_memory_id": decision.target_id,
        "hamming": decision.hamming,
        "similarity": decision.similarity,
        "semantic_checked": record["thresholds"]["semantic_checked"],
        "thresholds": thresholds,
        "type": artifact.memory_type,
        "topic": artifact.topic,
        "extractor": extractor,
    }
    if decision.action == NEW_VERSION:
        evidence["deprecated_memory_id"] = decision.target_id
    pending = bool(to_embed) and Memory.objects.filter(pk__in=to_embed, embedding__isnull=True).exists()
    return ObserveResult(DECISION_NAMES[decision.action], memory_id, evidence, embedding_pending=pending)


def _decision_on_live(
    *, user_id: str, namespace: str, artifact: Artifact, content: str, sha: str, fingerprint: int, vector, model: str
) -> Decision:
    """Inside the observation's transaction, under the user's lock: the dedupe decision against the user's live
    neighbours, with the memory it skips into, merges into or supersedes locked and still live. An outcome or a
    reviewer that deprecated that memory meanwhile (they take no user lock) sends it round again."""
    for _attempt in range(3):
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
            correction=artifact.correction,
        )
        target = decision.target_id
        if target is None or memories_readable().select_for_update().filter(pk=target, status__in=LIVE).exists():
            break
    return decision


def _decision_record(*, kind: str, memory_id: int, decision: Decision, text_changed: bool = False, **record) -> None:
    """Keep why an observed lesson was skipped or merged into ``memory_id``, with the rule's evidence."""
    MemoryWriteDecision.objects.create(
        memory_id=memory_id,
        kind=kind,
        rule=decision.rule,
        hamming=decision.hamming,
        similarity=decision.similarity,
        text_changed=text_changed,
        **record,
    )


def _merge(*, memory_id: int, artifact: Artifact, sha: str, fingerprint: int, metadata: dict) -> bool:
    """Fold a duplicate into the existing memory: version+1, hits+1, tags and metadata unioned; the longer text wins.

    Answers whether the content changed (then the vector is cleared for re-embedding).
    """
    target = memories_readable().select_for_update().get(pk=memory_id)
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
    memories_auto_promote(ids=[memory_id])
    return changed
