"""Learning curve: does the agent ask less and less as users teach it? Same code, same defaults on any data set.

``python bench/learning_curve.py --dataset banking77|hwu64``

Start: the catalogue is 5 training phrases per intent (fixed seed 77; verbs ``<domain>.<intent>``), and the
catalogue prior is fitted on it (learning.services.decisions.decision_prior_fit, what ``manage.py fit_decision``
does). Stream: the rest of the training set in a fixed shuffled order (seed 2024), one simulated user, driven IN
PROCESS through the same services the API calls (resolve -> resolution_store, then
phrase_confirmation_apply / phrase_correction_apply / disambiguation_select / disambiguation_abandon; Celery is
eager, so signal processing and decision refits run inline as the API would trigger them):

* resolved right            -> confirmation (naming the answer's request_id, as an agent that keeps it does)
* resolved wrong            -> correction (likewise)
* ambiguous, right offered  -> click (select)
* ambiguous, not offered    -> abandon + correction (wrong verb: the top option)
* no match                  -> nothing

Every EVERY interactions the test set is resolved for the same user through ``learning.resolution.resolve``
(nothing recorded) and counted right / wrong / asked / no match. The stream and both test sets are embedded
once, in batches, up front (the other data set's test set before the out-of-scope check, after a run of it side
by side has saved its vectors; the embedder's cache serves them); the vectors are kept in
``var/bench_embeddings/<model>.npz`` (with the phrase variants the stream embeds; both data sets' runs merge into
it, side by side too), so a later run on the same machine does not run the model again. In the same run, at cold start and at the end,
the old fixed-threshold rule (RESOLVE_DECISION=fixed with the former BANKING77-fitted 0.69 / 0.045) is
measured on the same state, and the other data set's test set is resolved against the final state
(out of scope: it must not auto-resolve).

Figures: bench/learning_curve_<dataset>.json / .png, bench/RESULTS.md. Last line:
RESULT dataset=.. final_correct=.. final_wrong=.. final_asked=.. cold_covered=.. cold_wrong=.. oos_caught=..

``--users N`` spreads the stream over N users in turn (user i % N sends the i-th utterance; the order is shuffled, so
each has a random share of every intent): a user's phrases and personal head serve that user only, so this shows
what one user gets when the teaching is shared out, and, measured beside it, what a newcomer who taught nothing
gets (a user's lessons reach other users through the deployment's decision fit and the global phrases reviewers
approve). Its figures go to ``learning_curve_<dataset>_users<N>.*``; the RESULT line adds users and
newcomer_correct / newcomer_wrong / newcomer_asked.

Environment (smoke runs, nothing recorded): LEARNING_CURVE_LIMIT=n streams n interactions,
LEARNING_CURVE_TEST_LIMIT=n measures a fixed sample of n test utterances; LEARNING_CURVE_EVERY (default 1000).
LEARNING_CURVE_SEED (default 2024) orders the stream another way (recorded, with its seed in the text).
"""

import os

# One BLAS thread: the fits are small, and BLAS worker threads spinning on a loaded machine made them 10-25x slower.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import random
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from _common import ROOT, fresh_database, prior_refit_held, record, setup_django, table
from django.conf import settings
from django.db import connection
from tqdm import tqdm

os.environ.setdefault("EMBEDDING_CACHE_SIZE", "200000")
os.environ.setdefault("LOG_LEVEL", "WARNING")

USER = "bench-user"
NEWCOMER = "bench-newcomer"  # measured with --users: taught nothing
SEED = int(os.environ.get("LEARNING_CURVE_SEED", "2024"))  # the stream's order; another seed checks the figures hold
EVERY = int(os.environ.get("LEARNING_CURVE_EVERY", "1000"))
LIMIT = int(os.environ.get("LEARNING_CURVE_LIMIT", "0")) or None
TEST_LIMIT = int(os.environ.get("LEARNING_CURVE_TEST_LIMIT", "0")) or None
OLD_FIXED = {"resolve_threshold": 0.69, "margin": 0.045}  # the former BANKING77-fitted rule, for comparison only


def _outcome(verb, r) -> str:
    if r.outcome == "resolved":
        return "correct" if r.verb == verb else "wrong"
    if r.outcome == "ambiguous":
        return "asked_right_offered" if verb in {o.verb for o in r.options} else "asked"
    return "no_match"


def stream_user(i: int, users: int) -> str:
    """Who sends the i-th utterance (of the stream or of the test set): one user, or ``users`` of them in turn
    (the stream is shuffled, so each gets a random share of every intent)."""
    return USER if users <= 1 else f"{USER}-{i % users}"


def outcomes(test, threads: int = 2, users: int = 1, user: str | None = None) -> list[str]:
    """Each test utterance resolved for ``user`` when given (a newcomer, say), else for the stream's user who
    would send it (``stream_user``)."""
    from learning.resolution import resolve

    def work(start, chunk):
        try:
            return [
                _outcome(ex.verb, resolve(text=ex.text, user_id=user or stream_user(start + j, users)))
                for j, ex in enumerate(chunk)
            ]
        finally:
            connection.close()

    size = -(-len(test) // threads)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        starts = range(0, len(test), size)
        parts = list(pool.map(work, starts, [test[i : i + size] for i in starts]))
    return [o for part in parts for o in part]


def summary(results: list[str]) -> dict:
    c = Counter(results)
    n = max(len(results), 1)
    pct = {k: round(100.0 * c[k] / n, 2) for k in ("correct", "wrong", "no_match")}
    pct["asked"] = round(100.0 * (c["asked"] + c["asked_right_offered"]) / n, 2)
    pct["covered"] = round(100.0 * (c["correct"] + c["asked_right_offered"]) / n, 2)
    return pct


def fixed_rule(test, users: int = 1) -> dict:
    """The old fixed-threshold rule on the same state."""
    saved = (settings.RESOLVE_DECISION, settings.RESOLUTION_OVERRIDES)
    settings.RESOLVE_DECISION, settings.RESOLUTION_OVERRIDES = "fixed", {**saved[1], **OLD_FIXED}
    try:
        return summary(outcomes(test, users=users))
    finally:
        settings.RESOLVE_DECISION, settings.RESOLUTION_OVERRIDES = saved


def oos_caught(other, users: int = 1) -> tuple[float, Counter]:
    """Share of the other data set's test utterances not auto-resolved, and the verbs the rest resolved to."""
    from learning.resolution import resolve

    verbs = Counter()
    for i, ex in enumerate(other):
        r = resolve(text=ex.text, user_id=stream_user(i, users))
        if r.outcome == "resolved":
            verbs[r.verb] += 1
    return round(100.0 * (len(other) - sum(verbs.values())) / max(len(other), 1), 2), verbs


class DiskVectors:
    """The configured embedder behind a file of the vectors this benchmark computed before
    (``var/bench_embeddings/<model>.npz``): the data sets' texts are embedded once per machine, not once per run.
    The vectors are the embedder's own (float32, as computed), so every decision is the same; the process's
    CachedEmbedder still wraps this, as it wraps the model in the API."""

    def __init__(self, inner, path):
        self.inner, self.path = inner, path
        self.model_name, self.dimension = inner.model_name, inner.dimension
        self.in_process = getattr(inner, "in_process", False)
        self.known, self.added = {}, 0
        if path.exists():
            import numpy as np

            with np.load(path, allow_pickle=False) as z:
                self.known = dict(zip(z["texts"].tolist(), z["vectors"], strict=True))

    @classmethod
    def install(cls, cached) -> "DiskVectors":
        from embeddings.embedders import set_embedder

        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in cached.model_name)
        disk = cls(cached.inner, ROOT / "var" / "bench_embeddings" / f"{safe}.npz")
        set_embedder(disk)
        return disk

    def embed(self, text: str):
        return self.embed_batch([text])[0]

    def embed_batch(self, texts):
        missing = list(dict.fromkeys(t for t in texts if t not in self.known))
        if missing:
            self.known.update(zip(missing, self.inner.embed_batch(missing), strict=True))
            self.added += len(missing)
        return [self.known[t] for t in texts]

    def merge(self) -> None:
        """Read the vectors another run (the other data set's, side by side) saved since this one read the file."""
        if self.path.exists():
            import numpy as np

            with np.load(self.path, allow_pickle=False) as z:
                for text, vector in zip(z["texts"].tolist(), z["vectors"], strict=True):
                    self.known.setdefault(text, vector)

    def save(self) -> None:
        """Add this run's vectors to the file, keeping what another run (the other data set, side by side) added
        since this one read it: read, merge and replace under a lock."""
        if not self.added:
            return
        import fcntl

        import numpy as np

        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.merge()
            texts = list(self.known)
            tmp = self.path.with_suffix(".tmp.npz")
            vectors = np.stack([self.known[t] for t in texts]).astype(np.float32)
            np.savez(tmp, texts=np.array(texts, dtype=str), vectors=vectors)
            tmp.replace(self.path)
        self.added = 0


def interact(ex, stats: Counter, user: str = USER) -> None:
    """One simulated turn of ``user``, through the services the API calls."""
    from common.api import ApplicationError
    from learning.resolution import resolve
    from learning.services.corrections import phrase_confirmation_apply, phrase_correction_apply
    from learning.services.disambiguations import disambiguation_abandon, disambiguation_select, resolution_store

    r = resolve(text=ex.text, user_id=user)
    resolution_store(resolution=r)
    text = ex.text[:500]
    try:
        if r.outcome == "resolved":
            if r.verb == ex.verb:
                stats["accepted"] += 1
                phrase_confirmation_apply(text=text, verb=ex.verb, user_id=user, request_id=r.request_id)
            else:
                stats["corrected"] += 1
                phrase_correction_apply(text=text, wrong_verb=r.verb, correct_verb=ex.verb, user_id=user, request_id=r.request_id)
        elif r.outcome == "ambiguous":
            offered = [o.verb for o in r.options]
            if ex.verb in offered:
                stats["clicked"] += 1
                disambiguation_select(request_id=r.request_id, selected_verb=ex.verb, user_id=user)
            else:
                stats["abandoned+corrected"] += 1
                disambiguation_abandon(request_id=r.request_id, reason="typed_new_input", user_id=user)
                phrase_correction_apply(
                    text=text, wrong_verb=offered[0], correct_verb=ex.verb, user_id=user, request_id=r.request_id
                )
        else:
            stats["no_match"] += 1
    except ApplicationError:  # 409s the API would answer (e.g. a confirmation against the user's own row)
        stats["conflict"] += 1


def plot(name, curve, fixed_cold, fixed_final, path, users: int = 1) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [p["interactions"] for p in curve]
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    ax.plot(x, [p["correct"] for p in curve], "o-", color="tab:green", label="learned rule: right")
    ax.plot(x, [p["wrong"] for p in curve], "o-", color="tab:red", label="learned rule: wrong")
    ax.plot(x, [p["asked"] for p in curve], "o-", color="tab:blue", label="learned rule: asked")
    ax.plot(
        [x[0], x[-1]], [fixed_cold["correct"], fixed_final["correct"]], "s--", color="tab:olive", label="old fixed rule: right"
    )
    ax.plot([x[0], x[-1]], [fixed_cold["wrong"], fixed_final["wrong"]], "s--", color="tab:brown", label="old fixed rule: wrong")
    if users > 1:
        for key, color in (("correct", "tab:green"), ("wrong", "tab:red"), ("asked", "tab:blue")):
            what = {"correct": "right"}.get(key, key)
            ax.plot(x, [p["newcomer"][key] for p in curve], "^:", color=color, label=f"newcomer: {what}")
    ax.axhline(3, color="tab:red", linewidth=0.6, alpha=0.5)
    who = "" if users == 1 else f", {users} users"
    ax.set_xlabel(f"interactions streamed ({name} train{who}, after 5 catalogue phrases per verb)")
    ax.set_ylabel("% of the test utterances")
    ax.set_ylim(0, 100)
    ax.set_title(f"Learning curve on {name} (same code, same defaults)")
    ax.grid(alpha=0.3)
    ax.legend(loc="center right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", choices=("banking77", "hwu64"), default="banking77")
    ap.add_argument(
        "--users",
        type=int,
        default=1,
        help="spread the stream over this many users in turn; each test utterance is then measured for one of them "
        "and for a newcomer who taught nothing (default 1: one user)",
    )
    args = ap.parse_args()
    if args.users < 1:
        ap.error(f"--users {args.users}: at least 1 user")
    ds, users = args.dataset, args.users
    other_ds = "hwu64" if ds == "banking77" else "banking77"
    variant = ("" if SEED == 2024 else f"_seed{SEED}") + ("" if users == 1 else f"_users{users}")
    setup_django(db_name=f"bench_learning_curve_{ds}{variant}")
    from common.text import normalize_phrase
    from embeddings.embedders import get_embedder
    from learning import datasets
    from learning.catalogue import VerbEntry
    from learning.services.catalogue import verb_catalogue_load
    from learning.services.decisions import decision_prior_fit
    from tenants.context import tenant_scope
    from tenants.selectors import tenant_default

    for d in (ds, other_ds):
        if not datasets.available(d):
            raise SystemExit(f"{d} not found under {datasets.dataset_dir(d)}")
    chosen, stream = datasets.catalogue_split(per_verb=5, seed=77, dataset=ds)
    random.Random(SEED).shuffle(stream)
    stream = stream[:LIMIT] if LIMIT else stream
    test, other = datasets.load("test", ds), datasets.load("test", other_ds)
    if TEST_LIMIT:
        test = random.Random(SEED).sample(test, min(TEST_LIMIT, len(test)))
        other = random.Random(SEED).sample(other, min(TEST_LIMIT, len(other)))

    started = time.perf_counter()
    # This data set's texts now; the other's test set at the end, when a run of the other data set side by side has
    # saved its vectors (each data set's texts are embedded once, by its own run)
    texts = sorted({normalize_phrase(ex.text) for ex in [*test, *stream]})
    disk = DiskVectors.install(get_embedder())
    embedder = get_embedder()
    for i in tqdm(range(0, len(texts), 256), desc="embedding", unit="batch"):
        embedder.embed_batch(texts[i : i + 256])
    disk.save()
    embed_s = time.perf_counter() - started

    fresh_database()
    domain = datasets.DOMAINS[ds]
    entries = [
        VerbEntry(v, domain, v.split(".", 1)[1].replace("_", " ").capitalize(), datasets.describe(v.split(".", 1)[1]), p)
        for v, p in sorted(chosen.items())
    ]
    with prior_refit_held():
        verb_catalogue_load(entries=entries)
    prior = decision_prior_fit()
    prior_s = time.perf_counter() - started - embed_s

    def measure(i: int) -> dict:
        point = {"interactions": i, **summary(outcomes(test, users=users))}
        if users > 1:  # what the users' teaching gives someone who taught nothing
            point["newcomer"] = summary(outcomes(test, user=NEWCOMER))
        return point

    curve = [measure(0)]
    fixed_cold = fixed_rule(test, users=users)
    tqdm.write(f"@0 {curve[-1]} fixed {fixed_cold}")
    stats = Counter()
    t0 = time.perf_counter()
    tenant = tenant_default().pk
    for i, ex in enumerate(tqdm(stream, desc=f"stream ({ds})", unit="turn", mininterval=10), 1):
        with tenant_scope([tenant]):  # each turn as an API request: one transaction in the agent's tenant
            interact(ex, stats, user=stream_user(i - 1, users))
        if i % EVERY == 0 or i == len(stream):
            curve.append(measure(i))
            tqdm.write(f"@{i} {curve[-1]}")
    stream_s = time.perf_counter() - t0
    fixed_final = fixed_rule(test, users=users)
    disk.merge()
    t1 = time.perf_counter()
    others = sorted({normalize_phrase(ex.text) for ex in other})
    for i in tqdm(range(0, len(others), 256), desc=f"embedding ({other_ds} test)", unit="batch"):
        embedder.embed_batch(others[i : i + 256])
    embed_s += time.perf_counter() - t1
    disk.save()  # with the variants the stream embedded (learning.variants): the next run reads them
    oos, oos_verbs = oos_caught(other, users=users)
    from learning.models import DecisionFit  # bench only (outside the apps' layering)

    fits = list(DecisionFit.objects.order_by("version").values("version", "source", "status", "n_labels", "held_out"))
    live = next((f for f in fits if f["status"] == "live"), None)
    total_s = time.perf_counter() - started
    cold, final = curve[0], curve[-1]
    rows = [[p["interactions"], p["correct"], p["wrong"], p["asked"], p["covered"], p["no_match"]] for p in curve]
    body = table(["interactions", "right %", "wrong %", "asked %", "covered %", "no match %"], rows)
    body += (
        f"\n\nData set {ds}: {len(entries)} verbs, 5 catalogue phrases each; stream {len(stream)} training utterances "
        f"(seed {SEED}), {'one user' if users == 1 else f'{users} users in turn'}; test {len(test)} utterances"
        f"{'' if users == 1 else ', each measured for the user who would send it (in turn, as the stream)'}. "
        f"Stream: {dict(stats)}. "
        f"Catalogue prior v{prior.version if prior else '-'}: held out on the catalogue {prior.held_out if prior else None}; "
        f"floors measured on the catalogue {(prior.params or {}).get('floors') if prior else None}. "
        f"Old fixed rule (0.69 / 0.045) on the same state: cold {fixed_cold}, final {fixed_final}. "
        f"Out of scope ({other_ds} test, {len(other)} utterances, against the final state): {oos}% not auto-resolved; "
        f"the rest went to {', '.join(f'{v} {n}' for v, n in oos_verbs.most_common(6)) or 'none'}. "
        f"Fits: {len(fits)} ({sum(f['source'] == 'labels' for f in fits)} from labels, each on the newest "
        f"{settings.RESOLVE_FIT_WINDOW_LABELS} labels); live at the end: {live}. "
        f"Times: embedding {embed_s:.0f} s, prior {prior_s:.0f} s, stream + measurements {stream_s:.0f} s, total {total_s:.0f} s."
    )
    if users > 1:
        nc = [[p["interactions"], *(p["newcomer"][k] for k in ("correct", "wrong", "asked", "covered"))] for p in curve]
        body += "\n\nA newcomer (a user who taught nothing), the same test set:\n\n" + table(
            ["interactions", "right %", "wrong %", "asked %", "covered %"], nc
        )
    print(body)
    result = (
        f"RESULT dataset={ds} final_correct={final['correct']:.1f} final_wrong={final['wrong']:.1f} final_asked={final['asked']:.1f} "
        f"cold_covered={cold['covered']:.1f} cold_wrong={cold['wrong']:.1f} oos_caught={oos:.1f}"
    )
    if users > 1:
        newcomer = final["newcomer"]
        result += (
            f" users={users} newcomer_correct={newcomer['correct']:.1f} newcomer_wrong={newcomer['wrong']:.1f} "
            f"newcomer_asked={newcomer['asked']:.1f}"
        )
    if LIMIT or TEST_LIMIT:
        print(result)
        return
    stem = f"learning_curve_{ds}{variant}"  # the default order's figures stay put
    (ROOT / "bench" / f"{stem}.json").write_text(
        json.dumps(
            {"curve": curve, "fixed_cold": fixed_cold, "fixed_final": fixed_final, "oos_caught": oos, "fits": fits}, indent=1
        )
    )
    plot(ds, curve, fixed_cold, fixed_final, ROOT / "bench" / f"{stem}.png", users=users)
    record(f"learning_curve ({ds}{'' if users == 1 else f', {users} users'})", body, result)


if __name__ == "__main__":
    main()
