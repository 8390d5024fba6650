"""Writes for agents and API keys."""

from django.db import transaction
from django.utils import timezone

from agents.authentication import verified_keys_forget
from agents.models import Agent, ApiKey, Scope, generate_key, hash_key
from common.api import ApplicationError
from tenants.models import Tenant
from tenants.selectors import tenant_default


def agent_key_create(
    *, agent_name: str, scopes: list[str], key_name: str = "default", tenant: Tenant | None = None
) -> tuple[ApiKey, str]:
    """Create the agent (in ``tenant``, default: the default tenant) if needed and a new key for it;
    return (key, raw key shown once)."""
    valid = {s.value for s in Scope}
    unknown = sorted(set(scopes) - valid)
    if unknown:
        raise ApplicationError(f"Unknown scope(s): {', '.join(unknown)}. Valid: {', '.join(sorted(valid))}.", field="scopes")
    if not scopes:
        raise ApplicationError("At least one scope is needed.", field="scopes")
    name = agent_name.strip()
    if not name or len(name) > 100:
        raise ApplicationError("Agent name must be 1 to 100 characters.", field="name")
    key_name = key_name.strip()
    if not key_name or len(key_name) > ApiKey._meta.get_field("name").max_length:
        raise ApplicationError(f"Key name must be 1 to {ApiKey._meta.get_field('name').max_length} characters.", field="key_name")
    tenant = tenant or tenant_default()
    with transaction.atomic():
        agent, _ = Agent.objects.get_or_create(name=name, tenant=tenant)
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
