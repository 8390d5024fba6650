"""Fit the old fixed resolution thresholds for the configured embedding model on BANKING77's TRAIN file.

For comparison only: none of these values is a default. Whether to auto-resolve is learned from each
deployment's labels, and the retrieval floors are measured on each deployment's own phrases
(learning.decision.floors; docs/thresholds.md).

The test file is never read here. A verb's score is the weighted mean of its best
three anchor similarities (1, 0.5, 0.25), as learning.resolution scores it.
resolve_threshold and margin are chosen for two states of the same product:

* cold start: for three seeds, 5 training utterances per verb play the catalogue
  and the other training utterances are the queries;
* learned: the catalogue of seed 77 plus 80% of the other training utterances as
  one user's learned phrases (what bench/learning_curve.py's stream leaves: every
  turn ends as a learned phrase through a confirmation, a click or a correction),
  queried with the remaining 20%.

Among all pairs on a grid whose wrong-resolution rate is at most 4.5% at cold start
and at most 2.5% when learned, the one with the most right answers when learned.
(The product's targets on unseen text are under 5% and under 3%; the fit keeps half
a point in hand so that the gap between fitted and unseen text does not cross them.)
Also: learned_threshold, the lowest cosine at which a single nearest learned phrase
names the right verb at least 90% of the time (leave-one-out over train);
blocklist_threshold, the lowest cosine at which two utterances share an intent at
least 75% of the time (a block should catch paraphrases only).

Prints the fitted values (what config/settings.py RESOLUTION_PROFILES once held for this model).
"""

import random

import numpy as np
from _common import setup_django, table


def embed(texts):
    from common.text import normalize_phrase
    from embeddings.embedders import get_embedder

    return np.array(get_embedder().embed_batch([normalize_phrase(t) for t in texts]))


WEIGHTS = np.array([1.0, 0.5, 0.25])
COLD_MAX_WRONG, LEARNED_MAX_WRONG = 4.5, 2.5


def verb_scores(query_vecs, anchor_vecs, anchor_verbs, verbs):
    """Weighted mean of each verb's best three anchor similarities (every verb here has at least three)."""
    sims = query_vecs @ anchor_vecs.T
    anchor_verbs = np.array(anchor_verbs)
    out = np.full((len(query_vecs), len(verbs)), -1.0, dtype=np.float32)
    for col, v in enumerate(verbs):
        best = -np.sort(-sims[:, anchor_verbs == v], axis=1)[:, : len(WEIGHTS)]
        w = WEIGHTS[: best.shape[1]]
        out[:, col] = best @ w / w.sum()
    return out


def rates(scores, truth, thresholds, margins):
    """[threshold, margin] -> (correct %, wrong %, covered %)."""
    order = np.argsort(-scores, axis=1)
    top1 = scores[np.arange(len(scores)), order[:, 0]]
    top2 = scores[np.arange(len(scores)), order[:, 1]]
    right_top = order[:, 0] == truth
    right_in4 = (order[:, :4] == truth[:, None]).any(axis=1)
    out = np.zeros((len(thresholds), len(margins), 3))
    for i, t in enumerate(thresholds):
        for j, m in enumerate(margins):
            resolved = (top1 >= t) & ((top1 - top2) >= m)
            out[i, j] = [
                (resolved & right_top).mean(),
                (resolved & ~right_top).mean(),
                ((resolved & right_top) | (~resolved & right_in4)).mean(),
            ]
    return out * 100


def main():
    setup_django()
    from embeddings.embedders import get_embedder
    from learning import datasets

    train = datasets.load("train")
    all_vecs = embed([e.text for e in train])
    vec_of = {e.text: all_vecs[i] for i, e in enumerate(train)}
    verbs = sorted({e.verb for e in train})
    index = {v: i for i, v in enumerate(verbs)}
    thresholds = np.round(np.arange(0.50, 0.86, 0.01), 2)
    margins = np.round(np.arange(0.0, 0.105, 0.005), 3)

    cold = np.zeros((len(thresholds), len(margins), 3))
    for seed in (1, 2, 3):
        chosen, rest = datasets.catalogue_split(per_verb=5, seed=seed)
        cat = [(v, t) for v, ts in chosen.items() for t in ts]
        scores = verb_scores(
            np.array([vec_of[e.text] for e in rest]), np.array([vec_of[t] for _, t in cat]), [v for v, _ in cat], verbs
        )
        cold += rates(scores, np.array([index[e.verb] for e in rest]), thresholds, margins) / 3

    chosen, rest = datasets.catalogue_split(per_verb=5, seed=77)
    random.Random(2024).shuffle(rest)
    cut = int(len(rest) * 0.8)
    anchors = [(v, t) for v, ts in chosen.items() for t in ts] + [(e.verb, e.text) for e in rest[:cut]]
    queries = rest[cut:]
    scores = verb_scores(
        np.array([vec_of[e.text] for e in queries]), np.array([vec_of[t] for _, t in anchors]), [v for v, _ in anchors], verbs
    )
    learned_state = rates(scores, np.array([index[e.verb] for e in queries]), thresholds, margins)

    best = None
    for i in range(len(thresholds)):
        for j in range(len(margins)):
            if cold[i, j, 1] <= COLD_MAX_WRONG and learned_state[i, j, 1] <= LEARNED_MAX_WRONG:
                if best is None or learned_state[i, j, 0] > learned_state[best[0], best[1], 0]:
                    best = (i, j)
    i, j = best
    print(
        table(
            [
                "resolve_threshold",
                "margin",
                "cold start correct %",
                "cold start wrong %",
                "cold start covered %",
                "learned correct %",
                "learned wrong %",
                "learned covered %",
            ],
            [[f"{thresholds[i]:.2f}", f"{margins[j]:.3f}", *cold[i, j], *learned_state[i, j]]],
        )
    )
    best = (thresholds[i], margins[j])

    # Leave-one-out nearest neighbour over train for learned/blocklist thresholds.
    sims = all_vecs @ all_vecs.T
    np.fill_diagonal(sims, -1)
    nn = sims.argmax(axis=1)
    nn_sim = sims[np.arange(len(train)), nn]
    labels = np.array([verbs.index(e.verb) for e in train])
    nn_right = labels[nn] == labels
    learned = next(t for t in np.arange(0.5, 0.99, 0.01) if nn_right[nn_sim >= t].mean() >= 0.90)
    iu = np.triu_indices(len(train), 1)
    pair_sims, pair_same = sims[iu], labels[iu[0]] == labels[iu[1]]
    block = next(t for t in np.arange(0.5, 0.99, 0.01) if pair_same[pair_sims >= t].mean() >= 0.75)
    print(
        table(
            ["learned_threshold", "nn precision", "blocklist_threshold", "pair precision"],
            [
                [
                    f"{learned:.2f}",
                    nn_right[nn_sim >= learned].mean() * 100,
                    f"{block:.2f}",
                    pair_same[pair_sims >= block].mean() * 100,
                ]
            ],
        )
    )
    print(
        f"FITTED model={get_embedder().model_name} resolve_threshold={best[0]:.2f} margin={best[1]:.3f} "
        f"learned_threshold={learned:.2f} blocklist_threshold={block:.2f}"
    )


if __name__ == "__main__":
    main()
