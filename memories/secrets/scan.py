"""Secret scanning, part 4: the scan over every view, merging findings, ``find_secrets`` and ``redact``."""

import re

from memories.secrets.detectors import (
    _B64_RUN,
    _HEX_RUN,
    _context,
    _Hit,
    _private_keys,
    _split_hex,
    _structured,
    decode_b64,
    decode_hex,
)
from memories.secrets.prose import as_password
from memories.secrets.rules import CLAUSE_END, CLAUSE_TOKEN, _natural_language
from memories.secrets.views import SECRET, Finding, View, views


def _decoded(view: View, hits: list[_Hit], depth: int) -> None:
    t = view.text
    seen: set[tuple[int, int]] = set()
    for rx, decode, label in ((_B64_RUN, decode_b64, "base64"), (_HEX_RUN, decode_hex, "hex")):
        for m in rx.finditer(t):
            i, j = m.span()
            if (i, j) in seen:
                continue
            token = m.group(0)
            decoded = decode(token)
            if decoded is None or len(decoded) < 6:
                continue
            seen.add((i, j))
            inner = _scan(decoded, depth + 1)
            kind = None
            if inner:
                kind = inner[0][0]
            elif re.fullmatch(r"[\w.@+\-]{1,64}:[^\s:]{3,}", decoded) and not _natural_language(decoded):
                kind = "basic_auth_credentials"  # base64("user:password")
            if kind:
                s, e = view.orig_span(i, j)
                hits.append((kind, s, e, f"{label}-{view.name}"))


def _scan(text: str, depth: int = 0) -> list[_Hit]:
    hits: list[_Hit] = []
    if not text:
        return hits
    vs = views(text)
    canon = vs[0]
    for v in vs:
        is_glued = v.gap_before is not None or v.name.startswith("reversed")
        _structured(v, hits, collapsed_view=is_glued)
    _private_keys(canon, hits)
    _context(canon, hits)
    for v in vs:
        if v.name == "percent":
            _context(v, hits)
    _split_hex(vs[1], text, hits)
    if depth < 2:
        _decoded(canon, hits, depth)
        _decoded(vs[1], hits, depth)  # base64 split into quoted/spaced pieces
    return hits


_GENERIC_KINDS = {
    "password_in_prose",
    "credential_assignment",
    "high_entropy_secret",
    "hex_high_entropy_secret",
    "bearer_token",
    "connection_string_secret",
}


def _merge(findings: list[Finding]) -> list[Finding]:
    """Drop findings fully inside another (keep the longest span; on a tie the more specific kind)."""
    findings = sorted(findings, key=lambda f: (f.start, -(f.end - f.start), f.kind in _GENERIC_KINDS))
    out: list[Finding] = []
    for f in findings:
        if out and f.start >= out[-1].start and f.end <= out[-1].end:
            continue
        out.append(f)
    return out


# findings of a secret named in a sentence or an assignment: the rest of their clause may give more values
_PROSE_KINDS = {"password_in_prose", "credential_assignment", "credentials_in_prose", "passphrase"}
# a token of the clause that is not a value: an assignment of something else, a URL, an e-mail address or a host name
_NOT_A_CLAUSE_VALUE = re.compile(r"=|://|^[\w.+\-]+@[\w\-]+\.|^(?:[a-z0-9\-]+\.)+[a-z]{2,}$")


def _clause_values(text: str, findings: list[Finding]) -> list[Finding]:
    """The values that follow a secret named in prose within its clause (up to ". ", ";" or a line break) and look
    like passwords (``prose.as_password``): "Passwords: staging hunter2x, prod hunter3x", "is either X or Y"."""
    out = []
    prose = [f for f in findings if f.kind in _PROSE_KINDS]
    i = 0
    while i < len(prose):
        # the clause is read once for all its findings ("mi clave es perro mi clave es perro ..." would be read once
        # per finding, N^2): a token takes the kind ``_merge`` would keep of the findings before it, the first specific
        # one, else the first
        first = prose[i]
        end = CLAUSE_END.search(text, first.end)
        stop = end.start() if end else len(text)
        j = i
        while j < len(prose) and prose[j].end <= stop:
            j += 1
        group, k, kind = prose[i:j], 0, first.kind

        def take(at: int, raw: str, kind: str) -> None:
            token = raw.rstrip(".,:;!?")
            if token and as_password(token) and not _NOT_A_CLAUSE_VALUE.search(token):
                out.append(Finding(SECRET, kind, at, at + len(token), "clause"))

        for m in CLAUSE_TOKEN.finditer(text, first.end, stop):
            while k < len(group) and group[k].end <= m.start():
                if kind in _GENERIC_KINDS and group[k].kind not in _GENERIC_KINDS:
                    kind = group[k].kind
                k += 1
            take(m.start(), m.group(0), kind)
            # a finding that ends inside this token: read from its end, the token's rest is a token of its own
            while k < len(group) and group[k].end < m.end():
                take(group[k].end, text[group[k].end : m.end()], group[k].kind)  # as that finding alone reads it
                if kind in _GENERIC_KINDS and group[k].kind not in _GENERIC_KINDS:
                    kind = group[k].kind
                k += 1
        i = j
    return out


def find_secrets(text: str) -> list[Finding]:
    """Every secret in ``text``: kind and span in the original text (longest span wins on nesting), with the values
    the clause of a secret named in prose gives after it."""
    text = text or ""
    findings = _merge([Finding(SECRET, kind, s, e, via) for kind, s, e, via in _scan(text)])
    more = _clause_values(text, findings)
    return _merge(findings + more) if more else findings


def _redact_once(text: str, findings: list[Finding]) -> str:
    pieces, last = [], 0
    for f in findings:
        if f.start < last:  # overlapping spans: extend the previous redaction
            if f.end > last:
                last = f.end
            continue
        pieces.append(text[last : f.start])
        pieces.append(f"[REDACTED:{f.kind}]")
        last = f.end
    pieces.append(text[last:])
    return "".join(pieces)


def redact(text: str) -> str:
    """``text`` with each secret span replaced by ``[REDACTED:<kind>]``.

    Re-scans the result (up to three rounds) so that nothing a first redaction uncovered, e.g. a
    token whose disguise only showed once a neighbour was removed, survives."""
    text = text or ""
    for _ in range(3):
        findings = find_secrets(text)
        if not findings:
            break
        text = _redact_once(text, findings)
    return text
