"""Synthetic long contracts with planted facts, for retrieval and extraction benchmarks.

``generate_contract`` writes a master services agreement followed by as many
statements of work as it takes to reach the requested length. Wording varies
with a seeded RNG: every sentence comes from a template with ``[a|b|c]``
alternatives and ``{slot}`` placeholders (the template bank is the second half of
this file; it is data, so it stays beside the code that uses it).

Two kinds of ground truth come back with the text:

* ``needles``: one-sentence facts with a unique value, about a uniquely named
  entity, at known character spans, each with a question only that sentence
  answers. To keep retrieval honest the generic text talks about the same
  topics (termination fees, liability caps ...) without values, and each
  needle entity is also mentioned in a few unrelated sentences elsewhere.
* ``clauses``: every article or SOW section whose kind is in
  :data:`CLAUSE_TAXONOMY`, with its span, for clause-extraction scoring.

Length is in approximate tokens: ``chars / 4`` unless a tokenizer is given,
in which case the chars-per-token ratio is measured on a sample first.
A 1M-token contract takes a few seconds.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Sequence

__all__ = [
    "Needle",
    "PlantedClause",
    "SyntheticContract",
    "generate_contract",
    "CLAUSE_TAXONOMY",
    "NEEDLE_KINDS",
]


@dataclass(frozen=True)
class Needle:
    """A planted fact: ``text[char_start:char_end] == fact_text``."""

    kind: str
    fact_text: str
    value: str
    question: str
    char_start: int
    char_end: int
    entity: str = ""


@dataclass(frozen=True)
class PlantedClause:
    """An article/section of a taxonomy kind: ``text[char_start:char_end] == text``."""

    kind: str
    text: str
    char_start: int
    char_end: int


@dataclass
class SyntheticContract:
    text: str
    needles: list[Needle] = field(default_factory=list)
    clauses: list[PlantedClause] = field(default_factory=list)
    approx_tokens: int = 0
    chars_per_token: float = 4.0
    seed: int = 0

    def clauses_of(self, kind: str) -> list[PlantedClause]:
        return [c for c in self.clauses if c.kind == kind]


class _Writer:
    """Appends text pieces while tracking the running character offset."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.pos = 0

    def add(self, s: str) -> tuple[int, int]:
        start = self.pos
        self.parts.append(s)
        self.pos += len(s)
        return start, self.pos

    def text(self) -> str:
        return "".join(self.parts)


def _entity_names(rng: random.Random, n: int) -> list[str]:
    names: set[str] = set()
    out: list[str] = []
    while len(out) < n:
        name = f"{rng.choice(ENTITY_PREFIXES)}{rng.choice(ENTITY_CORES)} {rng.choice(ENTITY_SUFFIXES)}"
        if name not in names:
            names.add(name)
            out.append(name)
    return out


def _count_tokens(tokenizer: Any, text: str) -> int:
    if callable(getattr(tokenizer, "encode", None)):
        return len(tokenizer.encode(text, add_special_tokens=False))
    return int(tokenizer(text))


class _Generator:
    def __init__(self, seed: int, target_chars: int, num_needles: int, clause_plan: Sequence[str],
                 distractor_mentions: int, topical_needles: bool = True) -> None:
        self.rng = random.Random(seed)
        self.slots = SlotFiller(self.rng)
        self.w = _Writer()
        self.target = target_chars
        self.clause_plan = list(clause_plan)
        self.needles: list[Needle] = []
        self.clauses: list[PlantedClause] = []
        kinds = list(NEEDLE_KINDS)
        self.rng.shuffle(kinds)
        entities = _entity_names(self.rng, num_needles)
        # Needles spread evenly with jitter, so every region of the document is
        # probed; (due position, kind, entity), earliest first.
        self.pending = [
            (int((i + self.rng.uniform(0.15, 0.85)) / max(1, num_needles) * target_chars), kinds[i % len(kinds)], entities[i])
            for i in range(num_needles)
        ]
        self.topical = topical_needles
        self.slack = max(4000, target_chars // max(1, 4 * num_needles))
        self.kind = ""
        # Distractor mentions of each entity, at random places.
        self.mentions = sorted(
            (self.rng.randrange(max(1, target_chars)), e) for _, _, e in self.pending for _ in range(distractor_mentions)
        )
        self.article_no = 0

    # ------------------------------------------------------------ pieces
    def _render(self, tpl: Template, **fixed: str) -> str:
        return tpl.render(self.rng, self.slots, fixed)

    def _due_needle(self) -> int | None:
        """Index of the pending needle to plant here, if any.

        A due needle waits for an article of its topic (a termination fee in a
        termination article, as in real contracts) for up to ``slack`` chars,
        then goes wherever the text is.
        """
        pos = self.w.pos
        for i, (due, kind, _) in enumerate(self.pending):
            if due > pos:
                break
            if not self.topical or self.kind in NEEDLE_HOMES[kind] or pos - due > self.slack:
                return i
        return None

    def _plant_needle(self, number: str, i: int = 0) -> None:
        _, kind, entity = self.pending.pop(i)
        spec = NEEDLE_KINDS[kind]
        value = self.slots.value(spec.value_slot)
        fact = self._render(spec.fact, entity=entity, value=value)
        question = self._render(spec.question, entity=entity)
        self.w.add(f"{number} ")
        start, end = self.w.add(fact)
        self.w.add("\n")
        self.needles.append(Needle(kind, fact, value, question, start, end, entity))

    def _sub_clause(self, number: str, tpl: Template) -> None:
        due = self._due_needle()
        if due is not None:
            self._plant_needle(number, due)
            return
        sentence = self._render(tpl)
        if self.mentions and self.w.pos >= self.mentions[0][0]:
            _, entity = self.mentions.pop(0)
            sentence += " " + self._render(self.rng.choice(MENTION_TEMPLATES), entity=entity)
        self.w.add(f"{number} {sentence}\n")

    def article(self, kind: str, prefix: str = "") -> None:
        self.article_no += 1
        no = self.article_no
        self.kind = kind
        start = self.w.pos
        heading = self.rng.choice(HEADINGS[kind])
        self.w.add(f"{prefix}ARTICLE {no}. {heading.upper()}\n")
        bank = sentences_for(kind)
        picks = self.rng.sample(bank, self.rng.randint(min(3, len(bank)), len(bank)))
        for i, tpl in enumerate(picks, start=1):
            self._sub_clause(f"{no}.{i}", tpl)
        end = self.w.pos
        self.w.add("\n")
        if kind in CLAUSE_TAXONOMY:
            # Text is sliced from the finished document in generate_contract.
            self.clauses.append(PlantedClause(kind, "", start, end))

    def done(self) -> bool:
        return self.w.pos >= self.target

    def run(self) -> str:
        rng = self.rng
        self.w.add(self._render(self.rng.choice(sentences_for("title"))) + "\n\n")
        for kind in self.clause_plan:
            if self.done():
                break
            self.article(kind)
        sow = 0
        while not self.done():
            sow += 1
            self.w.add(f"SCHEDULE {sow}. STATEMENT OF WORK NO. {sow}\n\n")
            plan = list(SOW_PLAN)
            rng.shuffle(plan)
            for kind in plan[: rng.randint(5, len(plan))]:
                if self.done():
                    break
                self.article(kind)
        # Needles whose slot fell past the end still get planted, in a final article.
        if self.pending:
            self.article_no += 1
            self.w.add(f"ARTICLE {self.article_no}. SUPPLEMENTAL TERMS\n")
            i = 0
            while self.pending:
                i += 1
                self._plant_needle(f"{self.article_no}.{i}")
            self.w.add("\n")
        self.w.add(self._render(self.rng.choice(sentences_for("signature"))) + "\n")
        return self.w.text()


def generate_contract(
    num_tokens_approx: int,
    num_needles: int = 10,
    seed: int = 0,
    clause_plan: Sequence[str] | None = None,
    *,
    tokenizer: Any | Callable[[str], int] | None = None,
    distractor_mentions: int = 2,
    topical_needles: bool = True,
) -> SyntheticContract:
    """A contract of about ``num_tokens_approx`` tokens with ``num_needles`` planted facts.

    Args:
        num_tokens_approx: target length in tokens (chars/4 without a tokenizer).
        num_needles: facts to plant, spread evenly; entities and values are unique.
        seed: makes the text, needles and positions reproducible.
        clause_plan: article kinds of the master agreement, in order (default:
            :data:`DEFAULT_CLAUSE_PLAN`); statements of work follow.
        tokenizer: HF tokenizer (``.encode``) or ``callable(text) -> n_tokens``
            used to calibrate chars per token.
        distractor_mentions: extra sentences naming each needle entity.
        topical_needles: plant each fact in an article of its topic when one
            comes soon after its slot (``False``: exactly at its slot).
    """
    if num_tokens_approx <= 0:
        raise ValueError(f"num_tokens_approx must be positive, got {num_tokens_approx}")
    plan = list(clause_plan) if clause_plan is not None else list(DEFAULT_CLAUSE_PLAN)
    unknown = [k for k in plan if k not in HEADINGS]
    if unknown:
        raise ValueError(f"unknown clause kinds {unknown}; known: {sorted(HEADINGS)}")
    cpt = 4.0
    if tokenizer is not None:
        probe = _Generator(seed + 7919, 60_000, 0, plan, 0).run()
        cpt = len(probe) / max(1, _count_tokens(tokenizer, probe))
    gen = _Generator(seed, int(num_tokens_approx * cpt), num_needles, plan, distractor_mentions, topical_needles)
    text = gen.run()
    clauses = [PlantedClause(c.kind, text[c.char_start:c.char_end], c.char_start, c.char_end) for c in gen.clauses]
    return SyntheticContract(
        text=text,
        needles=gen.needles,
        clauses=clauses,
        approx_tokens=int(len(text) / cpt),
        chars_per_token=cpt,
        seed=seed,
    )


# =====================================================================
# Template bank. Syntax: "[a|b|c]" picks one alternative (no nesting);
# "{slot}" is filled by SlotFiller (or by a fixed value such as {entity}).
# =====================================================================

_ALT = re.compile(r"\[([^\[\]]*)\]")
_SLOT = re.compile(r"\{(\w+)\}")


class Template:
    """A sentence pattern compiled once: literal parts and alternative sets."""

    __slots__ = ("parts",)

    def __init__(self, pattern: str) -> None:
        self.parts: list[str | tuple[str, ...]] = []
        pos = 0
        for m in _ALT.finditer(pattern):
            self.parts.append(pattern[pos : m.start()])
            self.parts.append(tuple(m.group(1).split("|")))
            pos = m.end()
        self.parts.append(pattern[pos:])

    def render(self, rng: random.Random, slots: "SlotFiller", fixed: dict[str, str]) -> str:
        s = "".join(p if isinstance(p, str) else rng.choice(p) for p in self.parts)
        s = _SLOT.sub(lambda m: fixed.get(m.group(1)) or slots.value(m.group(1)), s)
        return s[:1].upper() + s[1:]  # a sentence may open with a slot such as {doc}


_WORDS = ["five", "seven", "ten", "fourteen", "fifteen", "twenty", "thirty", "forty-five", "sixty", "ninety"]
_NUMS = [5, 7, 10, 14, 15, 20, 30, 45, 60, 90]
_FIRST = ["Amara", "Bastian", "Celeste", "Dmitri", "Elena", "Farid", "Greta", "Hiroshi", "Ingrid", "Jonas",
          "Kavya", "Lorenzo", "Mireille", "Nikolai", "Oona", "Priya", "Quentin", "Rosalind", "Soren", "Tamsin"]
_LAST = ["Achterberg", "Baptiste", "Castellanos", "Dunmore", "Eriksen", "Fairweather", "Gallagher", "Halvorsen",
         "Iwasaki", "Jablonski", "Kowalczyk", "Lindqvist", "Moreau", "Nakamura", "Okonkwo", "Pemberton"]
_JURIS = ["the State of New York", "the State of Delaware", "England and Wales", "the Province of Ontario",
          "the Republic of Singapore", "the State of California", "Ireland", "the Commonwealth of Massachusetts",
          "New South Wales", "the Canton of Zurich", "the State of Illinois", "Scotland"]
_CITIES = ["Rotterdam", "Leeds", "Tacoma", "Lyon", "Brisbane", "Calgary", "Porto", "Gdansk", "Osaka", "Tampere"]
_STREETS = ["Harbour Road", "Kingsway", "Industrial Parkway", "Mill Lane", "Quay Street", "Foundry Avenue"]
_BANKS = ["Northbridge Savings Bank", "Meridian Trust", "Atlas Commercial Bank", "Caldera Federal Bank"]
_TERMS = ["Confidential Information", "Deliverables", "Services", "Service Levels", "Personal Data", "Fees",
          "Background IP", "Foreground IP", "Acceptance Criteria", "Change Request", "Effective Date",
          "Business Day", "Losses", "Third-Party Claim", "Force Majeure Event", "Milestone"]
_DOCS = ["this Agreement", "the applicable Statement of Work", "any Order Form", "this Schedule"]
_PARTY = ["Client", "Vendor", "either Party", "each Party", "the receiving Party", "the disclosing Party"]

ENTITY_PREFIXES = ["Blue", "North", "Silver", "Iron", "Cedar", "Granite", "Amber", "Harbor", "Falcon", "Maple",
                   "Summit", "Coral", "Pine", "Copper", "Orchid", "Raven", "Willow", "Obsidian", "Sable", "Juniper"]
ENTITY_CORES = ["peak", "field", "gate", "stone", "bridge", "wood", "crest", "line", "vale", "point", "ridge",
                "brook", "haven", "moor", "ford", "wick"]
ENTITY_SUFFIXES = ["Logistics Ltd", "Analytics LLC", "Facilities GmbH", "Security Inc", "Cloud Services BV",
                   "Engineering plc", "Staffing Corp", "Telecom SA", "Printworks Ltd", "Data Centres AG",
                   "Consulting LLP", "Robotics Inc", "Freight Pty Ltd", "Catering Ltd", "Energy Oy"]


class SlotFiller:
    """Random values for template slots; party names are fixed per contract."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        names = _entity_names(rng, 2)
        self.fixed = {"client_name": names[0], "vendor_name": names[1]}

    def value(self, name: str) -> str:
        r = self.rng
        if name in self.fixed:
            return self.fixed[name]
        if name == "days":
            i = r.randrange(len(_NUMS))
            return f"{_WORDS[i]} ({_NUMS[i]})"
        if name == "n":
            return str(r.randint(2, 9))
        if name == "ndays":
            return str(r.choice([7, 10, 21, 28, 35, 40, 50, 75, 100, 120]) + r.randint(0, 4))
        if name == "months":
            return str(r.choice([3, 6, 9, 12, 18, 24, 36]))
        if name == "years":
            return str(r.choice([1, 2, 3, 4, 5, 6, 7, 8, 10, 12]))
        if name == "money":
            return f"USD {r.randint(100_000, 9_999_999):,}"
        if name == "pct":
            return f"{r.randint(1, 19)}.{r.randint(0, 9)}"
        if name == "section":
            return f"{r.randint(2, 24)}.{r.randint(1, 9)}"
        if name == "date":
            return f"{r.choice(['January', 'March', 'May', 'July', 'September', 'November'])} {r.randint(1, 28)}, {r.randint(2019, 2026)}"
        if name == "jurisdiction":
            return r.choice(_JURIS)
        if name == "city":
            return r.choice(_CITIES)
        if name == "person":
            return f"{r.choice(_FIRST)} {r.choice(_LAST)}"
        if name == "address":
            return f"{r.randint(2, 980)} {r.choice(_STREETS)}, {r.choice(_CITIES)}"
        if name == "account":
            return f"{r.randint(10, 99)}-{r.randint(1000, 9999)}-{r.randint(100000, 999999)}"
        if name == "bank":
            return r.choice(_BANKS)
        if name == "term":
            return r.choice(_TERMS)
        if name == "doc":
            return r.choice(_DOCS)
        if name == "party":
            return r.choice(_PARTY)
        raise KeyError(f"unknown template slot {{{name}}}")


class NeedleKind(NamedTuple):
    fact: Template
    question: Template
    value_slot: str


def _needle(fact: str, question: str, value_slot: str) -> NeedleKind:
    return NeedleKind(Template(fact), Template(question), value_slot)


NEEDLE_KINDS: dict[str, NeedleKind] = {
    "termination_fee": _needle(
        "The Termination Fee payable by {entity} [upon early termination|if it terminates early] is {value}.",
        "What is the termination fee payable by {entity}?", "money"),
    "liability_cap": _needle(
        "The aggregate liability of {entity} [under this Agreement|for all claims] shall not exceed {value}.",
        "What is the liability cap of {entity}?", "money"),
    "late_interest": _needle(
        "Late payments owed by {entity} accrue interest at {value} percent per annum.",
        "What interest rate applies to late payments owed by {entity}?", "pct"),
    "notice_days": _needle(
        "{entity} may terminate for convenience on {value} days' written notice.",
        "How many days' notice does {entity} need to terminate for convenience?", "ndays"),
    "confidentiality_years": _needle(
        "The confidentiality obligations of {entity} survive for {value} years after expiry.",
        "For how many years do the confidentiality obligations of {entity} survive?", "years"),
    "insurance": _needle(
        "{entity} shall maintain professional indemnity insurance of at least {value} per claim.",
        "How much professional indemnity insurance must {entity} maintain?", "money"),
    "governing_law": _needle(
        "Disputes concerning {entity} are governed by the laws of {value}.",
        "Which law governs disputes concerning {entity}?", "jurisdiction"),
    "bank_account": _needle(
        "Payments to {entity} shall be made to account number {value}.",
        "What is the account number for payments to {entity}?", "account"),
    "project_director": _needle(
        "The project director appointed by {entity} is {value}.",
        "Who is the project director appointed by {entity}?", "person"),
    "delivery_address": _needle(
        "{entity} shall deliver the equipment to {value}.",
        "Where shall {entity} deliver the equipment?", "address"),
    "payment_days": _needle(
        "Invoices issued by {entity} are payable within {value} days of receipt.",
        "Within how many days are invoices issued by {entity} payable?", "ndays"),
}

# Article kinds where each needle kind naturally lives.
NEEDLE_HOMES: dict[str, tuple[str, ...]] = {
    "termination_fee": ("termination",),
    "liability_cap": ("liability_cap",),
    "late_interest": ("payment",),
    "notice_days": ("termination", "term"),
    "confidentiality_years": ("confidentiality",),
    "insurance": ("insurance",),
    "governing_law": ("governing_law", "dispute_resolution", "scope"),
    "bank_account": ("payment",),
    "project_director": ("personnel", "scope"),
    "delivery_address": ("scope", "acceptance"),
    "payment_days": ("payment",),
}

MENTION_TEMPLATES = [Template(t) for t in [
    "[Vendor|Client] has engaged {entity} as a subcontractor for [part of|certain of] the Services.",
    "{entity} shall [comply with|observe] Client's site security and safety policies.",
    "Any personnel supplied by {entity} remain under [Vendor's|its own] direction and control.",
    "Reports prepared by {entity} [form part of|are included in] the monthly service review.",
    "{entity} [is|shall be] listed in the register of approved suppliers maintained by Client.",
]]

CLAUSE_TAXONOMY: tuple[str, ...] = (
    "parties", "term", "payment", "termination", "liability_cap",
    "indemnity", "confidentiality", "governing_law", "assignment",
)

HEADINGS: dict[str, list[str]] = {
    "parties": ["Parties", "The Parties and Recitals"],
    "definitions": ["Definitions and Interpretation", "Defined Terms"],
    "term": ["Term", "Term and Renewal", "Duration"],
    "scope": ["Scope of Services", "The Services", "Description of Work"],
    "payment": ["Fees and Payment", "Charges, Invoicing and Payment", "Payment Terms"],
    "service_levels": ["Service Levels", "Performance Standards"],
    "warranties": ["Warranties", "Representations and Warranties"],
    "ip": ["Intellectual Property", "Ownership of Deliverables"],
    "confidentiality": ["Confidentiality", "Confidential Information", "Non-Disclosure"],
    "data_protection": ["Data Protection", "Processing of Personal Data"],
    "liability_cap": ["Limitation of Liability", "Liability Cap", "Limits on Liability"],
    "indemnity": ["Indemnities", "Indemnification"],
    "insurance": ["Insurance", "Insurance Requirements"],
    "termination": ["Termination", "Termination and Suspension", "Consequences of Termination"],
    "force_majeure": ["Force Majeure", "Events Beyond Control"],
    "audit": ["Records and Audit", "Audit Rights"],
    "assignment": ["Assignment", "Assignment and Subcontracting"],
    "non_solicitation": ["Non-Solicitation", "Non-Solicitation of Personnel"],
    "notices": ["Notices", "Formal Notices"],
    "dispute_resolution": ["Dispute Resolution", "Escalation and Disputes"],
    "governing_law": ["Governing Law", "Governing Law and Jurisdiction", "Applicable Law"],
    "boilerplate": ["General", "Miscellaneous", "General Provisions"],
    "acceptance": ["Acceptance", "Testing and Acceptance"],
    "personnel": ["Key Personnel", "Staffing"],
    "change_control": ["Change Control", "Changes to the Services"],
}

DEFAULT_CLAUSE_PLAN: tuple[str, ...] = (
    "parties", "definitions", "term", "scope", "payment", "service_levels", "warranties", "ip",
    "confidentiality", "data_protection", "liability_cap", "indemnity", "insurance", "termination",
    "force_majeure", "audit", "assignment", "non_solicitation", "notices", "dispute_resolution",
    "governing_law", "boilerplate",
)

SOW_PLAN: tuple[str, ...] = (
    "scope", "term", "payment", "acceptance", "personnel", "service_levels", "change_control",
    "termination", "liability_cap", "indemnity", "confidentiality", "insurance", "data_protection", "audit",
)

_BANK: dict[str, list[str]] = {
    "title": [
        "MASTER SERVICES AGREEMENT\n\nThis Master Services Agreement is [made|entered into] on {date} between "
        "{client_name} (\"Client\") and {vendor_name} (\"Vendor\"), each a \"Party\" and together the \"Parties\".",
    ],
    "signature": [
        "IN WITNESS WHEREOF the Parties have [executed|signed] this Agreement by their duly authorised "
        "representatives on the dates written below. Signed for {client_name} by {person}; signed for "
        "{vendor_name} by {person}.",
    ],
    "parties": [
        "{client_name} is a company [incorporated|organised] under the laws of {jurisdiction} with its principal office in {city}.",
        "{vendor_name} is a company [incorporated|organised] under the laws of {jurisdiction} [whose registered office is|with its seat] in {city}.",
        "Client wishes to [procure|obtain] the Services and Vendor [has agreed|is willing] to provide them on the terms of this Agreement.",
        "Vendor represents that it has the [skills|expertise], resources and experience needed to perform the Services.",
        "The Parties [intend|wish] that this Agreement govern every Statement of Work entered into under it.",
        "Affiliates of Client may [order Services|place orders] under this Agreement by signing a Statement of Work.",
    ],
    "definitions": [
        "\"{term}\" [has the meaning given in|is defined in] Section {section}[| of this Agreement].",
        "\"Business Day\" means a day other than a Saturday, Sunday or public holiday in {city}.",
        "Headings are for convenience only and do not [affect|limit] the interpretation of {doc}.",
        "Words in the singular include the plural and [vice versa|the reverse], and \"including\" means including without limitation.",
        "A reference to a statute includes that statute as amended, extended or re-enacted from time to time.",
        "\"Losses\" means all losses, damages, costs, [fines|penalties] and reasonable legal fees.",
        "In case of conflict, the main body of this Agreement prevails over the Schedules unless {doc} expressly states otherwise.",
    ],
    "term": [
        "{doc} commences on the Effective Date and continues for an initial term of {months} months.",
        "Thereafter {doc} renews automatically for successive periods of {months} months unless [either Party|a Party] gives {days} days' notice of non-renewal.",
        "Expiry of this Agreement does not affect any Statement of Work then in force, which continues on these terms until completed.",
        "Either Party may request an extension of the term by written notice at least {days} days before expiry.",
        "The renewal term is subject to the fee review described in Section {section}.",
        "Any extension [shall be|must be] recorded in a written amendment signed by both Parties.",
    ],
    "scope": [
        "Vendor shall provide the Services described in each Statement of Work [with due skill and care|in a professional manner].",
        "The Services include design, implementation, hosting and [ongoing support|maintenance] of the systems identified in {doc}.",
        "Vendor shall [supply|provide] all labour, tools and materials necessary to perform the Services unless {doc} states otherwise.",
        "Client shall give Vendor reasonable access to its premises and systems [as needed|to the extent required] for the Services.",
        "Vendor shall deliver the Deliverables in accordance with the project plan agreed under Section {section}.",
        "Any service not expressly described in a Statement of Work is out of scope and requires a Change Request.",
        "Vendor shall [cooperate|work in good faith] with Client's other suppliers to the extent reasonably required.",
        "Progress meetings are held every {n} weeks unless the Parties agree a different cadence.",
    ],
    "payment": [
        "Client shall pay the Fees set out in {doc} [in consideration for|in return for] the Services.",
        "Vendor shall invoice Client monthly in arrears, [itemising|listing] the Services performed and any expenses incurred.",
        "Undisputed invoices are payable within {days} days of receipt [by electronic transfer|by bank transfer].",
        "Late payments accrue interest at the rate stated in {doc}, calculated daily from the due date.",
        "All Fees are exclusive of value added tax and other sales taxes, which Client shall pay in addition.",
        "Client may [withhold|dispute] any amount it disputes in good faith by notice stating its reasons within {days} days.",
        "Expenses are reimbursable only if [approved in writing in advance|pre-approved by Client] and properly receipted.",
        "Payments shall be made to the bank account [notified|designated] by Vendor in writing from time to time.",
        "Fees may be adjusted once per contract year by no more than the change in the consumer price index.",
    ],
    "service_levels": [
        "Vendor shall meet or exceed the Service Levels set out in {doc}.",
        "Availability is measured monthly and excludes planned maintenance notified at least {days} days in advance.",
        "If Vendor fails a Service Level, Client is entitled to the service credits calculated under Section {section}.",
        "Service credits are a price adjustment and [are not|shall not be] Client's sole remedy for persistent failure.",
        "Vendor shall [provide|deliver] a monthly report showing performance against each Service Level.",
        "Repeated failure of a critical Service Level in {n} consecutive months is a material breach.",
    ],
    "warranties": [
        "Each Party warrants that it has full power and authority to enter into {doc}.",
        "Vendor warrants that the Services will be performed [in a workmanlike manner|with reasonable skill and care] by qualified personnel.",
        "Vendor warrants that the Deliverables will conform to their specification for {days} days after acceptance.",
        "Except as expressly stated, all implied warranties are excluded to the extent permitted by law.",
        "Vendor warrants that it will not introduce malicious code into Client's systems.",
        "Vendor shall [remedy|correct] any breach of warranty promptly and at its own cost.",
    ],
    "ip": [
        "Each Party retains ownership of its Background IP.",
        "Foreground IP created by Vendor in performing the Services vests in Client on [payment|full payment] of the relevant Fees.",
        "Vendor grants Client a non-exclusive, perpetual licence to use any Background IP embedded in the Deliverables.",
        "Neither Party may use the other Party's trade marks without prior written consent.",
        "Vendor shall [execute|sign] any documents reasonably needed to perfect Client's ownership of the Foreground IP.",
    ],
    "confidentiality": [
        "The receiving Party shall keep the disclosing Party's Confidential Information [secret|in confidence] and use it only for {doc}.",
        "Confidential Information may be disclosed to employees and advisers who need to know it and are bound by equivalent duties.",
        "These obligations do not apply to information that is or becomes public other than through breach of {doc}.",
        "A Party compelled by law to disclose Confidential Information shall, where lawful, notify the other Party [first|promptly].",
        "On termination each Party shall return or destroy the other Party's Confidential Information on request.",
        "The confidentiality obligations in this Article survive expiry or termination for the period stated in {doc}.",
        "Breach of this Article may cause [irreparable harm|harm for which damages are inadequate], and injunctive relief may be sought.",
    ],
    "data_protection": [
        "Vendor shall process Personal Data only on Client's documented instructions.",
        "Vendor shall implement appropriate technical and organisational measures to protect Personal Data.",
        "Vendor shall notify Client of any personal data breach without undue delay and in any event within {n} hours.",
        "Vendor shall not transfer Personal Data outside {jurisdiction} without Client's prior written consent.",
        "On request Vendor shall [assist|support] Client in responding to requests from data subjects.",
    ],
    "liability_cap": [
        "Neither Party excludes liability for death or personal injury caused by its negligence, or for fraud.",
        "Subject to Section {section}, each Party's total liability is capped at the amount stated in {doc}.",
        "Where no cap is stated, the cap equals the Fees paid in the {months} months before the claim arose.",
        "Neither Party is liable for loss of profits, revenue or goodwill, or for indirect or consequential loss.",
        "The liability cap does not apply to breach of confidentiality or to the indemnities in this Agreement.",
        "Each Party shall take reasonable steps to [mitigate|reduce] any loss for which it claims against the other.",
    ],
    "indemnity": [
        "Vendor shall indemnify Client against Losses arising from any Third-Party Claim that the Deliverables infringe intellectual property rights.",
        "Client shall indemnify Vendor against Losses arising from materials supplied by Client [for use in|to support] the Services.",
        "The indemnified Party shall notify the indemnifying Party of a claim promptly and allow it to conduct the defence.",
        "The indemnifying Party shall not settle any claim without the indemnified Party's consent, not to be unreasonably withheld.",
        "If the Deliverables are held to infringe, Vendor may modify them or procure a licence at its own cost.",
    ],
    "insurance": [
        "Vendor shall maintain with reputable insurers the insurance required by {doc}.",
        "Professional indemnity insurance shall be maintained for at least {years} years after termination.",
        "Vendor shall produce certificates of insurance on request [within|no later than] {days} days.",
        "Vendor shall notify Client if any required policy is cancelled or materially changed.",
        "Public liability insurance shall cover at least the amount stated in the applicable Statement of Work.",
    ],
    "termination": [
        "Either Party may terminate {doc} by notice if the other Party commits a material breach not remedied within {days} days.",
        "Either Party may terminate immediately if the other becomes insolvent or enters administration.",
        "Client may terminate for convenience on written notice, subject to payment of any termination fee agreed in {doc}.",
        "On termination Client shall pay for Services performed up to the termination date and any applicable termination fee.",
        "Termination does not affect rights and remedies accrued before the termination date.",
        "Vendor shall provide reasonable exit assistance for up to {months} months after termination.",
        "Client may suspend the Services if Vendor's performance poses a material risk to Client's operations.",
        "Provisions that by their nature should survive termination, including Articles on confidentiality and liability, survive.",
    ],
    "force_majeure": [
        "Neither Party is liable for delay caused by a Force Majeure Event, provided it notifies the other Party promptly.",
        "If a Force Majeure Event continues for more than {days} days, either Party may terminate the affected Services.",
        "The affected Party shall use reasonable endeavours to mitigate the effect of the Force Majeure Event.",
        "Lack of funds and strikes by a Party's own personnel are not Force Majeure Events.",
    ],
    "audit": [
        "Vendor shall keep complete and accurate records of the Services and Fees for {years} years.",
        "Client or its auditors may audit those records on {days} days' notice, no more than once per contract year.",
        "If an audit reveals an overcharge of more than {pct} percent, Vendor shall bear the cost of the audit.",
        "Vendor shall [cooperate fully|give reasonable cooperation] with any regulator with authority over Client.",
    ],
    "assignment": [
        "Neither Party may assign or transfer {doc} without the other Party's prior written consent.",
        "Client may assign {doc} to an Affiliate or to a successor to its business on notice.",
        "Vendor may subcontract the Services only with Client's consent and remains responsible for its subcontractors.",
        "Any purported assignment in breach of this Article is void.",
        "A change of control of Vendor is treated as an assignment for the purposes of this Article.",
    ],
    "non_solicitation": [
        "During the term and for {months} months after it, neither Party shall solicit the other's key employees.",
        "General advertisements not targeted at the other Party's staff do not breach this Article.",
        "If a Party breaches this Article it shall pay the other a recruitment fee equal to {pct} percent of the person's salary.",
    ],
    "notices": [
        "Notices shall be in writing and delivered by hand, courier or email to the addresses in {doc}.",
        "A notice is deemed received on delivery if by hand, or on the next Business Day if by email.",
        "Notices to Client shall be marked for the attention of the General Counsel at {address}.",
        "Either Party may change its notice details by giving notice to the other Party.",
    ],
    "dispute_resolution": [
        "The Parties shall first attempt to resolve any dispute through their project managers within {days} days.",
        "Unresolved disputes shall be escalated to senior executives, who shall meet within {days} days.",
        "If escalation fails, either Party may refer the dispute to mediation in {city}.",
        "Nothing in this Article prevents a Party from seeking urgent injunctive relief.",
    ],
    "governing_law": [
        "{doc} and any non-contractual obligations arising from it are governed by the laws of {jurisdiction}.",
        "The courts of {jurisdiction} have exclusive jurisdiction to settle any dispute arising from {doc}.",
        "Each Party irrevocably waives any objection to proceedings in those courts on the ground of venue.",
        "The United Nations Convention on Contracts for the International Sale of Goods does not apply.",
    ],
    "boilerplate": [
        "{doc} constitutes the entire agreement between the Parties and supersedes all prior understandings.",
        "If any provision is held invalid, the remaining provisions continue in full force and effect.",
        "No failure or delay in exercising a right operates as a waiver of that right.",
        "{doc} may be executed in counterparts, each of which is an original.",
        "No variation of {doc} is effective unless in writing and signed by both Parties.",
        "Nothing in {doc} creates a partnership, joint venture or agency between the Parties.",
        "A person who is not a Party has no right to enforce any term of {doc}.",
    ],
    "acceptance": [
        "Client shall test each Deliverable against the Acceptance Criteria within {days} days of delivery.",
        "If a Deliverable fails testing, Vendor shall correct the defects and resubmit it within {days} days.",
        "A Deliverable is deemed accepted if Client uses it in live operation for more than {days} days.",
        "Acceptance of a Milestone does not waive Client's rights in respect of latent defects.",
    ],
    "personnel": [
        "Vendor shall assign the Key Personnel named in {doc} and shall not replace them without Client's consent.",
        "Vendor shall appoint a project director responsible for the overall delivery of the Services.",
        "Client may require the removal of any Vendor personnel who breach Client's site rules.",
        "Vendor personnel remain employees of Vendor and are not entitled to benefits from Client.",
        "Vendor shall ensure its personnel have passed the background checks required by Client's policies.",
    ],
    "change_control": [
        "Either Party may propose a change to the Services by submitting a Change Request.",
        "Vendor shall assess each Change Request and respond with its impact on Fees and timetable within {days} days.",
        "No change is binding until a Change Request is signed by authorised representatives of both Parties.",
        "Vendor shall not refuse a reasonable Change Request required to comply with law.",
    ],
}

_COMPILED: dict[str, list[Template]] = {}


def sentences_for(kind: str) -> list[Template]:
    """Compiled templates of one clause kind (cached)."""
    if kind not in _COMPILED:
        _COMPILED[kind] = [Template(p) for p in _BANK[kind]]
    return _COMPILED[kind]
