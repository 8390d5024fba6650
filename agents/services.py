"""Writes for agents and API keys."""

import re
import unicodedata

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from agents.authentication import verified_keys_forget
from agents.models import Agent, ApiKey, IdempotentRequest, Scope, generate_key, hash_key
from common.api import ApplicationError, Conflict
from common.db import rows_delete_in_batches
from common.text import visible_text
from common.validators import USER_ID_RE
from tenants.models import Tenant
from tenants.selectors import tenant_default


def _has_control(text: str) -> bool:
    """Control or surrogate characters, or nothing visible at all (only zero-width or format characters)."""
    return any(unicodedata.category(c) in ("Cc", "Cs") for c in text) or not visible_text(text).strip()


def agent_key_create(
    *,
    agent_name: str,
    scopes: list[str],
    key_name: str = "default",
    tenant: Tenant | None = None,
    unique_name: bool = False,
) -> tuple[ApiKey, str]:
    """Create the agent (in ``tenant``, default: the default tenant) if needed and a new key for it;
    return (key, raw key shown once). With ``unique_name``, refuse a key name the agent already has on an
    active (unrevoked) key."""
    scopes = api_key_scopes_validate(scopes=scopes)
    name = agent_name_validate(name=agent_name)
    key_name = api_key_name_validate(name=key_name)
    tenant = tenant or tenant_default()
    with transaction.atomic():
        agent, _ = Agent.objects.get_or_create(name=name, tenant=tenant)
        if unique_name:
            Agent.objects.select_for_update().filter(pk=agent.pk).first()  # one creator of this agent's keys at a time
            if agent.keys.filter(name=key_name, revoked_at__isnull=True).exists():
                raise ApplicationError(
                    f"Agent {name!r} already has an active key named {key_name!r}; "
                    "choose another key name or revoke that key first.",
                    field="key_name",
                )
        raw, prefix = generate_key()
        key = ApiKey.objects.create(agent=agent, name=key_name, prefix=prefix, key_hash=hash_key(raw), scopes=scopes)
    return key, raw


def api_key_scopes_validate(*, scopes) -> list[str]:
    """The scopes as a key stores them: known names, sorted, without repeats; at least one."""
    valid = {s.value for s in Scope}
    if isinstance(scopes, str) or not isinstance(scopes, (list, tuple, set, frozenset)):
        raise ApplicationError(f"Scopes are a list of names. Valid: {', '.join(sorted(valid))}.", field="scopes")
    unknown = sorted({str(s) for s in scopes} - valid)
    if unknown:
        raise ApplicationError(f"Unknown scope(s): {', '.join(unknown)}. Valid: {', '.join(sorted(valid))}.", field="scopes")
    if not scopes:
        raise ApplicationError("At least one scope is needed.", field="scopes")
    return sorted({str(s) for s in scopes})


def agent_name_validate(*, name: str) -> str:
    """An agent's name, stripped: 1 to 100 characters that show something, no control characters."""
    name = name.strip() if isinstance(name, str) else ""
    if not name or len(name) > 100:
        raise ApplicationError("Agent name must be 1 to 100 characters.", field="name")
    if _has_control(name):
        raise ApplicationError("Agent name must not contain control characters, and must show something.", field="name")
    return name


def api_key_name_validate(*, name: str) -> str:
    """A key's name, stripped: 1 to 100 characters that show something, no control characters."""
    limit = ApiKey._meta.get_field("name").max_length
    name = name.strip() if isinstance(name, str) else ""
    if not name or len(name) > limit:
        raise ApplicationError(f"Key name must be 1 to {limit} characters.", field="key_name")
    if _has_control(name):
        raise ApplicationError("Key name must not contain control characters, and must show something.", field="key_name")
    return name


def api_key_update(*, key: ApiKey, name: str, scopes: list[str]) -> ApiKey:
    """Rename a key and set its scopes (admin); like a revocation, it takes effect at once in this process and
    within API_KEY_CACHE_S everywhere else."""
    name = api_key_name_validate(name=name)
    scopes = api_key_scopes_validate(scopes=scopes)
    with transaction.atomic():
        key.name, key.scopes = name, scopes
        key.save(update_fields=["name", "scopes"])
        transaction.on_commit(verified_keys_forget)
    verified_keys_forget()
    return key


def api_key_revoke(*, key: ApiKey) -> ApiKey:
    """Revoke a key: refused from now on in this process, within API_KEY_CACHE_S everywhere else."""

    with transaction.atomic():
        ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
        key.refresh_from_db()
        transaction.on_commit(verified_keys_forget)
    verified_keys_forget()
    return key


# --- Idempotency keys ---


IDEMPOTENCY_KEY_MAX = 255


def idempotency_key_check(*, key, field: str) -> str:
    """``key`` if it can be an idempotency key (1 to 255 printable ASCII characters), else a 400 naming ``field``."""
    if not isinstance(key, str) or not key or len(key) > IDEMPOTENCY_KEY_MAX or not key.isascii() or not key.isprintable():
        raise ApplicationError(f"{field} must be 1 to {IDEMPOTENCY_KEY_MAX} printable ASCII characters.", field=field)
    return key


def idempotent_request_claim(
    *,
    agent: Agent,
    key: str,
    method: str,
    path: str,
    request_hash: str,
    field: str = "Idempotency-Key",
    user_id=None,
) -> IdempotentRequest | None:
    """Claim ``key`` for this request, in the request's own transaction (the claim commits with the write, or
    neither does). None: claimed, answer the request and store the answer. Otherwise the request stored under the
    key, to be answered again; a concurrent request with the key is waited for (its INSERT holds the key until it
    commits or rolls back). The same key on another request is a 409 naming ``field`` (where the caller sent the
    key: REST's header, MCP's ``_meta`` member); a key older than API_IDEMPOTENCY_TTL_S is free again.
    ``user_id``: the user the request names (its body's ``user_id``), kept with the answer so that the user's
    erasure erases it (``idempotent_answers_of_user_erase``); anything but a user id is not kept."""
    users = _user_ids([user_id.strip() if isinstance(user_id, str) else None])
    cutoff = timezone.now() - timezone.timedelta(seconds=settings.API_IDEMPOTENCY_TTL_S)
    IdempotentRequest.objects.filter(agent=agent, key=key, created_at__lt=cutoff).delete()
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {IdempotentRequest._meta.db_table} "
            "(tenant_id, agent_id, key, method, path, request_hash, user_ids, created_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, now()) ON CONFLICT (agent_id, key) DO NOTHING RETURNING id",
            [agent.tenant_id, agent.pk, key, method, path[:500], request_hash, users],
        )
        if cursor.fetchone() is not None:
            return None
    stored = IdempotentRequest.objects.get(agent=agent, key=key)
    if stored.request_hash != request_hash:
        raise Conflict(
            f"The idempotency key {key!r} ({field}) was sent with another request ({stored.method} {stored.path}); "
            "use a new key for a new request.",
            field=field,
            code="idempotency_key_reused",
        )
    return stored


def _user_ids(values) -> list[str]:
    """The user ids among ``values`` (anything else left out), each once, in order."""
    return list(dict.fromkeys(v for v in values if isinstance(v, str) and re.fullmatch(USER_ID_RE, v)))


def _named_users(value, depth: int = 0) -> list[str]:
    """The values of every ``user_id`` member in a JSON answer, at any depth (bounded, as the body's nesting is)."""
    if depth > settings.API_MAX_JSON_DEPTH:
        return []
    if isinstance(value, dict):
        found = [value.get("user_id")]
        for member in value.values():
            found += _named_users(member, depth + 1)
        return found
    if isinstance(value, list):
        return [u for item in value for u in _named_users(item, depth + 1)]
    return []


def idempotent_request_store(*, agent: Agent, key: str, status_code: int, response, embedding_pending: bool = False) -> None:
    """Store the answer of the request that claimed ``key`` (in its transaction), with the users it names (for
    their erasure); ``embedding_pending``: it said that rows were stored without their vectors
    (X-Embedding-Pending), which its replays say too."""
    claimed = IdempotentRequest.objects.filter(agent=agent, key=key, status_code__isnull=True)
    named = _user_ids(_named_users(response))
    users = _user_ids([*(claimed.values_list("user_ids", flat=True).first() or []), *named]) if named else None
    claimed.update(
        status_code=status_code,
        response=response,
        embedding_pending=embedding_pending,
        **({"user_ids": users} if users is not None else {}),
    )


def idempotent_request_release(*, agent: Agent, key: str) -> None:
    """Free ``key``: the request failed and stored nothing, so sending it again must run it again."""
    IdempotentRequest.objects.filter(agent=agent, key=key, status_code__isnull=True).delete()


ERASED_ANSWER = {
    "detail": "The answer to this request was erased with its user's data, and so was what the request stored; "
    "send it again with a new idempotency key to apply it again.",
    "code": "erased",
    "fields": {},
}


def idempotent_answers_of_user_erase(*, user_id: str, dry_run: bool = False) -> int:
    """In the caller's tenant scope, replace the stored answers that may quote ``user_id`` (of the requests that
    named them, or that name them: ``user_ids``) with ``ERASED_ANSWER`` (410): a retry with the key learns that
    what it wrote is gone, and is not applied again. Answers how many (``dry_run``: counts only)."""
    named = IdempotentRequest.objects.filter(status_code__isnull=False, user_ids__contains=[user_id])
    if dry_run:
        return named.count()
    return named.update(status_code=410, response=ERASED_ANSWER, embedding_pending=False, user_ids=[])


def idempotent_requests_purge() -> int:
    """Delete stored answers older than API_IDEMPOTENCY_TTL_S; answers how many."""
    cutoff = timezone.now() - timezone.timedelta(seconds=settings.API_IDEMPOTENCY_TTL_S)
    return rows_delete_in_batches(IdempotentRequest.objects.filter(created_at__lt=cutoff))
