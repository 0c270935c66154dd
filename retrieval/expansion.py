"""Query expansion with the vocabulary of agreements: plain words -> the terms contracts use.

A user asks "what if our company is bought?"; the licence says "change of control". A small
bi-encoder (all-MiniLM-L6-v2) and BM25 both miss that pair: the words differ and the encoder has
seen little legal text. Lawyers' own thesauri map such plain phrasings onto terms of art; this
module is a small one, for the concepts that agreements, licences and policies share (assignment,
termination, liability, escrow, ...). A question whose wording matches a concept's plain
phrasing gains the concept's terms; retrieval adds them to the lexical query and blends their
embedding into the question's (:mod:`.document`), so they widen the search without replacing it.

The list is written from general contract vocabulary, one entry per concept, not from any one
document; it is data, tested on hand-written questions, and easy to extend for another domain.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Concept", "CONCEPTS", "expansion_terms"]


@dataclass(frozen=True)
class Concept:
    name: str
    plain: re.Pattern[str]  # plain-language phrasings of the concept in a question
    terms: str  # the words agreements use for it


def _c(name: str, plain: str, terms: str) -> Concept:
    return Concept(name, re.compile(plain, re.I), terms)


CONCEPTS: tuple[Concept, ...] = (
    _c("assignment", r"\b(?:hand(?:ed|ing)?\s+(?:it\s+|the\s+\w+\s+)?over|pass(?:ed|ing)?\s+(?:it\s+|the\s+\w+\s+)?on|"
       r"give\s+(?:it|the\s+\w+)\s+to|someone\s+else|transfer(?:red|ring)?\s+(?:it|this|the|our|my|its|their)\s+"
       r"(?:licen[cs]e|agreement|contract|rights?|account|subscription|obligations))\b",
       "assign assignment transfer its rights and obligations"),
    _c("change_of_control", r"\b(?:bought|buys?|acquired?|acquisition|taken\s+over|takes?\s+over|take-?over|"
       r"merg(?:e|es|ed|er|ing)|new\s+owners?|sold\s+to)\b", "change of control merger acquisition"),
    _c("affiliate", r"\b(?:sister|parent|group)\s+compan(?:y|ies)|\bsubsidiar(?:y|ies)\b|\bcompanies\s+we\s+own\b",
       "affiliate affiliates subsidiary"),
    _c("escrow", r"\bsafe-?keeping\b|\b(?:outside|independent|neutral|third)[- ](?:party|firm|agent|company)\b"
       r"[^?]{0,40}\b(?:keep|hold|store)s?\b|\bdeposit(?:ed)?\s+with\b", "escrow escrow agent deposit source code"),
    _c("source_code", r"\bhuman-?readable\b|\b(?:original|editable)\s+(?:code|form)\b", "source code"),
    _c("late_payment", r"\b(?:late|overdue|behind)\b[^?]{0,30}\b(?:pay|paying|payment|settle|charges?|invoices?|fees?)"
       r"|\b(?:pay|paying|settle|settling)\b[^?]{0,30}\blate\b", "late payment interest overdue amounts"),
    _c("payment_terms", r"\b(?:how\s+soon|when)\b[^?]{0,30}\bpa(?:y|id)\b|\bbill(?:s|ed|ing)?\b|\binvoic",
       "payment due invoice fees payable within days"),
    _c("termination", r"\b(?:end|ending|cancel|cancell?ing|get\s+out\s+of|walk\s+away|stop)\b[^?]{0,40}"
       r"\b(?:agreement|arrangement|contract|deal|licen[cs]e|subscription|relationship)\b",
       "terminate termination"),
    _c("for_convenience", r"\b(?:no|without\s+(?:a|any))\s+(?:breach|reason|cause)\b|\bfor\s+any\s+reason\b",
       "terminate for convenience without cause"),
    _c("notice_period", r"\b(?:advance|prior)\s+(?:warning|notice)\b|\bhow\s+much\s+(?:notice|warning)\b",
       "prior written notice days notice"),
    _c("insurance", r"\b(?:policy|cover(?:age)?|insured)\b[^?]{0,40}\b(?:sued|claims?|lawsuits?|damages?)\b|"
       r"\binsur", "insurance coverage policy limits"),
    _c("indemnity", r"\b(?:sued|lawsuits?|claims?\s+against|cover\s+(?:our|the)\s+(?:losses|costs)|defend\s+us)\b",
       "indemnify indemnification hold harmless claims"),
    _c("governing_law", r"\b(?:which|whose|what)\s+(?:country|state|jurisdiction)|\bwhich\s+(?:law|laws|legal\s+system)"
       r"|\blaw\s+(?:applies|governs)\b", "governed by the laws of governing law jurisdiction"),
    _c("venue", r"\b(?:which|what|where)\b[^?]{0,30}\b(?:court|courts|tribunal|forum)\b|\bwhere\b[^?]{0,30}\bsue\b",
       "exclusive jurisdiction venue courts of"),
    _c("dispute", r"\b(?:disagree(?:ment)?s?|disputes?|fall\s+out)\b", "dispute arbitration resolution"),
    _c("confidentiality", r"\b(?:keep\s+(?:[\w'-]+\s+){0,4}(?:secret|private|quiet)|"
       r"not\s+(?:tell|share|reveal))\b",
       "confidential confidentiality disclose non-disclosure"),
    _c("liability_cap", r"\b(?:most|maximum|max|cap|ceiling|limit)\b[^?]{0,40}\b(?:owe|pay|lose|liable|damages|"
       r"responsible)\b|\bhow\s+much\s+could\b", "limitation of liability aggregate liability shall not exceed"),
    _c("warranty", r"\b(?:promise|guarantee|guaranteed|work\s+as\s+described|defects?|faulty)\b",
       "warranty warrants as is merchantability"),
    _c("renewal", r"\b(?:renew|renews|renewed|roll(?:s)?\s+over|keeps?\s+going|extend(?:s|ed)?\s+(?:itself|"
       r"automatically))\b", "renewal automatically renew successive term"),
    _c("refund", r"\b(?:money\s+back|refund|reimburse)", "refund reimbursement"),
    _c("audit", r"\b(?:check|inspect|look\s+at|examine)\b[^?]{0,30}\b(?:records|books|accounts|premises)\b",
       "audit inspection records"),
    _c("export", r"\b(?:abroad|other\s+countries|overseas|outside\s+the\s+country)\b",
       "export control regulations"),
    _c("personal_data", r"\b(?:personal\s+(?:data|information|details)|privacy|about\s+(?:people|users|customers))\b",
       "personal data data protection privacy"),
    _c("ownership", r"\b(?:who\s+owns|ownership|belongs?\s+to|"
       r"rights\s+to\s+(?:the\s+)?(?:improvements|changes|work))\b",
       "intellectual property title ownership rights"),
    _c("non_solicit", r"\b(?:hire|poach|recruit|employ)\b[^?]{0,30}\b(?:staff|employees|people|workers)\b",
       "non-solicitation solicit employees"),
    _c("force_majeure", r"\b(?:beyond|outside)\s+(?:our|their|its|anyone'?s)?\s*control\b|\b(?:natural\s+disaster|"
       r"earthquake|flood|war|pandemic|strike)s?\b", "force majeure"),
    _c("amendment", r"\b(?:change|modify|alter|update)\b[^?]{0,30}\b(?:terms|agreement|contract|licen[cs]e)\b",
       "amendment modification in writing signed"),
    _c("reverse_engineering", r"\b(?:take\s+(?:it\s+)?apart|look\s+inside|figure\s+out\s+how\s+it\s+works|"
       r"reconstruct)\b", "reverse engineer decompile disassemble"),
    _c("sublicense", r"\b(?:let|allow)\s+(?:others|other\s+people|third\s+parties|customers)\s+(?:use|run)\b",
       "sublicense sublicensable"),
    _c("survival", r"\b(?:after|once)\b[^?]{0,30}\b(?:ends?|ended|over|terminat\w+|expir\w+)\b[^?]{0,30}"
       r"\b(?:still|continue|remain)\b", "survive survival termination or expiration"),
    _c("liquidated_damages", r"\b(?:fixed|set|agreed)\s+(?:amount|sum|penalty)\b|\bpenalt(?:y|ies)\s+(?:for|if)\b",
       "liquidated damages penalty"),
    _c("limitation_period", r"\b(?:how\s+long|deadline|time\s+limit)\b[^?]{0,40}\b(?:claim|sue|bring)\b",
       "limitation period action must be brought within"),
)


def expansion_terms(question: str) -> str:
    """The terms of art of every concept the question's wording matches ("" when none)."""
    seen, out = set(), []
    for c in CONCEPTS:
        if c.plain.search(question):
            for w in c.terms.split():
                if w not in seen:
                    seen.add(w)
                    out.append(w)
    return " ".join(out)
