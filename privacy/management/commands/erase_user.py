"""Erase everything the deployment stores about one user (a data subject's request)."""

from django.core.management.base import BaseCommand, CommandError

from common.api import ApplicationError
from common.text import terminal_safe
from privacy.services import user_data_erase
from tenants.context import tenant_scope
from tenants.models import Tenant
from tenants.selectors import tenant_get


class Command(BaseCommand):
    help = (
        "Delete every row of one user in one tenant, in one transaction: learned phrases, aliases, blocks, candidates, "
        "disambiguations, evidence, resolution records, classifier heads, memories, quarantined lessons, retrieval "
        "logs and their audit trail; the review log keeps its decisions on the user's items without their texts. "
        "--dry-run counts only."
    )

    def add_arguments(self, parser):
        parser.add_argument("user_id", help="The user id the agents send (user_id)")
        parser.add_argument("--tenant", help="The tenant's slug; needed when there are several tenants")
        parser.add_argument("--dry-run", action="store_true", help="Count, delete nothing")

    def handle(self, *args, user_id, tenant, dry_run, **options):
        if tenant is not None:
            workspace = tenant_get(slug=tenant)
            if workspace is None:
                raise CommandError(f"No tenant {terminal_safe(tenant)!r}.")
        else:
            slugs = list(Tenant.objects.order_by("slug").values_list("slug", flat=True)[:2])
            if len(slugs) != 1:
                raise CommandError("A user id is one tenant's user: name the tenant (--tenant SLUG).")
            workspace = tenant_get(slug=slugs[0])
        try:
            with tenant_scope([workspace.pk]):
                result = user_data_erase(user_id=user_id, dry_run=dry_run, actor="the erase_user command")
        except ApplicationError as exc:
            raise CommandError(f"{exc.field}: {exc.message}") from exc
        verb = "would delete" if dry_run else "deleted"
        rows, history = sum(result["rows"].values()), sum(result["history"].values())
        self.stdout.write(
            f"User {terminal_safe(user_id)!r} of tenant {workspace.slug}: {verb} {rows} row(s) and {history} audit-trail row(s)."
        )
        for table, n in sorted({**result["rows"], **result["history"]}.items()):
            self.stdout.write(f"  {table}: {n}")
        when = "would no longer hold" if dry_run else "no longer hold"
        self.stdout.write(
            f"  review decisions and admin log entries that {when} the user's texts: "
            f"{result['decisions_scrubbed']} and {result['admin_log_scrubbed']}"
        )
        what = "would be erased" if dry_run else "erased"
        self.stdout.write(
            f"  stored answers of idempotent requests that named the user, {what}: {result['idempotent_answers_erased']}"
        )
