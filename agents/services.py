"""Writes for agents and API keys."""

import unicodedata

from django.db import transaction
from django.utils import timezone

from agents.authentication import verified_keys_forget
from agents.models import Agent, ApiKey, Scope, generate_key, hash_key
from common.api import ApplicationError
from tenants.models import Tenant
from tenants.selectors import tenant_default


def _has_control(text: str) -> bool:
    return any(unicodedata.category(c) in ("Cc", "Cs") for c in text)


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
    valid = {s.value for s in Scope}
    unknown = sorted(set(scopes) - valid)
    if unknown:
        raise ApplicationError(f"Unknown scope(s): {', '.join(unknown)}. Valid: {', '.join(sorted(valid))}.", field="scopes")
    if not scopes:
        raise ApplicationError("At least one scope is needed.", field="scopes")
    name = agent_name.strip()
    if not name or len(name) > 100:
        raise ApplicationError("Agent name must be 1 to 100 characters.", field="name")
    if _has_control(name):
        raise ApplicationError("Agent name must not contain control characters.", field="name")
    key_name = key_name.strip()
    if not key_name or len(key_name) > ApiKey._meta.get_field("name").max_length:
        raise ApplicationError(f"Key name must be 1 to {ApiKey._meta.get_field('name').max_length} characters.", field="key_name")
    if _has_control(key_name):
        raise ApplicationError("Key name must not contain control characters.", field="key_name")
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
        key = ApiKey.objects.create(agent=agent, name=key_name, prefix=prefix, key_hash=hash_key(raw), scopes=sorted(set(scopes)))
    return key, raw


def api_key_revoke(*, key: ApiKey) -> ApiKey:
    """Revoke a key: refused from now on in this process, within API_KEY_CACHE_S everywhere else."""

    with transaction.atomic():
        ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
        key.refresh_from_db()
        transaction.on_commit(verified_keys_forget)
    verified_keys_forget()
    return key
