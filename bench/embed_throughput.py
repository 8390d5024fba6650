"""Embedding throughput of bulk jobs: length-sorted batches, and several worker processes.

Texts: the BANKING77 and HWU64 training utterances (mixed lengths). In one run, with the local MiniLM model:
the previous way (batches of 64 in file order, one process) as the baseline; length-sorted batches in one
process; the same split over ``--workers`` processes (default: the machine's cores). Then an end-to-end import
(``phrases_import``: validation, vectors, one transaction with the HNSW index maintained) of the BANKING77
training utterances with one worker and with ``--workers``. Figures are texts per second, and per core.

Last line: RESULT embed_per_s_per_core=.. embed_per_s_workers=.. workers=.. import_per_s=.. import_per_s_workers=..
"""

import argparse
import os
import time

from _common import fresh_database, record, setup_django, table

DB = "bench_embed_throughput"


def per_second(n: int, seconds: float) -> float:
    return n / seconds if seconds else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--texts", type=int, default=6000, help="texts embedded in each in-memory measurement")
    args = ap.parse_args()
    setup_django(db_name=DB)
    from embeddings.embedders import LocalMiniLMEmbedder
    from embeddings.parallel import ParallelEmbedder, embedding_workers
    from learning import datasets
    from learning.importing import ImportRow
    from learning.management.commands.demo import banking_entries
    from learning.models import LearnedPhrase
    from learning.services.catalogue import verb_catalogue_load
    from learning.services.imports import phrases_import

    texts = [e.text for e in datasets.load("train", "banking77")] + [e.text for e in datasets.load("train", "hwu64")]
    texts = texts[: args.texts]
    model = LocalMiniLMEmbedder(threads=1, batch_size=64)
    model.embed_batch(texts[:64])  # load and warm

    started = time.perf_counter()
    for start in range(0, len(texts), 64):  # the previous way: file order, padded to each batch's longest text
        model._run(texts[start : start + 64])
    baseline = per_second(len(texts), time.perf_counter() - started)

    started = time.perf_counter()
    model.embed_batch(texts)
    sorted_one = per_second(len(texts), time.perf_counter() - started)

    parallel = ParallelEmbedder(workers=args.workers, model_name=model.model_name, dimension=384, batch_size=64)
    parallel.embed_batch(texts[: 64 * args.workers])  # start the workers and load their models
    started = time.perf_counter()
    parallel.embed_batch(texts)
    sorted_many = per_second(len(texts), time.perf_counter() - started)
    parallel.close()

    from common.text import normalize_phrase

    seen: dict[str, str] = {}
    for e in datasets.load("train", "banking77"):  # one verb per text (the data set repeats a few texts)
        seen.setdefault(normalize_phrase(e.text), e)
    train = list(seen.values())
    imports = {}
    for workers in (1, args.workers):
        fresh_database()
        verb_catalogue_load(entries=banking_entries())
        rows = [ImportRow(number=i + 1, phrase=e.text, verb=e.verb) for i, e in enumerate(train)]
        with embedding_workers(workers):
            started = time.perf_counter()
            result = phrases_import(rows=rows, source="import")
            imports[workers] = per_second(result["imported"], time.perf_counter() - started)
        assert LearnedPhrase.objects.filter(embedding__isnull=False).count() == result["imported"]

    cores = args.workers
    rows = [
        ["embed, file order, batches of 64, 1 process (previous)", f"{baseline:.0f}", f"{baseline:.0f}", "1.00"],
        ["embed, length-sorted batches, 1 process", f"{sorted_one:.0f}", f"{sorted_one:.0f}", f"{sorted_one / baseline:.2f}"],
        [
            f"embed, length-sorted, {cores} worker processes",
            f"{sorted_many:.0f}",
            f"{sorted_many / cores:.0f}",
            f"{sorted_many / baseline:.2f}",
        ],
        [f"import {len(train):,} phrases end to end, 1 process", f"{imports[1]:.0f}", f"{imports[1]:.0f}", ""],
        [
            f"import {len(train):,} phrases end to end, {cores} workers",
            f"{imports[cores]:.0f}",
            f"{imports[cores] / cores:.0f}",
            f"{imports[cores] / imports[1]:.2f} vs 1 process",
        ],
    ]
    body = table(["job", "texts/s", "texts/s per core", "vs baseline"], rows)
    body += (
        f"\n\n{len(texts):,} BANKING77 and HWU64 training utterances for the in-memory figures; the import includes "
        "validation and one transaction writing rows and their HNSW index entries. Target: >= 150 phrases/s per core."
    )
    print(body)
    record(
        "embed_throughput",
        body,
        f"RESULT embed_per_s_per_core={sorted_one:.0f} embed_per_s_workers={sorted_many:.0f} workers={cores} "
        f"import_per_s={imports[1]:.0f} import_per_s_workers={imports[cores]:.0f}",
    )


if __name__ == "__main__":
    main()
