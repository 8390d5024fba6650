"""A data subject's request: erase everything the deployment stores about one of its users."""

import logging
import re

from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import transaction
from django.db.models import Exists, OuterRef

from agents.services import idempotent_answers_of_user_erase
from common.api import ApplicationError
from common.db import tenant_lock
from common.validators import USER_ID_RE
from learning.services.users import erasure_candidate_ids, user_learning_erase
from memories.services.users import user_memories_erase
from review.services import ERASED, decisions_of_erased_user_scrub, items_of_user_lock
from tenants.context import tenant_current_id

logger = logging.getLogger(__name__)


ADMIN_LOG_IDS_PER_QUERY = 5_000  # object ids named in one query (a user may have many resolution records)


def _logged_models() -> set[str]:
    """The models (lower-case labels) the admin's log of changes names a row of: only their ids are collected. One
    probe of the log's content-type index per content type, not a read of the log."""
    logged = ContentType.objects.filter(Exists(LogEntry.objects.filter(content_type=OuterRef("pk")).order_by()))
    return {f"{app}.{model}" for app, model in logged.values_list("app_label", "model")}


def _admin_log_scrub(objects: dict[str, list[int]], *, logged: set[str], dry_run: bool) -> int:
    """The admin's own log of changes to these objects keeps who changed what kind of object and when, not the
    object's text (before ``common.admin.LogWithoutTexts`` its ``__str__`` named the user and their words).
    ``logged``: ``_logged_models``' answer."""
    scrubbed = 0
    for label, ids in objects.items():
        if not ids or label.lower() not in logged:
            continue
        ct = ContentType.objects.get_by_natural_key(*label.lower().split("."))
        for start in range(0, len(ids), ADMIN_LOG_IDS_PER_QUERY):
            chunk = [str(i) for i in ids[start : start + ADMIN_LOG_IDS_PER_QUERY]]
            entries = LogEntry.objects.filter(content_type=ct, object_id__in=chunk)
            scrubbed += entries.count() if dry_run else entries.update(object_repr=ERASED, change_message="")
    return scrubbed


def user_data_erase(*, user_id: str, dry_run: bool = False, actor: str = "") -> dict:
    """Delete every row of ``user_id`` in the caller's tenant scope, in one transaction: what the resolver learned
    from them and answered them (learning), their memories (memories), and their texts in the logs that name them:
    the review log (the decisions on their candidates and quarantined lessons stay, without the texts) and the
    admin's log of changes. A pending or rejected global candidate only the user's clicks proposed goes too; one
    others proposed too stays, less the user's clicks. Rows the user never appears in stay: global phrases, global
    candidates a reviewer approved, the agents' feedback on actions, API keys. The stored answers of idempotent
    requests that named the user, or that name them, are replaced by a 410 (a retry learns the write is gone). ``actor`` (who asked) goes
    to the log line, with the tenant, not the user id. Refused outside one tenant's scope: a user id is one tenant's.

    ``dry_run``: count, delete nothing (the audit-trail rows counted include the one each deletion would write).
    Answers the rows per table, audit-trail rows per table, the log entries scrubbed and the stored answers erased."""
    if tenant_current_id() is None:
        raise ApplicationError("An erasure runs in the scope of the user's tenant, and of it alone: name it.", field="tenant")
    if not isinstance(user_id, str) or not re.fullmatch(USER_ID_RE, user_id):
        raise ApplicationError(
            "Not a user id: 1-128 letters, digits or _ . : @ -, starting with a letter or digit.", field="user_id"
        )
    with transaction.atomic():
        global_candidates = None
        if not dry_run:
            # one erasure at a time in a tenant: two users who proposed the same global candidate are erased one
            # after the other, and the second reads what the first left (it may then delete the candidate)
            tenant_lock("privacy:erase:")
            # a reviewer's decision on one of the items the erasure deletes ends first
            candidate_ids, global_candidates = erasure_candidate_ids(user_id=user_id)
            items_of_user_lock(user_id=user_id, candidate_ids=candidate_ids)
        logged = _logged_models()
        # the ids the logs need: the admin log's models, and the candidates and lessons the review log names
        ids_of = logged | {"learning.learningcandidate", "memories.memoryquarantine"}
        learning = user_learning_erase(user_id=user_id, dry_run=dry_run, global_candidates=global_candidates, ids_of=ids_of)
        memories = user_memories_erase(user_id=user_id, dry_run=dry_run, ids_of=ids_of)
        objects = {**learning["objects"], **memories["objects"]}
        decisions = decisions_of_erased_user_scrub(
            user_id=user_id,
            candidate_ids=objects.get("learning.LearningCandidate", []),
            quarantine_ids=objects.get("memories.MemoryQuarantine", []),
            dry_run=dry_run,
        )
        admin_log = _admin_log_scrub(objects, logged=logged, dry_run=dry_run)
        answers = idempotent_answers_of_user_erase(user_id=user_id, dry_run=dry_run)
    result = {
        "user_id": user_id,
        "dry_run": dry_run,
        "rows": {**learning["rows"], **memories["rows"]},
        "history": {**learning["history"], **memories["history"]},
        "decisions_scrubbed": decisions,
        "admin_log_scrubbed": admin_log,
        "idempotent_answers_erased": answers,
    }
    if not dry_run:
        logger.info(
            "erased a user's data at the request of %s in tenant %s: %d rows, %d audit-trail rows, %d review decisions "
            "and %d admin log entries without their texts, %d stored answers to idempotent requests erased",
            actor or "an operator",
            tenant_current_id(),
            sum(result["rows"].values()),
            sum(result["history"].values()),
            decisions,
            admin_log,
            answers,
        )
    return result
