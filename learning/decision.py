"""The learned auto-resolve decision (pure numpy / scikit-learn / scipy: no Django, no database).

* ``head_train`` / ``head_predict``: the per-deployment classifier head, a multinomial logistic regression over
  the embeddings of the anchors (catalogue and learned phrases) and their character n-grams (``lexical``).
  Predicting is one d x V matmul, a few rows of the n-gram weights and a softmax.
* ``combine``: the ranking, anchor score (cosine scale) and head probability blended 0.5 / 0.5, so a verb with
  three examples the head barely knows still ranks by its anchors.
* ``features``: what the resolver knows about its top verb (FEATURES, in that order), among them how much closer
  the query is to the top verb's name than to any other verb's (``verb_words``, ``name_margins``): the words a
  catalogue's author chose for an action, which know what it does before any phrase is taught.
* ``fit_decision``: P(top verb is right | features) from the deployment's own labels, a logistic regression whose
  coefficients on the "more support" features are constrained >= 0 (``MonoLR``), and the cut: the lowest
  probability whose out-of-fold wrong auto-resolutions stay within ``max_wrong_rate`` of all labels counting a
  one-sided 90% bound, plus a support guard (never auto-resolve below the 1% quantile of the top cosine of
  right labels).
* ``catalogue_priors``: the same fit before any user label exists, on K folds over the catalogue's own phrases
  (one fit per head option, sharing the folds and the anchor scores).
* ``floors``: the retrieval floors (which anchors count, what a block or a correction reaches), each a quantile
  of the cosine between the deployment's own phrases of different verbs: how close unrelated text comes in this
  domain with this model.

Nothing here holds a number fitted on a benchmark: coefficients and cut come from the deployment's data; the
remaining constants are the product's target and generic statistical choices (docs/thresholds.md).
"""

from __future__ import annotations

import functools
import hashlib
import io
import logging
import re
import threading
import warnings
from typing import TYPE_CHECKING

import numpy as np
from cachetools import LRUCache, cached
from threadpoolctl import threadpool_limits
from tqdm import tqdm

logger = logging.getLogger(__name__)

# scikit-learn and SciPy are imported where they are used: importing them took about half of a process's start
# (every management command, worker and test process), and most processes never fit or rank. Web processes import
# them when the application loads (``learning.preload``), so no request waits for them.
if TYPE_CHECKING:
    import scipy.sparse as sp


FEATURES = (
    "top_cos",  # raw cosine of the nearest anchor of any verb: the out-of-scope guard
    "anchor_top",  # top verb's anchor score (weighted mean of its best anchors)
    "anchor_margin",  # top verb's anchor score minus the best other verb's
    "head_p",  # head probability of the top verb (0 without a head)
    "head_margin",  # head probability of the top verb minus the best other verb's
    "head_agrees",  # the head's argmax is the top verb
    "anchor_agrees",  # the anchor argmax is the top verb
    "knn_agree",  # share of the 5 nearest anchors that belong to the top verb
    "top_is_learned",  # the top verb's best anchor is a learned (user) phrase, not the catalogue
    "log_n_anchors",  # log(1 + anchors of the top verb)
    "verb_is_new",  # the top verb has fewer than 6 anchors
    "name_margin",  # the query's cosine to the top verb's name (its words) minus its best cosine to another's
    "top_is_own",  # the top verb's best anchor is the asking user's own phrase (not a global or catalogue one)
    "user_has_taught",  # the asking user has an active phrase of their own in scope: not a newcomer
)
# A fit names the features it was fitted on: the first BASE_FEATURES or more of FEATURES (fits and resolution
# records from before a feature was added are read with the features they have).
BASE_FEATURES = 11
# +1: P(right) may only grow with the feature. Properties of any similarity resolver, not of a data set.
MONOTONE = {"top_cos": 1, "anchor_top": 1, "anchor_margin": 1, "head_p": 1, "head_margin": 1, "knn_agree": 1, "name_margin": 1}
# Yes/no facts about the query's situation (not scores). A fit answers for the situations its rows hold: a query
# whose value of one of these its rows held fewer than SITUATION_MIN_ROWS times is decided by the other fit in force
# when that one's rows hold it (``situation_outside``). Say a newcomer's query (user_has_taught no; its verbs have only
# their catalogue phrases, verb_is_new) when every label came from users who had taught phrases of their own: there a
# verb they had not taught won against what they had, which says more than it does for a newcomer. The catalogue
# prior was fitted on exactly the newcomer's situation.
SITUATIONS = ("head_agrees", "anchor_agrees", "top_is_learned", "verb_is_new", "top_is_own", "user_has_taught")
# What the prior's rows are not asked to hold: they stand for a user who taught nothing, so whether the asker has
# taught takes no query out of them (a user's phrases enter through the query's evidence: its top anchor learned, or
# their own). A user who has taught, whose top verb the live fit's labels held too rarely, gets the prior as before.
PRIOR_SKIPS = ("user_has_taught",)
SITUATION_MIN_ROWS = 30  # a generic "enough rows to estimate an effect", not fitted on a data set
KNN = 5
NEW_VERB_ANCHORS = 6
BOUND_Z = 1.28  # one-sided 90% bound on the wrong count
SUPPORT_QUANTILE = 0.01  # the guard loses at most 1% of right answers by construction
HEAD_C = 10.0
HEAD_MAX_ITER = 300  # a cap, not a budget: fits stop at the tolerance well before it
# The solver's tolerance: on HWU64's 8,954 training utterances plus its catalogue, 1e-4 reached the same test accuracy
# as 1e-5 (91.1 and 91.0% top-1) in 46 iterations cold instead of 68, and 17 warm instead of 36 (a refit 200 labels
# later): the refits of a deployment that learns all day cost half as much.
HEAD_TOL = 1e-4
# How a head is trained (features, weighting, solver tolerance): part of every head's inputs digest, so a change
# here retrains stored heads instead of reusing them. Change it with any change to head_train or lexical.
HEAD_FORMAT = "lr-balanced-tol1e-4+char_wb2-4-sublinear-v1"
ALPHA = 0.5  # ranking blend: anchor weight
# The head's lexical features: character 2- to 4-grams within word boundaries, hashed into LEX_FEATURES columns
# (stateless: a head stores weights only, no vocabulary), sublinear counts, each row L2-normalised like the
# embeddings beside them. Words a deployment's users share (names of things, typos, short commands) carry what a
# sentence embedding blurs: measured on both public data sets, the combined head ranks and separates better than
# either part alone (docs/thresholds.md).
LEX_FEATURES = 2**12


@functools.cache
def _lex():
    from sklearn.feature_extraction.text import HashingVectorizer

    return HashingVectorizer(analyzer="char_wb", ngram_range=(2, 4), n_features=LEX_FEATURES, alternate_sign=False, norm=None)


FOLDS = 5
FLOOR_SAMPLE = 2000  # anchors sampled for the floors: about 2 million pairs, enough for a 1-in-100,000 quantile


def _one_blas_thread(fn):
    """Run a fit with one BLAS thread: these are small problems (a few thousand rows, a 384 x V head), where
    OpenBLAS's worker threads cost far more than they save, and on a loaded machine (web and worker processes
    sharing the cores) they spin against each other: head training measured 25x slower with 2 threads on 2
    busy cores. The same computation: only the float rounding of a multi-threaded GEMM (~1e-8 relative) differs."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with threadpool_limits(limits=1, user_api="blas"):
            return fn(*args, **kwargs)

    return wrapper


# --- classifier head ------------------------------------------------------------------------------------------


# The lexical rows a process hashed (a digest of the text -> (columns, values)), least recently used out first
# beyond LEX_MEMO_TEXTS (about 1 KB a text): a refit every few hundred labels trains its heads on the same phrases
# again, and hashing them all was about half of a head's training at 10,000 phrases. Keyed by a digest, as the
# embedder's cache is: a user's erased phrases must not stay readable in the memory of a process that hashed them.
LEX_MEMO_TEXTS = 30_000
_lex_memo: LRUCache[bytes, tuple[np.ndarray, np.ndarray]] = LRUCache(maxsize=LEX_MEMO_TEXTS)
_lex_memo_lock = threading.Lock()
# The rows of the newest texts resolves scored one at a time (``lexical_row``), keyed the same way.
LEX_ROW_TEXTS = 1024


def _text_key(text: str) -> bytes:
    """What a memo keeps of a text: a digest, never the text."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def lexical(texts) -> sp.csr_matrix:
    """The lexical feature rows (n x LEX_FEATURES, sparse) of normalised texts; only texts this process has not
    hashed lately are hashed (in one batch: the rows do not depend on each other)."""
    import scipy.sparse as sp
    from sklearn.preprocessing import normalize

    texts = list(texts)
    keys = {t: _text_key(t) for t in set(texts)}
    memo = _lex_memo
    with _lex_memo_lock:  # a lookup moves the text to the newest end
        found = {t: row for t, k in keys.items() if (row := memo.get(k)) is not None}
    missing = sorted(keys.keys() - found.keys())
    if missing:
        M = _lex().transform(missing).astype(np.float32)
        M.data = 1.0 + np.log(M.data)
        M = normalize(M, copy=False)
        rows = {}
        for i, t in enumerate(missing):
            columns, values = M.indices[M.indptr[i] : M.indptr[i + 1]].copy(), M.data[M.indptr[i] : M.indptr[i + 1]].copy()
            columns.flags.writeable = values.flags.writeable = False
            rows[t] = (columns, values)
        found.update(rows)
        with _lex_memo_lock:
            memo.update((keys[t], row) for t, row in rows.items())
    parts = [found[t] for t in texts]
    indptr = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum([len(c) for c, _ in parts], out=indptr[1:])
    columns = np.concatenate([c for c, _ in parts]) if parts else np.zeros(0, dtype=np.int32)
    values = np.concatenate([v for _, v in parts]) if parts else np.zeros(0, dtype=np.float32)
    return sp.csr_matrix((values, columns, indptr), shape=(len(texts), LEX_FEATURES), dtype=np.float32)


@functools.cache
def _lex_one():
    """The analyzer and hasher ``lexical`` runs, for one text at a time."""
    from sklearn.feature_extraction import FeatureHasher

    lex = _lex()
    hasher = FeatureHasher(n_features=LEX_FEATURES, input_type="string", alternate_sign=False, dtype=np.float32)
    return lex.build_analyzer(), hasher


@cached(LRUCache(maxsize=LEX_ROW_TEXTS), key=_text_key, lock=threading.Lock())
def lexical_row(text: str) -> tuple[np.ndarray, np.ndarray]:
    """(columns, values) of ``lexical([text])``'s one row: the same n-grams and hashes, without the per-call
    validation and sparse-matrix work of the batch path, which cost a resolve more than the rest of its head.
    Remembered for the newest LEX_ROW_TEXTS texts, by digest (``lexical_row.cache``; read-only arrays): a resolve
    scores its text with the live fit's head and the shadow fit's, and the hashing is the larger part of either."""
    analyzer, hasher = _lex_one()
    M = hasher.transform([analyzer(text)])
    values = 1.0 + np.log(M.data)
    norm = float(np.sqrt(values @ values))
    columns, values = M.indices.copy(), values / norm if norm > 0 else values
    columns.flags.writeable = values.flags.writeable = False
    return columns, values


def _head_inputs(X, texts):
    import scipy.sparse as sp

    X = np.asarray(X, dtype=np.float32)
    if texts is None:
        return X
    return sp.hstack([sp.csr_matrix(X), lexical(texts)], format="csr", dtype=np.float32)


@_one_blas_thread
def head_train(X, y, n_verbs: int, sample_weight=None, C: float = HEAD_C, warm: dict | None = None, texts=None) -> dict | None:
    """Multinomial LR over anchor embeddings X (classes: verb indices 0..n_verbs-1) and, with ``texts`` (the
    anchors' normalised texts), their lexical features; balanced class weights so verbs with few anchors are not
    drowned. Answers {W ((d [+ LEX_FEATURES]) x V), b (V), classes} or None (fewer than 2 verbs).
    ``warm``: a previous head over the same verbs and features; the refit starts from it (to the same tolerance,
    ``HEAD_TOL``, in about half the iterations)."""
    X = _head_inputs(X, texts)
    y = np.asarray(y, dtype=np.int64)
    classes = np.unique(y)
    if len(classes) < 2:
        return None
    counts = np.bincount(y, minlength=n_verbs).astype(np.float64)
    cw = len(y) / (len(classes) * np.maximum(counts, 1))
    sw = cw[y] * (1.0 if sample_weight is None else np.asarray(sample_weight, dtype=np.float64))
    use_warm = (
        warm is not None
        and warm["W"].shape[0] == X.shape[1]
        and len(warm["classes"]) == len(classes)
        and np.array_equal(warm["classes"], classes)
    )
    from sklearn.linear_model import LogisticRegression

    clf = LogisticRegression(C=C, max_iter=HEAD_MAX_ITER, tol=HEAD_TOL, warm_start=use_warm)
    if use_warm and len(classes) > 2:
        clf.coef_ = warm["W"][:, classes].T.astype(np.float64).copy()
        clf.intercept_ = warm["b"][classes].astype(np.float64).copy()
        clf.classes_ = classes
    with warnings.catch_warnings():
        # a small catalogue has few phrases per verb: scikit-learn's guess that many classes mean a regression
        # problem is wrong here, and would fill the logs on every prior
        warnings.filterwarnings("ignore", message="The number of unique classes is greater than 50%")
        clf.fit(X, y, sample_weight=sw)
    W = np.zeros((X.shape[1], n_verbs), dtype=np.float32)
    b = np.full(n_verbs, -1e4, dtype=np.float32)  # verbs without anchors are never predicted by the head
    if len(classes) == 2:
        W[:, classes[1]], b[classes[1]] = clf.coef_[0], clf.intercept_[0]
        W[:, classes[0]], b[classes[0]] = 0.0, 0.0
    else:
        W[:, classes], b[classes] = clf.coef_.T, clf.intercept_
    return {"W": W, "b": b, "classes": classes}


def head_warm_start(head: dict, head_verbs: list[str], verbs: list[str], width: int) -> dict | None:
    """``head`` (over ``head_verbs``) as where a head over ``verbs`` with ``width`` inputs starts training
    (``head_train``'s ``warm``): its weights for the verbs it predicts, zeros for the other verbs and for inputs it
    lacks (the lexical ones of a head over embeddings only). None when it has more inputs than ``width`` or
    predicts none of ``verbs``."""
    W, b = head["W"], head["b"]
    if W.shape[0] > width:
        return None
    src = {head_verbs[int(c)]: int(c) for c in head["classes"]}
    W0 = np.zeros((width, len(verbs)), dtype=np.float32)
    b0 = np.zeros(len(verbs), dtype=np.float32)
    shared = 0
    for j, verb in enumerate(verbs):
        i = src.get(verb)
        if i is not None:
            W0[: W.shape[0], j], b0[j] = W[:, i], b[i]
            shared += 1
    if not shared:
        return None
    return {"W": W0, "b": b0, "classes": np.arange(len(verbs))}


def head_predict(head: dict | None, Q, texts=None) -> np.ndarray | None:
    """Softmax probabilities (n x V) for query vectors Q (n x d) and their normalised ``texts`` (needed by a head
    with lexical features); None without a head. Raises ValueError when the head does not fit the queries."""
    if head is None:
        return None
    Q = np.atleast_2d(np.asarray(Q, dtype=np.float32))
    W, d = head["W"], Q.shape[1]
    if W.shape[0] == d:
        z = Q @ W + head["b"]
    elif W.shape[0] == d + LEX_FEATURES and texts is not None and len(texts) == 1:
        columns, values = lexical_row(texts[0])  # a resolve: one text
        z = Q @ W[:d] + values @ W[d:][columns] + head["b"]
    elif W.shape[0] == d + LEX_FEATURES and texts is not None:
        z = Q @ W[:d] + lexical(texts) @ W[d:] + head["b"]
    else:
        raise ValueError(
            f"head of {W.shape[0]} inputs cannot score {d}-dimensional queries" + (" without text" * (texts is None))
        )
    z -= z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def head_inputs_digest(X, names, sample_weight, texts=None, *, prefix: str = "") -> str:
    """sha256 of what ``head_train`` would learn from (rows, their verbs, weights, texts, and how it trains), after
    ``prefix`` (the digest of rows that come first): equal inputs train equal heads, so a stored head with the
    same digest is reused instead of trained again."""
    lex = LEX_FEATURES if texts is not None else 0
    h = hashlib.sha256(f"{prefix}|{HEAD_FORMAT}|C={HEAD_C}|iter={HEAD_MAX_ITER}|lex={lex}|".encode())
    h.update(np.ascontiguousarray(X, dtype=np.float32).tobytes())
    h.update(np.asarray(sample_weight, dtype=np.float64).tobytes())
    h.update("\x1f".join(names).encode())
    if texts is not None:
        h.update(b"\x1e" + "\x1f".join(texts).encode())
    return h.hexdigest()


def head_dumps(head: dict, verbs: list[str], names: tuple[list[str], np.ndarray] | None = None) -> bytes:
    """A head as npz bytes (W, b, classes, verb names, and ``names``: (verbs, the vectors of their names, NaN for a
    verb without one), the catalogue's verbs, also those the head cannot predict; None: none)."""
    buf = io.BytesIO()
    arrays = {"W": head["W"], "b": head["b"], "classes": head["classes"], "verbs": np.array(verbs, dtype=object)}
    if names is not None:
        arrays["name_verbs"] = np.array(names[0], dtype=object)
        arrays["names"] = np.asarray(names[1], dtype=np.float32)
    np.savez(buf, **arrays)
    return buf.getvalue()


def head_loads(data: bytes) -> tuple[dict, list[str]]:
    """Inverse of ``head_dumps``; raises ValueError on corrupt data."""
    try:
        with np.load(io.BytesIO(bytes(data)), allow_pickle=True) as z:
            head = {"W": z["W"].astype(np.float32), "b": z["b"].astype(np.float32), "classes": z["classes"]}
            head["names"] = z["names"].astype(np.float32) if "names" in z.files else None
            head["name_verbs"] = [str(v) for v in z["name_verbs"]] if "name_verbs" in z.files else None
            head["name_index"] = {v: j for j, v in enumerate(head["name_verbs"] or ())}
            verbs = [str(v) for v in z["verbs"]]
    except Exception as exc:  # any corruption: the caller falls back
        raise ValueError(f"unreadable head: {exc}") from exc
    if head["W"].ndim != 2 or head["W"].shape[1] != len(verbs) or head["b"].shape != (len(verbs),):
        raise ValueError("head shape does not match its verbs")
    if not (np.isfinite(head["W"]).all() and np.isfinite(head["b"]).all()):
        raise ValueError("head weights are not all finite")
    names = head["names"]
    if names is not None and (
        head["name_verbs"] is None
        or names.ndim != 2
        or names.shape[0] != len(head["name_verbs"])
        or names.shape[1] not in (head["W"].shape[0], head["W"].shape[0] - LEX_FEATURES)  # the embeddings' width
        or np.isinf(names).any()
    ):
        raise ValueError("head's name vectors do not match their verbs or the embeddings")
    return head, verbs


# --- ranking and features -------------------------------------------------------------------------------------


def combine(anchor: np.ndarray, head_p: np.ndarray | None, alpha: float = ALPHA) -> np.ndarray:
    """Ranking score per verb: anchor score blended with the head probability (anchors alone without a head)."""
    if head_p is None:
        return anchor
    return alpha * anchor + (1.0 - alpha) * head_p


def features(
    *,
    anchor: np.ndarray,
    head_p: np.ndarray | None,
    top: int,
    top_cos: float,
    knn: list[int],
    learned_top: bool,
    n_anchors: int,
    name_margin: float = 0.0,
    own_top: bool = False,
    user_taught: bool = False,
) -> np.ndarray:
    """The feature vector (FEATURES order) of the top verb ``top`` (index into ``anchor`` / ``head_p``);
    ``name_margin``: ``name_margins`` of the top verb (0 when its name has no vector); ``own_top``: its best
    anchor is the asking user's own phrase; ``user_taught``: the asking user has phrases of their own in scope."""
    others = np.delete(anchor, top)
    if head_p is None:
        hp, hmargin, hagree = 0.0, 0.0, 0.0
    else:
        hother = np.delete(head_p, top)
        hp = float(head_p[top])
        hmargin = hp - (float(hother.max()) if hother.size else 0.0)
        hagree = float(int(np.argmax(head_p)) == top)
    return np.array(
        [
            top_cos,
            anchor[top],
            anchor[top] - (float(others.max()) if others.size else 0.0),
            hp,
            hmargin,
            hagree,
            float(int(np.argmax(anchor)) == top),
            float(np.mean([k == top for k in knn])) if knn else 0.0,
            float(learned_top),
            np.log1p(n_anchors),
            float(n_anchors < NEW_VERB_ANCHORS),
            name_margin,
            float(own_top),
            float(user_taught),
        ],
        dtype=np.float64,
    )


def verb_words(name: str, domain: str = "", display_name: str = "") -> str:
    """The words of a verb's name, the text its name vector is embedded from: the name's parts in words
    (``exchange_rate``, ``exchangeRate`` and ``exchange-rate`` alike), without a first part that is the verb's
    domain (all its verbs share it: it tells none apart), then its display name when that says something else.
    ``banking.exchange_rate`` in domain ``banking`` -> ``exchange rate``."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name)
    parts = [p for p in re.split(r"[\W_]+", spaced) if p]
    if len(parts) > 1 and domain and parts[0].lower() == domain.lower():
        parts = parts[1:]
    words = " ".join(parts).lower()
    shown = " ".join(display_name.split()).lower()
    return f"{words}, {shown}" if shown and shown != words else words


def name_margins(C, top, exclude=None) -> np.ndarray:
    """Per row of ``C`` (n x V: cosines of queries to the verbs' names; NaN for a verb without a name vector):
    the cosine to the name of verb ``top[r]`` minus the best cosine to another verb's name, leaving out
    ``exclude[r]`` too (a verb scored as if it did not exist). 0 where either side has no name."""
    C = np.atleast_2d(np.asarray(C, dtype=np.float64))
    n = len(C)
    r = np.arange(n)
    top = np.asarray(top, dtype=np.int64)
    if not C.shape[1]:
        return np.zeros(n)
    own = C[r, top]
    others = C.copy()
    others[r, top] = np.nan
    if exclude is not None:
        others[r, np.asarray(exclude, dtype=np.int64)] = np.nan
    best = np.max(np.where(np.isnan(others), -np.inf, others), axis=1)
    margin = own - best
    return np.where(np.isfinite(margin), margin, 0.0)


def without(head_p: np.ndarray | None, verb: int) -> np.ndarray | None:
    """Head probabilities renormalised as if ``verb`` did not exist (an open-set example)."""
    if head_p is None:
        return None
    p = head_p.copy()
    p[verb] = 0.0
    return p / max(float(p.sum()), 1e-12)


# --- the decision fit ---------------------------------------------------------------------------------------


class MonoLR:
    """Binary L2 logistic regression (C as sklearn) whose coefficients on the constrained columns keep their sign
    (L-BFGS-B with bounds)."""

    def __init__(self, signs, C: float = 1.0):
        self.signs, self.C = np.asarray(signs), C

    def fit(self, Z, y):
        from scipy.optimize import minimize

        Z = np.asarray(Z, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        d = Z.shape[1]

        def loss(w):
            t = Z @ w[:d] + w[d]
            val = np.logaddexp(0.0, t) - y * t
            g = 1.0 / (1.0 + np.exp(-t)) - y
            return val.sum() * self.C + 0.5 * w[:d] @ w[:d], np.r_[self.C * (Z.T @ g) + w[:d], self.C * g.sum()]

        bounds = [(0.0, None) if s > 0 else (None, 0.0) if s < 0 else (None, None) for s in self.signs] + [(None, None)]
        r = minimize(loss, np.zeros(d + 1), jac=True, method="L-BFGS-B", bounds=bounds, options={"maxiter": 500})
        if not r.success:  # still a usable fit, and the held-out figures are of fits stopped alike: say so
            logger.warning("decision fit: the solver stopped before converging (%s)", r.message)
        self.coef_, self.intercept_ = r.x[:d], float(r.x[d])
        return self

    def predict_proba1(self, Z):
        return 1.0 / (1.0 + np.exp(-np.clip(np.asarray(Z) @ self.coef_ + self.intercept_, -50, 50)))


def _signs(width: int = len(FEATURES)) -> np.ndarray:
    return np.array([MONOTONE.get(f, 0) for f in FEATURES[:width]])


def choose_cut(p: np.ndarray, y: np.ndarray, max_wrong_rate: float, z: float = BOUND_Z) -> tuple[float, dict]:
    """The lowest cut on held-out probabilities whose wrong auto-resolutions over all labels stay within
    ``max_wrong_rate`` counting a one-sided bound (w + z sqrt(w + 1)) / n. Answers (cut, held-out shares)."""
    n = len(y)
    order = np.argsort(-p, kind="stable")
    ps, ys = p[order], y[order]
    wrong, right = np.cumsum(1 - ys), np.cumsum(ys)
    within = (wrong + z * np.sqrt(wrong + 1.0)) / n <= max_wrong_rate
    distinct = np.r_[ps[1:] < ps[:-1], True]
    bad = np.where(~within)[0]
    limit = bad[0] if bad.size else n
    cand = np.where((within & distinct)[:limit])[0]
    if not cand.size:
        return float("inf"), {"right": 0.0, "wrong": 0.0, "asked": 1.0}
    i = cand[-1]
    return float(ps[i]), {"right": float(right[i] / n), "wrong": float(wrong[i] / n), "asked": float(1 - (i + 1) / n)}


def open_cut(p_open: np.ndarray, max_open_rate: float | None) -> float:
    """The lowest cut at which at most ``max_open_rate`` of the open-set rows (queries scored as if their verb did
    not exist: what an out-of-scope query looks like) would auto-resolve; -inf without a bound or rows."""
    if max_open_rate is None or not len(p_open):
        return float("-inf")
    ranked = np.sort(np.asarray(p_open, dtype=np.float64))[::-1]
    k = int(np.floor(max_open_rate * len(ranked)))  # at most k rows may reach the cut
    return float("-inf") if k >= len(ranked) else float(np.nextafter(ranked[k], np.inf))


def shares(auto: np.ndarray, y: np.ndarray) -> dict:
    """right / wrong / asked shares of labelled rows ``y`` (1 = the top verb was right) auto-resolved where ``auto``."""
    n = max(len(y), 1)
    right, wrong = int((auto & (y == 1)).sum()), int((auto & (y == 0)).sum())
    return {"right": right / n, "wrong": wrong / n, "asked": 1 - (right + wrong) / n}


def shares_counted(auto: np.ndarray, y: np.ndarray) -> dict:
    """``shares`` rounded, with the number of rows: how a fit's figures are stored."""
    return {"n": int(len(y)), **{k: round(v, 4) for k, v in shares(auto, y).items()}}


def shares_at(p: np.ndarray, y: np.ndarray, cut: float) -> dict:
    """right / wrong / asked shares of labelled rows at ``cut``."""
    return shares(p >= cut, y)


@_one_blas_thread
def fit_decision(
    F,
    y,
    *,
    max_wrong_rate: float,
    min_labels: int,
    F_open=None,
    max_open_rate: float | None = None,
    folds: int = FOLDS,
    seed: int = 0,
    judge=None,
) -> dict | None:
    """P(top verb is right | features) and its cut, from labelled rows ``F`` (n x the first BASE_FEATURES or more
    of FEATURES: the fit is on those) and ``y`` (1 = the top verb was right). ``F_open``: open-set rows (queries
    scored with their verb removed; always wrong).
    Probabilities for the cut are out-of-fold; the model is then refitted on everything. None with fewer than
    ``min_labels`` labels, one class only, or one row of each (rows with a non-finite feature are left out).
    ``max_open_rate``: the cut is also high enough that at most this share of the open-set rows (held out) would
    auto-resolve. ``judge`` (a mask over the rows of ``F``): the held-out figures on those rows alone, with the cut
    and the support guard as the fit decides, are given too (``held_out_judged``), to compare with another fit on
    rows it did not learn from."""
    from sklearn.model_selection import StratifiedKFold

    y = np.asarray(y, dtype=np.int64)
    F = np.asarray(F, dtype=np.float64)
    F = F.reshape(len(y), -1) if F.size else np.zeros((len(y), len(FEATURES)))
    width = F.shape[1]
    if not BASE_FEATURES <= width <= len(FEATURES):
        raise ValueError(f"feature rows of {width} columns; a fit reads {BASE_FEATURES} to {len(FEATURES)}")
    finite = np.isfinite(F).all(axis=1)  # a row with a non-finite feature teaches nothing: left out
    F, y = F[finite], y[finite]
    judge = None if judge is None else np.asarray(judge, dtype=bool)[finite]
    if F_open is not None and len(F_open):
        F_open = np.atleast_2d(np.asarray(F_open, dtype=np.float64))
        F_open = F_open[:, :width] if F_open.shape[1] >= width else F_open[:0, :width]
        F_open = F_open[np.isfinite(F_open).all(axis=1)]
    if len(y) < min_labels or len(y) == 0 or y.min() == y.max():
        return None
    n_open = 0 if F_open is None else len(F_open)
    F_all = np.vstack([F, np.asarray(F_open, dtype=np.float64)]) if n_open else F
    y_all = np.r_[y, np.zeros(n_open, dtype=np.int64)]
    is_open = np.r_[np.zeros(len(y), bool), np.ones(n_open, bool)]
    mu, sd = F_all.mean(axis=0), F_all.std(axis=0)
    sd = np.where(sd > 1e-4, sd, 1.0)  # a constant feature (no head yet, no learned anchors) stays inert
    Z = (F_all - mu) / sd
    oof = np.zeros(len(y_all))
    strata = y_all + 2 * is_open
    counts = np.bincount(strata)
    if counts.max() < 2:
        return None  # one row of each kind: no two folds can be drawn
    k = max(2, min(folds, int(counts[counts > 0].min())))
    for tr, te in StratifiedKFold(k, shuffle=True, random_state=seed).split(Z, strata):
        oof[te] = MonoLR(_signs(width)).fit(Z[tr], y_all[tr]).predict_proba1(Z[te])
    cut, held = choose_cut(oof[~is_open], y, max_wrong_rate)
    cut_open = open_cut(oof[is_open], max_open_rate) if n_open else float("-inf")
    if np.isfinite(cut) and cut_open > cut:
        cut, held = cut_open, shares_at(oof[~is_open], y, cut_open)
    clf = MonoLR(_signs(width)).fit(Z, y_all)
    right_cos = F[y == 1, FEATURES.index("top_cos")]
    min_top_cos = float(np.quantile(right_cos, SUPPORT_QUANTILE)) if len(right_cos) else -1.0
    extra = {"situations": situation_counts(F)}
    if judge is not None:  # as the fit decides: the cut and the support guard
        auto = (oof[~is_open][judge] >= cut) & (F[judge, FEATURES.index("top_cos")] >= min_top_cos)
        extra["held_out_judged"] = shares_counted(auto, y[judge]) if judge.any() else None
    return {
        "features": list(FEATURES[:width]),
        "mean": mu.tolist(),
        "scale": sd.tolist(),
        "coef": clf.coef_.tolist(),
        "intercept": clf.intercept_,
        "cut": cut if np.isfinite(cut) else None,
        "min_top_cos": min_top_cos,
        "held_out": {k2: round(v, 4) for k2, v in held.items()},
        "held_out_open_auto": round(float((oof[is_open] >= cut).mean()), 4) if n_open else None,
        "n_labels": int(len(y)),
        "n_open": int(n_open),
        "base_rate": round(float(y.mean()), 4),
        "max_wrong_rate": max_wrong_rate,
        "max_open_rate": max_open_rate,
        "open_cut_binds": bool(np.isfinite(cut) and cut_open >= cut),
        **extra,
    }


def situation_counts(F) -> dict[str, list[int]]:
    """{feature: [rows where it is no, rows where it is yes]} of the SITUATIONS among the columns of ``F`` (the
    labelled rows a fit learned from, not its open-set ones)."""
    F = np.asarray(F, dtype=np.float64)
    out = {}
    for name in SITUATIONS:
        j = FEATURES.index(name)
        if F.ndim == 2 and j < F.shape[1]:
            yes = int((F[:, j] >= 0.5).sum())
            out[name] = [int(F.shape[0]) - yes, yes]
    return out


def situation_outside(params: dict, f, *, skip: tuple[str, ...] = ()) -> dict | None:
    """The first of the SITUATIONS (but ``skip``) whose value in feature row ``f`` the fit's rows held fewer than
    SITUATION_MIN_ROWS times, as {"feature", "value", "rows"}; None when they held every value of the row, or the
    fit records no situations (one stored before fits recorded them)."""
    counts = params.get("situations") if isinstance(params, dict) else None
    if not isinstance(counts, dict):
        return None
    for name in SITUATIONS:
        if name in skip:
            continue
        c = counts.get(name)
        j = FEATURES.index(name)
        if not isinstance(c, list) or len(c) != 2 or j >= len(f):
            continue
        yes = int(f[j] >= 0.5)
        if c[yes] < SITUATION_MIN_ROWS:
            return {"feature": name, "value": yes, "rows": int(c[yes])}
    return None


def check_params(params) -> None:
    """Raise ValueError unless ``params`` is a usable fit (shapes and finite numbers)."""
    names = params.get("features") if isinstance(params, dict) else None
    if not isinstance(names, list) or not BASE_FEATURES <= len(names) <= len(FEATURES) or names != list(FEATURES[: len(names)]):
        raise ValueError("decision params do not match this resolver's features")
    n = len(names)
    for key in ("mean", "scale", "coef"):
        v = params.get(key)
        if not isinstance(v, list) or len(v) != n or not all(_finite_number(x) for x in v):
            raise ValueError(f"decision params: bad {key}")
    if not _finite_number(params.get("intercept")):
        raise ValueError("decision params: bad intercept")
    for key, value in (("cut", params.get("cut")), ("min_top_cos", params.get("min_top_cos", -1.0))):
        if key == "cut" and value is None:
            continue  # no cut within the target: the fit never auto-resolves
        if isinstance(value, bool) or not isinstance(value, int | float) or not np.isfinite(value):
            raise ValueError(f"decision params: bad {key}")


def _finite_number(x) -> bool:
    """A JSON number (not a string of one, not a boolean) that is finite."""
    return isinstance(x, int | float) and not isinstance(x, bool) and bool(np.isfinite(x))


def probability(params: dict, F) -> np.ndarray:
    """P(top verb is right) for feature rows F (the features the fit was fitted on: the first of each row)."""
    F = np.atleast_2d(np.asarray(F, dtype=np.float64))[:, : len(params["coef"])]
    z = (F - np.asarray(params["mean"])) / np.asarray(params["scale"])
    return 1.0 / (1.0 + np.exp(-np.clip(z @ np.asarray(params["coef"]) + params["intercept"], -50, 50)))


def decide(params: dict, F) -> np.ndarray:
    """Auto-resolve mask: P >= cut and top cosine >= the support floor (never without a finite cut)."""
    F = np.atleast_2d(np.asarray(F, dtype=np.float64))
    if params.get("cut") is None:
        return np.zeros(len(F), dtype=bool)
    return (probability(params, F) >= params["cut"]) & (F[:, 0] >= params.get("min_top_cos", -1.0))


def evaluate(params: dict | None, F, y) -> dict:
    """right / wrong / asked shares of a fit's decisions on labelled rows (None: asks always)."""
    y = np.asarray(y, dtype=np.int64)
    auto = decide(params, F) if params is not None and len(y) else np.zeros(len(y), dtype=bool)
    return shares_counted(auto, y)


# --- the cold-start prior -------------------------------------------------------------------------------------


def anchor_scores(
    sims: np.ndarray, verbs: np.ndarray, trust: np.ndarray, learned: np.ndarray, n_verbs: int, p: dict, exclude: int | None = None
) -> tuple[np.ndarray, np.ndarray, float, list[int]]:
    """One query's per-verb anchor scores over dense arrays, as learning.scoring scores them (all anchors are
    retrieved here, so no unseen bound): (score per verb, best-anchor-is-learned per verb, top cosine, verbs of
    the KNN nearest anchors). ``exclude``: as if that verb had no anchors."""
    if exclude is not None:
        sims = np.where(verbs == exclude, -1.0, sims)
    keep = np.where(learned, sims >= p["learned_threshold"], sims >= p["min_score"])
    eff = np.where(learned, sims * trust, sims)
    idx = np.where(keep)[0]
    idx = idx[np.argsort(-eff[idx], kind="stable")]
    score = np.zeros(n_verbs)
    learned_top = np.zeros(n_verbs, dtype=bool)
    w = p["anchor_weights"]
    tops: dict[int, list[float]] = {}
    for i in idx:
        v = int(verbs[i])
        lst = tops.setdefault(v, [])
        if not lst:
            learned_top[v] = bool(learned[i])
        if len(lst) < len(w):
            lst.append(float(eff[i]))
    for v, lst in tops.items():
        used = w[: len(lst)]
        score[v] = sum(a * b for a, b in zip(used, lst, strict=False)) / sum(used)
    top_cos = float(sims.max()) if sims.size else 0.0
    return score, learned_top, top_cos, [int(verbs[i]) for i in idx[:KNN]]


def _prior_rows(S, verbs_tr, n_verbs: int, p: dict, exclude, chunk: int = 256, learned=None, trust=None):
    """``anchor_scores`` for many queries at once: S (n x a) raw cosines to the anchors, ``exclude`` (n, or None)
    a verb per query scored as if it had no anchors; ``learned`` / ``trust`` (a, or None: catalogue anchors, full
    trust) as the resolver counts learned anchors (their own floor, similarity times trust). Answers (score n x V,
    top cosine n, KNN verbs n x KNN with -1 padding, best-anchor-is-learned n x V). Same numbers as the per-query
    loop. Each verb's best anchors are found in segments of the anchors grouped by verb (a few passes over n x a),
    so the cost does not grow with the size of the largest verb times the number of verbs."""
    n, a = S.shape
    learned = np.zeros(a, dtype=bool) if learned is None else np.asarray(learned, dtype=bool)
    trust = np.ones(a) if trust is None else np.asarray(trust, dtype=np.float64)
    floor = np.where(learned, p["learned_threshold"], p["min_score"])
    w = [float(x) for x in p["anchor_weights"]]
    order = np.argsort(verbs_tr, kind="stable")  # anchors grouped by verb, ascending index within a verb
    counts = np.bincount(verbs_tr, minlength=n_verbs)
    present = np.flatnonzero(counts)  # verbs with anchors: one segment each, in order
    starts = np.r_[0, np.cumsum(counts[present])[:-1]].astype(np.int64)
    seg = np.repeat(np.arange(len(present)), counts[present])  # segment of each grouped anchor
    learned_grouped = learned[order]
    col = np.arange(a)
    m = min(len(w), int(counts.max()) if a else 0)
    score = np.zeros((n, n_verbs))
    top_cos = np.zeros(n)
    knn = np.full((n, KNN), -1, dtype=np.int64)
    learned_top = np.zeros((n, n_verbs), dtype=bool)
    chunk = max(16, min(chunk, (1 << 22) // max(a, 1)))  # about 32 MB a working array
    for s in range(0, n, chunk):
        sims = S[s : s + chunk]
        nrow = len(sims)
        if exclude is not None:
            sims = np.where(verbs_tr[None, :] == np.asarray(exclude[s : s + chunk])[:, None], np.float32(-1.0), sims)
        top_cos[s : s + nrow] = sims.max(axis=1) if a else 0.0
        eff = np.where(sims >= floor[None, :], sims.astype(np.float64) * trust[None, :], -np.inf)
        if m:
            grouped = np.ascontiguousarray(eff[:, order])  # indexing gives a column-major copy; rows are reduced
            num = np.zeros((nrow, len(present)))
            den = np.zeros((nrow, len(present)))
            line = np.arange(nrow)[:, None]
            for i in range(m):  # the i-th best anchor of every verb: its maximum, then that anchor set aside
                best = np.maximum.reduceat(grouped, starts, axis=1)
                # the first anchor holding it (ties: the lower anchor order)
                at = np.minimum.reduceat(np.where(grouped == best[:, seg], col, a), starts, axis=1)
                if i == 0:
                    learned_top[s : s + nrow, present] = learned_grouped[at] & np.isfinite(best)  # none kept: False
                ok = np.isfinite(best)
                num += np.where(ok, w[i] * np.where(ok, best, 0.0), 0.0)
                den += np.where(ok, w[i], 0.0)
                if i + 1 < m:
                    grouped[line, at] = -np.inf
            score[s : s + nrow, present] = np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)
        # the KNN nearest kept anchors, best first, ties by anchor order (a stable sort)
        kth = min(KNN, a)
        if kth:
            thr = -np.partition(-eff, kth - 1, axis=1)[:, kth - 1]
            rows, cols = np.nonzero((eff >= thr[:, None]) & np.isfinite(eff))
            o = np.lexsort((cols, -eff[rows, cols], rows))
            rows, cols = rows[o], cols[o]
            first = np.r_[0, np.flatnonzero(np.diff(rows)) + 1]
            rank = np.arange(len(rows)) - np.repeat(first, np.diff(np.r_[first, len(rows)]))
            keep = rank < KNN
            knn[s + rows[keep], rank[keep]] = verbs_tr[cols[keep]]
    return score, top_cos, knn, learned_top


def _prior_features(score, P, top_cos, knn, n_anch, learned_top=None, names_cos=None, exclude=None):
    """``features`` of every row's top verb (``learned_top``: n x V, the verb's best anchor is a learned phrase;
    None: never; ``names_cos``: n x V cosines to the verbs' names, None: no names; ``exclude``: a verb per row
    scored as if it did not exist); rows whose best combined score is not positive are dropped. Answers (kept
    mask, top verb per row, feature rows)."""
    n, V = score.shape
    comb = combine(score, P)
    top = np.argmax(comb, axis=1)
    r = np.arange(n)
    keep = comb[r, top] > 0
    others = score.copy()
    others[r, top] = -np.inf
    a_other = others.max(axis=1) if V > 1 else np.zeros(n)
    if P is None:
        hp = hmargin = hagree = np.zeros(n)
    else:
        hp = P[r, top].astype(np.float64)
        ho = P.astype(np.float64).copy()
        ho[r, top] = -np.inf
        hmargin = hp - (ho.max(axis=1) if V > 1 else 0.0)
        hagree = (np.argmax(P, axis=1) == top).astype(np.float64)
    valid = knn >= 0
    nk = valid.sum(axis=1)
    share = np.where(nk > 0, (valid & (knn == top[:, None])).sum(axis=1) / np.maximum(nk, 1), 0.0)
    na = n_anch[top]
    F = np.column_stack(
        [
            top_cos,
            score[r, top],
            score[r, top] - a_other,
            hp,
            hmargin,
            hagree,
            (np.argmax(score, axis=1) == top).astype(np.float64),
            share,
            np.zeros(n) if learned_top is None else learned_top[r, top].astype(np.float64),
            np.log1p(na),
            (na < NEW_VERB_ANCHORS).astype(np.float64),
            np.zeros(n) if names_cos is None else name_margins(names_cos, top, exclude),
            np.zeros(n),  # top_is_own: the catalogue and the deployment's global phrases are no user's own
            np.zeros(n),  # user_has_taught: the catalogue's examples stand for a user who taught nothing yet
        ]
    )
    return keep, top, F


def floors(vectors, verbs, quantiles: dict[str, float], *, sample: int = FLOOR_SAMPLE, seed: int = 0) -> dict:
    """Each named floor at its quantile of the cosines between anchors of different verbs (``quantiles``: name ->
    q in (0, 1)). A floor whose quantile the pairs cannot resolve (fewer than 1 / (1 - q) of them) is left out.
    More than ``sample`` anchors: a fixed random sample of them. Answers {name: value}."""
    X = np.asarray(vectors, dtype=np.float32)
    v = np.asarray(verbs)
    if len(v) > sample:
        keep = np.sort(np.random.default_rng(seed).choice(len(v), sample, replace=False))
        X, v = X[keep], v[keep]
    if len(v) < 2:
        return {}
    i, j = np.triu_indices(len(v), 1)
    cross = v[i] != v[j]
    cos = (X @ X.T)[i[cross], j[cross]]
    out = {}
    for name, q in quantiles.items():
        if cos.size and cos.size * (1.0 - q) >= 1.0 - 1e-9:  # (1 - q) is not exact in floating point
            out[name] = round(float(np.quantile(cos, q)), 4)
    return out


def catalogue_prior(vectors, verbs, n_verbs: int, p: dict, *, texts=None, **kwargs):
    """``catalogue_priors`` with one head: over the embeddings, and over ``texts`` (normalised, per anchor) too when
    given. Answers (fit or None, number of examples)."""
    return catalogue_priors(vectors, verbs, n_verbs, p, texts_options=[texts], **kwargs)[0]


@_one_blas_thread
def catalogue_priors(
    vectors,
    verbs,
    n_verbs: int,
    p: dict,
    *,
    texts_options: list,
    max_wrong_rate: float,
    min_labels: int,
    folds: int = FOLDS,
    seed: int = 0,
    learned=None,
    trust=None,
    max_open_rate: float | None = None,
    max_queries: int | None = None,
    max_train: int | None = None,
    names=None,
    progress: bool = False,
) -> list:
    """Labelled examples from the anchors a deployment loaded, and the decision fit on them, once per head option.

    Fold k holds out every verb's k-th anchor (a verb with one anchor loses it: what a query for a missing verb
    looks like); the rest are the anchors and train the head; each held-out anchor is a query labelled "the top
    verb is its own verb". ``learned`` / ``trust`` (per anchor): learned phrases (an import) are scored as the
    resolver scores them. ``texts_options``: one fit per entry, its head over the embeddings (None) or over the
    embeddings and these texts (normalised, per anchor); the folds, samples and anchor scores are shared, only the
    heads differ. ``max_queries`` / ``max_train``: with more than ``max_queries`` anchors, each fold asks a fixed
    random sample of its held-out anchors in proportion (all folds together at most ``max_queries``), and a fold
    whose other anchors number more than ``max_train`` trains its head on a sample of them (all of them still
    score as anchors). ``names``: the vectors of the verbs' names (n_verbs or more x d: row i is verb i's, NaN for
    a verb without one, then the names of the catalogue's verbs without anchors; None: none): a held-out verb
    keeps its name, as a verb imported with a few phrases has one, and a verb nobody taught yet still tells a
    query that is about it from one that is about the top verb.
    ``progress``: a bar over the folds (a command's). Answers [(fit or None, number of examples)]
    in the order of ``texts_options``."""
    vectors = np.asarray(vectors, dtype=np.float32)
    verbs = np.asarray(verbs, dtype=np.int64)
    learned = np.zeros(len(verbs), dtype=bool) if learned is None else np.asarray(learned, dtype=bool)
    trust = np.ones(len(verbs)) if trust is None else np.asarray(trust, dtype=np.float64)
    rng = np.random.default_rng(seed)
    fold = np.zeros(len(verbs), dtype=np.int64)
    for v in np.unique(verbs):
        idx = np.where(verbs == v)[0]
        fold[idx] = rng.permutation(len(idx)) % folds
    # more anchors than max_queries: each fold asks its share of them (folds are uneven when verbs are small)
    share = 1.0 if max_queries is None or len(verbs) <= max_queries else max_queries / len(verbs)
    rows = [([], [], []) for _ in texts_options]  # per option: F, y, F_open
    for k in tqdm(range(folds), desc="prior folds", unit="fold", disable=not progress):
        te, tr = np.where(fold == k)[0], np.where(fold != k)[0]
        if not te.size or not tr.size:
            continue
        if share < 1.0:
            te = np.sort(rng.choice(te, max(1, int(len(te) * share)), replace=False))
        fit_rows = tr
        if max_train is not None and len(tr) > max_train:
            fit_rows = np.sort(rng.choice(tr, max_train, replace=False))
        n_anch = np.bincount(verbs[tr], minlength=n_verbs)
        S = vectors[te] @ vectors[tr].T
        C = None if names is None else vectors[te] @ np.asarray(names, dtype=np.float32).T
        gold = verbs[te]
        # every held-out phrase as a query (labelled), then as if its own verb did not exist (open set)
        asked = _prior_rows(S, verbs[tr], n_verbs, p, None, learned=learned[tr], trust=trust[tr])
        opened = _prior_rows(S, verbs[tr], n_verbs, p, gold, learned=learned[tr], trust=trust[tr])
        del S
        for texts, (F, y, F_open) in zip(texts_options, rows, strict=True):
            texts_fit = None if texts is None else [texts[i] for i in fit_rows]
            texts_te = None if texts is None else [texts[i] for i in te]
            head = head_train(vectors[fit_rows], verbs[fit_rows], n_verbs, texts=texts_fit)
            P = head_predict(head, vectors[te], texts_te)
            score, tc, knn, lt = asked
            keep, top, f = _prior_features(score, P, tc, knn, n_anch, lt, C)
            F.append(f[keep])
            y.append((top == gold)[keep].astype(np.int64))
            score, tc, knn, lt = opened
            P_open = None if P is None else np.stack([without(P[j], int(g)) for j, g in enumerate(gold)])
            keep, _, f = _prior_features(score, P_open, tc, knn, n_anch, lt, C, gold)
            F_open.append(f[keep])
    out = []
    width = len(FEATURES) if names is not None else BASE_FEATURES  # without names the fit leaves the feature out
    for F, y, F_open in rows:
        F = (np.vstack(F) if F else np.zeros((0, len(FEATURES))))[:, :width]
        y = np.concatenate(y) if y else np.zeros(0, dtype=np.int64)
        F_open = (np.vstack(F_open) if F_open else np.zeros((0, len(FEATURES))))[:, :width]
        fit = fit_decision(
            F,
            y,
            max_wrong_rate=max_wrong_rate,
            min_labels=min_labels,
            F_open=F_open if len(F_open) else None,
            max_open_rate=max_open_rate,
        )
        out.append((fit, len(y)))
    return out
