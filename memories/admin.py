"""Reviewer screens for memories and the quarantine queue.

Memories: browse by user, status, type and topic; promote; deprecate with a reason;
see the version chain and the skip/merge decisions folded into a memory; purge deprecated memories older than N days. Quarantine:
edit the redacted preview, then release it (it must pass the write-gate) or discard it.
"""

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.helpers import ActionForm
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from common.admin import (
    INLINE_ROWS_MAX,
    HistoryAdmin,
    LogWithoutTexts,
    SaveChangedOnly,
    TopValuesFilter,
    confirm_bulk,
    newest_rows_formset,
)
from common.api import ApplicationError
from common.tasks import task_send, task_send_on_commit
from common.validation import MAX_DAYS
from embeddings.embedders import current_model_name
from memories import write_gate
from memories.models import Memory, MemoryQuarantine, MemoryRetrieval, MemoryWriteDecision, QuarantineStatus
from memories.selectors import memory_version_chain
from memories.services import memory_deprecate, memory_promote, quarantine_discard, quarantine_release
from memories.tasks import memory_purge_deprecated_task
from tenants.context import tenant_current_id
from tenants.models import Tenant


def _actor(request) -> str:
    return f"admin:{request.user.get_username()}"


class MemoryActionForm(ActionForm):
    reason = forms.CharField(required=False, max_length=500, help_text="Required to deprecate")
    days = forms.IntegerField(
        required=False, min_value=1, max_value=MAX_DAYS, initial=90, help_text="Purge: deprecated for at least this many days"
    )


class MemoryWriteDecisionInline(admin.TabularInline):
    """Observations skipped as duplicates of this memory or merged into it, with the dedupe rule's evidence. Read only."""

    model = MemoryWriteDecision
    fk_name = "memory"
    extra = 0
    can_delete = False
    ordering = ["-created_at"]
    formset = newest_rows_formset("-created_at")
    verbose_name = "skip/merge decision"
    verbose_name_plural = f"skip/merge decisions (observations folded into this memory; the newest {INLINE_ROWS_MAX})"
    fields = ["created_at", "kind", "rule", "evidence", "incoming", "source"]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description="evidence")
    def evidence(self, obj):
        parts = []
        if obj.hamming is not None:
            limit = obj.thresholds.get("simhash_max_distance")
            parts.append(f"SimHash distance {obj.hamming}" + (f" (≤ {limit})" if limit is not None else ""))
        if obj.similarity is not None:
            limit = obj.thresholds.get("semantic_duplicate")
            parts.append(f"cosine {obj.similarity:.3f}" + (f" (≥ {limit})" if limit is not None else ""))
        elif obj.thresholds.get("semantic_checked") is False:
            parts.append("no vector compared (embedder unavailable)")
        if obj.text_changed:
            parts.append("longer incoming text kept")
        return "; ".join(parts) or "—"

    @admin.display(description="incoming text (redacted)")
    def incoming(self, obj):
        return format_html('<span style="display: block; white-space: pre-wrap; max-width: 60em">{}</span>', obj.incoming_text)

    @admin.display(description="source")
    def source(self, obj):
        parts = [p for p in (obj.extractor, obj.source_session_id, obj.source_message_id) if p]
        return " · ".join(parts) or "—"


@admin.register(Memory)
class MemoryAdmin(LogWithoutTexts, HistoryAdmin):
    show_full_result_count = False  # a large table: no second count(*) of every row on each page
    list_display = [
        "id",
        "short_content",
        "user_id",
        "status",
        "memory_type",
        "topic",
        "confidence",
        "hits",
        "streak",
        "version",
        "embedded",
        "updated_at",
    ]
    list_filter = [
        "status",
        "memory_type",
        ("namespace", TopValuesFilter),
        ("user_id", TopValuesFilter),
        ("topic", TopValuesFilter),
        ("embedding", admin.EmptyFieldListFilter),
    ]
    search_fields = ["content", "topic", "user_id"]
    ordering = ["-updated_at"]
    action_form = MemoryActionForm
    actions = ["promote", "deprecate", "purge_deprecated"]
    readonly_fields = [
        "namespace",
        "user_id",
        "agent",
        "memory_type",
        "topic",
        "tags",
        "content",
        "status",
        "status_reason",
        "status_changed_by",
        "confidence",
        "hits",
        "streak",
        "version",
        "simhash",
        "content_sha256",
        "embedding_model",
        "embedded",
        "source_session_id",
        "source_message_id",
        "metadata",
        "private_agent",
        "supersedes",
        "version_chain",
        "verified_at",
        "deprecated_at",
        "last_retrieved_at",
        "created_at",
        "updated_at",
    ]
    exclude = ["embedding", "embedding_hash"]
    inlines = [MemoryWriteDecisionInline]

    def has_add_permission(self, request):
        return False  # memories come from observe and from quarantine release

    @admin.display(description="content")
    def short_content(self, obj):
        return obj.content if len(obj.content) <= 90 else obj.content[:89] + "…"

    @admin.display(boolean=True)
    def embedded(self, obj):
        """With the current model (a memory of the old one is not ranked until the backfill embeds it again)."""
        return obj.embedding is not None and obj.embedding_model == current_model_name()

    @admin.display(description="version chain")
    def version_chain(self, obj):
        chain = memory_version_chain(memory=obj)
        if len(chain) == 1:
            return "—"
        return format_html(
            "<ol>{}</ol>",
            format_html_join(
                "",
                '<li><a href="{}">#{} v{}</a> [{}] {}</li>',
                (
                    (reverse("admin:memories_memory_change", args=[m.pk]), m.pk, m.version, m.status, m.content[:80])
                    for m in chain
                ),
            ),
        )

    @admin.action(description="Promote to verified", permissions=["change"])
    def promote(self, request, queryset):
        return confirm_bulk(
            self,
            request,
            queryset,
            describe=lambda m: f"{m.status} → verified: retrieved first for {m.user_id}",
            apply=lambda m, reason: memory_promote(memory=m, actor=_actor(request), reason=reason),
            done="Promoted",
            submit="Promote",
        )

    @admin.action(description="Deprecate (give a reason)", permissions=["change"])
    def deprecate(self, request, queryset):
        reason = request.POST.get("reason", "").strip()
        if not reason:
            self.message_user(request, "Give a reason to deprecate.", messages.ERROR)
            return
        n = 0
        for m in queryset:
            memory_deprecate(memory=m, actor=_actor(request), reason=reason)
            n += 1
        self.message_user(request, f"{n} memories deprecated.", messages.SUCCESS)

    @admin.action(description="Purge deprecated memories older than N days (all users)", permissions=["delete"])
    def purge_deprecated(self, request, queryset):
        """Sent to the workers as the purge task: its batches each commit on their own (inside the request's
        transaction they would hold every lock until the page answered). Never run in this request when the broker
        is down (on a large backlog the page would time out): the reviewer is told to try again or run the command.
        With no broker at all (eager tasks) it runs here once the request commits, the only place it can."""
        raw = (request.POST.get("days") or "90").strip()
        days = int(raw) if raw.isascii() and raw.isdigit() else 0
        if not 1 <= days <= MAX_DAYS:
            self.message_user(request, f"Days must be a whole number from 1 to {MAX_DAYS}.", messages.ERROR)
            return
        what = f"The purge of deprecated memories older than {days} days (and of retrieval logs)"
        if settings.CELERY_TASK_ALWAYS_EAGER:
            task_send_on_commit(memory_purge_deprecated_task, days=days)
            self.message_user(request, f"{what} runs in batches as this page is saved.", messages.SUCCESS)
        elif task_send(memory_purge_deprecated_task, days=days, fallback_inline=False):  # the action writes nothing
            self.message_user(request, f"{what} is sent: a worker runs it in batches.", messages.SUCCESS)
        else:
            self.message_user(
                request,
                f"{what} was not sent: the task broker is unavailable. Try again later, or run "
                f"manage.py purge_deprecated_memories --older-than {days}d{_tenant_option()}.",
                messages.ERROR,
            )


def _tenant_option() -> str:
    """`` --tenant SLUG`` when the page sees one tenant (the command without it purges every tenant)."""
    tenant = tenant_current_id()
    slug = Tenant.objects.filter(pk=tenant).values_list("slug", flat=True).first() if tenant is not None else None
    return f" --tenant {slug}" if slug else ""


class QuarantineForm(forms.ModelForm):
    """The preview a reviewer edits before a release: a secret typed back in is refused here, so it is never stored,
    shown in the list or kept after a discard (release runs the whole write gate again)."""

    def clean_redacted_preview(self):
        text = self.cleaned_data["redacted_preview"]
        kinds = sorted({f.kind for f in write_gate.secret_findings(text)})
        if kinds:
            raise forms.ValidationError(f"This holds a secret ({', '.join(kinds)}): take it out, or discard the item.")
        return text


@admin.register(MemoryQuarantine)
class MemoryQuarantineAdmin(LogWithoutTexts, SaveChangedOnly, admin.ModelAdmin):
    form = QuarantineForm
    list_display = ["id", "user_id", "reason", "kinds", "short_preview", "status", "created_at", "reviewed_by"]
    list_filter = ["status", ("reason", TopValuesFilter), "memory_type", ("user_id", TopValuesFilter)]
    search_fields = ["redacted_preview", "user_id", "topic"]
    ordering = ["-created_at"]
    actions = ["release", "discard"]
    fields = [
        "status",
        "reason",
        "reason_detail",
        "finding_kinds",
        "redacted_preview",
        "user_id",
        "namespace",
        "memory_type",
        "topic",
        "tags",
        "metadata",
        "source_session_id",
        "source_message_id",
        "released_memory",
        "reviewed_by",
        "reviewed_at",
        "created_at",
    ]

    def has_add_permission(self, request):
        return False

    def get_readonly_fields(self, request, obj=None):
        editable = {"redacted_preview"} if obj is not None and obj.status == QuarantineStatus.PENDING else set()
        return [f for f in self.fields if f not in editable]

    @admin.display(description="kinds")
    def kinds(self, obj):
        return ", ".join(obj.finding_kinds)

    @admin.display(description="preview")
    def short_preview(self, obj):
        return obj.redacted_preview if len(obj.redacted_preview) <= 90 else obj.redacted_preview[:89] + "…"

    @admin.action(description="Release (the edited preview must pass the write-gate)", permissions=["change"])
    def release(self, request, queryset):
        return confirm_bulk(
            self,
            request,
            queryset,
            describe=lambda item: f"stored as a memory of {item.user_id}: {item.redacted_preview[:100]}",
            apply=lambda item, reason: quarantine_release(item=item, actor=_actor(request)),
            done="Released",
            submit="Release",
        )

    @admin.action(description="Discard", permissions=["change"])
    def discard(self, request, queryset):
        n = 0
        for item in queryset:
            try:
                quarantine_discard(item=item, actor=_actor(request))
                n += 1
            except ApplicationError as exc:
                self.message_user(request, f"#{item.pk}: {exc.message}", messages.ERROR)
        self.message_user(request, f"{n} discarded.", messages.SUCCESS)


@admin.register(MemoryRetrieval)
class MemoryRetrievalAdmin(LogWithoutTexts, admin.ModelAdmin):
    show_full_result_count = False  # a large table: no second count(*) of every row on each page
    list_display = ["id", "user_id", "namespace", "memory_ids", "degraded", "created_at"]
    list_filter = ["degraded", ("user_id", TopValuesFilter)]
    search_fields = ["user_id"]
    readonly_fields = ["namespace", "user_id", "private_agent", "query_sha256", "memory_ids", "degraded", "created_at"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
