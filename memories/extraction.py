"""Turn one conversation turn into a canonical memory artifact.

* :func:`extract_deterministic` (default): rules only, same input → same artifact.
  Type: ``snippet`` when the answer holds code, ``procedure`` for numbered or
  sequenced steps, ``decision`` for "we decided / from now on", ``pattern`` for
  "always / never / prefer / avoid", else ``faq``. Content: ``Q: … A: …`` for an
  faq, otherwise the lesson text (the assistant's answer, or the user's statement
  when the answer is a mere acknowledgement). Topic: the three most frequent
  content words. Hints in ``meta`` (type, topic, tags) win over the rules.
* :func:`extract_llm`: an OpenAI-compatible chat model (``openai`` package), used
  only when ``MEMORY_EXTRACTOR=llm`` and ``MEMORY_LLM_MODEL`` are set; on any
  failure the deterministic extractor answers instead.
"""

import json
import logging
import re
from collections import Counter
from dataclasses import dataclass, field

from django.conf import settings

from memories.models import MemoryType
from memories.secrets import redact

logger = logging.getLogger(__name__)

STOPWORDS = set(
    """
    a an the and or but if then else of to in on at by for with from into onto over under about as is are was were be been
    being it its this that these those there here i you he she we they me my your our their his her them us do does did
    doing done have has had having can could should would will shall may might must not no yes so than too very just
    also only what which who whom whose when where why how all any each every some such own same other more most less
    least few many much one two get got use using used need needs please thanks thank ok okay sure hi hello
    """.split()
)

_ACK_WORDS = (
    r"(?:ok(?:ay)?|sure|got it|noted|understood|will do|thanks?|thank you|great|done|yes|right|alright|of course|perfect|"
    r"absolutely|certainly|sounds good|no problem|makes sense|good to know|i see|all right|roger|gotcha|hi|hello|hey|"
    r"hi there|hello there|sorry(?: about that)?|my apologies)"
)
# One sentence of an acknowledgement: leading "got it"s, then nothing, a promise about what the assistant will
# remember or do ("Got it, I'll note your April travel to Japan."), a "your … is saved", or a pleasantry.
_ACK_SENTENCE = re.compile(
    rf"(?i)^(?:{_ACK_WORDS}(?:[\s,.!:;\u2014\u2013-]+|$))*(?:$|"
    r"(?:i(?:'ll| will| am going to|'m going to|'ve| have)|will do|noted|i'm noting|i am noting)\b|"
    r"(?:your|that|this)\b.*\b(?:is|are|has been|have been)\s+(?:now\s+)?(?:noted|saved|recorded|updated|remembered|stored)\b|"
    r"(?:you're welcome|you are welcome|glad|happy to help|my pleasure|no worries|anytime|let me know|have a (?:great|good|nice)|"
    r"enjoy|anything else|is there anything|feel free|sorry to hear|for (?:letting me know|telling me|the (?:info|update|heads[- ]up|context))))"
)
_ACK_ONLY = re.compile(rf"(?i)^(?:{_ACK_WORDS}[\s,.!:;\u2014\u2013-]*)+$")
_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")
# Lead-ins of a user's statement that are not part of the lesson.
_LEAD_IN = re.compile(
    r"(?i)^(?:(?:hi|hey|hello|so|ok(?:ay)?|btw|by the way|fyi|just so you know|for the record|quick note|note|heads up|"
    r"please (?:note|remember)(?: that)?|remember(?: that)?|keep in mind(?: that)?)\b[\s,.:;!\u2014\u2013-]*)+"
)
_CORRECTION_LEAD_IN = re.compile(
    r"(?i)^(?:actually|correction|scratch that|wait|i(?:'ve| have)? changed my mind(?: about that)?|"
    r"i was wrong(?: earlier)?)\b[\s,.:;!\u2014\u2013-]*"
)
_TRAILING_THANKS = re.compile(r"(?i)[\s,.!\u2014\u2013-]*(?:thanks|thank you|thx|cheers)(?: (?:a lot|so much))?[\s.!]*$")
_CHATTER_WORDS = STOPWORDS | set(
    """
    great perfect cool nice awesome bye goodbye cheers welcome glad helped help worked works good fine noted remember
    note got alright right see later that's it's i'm you're let's there's what's all today tonight day evening morning
    night week something anything everything else
    """.split()
)
_QUESTION_START = re.compile(r"(?i)^(?:how|what|why|when|where|which|who|can|could|should|is|are|do|does|did|will|would)\b")
_CODE_FENCE = re.compile(r"```(\w+)?")
_STEPS = re.compile(r"(?m)^\s*(?:\d+[.)]|step\s+\d+[:.)]?)\s+\S")
_FIRST = re.compile(r"(?i)\bfirst\b")
_THEN = re.compile(r"(?i)\bthen\b")
_DECISION = re.compile(
    r"(?i)\b(?:we|i|the team|team)\s+(?:have\s+)?(?:decided|chose|agreed|settled on|will use|are going with|go with)\b|"
    r"\bdecision\b|\bgoing forward\b|\bfrom now on\b"
)
_PATTERN = re.compile(
    r"(?i)\b(?:always|never|prefer|avoid|whenever|make sure|don't|do not|should|must|rather)\b|"
    r"\b(?:i|we)\s+(?:really\s+)?(?:like|love|hate|dislike|want)\b|\bmy\s+(?:preference|favou?rite)\b"
)
_SPACE = re.compile(r"[ \t]+")


@dataclass(frozen=True)
class Artifact:
    memory_type: str
    topic: str
    content: str
    tags: list[str] = field(default_factory=list)
    extractor: str = "deterministic"
    correction: bool = False  # the user corrects an earlier statement ("actually", "I changed my mind")
    uncut_content: str = ""  # the lesson before it was cut to MEMORY_MAX_CONTENT_CHARS ("" when it was not): gated too


def _clean(text: str) -> str:
    """Trim and collapse runs of spaces; keep line breaks (code and steps need them)."""
    lines = [_SPACE.sub(" ", line).rstrip() for line in (text or "").strip().splitlines()]
    pieces, blank = [], False
    for line in lines:
        if not line.strip():
            if not blank and pieces:
                pieces.append("")
            blank = True
            continue
        pieces.append(line)
        blank = False
    return "\n".join(pieces).strip()


_LAST_SPACE = re.compile(r"\s(?=\S*$)")


def _truncate(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters at a sentence end in its second half, else at a space (then "…"); never
    inside a token, so no piece of a secret is kept without the rest (a token longer than the limit is dropped)."""
    if len(text) <= limit:
        return text
    cut = text[:limit]
    stop = max(cut.rfind(". "), cut.rfind(".\n"), cut.rfind("\n"))
    if stop >= limit // 2:
        return cut[: stop + 1].rstrip()
    if not text[limit].isspace():  # the cut falls inside a token: drop it
        space = _LAST_SPACE.search(cut)
        cut = cut[: space.start()] if space else ""
    cut = cut.rstrip()
    return cut + "…" if cut else ""


def _is_question(text: str) -> bool:
    t = text.strip()
    return t.endswith("?") or bool(_QUESTION_START.match(t))


def _first_question(text: str) -> str:
    sentences = re.split(r"(?<=[?.!])\s+", _clean(text).replace("\n", " "))
    for s in sentences:
        if s.endswith("?"):
            return s
    return sentences[0] if sentences else ""


def _has_sequence(text: str) -> bool:
    """ "first … then" on one line, in linear time (``first.*then`` backtracks over every "first" of a long line)."""
    for line in text.split("\n"):  # "." of a regex stops at \n only
        first = _FIRST.search(line)
        if first and _THEN.search(line, first.end()):
            return True
    return False


def detect_type(user_message: str, assistant_message: str) -> str:
    if _CODE_FENCE.search(assistant_message) or re.search(r"(?m)^\s*\$ \S", assistant_message):
        return MemoryType.SNIPPET
    if len(_STEPS.findall(assistant_message)) >= 2 or _has_sequence(assistant_message):
        return MemoryType.PROCEDURE
    if _DECISION.search(assistant_message) or _DECISION.search(user_message):
        return MemoryType.DECISION
    if _is_question(user_message):
        return MemoryType.FAQ
    if _PATTERN.search(assistant_message) or _PATTERN.search(user_message):
        return MemoryType.PATTERN
    return MemoryType.FAQ


def derive_topic(text: str, words: int = 3) -> str:
    """The ``words`` most frequent content words (ties: first seen), in order of first appearance."""
    prose = re.sub(r"```[\s\S]*?```", " ", text)
    tokens = [t for t in re.findall(r"[a-z][a-z0-9_\-]{2,}", prose.lower()) if t not in STOPWORDS]
    counts = Counter(tokens)
    first = {}
    for i, t in enumerate(tokens):
        first.setdefault(t, i)
    top = sorted(counts, key=lambda t: (-counts[t], first[t]))[:words]
    return " ".join(sorted(top, key=lambda t: first[t]))


def _code_tags(text: str) -> list[str]:
    return sorted({m.group(1).lower() for m in _CODE_FENCE.finditer(text) if m.group(1)})


def is_acknowledgement(text: str) -> bool:
    """True when the assistant adds no lesson: no code, no steps, and every sentence an acknowledgement, a promise to
    remember or act, a pleasantry or a question back. Empty text counts as one."""
    text = _clean(text)
    if _CODE_FENCE.search(text) or len(_STEPS.findall(text)) >= 2:
        return False
    sentences = [s.strip() for s in _SENTENCES.split(text) if s.strip()]
    return all(_ACK_SENTENCE.match(s) or s.endswith("?") for s in sentences)


def has_substance(text: str) -> bool:
    """At least two content words that are not greetings, thanks or acknowledgements."""
    words = re.findall(r"[a-z][a-z0-9_\-']*", text.lower())
    return sum(1 for w in words if w not in _CHATTER_WORDS and len(w) > 1) >= 2


def user_statement(text: str) -> tuple[str, bool]:
    """The user's statement without lead-ins ("fyi", "please note that", "actually, I changed my mind") and trailing
    thanks, and whether it corrects something said before."""
    text = _clean(text)
    correction = False
    while True:
        stripped = _LEAD_IN.sub("", text, count=1)
        m = _CORRECTION_LEAD_IN.match(stripped)
        if m:
            correction, stripped = True, stripped[m.end() :]
        if stripped == text:
            break
        text = stripped
    text = _TRAILING_THANKS.sub("", text).strip()
    if text and text[-1] not in ".!?":
        text += "."
    return (text[:1].upper() + text[1:]) if text else "", correction


def _without_leading_ack(text: str) -> str:
    """The answer without a first sentence that only acknowledges ("Sure! Run …" → "Run …")."""
    parts = _SENTENCES.split(text, maxsplit=1)
    return parts[1].strip() if len(parts) == 2 and _ACK_ONLY.match(parts[0].strip()) else text


def extract_deterministic(*, user_message: str, assistant_message: str, hints: dict | None = None) -> Artifact | None:
    """The lesson of one turn, or None when it holds nothing reusable.

    A question keeps the assistant's answer (``Q: … A: …`` for an faq). When the assistant only acknowledges, the
    lesson is what the user said or decided (never the acknowledgement); when neither side has substance, nothing.
    """
    hints = hints or {}
    user, answer = _clean(user_message), _clean(assistant_message)
    correction = False
    if is_acknowledgement(answer):
        lesson, correction = user_statement(user)
        if not has_substance(lesson) or _is_question(lesson):  # chatter, or a question nobody answered
            return None
        answer = ""
    else:
        answer = _without_leading_ack(answer)
        if _is_question(user) and (hints.get("type") or detect_type(user, answer)) == MemoryType.FAQ:
            lesson = f"Q: {_first_question(user)}\nA: {answer}"
        else:
            lesson = answer
    memory_type = hints.get("type") or detect_type(user, answer)
    content = _truncate(lesson, settings.MEMORY_MAX_CONTENT_CHARS)
    topic = (hints.get("topic") or derive_topic(content)).strip()[:200]
    tags = list(hints["tags"]) if hints.get("tags") is not None else _code_tags(answer)
    return Artifact(
        memory_type=memory_type,
        topic=topic,
        content=content,
        tags=tags,
        extractor="deterministic",
        correction=correction,
        uncut_content=lesson if content != lesson else "",
    )


_LLM_PROMPT = """You turn one conversation turn into at most one reusable lesson for an AI assistant's memory.
Answer only JSON: {"type": one of ["faq","pattern","snippet","decision","procedure"], "topic": "<3-6 words>",
"tags": ["<tag>", ...], "content": "<the lesson, self-contained, no names of people, no secrets>"}.
If the turn holds nothing reusable answer {"skip": true}."""


def llm_configured() -> bool:
    return settings.MEMORY_EXTRACTOR == "llm" and bool(settings.MEMORY_LLM_MODEL)


def extract_llm(*, user_message: str, assistant_message: str, hints: dict | None = None) -> Artifact | None:
    """Ask the configured chat model; None when it finds nothing reusable. Raises on transport or format errors."""
    from openai import OpenAI

    hints = hints or {}
    client = OpenAI(
        base_url=settings.MEMORY_LLM_BASE_URL,
        api_key=settings.OPENAI_API_KEY or "unused",
        timeout=settings.MEMORY_LLM_TIMEOUT_S,
        max_retries=1,
    )
    limit = settings.MEMORY_MAX_CONTENT_CHARS * 4
    response = client.chat.completions.create(
        model=settings.MEMORY_LLM_MODEL,
        temperature=0,
        messages=[
            {"role": "system", "content": _LLM_PROMPT},
            {"role": "user", "content": f"USER:\n{user_message[:limit]}\n\nASSISTANT:\n{assistant_message[:limit]}"},
        ],
    )
    raw = (response.choices[0].message.content or "").strip()
    raw = re.sub(r"^```(?:json)?\s*|\s*```$", "", raw)
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError("the model did not answer a JSON object")
    if data.get("skip"):
        return None
    memory_type = hints.get("type") or data.get("type")
    if memory_type not in MemoryType.values:
        raise ValueError(f"the model answered an unknown type {memory_type!r}")
    lesson = _clean(str(data.get("content", "")))
    content = _truncate(lesson, settings.MEMORY_MAX_CONTENT_CHARS)
    if not content:
        raise ValueError("the model answered no content")
    tags = hints.get("tags") if hints.get("tags") is not None else data.get("tags", [])
    if not isinstance(tags, list):
        raise ValueError("the model answered tags that are not a list")
    topic = str(hints.get("topic") or data.get("topic") or derive_topic(content)).strip()[:200]
    return Artifact(
        memory_type=memory_type,
        topic=topic,
        content=content,
        tags=[str(t)[:60] for t in tags][:20],
        extractor="llm",
        uncut_content=lesson if content != lesson else "",
    )


def _holds_secret(user_message: str, assistant_message: str) -> bool:
    from memories import write_gate

    return bool(
        write_gate.secret_findings(user_message)
        or write_gate.secret_findings(assistant_message)
        or write_gate.answered_secrets(user_message, assistant_message)
    )


def extract(*, user_message: str, assistant_message: str, hints: dict | None = None) -> tuple[Artifact | None, str]:
    """The artifact (None: nothing reusable) and a note on which extractor answered. A turn that holds a secret is
    never sent to the model (an outside service): the deterministic extractor reads it, and the gate quarantines
    what it finds."""
    if llm_configured() and _holds_secret(user_message, assistant_message):
        artifact = extract_deterministic(user_message=user_message, assistant_message=assistant_message, hints=hints)
        return artifact, "deterministic (the turn holds a secret: not sent to the model)"
    if llm_configured():
        try:
            return extract_llm(user_message=user_message, assistant_message=assistant_message, hints=hints), "llm"
        except Exception as exc:  # any model or format failure: fall back, never fail the observe
            # the error may quote the model's answer or the turn: the log line keeps it only with secrets redacted
            logger.warning(
                "LLM extractor failed, using the deterministic one: %s: %s", exc.__class__.__name__, redact(str(exc))[:300]
            )
            artifact = extract_deterministic(user_message=user_message, assistant_message=assistant_message, hints=hints)
            return artifact, f"deterministic (llm failed: {exc.__class__.__name__})"
    return extract_deterministic(user_message=user_message, assistant_message=assistant_message, hints=hints), "deterministic"
