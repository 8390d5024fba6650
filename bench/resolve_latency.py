"""Latency of POST /api/v1/resolve over HTTP with 10,000 and 100,000 learned phrases.

A gunicorn worker on loopback serves the app on a benchmark database holding
the BANKING77 demo catalogue plus N learned phrases spread over 1,000 users and
global scope. The first 10,003 phrases are BANKING77 training utterances with
their real vectors; the rest are distinct texts whose vectors are those
utterances' vectors slightly perturbed (index size and shape matter for
latency, not meaning). Queries are distinct test utterances, so the embedder's
cache never answers. In the same run: the raw pgvector top-5 query and the
embedding call alone, so the app's overhead shows.

Last line (100,000 phrases): RESULT p50_ms=.. p95_ms=.. embed_ms=.. pgvector_ms=..
"""

import http.client
import json
import random
import time

import numpy as np
from _common import fresh_database, record, setup_django, start_gunicorn, stop_gunicorn, table
from django.db import connection
from tqdm import tqdm

DB = "bench_resolve_latency"
QUERIES = 400
WARMUP = 20


def pct(values, q):
    return float(np.percentile(np.array(values), q))


def load_phrases(target: int, base_vecs, base: list, verb_ids: dict, rng: random.Random) -> None:
    """Top the learned-phrase table up to ``target`` rows with COPY."""
    from common.text import normalize_phrase, text_hash
    from embeddings.embedders import get_embedder

    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM learning_learnedphrase")
        have = cur.fetchone()[0]
    if have >= target:
        return
    model = get_embedder().model_name
    np_rng = np.random.default_rng(have)
    with connection.cursor() as cur, tqdm(total=target - have, desc=f"learned phrases to {target}", unit="row") as bar:
        with cur.connection.cursor().copy(
            "COPY learning_learnedphrase (phrase, normalized, verb_id, user_id, confidence, occurrence_count, source, "
            "is_active, created_at, updated_at, embedding, embedding_model, embedding_hash) FROM STDIN"
        ) as copy:
            for i in range(have, target):
                j = i % len(base)
                text = base[j].text if i < len(base) else f"{base[j].text} #{i}"
                vec = base_vecs[j]
                if i >= len(base):
                    vec = vec + np_rng.normal(0, 0.02, vec.shape).astype(np.float32)
                    vec = vec / np.linalg.norm(vec)
                norm = normalize_phrase(text)
                user = None if rng.random() < 0.2 else f"user{rng.randrange(1000)}"
                copy.write_row(
                    [
                        text,
                        norm,
                        verb_ids[base[j].verb],
                        user,
                        1.0,
                        1,
                        "bench",
                        True,
                        "now",
                        "now",
                        "[" + ",".join(f"{x:.6f}" for x in vec) + "]",
                        model,
                        text_hash(norm),
                    ]
                )
                bar.update(1)
    with connection.cursor() as cur:
        cur.execute("ANALYZE learning_learnedphrase")


def http_latencies(port: int, key: str, texts: list[str], users: list[str | None]) -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    latencies = []
    for i, text in enumerate(texts):
        body = {"text": text}
        if users[i]:
            body["user_id"] = users[i]
        started = time.perf_counter()
        conn.request("POST", "/api/v1/resolve", json.dumps(body), headers)
        response = conn.getresponse()
        payload = response.read()
        elapsed = (time.perf_counter() - started) * 1000
        if response.status != 200:
            raise SystemExit(f"HTTP {response.status}: {payload[:300]!r}")
        latencies.append(elapsed)
    conn.close()
    return latencies


def raw_pgvector_ms(vectors, users) -> list[float]:
    latencies = []
    sql = (
        "SELECT verb_id, embedding <=> %s::vector AS d FROM learning_learnedphrase "
        "WHERE is_active AND (user_id IS NULL OR user_id = %s) ORDER BY d LIMIT 5"
    )
    with connection.cursor() as cur:
        for vec, user in zip(vectors, users, strict=True):
            literal = "[" + ",".join(f"{x:.6f}" for x in vec) + "]"
            started = time.perf_counter()
            cur.execute(sql, [literal, user])
            cur.fetchall()
            latencies.append((time.perf_counter() - started) * 1000)
    return latencies


def main():
    setup_django(db_name=DB)
    from agents.services import agent_key_create
    from common.text import normalize_phrase
    from embeddings.embedders import get_embedder
    from learning import datasets
    from learning.management.commands.demo import banking_entries
    from learning.models import Verb
    from learning.services.catalogue import verb_catalogue_load

    if not datasets.available():
        raise SystemExit(f"BANKING77 not found under {datasets.banking77_dir()}")
    fresh_database()
    verb_catalogue_load(entries=banking_entries())
    verb_ids = dict(Verb.objects.values_list("name", "id"))
    _, raw = agent_key_create(agent_name="bench", scopes=["resolve"])
    train = datasets.load("train")
    embedder = get_embedder()
    base_vecs = np.array(embedder.embed_batch([normalize_phrase(e.text) for e in tqdm(train, desc="embedding train")]))
    test = [e.text for e in datasets.load("test")]
    rng = random.Random(7)
    rng.shuffle(test)

    results = []
    for size in (10_000, 100_000):
        load_phrases(size, base_vecs, train, verb_ids, rng)
        queries = test[: WARMUP + QUERIES] if size == 10_000 else test[WARMUP + QUERIES : 2 * (WARMUP + QUERIES)]
        users = [f"user{rng.randrange(1000)}" if i % 2 else None for i in range(len(queries))]
        # The embedding call alone, on texts the process has not seen.
        fresh = [f"{t} (probe)" for t in queries[WARMUP:]]
        embed_ms = []
        for t in fresh:
            started = time.perf_counter()
            embedder.inner.embed(normalize_phrase(t))
            embed_ms.append((time.perf_counter() - started) * 1000)
        vectors = embedder.inner.embed_batch([normalize_phrase(t) for t in queries[WARMUP:]])
        pg_ms = raw_pgvector_ms(vectors, users[WARMUP:])
        server, port = start_gunicorn(DB)
        try:
            http_latencies(port, raw, queries[:WARMUP], users[:WARMUP])
            lat = http_latencies(port, raw, queries[WARMUP:], users[WARMUP:])
        finally:
            stop_gunicorn(server)
        results.append((size, pct(lat, 50), pct(lat, 95), pct(embed_ms, 50), pct(pg_ms, 50), pct(pg_ms, 95)))

    rows = [[f"{s:,}", p50, p95, e50, g50, g95, p50 - e50] for s, p50, p95, e50, g50, g95 in results]
    body = table(
        [
            "learned phrases",
            "resolve p50 ms",
            "resolve p95 ms",
            "embed p50 ms",
            "pgvector top-5 p50 ms",
            "pgvector p95 ms",
            "app overhead p50 ms",
        ],
        rows,
    )
    body += f"\n\n{QUERIES} distinct test utterances per size over HTTP (gunicorn, 1 sync worker, loopback; the sync worker closes each connection, so every request includes a TCP connect), half with a user id. Target: p50 <= embed + 10 ms."
    print(body)
    s, p50, p95, e50, g50, _ = results[-1]
    record("resolve_latency", body, f"RESULT p50_ms={p50:.1f} p95_ms={p95:.1f} embed_ms={e50:.1f} pgvector_ms={g50:.2f}")


if __name__ == "__main__":
    main()
