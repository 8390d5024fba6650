"""The admin's log entries written before the admins of users' data named rows by kind and key
(``common.admin.LogWithoutTexts``) lose the texts they quoted: a row deleted since (an erasure, a retention purge)
left its words there, out of the erasure's reach. Each entry keeps who changed what kind of row, which one and when."""

import json

from django.db import migrations

# The models whose admins log rows by kind and key: their rows hold a user's words or id.
USER_DATA_MODELS = (
    ("learning", "learningcandidate"),
    ("learning", "resolutionrecord"),
    ("learning", "phraseimportjob"),
    ("learning", "disambiguationrequest"),
    ("learning", "learningsignal"),
    ("learning", "phraseevidence"),
    ("learning", "learnedphrase"),
    ("learning", "entityalias"),
    ("learning", "phraseblock"),
    ("memories", "memory"),
    ("memories", "memoryquarantine"),
    ("memories", "memoryretrieval"),
)
BATCH = 2000


def _message_without_texts(message: str) -> str:
    """A change message's inline rows named by their kind, as ``LogWithoutTexts`` names them when it has no row;
    a message that is not Django's JSON list (free text) is dropped."""
    try:
        entries = json.loads(message) if message else []
    except ValueError:
        return ""
    if not isinstance(entries, list):
        return ""
    for entry in entries:
        for detail in entry.values() if isinstance(entry, dict) else ():
            if isinstance(detail, dict) and "object" in detail:
                detail["object"] = str(detail.get("name", ""))
    return json.dumps(entries)


def forwards(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    LogEntry = apps.get_model("admin", "LogEntry")
    for app_label, model_name in USER_DATA_MODELS:
        ct = ContentType.objects.filter(app_label=app_label, model=model_name).first()
        if ct is None:
            continue
        name = str(apps.get_model(app_label, model_name)._meta.verbose_name)
        last = 0
        while True:
            batch = list(LogEntry.objects.filter(content_type=ct, pk__gt=last).order_by("pk")[:BATCH])
            if not batch:
                break
            last = batch[-1].pk
            for entry in batch:
                entry.object_repr = f"{name} #{entry.object_id}"[:200]
                entry.change_message = _message_without_texts(entry.change_message)
            LogEntry.objects.bulk_update(batch, ["object_repr", "change_message"])


class Migration(migrations.Migration):
    dependencies = [
        ("admin", "0003_logentry_add_action_flag_choices"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("learning", "0024_phraseevidence_user_scope"),
        ("memories", "0008_embedding_stale_indexes"),
    ]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
