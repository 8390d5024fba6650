from rest_framework import serializers

from common.fields import StrictSerializer, UserIdField


class UserEraseSerializer(StrictSerializer):
    user_id = UserIdField(console=True, help_text="The user id the agents send (or a console user's, console:<name>)")
    tenant = serializers.RegexField(
        r"^[-a-zA-Z0-9_]{1,60}$",
        max_length=60,
        required=False,
        help_text="The user's tenant (slug); needed when the reviewer sees several tenants (else 409 ambiguous)",
        error_messages={"invalid": "Not a tenant slug."},
    )
    dry_run = serializers.BooleanField(default=False, help_text="Count what would be deleted, delete nothing")


class UserEraseResultSerializer(serializers.Serializer):
    user_id = serializers.CharField()
    tenant = serializers.CharField()
    dry_run = serializers.BooleanField()
    rows = serializers.DictField(child=serializers.IntegerField(), help_text="Rows deleted (or counted) per table")
    history = serializers.DictField(child=serializers.IntegerField(), help_text="Audit-trail rows per table")
    decisions_scrubbed = serializers.IntegerField(help_text="Review decisions that no longer hold the user's texts")
    admin_log_scrubbed = serializers.IntegerField(help_text="Admin log entries that no longer hold the user's texts")
    idempotent_answers_erased = serializers.IntegerField(
        help_text="Stored answers of idempotent requests that named the user, now a 410 for a retry"
    )
