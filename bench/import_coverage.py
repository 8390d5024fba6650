"""Bulk-import coverage and speed on BANKING77 (``--dataset hwu64``: on HWU64).

The 77 intents are loaded as verbs WITHOUT catalogue phrases, so everything that
resolves does so through learned phrases. Part 1 imports 50 training phrases
(fixed seed) through the bulk-import path (CSV text -> ``learning.importing.parse``
-> ``learning.services.phrases_import``) and resolves every test utterance through
``learning.resolution.resolve``; baseline in the same run: exact matching of the
same 50 phrases (the utterance equals an imported phrase after normalisation).
Part 2 empties the learned phrases and imports all 10,003 training phrases the
same way, timing parse + validation + embedding + write (phrases per second), then
measures coverage once more.

Also in the same run, a ceiling: the nearest imported phrase's verb, above the best single threshold chosen on the
test set itself at the resolver's wrong count (an oracle), for what any rule over these 50 phrases could reach.

Last line: RESULT covered=<test utterances resolved right via the 50 phrases> exact_covered=<same, exact matching>
import_per_s=.. ceiling_cosine=.. ceiling_margin=..
"""

import os

# One BLAS thread: the fits are small, and BLAS worker threads spinning on a loaded machine made them 10-25x slower.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import csv
import io
import random
import time
from collections import Counter

from _common import fresh_database, prior_refit_held, record, setup_django, table
from tqdm import tqdm

SEED = 3
SAMPLE = 50
LEARNED = {"learned_exact", "learned_semantic", "user_learned_exact", "user_learned_semantic"}


def to_csv(examples) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["phrase", "verb"])
    for ex in examples:
        writer.writerow([ex.text, ex.verb])
    return buffer.getvalue()


def import_examples(examples, progress: bool) -> tuple[dict, float]:
    from common.text import normalize_phrase
    from learning.importing import parse
    from learning.services.imports import phrases_import

    once: dict[str, object] = {}
    for ex in examples:  # a data set may label one text twice (HWU64: "shut up." two ways); the import refuses that
        once.setdefault(normalize_phrase(ex.text), ex)
    started = time.perf_counter()
    rows = parse(to_csv(list(once.values())), "csv")
    with prior_refit_held():  # fitted by the caller, timed apart
        result = phrases_import(rows=rows, progress=progress, source="bench")
    return result, time.perf_counter() - started


def measure(test, label: str) -> Counter:
    from learning.resolution import resolve

    counts = Counter()
    for ex in tqdm(test, desc=f"resolving ({label})", unit="q"):
        r = resolve(text=ex.text)
        if r.outcome == "resolved":
            right = r.verb == ex.verb
            via_learned = r.candidates[0].source in LEARNED
            counts["covered" if right and via_learned else "right_other" if right else "wrong"] += 1
        elif r.outcome == "ambiguous":
            counts["asked_right" if ex.verb in {o.verb for o in r.options} else "asked_wrong"] += 1
        else:
            counts["no_match"] += 1
    return counts


def nearest_ceiling(test, wrong_allowed: int) -> dict:
    """What any rule over the nearest imported phrase could do: each test utterance answered with the verb of its
    nearest learned phrase, auto-resolved above one threshold on that similarity (or on its margin to the nearest
    phrase of another verb), the threshold chosen on the test set itself (an oracle) so that at most
    ``wrong_allowed`` answers are wrong. Answers {"cosine": right, "margin": right, "top1": utterances whose
    nearest phrase names their verb}."""
    import numpy as np

    from common.text import normalize_phrase
    from embeddings.embedders import get_embedder
    from learning.models import LearnedPhrase

    phrases = list(LearnedPhrase.objects.select_related("verb"))
    anchors = np.array([np.asarray(p.embedding, dtype=np.float32) for p in phrases])
    labels = np.array([p.verb.name for p in phrases])
    queries = np.array(get_embedder().embed_batch([normalize_phrase(ex.text) for ex in test]))
    sims = queries @ anchors.T
    order = np.argsort(-sims, axis=1)
    rows = np.arange(len(test))
    top, first = labels[order[:, 0]], sims[rows, order[:, 0]]
    other = np.where(labels[order] != top[:, None], sims[rows[:, None], order], -1.0).max(axis=1)
    right = top == np.array([ex.verb for ex in test])
    out = {"top1": int(right.sum())}
    for name, score in (("cosine", first), ("margin", first - other)):
        ranked = right[np.argsort(-score)]
        wrong = np.cumsum(~ranked)
        fits = np.nonzero(wrong <= wrong_allowed)[0]
        out[name] = int(np.cumsum(ranked)[fits[-1]]) if len(fits) else 0
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", choices=("banking77", "hwu64"), default="banking77")
    ds = ap.parse_args().dataset
    setup_django(db_name=f"bench_import_coverage_{ds}")
    from common.text import normalize_phrase
    from embeddings.embedders import current_model_name
    from learning import datasets
    from learning.catalogue import VerbEntry
    from learning.models import LearnedPhrase
    from learning.services.catalogue import verb_catalogue_load
    from learning.services.decisions import decision_prior_fit

    if not datasets.available(ds):
        raise SystemExit(f"{ds} not found under {datasets.dataset_dir(ds)}")
    fresh_database()
    train, test = datasets.load("train", ds), datasets.load("test", ds)
    verbs = sorted({ex.verb for ex in train})
    with prior_refit_held():
        verb_catalogue_load(
            entries=[
                VerbEntry(
                    v,
                    datasets.DOMAINS[ds],
                    v.split(".", 1)[1].replace("_", " ").capitalize(),
                    datasets.describe(v.split(".", 1)[1]),
                    [],
                )
                for v in verbs
            ]
        )

    # Part 1: 50 phrases.
    sample = random.Random(SEED).sample(train, SAMPLE)
    result, seconds_50 = import_examples(sample, progress=False)
    assert result["imported"] == len({normalize_phrase(e.text) for e in sample}), result
    prior = decision_prior_fit()  # as manage.py fit_decision would: the prior over the 50 imported phrases
    exact_index = {normalize_phrase(e.text): e.verb for e in sample}
    exact_covered = sum(1 for ex in test if exact_index.get(normalize_phrase(ex.text)) == ex.verb)
    c50 = measure(test, "50 imported phrases")
    ceiling = nearest_ceiling(test, c50["wrong"])

    # Part 2: all training phrases.
    LearnedPhrase.objects.all().delete()
    result_all, seconds_all = import_examples(train, progress=True)
    started = time.perf_counter()
    prior_all = decision_prior_fit()  # what the worker runs after such an import (a refit of the prior)
    seconds_prior_all = time.perf_counter() - started
    per_s = len(train) / seconds_all
    c_all = measure(test, f"all {len(train)} imported phrases")

    n = len(test)
    rows = [
        [
            f"{SAMPLE} imported phrases (seed {SEED})",
            c50["covered"],
            c50["wrong"],
            c50["asked_right"],
            c50["asked_wrong"],
            c50["no_match"],
            f"{100 * c50['covered'] / n:.1f}",
        ],
        [
            f"exact matching of the same {SAMPLE} (baseline)",
            exact_covered,
            0,
            0,
            0,
            n - exact_covered,
            f"{100 * exact_covered / n:.1f}",
        ],
        *[
            [
                f"ceiling: nearest phrase, best {name} threshold on the test set",
                right,
                c50["wrong"],
                "",
                "",
                "",
                f"{100 * right / n:.1f}",
            ]
            for name, right in ceiling.items()
            if name != "top1"
        ],
        [
            f"all {len(train)} training phrases imported",
            c_all["covered"],
            c_all["wrong"],
            c_all["asked_right"],
            c_all["asked_wrong"],
            c_all["no_match"],
            f"{100 * c_all['covered'] / n:.1f}",
        ],
    ]
    body = table(
        [
            "learned phrases",
            "resolved right via learned",
            "resolved wrong",
            "asked, right offered",
            "asked, not offered",
            "no match",
            "covered %",
        ],
        rows,
    )
    body += (
        f"\n\nPrior on the 50: {prior.held_out if prior else None}; on all: {prior_all.held_out if prior_all else None}, "
        f"fitted in {seconds_prior_all:.1f} s (floors, both head options on the folds, the live head). "
        f"{n} {ds} test utterances; verbs without catalogue phrases, so only learned phrases resolve. "
        f"Model {current_model_name()}. Import of {SAMPLE}: {seconds_50:.2f} s. Import of all {len(train)} rows "
        f"({result_all['imported']} phrases after {result_all['unchanged']} duplicates; parse, validation, batched "
        f"embedding, one transaction): {seconds_all:.1f} s = {per_s:.0f} phrases/s. Seed design: 50 phrases cover >= 200. "
        f"Ceiling rows: every utterance answered with its nearest imported phrase's verb, auto-resolved above the one "
        f"threshold (on that similarity, or on its margin to the nearest phrase of another verb) that the test set "
        f"itself picks for the resolver's wrong count: an oracle no deployment has, for what a rule over the nearest "
        f"phrase could reach with these {SAMPLE} phrases ({len(set(e.verb for e in sample))} of {len(verbs)} verbs named; the nearest "
        f"phrase names the right verb for {ceiling['top1']} of the {n} utterances)."
    )
    print(body)
    record(
        f"import_coverage ({ds})",
        body,
        f"RESULT covered={c50['covered']} exact_covered={exact_covered} import_per_s={per_s:.1f}"
        f" ceiling_cosine={ceiling['cosine']} ceiling_margin={ceiling['margin']}",
    )


if __name__ == "__main__":
    main()
