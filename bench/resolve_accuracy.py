"""Resolution accuracy on BANKING77.

Catalogue: the 77 intents as verbs with 5 training phrases each (fixed seed, as
``manage.py demo``). Every test utterance is resolved through
``learning.resolution.resolve`` — the pipeline the API calls — and counted as
resolved right, resolved wrong, asked with the right verb among the options,
asked without it, or no match. Baseline in the same run: exact matching only
(the text equals a catalogue phrase after normalisation).

Last line: RESULT covered=<% right or offered> correct= wrong= asked= no_match= exact_correct=
"""

import time
from collections import Counter

from _common import fresh_database, record, setup_django, table
from tqdm import tqdm


def main():
    setup_django(db_name="bench_resolve_accuracy")
    from common.text import normalize_phrase
    from learning import datasets
    from learning.management.commands.demo import banking_entries
    from learning.resolution import resolve
    from learning.services.catalogue import verb_catalogue_load

    if not datasets.available():
        raise SystemExit(f"BANKING77 not found under {datasets.banking77_dir()}")
    fresh_database()
    entries = banking_entries(per_verb=5, seed=77)
    verb_catalogue_load(entries=entries)
    test = datasets.load("test")

    exact_index = {normalize_phrase(p): e.name for e in entries for p in e.phrases}
    exact_correct = sum(1 for ex in test if exact_index.get(normalize_phrase(ex.text)) == ex.verb)

    counts = Counter()
    started = time.perf_counter()
    for ex in tqdm(test, desc="resolving test utterances", unit="q"):
        r = resolve(text=ex.text, domain=None)
        if r.outcome == "resolved":
            counts["correct" if r.verb == ex.verb else "wrong"] += 1
        elif r.outcome == "ambiguous":
            counts["asked_right" if ex.verb in {o.verb for o in r.options} else "asked_wrong"] += 1
        else:
            counts["no_match"] += 1
    elapsed = time.perf_counter() - started
    n = len(test)
    pct = {k: 100.0 * counts[k] / n for k in ("correct", "wrong", "asked_right", "asked_wrong", "no_match")}
    covered = pct["correct"] + pct["asked_right"]
    asked = pct["asked_right"] + pct["asked_wrong"]
    rows = [
        [
            "pipeline (5 phrases/verb)",
            pct["correct"],
            pct["wrong"],
            pct["asked_right"],
            pct["asked_wrong"],
            pct["no_match"],
            covered,
        ],
        [
            "exact match only (baseline)",
            100.0 * exact_correct / n,
            0.0,
            0.0,
            0.0,
            100.0 - 100.0 * exact_correct / n,
            100.0 * exact_correct / n,
        ],
    ]
    body = table(
        ["method", "correct %", "wrong %", "asked, right offered %", "asked, not offered %", "no match %", "covered %"], rows
    )
    body += f"\n\n{n} test utterances, {elapsed / n * 1000:.1f} ms per resolve in-process. Targets: covered >= 85, wrong < 5."
    print(body)
    record(
        "resolve_accuracy",
        body,
        f"RESULT covered={covered:.1f} correct={pct['correct']:.1f} wrong={pct['wrong']:.1f} asked={asked:.1f} "
        f"no_match={pct['no_match']:.1f} exact_correct={100.0 * exact_correct / n:.1f}",
    )


if __name__ == "__main__":
    main()
