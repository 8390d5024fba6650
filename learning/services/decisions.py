"""The learned auto-resolve decision: record every resolution, label it from the user's answer, refit, run new
fits in shadow, promote, pin and roll back (docs/thresholds.md).

Flow: learning.api.ResolveApi -> resolution_store (disambiguations; one INSERT of resolution_row per resolve) -> a click / abandon
(disambiguations) or a confirmation / correction (corrections) -> resolution_label -> every
RESOLVE_REFIT_EVERY_LABELS labels (and daily, beat) learning.decision_refit -> decision_refit: promote the
shadow fit if it earned it, fit the newest labels and the classifier heads into a new version that runs in shadow.
"""

import contextlib
import hashlib
import logging
import math
import uuid
from datetime import timedelta

import numpy as np
from django.conf import settings
from django.core.cache import cache
from django.db import DatabaseError, connection, transaction
from django.db.models import Q
from django.utils import timezone
from tqdm import tqdm

from agents.models import Agent
from common import tasks as common_tasks
from common.api import ApplicationError, Conflict, NotFound
from common.db import rows_purge, tenant_lock
from common.tasks import task_headers, task_send
from common.text import normalize_phrase
from common.validation import MAX_DAYS
from embeddings.embedders import EmbeddingError, current_model_name, get_embedder
from learning import decision, selectors
from learning.models import DecisionFit, DecisionFitEvent, DecisionHead, ResolutionRecord
from learning.resolution import profile
from learning.scoring import anchor_trust
from tenants.context import private_agent_id, tenant_filter_ids

logger = logging.getLogger(__name__)

LOCK_NAMESPACE_FIT = 61003
PRIOR_UNFIT_MEMO_S = 24 * 3600


# --- Recording and labelling ---


def _json_safe(value):
    """``value`` (dicts, lists, numbers, strings) with every non-finite number as None, as JSON can store it."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(value) if np.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def resolution_row(*, resolution, agent=None, domain: str | None = None) -> ResolutionRecord:
    """The record of one resolution with its explanation, not yet stored."""
    t, e = resolution.trace or {}, resolution.explanation or {}
    return ResolutionRecord(
        request_id=uuid.UUID(resolution.request_id),
        agent=agent,
        user_id=resolution.user_id,
        text=resolution.text[:2000],
        normalized=normalize_phrase(resolution.text)[:2000],
        domain=domain or "",
        outcome=resolution.outcome,
        verb=resolution.verb or "",
        top_verb=t.get("top_verb") or resolution.verb or (resolution.options[0].verb if resolution.options else ""),
        top_verbs=t.get("top_verbs") or [c.verb for c in resolution.candidates[: settings.RESOLVE_MAX_OPTIONS]],
        rule=e.get("rule", ResolutionRecord.Rule.FIXED),
        features=_json_safe(t.get("features")),
        features_open=_json_safe(t.get("features_open")),
        embedding_model=(resolution.model or "")[:100],
        probability=_json_safe(t.get("probability")),
        cut=_json_safe(t.get("cut")),
        fit_version=t.get("fit_version"),
        margin=_json_safe(e.get("margin")),
        blocks=e.get("blocks", []),
        penalties=e.get("penalties", {}),
        degraded_reason=(resolution.degraded_reason or "")[:200],
        explanation=_json_safe(e),
        shadow_version=t.get("shadow_version"),
        shadow_outcome=t.get("shadow_outcome", ""),
        shadow_verb=t.get("shadow_verb", ""),
    )


def _labellable(*, by_request: bool = False):
    """The resolution records this caller may label: an agent with private user data labels only what it answered,
    and the answers of such an agent are labelled by no other agent (``by_request``: a click or abandon, whose
    request the caller's own disambiguation request already names)."""
    qs = ResolutionRecord.objects.all()
    if private_agent_id() is not None:
        return qs.filter(agent_id=private_agent_id())
    if by_request:
        return qs
    return qs.exclude(agent_id__in=Agent.objects.filter(private_user_data=True).values("pk"))


def resolution_answered_check(*, request_id, user_id: str | None, text: str) -> None:
    """Before a confirmation or correction writes anything: the resolve answer it names by ``request_id`` exists
    for this caller and was given to ``user_id`` for ``text``; else 404 on ``request_id`` (the same answer for an
    unknown id and for another user's or text's, so nothing is learned about answers the caller cannot label)."""
    if request_id is None:
        return
    try:
        key = uuid.UUID(str(request_id))
    except ValueError:
        raise NotFound("No such resolve answer.", field="request_id") from None
    if not _labellable().filter(request_id=key, user_id=user_id, normalized=normalize_phrase(text)[:2000]).exists():
        raise NotFound(
            "No resolve answer with this request_id was given to this user for this text (or it was purged).",
            field="request_id",
        )


def resolution_label(
    *, source: str, gold_verb: str = "", request_id=None, user_id: str | None = None, text: str | None = None
) -> ResolutionRecord | None:
    """Label the resolution a user answered: by ``request_id`` (a click, an abandon; a confirmation or correction
    that names the answer), else the newest record of (``user_id``, normalised ``text``) answered within
    ``RESOLUTION_LABEL_MAX_AGE_S`` (a confirmation or correction that names none: an older answer is not the one
    the user just accepted or corrected, and stays unlabelled). The label is "the top verb was right": a click on
    the top verb, a confirmation of it; a correction, an abandon, a click on another verb are wrong. A correction
    after an abandon only adds the right verb. Answers the record (None when there is none)."""
    with transaction.atomic(savepoint=False):  # the caller's transaction when there is one, else its own
        qs = _labellable(by_request=request_id is not None and source in ("click", "abandon")).select_for_update()
        if request_id is not None:
            row = qs.filter(request_id=request_id).first()
        else:
            since = timezone.now() - timedelta(seconds=settings.RESOLUTION_LABEL_MAX_AGE_S)
            qs = qs.filter(user_id=user_id, normalized=normalize_phrase(text or "")[:2000], created_at__gte=since)
            row = qs.order_by("-created_at", "-id").first()
        if row is None:
            return None
        if row.label is not None and not (row.label_source == ResolutionRecord.LabelSource.ABANDON and gold_verb):
            return row  # answered already: the first answer is the label
        if source == ResolutionRecord.LabelSource.ABANDON:
            row.label = False
        elif row.label_source != ResolutionRecord.LabelSource.ABANDON:
            row.label = bool(gold_verb) and gold_verb == row.top_verb
        if row.shadow_verb:
            row.shadow_label = bool(gold_verb) and gold_verb == row.shadow_verb if source != "abandon" else False
        row.gold_verb = gold_verb or row.gold_verb
        row.label_source = row.label_source or source
        row.labelled_at = timezone.now()
        row.save(update_fields=["label", "shadow_label", "gold_verb", "label_source", "labelled_at"])
    _refit_if_due()
    return row


# A label-triggered refit sent (per tenant and newest fit) is not sent again for this long, unless it ends sooner or
# a newer fit exists: every label past the threshold would send one more, each waiting minutes on the fit lock.
REFIT_SENT_MEMO_S = 900


def _refit_due() -> tuple[bool, str]:
    """(whether RESOLVE_REFIT_EVERY_LABELS labels arrived since the newest fit, the cache key that remembers a refit
    sent for them). The key names that fit: once a refit made a newer one, in whatever process, the labels after it
    send the next refit, though the marker of the last one outlives it in a cache of this process alone."""
    every = settings.RESOLVE_REFIT_EVERY_LABELS
    count, version = selectors.labels_since_newest_fit(at_most=every)
    tenants = tenant_filter_ids()
    return count >= every, f"learning:refit-sent:{'-'.join(map(str, tenants)) if tenants else 'all'}:v{version}"


def _refit_if_due() -> None:
    """Send a refit (of this tenant's decision) once RESOLVE_REFIT_EVERY_LABELS labels arrived since its newest fit,
    once: the labels after it do not send it again while it is queued or running (``REFIT_SENT_MEMO_S``, in the
    cache), and the refit itself checks it is still due. Never inline: a refit trains heads for minutes, too long for
    the labelling request. Sent, and remembered, once the label commits: a label rolled back, or a send the broker
    refused, leaves nothing remembered, and the next label sends it (the count still says it is due)."""
    due, sent_key = _refit_due()
    if not due:
        return
    headers = task_headers()  # this tenant's: the scope has ended when the commit sends

    def send():
        try:
            first = cache.add(sent_key, 1, REFIT_SENT_MEMO_S)
        except Exception:  # the cache is an optimisation: without it every label past the threshold sends
            logger.warning("cache unavailable: a refit may be sent more than once", exc_info=True)
            first = True
        if first and not task_send("learning.decision_refit", headers=headers, fallback_inline=False, due=True):
            try:
                cache.delete(sent_key)
            except Exception:
                logger.warning("cache unavailable: the refit not sent is remembered until it expires", exc_info=True)

    transaction.on_commit(send, robust=True)


def resolution_records_purge(*, days: int | None = None, dry_run: bool = False) -> int:
    """Delete resolution records older than RESOLUTION_RETENTION_DAYS (at least 1: 0 would delete the labels the
    decision is fitted on as they arrive); answers how many (``dry_run``: how many it would, nothing deleted)."""
    days = settings.RESOLUTION_RETENTION_DAYS if days is None else days
    if not 1 <= days <= MAX_DAYS:
        raise ApplicationError(f"The retention of resolution records must be 1 to {MAX_DAYS} days (got {days}).", field="days")
    old = ResolutionRecord.objects.filter(created_at__lt=timezone.now() - timezone.timedelta(days=days))
    count = rows_purge(old, dry_run=dry_run)  # one resolve writes one: a backlog of millions, in short transactions
    if count and not dry_run:
        logger.info("purged %d resolution record(s) older than %d day(s)", count, days)
    return count


# --- Fitting ---


@contextlib.contextmanager
def decision_fits_serialised():
    """One fit (prior or from labels) at a time per tenant: a PostgreSQL advisory lock that a second fit waits
    for. A fit that started on older phrases or labels can then never commit after a newer one and take the
    higher version; the one that waited fits what is there when it gets the lock. Inside a transaction the lock
    is the transaction's: it ends with its commit or rollback, so the next fit reads what this one committed and
    an error cannot leave it held. Outside one (the fit tasks and ``fit_decision`` run in ``tenant_session``,
    each fit committing its own short transactions) it is the session's, released at the end. A fit with every
    tenant in scope excludes every tenant's fit (key 0, taken shared by each tenant's). Re-entrant (a refit that fits the prior takes it once more)."""
    tenants = tenant_filter_ids()
    keys = [(0, True), (tenants[0], False)] if tenants else [(0, False)]  # (key, shared)
    if connection.in_atomic_block:
        with connection.cursor() as cursor:
            for key, shared in keys:
                lock = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
                cursor.execute(f"SELECT {lock}(%s, %s)", [LOCK_NAMESPACE_FIT, key])
        yield
        return
    held = []
    try:
        with connection.cursor() as cursor:
            for key, shared in keys:
                cursor.execute(f"SELECT pg_advisory_lock{'_shared' if shared else ''}(%s, %s)", [LOCK_NAMESPACE_FIT, key])
                held.append((key, shared))
        yield
    finally:
        try:
            if held and connection.connection is not None:
                with connection.cursor() as cursor:
                    for key, shared in reversed(held):
                        unlock = "pg_advisory_unlock_shared" if shared else "pg_advisory_unlock"
                        cursor.execute(f"SELECT {unlock}(%s, %s)", [LOCK_NAMESPACE_FIT, key])
        except DatabaseError:  # a session lock ends with its connection: close it rather than keep it held
            logger.warning("decision fit lock not released; closing the connection", exc_info=True)
            connection.close()


def _next_version() -> int:
    """The next version of the tenant's fits. Call inside the transaction that creates the fit: a lock per tenant
    (held to its end) makes a concurrent fit wait and then count this one."""
    tenants = tenant_filter_ids()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext('learning.decisionfit'), %s::int)", [tenants[0] if tenants else 0])
    last = DecisionFit.objects.order_by("-version").values_list("version", flat=True).first()
    return (last or 0) + 1


def _rows_join(*parts):
    """Anchor rows (``selectors.decision_anchor_rows``' shape) one after another."""
    return tuple([x for part in parts for x in part[i]] for i in range(5))


NO_NAMES = "names=none"


def _names_key(model: str, words: dict[str, str]) -> str:
    """A digest of the verbs' name words under ``model``: part of every head's inputs (a verb renamed trains its
    heads again) and of the prior's params (a prior on other names is stale)."""
    h = hashlib.sha256(model.encode())
    for v in sorted(words):
        h.update(f"{v}\x1f{words[v]}\x1e".encode())
    return f"names={h.hexdigest()}"


def _verb_names(model: str) -> tuple[dict[str, np.ndarray], str]:
    """The vectors of the active verbs' names (``selectors.verb_name_words``) by ``model``, and ``_names_key``.
    ({}, NO_NAMES) when the embedder configured here is not ``model``'s or cannot embed now: the prior and the
    fits from labels then leave the feature out, the heads carry no names, and the prior is stale until names can
    be embedded. Embedded in the process's cache: a refit embeds only new names."""
    words = selectors.verb_name_words()
    if not words:
        return {}, NO_NAMES
    verbs = sorted(words)
    try:
        embedder = get_embedder()
        if embedder.model_name != model:
            return {}, NO_NAMES
        vectors = embedder.embed_batch([normalize_phrase(words[v]) or v for v in verbs])
    except EmbeddingError as exc:
        logger.warning("verb names not embedded (%s): the fit goes without the name feature", exc)
        return {}, NO_NAMES
    return {v: np.asarray(x, dtype=np.float32) for v, x in zip(verbs, vectors, strict=True)}, _names_key(model, words)


def _names_matrix(names: dict[str, np.ndarray], verbs: list[str]) -> tuple[list[str], np.ndarray] | None:
    """(verbs, their names' vectors): ``verbs`` first (NaN for one without a name), then the other verbs with a
    name (the catalogue's verbs nobody taught yet); None without names."""
    if not names:
        return None
    d = len(next(iter(names.values())))
    missing = np.full(d, np.nan, dtype=np.float32)
    order = list(verbs) + sorted(set(names) - set(verbs))
    return order, np.vstack([names.get(v, missing) for v in order])


def _train_head(
    rows,
    user_id: str | None,
    warm_version: int | None,
    words: bool,
    verb_names: dict[str, np.ndarray],
    start: tuple[dict, list[str]] | None = None,
):
    """(weights, phrases per verb, the head) of a head over anchor ``rows``, stored with the vectors of its verbs'
    names (``verb_names``); None without two verbs. Training starts from the same scope's head of
    ``warm_version``, else from ``start`` ((head, its verbs): a personal head starts from the deployment's head
    of the same refit, which its shared anchors already trained), else from zeros."""
    vectors, names, _, conf, texts = rows
    if not vectors:
        return None
    verbs = sorted(set(names))
    vid = {v: i for i, v in enumerate(verbs)}
    X, y = np.vstack(vectors), np.array([vid[n] for n in names])
    width = X.shape[1] + (decision.LEX_FEATURES if words else 0)
    trust = _trust(conf)
    warm = None
    if warm_version is not None:
        try:
            got = selectors.decision_head(warm_version, user_id)
            if got is not None and got[3] == user_id:
                warm = decision.head_warm_start(got[0], got[1], verbs, width)
        except ValueError:
            warm = None
    if warm is None and start is not None:
        warm = decision.head_warm_start(*start, verbs, width)
    head = decision.head_train(X, y, len(verbs), sample_weight=trust, warm=warm, texts=texts if words else None)
    if head is None:
        return None
    counts = np.bincount(y, minlength=len(verbs))
    weights = decision.head_dumps(head, verbs, _names_matrix(verb_names, verbs))
    return weights, {v: int(counts[i]) for i, v in enumerate(verbs)}, (head, verbs)


def _trust(confidence) -> np.ndarray:
    """Each anchor's weight in a head (``anchor_trust`` of its confidence)."""
    return np.array([anchor_trust(c) for c in confidence], dtype=np.float64)


def _digest(rows, words: bool, prefix: str = "") -> str:
    vectors, names, _, conf, texts = rows
    X = np.vstack(vectors) if vectors else np.zeros((0, 0), dtype=np.float32)
    return decision.head_inputs_digest(X, names, _trust(conf), texts if words else None, prefix=prefix)


def _heads_train(
    model: str,
    *,
    users: bool,
    warm_version: int | None,
    words: bool = True,
    names: tuple[dict, str] | None = None,
    progress: bool = False,
) -> tuple[list, list]:
    """The deployment's head (learning words or not: ``words``, what the catalogue's folds chose) and, with
    ``users``, one per user with enough phrases of their own (always learning words: users' taught phrases),
    trained on the shared anchors (catalogue and global phrases, read once) and that user's phrases only.
    A scope whose newest stored head was trained on the same inputs (``inputs_digest``) reuses it. At most
    RESOLVE_USER_HEADS_PER_REFIT personal heads are trained, users without a head first, then those trained
    longest ago; the others keep their newest head while it covers the same verbs (else the deployment's
    serves them) until a later refit reaches them. Trained before the transaction that stores them (a head
    over many phrases takes a while). ``names``: ``_verb_names``' answer (None: read here), stored with every head
    trained and part of every head's inputs digest. Answers [(user id or None, weights, phrases per verb, inputs
    digest)] of the heads trained, and [id of a stored head] of the heads that serve again (copied by
    ``_heads_save``)."""
    shared = selectors.decision_anchor_rows(model=model)
    name_vectors, names_key = _verb_names(model) if names is None else names
    if warm_version is not None:
        selectors.decision_state_forget()  # a head warm-starts only from a user's head that was not erased since
    scopes = [None]
    if users:
        scopes += selectors.users_with_phrases(model=model, min_phrases=settings.RESOLVE_USER_HEAD_MIN_PHRASES)
    newest = selectors.decision_heads_newest(model=model, users=scopes)
    shared_digests = {w: _digest(shared, w, prefix=names_key) for w in {words, True} if users or w == words}
    heads, reused, due = [], [], []
    own_pairs: dict[str, set] = {}  # each user's own (text, verb) anchors when read: checked again before the save
    for user_id in scopes:
        own = None
        if user_id is None:
            if not shared[0]:
                continue
            digest = shared_digests[words]
        else:  # a user's head trains on the shared anchors and that user's phrases only
            own = selectors.decision_user_anchor_rows(model=model, user_id=user_id)
            digest = _digest(own, True, prefix=f"{shared_digests[True]}|{user_id}")
            own_pairs[user_id] = set(zip(own[4], own[1], strict=True))
        stored = newest.get(user_id)
        if stored is not None and stored[1] == digest:
            reused.append(stored[0])
        else:
            due.append((user_id, own, digest, stored))
    due.sort(key=lambda d: (d[0] is not None, d[3] is not None, d[3][2] if d[3] else 0))
    trained = kept = 0
    # where personal heads start: the deployment's head, trained first (or stored, when it serves again)
    start = _DeploymentStart(newest.get(None) if None in scopes and shared[0] else None)
    for user_id, own, digest, stored in tqdm(due, desc="classifier heads", unit="head", disable=not progress):
        rows = shared if own is None else _rows_join(shared, own)
        if user_id is not None and trained >= settings.RESOLVE_USER_HEADS_PER_REFIT:
            if stored is not None and stored[3] == set(rows[1]):  # it still scores every verb in play
                reused.append(stored[0])
                kept += 1
            continue
        got = _train_head(
            rows,
            user_id,
            warm_version,
            words if user_id is None else True,
            name_vectors,
            None if user_id is None else start.head(),
        )
        if got is not None:
            heads.append((user_id, *got[:2], digest))
            trained += user_id is not None
            if user_id is None:
                start.trained(got[2])
    left = sum(1 for d in due if d[0] is not None) - trained - kept
    if kept or left:
        logger.info(
            "personal heads: %d trained, %d kept from an earlier fit, %d left to the deployment's head "
            "(RESOLVE_USER_HEADS_PER_REFIT %d)",
            trained,
            kept,
            left,
            settings.RESOLVE_USER_HEADS_PER_REFIT,
        )
    return heads, reused, own_pairs


class _DeploymentStart:
    """Where a refit's personal heads start: the deployment's head of the same refit once trained, else the stored
    one that serves again (``stored``: ``decision_heads_newest``' entry of the deployment, or None), read from the
    database at most once. ``head()`` is None when there is none or it cannot be read: a personal head then starts
    from zeros."""

    def __init__(self, stored):
        self._stored = stored
        self._head: tuple[dict, list[str]] | None = None

    def trained(self, head: tuple[dict, list[str]]) -> None:
        self._head, self._stored = head, None

    def head(self) -> tuple[dict, list[str]] | None:
        if self._stored is not None:
            stored, self._stored = self._stored, None
            try:
                got = selectors.decision_head(stored[2], None)
            except ValueError:
                got = None
            if got is not None and got[3] is None:
                self._head = (got[0], got[1])
        return self._head


def heads_lock() -> None:
    """Inside a transaction: the tenant's lock on storing classifier heads, until it ends. A refit's save takes it
    before it stores heads, a user's erasure before it deletes theirs: a head trained on the phrases of a user
    erased meanwhile is never stored after the erasure (which would then not have deleted it)."""
    tenant_lock("learning:heads:")


def _heads_save(fit: DecisionFit, heads: tuple[list, list, dict], model: str) -> int:
    """Store ``_heads_train``'s answer with ``fit``: the heads trained, and copies of the stored heads that serve
    again (copied row to row in the database: their weights never pass through this process). Under
    ``heads_lock`` (the caller's transaction holds it): a personal head trained on a phrase of its user that is no
    longer there (the user was erased, or a phrase re-pointed or removed, while it trained) is not stored; a later
    refit trains it again (phrases the user added meanwhile do not stop it). A copy is of a head still stored: an
    erased user's are gone."""
    trained, reused, own_pairs = heads
    now = selectors.decision_users_anchor_pairs(model=model, user_ids=[h[0] for h in trained if h[0] is not None])
    gone = {u for u, pairs in now.items() if not own_pairs.get(u, set()) <= pairs}
    if gone:
        logger.info("%d personal head(s) not stored: phrases of their user they trained on are gone", len(gone))
    trained = [h for h in trained if h[0] not in gone]
    DecisionHead.objects.bulk_create(
        [DecisionHead(fit=fit, user_id=u, weights=w, anchors=a, inputs_digest=d) for u, w, a, d in trained]
    )
    if reused:
        table = DecisionHead._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} (tenant_id, fit_id, user_id, weights, anchors, inputs_digest, created_at) "
                f"SELECT tenant_id, %s, user_id, weights, anchors, inputs_digest, now() FROM {table} WHERE id = ANY(%s)",
                [fit.pk, reused],
            )
    return len(trained) + len(reused)


def _held_out_better(a: dict, b: dict) -> bool:
    """Does fit ``a`` resolve more held-out labels right than ``b`` (a fit without a cut resolves none)?"""

    def right(p):
        return p["held_out"]["right"] if p.get("cut") is not None else -1.0

    return right(a) > right(b)


def decision_prior_fit(*, progress: bool = False, changed_at: float | None = None) -> DecisionFit | None:
    """The catalogue prior: folds over the catalogue's own phrases (and global learned ones) (learning.decision.catalogue_priors). Live at once
    when no fit is live (or when the live one is a prior); None when the catalogue is too small to fit one, or
    when ``changed_at`` (the change that sent it, ``decision_prior_fit_send``) was read by a newer prior already. One
    fit at a time per tenant (``decision_fits_serialised``): a fit running now ends first, and may be the one that
    covers the change. ``progress``: bars on the terminal (a command)."""
    with decision_fits_serialised():
        if changed_at is not None and decision_prior_fit_covered(changed_at=changed_at):
            logger.info("catalogue prior not fitted again: a newer fit read the change already")
            return None
        return _prior_fit(progress=progress)


def _db_clock() -> float:
    """The database's clock (seconds since the epoch): one clock for the web processes and the workers."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT extract(epoch FROM clock_timestamp())")
        return float(cursor.fetchone()[0])


def decision_prior_fit_send() -> None:
    """Once the current transaction commits, send the catalogue prior's fit, stamped with the database's clock at
    that moment (``changed_at``). A fit that read the phrases later covers this change, and the task then does
    nothing (``decision_prior_fit_covered``): imports or catalogue edits in a row each sent a fit, and they ran one
    after another for minutes each on the same phrases, with the queue's other work (import jobs) waiting behind
    them. A broker outage: the daily refit catches up (never inline: too long for a request)."""
    headers = task_headers()

    def send():
        # through the module, as task_send_on_commit sends: what holds sends back (a benchmark) holds this one too
        common_tasks.task_send("learning.decision_prior_fit", headers=headers, fallback_inline=False, changed_at=_db_clock())

    transaction.on_commit(send, robust=True)


def decision_prior_fit_covered(*, changed_at: float) -> bool:
    """Did the newest catalogue prior of the current model read the phrases after ``changed_at`` (database clock)?"""
    newest = (
        DecisionFit.objects.filter(source=DecisionFit.Source.PRIOR, embedding_model=current_model_name())
        .order_by("-version")
        .values_list("params", flat=True)
        .first()
    )
    read_at = newest.get("read_at") if isinstance(newest, dict) else None
    return isinstance(read_at, int | float) and read_at >= changed_at


def _prior_fit(*, progress: bool = False) -> DecisionFit | None:
    model = current_model_name()
    read_at = _db_clock()  # before any read: every change committed before it is in what this fit reads
    # Phrases still carrying another model's vectors (a change of model, re-embedding): this fit reads only those
    # embedded so far, and decision_prior_refresh fits again once none is left. Asked before the read (a backfill
    # that ends while this fits must not make a fit on part of the phrases look like one on all of them).
    reembedding = selectors.vectors_of_another_model_left(model, fresh=True)
    stamp = selectors.decision_anchor_stamp(model=model)  # read first: a change meanwhile makes the fit stale
    # the deployment's own phrases: its catalogue and its global learned phrases (imports, reviewed candidates)
    vectors, names, is_learned, confidence, texts = selectors.decision_anchor_rows(model=model)
    if len(vectors) < settings.RESOLVE_PRIOR_MIN_EXAMPLES:
        _unfit_remember(model, len(vectors))
        return None
    verbs = sorted(set(names))
    vid = {v: i for i, v in enumerate(verbs)}
    ids = np.array([vid[v] for v in names])
    matrix = np.vstack(vectors)
    # The retrieval floors of this deployment, from its own phrases; the prior is fitted under them and the
    # resolver applies them while this is the newest prior.
    floors = decision.floors(matrix, ids, settings.RESOLVE_FLOOR_QUANTILES)
    p = profile(model, floors=floors)
    name_vectors = _verb_names(model)
    # Whether the head learns words too is decided by the catalogue's own folds: with a few phrases a verb the
    # n-grams can cost more than they bring (a fit from labels, on the phrases users taught, always uses them).
    # The two heads share the folds and the anchor scores (one pass over the phrases).
    fits = decision.catalogue_priors(
        matrix,
        ids,
        len(verbs),
        p,
        texts_options=[None, texts],
        max_wrong_rate=settings.RESOLVE_MAX_WRONG_RATE,
        min_labels=settings.RESOLVE_PRIOR_MIN_EXAMPLES,
        learned=np.array(is_learned, dtype=bool),
        trust=_trust(confidence),
        max_open_rate=settings.RESOLVE_MAX_OPEN_RATE,
        max_queries=settings.RESOLVE_PRIOR_MAX_QUERIES,
        max_train=settings.RESOLVE_PRIOR_MAX_TRAIN,
        names=None if not name_vectors[0] else _names_matrix(name_vectors[0], verbs)[1],
        progress=progress,
    )
    params, n = None, 0
    for words, (got, count) in zip((False, True), fits, strict=True):
        if got is not None and (params is None or _held_out_better(got, params)):
            params = {
                **got,
                "head_words": words,
                "floors": floors,
                "anchors": len(vectors),
                "anchor_keys": stamp[1],
                "reembedding": reembedding,
                "read_at": read_at,
                "names_key": name_vectors[1],
            }
            n = count
    if params is None:
        _unfit_remember(model, len(vectors))
        return None
    heads = _heads_train(model, users=False, warm_version=None, words=params["head_words"], names=name_vectors)
    with transaction.atomic():
        fit = DecisionFit.objects.create(
            version=_next_version(),
            source=DecisionFit.Source.PRIOR,
            status=DecisionFit.Status.CANDIDATE,
            embedding_model=model,
            params=params,
            n_labels=n,
            held_out=params["held_out"],
            note=f"catalogue prior: {n} catalogue phrases, {len(verbs)} verbs, "
            + ("head over embeddings and words" if params["head_words"] else "head over embeddings")
            + "; floors "
            + (", ".join(f"{k} {v:.2f}" for k, v in floors.items()) or "of the model (too few phrases to measure)"),
        )
        heads_lock()
        _heads_recorded(fit, _heads_save(fit, heads, model))
        live = _live_fit_locked()
        if live is None or (live.source == DecisionFit.Source.PRIOR and not live.pinned):
            _switch(fit, action="prior", reason="catalogue prior (no fit from labels is live)")
        elif live.embedding_model != model:  # even pinned: its cut and head were measured in another vector space
            _switch(
                fit,
                action="prior",
                reason=f"catalogue prior: the live v{live.version} is for embedding model {live.embedding_model}",
                over_pin=True,
            )
        else:
            fit.status = DecisionFit.Status.RETIRED
            fit.save(update_fields=["status"])
        transaction.on_commit(selectors.decision_cache_clear)  # here at once; other processes within RESOLVE_DECISION_CACHE_S
    _unfit_remember(model, None)  # fitted: nothing to skip
    logger.info("decision prior v%s: %s; floors %s", fit.version, params["held_out"], floors)
    return fit


def _heads_recorded(fit: DecisionFit, heads: int) -> None:
    """The fit's params say whether it was saved with a deployment head (``heads``: 1 or 0), so a resolver that
    finds none knows one is missing; users' own heads are optional (a user without one decides with the
    deployment's)."""
    deployment = DecisionHead.objects.filter(fit=fit, user_id__isnull=True).exists() if heads else False
    fit.params = {**fit.params, "heads": int(deployment)}
    fit.save(update_fields=["params"])


def _switch(
    fit: DecisionFit, *, action: str, reason: str, by=None, pin: bool | None = None, over_pin: bool = False
) -> DecisionFit:
    """Make ``fit`` the live one (inside a transaction); the previous live fit is retired; recorded. An automatic
    switch (``pin`` None) never retires a pinned fit (409), unless ``over_pin`` (a fit of another embedding model)."""
    previous = _live_fit_locked(tenant_id=fit.tenant_id, exclude=fit.pk)
    if previous is not None:
        if previous.pinned and pin is None and not over_pin:
            raise Conflict(f"v{previous.version} is pinned; automatic promotion waits until it is unpinned.", field="fit")
        previous.status, previous.pinned = DecisionFit.Status.RETIRED, False
        previous.save(update_fields=["status", "pinned"])
    fit.status = DecisionFit.Status.LIVE
    fit.promoted_at = timezone.now()
    fit.promoted_by = by if getattr(by, "pk", None) else None
    if pin is not None:
        fit.pinned = pin
    fit.save(update_fields=["status", "promoted_at", "promoted_by", "pinned"])
    DecisionFitEvent.objects.create(
        fit=fit, action=action, previous_version=previous.version if previous else None, reason=reason, by=fit.promoted_by
    )
    transaction.on_commit(selectors.decision_cache_clear)
    return fit


def shadow_wrong_lower_bound(*, wrong: int, n: int) -> float:
    """The one-sided 90% lower bound on a wrong rate seen as ``wrong`` of ``n`` (Clopper-Pearson, exact: also
    on a handful of labels, where 2 wrong of 2 bounds it at 0.32)."""
    if wrong <= 0 or n <= 0:
        return 0.0
    from scipy.stats import beta  # here: SciPy's import is slow and most callers never ask

    return float(beta.ppf(0.10, wrong, n - wrong + 1))


def _exact_answers_judged() -> dict:
    """The trusted exact phrases' answers among the newest labels, judged against the wrong-answer target. No fit
    gates them (a user's correction re-points that user's phrase, or gives the user one that outranks a global
    phrase, so a wrong answer does not repeat for that user), so their wrong rate is watched here: logged when the
    labels show it above the target (the one-sided 90% lower bound on it, as for a shadow fit) and shown with each
    fit in the admin."""
    figures = selectors.exact_answer_figures(window=settings.RESOLVE_FIT_WINDOW_LABELS)
    bound = shadow_wrong_lower_bound(wrong=figures["wrong"], n=figures["n"])
    figures["above_target"] = bound > settings.RESOLVE_MAX_WRONG_RATE
    if figures["above_target"]:
        logger.warning(
            "trusted exact phrases answered wrong %d of %d labelled times (at least %.1f%% at 90%%, target %.1f%%): "
            "raise RESOLVE_TRUSTED_CONFIDENCE, or review the users' phrases that were corrected",
            figures["wrong"],
            figures["n"],
            100 * bound,
            100 * settings.RESOLVE_MAX_WRONG_RATE,
        )
    return figures


def promotion_verdict(*, fit: DecisionFit) -> tuple[bool, str]:
    """May this shadow fit go live? Never on fewer than RESOLVE_PROMOTE_MIN_LABELS labels, never when its
    held-out wrong rate is above RESOLVE_MAX_WRONG_RATE or it would never auto-resolve, and not when the labels
    that arrived while it ran in shadow show it worse than the target (lower 90% bound above it), nor before any
    label arrived while it ran in shadow (``shadow_wrong_lower_bound``)."""
    target = settings.RESOLVE_MAX_WRONG_RATE
    if fit.params is None or fit.params.get("cut") is None:
        return False, "the fit found no cut within the target"
    if fit.n_labels < settings.RESOLVE_PROMOTE_MIN_LABELS:
        return False, f"{fit.n_labels} labels; at least {settings.RESOLVE_PROMOTE_MIN_LABELS} are needed"
    if fit.held_out.get("wrong", 1.0) > target:
        return False, f"held-out wrong {fit.held_out.get('wrong')} above the target {target}"
    s = fit.shadow_figures or {}
    if not s.get("n"):  # a refit right after another (a duplicate task, the beat): no trial at all
        return False, "no label has judged it in shadow yet"
    w, n = s["wrong"], s["n"]
    if shadow_wrong_lower_bound(wrong=w, n=n) > target:
        return False, f"in shadow: {w} wrong of {n} labels, above the target"
    return True, "held-out wrong within the target"


def _unfit_key(model: str) -> str:
    tenants = tenant_filter_ids()
    return f"learning:prior-unfit:{'-'.join(map(str, tenants)) if tenants else 'all'}:{model}"


def _unfit_remember(model: str, anchors: int | None) -> None:
    """Remember for a day that no prior could be fitted on this many phrases (too few, or a catalogue whose folds
    are all wrong, such as one phrase a verb), so the refit every RESOLVE_REFIT_EVERY_LABELS labels does not
    attempt the same fit again until the phrases change (None: forget it). In the Django cache: per process
    without CACHE_URL, so each worker process tries once."""
    try:
        if anchors is None:
            cache.delete(_unfit_key(model))
        else:
            cache.set(_unfit_key(model), anchors, PRIOR_UNFIT_MEMO_S)
    except Exception:  # the cache is an optimisation: without it the refit only tries again
        logger.warning("cache unavailable: the failed prior fit is not remembered", exc_info=True)


def _unfit_at(model: str) -> int | None:
    try:
        return cache.get(_unfit_key(model))
    except Exception:
        logger.warning("cache unavailable: a failed prior fit may be attempted again", exc_info=True)
        return None


def _prior_stale() -> bool:
    """No catalogue prior for the current model, one from before floors were measured, or one fitted on other
    phrases than the deployment has now (a load or import whose refit was deferred, a verb turned off or on,
    phrases embedded later, reviewed phrases; compared by their number and the sum of their keys) or on other verb
    names (a verb added or renamed whose refit was lost, or names the embedder could not embed then): the refit
    makes a new one; also one from before fits recorded their rows' situations (``decision.SITUATIONS``: without
    them no fit from labels gives way to it); not when a fit on the same number of phrases failed within the last
    day (``_unfit_remember``)."""
    model = current_model_name()
    count, keys = selectors.decision_anchor_stamp(model=model)
    newest = DecisionFit.objects.filter(source=DecisionFit.Source.PRIOR, embedding_model=model).order_by("-version").first()
    if newest is None or not isinstance(newest.params, dict) or "floors" not in newest.params:
        stale = True
    elif "situations" not in newest.params:
        stale = True
    else:  # a prior from before the keys were recorded is compared by number only
        stale = (
            newest.params.get("anchors") != count
            or newest.params.get("anchor_keys", keys) != keys
            or _names_stale(model, newest.params.get("names_key"))
        )
    return stale and _unfit_at(model) != count


def _names_stale(model: str, fitted: str | None) -> bool:
    """Was the prior fitted on other verb names than the catalogue's now? One fitted without names (the embedder
    could not embed them) is stale only once they can be embedded: an embedder that stays down does not refit the
    prior at every refit."""
    if fitted == _names_key(model, selectors.verb_name_words()):
        return False
    return fitted != NO_NAMES or bool(_verb_names(model)[0])


def decision_prior_refresh() -> DecisionFit | None:
    """The catalogue prior again once a change of embedding model has been re-embedded: when the current model has
    no prior, or its newest was fitted while phrases still carried the old model's vectors (on part of them), and
    none is left now (periodic, every few minutes: the daily refit would leave the partial prior in force for up to
    a day). Also when the live fit is of another model while the current one has a prior (a change of model rolled
    back: the prior of before is current again, but the other model's fit stays live until a fit of this model
    replaces it). Nothing while the backfill is still at work, and nothing in a steady state: the daily refit
    follows the phrases' other changes. Answers the new prior, or None."""
    with decision_fits_serialised():  # decided under the fit lock: a refresh that waited for a fit sees what it did
        model = current_model_name()
        if selectors.vectors_of_another_model_left(model, fresh=True):
            return None
        live_model = DecisionFit.objects.filter(status=DecisionFit.Status.LIVE).values_list("embedding_model", flat=True).first()
        if live_model is not None and live_model != model:
            # goes live over the other model's fit, pinned or not; not again on phrases a fit failed on within the day
            return _prior_fit() if _unfit_at(model) != selectors.decision_anchor_stamp(model=model)[0] else None
        newest = DecisionFit.objects.filter(source=DecisionFit.Source.PRIOR, embedding_model=model).order_by("-version").first()
        if newest is not None and not (isinstance(newest.params, dict) and newest.params.get("reembedding")):
            return None
        if not _prior_stale():
            return None
        return _prior_fit()


def decision_refit(*, force: bool = False, progress: bool = False, due: bool = False) -> dict:
    """Promote the shadow fit if it earned it, then fit the newest labels (and the heads) into a new shadow fit.
    Also refits the catalogue prior when it is stale (``_prior_stale``). One fit at a time per tenant
    (``decision_fits_serialised``). ``due``: sent because labels arrived: nothing when another refit has fitted
    them meanwhile. Answers what happened."""
    sent_key = None
    try:
        with decision_fits_serialised():
            if due and not force:
                still_due, sent_key = _refit_due()
                if not still_due:
                    return {"prior": None, "promoted": None, "shadow": None, "reason": "not due: another refit fitted them"}
            return _refit(force=force, progress=progress)
    finally:
        if sent_key is not None:
            try:
                cache.delete(sent_key)
            except Exception:
                logger.warning("cache unavailable: the sent refit is remembered until it expires", exc_info=True)


def _feature_row(value) -> bool:
    """A stored feature row the fit can read: one real number per feature, for the first BASE_FEATURES or more of
    FEATURES (a record from before a feature was added has fewer; a damaged row is left out, never fatal;
    non-finite values are left out by the fit)."""
    return (
        isinstance(value, list)
        and decision.BASE_FEATURES <= len(value) <= len(decision.FEATURES)
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    )


def _feature_width(rows: list[dict], *, names: bool, enough: int) -> int:
    """How many features a fit from labels reads: all of them when at least ``enough`` rows carry every one (the
    rows that carry fewer, recorded before a feature was added, are then left out), else the fewest any row
    carries; never the name feature without name vectors (``names``) for the heads this fit trains."""
    full = len(decision.FEATURES) if names else decision.BASE_FEATURES
    if sum(len(r["features"]) >= full for r in rows) >= max(enough, 1):
        return full
    return min((len(r["features"]) for r in rows), default=full)


def _live_fit_locked(*, tenant_id: int | None = None, exclude: int | None = None) -> DecisionFit | None:
    """Inside a transaction: the live fit (of ``tenant_id``, other than ``exclude``), locked before its pin is read (a
    pin then waits for this transaction, or this one sees it). A switch that committed while the lock was awaited
    leaves the statement with no row (the row it waited for is no longer live, and the new live one was not in its
    snapshot): it is read again."""
    qs = DecisionFit.objects.filter(status=DecisionFit.Status.LIVE)
    if tenant_id is not None:
        qs = qs.filter(tenant_id=tenant_id)
    if exclude is not None:
        qs = qs.exclude(pk=exclude)
    for _attempt in range(3):
        live = qs.select_for_update().first()
        if live is not None or not qs.exists():
            return live
    raise Conflict("The live decision fit keeps changing; try again.", field="fit")


def _unseen_by(in_use, labels) -> np.ndarray | None:
    """Which of ``labels`` the fit in use did not learn from: all for the catalogue prior; for a fit from labels,
    those of resolutions answered after it was made (its own figures on the labels it was fitted on would flatter
    it; a resolution answered before it may have been labelled before it too, or relabelled since, so none of those
    counts); None: none in use."""
    if in_use is None:
        return None
    if in_use.source == DecisionFit.Source.PRIOR:
        return np.ones(len(labels), dtype=bool)
    made = DecisionFit.objects.filter(version=in_use.version).values_list("created_at", flat=True).first()
    return np.array([made is None or r["created_at"] > made for r in labels], dtype=bool)


def _held_out_in_use(in_use, F, y) -> dict:
    """The fit in use judged on the new fit's labels it did not learn from (``n`` of them); {} when none is in use,
    no such label exists yet, or its params cannot be read (the resolver falls back from it meanwhile, and the new
    fit must still be made to replace it)."""
    if in_use is None or not len(y):
        return {}
    try:
        decision.check_params(in_use.params)
    except (ValueError, TypeError) as exc:
        logger.error("decision fit v%s in use is unusable (%s): not judged on the new labels", in_use.version, exc)
        return {}
    if F.shape[1] < len(in_use.params["coef"]):  # it reads a feature these labels were recorded without
        logger.info("decision fit v%s in use reads more features than the labels carry: not judged on them", in_use.version)
        return {}
    return decision.evaluate(in_use.params, F, y)


def _refit(*, force: bool, progress: bool = False) -> dict:
    out = {"prior": None, "promoted": None, "shadow": None, "reason": ""}
    if _prior_stale():
        prior = decision_prior_fit(progress=progress)
        out["prior"] = prior.version if prior else None
    with transaction.atomic():
        shadow = DecisionFit.objects.select_for_update().filter(status=DecisionFit.Status.SHADOW).first()
        if shadow is not None:
            shadow.shadow_figures = selectors.shadow_figures(shadow.version)
            shadow.save(update_fields=["shadow_figures"])
            live = _live_fit_locked()
            ok, why = promotion_verdict(fit=shadow)
            if ok and shadow.embedding_model != current_model_name():
                ok, why = False, f"v{shadow.version} is for embedding model {shadow.embedding_model}"
            if ok and not (live and live.pinned):
                _switch(shadow, action="promoted", reason=why)
                out["promoted"] = shadow.version
            else:
                out["reason"] = why if not ok else f"v{live.version} is pinned"
    if not force:
        # the daily refit right after one the labels sent: a new fit on the same labels would retire the shadow
        # fit before any label could judge it
        since, newest = selectors.labels_since_newest_fit(at_most=1)
        if since == 0 and DecisionFit.objects.filter(status=DecisionFit.Status.SHADOW, version=newest).exists():
            mine = f"no label since v{newest}, which stays in shadow until labels judge it"
            out["reason"] = f"{out['reason']}; {mine}" if out["reason"] else mine
            return out
    labels = selectors.decision_labels(window=settings.RESOLVE_FIT_WINDOW_LABELS, model=current_model_name())
    if len(labels) < settings.RESOLVE_PROMOTE_MIN_LABELS and not force:
        out["reason"] = out["reason"] or f"{len(labels)} labels; a fit needs {settings.RESOLVE_PROMOTE_MIN_LABELS}"
        return out
    model = current_model_name()
    names = _verb_names(model)
    good = [r for r in labels if _feature_row(r["features"])]
    width = _feature_width(good, names=bool(names[0]), enough=settings.RESOLVE_PROMOTE_MIN_LABELS)
    good = [r for r in good if len(r["features"]) >= width]
    F = np.array([r["features"][:width] for r in good], dtype=np.float64).reshape(-1, width)
    y = np.array([int(r["label"]) for r in good])
    F_open = [
        r["features_open"][:width]
        for r in good
        if r["label"] and _feature_row(r["features_open"]) and len(r["features_open"]) >= width
    ]
    state = selectors.decision_state()
    in_use, prior = state["live"], state["prior"]
    # the comparison with the fit in use is on labels neither learned from: the new fit's out-of-fold answers and the
    # fit in use's, on the labels of resolutions answered since the fit in use was made
    unseen = _unseen_by(in_use, good)
    params = decision.fit_decision(
        F,
        y,
        max_wrong_rate=settings.RESOLVE_MAX_WRONG_RATE,
        min_labels=1 if force else settings.RESOLVE_PROMOTE_MIN_LABELS,
        F_open=np.array(F_open) if F_open else None,
        max_open_rate=settings.RESOLVE_MAX_OPEN_RATE,
        judge=unseen,
    )
    if params is None:
        out["reason"] = "too few labels or one class only"
        return out
    params["exact_answers"] = _exact_answers_judged()
    words = bool((prior.params or {}).get("head_words", True)) if prior else True
    trained = _heads_train(
        model, users=True, warm_version=in_use.version if in_use else None, words=words, names=names, progress=progress
    )
    with transaction.atomic():
        heads_lock()  # first: an erasure of a user whose head trained meanwhile has committed, or waits for this
        # locked: a reviewer pinning this shadow live meanwhile commits first, and then it is no shadow to retire
        previous = DecisionFit.objects.select_for_update().filter(status=DecisionFit.Status.SHADOW).first()
        if previous is not None:
            previous.status = DecisionFit.Status.RETIRED
            previous.save(update_fields=["status"])
        fit = DecisionFit.objects.create(
            version=_next_version(),
            source=DecisionFit.Source.LABELS,
            status=DecisionFit.Status.SHADOW,
            embedding_model=model,
            params=params,
            n_labels=params["n_labels"],
            held_out=params["held_out"],
            held_out_in_use=_held_out_in_use(in_use, F[unseen], y[unseen]) if unseen is not None else {},
            in_use_version=in_use.version if in_use else None,
            shadow_since=timezone.now(),
        )
        heads = _heads_save(fit, trained, model)
        _heads_recorded(fit, heads)
        fit.note = f"{params['n_labels']} labels ({params['n_open']} open-set rows), {heads} head(s)"
        fit.save(update_fields=["note"])
        decision_heads_prune(keep=settings.RESOLVE_HEADS_KEEP_FITS)
        DecisionFitEvent.objects.create(fit=fit, action="shadow", previous_version=in_use.version if in_use else None)
        transaction.on_commit(selectors.decision_cache_clear)
    out["shadow"] = fit.version
    logger.info("decision fit v%s in shadow: held out %s (in use: %s)", fit.version, fit.held_out, fit.held_out_in_use)
    return out


def decision_heads_prune(*, keep: int) -> int:
    """Delete the heads of retired fits from labels older than the newest ``keep`` fits, and of retired priors older
    than their model's newest prior (never a live, shadow or pinned fit's); those fits are marked and can no longer
    go live. Answers how many fits lost theirs."""
    newest = list(DecisionFit.objects.order_by("-version").values_list("version", flat=True)[: max(keep, 1)])
    if not newest:
        return 0
    newest_prior: dict[str, int] = {}
    for model, version in DecisionFit.objects.filter(source=DecisionFit.Source.PRIOR).values_list("embedding_model", "version"):
        newest_prior[model] = max(version, newest_prior.get(model, 0))
    superseded = Q()
    for model, version in newest_prior.items():
        superseded |= Q(source=DecisionFit.Source.PRIOR, embedding_model=model, version__lt=version)
    old = DecisionFit.objects.filter(
        Q(source=DecisionFit.Source.LABELS, version__lt=newest[-1]) | superseded,
        status=DecisionFit.Status.RETIRED,
        pinned=False,
        heads_pruned_at__isnull=True,
    )
    with transaction.atomic():
        ids = list(old.select_for_update(skip_locked=True).values_list("pk", flat=True))
        if ids:
            DecisionHead.objects.filter(fit_id__in=ids).delete()
            DecisionFit.objects.filter(pk__in=ids).update(heads_pruned_at=timezone.now())
    return len(ids)


# --- Reviewers: pin, unpin, roll back ---


def decision_fit_pin(*, fit: DecisionFit, reviewer=None) -> DecisionFit:
    """Put ``fit`` live and hold it there: automatic promotion stops until it is unpinned. Never a fit with no usable
    params, one of another embedding model than the one in use, or a fit from labels on fewer labels than
    RESOLVE_PROMOTE_MIN_LABELS or with a held-out wrong rate above RESOLVE_MAX_WRONG_RATE."""
    with transaction.atomic():
        row = DecisionFit.objects.select_for_update().get(pk=fit.pk)
        try:
            decision.check_params(row.params)
        except (ValueError, TypeError) as exc:
            raise ApplicationError(f"v{row.version} cannot go live: {exc}", field="fit") from exc
        if row.source == DecisionFit.Source.LABELS and row.n_labels < settings.RESOLVE_PROMOTE_MIN_LABELS:
            raise ApplicationError(
                f"v{row.version} cannot go live: fitted on {row.n_labels} labels, fewer than the "
                f"{settings.RESOLVE_PROMOTE_MIN_LABELS} a fit needs (RESOLVE_PROMOTE_MIN_LABELS)",
                field="fit",
            )
        wrong = (row.held_out or {}).get("wrong") if isinstance(row.held_out, dict) else None
        if row.source == DecisionFit.Source.LABELS and not (isinstance(wrong, (int, float)) and math.isfinite(wrong)):
            raise ApplicationError(f"v{row.version} cannot go live: it records no held-out wrong rate", field="fit")
        if row.source == DecisionFit.Source.LABELS and wrong > settings.RESOLVE_MAX_WRONG_RATE:
            raise ApplicationError(
                f"v{row.version} cannot go live: its held-out wrong rate {wrong} is above the target "
                f"{settings.RESOLVE_MAX_WRONG_RATE} (RESOLVE_MAX_WRONG_RATE)",
                field="fit",
            )
        if row.embedding_model != current_model_name():
            raise ApplicationError(
                f"v{row.version} cannot go live: it was fitted for embedding model {row.embedding_model}, and this "
                f"deployment embeds with {current_model_name()}; pin a fit of that model, or the prior",
                field="fit",
            )
        if row.heads_pruned_at is not None:
            raise ApplicationError(
                f"v{row.version} cannot go live: its classifier heads were deleted on {row.heads_pruned_at:%Y-%m-%d} "
                f"(only the newest {settings.RESOLVE_HEADS_KEEP_FITS} fits keep theirs); pin a newer fit or the prior",
                field="fit",
            )
        if row.status == DecisionFit.Status.LIVE:
            if row.pinned:
                return row  # pinned already: nothing changes, nothing to record
            row.pinned = True
            row.save(update_fields=["pinned"])
            DecisionFitEvent.objects.create(fit=row, action="pinned", by=reviewer if getattr(reviewer, "pk", None) else None)
            transaction.on_commit(selectors.decision_cache_clear)
            return row
        return _switch(
            row, action="rolled_back" if row.status == "retired" else "pinned", reason="reviewer", by=reviewer, pin=True
        )


def decision_fit_unpin(*, fit: DecisionFit, reviewer=None) -> DecisionFit:
    """Let automatic promotion replace ``fit`` again; a fit that is not pinned is left as it is (no event)."""
    with transaction.atomic():
        row = DecisionFit.objects.select_for_update().get(pk=fit.pk)
        if not row.pinned:
            return row
        row.pinned = False
        row.save(update_fields=["pinned"])
        DecisionFitEvent.objects.create(fit=row, action="unpinned", by=reviewer if getattr(reviewer, "pk", None) else None)
    return row


def decision_fit_retire_live(*, tenant_id: int | None = None, reviewer=None) -> DecisionFit | None:
    """Roll ``tenant_id``'s decision back from the live learned fit to its newest catalogue prior of the embedding
    model in use (pinned, so it stays). Without ``tenant_id`` the scope's tenant; a scope over several tenants must name one."""
    priors = DecisionFit.objects.filter(Q(source=DecisionFit.Source.PRIOR), embedding_model=current_model_name())
    if tenant_id is not None:
        priors = priors.filter(tenant_id=tenant_id)
    elif priors.values("tenant_id").distinct().count() > 1:
        raise ApplicationError("Several tenants are in scope: name the tenant whose fit rolls back.", field="tenant")
    prior = priors.order_by("-version").first()
    if prior is None:
        raise ApplicationError(f"There is no catalogue prior of {current_model_name()} to roll back to.", field="fit")
    return decision_fit_pin(fit=prior, reviewer=reviewer)
