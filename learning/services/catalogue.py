"""Writes of the verb catalogue."""

import logging
from collections.abc import Iterable

from django.db import transaction

from common.tasks import task_send_on_commit
from common.text import normalize_phrase
from embeddings.services import embedding_assign, embeddings_by_text
from learning.catalogue import VerbEntry
from learning.models import Verb, VerbPhrase
from learning.selectors import verb_details_forget

logger = logging.getLogger(__name__)


def verb_catalogue_load(*, entries: Iterable[VerbEntry], progress: bool = False) -> dict:
    """Create or update verbs and their phrases, all or nothing; when phrases were added, the catalogue prior (and
    the retrieval floors measured with it) is refitted once this commits. Answers counts. ``progress``: a tqdm bar
    while the new phrases are embedded."""
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

    counts = {"verbs_created": 0, "verbs_updated": 0, "phrases_added": len(new_phrases), "unembedded": 0}
    with transaction.atomic():
        verbs = {}
        for e in entries:
            verb, created = Verb.objects.update_or_create(
                name=e.name,
                defaults={
                    "domain": e.domain,
                    "display_name": e.display_name,
                    "description": e.description,
                    "is_active": e.is_active,
                },
            )
            counts["verbs_created" if created else "verbs_updated"] += 1
            verbs[e.name] = verb
        rows = [VerbPhrase(verb=verbs[name], text=text, normalized=norm) for name, text, norm in new_phrases]
        embedded = [r for r in rows if r.normalized in vectors]
        embedding_assign(rows=embedded, vectors=[vectors[r.normalized] for r in embedded], model=model)
        VerbPhrase.objects.bulk_create(rows, ignore_conflicts=True)
        transaction.on_commit(verb_details_forget)
        if new_phrases:
            # the prior and the floors follow the catalogue (a broker outage: the daily refit catches up)
            task_send_on_commit("learning.decision_prior_fit", fallback_inline=False)
    counts["unembedded"] = len(rows) - len(embedded)
    return counts
