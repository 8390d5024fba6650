"""Admin review of learning candidates, behind confirmation pages."""

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.template.response import TemplateResponse

from common.admin import HistoryAdmin, LogWithoutTexts, TopValuesFilter
from common.api import ApplicationError
from learning import selectors as _selectors
from learning.models import (
    EntityAlias,
    LearnedPhrase,
    LearningCandidate,
)
from learning.selectors import review as review_selectors
from learning.services.candidates import candidate_approve, candidate_reject

# --- Learning governance: candidate review ---


REVIEW_PERMISSION = "learning.review_learningcandidate"
MAX_MIN_OCCURRENCES = 2**31 - 1
CONFLICT_UNACKNOWLEDGED = (
    "Other phrases or users' confirmations map some of these texts to another verb; acknowledge the conflicts to approve."
)


class MinOccurrencesFilter(admin.SimpleListFilter):
    title = "minimum occurrences"
    parameter_name = "min_occurrences"

    def lookups(self, request, model_admin):
        return [(str(n), f"≥ {n}") for n in (2, 3, 5, 10, 25)]

    def queryset(self, request, queryset):
        value = self.value() or ""
        if value.isascii() and value.isdecimal() and len(value) <= 18:  # int() refuses over 4,300 digits
            return queryset.filter(occurrence_count__gte=min(int(value), MAX_MIN_OCCURRENCES))
        return queryset


def candidate_conflicts(candidate: LearningCandidate) -> list[dict]:
    """What maps the candidate's text to another verb (the inbox asks the reviewer to acknowledge it); none once decided."""
    if candidate.status not in (LearningCandidate.Status.PENDING, LearningCandidate.Status.APPROVED):
        return []
    return review_selectors.candidate_conflicts(candidate, limit=5)


def _conflicts_line(conflicts: list[dict]) -> str:
    return "; ".join(f"{c['kind']} of {c['user_id']} → {c['verb']} ({c['weight']})" for c in conflicts)


def candidate_change_preview(candidate: LearningCandidate) -> str:
    """What approving the candidate would change, in one line."""
    scope = f"user {candidate.user_id}" if candidate.user_id else "global"
    if candidate.status not in (LearningCandidate.Status.PENDING, LearningCandidate.Status.APPROVED):
        return f"skipped: already {candidate.status}"
    if candidate.candidate_type == LearningCandidate.Type.ENTITY_ALIAS:
        current = EntityAlias.objects.filter(
            tenant_id=candidate.tenant_id, normalized=candidate.normalized, entity_type="entity", user_id=candidate.user_id
        ).first()
        if current:
            return f"alias “{candidate.input_pattern}” ({scope}) re-pointed from {current.canonical_name} to {candidate.suggested_output}"
        return f"new alias “{candidate.input_pattern}” → {candidate.suggested_output} ({scope})"
    current = (  # the candidate's own tenant: a reviewer of several tenants (or a superuser) sees all of them
        LearnedPhrase.objects.filter(tenant_id=candidate.tenant_id, normalized=candidate.normalized, user_id=candidate.user_id)
        .select_related("verb")
        .first()
    )
    if current and current.verb.name != candidate.suggested_output:
        return f"learned phrase “{candidate.input_pattern}” ({scope}) re-pointed from {current.verb.name} to {candidate.suggested_output}"
    if current:
        return f"learned phrase “{candidate.input_pattern}” → {candidate.suggested_output} ({scope}) confirmed"
    return f"new learned phrase “{candidate.input_pattern}” → {candidate.suggested_output} ({scope}), with its embedding"


@admin.register(LearningCandidate)
class LearningCandidateAdmin(LogWithoutTexts, HistoryAdmin):
    # Fits 1400 px: the rest (type, source, who decided and when) is on the detail page.
    list_display = [
        "input_pattern",
        "suggested_output",
        "status",
        "occurrence_count",
        "confidence_pct",
        "risk_level",
        "user_id",
        "last_seen_at",
    ]
    list_filter = [
        "status",
        "candidate_type",
        "risk_level",
        MinOccurrencesFilter,
        ("source", TopValuesFilter),
        ("user_id", admin.EmptyFieldListFilter),
    ]
    search_fields = ["input_pattern", "normalized", "suggested_output", "previous_output", "explanation", "user_id"]
    ordering = [_selectors.pending_first().asc(), "-occurrence_count", "-last_seen_at"]
    list_select_related = ["reviewed_by", "reviewed_by_agent"]
    actions = ["approve_selected", "reject_selected"]
    readonly_fields = [
        "candidate_type",
        "input_pattern",
        "normalized",
        "suggested_output",
        "previous_output",
        "occurrence_count",
        "confidence",
        "source",
        "risk_level",
        "rejected_alternatives",
        "user_id",
        "status",
        "explanation",
        "review_reason",
        "reviewed_by",
        "reviewed_by_agent",
        "proposed_by_agent",
        "seen_by_agents",
        "private_agent",
        "reviewed_at",
        "created_at",
        "updated_at",
        "last_seen_at",
    ]

    def get_readonly_fields(self, request, obj=None):
        """Every field: a candidate changes through its decisions (approve, reject), never by hand; a field added
        to the model later is read-only too."""
        own = [f.name for f in self.model._meta.concrete_fields if f.editable and not f.primary_key]
        return [*self.readonly_fields, *(name for name in own if name not in self.readonly_fields)]

    @admin.display(description="confidence", ordering="confidence")
    def confidence_pct(self, obj):
        return f"{obj.confidence:.0%}"

    def has_add_permission(self, request):
        return False  # candidates come from feedback and corrections, not from hand entry

    def has_delete_permission(self, request, obj=None):
        return False  # a candidate is rejected (with a reason, in the decision log), not deleted

    def has_review_permission(self, request):
        return request.user.has_perm(REVIEW_PERMISSION)

    def _confirmation(self, request, queryset, *, action, title, template, extra=None, status=200):
        rows, conflicted = [], False
        for c in queryset:
            if action != "approve_selected":
                rows.append((c, _reject_preview(c)))
            elif conflicts := candidate_conflicts(c):
                rows.append((c, f"{candidate_change_preview(c)}; conflicts: {_conflicts_line(conflicts)}"))
                conflicted = True
            else:
                rows.append((c, candidate_change_preview(c)))
        context = {
            **self.admin_site.each_context(request),
            "title": title,
            "opts": self.model._meta,
            "queryset": queryset,
            "rows": rows,
            "conflicts": conflicted,
            "action_name": action,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "media": self.media,
            **(extra or {}),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, f"admin/learning/learningcandidate/{template}", context, status=status)

    @admin.action(description="Approve and apply selected candidates", permissions=["review"])
    def approve_selected(self, request, queryset):
        """Behind a confirmation; a candidate whose text maps to another verb elsewhere needs the conflict acknowledged."""
        confirm = {"action": "approve_selected", "title": "Approve and apply candidates", "template": "approve_confirmation.html"}
        if request.POST.get("post") != "yes":
            return self._confirmation(request, queryset, **confirm)
        candidates = list(queryset)
        if request.POST.get("acknowledged") != "1" and any(candidate_conflicts(c) for c in candidates):
            return self._confirmation(request, queryset, **confirm, extra={"conflict_error": CONFLICT_UNACKNOWLEDGED}, status=400)
        done, failed = 0, []
        for candidate in candidates:
            try:
                candidate_approve(candidate=candidate, reviewer=request.user, apply_immediately=True)
                done += 1
            except ApplicationError as exc:
                failed.append(f"#{candidate.pk} {candidate.input_pattern}: {exc.message}")
        if done:
            self.message_user(request, f"Approved and applied {done} candidate(s).", messages.SUCCESS)
        for line in failed:
            self.message_user(request, f"Not approved: {line}", messages.ERROR)
        return None

    @admin.action(description="Reject selected candidates", permissions=["review"])
    def reject_selected(self, request, queryset):
        if request.POST.get("post") != "yes":
            return self._confirmation(
                request,
                queryset,
                action="reject_selected",
                title="Reject candidates",
                template="reject_confirmation.html",
            )
        reason = request.POST.get("reason", "").strip()
        add_to_blocklist = request.POST.get("add_to_blocklist") == "on"
        if not reason:
            self.message_user(request, "Give a reason for the rejection.", messages.ERROR)
            return self._confirmation(
                request,
                queryset,
                action="reject_selected",
                title="Reject candidates",
                template="reject_confirmation.html",
                extra={"reason_error": "A reason is required.", "add_to_blocklist": add_to_blocklist},
            )
        done, failed = 0, []
        for candidate in queryset:
            try:
                block = add_to_blocklist and candidate.candidate_type == LearningCandidate.Type.INVOCATION_PHRASE
                candidate_reject(candidate=candidate, reviewer=request.user, reason=reason, add_to_blocklist=block)
                done += 1
            except ApplicationError as exc:
                failed.append(f"#{candidate.pk} {candidate.input_pattern}: {exc.message}")
        if done:
            suffix = " and blocklisted their phrases" if add_to_blocklist else ""
            self.message_user(request, f"Rejected {done} candidate(s){suffix}.", messages.SUCCESS)
        for line in failed:
            self.message_user(request, f"Not rejected: {line}", messages.ERROR)
        return None


def _reject_preview(candidate: LearningCandidate) -> str:
    if candidate.status not in (LearningCandidate.Status.PENDING, LearningCandidate.Status.APPROVED):
        return f"skipped: already {candidate.status}"
    scope = f"user {candidate.user_id}" if candidate.user_id else "global"
    if candidate.candidate_type == LearningCandidate.Type.ENTITY_ALIAS:
        return f"rejected (aliases are not blocklisted) ({scope})"
    return f"rejected; with “add to blocklist”: {candidate.suggested_output} blocked for “{candidate.input_pattern}” and paraphrases ({scope})"
