"""Memories whose content holds a character normalisation now rewrites (typographic quotes and dashes,
characters that show nothing) get their SimHash computed again, so near-duplicates of new text are found."""

from django.db import migrations

from common.text import rewritten_pattern
from memories.simhash import simhash_hex
from tenants.rls import every_tenant


def simhash_again(apps, schema_editor):
    """Every tenant's memories (forced row-level security, local to the transaction)."""
    db = schema_editor.connection.alias
    Memory = apps.get_model("memories", "Memory")
    with every_tenant(schema_editor.connection):
        rows = list(
            Memory._base_manager.using(db).filter(content__regex=rewritten_pattern()).values_list("pk", "content", "simhash")
        )
        for pk, content, fingerprint in rows:
            if simhash_hex(content) != fingerprint:
                Memory._base_manager.using(db).filter(pk=pk).update(simhash=simhash_hex(content))


class Migration(migrations.Migration):
    dependencies = [("memories", "0006_memoryretrieval_private_agent")]

    operations = [migrations.RunPython(simhash_again, migrations.RunPython.noop)]
