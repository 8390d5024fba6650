"""How the resolver scores verbs from their semantic anchors: one implementation for resolve and for fitting.

A verb's anchors are its catalogue phrases and the learned phrases (the user's and global ones) that a vector
search returned; a learned anchor counts its similarity in full when trusted, in proportion when decayed.
"""

from django.conf import settings


class Source:
    USER_LEARNED_EXACT = "user_learned_exact"
    USER_LEARNED_SEMANTIC = "user_learned_semantic"
    LEARNED_EXACT = "learned_exact"
    LEARNED_SEMANTIC = "learned_semantic"
    PHRASE_EXACT = "phrase_exact"
    PHRASE_SUBSTRING = "phrase_substring"
    SEMANTIC = "semantic"
    HEAD = "head"  # only the classifier head proposed it: no phrase matched (score 0, no matched phrase)


def anchor_trust(confidence: float) -> float:
    """How much of its similarity a learned anchor counts: in full at or above RESOLVE_TRUSTED_CONFIDENCE
    (a click, a correction, a review, a confirmation), in proportion below it (decayed by corrections)."""
    return min(1.0, confidence / settings.RESOLVE_TRUSTED_CONFIDENCE)


def unseen_bound(*tiers: tuple[list[float], int]) -> float | None:
    """Upper bound on the similarity of any anchor a vector query did not return: per tier (its
    similarities, best first, and its row limit) that hit its limit, its lowest similarity; None when
    every tier returned all it had."""
    return max((sims[-1] for sims, limit in tiers if sims and len(sims) >= limit), default=None)


def verb_anchor_scores(
    anchors: dict[str, list[tuple[float, str, str]]], *, weights, unseen: float | None
) -> dict[str, tuple[float, str, str]]:
    """Each verb's semantic score: the weighted mean of its best anchor scores (``weights``, best first),
    with the source and text of the best anchor.

    One close phrase is some evidence, several are more: on BANKING77 a weighted mean of a verb's best
    three similarities (1, 0.5, 0.25) ranks verbs better than the single best one, and its top-two gap
    separates right answers from wrong ones better (docs/thresholds.md). The vector queries return a
    bounded number of neighbours, so a verb may show fewer anchors than weights: each missing slot counts
    as ``unseen`` (the lowest similarity of a tier that hit its limit, which bounds every anchor not
    returned); when every tier was exhausted the verb has no more anchors and the mean is over those it has.
    """
    out = {}
    for verb, items in anchors.items():
        items = sorted(items, key=lambda a: -a[0])
        top = [a[0] for a in items[: len(weights)]]
        if unseen is not None and len(top) < len(weights):
            top += [min(unseen, top[-1])] * (len(weights) - len(top))
        used = weights[: len(top)]
        out[verb] = (sum(w * x for w, x in zip(used, top, strict=False)) / sum(used), items[0][1], items[0][2])
    return out


def semantic_scores(*, learned, catalogue, k_learned: int, k_catalogue: int, p: dict) -> dict[str, tuple[float, str, str]]:
    """Each verb's semantic score with the source and text of its best anchor, from the learned and catalogue
    neighbours of one query (objects with ``verb``, ``similarity``, ``text``, ``user_id``, ``confidence``, best
    first; each list at most ``k_*`` long) under the profile ``p`` (thresholds and anchor weights)."""
    anchors: dict[str, list[tuple[float, str, str]]] = {}
    for hit in learned:
        if hit.similarity >= p["learned_threshold"]:
            source = Source.USER_LEARNED_SEMANTIC if hit.user_id else Source.LEARNED_SEMANTIC
            anchors.setdefault(hit.verb, []).append((hit.similarity * anchor_trust(hit.confidence), source, hit.text))
    for hit in catalogue:
        if hit.similarity >= p["min_score"]:
            anchors.setdefault(hit.verb, []).append((hit.similarity, Source.SEMANTIC, hit.text))
    unseen = unseen_bound(([h.similarity for h in learned], k_learned), ([h.similarity for h in catalogue], k_catalogue))
    return verb_anchor_scores(anchors, weights=p["anchor_weights"], unseen=unseen)
