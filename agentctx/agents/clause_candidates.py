"""Clause candidates: which sentences may carry a clause kind, how strongly, and when none does.

For one kind, every quotable sentence of the document (a :class:`~retrieval.structure.Unit`)
gets a score from three sources:

* **structure**: the heading path of its section. The nearest titled section matching the
  kind's heading words ("ARTICLE 21. GOVERNING LAW", "7.1. Assignment") scores
  ``TITLE_WEIGHT``; an outer one half of it. Definitions and glossaries count against
  every kind but ``parties``.
* **language**: the kind's operative patterns in the sentence itself
  (:mod:`.clause_lexicon`).
* **position** (``parties`` only): the preamble, and definitions of the sides
  ("'Licensor' means ...", ``("Client")``).
* **the operative sentence** (:mod:`.clause_operative`): inside a section that carries the
  kind, the cap's amount outranks the damages waiver, the duty to pay the dispute clause, the
  grounds for termination its effect, the chosen law the courts. This moves the ranking only;
  the body score that decides "found" is the lexicon's.

Retrieval adds ``RETRIEVAL_BONUS`` to the sentences of the pages the context's plan ranks
first for the kind's query, so meaning that the lexicon misses still counts a little.

A sentence **qualifies** when it scores at least the kind's threshold and carries operative
language (body score >= ``MIN_BODY``). Each section's candidate is its best qualifying sentence,
else its best sentence; candidates are ranked by score. **Absence is an answer**: when none of the
``DECISION_DEPTH`` best candidates qualifies, the kind is reported as not found, with what was
searched; otherwise the finding is the best of them that qualifies. Thresholds were set on the
tuning half of the dev documents (``bench/bench_review.py --modes rules --sweep``); the check half
was not used to set them.

The quote of each candidate (the sentence with what completes it) is :mod:`.clause_quotes`'.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from agentctx.agents.clause_lexicon import LEXICON, body_evidence, normalize, title_matches
from agentctx.agents.clause_operative import operative_adjustment
from agentctx.agents.clause_patterns import PARTY_ROLES, legal_voice
from agentctx.agents.clause_quotes import LEAD_IN_END, carried_end, quote_span
from agentctx.retrieval.structure import DocumentStructure, Unit

__all__ = ["Candidate", "KindDecision", "TITLE_WEIGHT", "THRESHOLDS", "RETRIEVAL_BONUS", "MIN_BODY",
           "DECISION_DEPTH", "draw_candidates", "resolve_conflicts", "resolve_finding_conflicts", "quote_span",
           "rules_only"]

TITLE_WEIGHT = 1.5  # a heading that names the kind weighs one and a half operative patterns
RETRIEVAL_BONUS = 0.25  # a sentence on one of the pages retrieval ranks first for the kind
# Minimum score of the best candidate for a kind to be reported found (set on the tuning half).
THRESHOLDS: dict[str, float] = {k: 1.0 for k in LEXICON}
MIN_BODY = 1.0  # and its sentence must carry operative language (one full pattern), not only a heading
# How many of the best candidates the found/absent decision reads. Deciding from the first alone made a
# kind absent whenever a heading-only section outranked the operative sentence ("Assignment" over "binds
# the parties and their successors and assigns", above "This Agreement is not assignable" in "General"):
# a heading that names the kind lifts its related provisions by TITLE_WEIGHT, enough to pass one or two
# sections that state the rule. Deeper than three, a qualifying sentence ranks below that many sections
# that speak of the kind more strongly, and is more often a stray pattern than the clause.
DECISION_DEPTH = 3
_DEFINITIONS_TITLE = re.compile(r"\b(?:definitions?|glossary|interpretation|defined\s+terms)\b", re.I)
# "Between us, Acme ("Acme") and you", "between Acme ("Acme") and you": one defined side and "you"
_BETWEEN_AND_YOU = re.compile(r"\bbetween\b[^.;]{0,200}\band\s+you\b", re.I)
# English and Irish precedents list the sides one a paragraph, each naming itself in brackets, under a heading
# "PARTIES" or after a lead-in "Between:" ("(1) Acme Limited, ... ("Acme"); and", "2) Beta Ltd ... (**Beta**)").
_NAMES_ITSELF = re.compile(r"\((?:each\s+an?\s+|the\s+)?[*_]*[\"\u201c]?[*_]*[A-Z][^()]{0,80}\)")
_BETWEEN_LEAD = re.compile(r"\bbetween\s*:?[*_]*\s*(?:\(?\w{1,3}[.)]\s*)?$", re.I)


@dataclass(frozen=True)
class Candidate:
    """One section's best sentence for a kind: the quote span and why it scored."""

    kind: str
    start: int  # quote span (whole sentences)
    end: int
    unit_start: int  # the best sentence inside it
    unit_end: int
    section: int | None
    section_name: str
    score: float
    title_score: float
    body_score: float
    evidence: tuple[str, ...]

    def to_dict(self) -> dict:
        return {"char_start": self.start, "char_end": self.end, "unit_start": self.unit_start,
                "unit_end": self.unit_end, "section": self.section_name,
                "score": round(self.score, 3), "title_score": self.title_score,
                "body_score": round(self.body_score, 3), "evidence": list(self.evidence)}


@dataclass
class KindDecision:
    kind: str
    candidates: list[Candidate]  # best first, at most one per section
    threshold: float
    sections_searched: list[str] = field(default_factory=list)  # sections whose headings match the kind
    min_body: float = MIN_BODY

    @property
    def best(self) -> Candidate | None:
        """The top-ranked candidate, qualifying or not (the best evidence when the kind is not found)."""
        return self.candidates[0] if self.candidates else None

    def qualifies(self, c: Candidate) -> bool:
        return c.score >= self.threshold and c.body_score >= self.min_body

    @property
    def pick(self) -> Candidate | None:
        """The finding: the best of the ``DECISION_DEPTH`` best candidates that qualifies (None: not found)."""
        return next((c for c in self.candidates[:DECISION_DEPTH] if self.qualifies(c)), None)

    @property
    def found(self) -> bool:
        return self.pick is not None


def _title_score(st: DocumentStructure, unit: Unit, kind: str) -> float:
    titled = [s for s in reversed(st.path(unit.section)) if s.title]
    score = 0.0
    if titled and title_matches(kind, titled[0].title):
        score = TITLE_WEIGHT
    elif any(title_matches(kind, s.title) for s in titled[1:]):
        score = TITLE_WEIGHT / 2
    if kind != "parties" and any(_DEFINITIONS_TITLE.search(s.title) for s in titled):
        score -= TITLE_WEIGHT / 2
    lex = LEXICON[kind]
    if titled and any(p.search(titled[0].title) for p in lex.title_negative):
        score -= TITLE_WEIGHT / 2
    return score


def _party_bonus(st: DocumentStructure, unit: Unit, sentence: str) -> tuple[float, list[str]]:
    bonus, why = 0.0, []
    if st.in_preamble(unit.start):
        bonus += 0.5
        why.append("preamble")
    roles = {t.term.lower().strip() for t in st.terms if t.start == unit.start}
    named = [r for r in roles if r in PARTY_ROLES or r.removeprefix("the ") in PARTY_ROLES]
    inline = [t for t in st.terms if t.start == unit.start and t.how == "inline"]
    if named:
        bonus += 1.0
        why.append("defines " + ", ".join(sorted(named)))
    elif len(inline) >= 2 and re.search(r"\bbetween\b", sentence, re.I):
        bonus += 1.0
        why.append("names two defined sides")
    elif inline and _BETWEEN_AND_YOU.search(sentence):
        # plain-language drafting names its other side "you": "Between us, Acme ("Acme") and you, [name]."
        bonus += 1.0
        why.append("names a defined side and you")
    elif _NAMES_ITSELF.search(sentence) and _in_list_of_parties(st, unit):
        bonus += 1.0
        why.append("names a side in the list of the parties")
    return bonus, why


def _in_list_of_parties(st: DocumentStructure, unit: Unit) -> bool:
    """The unit is a paragraph of the list of the sides: under a heading "Parties", or right after "Between:"."""
    if _BETWEEN_LEAD.search(st.text[max(0, unit.start - 80):unit.start].strip()):
        return True
    return any(s.title and title_matches("parties", s.title) for s in st.path(unit.section))


def score_unit(st: DocumentStructure, unit: Unit, kind: str) -> tuple[float, float, float, list[str]]:
    """(score, title score, body score, evidence) of one sentence for one kind; the score
    includes the operative-sentence adjustment (:func:`.clause_operative.operative_adjustment`)."""
    sentence = normalize(st.text[unit.start:unit.end])
    body, why = body_evidence(kind, sentence)
    if body < 1 and LEAD_IN_END.search(sentence):
        # A lead-in states its rule with its items ("You will neither ... directly or indirectly:" over "(a) use
        # ...", "(b) disclose ..."): read the two together when the lead-in alone carries no operative language.
        # Only when the lead-in is what makes the items operative: items that carry the kind alone ("v. This
        # DPA is governed by the laws of ...") are candidates of their own.
        carried = carried_end(st, unit, unit.start)
        if carried is not None:
            whole = normalize(st.text[unit.start:carried])
            body2, why2 = body_evidence(kind, whole)
            if body2 > max(body, body_evidence(kind, normalize(st.text[unit.end:carried]))[0]):
                sentence, body, why = whole, body2, why2 + ["lead-in with its items"]
    if kind == "parties":
        extra, more = _party_bonus(st, unit, sentence)
        body += extra
        why += more
    title = _title_score(st, unit, kind)
    if body > 0 and title <= 0 and not legal_voice(sentence) \
            and not any(legal_voice(s.title) for s in st.path(unit.section) if s.title):
        # A kind's words without a contract's voice, in a section no legal heading holds: technical
        # text filed beside the agreements of a case file ("gpg-agent will then terminate itself").
        return 0.0, title, 0.0, why + ["-no contract voice"]
    adjust, more = operative_adjustment(kind, sentence)
    return title + body + adjust, title, body, why + more


def _section_name(st: DocumentStructure, index: int | None) -> str:
    if index is None:
        return "preamble"
    return " > ".join(s.name for s in st.path(index))


def draw_candidates(st: DocumentStructure, kind: str, *, boost: dict[int, float] | None = None,
                    limit: int = 6, threshold: float | None = None, min_body: float | None = None) -> KindDecision:
    """Rank the sections' best sentences for ``kind``.

    boost: extra score per unit start offset (retrieval's ranking); None = none.
    threshold, min_body: the kind's thresholds (default ``THRESHOLDS[kind]``, ``MIN_BODY``; the bench
    sweeps them).
    """
    floor = THRESHOLDS[kind] if threshold is None else threshold
    body_floor = MIN_BODY if min_body is None else min_body
    best_per_section: dict[object, Candidate] = {}
    for u in st.units:
        score, title, body, why = score_unit(st, u, kind)
        if title + body >= floor > score:
            score = floor  # a related provision ranks lower, but is not made "not found" by it
        if boost:
            extra = boost.get(u.start, 0.0)
            if extra:
                score += extra
                why = why + [f"retrieval +{extra:g}"]
        if score <= 0 or body <= 0:
            continue
        key = u.section if u.section is not None else ("pre", u.block)
        cur = best_per_section.get(key)
        # A section's qualifying sentence stands for it before a higher one that does not (a heading lifts
        # both), so the decision never misses a qualifying sentence behind its own section's related text.
        if cur is None or (score >= floor and body >= body_floor, score) > \
                (cur.score >= floor and cur.body_score >= body_floor, cur.score):
            s, e = quote_span(st, u, kind)
            best_per_section[key] = Candidate(kind, s, e, u.start, u.end, u.section, _section_name(st, u.section),
                                              round(score, 4), title, round(body, 4), tuple(why))
    ranked = sorted(best_per_section.values(), key=lambda c: (-c.score, c.start))
    searched = [s.name for s in st.sections if title_matches(kind, s.title)]
    return KindDecision(kind, ranked[:limit], floor, searched, body_floor)


def _carries(c: Candidate, kind: str, text: str) -> bool:
    strong, _ = body_evidence(kind, normalize(text[c.unit_start:c.unit_end]))
    return strong >= 1


def rules_only(st: DocumentStructure, kinds, threshold: float | None = None,
               min_body: float | None = None) -> dict[str, Candidate | None]:
    """The review's clause decisions without retrieval or the model: each kind's best candidate
    if found, conflicts resolved (the bench's rules-only peer and threshold sweep)."""
    decisions = {k: draw_candidates(st, k, threshold=threshold, min_body=min_body) for k in kinds}
    chosen = {k: d.pick for k, d in decisions.items()}
    return resolve_conflicts(decisions, chosen, st.text)


def resolve_conflicts(decisions: dict[str, KindDecision], chosen: dict[str, Candidate | None],
                      text: str) -> dict[str, Candidate | None]:
    """One sentence is cited for two kinds only when it carries both.

    ``chosen`` maps each kind to its pick (None: not found). When two kinds picked the same
    sentence and it lacks operative language of one of them, that kind, the weaker of the
    two, falls back to its next candidate above its threshold, or to not found.
    """
    out = dict(chosen)
    changed = True
    while changed:
        changed = False
        kinds = [k for k, c in out.items() if c is not None]
        for a in kinds:
            for b in kinds:
                ca, cb = out[a], out[b]
                if a >= b or ca is None or cb is None:
                    continue
                if not (ca.unit_start < cb.unit_end and cb.unit_start < ca.unit_end):
                    continue
                if _carries(ca, a, text) and _carries(cb, b, text):
                    continue
                loser = a if (ca.score, b) < (cb.score, a) else b
                lost = out[loser]
                dec = decisions[loser]
                nxt = [c for c in dec.candidates
                       if dec.qualifies(c)
                       and not (c.unit_start < lost.unit_end and lost.unit_start < c.unit_end)
                       and c.score < lost.score + 1e-9 and c is not lost]
                out[loser] = nxt[0] if nxt else None
                changed = True
                break
            if changed:
                break
    return out


def _unit_of(finding) -> tuple[int, int] | None:
    """The chosen sentence of a finding (its candidate entry), else its citation span."""
    if not finding.present or finding.citation is None:
        return None
    c = finding.citation
    for cand in finding.candidates:
        if cand.get("char_start") == c.char_start and cand.get("char_end") == c.char_end:
            return cand["unit_start"], cand["unit_end"]
    return c.char_start, c.char_end


def resolve_finding_conflicts(findings: list, text: str, cite) -> list:
    """:func:`resolve_conflicts` over the review's clause findings (``ClauseFinding``).

    A finding that loses its sentence to another kind falls back to its next listed
    candidate that is above its threshold and elsewhere, cited through ``cite(start, end)``,
    or becomes not found with a note saying which kind took the sentence.
    """
    out = list(findings)
    for _ in range(len(out) * len(out)):
        clash = None
        for i, a in enumerate(out):
            for j in range(i + 1, len(out)):
                b = out[j]
                ua, ub = _unit_of(a), _unit_of(b)
                if ua is None or ub is None or not (ua[0] < ub[1] and ub[0] < ua[1]):
                    continue
                sa = body_evidence(a.kind, normalize(text[ua[0]:ua[1]]))[0]
                sb = body_evidence(b.kind, normalize(text[ub[0]:ub[1]]))[0]
                if sa >= 1 and sb >= 1:
                    continue  # the sentence carries both kinds
                clash = (i, j) if ((a.score or 0), b.kind) < ((b.score or 0), a.kind) else (j, i)
                break
            if clash:
                break
        if clash is None:
            return out
        loser_i, winner_i = clash
        loser, winner = out[loser_i], out[winner_i]
        taken = _unit_of(winner)
        nxt = [c for c in loser.candidates
               if c["score"] >= (loser.threshold or 0) and c["body_score"] >= MIN_BODY
               and not (c["unit_start"] < taken[1] and taken[0] < c["unit_end"])
               and (c["char_start"], c["char_end"]) != (loser.citation.char_start, loser.citation.char_end)]
        note = f"its best sentence carries {winner.kind} rather than {loser.kind}"
        if nxt:
            c = nxt[0]
            out[loser_i] = loser.model_copy(update=dict(
                citation=cite(c["char_start"], c["char_end"]), quote=text[c["char_start"]:c["char_end"]],
                section=c["section"], score=c["score"], chosen_by="rules", note=f"next candidate: {note}"))
        else:
            out[loser_i] = loser.model_copy(update=dict(present=False, citation=None, quote="", section=None,
                                                        chosen_by="", note=f"not found: {note}"))
    return out
