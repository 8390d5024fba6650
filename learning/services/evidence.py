"""Writes of phrase evidence: what users turned down or chose for similar phrases."""

import logging

from django.db import connection, transaction

from common.db import VectorParam
from common.text import normalize_phrase, text_hash
from learning.models import PhraseEvidence
from tenants.context import private_agent_id

logger = logging.getLogger(__name__)


def phrase_evidence_add(
    *, user_id: str | None, phrase: str, verb: str, negative: float = 0.0, positive: float = 0.0, vector=None, model: str = ""
) -> None:
    """Add to one (phrase, verb, user) evidence row atomically."""
    phrase_evidence_add_many(
        rows=[{"user_id": user_id, "phrase": phrase, "verb": verb, "negative": negative, "positive": positive, "vector": vector}],
        model=model,
    )


def phrase_evidence_overrule(*, user_id: str, vector, model: str, right_verb: str, wrong_verb: str, similarity: float) -> int:
    """A user's correction overrules what their clicks taught near its text: the user's evidence rows (of the acting
    agent's kind) within ``similarity`` of ``vector`` stop holding ``right_verb`` down (positive raised to the negative)
    and stop lifting ``wrong_verb`` (negative raised to the positive). Answers how many rows changed."""
    table = PhraseEvidence._meta.db_table
    near = (
        "user_id = %s AND private_agent_id IS NOT DISTINCT FROM %s::bigint AND embedding_model = %s "
        "AND embedding IS NOT NULL AND (embedding <=> %s::vector) <= %s AND verb = %s"
    )
    base = [user_id, private_agent_id(), model, VectorParam(vector).literal(), 1.0 - similarity]
    changed = 0
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(
            f"UPDATE {table} SET positive = negative, updated_at = now() WHERE {near} AND negative > positive",
            [*base, right_verb],
        )
        changed += cur.rowcount
        cur.execute(
            f"UPDATE {table} SET negative = positive, updated_at = now() WHERE {near} AND positive > negative",
            [*base, wrong_verb],
        )
        changed += cur.rowcount
    return changed


def phrase_evidence_add_many(*, rows: list[dict], model: str) -> int:
    """Add evidence rows ({user_id, phrase, verb, negative, positive, vector}) in one INSERT ... ON CONFLICT DO UPDATE.

    Rows for the same (phrase, verb, user) are summed first; answers how many distinct rows were written. A user id
    is the tenant's own: the same id in two tenants is two scopes (the row's tenant is the scope's, a column default);
    written for an agent with private user data, the rows are that agent's (``private_agent``) and no other agent's.
    """
    owner = private_agent_id()
    merged: dict[tuple, dict] = {}
    for r in rows:
        normalized = normalize_phrase(r["phrase"])[:2000]
        key = (r["user_id"], normalized, r["verb"])
        m = merged.setdefault(key, {**r, "normalized": normalized, "negative": 0.0, "positive": 0.0, "count": 0})
        m["negative"] += r.get("negative", 0.0)
        m["positive"] += r.get("positive", 0.0)
        m["count"] += 1
        if m.get("vector") is None and r.get("vector") is not None:
            m["vector"] = r["vector"]
    if not merged:
        return 0
    table = PhraseEvidence._meta.db_table
    values, params = [], []
    for (user_id, normalized, verb), m in merged.items():
        vector = m.get("vector")
        values.append("(%s, %s, %s, %s, %s, %s, %s, %s::vector, %s, %s, %s, now(), now())")
        params += [
            user_id,
            m["phrase"][:2000],
            normalized,
            verb,
            round(m["negative"], 6),
            round(m["positive"], 6),
            m["count"],
            VectorParam(vector).literal() if vector is not None else None,
            model if vector is not None else "",
            text_hash(normalized) if vector is not None else "",
            owner,
        ]
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(
            f"""
            INSERT INTO {table} (user_id, phrase, normalized, verb, negative, positive, signal_count,
                                 embedding, embedding_model, embedding_hash, private_agent_id, created_at, updated_at)
            VALUES {", ".join(values)}
            ON CONFLICT ON CONSTRAINT phraseevidence_unique_per_tenant_scope DO UPDATE SET
                negative = {table}.negative + EXCLUDED.negative,
                positive = {table}.positive + EXCLUDED.positive,
                signal_count = {table}.signal_count + EXCLUDED.signal_count,
                embedding = COALESCE(EXCLUDED.embedding, {table}.embedding),
                embedding_model = CASE WHEN EXCLUDED.embedding IS NULL THEN {table}.embedding_model ELSE EXCLUDED.embedding_model END,
                embedding_hash = CASE WHEN EXCLUDED.embedding IS NULL THEN {table}.embedding_hash ELSE EXCLUDED.embedding_hash END,
                updated_at = now()
            """,
            params,
        )
    return len(merged)
