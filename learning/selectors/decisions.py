"""Reads for the learned act-or-ask decision: the fits in force, their heads, the labels."""

import threading
import time as _time
from collections import OrderedDict
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Count, F, Q, Subquery, Sum, Window
from django.db.models.functions import RowNumber

from common.db import values_list_binary
from learning import decision
from learning.models import (
    DecisionFit,
    DecisionHead,
    LearnedPhrase,
    ResolutionRecord,
    Verb,
    VerbPhrase,
)
from tenants.context import private_agent_id, tenant_filter_ids

# --- The learned auto-resolve decision: the fits in force, their heads, the labels ---

_decision_cache: dict = {}  # tenants in scope -> (expires (monotonic), state)
_head_cache: "OrderedDict[tuple, object]" = OrderedDict()  # (tenants, version, user, None or ("owners",)) -> value
_head_bytes: dict = {}  # key -> bytes of its weights
_HEAD_CACHE_SIZE = 256  # entries at most, and at most RESOLVE_HEAD_CACHE_MB of weights
_head_lock = threading.Lock()
_active_verbs_cache: dict = {}  # tenants in scope -> (expires, names, catalogue stamp)


@dataclass(frozen=True)
class FitState:
    version: int
    source: str
    params: dict | None
    embedding_model: str = ""


def decision_state() -> dict:
    """{"live", "shadow", "prior"}: FitState or None each (prior: the newest catalogue prior, whatever its status);
    "priors": the newest prior of each embedding model; "personal": users' own heads per fit version. Three small queries
    (the fits in force; the newest prior of each model, however many fits came after them; the heads' counts), cached
    per process for RESOLVE_DECISION_CACHE_S seconds."""
    now = _time.monotonic()
    tenants = tenant_filter_ids()
    hit = _decision_cache.get(tenants)
    if hit is not None and hit[0] > now:
        return hit[1]
    columns = ("version", "source", "status", "params", "embedding_model")
    in_force = list(
        DecisionFit.objects.filter(status__in=[DecisionFit.Status.LIVE, DecisionFit.Status.SHADOW])
        .order_by("-version")
        .values(*columns)[:10]
    )
    priors = list(
        DecisionFit.objects.filter(source=DecisionFit.Source.PRIOR)
        .order_by("embedding_model", "-version")
        .distinct("embedding_model")
        .values(*columns)
    )
    state = {"live": None, "shadow": None, "prior": None, "priors": {}, "personal": {}}
    for r in in_force:
        if state[r["status"]] is None:
            state[r["status"]] = FitState(r["version"], r["source"], r["params"], r["embedding_model"])
    for r in sorted(priors, key=lambda r: -r["version"]):
        fs = FitState(r["version"], r["source"], r["params"], r["embedding_model"])
        if state["prior"] is None:
            state["prior"] = fs
        state["priors"][r["embedding_model"]] = fs  # the newest per embedding model
    versions = {fs.version for fs in (state["live"], state["shadow"], *state["priors"].values()) if fs is not None}
    # How many users' own heads each of these fits still holds: a fit writes its heads once, so the number only
    # falls when a user's data is erased (in any process), and the heads this process read are checked against it.
    state["personal"] = dict.fromkeys(versions, 0) | dict(
        DecisionHead.objects.filter(fit__version__in=versions, user_id__isnull=False)
        .values("fit__version")
        .annotate(n=Count("id"))
        .values_list("fit__version", "n")
    )
    _decision_cache[tenants] = (now + settings.RESOLVE_DECISION_CACHE_S, state)
    return state


def decision_state_forget() -> None:
    """Read the fits in force of this scope afresh at the next ``decision_state`` (and with them, which users
    still have their own head)."""
    _decision_cache.pop(tenant_filter_ids(), None)


def decision_cache_clear() -> None:
    _decision_cache.clear()
    with _head_lock:
        _head_cache.clear()
        _head_bytes.clear()
    _active_verbs_cache.clear()


def decision_head(version: int, user_id: str | None) -> tuple | None:
    """(head, verbs, anchors per verb, owner) of fit ``version`` for this user: the user's own head when the fit
    trained one, else the deployment's; None when the fit has no head. A fit's heads never change once it exists
    (they are written in the transaction that creates it; a user's may only be erased with the user's data, and
    then the deployment's answers), so each is read once per process (LRU); which users
    have their own is read with the deployment's head, so a user without one costs no query. An erasure in
    another process shows within RESOLVE_DECISION_CACHE_S: the number of personal heads of the fits in force
    (``decision_state``) falls, so this process reads who has one again and forgets the heads of those who no
    longer do. Raises ValueError when the stored head is unreadable."""
    tenants = tenant_filter_ids()  # versions count per tenant
    personal = decision_state()["personal"].get(version)  # None: a fit no longer in force, read as it was
    owners = _head_cached((tenants, version, ("owners", personal)), lambda: _head_owners_read(tenants, version))
    # A personal head learns from the user's phrases the tenant's agents share: an agent with private user data
    # (``private_user_data``) decides with the deployment's head, and its users' own phrases count as anchors.
    shared = private_agent_id() is None
    owner = user_id if shared and user_id is not None and user_id in owners else None
    head = _head_cached((tenants, version, owner), lambda: _head_read(version, owner))
    if head is None and owner is not None:  # the user's own head was erased with their data (privacy) since
        head = _head_cached((tenants, version, None), lambda: _head_read(version, None))
    return head


def _head_cached(key, load):
    with _head_lock:  # threaded servers share the cache
        if key in _head_cache:
            _head_cache.move_to_end(key)
            return _head_cache[key]
    value = load()
    size = sum(value[0][k].nbytes for k in ("W", "b", "names") if value[0].get(k) is not None) if isinstance(value, tuple) else 0
    budget = settings.RESOLVE_HEAD_CACHE_MB * 2**20
    with _head_lock:
        _head_cache[key] = value
        _head_bytes[key] = size
        total = sum(_head_bytes.values())
        # least recently used first; the entry just read stays even when it alone is over the budget
        while len(_head_cache) > 1 and (len(_head_cache) > _HEAD_CACHE_SIZE or total > budget):
            old, _ = _head_cache.popitem(last=False)
            total -= _head_bytes.pop(old, 0)
    return value


def head_cache_bytes() -> int:
    """Bytes of head weights this process holds (what RESOLVE_HEAD_CACHE_MB bounds)."""
    with _head_lock:
        return sum(_head_bytes.values())


def _head_owners_read(tenants, version: int) -> frozenset:
    """The users with their own head in fit ``version``; the heads, and the lists of owners, this process kept for
    that fit of users no longer among them are dropped (their data was erased)."""
    owners = frozenset(DecisionHead.objects.filter(fit__version=version, user_id__isnull=False).values_list("user_id", flat=True))
    with _head_lock:
        for key in [k for k in _head_cache if k[:2] == (tenants, version)]:
            scope = key[2]
            if isinstance(scope, tuple) or (scope is not None and scope not in owners):
                del _head_cache[key]
                _head_bytes.pop(key, None)
    return owners


def _head_read(version: int, user_id: str | None) -> tuple | None:
    qs = DecisionHead.objects.filter(fit__version=version)
    qs = qs.filter(user_id=user_id) if user_id is not None else qs.filter(user_id__isnull=True)
    rows = list(qs.values("user_id", "weights", "anchors")[:1])
    if not rows:
        return None
    head, verbs = decision.head_loads(rows[0]["weights"])
    anchors = rows[0]["anchors"] or {}
    if not isinstance(anchors, dict) or not all(isinstance(n, int) and not isinstance(n, bool) for n in anchors.values()):
        raise ValueError(f"decision head of fit v{version}: its anchor counts are not a map of verbs to numbers")
    return head, verbs, dict(anchors), rows[0]["user_id"]


def active_verb_names(*, stamp: tuple | None = None) -> frozenset:
    """Names of the active verbs (a head-only option must still exist). With the catalogue ``stamp`` read in this
    transaction (``catalogue_stamp``: every edit of a verb changes it), kept while the stamp holds: a verb retired in
    any process is never offered again; without one, cached like the decision state."""
    now = _time.monotonic()
    tenants = tenant_filter_ids()
    hit = _active_verbs_cache.get(tenants)
    if hit is not None and (hit[2] == stamp if stamp is not None else hit[0] > now):
        return hit[1]
    names = frozenset(Verb.objects.filter(is_active=True).values_list("name", flat=True))
    _active_verbs_cache[tenants] = (now + settings.RESOLVE_DECISION_CACHE_S, names, stamp)
    return names


def decision_labels(*, window: int, model: str) -> list[dict]:
    """The newest ``window`` labelled resolutions that carry features measured with embedding ``model`` (oldest
    first): after a change of model, the labels of the old one (cosines in another space) train no fit of the new.
    A record from before the model was recorded counts when the fit it was answered with is of ``model``."""
    fits_of_model = DecisionFit.objects.filter(embedding_model=model).values("version")
    rows = list(
        ResolutionRecord.objects.filter(label__isnull=False, features__isnull=False)
        .filter(Q(embedding_model=model) | Q(embedding_model="", fit_version__in=fits_of_model))
        .order_by("-labelled_at", "-id")
        .values(
            "features", "features_open", "label", "created_at", "user_id", "shadow_version", "shadow_outcome", "shadow_label"
        )[:window]
    )
    return rows[::-1]


def labels_since_newest_fit(*, at_most: int) -> tuple[int, int]:
    """(how many labels arrived since the newest fit from labels was made (all of them before the first), that
    fit's version or 0). The count stops at ``at_most`` (a label asks it, on every label), on the ``labelled_at``
    index."""
    newest = (
        DecisionFit.objects.filter(source=DecisionFit.Source.LABELS).order_by("-version").values("version", "created_at").first()
    )
    qs = ResolutionRecord.objects.filter(label__isnull=False, features__isnull=False)
    if newest is not None:
        qs = qs.filter(labelled_at__gt=newest["created_at"])
    return qs.order_by()[: max(at_most, 0)].count(), newest["version"] if newest else 0


def exact_answer_figures(*, window: int) -> dict:
    """The newest ``window`` labelled answers of trusted exact phrases (the fast path no decision fit gates): how
    many, and how many the user accepted or turned down (corrected, abandoned, another option clicked)."""
    labels = list(
        ResolutionRecord.objects.filter(label__isnull=False, rule=ResolutionRecord.Rule.EXACT)
        .order_by("-labelled_at", "-id")
        .values_list("label", flat=True)[:window]
    )
    right = sum(1 for label in labels if label)
    return {"n": len(labels), "right": right, "wrong": len(labels) - right}


def shadow_figures(version: int) -> dict:
    """Labels that arrived while fit ``version`` ran in shadow: how its answers would have fared."""
    rows = ResolutionRecord.objects.filter(shadow_version=version, label__isnull=False)
    n = rows.count()
    auto = rows.filter(shadow_outcome="resolved")
    right = auto.filter(shadow_label=True).count()
    wrong = auto.filter(shadow_label=False).count()
    return {"n": n, "right": right, "wrong": wrong, "asked": n - right - wrong}


def _anchor_querysets(model: str, user_id: str | None = None):
    """The anchors a head trains on: active catalogue phrases, and the global learned phrases plus (``user_id``)
    that user's own shared ones (not an agent's with private user data); embedded with ``model``, verbs active only.
    One definition for the rows and their count."""
    catalogue = VerbPhrase.objects.filter(verb__is_active=True, embedding_model=model, embedding__isnull=False)
    scope = Q(user_id__isnull=True) | Q(user_id=user_id, private_agent__isnull=True) if user_id else Q(user_id__isnull=True)
    learned = LearnedPhrase.objects.filter(
        scope, is_active=True, verb__is_active=True, embedding_model=model, embedding__isnull=False
    )
    return catalogue, learned


def decision_anchor_rows(*, model: str, user_id: str | None = None, learned: bool = True):
    """(vectors, verb names, is_learned, confidence, normalised texts) of the anchors a head trains on
    (``_anchor_querysets``; ``learned`` False: the catalogue only), the learned ones bounded
    (``_learned_bounded``)."""
    vectors, names, is_learned, confidence, texts = [], [], [], [], []
    catalogue, learned_rows = _anchor_querysets(model, user_id)
    rows = values_list_binary(catalogue.order_by("pk").values_list("verb__name", "embedding", "normalized"), vectors=(1,))
    for verb, emb, normalized in rows:
        vectors.append(emb)
        names.append(verb)
        is_learned.append(False)
        confidence.append(1.0)
        texts.append(normalized)
    if learned:
        _learned_rows_add(_learned_bounded(learned_rows), (vectors, names, is_learned, confidence, texts))
    return vectors, names, is_learned, confidence, texts


def per_verb_quota(counts: dict, bound: int) -> int | None:
    """The most rows each verb may keep so that all keep at most ``bound`` (``counts``: rows per verb), every verb
    as many as the bound leaves room for (a verb with fewer keeps all of its own, and the rest share what it
    left): None when all fit."""
    if sum(counts.values()) <= bound:
        return None
    left, verbs = bound, len(counts)
    for n in sorted(counts.values()):
        if n * verbs > left:  # this verb, and every larger one, gets an equal share of what is left
            return max(1, left // verbs)
        left -= n
        verbs -= 1
    return None  # unreachable: the counts sum above the bound


def _learned_bounded(learned):
    """``learned`` (shared learned phrases) kept to at most RESOLVE_HEAD_MAX_SHARED_PHRASES rows (each verb at least
    one): beyond it each verb keeps its most confident, then newest, phrases up to ``per_verb_quota``."""
    bound = settings.RESOLVE_HEAD_MAX_SHARED_PHRASES
    counts = dict(learned.order_by().values_list("verb_id").annotate(n=Count("pk")).values_list("verb_id", "n"))
    quota = per_verb_quota(counts, bound)
    if quota is None:
        return learned
    # ranked by their keys alone (the window's sort never carries the vectors), then read
    ranked = learned.order_by().annotate(
        rank=Window(RowNumber(), partition_by=[F("verb_id")], order_by=[F("confidence").desc(), F("pk").desc()])
    )
    return learned.filter(pk__in=Subquery(ranked.filter(rank__lte=quota).values("pk")))


def decision_user_anchor_rows(*, model: str, user_id: str):
    """The user's own anchors (``decision_anchor_rows``' shape): what a personal head trains on beside the shared
    ones (``decision_anchor_rows`` without a user), read once for every user."""
    rows = ([], [], [], [], [])
    _, learned = _anchor_querysets(model, user_id)
    _learned_rows_add(learned.filter(user_id=user_id), rows)
    return rows


def decision_users_anchor_pairs(*, model: str, user_ids: list[str]) -> dict[str, set[tuple[str, str]]]:
    """{user id: (normalised text, verb name) of the user's own anchors} (``decision_user_anchor_rows`` without the
    vectors), for several users in one query."""
    out: dict[str, set[tuple[str, str]]] = {u: set() for u in user_ids}
    if not user_ids:
        return out
    own = LearnedPhrase.objects.filter(
        user_id__in=user_ids,
        private_agent__isnull=True,  # as _anchor_querysets reads a user's own
        is_active=True,
        verb__is_active=True,
        embedding_model=model,
        embedding__isnull=False,
    )
    for user_id, text, verb in own.values_list("user_id", "normalized", "verb__name"):
        out[user_id].add((text, verb))
    return out


def _learned_rows_add(queryset, out) -> None:
    vectors, names, is_learned, confidence, texts = out
    rows = queryset.order_by("pk").values_list("verb__name", "embedding", "confidence", "normalized")
    for verb, emb, conf, normalized in values_list_binary(rows, vectors=(1,)):
        vectors.append(emb)
        names.append(verb)
        is_learned.append(True)
        confidence.append(float(conf))
        texts.append(normalized)


def decision_heads_newest(*, model: str, users: list[str | None]) -> dict:
    """{user id (None: the deployment): (head id, inputs digest, fit version, verbs it scores)} of the newest
    stored head of each scope in ``users`` among the fits of embedding ``model`` (not its weights: a head that
    is reused is copied in the database, ``services.decisions._heads_save``)."""
    scope = Q(user_id__in=[u for u in users if u is not None])
    if None in users:
        scope |= Q(user_id__isnull=True)
    rows = (
        DecisionHead.objects.filter(scope, fit__embedding_model=model)
        .order_by("user_id", "-fit__version")
        .distinct("user_id")
        .values_list("user_id", "pk", "inputs_digest", "fit__version", "anchors")
    )
    return {user_id: (pk, digest, version, frozenset(anchors)) for user_id, pk, digest, version, anchors in rows}


def decision_anchor_stamp(*, model: str) -> tuple[int, int]:
    """(how many, sum of their keys) of the anchors the catalogue prior would train on now: a prior fitted on other
    anchors is stale, also when as many changed places (a verb retired, another switched on)."""
    catalogue, learned = _anchor_querysets(model)
    a = catalogue.aggregate(n=Count("pk"), keys=Sum("pk"))
    b = learned.aggregate(n=Count("pk"), keys=Sum("pk"))
    return a["n"] + b["n"], int(a["keys"] or 0) + int(b["keys"] or 0)  # a bigint sum is numeric in PostgreSQL


def verb_name_words() -> dict[str, str]:
    """{verb name: the words its name vector is embedded from (``decision.verb_words``)} of the active verbs."""
    rows = Verb.objects.filter(is_active=True).values_list("name", "domain", "display_name")
    return {name: decision.verb_words(name, domain, display_name) for name, domain, display_name in rows}


def users_with_phrases(*, model: str, min_phrases: int) -> list[str]:
    """Users with at least ``min_phrases`` active shared learned phrases of their own (candidates for a personal head)."""
    return list(
        LearnedPhrase.objects.filter(user_id__isnull=False, private_agent__isnull=True, is_active=True, embedding_model=model)
        .values("user_id")
        .annotate(n=Count("id"))
        .filter(n__gte=min_phrases)
        .order_by("-n")
        .values_list("user_id", flat=True)
    )
