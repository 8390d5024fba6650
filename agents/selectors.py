"""Reads for agents."""

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from agents.models import Agent
from common.api import ApplicationError, Conflict, NotFound
from common.lookups import tenant_one
from common.parsers import text_problem


def _id_or_name_check(*, ref: str, tenant: str | None) -> None:
    """Digits are an agent's id, or the name of another agent (a name may be digits): both at once is refused
    (409 ``ambiguous``), never one picked."""
    if tenant is not None and not tenant.strip():
        return  # tenant_one refuses the empty tenant
    matches = Agent.objects.filter(Q(pk=int(ref)) | Q(name=ref)).select_related("tenant")
    rows = list(matches.filter(tenant__slug=tenant) if tenant else matches)
    by_id = [a for a in rows if a.pk == int(ref)]
    named = sorted({a.tenant.slug for a in rows if a.pk != int(ref)})
    if by_id and named:
        raise Conflict(
            f"Agent {ref} is the id of agent {by_id[0].name!r} (tenant {by_id[0].tenant.slug}) and the name of an "
            f"agent in {', '.join(named)}; give the id of the one you mean.",
            field="agent",
            code="ambiguous",
        )


def agent_get(*, ref, tenant: str | None = None) -> Agent:
    """An agent by id or by name (commands take either), in the tenant with slug ``tenant`` when given. Names are
    unique per tenant only: a name several tenants use is refused without the tenant (never one picked at random);
    so are digits that are one agent's id and another's name.
    Text the database cannot store (a NUL, a lone surrogate such as undecodable command-line bytes give) is refused
    here, before any query; an id is ASCII digits only ("²" is a name, and no agent's)."""
    ref = str(ref).strip()
    if not ref:  # an empty --agent (a variable left unset) names no agent, and never means "every agent"
        raise ApplicationError("The agent is empty; give an id or a name.", field="agent")
    for what, text in (("agent", ref), ("tenant", tenant or "")):
        problem = text_problem(text)
        if problem:
            raise ApplicationError(f"The {what} {problem}; give an id or a name.", field=what)
    is_id = ref.isascii() and ref.isdecimal()
    if is_id:
        _id_or_name_check(ref=ref, tenant=tenant)
    return tenant_one(
        Agent.objects.filter(Q(pk=int(ref)) | Q(name=ref)) if is_id else Agent.objects.filter(name=ref),
        tenant=tenant,
        label=f"Agent {ref}",
        field="agent",
        missing=f"Agent {ref} not found",
        hint="name its tenant (--tenant SLUG) or give its id",
    )


def agent_shared_required(*, agent: Agent) -> None:
    """Refuse (409) work that hands an agent's private user data to the shared agents while it is still private,
    or while the switch may not have reached every process yet (they keep an agent with its key for
    ``API_KEY_CACHE_S``: until then a request may still write a private row, which the work would leave behind;
    code ``switch_settling`` with ``retry_after_s``). Reads the agent's row afresh, locked until the caller's
    transaction ends, so a switch back to private waits for the work (or the work sees it)."""
    # the row is locked whatever its flag (a filter on the flag would lock nothing once the agent is shared)
    private = Agent.objects.select_for_update().filter(pk=agent.pk).values_list("private_user_data", flat=True).first()
    if private is None:
        raise NotFound(f"Agent {agent.name!r} no longer exists.", field="agent")
    if private:
        raise Conflict(
            f"Agent {agent.name!r} still keeps its user data private; switch private_user_data off first (admin, Agents).",
            field="agent",
            code="still_private",
        )
    left = agent_switch_settling_s(agent=agent)
    if left > 0:
        raise Conflict(
            f"Agent {agent.name!r} was switched to shared user data {settings.API_KEY_CACHE_S:g} s ago or less; its "
            f"requests may still write private rows for {left:.1f} s more. Run it again then.",
            field="agent",
            code="switch_settling",
            extra={"retry_after_s": round(left, 3)},
        )


def agent_switch_settling_s(*, agent: Agent) -> float:
    """Seconds until every process sees that the agent's user data is no longer private (0 when they do, or when
    it never was): the switch is the first change recorded after the agent's newest private state."""
    rows = Agent.history.filter(id=agent.pk).order_by("history_date", "history_id")
    private_at = rows.filter(private_user_data=True).values_list("history_date", flat=True).last()
    if private_at is None:
        return 0.0
    switched_at = rows.filter(private_user_data=False, history_date__gt=private_at).values_list("history_date", flat=True).first()
    if switched_at is None:
        return 0.0
    return max(0.0, settings.API_KEY_CACHE_S - (timezone.now() - switched_at).total_seconds())


def agent_private_user_data(pk: int) -> bool | None:
    """The agent's ``private_user_data`` as stored now (None: no such agent in scope)."""
    return Agent.objects.filter(pk=pk).values_list("private_user_data", flat=True).first()


def agents_private(*, ids) -> set[int]:
    """Of these agent ids, those of agents with private user data."""
    return set(Agent.objects.filter(pk__in=list(ids), private_user_data=True).values_list("pk", flat=True))


def agents_gone_private(*, ids) -> set[int]:
    """Of these agent ids, those of agents deleted since that kept their user data private when last recorded (or
    left no record): their users' data went with them and must not become the shared agents'."""
    gone = set(ids) - set(Agent.objects.filter(pk__in=list(ids)).values_list("pk", flat=True))
    last: dict[int, bool] = {}
    for pk, private in (
        Agent.history.filter(id__in=list(gone))
        .order_by("id", "-history_date", "-history_id")
        .values_list("id", "private_user_data")
    ):
        last.setdefault(pk, private)
    return {pk for pk in gone if last.get(pk, True)}
