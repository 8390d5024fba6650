"""Precision and recall of the memory merge decision on BANKING77 pairs.

Pairs come from BANKING77 test.csv (measuring only): 1,000 pairs of two
utterances of the same intent (near-duplicate candidates: should merge) and
1,000 pairs of utterances of different intents (distinct: should not). For each
pair the first utterance is stored as a memory of its own user (with its real
vector, SimHash and SHA-256), then the second goes through the real dedupe path
(``memory_neighbours`` SQL: exact hash, SimHash Hamming in PostgreSQL, pgvector
nearest; then ``memory_dedupe.decide``). The write-gate is not applied: short
utterances would be blocked as too short, and this measures the dedupe rule.

"Merged" = decision skip or merge (the second text folds into the first).
new_version decisions are counted separately and as not merged.

Compared in the same run: exact-text only, SimHash only (no vectors), the
default rule (SimHash <= 3, cosine >= 0.92), and a threshold sweep.
Last line: RESULT precision=<%> recall=<%>  (default thresholds)
"""

import dataclasses
import random
import time

import numpy as np
from _common import fresh_database, record, rls_lifted, setup_django, table
from django.conf import settings
from django.db import connection
from tqdm import tqdm

PAIRS_EACH = 1000
TYPE = "pattern"


def make_pairs(rng: random.Random) -> list[tuple[str, str, bool]]:
    from learning import datasets

    grouped = datasets.by_verb(datasets.load("test"))
    intents = sorted(grouped)
    pos, seen = [], set()
    while len(pos) < PAIRS_EACH:
        intent = rng.choice(intents)
        a, b = rng.sample(grouped[intent], 2)
        if a != b and (a, b) not in seen:
            seen.add((a, b))
            pos.append((a, b, True))
    neg = []
    while len(neg) < PAIRS_EACH:
        i1, i2 = rng.sample(intents, 2)
        neg.append((rng.choice(grouped[i1]), rng.choice(grouped[i2]), False))
    return pos + neg


def insert_firsts(pairs, vectors: dict[str, np.ndarray], model: str) -> None:
    from common.text import text_hash
    from memories.extraction import derive_topic
    from memories.simhash import simhash, to_hex

    with (
        rls_lifted("memories_memory"),
        connection.cursor() as cur,
        cur.connection.cursor().copy(
            "COPY memories_memory (namespace, user_id, memory_type, topic, tags, content, status, confidence, hits, streak, "
            "version, simhash, content_sha256, source_session_id, source_message_id, metadata, status_reason, "
            "status_changed_by, created_at, updated_at, embedding, embedding_model, embedding_hash) FROM STDIN"
        ) as copy,
    ):
        for i, (a, _, _) in enumerate(pairs):
            vec = vectors[a]
            copy.write_row(
                [
                    "learning",
                    f"pair{i}",
                    TYPE,
                    derive_topic(a),
                    "[]",
                    a,
                    "candidate",
                    0.5,
                    0,
                    0,
                    1,
                    to_hex(simhash(a)),
                    text_hash(a),
                    "",
                    "",
                    "{}",
                    "",
                    "",
                    "now",
                    "now",
                    "[" + ",".join(f"{x:.6f}" for x in vec) + "]",
                    model,
                    text_hash(a),
                ]
            )
    with connection.cursor() as cur:
        cur.execute("ANALYZE memories_memory")


def prf(decisions, labels):
    from memories.dedupe import MERGE, SKIP

    tp = sum(1 for d, y in zip(decisions, labels, strict=True) if d in (SKIP, MERGE) and y)
    fp = sum(1 for d, y in zip(decisions, labels, strict=True) if d in (SKIP, MERGE) and not y)
    fn = sum(1 for d, y in zip(decisions, labels, strict=True) if d not in (SKIP, MERGE) and y)
    precision = 100.0 * tp / (tp + fp) if tp + fp else 100.0
    recall = 100.0 * tp / (tp + fn) if tp + fn else 0.0
    return precision, recall, tp, fp, fn


def main():
    setup_django(db_name="bench_memory_dedupe")
    from common.text import text_hash
    from embeddings.embedders import get_embedder
    from learning import datasets
    from memories.dedupe import NEW_VERSION, SKIP, decide, semantic_duplicate_threshold
    from memories.extraction import derive_topic
    from memories.selectors import memory_neighbours
    from memories.simhash import simhash

    if not datasets.available():
        raise SystemExit(f"BANKING77 not found under {datasets.banking77_dir()}")
    fresh_database()
    rng = random.Random(5)
    pairs = make_pairs(rng)
    embedder = get_embedder()
    texts = sorted({t for a, b, _ in pairs for t in (a, b)})
    vectors = dict(zip(texts, embedder.embed_batch(texts), strict=True))
    model = embedder.model_name
    insert_firsts(pairs, vectors, model)
    labels = [y for _, _, y in pairs]

    neighbours, timings = [], []
    for i, (_, b, _) in enumerate(tqdm(pairs, desc="dedupe", unit="pair")):
        started = time.perf_counter()
        neighbours.append(
            memory_neighbours(
                user_id=f"pair{i}",
                namespace="learning",
                content_sha256=text_hash(b),
                simhash=simhash(b),
                vector=vectors[b],
                model=model,
                k=settings.MEMORY_DEDUPE_NEIGHBOURS,
                max_distance=settings.MEMORY_SIMHASH_MAX_DISTANCE,
            )
        )
        timings.append((time.perf_counter() - started) * 1000)

    def run(semantic: float, simhash_distance: int, use_vectors: bool = True, exact_only: bool = False):
        decisions = []
        for (_, b, _), ns in zip(pairs, neighbours, strict=True):
            if exact_only:
                decisions.append(SKIP if any(n.content_sha256 == text_hash(b) for n in ns) else "save")
                continue
            if not use_vectors:
                ns = [dataclasses.replace(n, similarity=None) for n in ns]
            decisions.append(
                decide(
                    content=b,
                    content_sha256=text_hash(b),
                    memory_type=TYPE,
                    topic=derive_topic(b),
                    neighbours=ns,
                    simhash_max_distance=simhash_distance,
                    semantic_threshold=semantic,
                    topic_threshold=settings.MEMORY_TOPIC_SIMILARITY_THRESHOLD,
                ).action
            )
        return decisions

    default_t = semantic_duplicate_threshold(get_embedder().model_name)
    default_d = settings.MEMORY_SIMHASH_MAX_DISTANCE
    configs = [
        ("exact text only (baseline)", run(0, 0, exact_only=True)),
        (f"SimHash only, distance <= {default_d} (baseline)", run(2.0, default_d, use_vectors=False)),
        (f"default: SimHash <= {default_d}, cosine >= {default_t}", run(default_t, default_d)),
    ]
    for t in (0.70, 0.75, 0.80, 0.85, 0.88, 0.95):
        configs.append((f"sweep: cosine >= {t:.2f}", run(t, default_d)))
    rows = []
    for name, decisions in configs:
        p, r, tp, fp, fn = prf(decisions, labels)
        rows.append([name, p, r, tp, fp, fn, sum(1 for d in decisions if d == NEW_VERSION)])
    same = [max((n.similarity or 0) for n in ns) if ns else 0 for ns, y in zip(neighbours, labels, strict=True) if y]
    diff = [max((n.similarity or 0) for n in ns) if ns else 0 for ns, y in zip(neighbours, labels, strict=True) if not y]
    body = table(["rule", "precision %", "recall %", "TP", "FP", "FN", "new_version"], rows)
    body += (
        f"\n\n{PAIRS_EACH} same-intent and {PAIRS_EACH} different-intent pairs from BANKING77 test.csv, model {model}. "
        f"Median cosine: same intent {np.median(same):.3f}, different intents {np.median(diff):.3f}. "
        f"Neighbour lookup (SQL) p50 {np.percentile(timings, 50):.2f} ms, p95 {np.percentile(timings, 95):.2f} ms. "
        "Merged = skip or merge. Same-intent BANKING77 utterances are paraphrases, rarely the same lesson worded twice, "
        "so recall at the conservative default is low by design: a wrong merge loses a lesson, a missed one only costs a row."
    )
    print(body)
    p, r, *_ = prf(configs[2][1], labels)
    record("memory_dedupe", body, f"RESULT precision={p:.1f} recall={r:.1f}")


if __name__ == "__main__":
    main()
