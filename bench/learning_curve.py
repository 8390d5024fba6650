"""Learning curve on BANKING77: does the agent learn from its users' clicks and corrections?

Start: the demo catalogue (77 verbs, 5 training phrases each, fixed seed, as
``manage.py demo``). Stream: the remaining training utterances in a fixed
shuffled order, through the REST API (Django test client, one agent key, one
simulated end user), as users would react:

* resolved right            -> accept: POST /api/v1/resolutions/confirm (the agent ran the verb, the user kept it)
* resolved wrong            -> POST /api/v1/resolutions/correct
* ambiguous, right offered  -> POST /api/v1/disambiguations/{id}/select
* ambiguous, not offered    -> POST .../abandon (typed_new_input) + correction (wrong verb: the top option)
* no match                  -> nothing can be sent (the correction needs the verb that was wrong)

After every 1,000 interactions the 3,080 test utterances are resolved for the
same user through ``learning.resolution.resolve`` (the function the API calls;
called in-process so measuring stores no disambiguation requests) and counted:
correct auto-resolutions, wrong auto-resolutions, asks, no match. The test set
is embedded once, in batches, before the runs (the embedder's cache serves it).

Same run, same stream: ``exact``  — learning limited to exact matches (learned
phrases are used only when the text equals one; no semantic anchors, no
feedback penalties); ``static`` — learning off: the stream changes nothing the
resolver reads, so it is measured once (its curve is flat by construction).
With exact-only learning an answer can change only for a test text equal to a
learned phrase, so its curve points re-resolve just those texts and reuse the
static answers for the rest; after its stream every test utterance is resolved
once more and both figures are printed, as a check of that shortcut.

After the learning run, a resolution profile is fitted on the stream's gold
labels (learning.services.profiles.resolution_profile_fit: leave-one-out scores, hashed
held-out share), activated, the test set measured once more, and the profile
retired; these figures are printed next to the table (the RESULT line reports
the product defaults). LEARNING_CURVE_FIT_ONLY=1 runs only that step on the
state the last run left in the benchmark database.

Figures: bench/learning_curve.json, bench/learning_curve.png, bench/RESULTS.md.
Last line: RESULT final_correct=<%> final_wrong=<%> final_asked=<%> static_correct=<%> exact_correct=<%>

Environment (smoke runs, nothing recorded): LEARNING_CURVE_LIMIT=n streams only n
interactions, LEARNING_CURVE_TEST_LIMIT=n measures on a fixed sample of n test
utterances; LEARNING_CURVE_EVERY (default 1000).
"""

import json
import os
import random
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from _common import ROOT, fresh_database, record, setup_django, table
from django.conf import settings
from django.db import connection
from django.db.models import Q
from tqdm import tqdm

os.environ.setdefault("EMBEDDING_CACHE_SIZE", "200000")
os.environ.setdefault("LOG_LEVEL", "WARNING")

USER = "bench-user"
SEED = 2024
EVERY = int(os.environ.get("LEARNING_CURVE_EVERY", "1000"))
LIMIT = int(os.environ.get("LEARNING_CURVE_LIMIT", "0")) or None
TEST_LIMIT = int(os.environ.get("LEARNING_CURVE_TEST_LIMIT", "0")) or None
OUT_JSON = ROOT / "bench" / "learning_curve.json"
OUT_PNG = ROOT / "bench" / "learning_curve.png"


# The resolver's settings as configured, read in main() once Django is set up; configure() switches from them.
CONFIGURED = {}


def configure(mode: str) -> None:
    """full: every tier; exact: learned phrases only as exact matches, no feedback penalties."""
    settings.RESOLVE_USE_LEARNED_SEMANTIC = mode == "full" and CONFIGURED["semantic"]
    settings.RESOLVE_USE_FEEDBACK_PENALTY = mode == "full" and CONFIGURED["penalty"]


def fresh_start():
    from rest_framework.test import APIClient

    from agents.models import Scope
    from agents.services import agent_key_create
    from learning.management.commands.demo import banking_entries
    from learning.services.catalogue import verb_catalogue_load

    fresh_database()
    verb_catalogue_load(entries=banking_entries(per_verb=5, seed=77))
    _, raw = agent_key_create(agent_name="learning-curve", scopes=[Scope.RESOLVE, Scope.FEEDBACK])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def _outcome(ex, r) -> str:
    if r.outcome == "resolved":
        return "correct" if r.verb == ex.verb else "wrong"
    if r.outcome == "ambiguous":
        return "asked_right_offered" if ex.verb in {o.verb for o in r.options} else "asked"
    return "no_match"


def outcomes(test, threads: int = 3) -> list[str]:
    """Each test utterance resolved for the simulated user (a few threads: the time is spent waiting on the database)."""
    from learning.resolution import resolve

    def work(chunk):
        try:
            return [_outcome(ex, resolve(text=ex.text, user_id=USER)) for ex in chunk]
        finally:
            connection.close()

    size = -(-len(test) // threads)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        parts = list(pool.map(work, [test[i : i + size] for i in range(0, len(test), size)]))
    return [o for part in parts for o in part]


def summary(results: list[str]) -> dict:
    counts = Counter(results)
    n = len(results)
    pct = {k: round(100.0 * counts[k] / n, 2) for k in ("correct", "wrong", "no_match")}
    pct["asked"] = round(100.0 * (counts["asked"] + counts["asked_right_offered"]) / n, 2)
    pct["asked_right_offered"] = round(100.0 * counts["asked_right_offered"] / n, 2)
    return pct


def exact_outcomes(test, static_results: list[str]) -> list[str]:
    """Exact-only learning can change an answer only where the text equals a learned phrase: re-resolve just those."""
    from common.text import normalize_phrase
    from learning.models import LearnedPhrase

    learned = set(
        LearnedPhrase.objects.filter(Q(user_id=USER) | Q(user_id__isnull=True), is_active=True).values_list(
            "normalized", flat=True
        )
    )
    changed = [i for i, ex in enumerate(test) if normalize_phrase(ex.text) in learned]
    results = list(static_results)
    for i, o in zip(changed, outcomes([test[i] for i in changed], threads=1) if changed else [], strict=True):
        results[i] = o
    return results


def _post(client, url, body, ok=(200,)):
    response = client.post(url, body, format="json")
    if response.status_code not in ok:
        raise RuntimeError(f"{url} answered {response.status_code}: {response.content[:300]!r}")
    return response.json()


def interact(client, ex, stats: Counter) -> None:
    """One simulated user turn through the API."""
    r = _post(client, "/api/v1/resolve", {"text": ex.text, "user_id": USER})
    correction = {"text": ex.text[:500], "correct_verb": ex.verb, "user_id": USER}
    if r["outcome"] == "resolved":
        if r["verb"] == ex.verb:
            stats["accepted"] += 1
            _post(client, "/api/v1/resolutions/confirm", {"text": ex.text[:500], "verb": ex.verb, "user_id": USER}, ok=(200, 409))
        else:
            stats["corrected"] += 1
            _post(client, "/api/v1/resolutions/correct", {**correction, "wrong_verb": r["verb"]}, ok=(200, 409))
    elif r["outcome"] == "ambiguous":
        offered = [o["verb"] for o in r["options"]]
        if ex.verb in offered:
            stats["clicked"] += 1
            _post(client, f"/api/v1/disambiguations/{r['request_id']}/select", {"selected_verb": ex.verb})
        else:
            stats["abandoned+corrected"] += 1
            _post(client, f"/api/v1/disambiguations/{r['request_id']}/abandon", {"reason": "typed_new_input"})
            _post(client, "/api/v1/resolutions/correct", {**correction, "wrong_verb": offered[0]}, ok=(200, 409))
    else:
        stats["no_match"] += 1


def run(mode: str, stream, test, static_results: list[str]) -> tuple[list[dict], Counter, float, dict]:
    configure(mode)
    client = fresh_start()

    def point(i):
        results = exact_outcomes(test, static_results) if mode == "exact" else outcomes(test)
        return {"interactions": i, **summary(results)}

    curve = [point(0)]
    stats = Counter()
    started = time.perf_counter()
    for i, ex in enumerate(tqdm(stream, desc=f"stream ({mode})", unit="turn", mininterval=10), 1):
        interact(client, ex, stats)
        if i % EVERY == 0 or i == len(stream):
            curve.append(point(i))
            tqdm.write(f"{mode} @ {i}: {curve[-1]}")
    check = {}
    if mode == "exact":  # the shortcut above, checked once against resolving every utterance
        check = summary(outcomes(test))
    return curve, stats, time.perf_counter() - started, check


def fitted_point(test) -> dict:
    """Fit threshold and margin on the stream's gold labels (clicks, corrections), activate, measure the test set, retire."""
    from learning.services.profiles import resolution_profile_activate, resolution_profile_fit, resolution_profile_retire

    configure("full")
    row = resolution_profile_fit()
    resolution_profile_activate(fitted=row)
    try:
        figures = summary(outcomes(test))
    finally:
        resolution_profile_retire(fitted=row)
    return {
        "resolve_threshold": row.resolve_threshold,
        "margin": row.margin,
        "baseline": row.baseline,
        "gold": row.gold_count,
        "held_out": row.held_out_count,
        "held_out_in_force": row.held_out_current,
        "held_out_fitted": row.held_out_fitted,
        "test": figures,
    }


def describe_fitted(f: dict) -> str:
    return (
        f"Fitted profile on the stream's {f['gold']} gold labels ({f['held_out']} of them held out to check the fit): threshold {f['resolve_threshold']}, "
        f"margin {f['margin']} (in force: {f['baseline']}). Held-out gold labels, profile in force: {f['held_out_in_force']}; "
        f"fitted: {f['held_out_fitted']}. Test set after the stream with the fitted profile activated: {f['test']}."
    )


def plot(full, exact, static) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [p["interactions"] for p in full]
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    ax.plot(x, [p["correct"] for p in full], "o-", color="tab:green", label="learning: correct")
    ax.plot(x, [p["wrong"] for p in full], "o-", color="tab:red", label="learning: wrong")
    ax.plot(x, [p["asked"] for p in full], "o-", color="tab:blue", label="learning: asked")
    ax.plot(
        [p["interactions"] for p in exact],
        [p["correct"] for p in exact],
        "s--",
        color="tab:olive",
        label="exact-match learning: correct",
    )
    ax.axhline(static["correct"], color="grey", linestyle=":", label="learning off: correct")
    ax.axhline(85, color="tab:green", linewidth=0.6, alpha=0.5)
    ax.axhline(3, color="tab:red", linewidth=0.6, alpha=0.5)
    ax.set_xlabel("interactions streamed (BANKING77 train, after the 5 seed phrases per verb)")
    ax.set_ylabel("% of the 3,080 test utterances")
    ax.set_ylim(0, 100)
    ax.set_title("Learning curve on BANKING77 (all-MiniLM-L6-v2)")
    ax.grid(alpha=0.3)
    ax.legend(loc="center right", fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT_PNG)
    plt.close(fig)


def main():
    setup_django(db_name="bench_learning_curve")
    from common.text import normalize_phrase
    from embeddings.embedders import get_embedder
    from learning import datasets

    CONFIGURED.update(semantic=settings.RESOLVE_USE_LEARNED_SEMANTIC, penalty=settings.RESOLVE_USE_FEEDBACK_PENALTY)
    if not datasets.available():
        raise SystemExit(f"BANKING77 not found under {datasets.banking77_dir()}")
    if os.environ.get("LEARNING_CURVE_FIT_ONLY"):
        # Only the fitted-profile step, on the state the last full run left in the benchmark database.
        test = datasets.load("test")
        embedder = get_embedder()
        texts = sorted({normalize_phrase(ex.text) for ex in test})
        for i in range(0, len(texts), 256):
            embedder.embed_batch(texts[i : i + 256])
        fitted = fitted_point(test)
        body = describe_fitted(fitted)
        print(body)
        with open(ROOT / "bench" / "RESULTS.md", "a", encoding="utf-8") as fh:
            fh.write(f"\n### learning_curve — fitted-profile step on the final state of the run above\n\n{body}\n")
        return
    _, stream = datasets.catalogue_split(per_verb=5, seed=77)
    random.Random(SEED).shuffle(stream)
    stream = stream[:LIMIT] if LIMIT else stream
    test = datasets.load("test")
    if TEST_LIMIT:
        test = random.Random(SEED).sample(test, TEST_LIMIT)

    started = time.perf_counter()
    # The test set and the stream, embedded in batches up front (the embedder's cache serves them later).
    texts = sorted({normalize_phrase(ex.text) for ex in test} | {normalize_phrase(ex.text) for ex in stream})
    embedder = get_embedder()
    for i in tqdm(range(0, len(texts), 256), desc="embedding test set and stream", unit="batch"):
        embedder.embed_batch(texts[i : i + 256])
    embed_s = time.perf_counter() - started

    configure("off")
    fresh_start()
    static_results = outcomes(test)
    static = summary(static_results)
    if os.environ.get("LEARNING_CURVE_SKIP_EXACT"):  # smoke runs only
        exact_curve, exact_stats, exact_s, exact_check = [static] * 2, Counter(), 0.0, {}
    else:
        exact_curve, exact_stats, exact_s, exact_check = run("exact", stream, test, static_results)
    full_curve, full_stats, full_s, _ = run("full", stream, test, static_results)
    fitted = fitted_point(test)
    total_s = time.perf_counter() - started

    final, exact_final = full_curve[-1], exact_curve[-1]
    rows = [
        [
            p["interactions"],
            p["correct"],
            p["wrong"],
            p["asked"],
            p["asked_right_offered"],
            p["no_match"],
            e["correct"],
            e["wrong"],
            static["correct"],
        ]
        for p, e in zip(full_curve, exact_curve, strict=False)  # LEARNING_CURVE_SKIP_EXACT: a two-point exact curve
    ]
    body = table(
        [
            "interactions",
            "correct %",
            "wrong %",
            "asked %",
            "asked, right offered %",
            "no match %",
            "exact-only correct %",
            "exact-only wrong %",
            "static correct %",
        ],
        rows,
    )
    body += (
        f"\n\nStream: {len(stream)} training utterances (seed {SEED}), one user; test: {len(test)} utterances. "
        f"Learning run: {dict(full_stats)}. Exact-only run: {dict(exact_stats)}. "
        f"Static (learning off): correct {static['correct']}, wrong {static['wrong']}, asked {static['asked']}, no match {static['no_match']}. "
        f"Exact-only curve points re-resolve only test texts equal to a learned phrase; resolving all of them at the end gave "
        f"{exact_check} (final point above: {exact_final}).\n"
        f"Times: embedding {embed_s:.0f} s, exact-only run {exact_s:.0f} s, learning run {full_s:.0f} s, total {total_s:.0f} s. "
        f"Targets after the whole stream: correct >= 85 and wrong < 3 (goal 90 / 3). Plot: bench/{OUT_PNG.name}.\n"
        + describe_fitted(fitted)
        + " (The RESULT line reports the product defaults, not the fitted profile.)"
    )
    print(body)
    result = (
        f"RESULT final_correct={final['correct']:.1f} final_wrong={final['wrong']:.1f} final_asked={final['asked']:.1f} "
        f"static_correct={static['correct']:.1f} exact_correct={exact_final['correct']:.1f}"
    )
    if LIMIT or TEST_LIMIT or os.environ.get("LEARNING_CURVE_SKIP_EXACT"):  # a smoke run: nothing recorded
        print(result)
        return
    OUT_JSON.write_text(
        json.dumps(
            {
                "stream": len(stream),
                "test": len(test),
                "seed": SEED,
                "static": static,
                "exact": exact_curve,
                "learning": full_curve,
                "learning_stats": full_stats,
                "exact_stats": exact_stats,
                "fitted": fitted,
                "seconds": round(total_s, 1),
            },
            indent=2,
        )
    )
    plot(full_curve, exact_curve, static)
    record("learning_curve", body, result)


if __name__ == "__main__":
    main()
