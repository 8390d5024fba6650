"""Writes of the verb catalogue and of entity aliases."""

import logging
from collections.abc import Iterable

from django.db import IntegrityError, transaction
from django.db.models import Count

from common.api import ApplicationError, Conflict
from common.text import normalize_phrase, text_hash
from embeddings.services import embedding_assign, embeddings_by_text
from learning.catalogue import VerbEntry
from learning.decision import verb_words
from learning.models import EntityAlias, Verb, VerbPhrase
from learning.selectors import verb_details_forget
from learning.services.decisions import decision_prior_fit_send

logger = logging.getLogger(__name__)


SHARED_PHRASES_LISTED = 20  # texts named in a load's answer among those that more than one verb holds


def verb_catalogue_load(*, entries: Iterable[VerbEntry], progress: bool = False, replace_phrases: bool = False) -> dict:
    """Create or update verbs and their phrases, all or nothing. A field an entry leaves None keeps the verb's (a
    verb retired in the admin stays retired unless the file says ``is_active: true``). Phrases are added; with
    ``replace_phrases``, a verb whose entry lists phrases also loses those the entry does not list (typed in the
    admin, or dropped from the file since). When phrases were added or removed or a verb was retired or switched
    back on, the catalogue prior (and the retrieval floors measured with it) is refitted once this commits.

    Answers counts, the names of verbs switched back on and retired, and ``shared``: up to SHARED_PHRASES_LISTED
    of the file's texts that another active verb of the catalogue holds too (the resolver then offers both and asks),
    ``shared_count`` how many. ``progress``: a tqdm bar while the new phrases are embedded."""
    entries = list(entries)
    wanted = {e.name: [(p, normalize_phrase(p)) for p in e.phrases] for e in entries}
    existing = {(v, n) for v, n in VerbPhrase.objects.filter(verb__name__in=wanted).values_list("verb__name", "normalized")}
    new_phrases = []
    for name, phrases in wanted.items():
        seen = set()
        for text, norm in phrases:
            if norm and (name, norm) not in existing and norm not in seen:
                seen.add(norm)
                new_phrases.append((name, text, norm))
    vectors, model = embeddings_by_text(texts=[n for _, _, n in new_phrases], progress=progress)  # before the transaction

    counts = {
        "verbs_created": 0,
        "verbs_updated": 0,
        "phrases_added": len(new_phrases),
        "unembedded": 0,
        "phrases_removed": 0,
        "reactivated": [],
        "retired": [],
        "shared": [],
        "shared_count": 0,
    }
    with transaction.atomic():
        was = {
            name: (active, verb_words(name, domain, shown))
            for name, active, domain, shown in Verb.objects.select_for_update()
            .filter(name__in=wanted)
            .values_list("name", "is_active", "domain", "display_name")
        }
        was_active = {name: active for name, (active, _) in was.items()}
        named = False  # a verb with new words for its name: the prior compares queries with the names
        verbs = {}
        for e in entries:
            fields = {"domain": e.domain}
            fields.update({k: getattr(e, k) for k in ("display_name", "description", "is_active") if getattr(e, k) is not None})
            verb, created = Verb.objects.update_or_create(
                name=e.name,
                defaults=fields,
                create_defaults={"display_name": "", "description": "", "is_active": True, **fields},
            )
            counts["verbs_created" if created else "verbs_updated"] += 1
            named = named or created or was[e.name][1] != verb_words(verb.name, verb.domain, verb.display_name)
            if not created and was_active.get(e.name) != verb.is_active:
                counts["reactivated" if verb.is_active else "retired"].append(e.name)
            verbs[e.name] = verb
        rows = [VerbPhrase(verb=verbs[name], text=text, normalized=norm) for name, text, norm in new_phrases]
        embedded = [r for r in rows if r.normalized in vectors]
        embedding_assign(rows=embedded, vectors=[vectors[r.normalized] for r in embedded], model=model)
        VerbPhrase.objects.bulk_create(rows, ignore_conflicts=True)
        if replace_phrases:
            for e in entries:
                if e.lists_phrases:
                    keep = {norm for _, norm in wanted[e.name]}
                    counts["phrases_removed"] += (
                        VerbPhrase.objects.filter(verb=verbs[e.name]).exclude(normalized__in=keep).delete()[0]
                    )
        shared = (
            VerbPhrase.objects.filter(
                normalized__in={norm for phrases in wanted.values() for _, norm in phrases}, verb__is_active=True
            )
            .values("normalized")
            .annotate(verbs=Count("verb", distinct=True))
            .filter(verbs__gt=1)
            .order_by("normalized")
            .values_list("normalized", flat=True)
        )
        counts["shared_count"] = shared.count()
        counts["shared"] = list(shared[:SHARED_PHRASES_LISTED])
        transaction.on_commit(verb_details_forget)
        if new_phrases or counts["phrases_removed"] or counts["reactivated"] or counts["retired"] or named:
            # the prior, the floors and the names follow the catalogue (a broker outage: the daily refit catches up)
            decision_prior_fit_send()
    counts["unembedded"] = len(rows) - len(embedded)
    return counts


def _embed_changed(rows: list) -> None:
    """Give rows whose normalized text changed (or never had a vector) a vector of it; a row the embedder could not
    serve loses its stale vector, and the backfill fills it later."""
    changed = [r for r in rows if not r.has_embedding or r.embedding_hash != text_hash(r.normalized)]
    vectors, model = embeddings_by_text(texts=[r.normalized for r in changed])
    for row in changed:
        if row.normalized in vectors:
            embedding_assign(rows=[row], vectors=[vectors[row.normalized]], model=model)
        else:
            row.embedding, row.embedding_model, row.embedding_hash = None, "", ""


def verb_edit(*, verb: Verb, fields: list[str] | None = None) -> Verb:
    """A verb edited by hand (the admin's verb page): saved (an edit: only ``fields``, the ones the page changed, so
    nothing a catalogue load wrote meanwhile is put back; none: nothing), and the verbs' cache dropped once this
    commits; retired or switched back on (its phrases are in or out of the anchors) or renamed (the decision compares
    queries with the verbs' names), the catalogue prior refits."""
    if fields is not None and not fields:
        return verb
    with transaction.atomic():
        was = (
            Verb.objects.filter(pk=verb.pk).values_list("is_active", "name", "domain", "display_name").first()
            if verb.pk
            else None
        )
        verb.save(update_fields=fields)
        transaction.on_commit(verb_details_forget)
        if was is not None and (
            was[0] != verb.is_active or verb_words(*was[1:]) != verb_words(verb.name, verb.domain, verb.display_name)
        ):
            decision_prior_fit_send()
    return verb


def verb_phrases_edit(*, verb: Verb, phrases: list[VerbPhrase] = (), deleted: list[VerbPhrase] = ()) -> None:
    """A verb's catalogue phrases edited by hand: each normalized and embedded, removed ones deleted. As after a
    load, the verbs' cache is dropped and the catalogue prior refits once this commits. A phrase with nothing to
    match, or one the verb has already, is refused (400 / 409)."""
    if not phrases and not deleted:
        return
    for row in phrases:
        row.normalized = normalize_phrase(row.text)
        if not row.normalized:
            raise ApplicationError("The phrase has no words to match.", field="text")
    _embed_changed(list(phrases))
    try:
        with transaction.atomic():
            for row in deleted:
                row.delete()
            for row in phrases:
                row.verb = verb
                row.save()
            transaction.on_commit(verb_details_forget)
            decision_prior_fit_send()
    except IntegrityError as exc:
        raise Conflict("The verb has that phrase already (after normalisation).", field="text", code="duplicate") from exc


def entity_alias_save(*, alias: EntityAlias, fields: list[str] | None = None) -> EntityAlias:
    """An alias added or edited by hand: its normalized text and vector follow its text. An edit saves only
    ``fields`` (the ones the page changed, with what follows the text), so nothing an approval wrote meanwhile (its
    confidence, count, state) is put back; none: nothing. One the scope has already (same normalized text and type,
    for the same user) is refused (409)."""
    if fields is not None and not fields:
        return alias
    alias.normalized = normalize_phrase(alias.alias)
    if not alias.normalized:
        raise ApplicationError("The alias has no words to match.", field="alias")
    _embed_changed([alias])
    if fields is not None and "alias" in fields:
        fields = [*fields, "normalized", "embedding", "embedding_model", "embedding_hash"]
    try:
        with transaction.atomic():
            alias.save(update_fields=fields)
    except IntegrityError as exc:
        raise Conflict("That alias exists already for this type and user.", field="alias", code="duplicate") from exc
    return alias
