"""A data subject's request: erase everything the deployment stores about one of its users."""

import logging
import re

from django.db import transaction

from common.api import ApplicationError
from common.validators import USER_ID_RE
from learning.services.users import user_learning_erase
from memories.services.users import user_memories_erase
from review.models import Kind
from review.services import decisions_of_erased_items_scrub

logger = logging.getLogger(__name__)


def user_data_erase(*, user_id: str, dry_run: bool = False) -> dict:
    """Delete every row of ``user_id`` in the caller's tenant scope, in one transaction: what the resolver learned
    from them and answered them (learning), their memories (memories), and the texts the review log kept of their
    items (their candidates and quarantined lessons; the decisions stay, without the texts). Rows the user
    never appears in stay: global phrases and candidates, the agents' feedback on actions, API keys. An
    idempotent request's stored answer may still quote them until it expires (``API_IDEMPOTENCY_TTL_S``).

    ``dry_run``: count, delete nothing. Answers the rows per table, audit-trail rows per table, and the review
    decisions scrubbed."""
    if not isinstance(user_id, str) or not re.fullmatch(USER_ID_RE, user_id):
        raise ApplicationError(
            "Not a user id: 1-128 letters, digits or _ . : @ -, starting with a letter or digit.", field="user_id"
        )
    with transaction.atomic():
        learning = user_learning_erase(user_id=user_id, dry_run=dry_run)
        memories = user_memories_erase(user_id=user_id, dry_run=dry_run)
        scrubbed = 0
        if not dry_run:
            scrubbed += decisions_of_erased_items_scrub(kind=Kind.CANDIDATE, object_ids=learning["candidate_ids"])
            scrubbed += decisions_of_erased_items_scrub(kind=Kind.QUARANTINE, object_ids=memories["quarantine_ids"])
    result = {
        "user_id": user_id,
        "dry_run": dry_run,
        "rows": {**learning["rows"], **memories["rows"]},
        "history": {**learning["history"], **memories["history"]},
        "decisions_scrubbed": scrubbed,
    }
    if not dry_run:
        logger.info(
            "erased user data: %d rows, %d audit-trail rows, %d review decisions scrubbed",
            sum(result["rows"].values()),
            sum(result["history"].values()),
            scrubbed,
        )
    return result
