"""Query expansion with the vocabulary of agreements: plain words -> the terms contracts use.

A user asks "what if our company is bought?"; the licence says "change of control". A small
bi-encoder (all-MiniLM-L6-v2) and BM25 both miss that pair: the words differ and the encoder has
seen little legal text. Lawyers' own thesauri map such plain phrasings onto terms of art; this
module is a small one, for the concepts that agreements, licences and policies share (assignment,
termination, liability, escrow, ...). A question whose wording matches a concept's plain
phrasing gains the concept's terms; retrieval adds them to the lexical query and blends their
embedding into the question's (:mod:`.document`), so they widen the search without replacing it.

The list is written from general contract vocabulary, one entry per concept, not from any one
document; it is data, tested on hand-written questions (phrasings that must and must not trigger)
and on both dev sets' questions, and easy to extend for another domain. A trigger is a phrasing
whose ordinary sense is the concept: a word that is also said of other things ("promise", "hand
over", "sued") triggers only with what makes it contractual.
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


# A trigger is a phrasing whose ordinary sense is the concept, not merely a word the concept uses:
# "hand over" and "promise" are said of keys and offers, "sued" of venues and countersuits, "merge"
# of files, "state" of processes, "forum" of web sites, "flood" of requests. Such words trigger only
# with what makes them contractual (what is handed over, what is promised, who is bought).
_DET = r"(?:the|this|that|these|our|my|your|its|their|a|an)"
_DEAL = r"(?:licen[cs]es?|agreements?|arrangements?|contracts?|deals?|subscriptions?|relationships?)"
_PARTY = r"(?:company|companies|business|firm|licensee|licensor|vendor|supplier|provider|developer|employer)"

CONCEPTS: tuple[Concept, ...] = (
    # what is handed over must be the contract or its rights ("hand over installation keys" is not)
    _c("assignment", rf"\b(?:hand(?:s|ed|ing)?|pass(?:es|ed|ing)?|give[sn]?|giving|transfer(?:s|red|ring)?)\s+"
       rf"(?:over\s+|on\s+)?{_DET}\s+(?:[\w'-]+\s+)?(?:{_DEAL}|rights?|account|obligations)\b",
       "assign assignment transfer its rights and obligations"),
    # who is bought must be a company or party ("buy a licence", "merge two files" are not)
    _c("change_of_control", rf"\b(?:{_PARTY}|we|they)\b[^?.,;]{{0,30}}?\b(?:is|are|was|were|gets?|got|being|been|be)"
       r"\s+(?:\w+\s+)?(?:bought|acquired|purchased|taken\s+over|sold|merged)\b|"
       rf"\b(?:buys?|acquires?|takes?\s+over|took\s+over)\s+(?:us|them|{_DET}\s+(?:\w+\s+)?{_PARTY})\b|"
       rf"\bmerg(?:e|es|ed|ing)\s+(?:with|into)\s+{_DET}?\s*(?:\w+\s+)?{_PARTY}\b|"
       rf"\b(?:takeover|take-over|merger|acquisition\s+of\s+{_DET}\s+(?:\w+\s+)?{_PARTY}|"
       rf"new\s+owners?\s+of\s+{_DET}\s+(?:\w+\s+)?{_PARTY})\b", "change of control merger acquisition"),
    _c("affiliate", r"\b(?:sister|parent|group)\s+compan(?:y|ies)|\bsubsidiar(?:y|ies)\b|\bcompanies\s+we\s+own\b",
       "affiliate affiliates subsidiary"),
    _c("escrow", r"\bsafe-?keeping\b|\b(?:outside|independent|neutral|third)[- ](?:party|firm|agent|company)\b"
       r"[^?]{0,40}\b(?:keep|hold|store)s?\b[^?]{0,40}\b(?:code|cop(?:y|ies)|materials|source)|\bdeposit(?:ed)?\s+with\b",
       "escrow escrow agent deposit source code"),
    _c("source_code", r"\bhuman-?readable\b|\b(?:original|editable)\s+(?:code|form)\b", "source code"),
    _c("late_payment", r"\b(?:late|overdue|behind\s+(?:on|with))\b[^?]{0,30}\b(?:pay|paying|payment|settle|charges?|"
       r"invoices?|fees?)|\b(?:pay|paying|settle|settling)\b[^?]{0,30}\blate\b",
       "late payment interest overdue amounts"),
    _c("payment_terms", r"\b(?:how\s+soon|when)\b[^?]{0,30}\bpa(?:y|id)\b|\bbill(?:s|ed|ing)?\b(?!\s+of\b)|\binvoic",
       "payment due invoice fees payable within days"),
    # "end" must take the contract as its object ("end users of the licence" is not)
    _c("termination", rf"\b(?:end|ending|cancel|cancell?ing|get\s+out\s+of|walk\s+away\s+from|stop|stopping)\s+"
       rf"(?:{_DET}\s+)?(?:[\w'-]+\s+)?{_DEAL}\b", "terminate termination"),
    _c("for_convenience", r"\b(?:no|without\s+(?:a|any))\s+(?:breach|reason|cause)\b|\bfor\s+any\s+reason\b",
       "terminate for convenience without cause"),
    _c("notice_period", r"\b(?:advance|prior)\s+(?:warning|notice)\b|\bhow\s+much\s+(?:notice|warning)\b",
       "prior written notice days notice"),
    # not the verb "cover" ("does the warranty cover damages")
    _c("insurance", r"\b(?:policy|coverage|insured)\b[^?]{0,40}\b(?:sued|claims?|lawsuits?|damages?)\b|\binsur",
       "insurance coverage policy limits"),
    # someone must answer for the claims: being sued, or suing, is not indemnity (venues, countersuits)
    _c("indemnity", r"\b(?:defend|protect|shield|compensate|reimburse|cover)\s+(?:us|me|them|you|our|the\s+\w+)\b"
       r"[^?]{0,40}\b(?:sued|lawsuits?|claims?|losses|costs|damages)\b|\bcover\s+(?:our|the|their|my|its)\s+"
       r"(?:losses|costs|legal\s+(?:costs|fees))\b|\bdefend\s+(?:us|me|them)\b|\bhold\s+(?:us|me|them)\s+harmless\b|"
       r"\bwho\s+pays\b[^?]{0,30}\b(?:sued|lawsuits?|claims?)\b",
       "indemnify indemnification hold harmless claims"),
    # a country's or state's law, not any "which state" (of a process, a file)
    _c("governing_law", r"\b(?:which|whose|what)\s+(?:(?:country|state)(?:'s|s')?\s+(?:law|laws|rules|legislation)|"
       r"jurisdiction)|\bwhich\s+(?:law|laws|legal\s+system)|\blaw\s+(?:applies|governs)\b",
       "governed by the laws of governing law jurisdiction"),
    _c("venue", r"\b(?:which|what|where)\b[^?]{0,30}\b(?:court|courts|tribunal)\b|\bwhere\b[^?]{0,30}\bsue\b",
       "exclusive jurisdiction venue courts of"),
    _c("dispute", r"\b(?:disagree(?:ment)?s?|disputes?|fall(?:s|en)?\s+out\s+(?:with|over))\b",
       "dispute arbitration resolution"),
    _c("confidentiality", r"\b(?:keep\s+(?:[\w'-]+\s+){0,4}(?:secret|private(?!\s+keys?\b)|quiet)|"
       r"not\s+(?:tell|share|reveal))\b",
       "confidential confidentiality disclose non-disclosure"),
    _c("liability_cap", r"\b(?:most|maximum|max|cap|ceiling|limit)\b[^?]{0,40}\b(?:owe|pay|lose|liable|damages|"
       r"responsible)\b|\bhow\s+much\s+could\s+(?:we|i|they|you)\s+(?:lose|recover|claim|owe|be\s+liable)\b",
       "limitation of liability aggregate liability shall not exceed"),
    # a promise or guarantee about the product ("a promise to supply the sources" is an offer)
    _c("warranty", r"\b(?:guaranteed\s+to\s+work|work\s+as\s+(?:described|advertised)|defects?|faulty|"
       r"(?:paid|written|money-back|product)\s+guarantee|guarantees?\s+(?:on|for)\s+(?:the|this|its|our)\s+"
       r"(?:software|product|program|goods|hardware|device|service))\b|\b(?:promise|guarantee)[sd]?\b[^?]{0,30}"
       r"\b(?:works?|working|perform|function|free\s+(?:of|from)|bugs?|defects?|errors?)\b",
       "warranty warrants as is merchantability"),
    # what rolls over or keeps going must be the contract ("roll over the logs" is not)
    _c("renewal", rf"\b(?:renew|renews|renewed|extend(?:s|ed)?\s+(?:itself|automatically))\b|\b(?:it|{_DEAL}|term)\s+"
       r"(?:\w+\s+)?(?:roll(?:s|ed)?\s+over|keeps?\s+going)\b", "renewal automatically renew successive term"),
    _c("refund", r"\b(?:money\s+back|refund|reimburse)", "refund reimbursement"),
    _c("audit", r"\b(?:check|inspect|look\s+at|examine)\b[^?]{0,30}\b(?:records|books|accounts|premises)\b",
       "audit inspection records"),
    # something must go abroad ("use it abroad" is travel)
    _c("export", r"\b(?:send|sends|sent|ship|ships|shipped|export\w*|sell|sells|sold|distribut\w+|deliver\w*|"
       r"move|moved|transfer\w*)\b[^?]{0,40}\b(?:abroad|overseas|other\s+countries|outside\s+the\s+country)\b",
       "export control regulations"),
    _c("personal_data", r"\b(?:personal\s+(?:data|information|details)|privacy|(?:data|information|details|records)"
       r"\s+about\s+(?:people|users|customers))\b", "personal data data protection privacy"),
    # a file "belongs to" a package or group; rights belong to a party
    _c("ownership", r"\b(?:who\s+owns|ownership|rights\s+to\s+(?:the\s+)?(?:improvements|changes|work)|"
       r"whom?\b[^?]{0,40}\bbelongs?\s+to|belongs?\s+to\s+(?:us|me|them|you|the\s+(?:licensee|licensor|customer|"
       r"client|vendor|supplier|developer|author|contributor|company|employer)))\b",
       "intellectual property title ownership rights"),
    _c("non_solicit", r"\b(?:hire|poach|recruit|employ)\b[^?]{0,30}\b(?:staff|employees|people|workers)\b",
       "non-solicitation solicit employees"),
    # a war, flood or strike that stops performance ("a flood of requests", "strike out" are not)
    _c("force_majeure", r"\b(?:beyond|outside)\s+(?:our|their|its|anyone'?s)?\s*control\b|\b(?:natural\s+disasters?|"
       r"earthquakes?|pandemics?)\b|\b(?:a|an|the)\s+(?:war|flood|strike)\b[^?]{0,30}\b(?:stops?|stopped|prevents?|"
       r"delays?|halts?|disrupts?|breaks?\s+out)\b", "force majeure"),
    # the terms must be what is changed ("modify the software under this licence" is not)
    _c("amendment", rf"\b(?:change|modify|alter|update)\s+(?:{_DET}\s+)?(?:[\w'-]+\s+)?(?:terms|agreement|contract|"
       r"licen[cs]e)\b", "amendment modification in writing signed"),
    _c("reverse_engineering", r"\b(?:take\s+(?:it\s+)?apart|look\s+inside|figure\s+out\s+how\s+it\s+works|"
       r"reconstruct)\b", "reverse engineer decompile disassemble"),
    _c("sublicense", r"\b(?:let|allow)\s+(?:others|other\s+people|third\s+parties|customers)\s+(?:use|run)\b",
       "sublicense sublicensable"),
    _c("survival", r"\b(?:after|once)\b[^?]{0,30}\b(?:ends?|ended|over|terminat\w+|expir\w+)\b[^?]{0,30}"
       r"\b(?:still|continue|remain)\b", "survive survival termination or expiration"),
    _c("liquidated_damages", r"\b(?:fixed|set|agreed)\s+(?:amount|sum|penalty)\b|\bpenalt(?:y|ies)\s+(?:for|if)\b",
       "liquidated damages penalty"),
    _c("limitation_period", r"\b(?:how\s+long|deadline|time\s+limit)\b[^?]{0,40}\b(?:claim|sue|bring\s+(?:a|an)\s+"
       r"(?:claim|action|suit|case|lawsuit))", "limitation period action must be brought within"),
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
