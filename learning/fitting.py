"""Fitting the resolve threshold and margin on gold labels (pure: no database).

Each gold example is the top two verb scores the resolver would see for the
text (the example's own learned row left out) and whether the top verb is the
right one. A policy (threshold t, margin m) answers when ``s1 >= t`` and
``s1 - s2 >= m``; the fit picks, on the training share, the policy with the
most right answers whose wrong answers stay at or under ``max_wrong_pct``
(ties: the more cautious one), and reports both policies on the held-out share.
"""

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class GoldScore:
    key: str  # stable id (user + text) for the train / held-out split
    top_score: float
    second_score: float
    top_is_right: bool


def split(examples: list[GoldScore], held_out_share: float) -> tuple[list[GoldScore], list[GoldScore]]:
    """Deterministic split by a hash of the key (the same example always falls on the same side)."""
    train, held_out = [], []
    for e in examples:
        bucket = int(hashlib.sha256(e.key.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
        (held_out if bucket < held_out_share else train).append(e)
    return train, held_out


def evaluate(examples: list[GoldScore], threshold: float, margin: float) -> dict:
    n = len(examples)
    if not n:
        return {"n": 0, "correct": 0.0, "wrong": 0.0, "asked": 0.0}
    correct = wrong = 0
    for e in examples:
        # as the resolver's fixed rule compares them (``resolution._decide``): the margin to 4 places
        if e.top_score >= threshold and round(e.top_score - e.second_score, 4) >= margin:
            if e.top_is_right:
                correct += 1
            else:
                wrong += 1
    return {
        "n": n,
        "correct": round(100.0 * correct / n, 2),
        "wrong": round(100.0 * wrong / n, 2),
        "asked": round(100.0 * (n - correct - wrong) / n, 2),
    }


def grid(start: float, stop: float, step: float) -> list[float]:
    count = int(round((stop - start) / step))
    return [round(start + i * step, 4) for i in range(count + 1)]


def fit(train: list[GoldScore], *, max_wrong_pct: float, thresholds=None, margins=None) -> tuple[float, float, dict]:
    """(threshold, margin, training figures) of the best policy on ``train``."""
    thresholds = thresholds or grid(0.30, 0.95, 0.01)
    margins = margins or grid(0.0, 0.30, 0.01)
    best = None
    for t in thresholds:
        for m in margins:
            figures = evaluate(train, t, m)
            feasible = figures["wrong"] <= max_wrong_pct
            # Feasible first, then most right answers, then fewest wrong, then the more cautious policy.
            rank = (feasible, figures["correct"] if feasible else -figures["wrong"], -figures["wrong"], t, m)
            if best is None or rank > best[0]:
                best = (rank, t, m, figures)
    return best[1], best[2], best[3]
