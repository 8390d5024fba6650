"""Outcome signals in a user's turn: did the lessons the assistant just used work?

Deterministic. ``meta.validation_passed`` (true or false) wins over the text. Failure phrases are checked
before success phrases, so "that didn't work" is never read as "that worked". A turn with neither is
neutral (None) and changes nothing.
"""

import re
from dataclasses import dataclass

SUCCESS, FAILURE = "success", "failure"

_FAILURE = re.compile(
    r"(?i)\b(?:(?:that|it|this)(?: still)? (?:didn't|did not|doesn't|does not|won't|isn't|wasn't) (?:work|help|right|correct)(?:ing)?|"
    r"(?:that|it|this) (?:is|was|'s)? ?(?:still )?(?:not working|broken|wrong|incorrect|outdated|out of date)|"
    r"that'?s (?:wrong|incorrect|not right|not true|not correct|outdated)|wrong answer|no longer (?:true|right|valid|the case)|"
    r"(?:i(?:'ve| have)? )?changed my mind|not anymore|still (?:fails|failing|broken))\b"
)
_SUCCESS = re.compile(
    r"(?i)(?:^|(?<=[.!?;,]))\s*(?:(?:ok(?:ay)?|yes|yep|great|thanks)[\s,!]+)?(?:(?:that|it|this) (?:worked|works|did it|did the trick|fixed it|solved it|helped)|"
    r"works (?:now|perfectly|great)|worked (?:perfectly|great|like a charm)|problem solved|exactly what i needed)\b|"
    r"^\W*(?:perfect|great|awesome|excellent|brilliant)\b[\s,.!\u2014-]*(?:thanks|thank you|thx)?[\s.!]*$|"
    r"^\W*(?:perfect|great|awesome|excellent|brilliant)\b[\s,.!\u2014-]+(?:thanks|thank you|thx)\b"
)


@dataclass(frozen=True)
class OutcomeSignal:
    outcome: str  # success | failure
    cue: str  # the phrase (or "validation_passed=…") that decided


def outcome_detect(user_message: str, *, validation_passed: bool | None = None) -> OutcomeSignal | None:
    """The outcome the user's turn reports about what the assistant did before, or None (neutral)."""
    if validation_passed is not None:
        return OutcomeSignal(SUCCESS if validation_passed else FAILURE, f"validation_passed={str(validation_passed).lower()}")
    text = (user_message or "").strip()
    for outcome, pattern in ((FAILURE, _FAILURE), (SUCCESS, _SUCCESS)):
        m = pattern.search(text)
        if m:
            return OutcomeSignal(outcome, m.group(0).strip(" ,.!\u2014-")[:80].lower())
    return None
