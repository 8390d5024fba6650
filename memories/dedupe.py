"""The deterministic deduplication rule for a new memory against one user's memories.

Neighbours are the user's live (not deprecated) memories in the same namespace:
the exact-text match, those within the SimHash distance, and the nearest by
vector. The first rule that applies decides (thresholds are settings):

1. ``skip``  (exact): a neighbour has the same SHA-256 of content.
2. ``skip``  (simhash_same_substance): Hamming distance <= MEMORY_SIMHASH_MAX_DISTANCE and
   the same content words in the same order (case, punctuation, stop words ignored).
3. ``new_version`` (contradiction): a neighbour on a similar topic (same type, and
   the same non-empty topic, or cosine >= MEMORY_TOPIC_SIMILARITY_THRESHOLD, or within
   the SimHash distance) whose content contradicts the new one (opposite polarity,
   different numbers for the same statement, one or two words said in place of others
   ("the main branch" after "the release branch"), opposite words, or an explicit
   correction such as "no longer" / "instead of"). A near-duplicate that contradicts is never merged.
4. ``merge`` (simhash): Hamming distance <= MEMORY_SIMHASH_MAX_DISTANCE.
5. ``merge`` (semantic): same type and cosine >= the model's threshold (``semantic_duplicate_threshold``).
6. ``save``: nothing matched.

Among several neighbours a rule picks the nearest (lowest Hamming distance, then
highest cosine, then lowest id), so the outcome never depends on row order.
"""

import re
from dataclasses import dataclass

from django.conf import settings

from memories.extraction import STOPWORDS
from memories.simhash import tokens

SKIP, MERGE, NEW_VERSION, SAVE = "skip", "merge", "new_version", "save"

_NEGATORS = {
    "not",
    "never",
    "no",
    "don't",
    "doesn't",
    "isn't",
    "aren't",
    "can't",
    "cannot",
    "won't",
    "shouldn't",
    "mustn't",
    "didn't",
    "wasn't",
    "weren't",
    "without",
    "avoid",
    "stop",
    "disable",
    "disabled",
    "nor",
}
_OPPOSITES = [
    ("always", "never"),
    ("enable", "disable"),
    ("enabled", "disabled"),
    ("true", "false"),
    ("allow", "deny"),
    ("allowed", "denied"),
    ("before", "after"),
    ("on", "off"),
    ("increase", "decrease"),
    ("use", "avoid"),
    ("required", "optional"),
    ("sync", "async"),
    ("tabs", "spaces"),
    ("yes", "no"),
    ("include", "exclude"),
]
_CORRECTION = re.compile(
    r"(?i)\b(?:no longer|not anymore|instead of|replaced by|replaces|deprecated|is now|are now|actually|changed to|switched to)\b"
)
_NUMBER = re.compile(r"\b\d+(?:[.,]\d+)?\b")
_UNITS = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
        "seventeen eighteen nineteen".split()
    )
}
_TENS = {w: 10 * i for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), start=2)}
_SCALES = {"hundred": 100, "thousand": 1000, "million": 1_000_000}
_NUMBER_WORDS = set(_UNITS) | set(_TENS) | set(_SCALES)


@dataclass(frozen=True)
class Neighbour:
    id: int
    content: str
    memory_type: str
    topic: str
    content_sha256: str
    hamming: int
    similarity: float | None  # None when no vector comparison was possible


@dataclass(frozen=True)
class Decision:
    action: str  # skip | merge | new_version | save
    rule: str
    target_id: int | None = None
    hamming: int | None = None
    similarity: float | None = None


_WORDS = re.compile(r"\w+")


def _names(text: str) -> set[str]:
    """Words written in capitals beside a word that is not ("the US region", "IT owns it"): names, not shouting."""
    words = _WORDS.findall(text)
    return {
        w.casefold()
        for i, w in enumerate(words)
        if len(w) > 1 and w.isupper() and any(not n.isupper() for n in words[max(i - 1, 0) : i] + words[i + 1 : i + 2])
    }


def content_words(text: str) -> list[str]:
    """The words that carry the statement: not stop words or negators, except a stop word that is a name ("the US
    region", "the IT team": not "us" or "it")."""
    names = _names(text)
    return [t for t in tokens(text) if (t not in STOPWORDS or t in names) and t not in _NEGATORS]


def same_substance(a: str, b: str) -> bool:
    return content_words(a) == content_words(b) and _polarity(a) == _polarity(b) and _numbers(a) == _numbers(b)


def _polarity(text: str) -> int:
    words = tokens(text)
    return sum(1 for w in words if w in _NEGATORS or w.endswith("n't")) % 2


def _numbers(text: str) -> list[str]:
    """The numbers of a statement, in digits or in words ("twelve", "twenty-four", "two hundred and five" read as 12, 24,
    205), as digit strings: "12 workers" and "twelve workers" say the same."""
    found = _NUMBER.findall(text)
    total, current, last = 0, None, ""  # last: the kind of the previous number word (unit, tens, scale)
    for word in re.findall(r"[a-z]+", text.lower()):
        kind = "unit" if word in _UNITS else "tens" if word in _TENS else "scale" if word in _SCALES else ""
        joins = current is not None and (
            (kind == "unit" and (last == "scale" or (last == "tens" and _UNITS[word] < 10)))
            or (kind == "tens" and last == "scale")
            or kind == "scale"
            or (word == "and" and last == "scale")
        )
        if current is not None and not joins:  # the number ended: "one and two", "four five", "twelve workers"
            found.append(str(total + current))
            total, current, last = 0, None, ""
        if word == "and":
            continue
        if kind in ("unit", "tens"):
            current = (current or 0) + (_UNITS.get(word) if kind == "unit" else _TENS[word])
        elif kind == "scale" and current is not None:
            if _SCALES[word] == 100:
                current *= 100
            else:
                total, current = total + current * _SCALES[word], 0
        last = kind if current is not None else ""
    if current is not None:
        found.append(str(total + current))
    return found


def _jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def _inflections(a: str, b: str) -> bool:
    """ "deploy" / "deploying", "branch" / "branches": one word in two forms (a shared stem of 4+ letters)."""
    stem = max(4, min(len(a), len(b)) - 2)
    return len(a) >= 4 and len(b) >= 4 and a[:stem] == b[:stem]


def _substitutes(wn: set, wo: set) -> bool:
    """The new statement says one or two things in place of the old one's ("the main branch" after "the release
    branch"): each side has words the other lacks, at most two, and none is another form of a word on the other side.
    Numbers are left to the number rule."""
    only_new = {w for w in wn - wo if not w[0].isdigit() and w not in _NUMBER_WORDS}
    only_old = {w for w in wo - wn if not w[0].isdigit() and w not in _NUMBER_WORDS}
    if not only_new or not only_old or len(only_new) > 2 or len(only_old) > 2:
        return False
    return not any(_inflections(a, b) for a in only_new for b in only_old)


def contradicts(new: str, old: str, *, correction: bool = False) -> bool:
    """Deterministic contradiction test between two statements on the same topic; ``correction``: the new one
    was said as a correction ("actually", "I changed my mind"), which counts like "no longer"."""
    wn, wo = set(content_words(new)), set(content_words(old))
    overlap = _jaccard(
        {w for w in wn if not w[0].isdigit() and w not in _NUMBER_WORDS},
        {w for w in wo if not w[0].isdigit() and w not in _NUMBER_WORDS},
    )
    if _polarity(new) != _polarity(old) and overlap >= 0.5:
        return True
    nn, no = _numbers(new), _numbers(old)
    if nn and no and set(nn) != set(no) and overlap >= 0.6:
        return True
    if _substitutes(wn, wo) and overlap >= 0.6:
        return True
    tn, to = set(tokens(new)), set(tokens(old))
    for x, y in _OPPOSITES:
        if ((x in tn and y in to and x not in to) or (y in tn and x in to and y not in to)) and overlap >= 0.4:
            return True
    return (correction or bool(_CORRECTION.search(new))) and not _CORRECTION.search(old) and overlap >= 0.3


def _nearest(neighbours: list[Neighbour]) -> Neighbour:
    return min(neighbours, key=lambda n: (n.hamming, -(n.similarity or 0.0), n.id))


def decide(
    *,
    content: str,
    content_sha256: str,
    memory_type: str,
    topic: str,
    neighbours: list[Neighbour],
    simhash_max_distance: int,
    semantic_threshold: float,
    topic_threshold: float,
    correction: bool = False,
) -> Decision:
    def evidence(action, rule, n):
        return Decision(action, rule, n.id, n.hamming, None if n.similarity is None else round(n.similarity, 4))

    exact = [n for n in neighbours if n.content_sha256 == content_sha256]
    if exact:
        return evidence(SKIP, "exact", _nearest(exact))
    near = [n for n in neighbours if n.hamming <= simhash_max_distance]
    same = [n for n in near if same_substance(content, n.content)]
    if same:
        return evidence(SKIP, "simhash_same_substance", _nearest(same))
    norm_topic = topic.strip().casefold()
    on_topic = [
        n
        for n in neighbours
        if n.memory_type == memory_type
        and (
            (norm_topic and n.topic.strip().casefold() == norm_topic)
            or (n.similarity is not None and n.similarity >= topic_threshold)
            or n.hamming <= simhash_max_distance
        )
    ]
    contradicting = [n for n in on_topic if contradicts(content, n.content, correction=correction)]
    if contradicting:
        return evidence(NEW_VERSION, "contradiction", _nearest(contradicting))
    # a near text of another type that contradicts this one is not the same lesson: merged, its fact would be lost
    near = [n for n in near if not contradicts(content, n.content, correction=correction)]
    if near:
        return evidence(MERGE, "simhash", _nearest(near))
    semantic = [
        n for n in neighbours if n.memory_type == memory_type and n.similarity is not None and n.similarity >= semantic_threshold
    ]
    if semantic:
        best = max(semantic, key=lambda n: (n.similarity, -n.id))
        return evidence(MERGE, "semantic", best)
    return Decision(SAVE, "new")


def semantic_duplicate_threshold(model_name: str) -> float:
    """The cosine above which two memories of one user and type are the same lesson, for this model."""
    if settings.MEMORY_SEMANTIC_DUPLICATE_THRESHOLD:
        return settings.MEMORY_SEMANTIC_DUPLICATE_THRESHOLD
    table = settings.MEMORY_SEMANTIC_DUPLICATE_THRESHOLDS
    return table.get(model_name, table["default"])
