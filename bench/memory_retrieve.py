"""Latency of POST /api/v1/memories/retrieve with 100,000 memories over 1,000 users.

The benchmark database gets 100 memories per user (1,000 users) by COPY, with
vectors: contents are distinct BANKING77 utterances (train plus the test
utterances not used as queries), each embedded once in batches and reused; per
user the 100 contents are distinct. Status mix 25 % verified, 65 % candidate,
10 % deprecated; types, hits and update times vary. The HNSW index is rebuilt
after the load. Queries are 400 distinct held-out test utterances (never a
memory's text, so the embedder's cache never answers), each for a random user,
over HTTP (gunicorn, 1 sync worker, loopback, a new connection per request). Every retrieval also
writes (hits, streaks, retrieval log), as in production.

Compared in the same run: the embedding call alone, the raw pgvector filtered
top-6 query, and the result quality of the filtered index search against an
exact per-user scan (recall@6, and how many searches came back short).
Last line: RESULT p50_ms=.. p95_ms=..
"""

import http.client
import json
import random
import time

import numpy as np
from _common import fresh_database, record, rls_lifted, setup_django, start_gunicorn, stop_gunicorn, table
from django.conf import settings
from django.db import connection, transaction
from tqdm import tqdm

DB = "bench_memory_retrieve"
USERS = 1000
PER_USER = 100
QUERIES = 400
WARMUP = 20
TYPES = ["faq", "pattern", "snippet", "decision", "procedure"]


def pct(values, q):
    return float(np.percentile(np.array(values), q))


def literal(vec) -> str:
    return "[" + ",".join(f"{x:.6f}" for x in vec) + "]"


def load_memories(texts: list[str], vectors: np.ndarray, model: str, rng: random.Random) -> None:
    from common.text import text_hash
    from memories.extraction import derive_topic
    from memories.simhash import simhash_hex

    literals = [literal(v) for v in tqdm(vectors, desc="vector literals", unit="text")]
    meta = [(simhash_hex(t), text_hash(t), derive_topic(t)) for t in tqdm(texts, desc="fingerprints", unit="text")]
    with connection.cursor() as cur:
        cur.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'memory_embedding_hnsw'")
        indexdef = cur.fetchone()[0]
        cur.execute("DROP INDEX memory_embedding_hnsw")
    now = time.time()
    with (
        rls_lifted("memories_memory"),
        connection.cursor() as cur,
        tqdm(total=USERS * PER_USER, desc="memories", unit="row") as bar,
    ):
        with cur.connection.cursor().copy(
            "COPY memories_memory (namespace, user_id, memory_type, topic, tags, content, status, confidence, hits, streak, "
            "version, simhash, content_sha256, source_session_id, source_message_id, metadata, status_reason, "
            "status_changed_by, created_at, updated_at, embedding, embedding_model, embedding_hash) FROM STDIN"
        ) as copy:
            for u in range(USERS):
                for j in rng.sample(range(len(texts)), PER_USER):
                    r = rng.random()
                    status = "verified" if r < 0.25 else "candidate" if r < 0.90 else "deprecated"
                    sh, sha, topic = meta[j]
                    stamp = time.strftime("%Y-%m-%d %H:%M:%S+00", time.gmtime(now - rng.uniform(0, 180 * 86400)))
                    copy.write_row(
                        [
                            "learning",
                            f"user{u}",
                            rng.choice(TYPES),
                            topic,
                            "[]",
                            texts[j],
                            status,
                            0.9 if status == "verified" else 0.5,
                            rng.randrange(5),
                            0,
                            1,
                            sh,
                            sha,
                            "",
                            "",
                            "{}",
                            "",
                            "",
                            stamp,
                            stamp,
                            literals[j],
                            model,
                            sha,
                        ]
                    )
                    bar.update(1)
    started = time.perf_counter()
    with connection.cursor() as cur:
        cur.execute("SET maintenance_work_mem = '512MB'")
        cur.execute(indexdef)
        cur.execute("ANALYZE memories_memory")
    print(f"HNSW index rebuilt in {time.perf_counter() - started:.1f} s")


def http_latencies(port: int, key: str, queries: list[str], users: list[str]) -> tuple[list[float], list[dict]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    latencies, bodies = [], []
    for text, user in zip(queries, users, strict=True):
        started = time.perf_counter()
        conn.request("POST", "/api/v1/memories/retrieve", json.dumps({"user_id": user, "query": text}), headers)
        response = conn.getresponse()
        payload = response.read()
        latencies.append((time.perf_counter() - started) * 1000)
        if response.status != 200:
            raise SystemExit(f"HTTP {response.status}: {payload[:300]!r}")
        bodies.append(json.loads(payload))
    conn.close()
    return latencies, bodies


def raw_pgvector_ms(vectors, users) -> list[float]:
    from embeddings.embedders import get_embedder

    sql = (
        "SELECT id, embedding <=> %s::vector AS d FROM memories_memory WHERE user_id = %s AND namespace = 'learning' "
        "AND status = 'candidate' AND embedding_model = %s ORDER BY d LIMIT 6"
    )
    model = get_embedder().model_name
    latencies = []
    with connection.cursor() as cur:
        for vec, user in zip(vectors, users, strict=True):
            started = time.perf_counter()
            cur.execute(sql, [literal(vec), user, model])
            cur.fetchall()
            latencies.append((time.perf_counter() - started) * 1000)
    return latencies


def index_quality(vectors, users, *, force_hnsw: bool = False, iterative: str = "relaxed_order") -> tuple[float, int]:
    """Recall@k of the filtered search (per status, as retrieve runs it) against an exact scan of the user's rows,
    and how many searches came back short. ``force_hnsw`` disables sorting so the planner must walk the HNSW index."""
    from embeddings.embedders import get_embedder
    from memories.selectors import memory_semantic_candidates

    model = get_embedder().model_name
    k = settings.MEMORY_RETRIEVE_TOP_K
    found = wanted = short = 0
    for vec, user in zip(vectors, users, strict=True):
        with transaction.atomic(), connection.cursor() as cur:
            if force_hnsw:
                cur.execute("SET LOCAL enable_sort = off")
                cur.execute("SET LOCAL enable_seqscan = off")
            cur.execute(f"SET LOCAL hnsw.iterative_scan = {iterative}")
            got = {
                i.memory.pk
                for i in memory_semantic_candidates(
                    user_id=user, namespace="learning", vector=vec, model=model, filters=None, k=k, min_score=-1.0
                )
            }
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute("SET LOCAL enable_indexscan = off")  # no HNSW: an exact scan of the user's rows
            exact = set()
            for status in ("verified", "candidate"):
                cur.execute(
                    "SELECT id FROM memories_memory WHERE user_id = %s AND status = %s ORDER BY embedding <=> %s::vector, id LIMIT %s",
                    [user, status, literal(vec), k],
                )
                exact.update(r[0] for r in cur.fetchall())
        found += len(got & exact)
        wanted += len(exact)
        short += len(got) < len(exact)
    return 100.0 * found / wanted, short


def main():
    setup_django(db_name=DB)
    from agents.services import agent_key_create
    from embeddings.embedders import get_embedder
    from learning import datasets

    if not datasets.available():
        raise SystemExit(f"BANKING77 not found under {datasets.banking77_dir()}")
    fresh_database()
    rng = random.Random(11)
    test = list(dict.fromkeys(e.text for e in datasets.load("test")))
    rng.shuffle(test)
    queries = test[: WARMUP + QUERIES]
    held_out = set(queries)
    contents = sorted({e.text for e in datasets.load("train")} | {t for t in test if t not in held_out})
    embedder = get_embedder()
    started = time.perf_counter()
    vectors = np.array(embedder.embed_batch(contents))
    embed_all_s = time.perf_counter() - started
    load_memories(contents, vectors, embedder.model_name, rng)
    _, raw = agent_key_create(agent_name="bench-memory", scopes=["resolve", "feedback"])
    users = [f"user{rng.randrange(USERS)}" for _ in queries]

    # The embedding call alone, on texts the process has not seen.
    embed_ms = []
    for t in queries[WARMUP:]:
        started = time.perf_counter()
        embedder.inner.embed(f"{t} (probe)")
        embed_ms.append((time.perf_counter() - started) * 1000)
    qvecs = embedder.inner.embed_batch(queries[WARMUP:])
    pg_ms = raw_pgvector_ms(qvecs, users[WARMUP:])
    sample = (qvecs[:200], users[WARMUP : WARMUP + 200])
    quality = [
        ("planner's choice (as in production)", *index_quality(*sample)),
        ("HNSW forced, iterative scans (relaxed_order)", *index_quality(*sample, force_hnsw=True)),
        ("HNSW forced, iterative scans off (control)", *index_quality(*sample, force_hnsw=True, iterative="off")),
    ]

    server, port = start_gunicorn(DB)
    try:
        http_latencies(port, raw, queries[:WARMUP], users[:WARMUP])
        lat, bodies = http_latencies(port, raw, queries[WARMUP:], users[WARMUP:])
    finally:
        stop_gunicorn(server)
    items = [len(b["items"]) for b in bodies]
    chars = [len(b["block"]) for b in bodies]
    degraded = sum(1 for b in bodies if b["degraded"])
    with connection.cursor() as cur:
        cur.execute("SELECT count(*), count(DISTINCT user_id) FROM memories_memory")
        total, distinct_users = cur.fetchone()

    rows = [
        ["retrieve over HTTP", pct(lat, 50), pct(lat, 95)],
        ["embedding alone (baseline)", pct(embed_ms, 50), pct(embed_ms, 95)],
        ["raw pgvector filtered top-6 (baseline)", pct(pg_ms, 50), pct(pg_ms, 95)],
        ["app overhead (retrieve - embed)", pct(lat, 50) - pct(embed_ms, 50), pct(lat, 95) - pct(embed_ms, 95)],
    ]
    body = table(["step", "p50 ms", "p95 ms"], rows)
    body += "\n\n" + table(
        ["filtered search, 200 queries vs an exact per-user scan", f"recall@{settings.MEMORY_RETRIEVE_TOP_K} %", "short results"],
        [[name, recall, short] for name, recall, short in quality],
    )
    body += (
        f"\n\n{total:,} memories over {distinct_users:,} users ({len(contents):,} distinct BANKING77 texts embedded once in "
        f"{embed_all_s:.0f} s); {QUERIES} held-out test utterances for random users. Items per retrieval: mean "
        f"{np.mean(items):.1f}, block chars: mean {np.mean(chars):.0f}, max {max(chars)} (limit {settings.MEMORY_RETRIEVE_MAX_CHARS}); "
        f"degraded answers: {degraded}. The planner normally answers a one-user search from the per-user B-tree "
        "(exact); when it walks the HNSW index instead, iterative scans keep the search from coming back short."
    )
    print(body)
    record("memory_retrieve", body, f"RESULT p50_ms={pct(lat, 50):.1f} p95_ms={pct(lat, 95):.1f}")


if __name__ == "__main__":
    main()
