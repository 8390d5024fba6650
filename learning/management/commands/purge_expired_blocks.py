"""Delete expired blocklist entries (they already stopped applying at their expiry)."""

from django.core.management.base import BaseCommand

from learning.services.blocks import phrase_blocks_purge_expired


class Command(BaseCommand):
    help = "Delete blocklist entries whose expiry has passed, and say how many."

    def handle(self, *args, **options):
        count = phrase_blocks_purge_expired()
        self.stdout.write(f"Purged {count} expired blocklist entr{'y' if count == 1 else 'ies'}.")
