"""Writes of the review inbox: claims, and decisions that call each app's own service.

A decision is one transaction: the item is locked (two reviewers confirming at once decide it once), the claim is
checked, the owning app's service decides the item inside the item's own tenant (a superuser's requests see every
tenant; a service that looks rows up by name or text must see only the item's), the decision is logged and the
claim dropped.
"""

import logging
from datetime import timedelta
from types import SimpleNamespace

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Q
from django.utils import timezone

from autonomy.selectors import transitions_waiting_lock
from autonomy.services import action_autonomy_revert, autonomy_transition_approve, autonomy_transition_reject
from common.api import ApplicationError, Conflict, Forbidden, NotFound
from feedback.delta import json_delta
from feedback.services.reviews import Reviewer, execution_review, proposal_approve, proposal_reject
from feedback.services.rules import correction_rule_approve, correction_rule_deactivate
from learning.services.blocks import phrase_block_expire
from learning.services.candidates import candidate_approve, candidate_reject
from learning.services.phrases import learned_phrase_deactivate
from learning.services.profiles import resolution_profile_activate, resolution_profile_retire
from memories.services import quarantine_discard, quarantine_release
from review import selectors
from review.models import BacklogSnapshot, Claim, Decision, Kind
from tenants.context import tenant_scope

logger = logging.getLogger(__name__)

ADMIN_LOCKS_MAX = 1000  # items an admin page's decision locks one by one (advisory); beyond, their rows are locked

CONFLICT_UNACKNOWLEDGED = (
    "Other phrases or users' confirmations map this text to another verb; acknowledge the conflict to approve."
)


def claim_take(*, kind: str, object_id: int, tenant_id: int, user) -> Claim | None:
    """Hold the item for ``REVIEW_CLAIM_SECONDS``: a new claim, an expired one taken over, or the user's own renewed.
    None when someone else holds it (``selectors.claim_live`` says who and until when)."""
    now = timezone.now()
    expires = now + timedelta(seconds=settings.REVIEW_CLAIM_SECONDS)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {Claim._meta.db_table} (tenant_id, kind, object_id, user_id, claimed_at, expires_at) "
            "VALUES (%s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (kind, object_id) DO UPDATE SET tenant_id = EXCLUDED.tenant_id, user_id = EXCLUDED.user_id, "
            "claimed_at = EXCLUDED.claimed_at, expires_at = EXCLUDED.expires_at "
            f"WHERE {Claim._meta.db_table}.expires_at <= EXCLUDED.claimed_at OR {Claim._meta.db_table}.user_id = EXCLUDED.user_id "
            "RETURNING id",
            [tenant_id, kind, object_id, user.pk, now, expires],
        )
        row = cursor.fetchone()
    return None if row is None else Claim.objects.select_related("user").get(pk=row[0])


def claim_release(*, kind: str, object_id: int, user) -> int:
    """Let go of an item (skip): only the holder's own claim goes."""
    deleted, _ = Claim.objects.filter(kind=kind, object_id=object_id, user=user).delete()
    return deleted


def claims_expired_purge() -> int:
    """Delete claims that ran out (they stop applying at expiry anyway; this keeps the table small)."""
    deleted, _ = Claim.objects.filter(expires_at__lte=timezone.now()).delete()
    return deleted


def _candidate_scope(user_id: str) -> str:
    return f"for user {user_id}"


def change_statement_compose(*, kind: str, obj, verdict: str) -> str:
    """What a decision changes, in one sentence: the confirmation page says it and the decision log keeps it."""
    approve = verdict == Decision.Verdict.APPROVE
    if kind == Kind.CANDIDATE:
        scope = _candidate_scope(obj.user_id) if obj.user_id else "for every user of this tenant (a global phrase)"
        if approve:
            return f"“{obj.input_pattern}” will resolve to {obj.suggested_output} {scope}."
        return f"“{obj.input_pattern}” → {obj.suggested_output} is rejected {scope}; nothing is learned."
    if kind == Kind.TRANSITION:
        if approve:
            return f"Autonomy of {obj.action.name} changes from level {obj.from_level} to level {obj.to_level}."
        return f"Autonomy of {obj.action.name} stays at level {obj.from_level} (level {obj.to_level} rejected)."
    if kind == Kind.RULE:
        if approve:
            return f"The correction rule for {obj.agent.name} on {obj.action.name} becomes active: {obj.precondition[:200]}"
        return f"The correction rule for {obj.agent.name} on {obj.action.name} is deactivated."
    if kind == Kind.QUARANTINE:
        if approve:
            return f"The redacted lesson is stored as a memory of {obj.user_id} (it must pass the write-gate again)."
        return f"The quarantined lesson of {obj.user_id} is discarded."
    if kind == Kind.PROFILE:
        if approve:
            return (
                f"Resolution threshold {obj.baseline.get('resolve_threshold')} → {obj.resolve_threshold:.3f}, "
                f"margin {obj.baseline.get('margin')} → {obj.margin:.3f} for {obj.embedding_model}."
            )
        return "The fitted profile is retired; the thresholds in force stay."
    if kind == Kind.PROPOSAL:
        if approve and getattr(obj, "status", "") == "modified":
            delta = json_delta(obj.proposed_action, obj.modified_action)
            fields = ", ".join(sorted({*delta["added"], *delta["removed"], *delta["changed"]}))
            return f"Proposal #{obj.pk} ({obj.action.name}) is approved as modified (changed: {fields})."
        return f"Proposal #{obj.pk} ({obj.action.name}) is {'approved' if approve else 'rejected'}."
    if kind == Kind.EXECUTION:
        return f"Execution #{obj.pk} ({obj.action.name}) is marked {'correct' if approve else 'incorrect'}."
    return ""


def _decided_already(kind: str, object_id: int, obj) -> Conflict:
    """The conflict for a lost race: who decided the item, and when."""
    last = selectors.last_decision(kind=kind, object_id=object_id)
    if last is not None:
        who, when, what = last.decider, last.decided_at, last.get_verdict_display()
    else:
        who = str(
            getattr(obj, "reviewed_by", None)
            or getattr(obj, "decided_by", None)
            or getattr(obj, "approved_by", None)
            or getattr(obj, "activated_by", None)
            or "someone"
        )
        when = (
            getattr(obj, "reviewed_at", None)
            or getattr(obj, "decided_at", None)
            or getattr(obj, "approved_at", None)
            or getattr(obj, "activated_at", None)
        )
        what = getattr(obj, "status", "") or getattr(obj, "review_outcome", "") or "decided"
    stamp = timezone.localtime(when).strftime("%Y-%m-%d %H:%M") if when else "earlier"
    return Conflict(
        f"Already decided: {what} by {who} at {stamp}.",
        field="verdict",
        code="decided",
        extra={"decided_by": who, "decided_at": when.isoformat() if when else None},
    )


def item_decide(
    *,
    kind: str,
    object_id: int,
    user,
    verdict: str,
    category: str = "",
    reason: str = "",
    acknowledged: bool = False,
    confirmed: bool = False,
) -> Decision:
    """Decide one waiting item as ``user`` through its app's service, and log the decision. Raises NotFound (unknown
    or another tenant's), Forbidden (no permission), Conflict (held by another reviewer, or decided already) or
    ApplicationError (a change not confirmed, a conflict not acknowledged, a service's refusal)."""
    spec = selectors.kind_spec(kind)
    if spec is None:
        raise NotFound(f"Unknown kind {kind!r}.", field="kind")
    if not user.has_perm(spec.decide_perm):
        raise Forbidden(f"Deciding {spec.label.lower()} needs the permission {spec.decide_perm}.", field="user")
    if verdict not in Decision.Verdict.values:
        raise ApplicationError(f"verdict must be one of {', '.join(Decision.Verdict.values)}.", field="verdict")
    category, reason = category.strip()[:40], reason.strip()[:5000]
    with transaction.atomic():
        with connection.cursor() as cursor:  # one decision at a time per item, claimed or not
            cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"review:{kind}:{object_id}"])
        claim = Claim.objects.select_for_update().filter(kind=kind, object_id=object_id).select_related("user").first()
        if claim is not None and claim.user_id != user.pk and claim.expires_at > timezone.now():
            until = timezone.localtime(claim.expires_at).strftime("%H:%M")
            raise Conflict(
                f"{claim.user.get_username()} holds this item until {until}.",
                field="claim",
                code="claimed",
                extra={"claimed_by": claim.user.get_username(), "expires_at": claim.expires_at.isoformat()},
            )
        obj = selectors.item_get(kind=kind, pk=object_id)
        if obj is None:
            raise NotFound(f"{Kind(kind).label.capitalize()} {object_id} not found.", field="id")
        if not selectors.item_is_waiting(kind=kind, pk=object_id):
            raise _decided_already(kind, object_id, obj)
        approve = verdict == Decision.Verdict.APPROVE
        if approve and spec.confirm_approve and not confirmed:
            raise ApplicationError(
                "This changes what agents do; confirm it first: " + change_statement_compose(kind=kind, obj=obj, verdict=verdict),
                field="confirmed",
                code="confirmation_required",
            )
        if kind == Kind.CANDIDATE and approve and not acknowledged:
            if selectors.item_conflicts(kind, obj):
                raise ApplicationError(CONFLICT_UNACKNOWLEDGED, field="acknowledged", code="conflict_unacknowledged")
        summary = change_statement_compose(kind=kind, obj=obj, verdict=verdict)
        try:
            with tenant_scope([obj.tenant_id]):
                _apply(kind, obj, user=user, approve=approve, category=category, reason=reason)
        except Conflict as exc:
            if exc.code in ("invalid_transition", "already_reviewed", "conflict"):
                raise _decided_already(kind, object_id, obj) from exc
            raise
        decision = Decision.objects.create(
            tenant_id=obj.tenant_id,
            kind=kind,
            object_id=object_id,
            user=user,
            verdict=verdict,
            category=category,
            reason=reason,
            summary=summary[:300],
        )
        Claim.objects.filter(kind=kind, object_id=object_id).delete()
    logger.info("review: %s %s %s by %s", kind, object_id, verdict, user.get_username())
    return decision


BIGINT_MAX = 2**63 - 1


def _items_lock(kind: str, ids) -> None:
    """Inside a transaction: the lock ``item_decide`` takes first, on each of these items, in one order (two
    writers of several items never wait on each other in a cycle)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s || i::text, 0)) FROM unnest(%s::bigint[]) AS i ORDER BY i",
            [f"review:{kind}:", sorted(set(ids))],
        )


def items_of_user_lock(*, user_id: str, candidate_ids: list[int]) -> None:
    """Before the erasure of a user's data, in its transaction: lock the candidates it deletes (``candidate_ids``:
    the user's, and the global ones only the user proposed) and the user's waiting quarantined lessons as a decision
    does first, so a decision under way (its claim, then the item) ends before the erasure locks the items and
    deletes their claims, and one that starts later finds them gone. More than ADMIN_LOCKS_MAX of a kind are left to
    their row locks (PostgreSQL's lock table is bounded)."""
    quarantined = selectors.kind_spec(Kind.QUARANTINE).waiting().filter(user_id=user_id).values_list("pk", flat=True)
    for kind, ids in ((Kind.CANDIDATE, candidate_ids), (Kind.QUARANTINE, list(quarantined[: ADMIN_LOCKS_MAX + 1]))):
        if 0 < len(ids) <= ADMIN_LOCKS_MAX:
            _items_lock(kind, ids)


def items_hold_for_admin(*, kind: str, ids: list[int], user) -> list[Claim]:
    """Before a decision taken in an app's own admin pages (a changelist's bulk action, a change form, a one-click
    button) on these items: lock them as ``item_decide`` does, in the caller's transaction, and answer the live
    claims other reviewers hold on them (those items must not be decided by this user now). An id no row can have
    (outside PostgreSQL's bigint keys) names nothing to hold: the caller's own lookup answers it (404)."""
    ids = [i for i in ids if 0 < i <= BIGINT_MAX]
    if not ids:
        return []
    if len(set(ids)) <= ADMIN_LOCKS_MAX:
        _items_lock(kind, ids)
    else:  # a "select all" over thousands would exhaust PostgreSQL's lock table: lock the rows (a lock in each row)
        # instead, so an inbox decision of one of them waits for this one, and one it took first drops out of
        # what waits here rather than being logged twice
        if kind == Kind.TRANSITION:  # the actions first, in one order, as the decision and an emergency stop lock them
            transitions_waiting_lock(ids=ids)
        else:
            list(selectors.kind_spec(kind).waiting().filter(pk__in=ids).order_by("pk").select_for_update().values_list("pk"))
    return list(
        Claim.objects.filter(kind=kind, object_id__in=ids, expires_at__gt=timezone.now())
        .exclude(user=user)
        .select_related("user")
        .order_by("object_id")
    )


def api_decision_begin(*, kind: str, object_id: int, user) -> list:
    """Before a decision taken through the API (a reviewer's token: ``user``; an agent's governance key: None) on an
    item the inbox shows, in the request's transaction: lock it as ``item_decide`` does and refuse (409 ``claimed``)
    while another reviewer holds it in the inbox. Answers the item as it waits (for ``admin_decisions_record`` once
    the decision is taken), or [] when it does not wait."""
    held = items_hold_for_admin(kind=kind, ids=[object_id], user=user)
    if held and user is None and not selectors.item_readable(kind=kind, pk=object_id):
        return []  # an item the agent may not read: its own lookup answers 404, as for an id that does not exist
    if held:
        claim = held[0]
        raise Conflict(
            f"The {Kind(kind).label} {object_id} is held in the review inbox by {claim.user.get_username()} until "
            f"{claim.expires_at:%Y-%m-%d %H:%M} UTC; it cannot be decided elsewhere meanwhile.",
            field="id",
            code="claimed",
            extra={"held_by": claim.user.get_username(), "held_until": claim.expires_at.isoformat()},
        )
    return selectors.items_waiting(kind=kind, ids=[object_id])


def admin_decisions_record(
    *, kind: str, waiting: list, user, agent=None, reason: str = "", category: str = "", source: str = "admin page"
) -> list[Decision]:
    """Log, as ``item_decide`` does, the decisions an app's own admin pages (or the API) just took: of ``waiting`` (the items
    that waited before, as ``selectors.items_waiting`` read them), each one no longer waiting was decided by
    ``user`` (or, through the API with an agent's governance key, by ``agent``), with the verdict its state says;
    its claims go. Runs in the caller's transaction, after the change."""
    verdicts = selectors.items_decided(kind=kind, ids=[obj.pk for obj in waiting])
    if kind == Kind.PROPOSAL:  # the summary says how it was decided (approved as is, or modified)
        waiting = list(selectors.KINDS[kind].by_ids([obj.pk for obj in waiting if obj.pk in verdicts]))
    decisions = [
        Decision(
            tenant_id=obj.tenant_id,
            kind=kind,
            object_id=obj.pk,
            user=user,
            agent=agent if user is None else None,
            verdict=verdicts[obj.pk],
            category=category.strip()[:40],
            reason=reason.strip()[:5000],
            summary=change_statement_compose(kind=kind, obj=obj, verdict=verdicts[obj.pk])[:300],
        )
        for obj in waiting
        if obj.pk in verdicts
    ]
    Decision.objects.bulk_create(decisions)
    Claim.objects.filter(kind=kind, object_id__in=[d.object_id for d in decisions]).delete()
    who = user.get_username() if user is not None else f"agent {agent.name}" if agent is not None else "someone"
    for d in decisions:
        logger.info("review (%s): %s %s %s by %s", source, kind, d.object_id, d.verdict, who)
    return decisions


def _apply(kind: str, obj, *, user, approve: bool, category: str, reason: str) -> None:
    reviewer = Reviewer(user=user, source="admin")
    if kind == Kind.CANDIDATE:
        if approve:
            candidate_approve(candidate=obj, reviewer=user)
        else:
            candidate_reject(candidate=obj, reviewer=user, reason=" · ".join(x for x in (category, reason) if x))
    elif kind == Kind.PROPOSAL:
        if approve:
            proposal_approve(proposal=obj, reviewer=reviewer, notes=reason)
        else:
            proposal_reject(proposal=obj, reviewer=reviewer, notes=reason, mistake_category=category)
    elif kind == Kind.EXECUTION:
        execution_review(
            execution=obj,
            reviewer=reviewer,
            outcome="correct" if approve else "incorrect",
            notes=reason,
            mistake_category="" if approve else category,
        )
    elif kind == Kind.TRANSITION:
        if approve:
            autonomy_transition_approve(transition=obj, user=user, notes=reason)
        else:
            autonomy_transition_reject(transition=obj, user=user, notes=reason)
    elif kind == Kind.RULE:
        if approve:
            correction_rule_approve(rule=obj, user=user)
        else:
            correction_rule_deactivate(rule=obj, user=user)
    elif kind == Kind.QUARANTINE:
        if approve:
            quarantine_release(item=obj, actor=user.get_username())
        else:
            quarantine_discard(item=obj, actor=user.get_username())
    elif kind == Kind.PROFILE:
        if approve:
            resolution_profile_activate(fitted=obj, reviewer=user)
        else:
            resolution_profile_retire(fitted=obj)


def revert_apply(*, kind: str, obj, user, reason: str, revert_of: int | None = None) -> str:
    """Revert a learned phrase, a block, a correction rule or an action's last change of level, as ``user``, with
    a reason (required), inside the object's tenant; answers what changed. For an action, ``revert_of`` is the
    transition the confirmation named: a second submission, or a change since, is refused (Conflict), as is
    reverting a phrase, block or rule already reverted. The object's history records the revert."""
    perm = selectors.REVERT_PERMS.get(kind)
    if perm is None:
        raise NotFound(f"Nothing of kind {kind!r} can be reverted.", field="kind")
    if not user.has_perm(perm):
        raise Forbidden(f"Reverting needs the permission {perm}.", field="user")
    reason = (reason or "").strip()
    if not reason:
        raise ApplicationError("Say why you revert it.", field="reason")
    statement = selectors.revert_statement(kind, obj)
    with tenant_scope([obj.tenant_id]):
        if kind != "autonomy" and revert_of is not None:  # the object as the confirmation showed it, under its lock
            type(obj).objects.select_for_update().filter(pk=obj.pk).first()
            if selectors.revert_of(kind, obj) != revert_of:
                raise Conflict(
                    "It changed since this page was shown (a user taught it again, or it was reverted): look at it "
                    "again before you revert it.",
                    field="revert_of",
                    code="changed",
                )
        if kind == "phrase":
            learned_phrase_deactivate(phrase_id=obj.pk, reviewer=user, reason=reason)
        elif kind == "block":
            phrase_block_expire(block_id=obj.pk, reviewer=user, reason=reason, must_be_active=True)
        elif kind == "rule":
            correction_rule_deactivate(rule=obj, user=user, reason=reason, must_be_active=True)
        elif kind == "autonomy":
            action_autonomy_revert(action=obj, user=user, reason=reason, revert_of=revert_of)
    logger.info("revert: %s %s by %s: %s", kind, obj.pk, user.get_username(), reason)
    return statement


ERASED = "(erased with the user's data)"


def decisions_of_erased_user_scrub(
    *, user_id: str, candidate_ids: list[int], quarantine_ids: list[int], dry_run: bool = False
) -> int:
    """The decisions on a user's items (their candidates and quarantined lessons, those deleted before included: the
    summaries this module composed name the user) keep who decided what kind of item, how and when; their summary
    (the item's text and user) and reason are erased, and claims on the items dropped. Answers how many decisions
    were (``dry_run``: would be) scrubbed."""
    # what change_statement_compose says of the user's items: a candidate's scope ends its statement (approved) or
    # its first clause (rejected); a quarantined lesson's statements name only the user
    scope = _candidate_scope(user_id)
    lesson = SimpleNamespace(user_id=user_id)
    named = (
        Q(kind=Kind.CANDIDATE, object_id__in=candidate_ids)
        | Q(kind=Kind.CANDIDATE, summary__endswith=f" {scope}.")
        | Q(kind=Kind.CANDIDATE, summary__contains=f" is rejected {scope};")
        | Q(kind=Kind.QUARANTINE, object_id__in=quarantine_ids)
        | Q(
            kind=Kind.QUARANTINE,
            summary__in=[
                change_statement_compose(kind=Kind.QUARANTINE, obj=lesson, verdict=v)[:300] for v in Decision.Verdict.values
            ],
        )
    )
    decisions = Decision.objects.filter(named)
    if dry_run:
        return decisions.count()
    with transaction.atomic():
        Claim.objects.filter(
            Q(kind=Kind.CANDIDATE, object_id__in=candidate_ids) | Q(kind=Kind.QUARANTINE, object_id__in=quarantine_ids)
        ).delete()
        return decisions.update(summary=ERASED, reason="")


def backlog_snapshot_take() -> int:
    """Record, per tenant and kind, how many items wait now (today's row is overwritten until the day ends; a
    queue that emptied since the last snapshot gets zero). Answers the rows written."""
    today = timezone.localdate()
    with transaction.atomic():
        rows, zeroed = [], 0
        for spec in selectors.KINDS.values():
            counts = {row["tenant_id"]: row["n"] for row in spec.waiting().order_by().values("tenant_id").annotate(n=Count("id"))}
            rows += [BacklogSnapshot(tenant_id=t, day=today, kind=spec.kind, waiting=n) for t, n in counts.items()]
            emptied = BacklogSnapshot.objects.filter(day=today, kind=spec.kind).exclude(tenant_id__in=list(counts))
            zeroed += emptied.update(waiting=0, taken_at=timezone.now())
        BacklogSnapshot.objects.bulk_create(
            rows, update_conflicts=True, unique_fields=["tenant", "day", "kind"], update_fields=["waiting", "taken_at"]
        )
    return len(rows) + zeroed
