"""Reads of the review inbox: every kind of item that waits for a human, in one list, with its evidence.

Each kind is read through its own app's selectors (the apps own their tables); this module only merges them.
The inbox page costs a fixed number of queries whatever its size: one count and one slice per kind, one fetch
per kind on the page, one for the claims and a few for progress.
"""

import heapq
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db.models import Case, Count, F, IntegerField, Q, QuerySet, Sum, Value, When
from django.utils import timezone

from actions.selectors import action_by_id
from autonomy import selectors as autonomy_selectors
from feedback import selectors as feedback_selectors
from learning.selectors import review as learning_review
from learning.selectors.candidates import candidates_readable
from memories import selectors as memory_selectors
from review.models import BacklogSnapshot, Claim, Decision, Kind

RISK_NAMES = {0: "low", 1: "medium", 2: "high"}


@dataclass(frozen=True)
class KindSpec:
    kind: str
    label: str
    waiting: object  # () -> QuerySet of the items that wait
    by_ids: object  # (ids) -> QuerySet with what the page shows
    view_perm: str
    decide_perm: str
    risk: object  # an expression: 0 low, 1 medium, 2 high
    agent: str | None  # lookup of the agent's name, None where the kind has no agent
    approve: str  # the buttons' words
    reject: str
    confirm_approve: bool  # approving changes what an agent may do (or everyone's vocabulary): confirm first
    rejected: Q  # a decided item in this state was rejected; in any other, approved
    readable: object = None  # () -> QuerySet of the items the caller (an agent's key) may read; None: all in its tenants


def _risk(*whens, default=0):
    return Case(*whens, default=Value(default), output_field=IntegerField())


KINDS: dict[str, KindSpec] = {
    Kind.CANDIDATE: KindSpec(
        Kind.CANDIDATE,
        "Learning candidates",
        learning_review.candidates_waiting,
        learning_review.candidates_by_ids,
        "learning.view_learningcandidate",
        "learning.review_learningcandidate",
        _risk(When(risk_level="high", then=Value(2)), When(Q(risk_level="medium") | Q(user_id__isnull=True), then=Value(1))),
        "proposed_by_agent__name",
        "Approve",
        "Reject",
        True,
        Q(status="rejected"),
        readable=candidates_readable,
    ),
    Kind.PROPOSAL: KindSpec(
        Kind.PROPOSAL,
        "Proposals",
        feedback_selectors.proposals_waiting,
        feedback_selectors.proposals_by_ids,
        "feedback.view_proposal",
        "feedback.change_proposal",
        _risk(When(confidence__lt=0.5, then=Value(2)), When(confidence__lt=0.8, then=Value(1))),
        "agent__name",
        "Approve",
        "Reject",
        False,
        Q(status="rejected"),
    ),
    Kind.EXECUTION: KindSpec(
        Kind.EXECUTION,
        "Executions",
        feedback_selectors.executions_waiting,
        feedback_selectors.executions_by_ids,
        "feedback.view_execution",
        "feedback.change_execution",
        _risk(When(success=False, then=Value(2)), When(confidence__lt=0.7, then=Value(1))),
        "agent__name",
        "Correct",
        "Incorrect",
        False,
        Q(review_outcome="incorrect"),
    ),
    Kind.TRANSITION: KindSpec(
        Kind.TRANSITION,
        "Autonomy transitions",
        autonomy_selectors.transitions_waiting,
        autonomy_selectors.transitions_by_ids,
        "autonomy.view_autonomytransition",
        "autonomy.approve_autonomytransition",
        _risk(When(to_level__gt=F("from_level"), then=Value(2)), default=1),
        None,
        "Apply",
        "Reject",
        True,
        Q(status="rejected"),
    ),
    Kind.RULE: KindSpec(
        Kind.RULE,
        "Correction rules",
        feedback_selectors.rules_waiting,
        feedback_selectors.rules_by_ids,
        "feedback.view_correctionrule",
        "feedback.approve_correctionrule",
        _risk(default=1),
        "agent__name",
        "Activate",
        "Deactivate",
        True,
        Q(status__in=["inactive", "expired"]),
    ),
    Kind.QUARANTINE: KindSpec(
        Kind.QUARANTINE,
        "Quarantined memories",
        memory_selectors.quarantine_waiting,
        memory_selectors.quarantine_by_ids,
        "memories.view_memoryquarantine",
        "memories.change_memoryquarantine",
        _risk(When(reason="secret", then=Value(2)), default=1),
        None,
        "Release",
        "Discard",
        True,
        Q(status="discarded"),
    ),
    Kind.PROFILE: KindSpec(
        Kind.PROFILE,
        "Fitted resolution profiles",
        learning_review.profiles_waiting,
        learning_review.profiles_by_ids,
        "learning.view_fittedresolutionprofile",
        "learning.change_fittedresolutionprofile",
        _risk(default=1),
        None,
        "Activate",
        "Retire",
        True,
        Q(status="retired"),
    ),
}


def kinds_visible(user) -> list[KindSpec]:
    return [spec for spec in KINDS.values() if user.has_perm(spec.view_perm)]


def kind_spec(kind: str) -> KindSpec | None:
    return KINDS.get(kind)


@dataclass
class InboxItem:
    kind: str
    pk: int
    created_at: object
    risk: int
    tenant_id: int
    agent: str = ""
    title: str = ""
    detail: str = ""
    claim_user: str = ""
    claim_expires: object = None

    @property
    def risk_name(self) -> str:
        return RISK_NAMES[self.risk]

    @property
    def kind_label(self) -> str:
        return Kind(self.kind).label


@dataclass
class InboxFilters:
    kinds: list[str] = field(default_factory=list)  # empty: every visible kind
    max_age_days: int | None = None
    min_risk: int = 0
    agent: str = ""
    tenant_id: int | None = None
    order: str = "oldest"  # oldest | risk


def _filtered(spec: KindSpec, filters: InboxFilters) -> QuerySet | None:
    qs = spec.waiting().annotate(risk_rank=spec.risk)
    if filters.max_age_days is not None:
        qs = qs.filter(created_at__gte=timezone.now() - timedelta(days=filters.max_age_days))
    if filters.min_risk:
        qs = qs.filter(risk_rank__gte=filters.min_risk)
    if filters.agent:
        if spec.agent is None:
            return None
        qs = qs.filter(**{spec.agent: filters.agent})
    if filters.tenant_id is not None:
        qs = qs.filter(tenant_id=filters.tenant_id)
    return qs


def _sort_key(order: str):
    if order == "risk":
        return lambda row: (-row["risk_rank"], row["created_at"], row["kind"], row["pk"])
    return lambda row: (row["created_at"], row["kind"], row["pk"])


# How deep the inbox pages go: page n reads n pages of rows of each kind to merge them, so pages past this many items
# are not offered (filters by kind, age, risk or tenant reach the rest).
INBOX_DEEPEST_ITEMS = 10_000


def inbox_page(*, user, filters: InboxFilters, page: int = 1, per_page: int = 50, per_page_max: int = 200) -> dict:
    """One page of the merged queue (oldest or riskiest first), the count per kind, and the claims on the page; pages
    reach ``INBOX_DEEPEST_ITEMS`` items deep (a page number beyond is the deepest page)."""
    specs = [s for s in kinds_visible(user) if not filters.kinds or s.kind in filters.kinds]
    per_page = max(1, min(per_page, per_page_max))
    deepest = max(1, INBOX_DEEPEST_ITEMS // per_page)
    page = min(max(1, page), deepest)
    want = page * per_page
    counts: dict[str, int] = {}
    streams = []
    ordering = ["-risk_rank", "created_at", "pk"] if filters.order == "risk" else ["created_at", "pk"]
    for spec in specs:
        qs = _filtered(spec, filters)
        if qs is None:
            counts[spec.kind] = 0
            continue
        counts[spec.kind] = qs.count()
        if counts[spec.kind]:
            rows = qs.order_by(*ordering).values("pk", "created_at", "risk_rank", "tenant_id")[:want]
            streams.append([{**r, "kind": spec.kind} for r in rows])
    merged = list(heapq.merge(*streams, key=_sort_key(filters.order)))[(page - 1) * per_page : want]
    items = [InboxItem(r["kind"], r["pk"], r["created_at"], r["risk_rank"], r["tenant_id"]) for r in merged]
    _describe(items)
    _claims(items)
    total = sum(counts.values())
    return {
        "items": items,
        "counts": counts,
        "kinds": specs,
        "total": total,
        "page": page,
        "per_page": per_page,
        "pages": min(max(1, -(-total // per_page)), deepest),
        "beyond": max(0, total - deepest * per_page),  # items no page reaches (filters do)
    }


def waiting_counts(*, user) -> dict[str, int]:
    """The admin index's figures: how many items of each kind the user may see wait."""
    return {spec.kind: spec.waiting().count() for spec in kinds_visible(user)}


def _describe(items: list[InboxItem]) -> None:
    by_kind: dict[str, list[InboxItem]] = {}
    for item in items:
        by_kind.setdefault(item.kind, []).append(item)
    for kind, group in by_kind.items():
        objects = {o.pk: o for o in KINDS[kind].by_ids([i.pk for i in group])}
        for item in group:
            obj = objects.get(item.pk)
            if obj is not None:
                item.title, item.detail, item.agent = describe(kind, obj)


def describe(kind: str, obj) -> tuple[str, str, str]:
    """(title, one line of detail, agent name) of an item, as the inbox and the decision page show it."""
    if kind == Kind.CANDIDATE:
        scope = f"user {obj.user_id}" if obj.user_id else "every user (global)"
        agent = obj.proposed_by_agent.name if obj.proposed_by_agent_id else ""
        return (
            f"“{obj.input_pattern}” → {obj.suggested_output}",
            f"{scope} · {obj.occurrence_count}× · confidence {obj.confidence:.2f} · {obj.source}",
            agent,
        )
    if kind == Kind.PROPOSAL:
        return f"{obj.action.name} proposed", f"confidence {obj.confidence:.2f}", obj.agent.name
    if kind == Kind.EXECUTION:
        state = "succeeded" if obj.success else "failed"
        return f"{obj.action.name} ran on its own", f"{state} · confidence {obj.confidence:.2f}", obj.agent.name
    if kind == Kind.TRANSITION:
        return (
            f"{obj.action.name}: level {obj.from_level} → {obj.to_level}",
            f"{obj.direction} · {obj.reason[:120]}",
            "",
        )
    if kind == Kind.RULE:
        return f"Rule for {obj.action.name}", obj.precondition[:140], obj.agent.name
    if kind == Kind.QUARANTINE:
        return f"Memory of {obj.user_id} blocked: {obj.reason}", obj.redacted_preview[:140], ""
    if kind == Kind.PROFILE:
        return (
            f"Resolution profile: threshold {obj.resolve_threshold:.3f}, margin {obj.margin:.3f}",
            f"{obj.embedding_model} · {obj.gold_count} labels",
            "",
        )
    return str(obj), "", ""


def _claims(items: list[InboxItem]) -> None:
    if not items:
        return
    live = claims_live(kinds={i.kind for i in items}, ids={i.pk for i in items})
    for item in items:
        claim = live.get((item.kind, item.pk))
        if claim is not None:
            item.claim_user, item.claim_expires = claim.user.get_username(), claim.expires_at


def claims_live(*, kinds: set[str], ids: set[int]) -> dict[tuple[str, int], Claim]:
    rows = Claim.objects.filter(kind__in=kinds, object_id__in=ids, expires_at__gt=timezone.now()).select_related("user")
    return {(c.kind, c.object_id): c for c in rows}


def claim_live(*, kind: str, object_id: int) -> Claim | None:
    return Claim.objects.filter(kind=kind, object_id=object_id, expires_at__gt=timezone.now()).select_related("user").first()


def item_get(*, kind: str, pk: int):
    """The item (waiting or not) of that kind, or None (unknown, or another tenant's: the same answer)."""
    spec = KINDS.get(kind)
    return None if spec is None else spec.by_ids([pk]).first()


def item_readable(*, kind: str, pk: int) -> bool:
    """Whether the caller may read the item (an agent's key does not read every kind's every row)."""
    readable = KINDS[kind].readable
    return readable is None or readable().filter(pk=pk).exists()


def item_is_waiting(*, kind: str, pk: int) -> bool:
    return KINDS[kind].waiting().filter(pk=pk).exists()


def items_waiting(*, kind: str, ids: list[int]) -> list:
    """Of these items, those that wait for a decision, with what a decision's summary names."""
    spec = KINDS[kind]
    return list(spec.by_ids(list(spec.waiting().filter(pk__in=ids).values_list("pk", flat=True))).order_by("pk"))


def items_decided(*, kind: str, ids: list[int]) -> dict[int, str]:
    """Of these items, those no longer waiting, with the verdict their state says (approve or reject)."""
    spec = KINDS[kind]
    model = spec.waiting().model
    decided = model.objects.filter(pk__in=ids).exclude(pk__in=spec.waiting().filter(pk__in=ids).values("pk"))
    rejected = set(decided.filter(spec.rejected).values_list("pk", flat=True))
    return {
        pk: (Decision.Verdict.REJECT if pk in rejected else Decision.Verdict.APPROVE)
        for pk in decided.values_list("pk", flat=True)
    }


def last_decision(*, kind: str, object_id: int) -> Decision | None:
    return Decision.objects.filter(kind=kind, object_id=object_id).select_related("user", "agent").first()


def next_item(*, user, filters: InboxFilters, after: tuple[str, int] | None, skip: set[tuple[str, int]]) -> InboxItem | None:
    """The first item of the queue that is not the one just decided, not skipped and not held by someone else: read
    the first ``REVIEW_NEXT_LOOKAHEAD`` items, then twice as many, and so on until one is free or the queue ends
    (a window that doubles reads each item a bounded number of times; pages read one after another from the
    start of the queue read the first page again for each page, and the queries grew with the items passed over)."""
    window = settings.REVIEW_NEXT_LOOKAHEAD
    while True:
        page = inbox_page(user=user, filters=filters, page=1, per_page=window, per_page_max=window)
        for item in page["items"]:  # all of them again: the queue may have moved since the last window
            key = (item.kind, item.pk)
            if key == after or key in skip:
                continue
            if item.claim_user and item.claim_user != user.get_username():
                continue
            return item
        if len(page["items"]) < window or window >= page["total"]:
            return None
        window *= 2


def progress(*, days: int = 14) -> dict:
    """Decisions taken: today and this week, per reviewer (or agent key) and in total; approvals per day."""
    now = timezone.now()
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    week = today - timedelta(days=today.weekday())
    since = today - timedelta(days=days - 1)
    totals = Decision.objects.filter(decided_at__gte=week).aggregate(
        today=Count("id", filter=Q(decided_at__gte=today)), week=Count("id", filter=Q(decided_at__gte=week))
    )  # this week's rows only (an index range), not every decision ever taken
    per_reviewer = list(
        Decision.objects.filter(decided_at__gte=week)
        .values("user__username", "agent__name")
        .annotate(week=Count("id"), today=Count("id", filter=Q(decided_at__gte=today)))
        .order_by("-week", "user__username", "agent__name")
    )
    daily = {
        r["day"]: r
        for r in Decision.objects.filter(decided_at__gte=since)
        .annotate(day=F("decided_at__date"))
        .values("day")
        .annotate(n=Count("id"), approved=Count("id", filter=Q(verdict=Decision.Verdict.APPROVE)))
    }
    backlog = dict(
        BacklogSnapshot.objects.filter(day__gte=since.date()).values("day").annotate(n=Sum("waiting")).values_list("day", "n")
    )
    series = []
    for offset in range(days):
        day = (since + timedelta(days=offset)).date()
        row = daily.get(day, {"n": 0, "approved": 0})
        series.append(
            {
                "day": day.isoformat(),
                "decided": row["n"],
                "approval_rate": round(row["approved"] / row["n"], 3) if row["n"] else None,
                "backlog": backlog.get(day),
            }
        )
    return {"today": totals["today"], "week": totals["week"], "per_reviewer": per_reviewer, "daily": series}


def item_conflicts(kind: str, obj) -> list[dict]:
    """What an approval must acknowledge: for a candidate, what maps its text to another verb; nothing for other kinds."""
    return learning_review.candidate_conflicts(obj) if kind == Kind.CANDIDATE else []


def candidate_duplicates(obj) -> list:
    """Pending candidates with the same verb for the same text or a near spelling (decided together on request)."""
    return learning_review.candidate_similar(obj)[0]


def item_evidence(kind: str, obj) -> dict:
    """What the decision page shows beside the buttons, per kind."""
    if kind == Kind.CANDIDATE:
        return learning_review.candidate_evidence(obj)
    if kind in (Kind.PROPOSAL, Kind.EXECUTION, Kind.RULE):
        return feedback_selectors.action_review_context(agent_id=obj.agent_id, action_id=obj.action_id)
    if kind == Kind.TRANSITION:
        return {
            **feedback_selectors.action_review_context(agent_id=None, action_id=obj.action_id),
            "rates": _transition_rates(obj.evidence or {}),
        }
    return {}


def _transition_rates(evidence: dict) -> list[dict]:
    """Success and rejection rates at proposal time beside the thresholds they were compared with."""
    out = []
    for key, label in (("success_rate", "success"), ("rejection_rate", "rejection")):
        value = evidence.get(key)
        if isinstance(value, int | float):
            out.append({"label": label, "value": round(float(value), 3)})
    return out


def mistake_categories() -> list[str]:
    """Preset reasons for rejections: the configured ones, then those already in use (patterns group by them)."""
    preset = list(settings.REVIEW_MISTAKE_CATEGORIES)
    return preset + [c for c in feedback_selectors.mistake_categories_in_use() if c not in preset]


# --- Reverting what was learned or granted (from the object's own admin page) ---

REVERT_PERMS = {
    "phrase": "learning.change_learnedphrase",
    "block": "learning.change_phraseblock",
    "rule": "feedback.approve_correctionrule",
    "autonomy": "autonomy.approve_autonomytransition",
}


def revert_target(kind: str, pk: int):
    """The object a revert acts on: a learned phrase, a block, a correction rule or an action; None if unknown."""
    if kind == "phrase":
        return learning_review.learned_phrase_by_id(pk)
    if kind == "block":
        return learning_review.phrase_block_by_id(pk)
    if kind == "rule":
        return feedback_selectors.rules_by_ids([pk]).first()
    if kind == "autonomy":
        return action_by_id(pk)
    return None


def revert_statement(kind: str, obj) -> str:
    """What the revert changes, in one sentence (shown on the confirmation and kept in the history); what was
    reverted already says so."""
    if kind == "phrase":
        scope = f"user {obj.user_id}" if obj.user_id else "every user (global)"
        if not obj.is_active:
            return f"“{obj.phrase}” → {obj.verb.name} for {scope} is already inactive; nothing to revert."
        return f"“{obj.phrase}” stops resolving to {obj.verb.name} for {scope}."
    if kind == "block":
        if obj.expires_at is not None and obj.expires_at <= timezone.now():
            ended = timezone.localtime(obj.expires_at).strftime("%Y-%m-%d %H:%M")
            return f"The block “{obj.phrase}” → {obj.verb.name} already ended at {ended}; nothing to revert."
        return f"The block “{obj.phrase}” → {obj.verb.name} ends now; the resolver may offer that verb again."
    if kind == "rule":
        if obj.status in ("inactive", "expired"):
            return f"The correction rule for {obj.agent.name} on {obj.action.name} is already {obj.status}; nothing to revert."
        if obj.status == "pending_approval":
            return (
                f"The correction rule for {obj.agent.name} on {obj.action.name} waits for approval and never applied: "
                "nothing to revert; decide it in the review inbox."
            )
        return f"The correction rule for {obj.agent.name} on {obj.action.name} stops applying."
    if kind == "autonomy":
        last = _revertible_transition(obj)
        if last is None:
            return f"{obj.name} has no applied change of level to revert."
        return f"Autonomy of {obj.name} goes back from level {obj.autonomy_level} to level {last.from_level}."
    return ""


def revert_of(kind: str, obj) -> int | None:
    """What the confirmation shows, as the page carries it: an action's revert undoes its last transition (its id);
    a phrase's, block's or rule's, the object as its newest history row has it. A second submission, or a change
    since (a user taught the phrase again), is then refused instead of undoing what the reviewer never saw. A row
    with no history (created before the audit trail, or in bulk) is version 0: its first change since is refused too.
    None when nothing can be reverted."""
    if kind == "autonomy":
        last = _revertible_transition(obj)
        return None if last is None else last.pk
    return obj.history.order_by("-history_id").values_list("history_id", flat=True).first() or 0


def _revertible_transition(action):
    """The applied change that set the action's current level, or None (none, or the level changed since)."""
    last = autonomy_selectors.last_applied_transition(action_id=action.pk)
    if last is None or last.to_level != action.autonomy_level or last.from_level == last.to_level:
        return None
    return last
