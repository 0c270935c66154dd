"""Title lines of the documents in a case file: what names an instrument, and where its document begins.

A title line ("CLOUD SERVICE AGREEMENT", "# Basecamp Terms of Service", "<h1>Account Agreement</h1>") names an
instrument; alone it may be an unnumbered clause heading ("Payment Terms"), so it starts a document only when
what follows confirms it (:func:`is_title`): the numbering starts again at 1, or the instrument's own text
begins (it names itself, states how it is accepted, opens a preamble or names its parties). :func:`title_of`
gives the offset where a document opening at a block begins (its title lines, a legend, the file's front
matter or the covering letter above it) and the name a reader would give it. Used by
:mod:`.document_starts` and :mod:`.documents`.
"""

from __future__ import annotations

import re

from .sentences import html_visible

__all__ = ["INSTRUMENT", "SIGNATURE", "CLOSE", "NUMBERED", "TITLE_GAP", "SELF_WINDOW", "is_title",
           "title_line_between", "title_of", "restarts_numbering", "LEGAL_WORDS",
           "drafting_block"]

# The words that name an instrument (an opening's "This ... Agreement", a title's last word).
INSTRUMENT = (r"(?:agreement|contract|amendment|addendum|terms|license|licence|lease|deed|memorandum|"
               r"understanding|order\s+form|statement\s+of\s+work|sow|note|indenture|guaranty|guarantee)")
# A title line that names an instrument ("Cloud Service Agreement", "SOFTWARE LICENSE AGREEMENT
# (Version 2)", "Amendment No. 1 to the Master Services Agreement", "Standard Terms"): unnumbered,
# the instrument's word among its last words. Alone it may be an unnumbered heading inside an
# agreement ("Payment Terms"), so it starts a document only when the numbering restarts after it.
_TITLE_INSTRUMENT = (r"(?:agreement|contract|amendment|addendum|license|licence|lease|deed|nda|memorandum\s+of\s+"
                     r"understanding|order\s+form|statement\s+of\s+work|(?:standard|general|master|platform|cloud|"
                     r"online|services?|user|use|website|subscription)\s+terms|terms\s+(?:and\s+conditions|"
                     r"of\s+(?:service|use|sale|business|engagement))|(?:convertible\s+)?promissory\s+note|"
                     r"convertible\s+note|(?:general\s+)?conditions\s+of\s+(?:purchase|sale|supply|contract|business)|"
                     r"general\s+conditions)")
# The instrument's word ends the title, or is followed only by a version, a parenthetical or a
# "for ..." / "to ..." / "- ..." tail, or a second instrument joined to it ("Agreement and Release"): "License
# Agreement for NVIDIA SDKs", "Public License v. 1.2";
# not "License Grant", a section heading.
_TITLE = re.compile(rf"^(?:\#{{1,6}}[ \t]+)?[^\w\n]{{0,3}}(?:1\.[ \t]+)?"
                    rf"(?![\d(]|end\b|(?:article|section|clause|chapter|part)\s+\w|(?:signed|executed|delivered)\b)"
                    rf"(?:[\w&'\u2019\u201c\u201d\x22,.-]+\s+){{0,10}}?{_TITLE_INSTRUMENT}"
                    r"(?:\s*(?:v\.?|version)\s*[\d.]+|\s*\([^)]{0,60}\)|\s+(?:for|to|of|between)\s+.{0,80}|"
                    r"\s*[-\u2013\u2014:]\s+.{0,80}|\s+(?:&|and)\s+(?:[\w-]+\s+){0,3}?(?:release|waiver|consent|plan\s+of\s+\w+))?"
                    r"\W*$", re.I)
# Markdown marks before the number count as layout: "### 1. Term", "**1.\tThe Agreement**.".
NUMBERED = re.compile(r"(?m)^[ \t]*(?:\#{1,6}[ \t]+)?[*_]{0,3}"
                       r"(?:(?:ARTICLE|Article|SECTION|Section|CLAUSE|Clause)\s+)?(?P<n>\d+|[IVX]+)"
                       r"(?:\.\d+)*[.):]?[*_]{0,3}[ \t]+\S")
_RESTART_WINDOW = 4000  # the first numbered line after a title, looked for this far
# How an instrument's own text begins: it names itself ("This Agreement is ...", "This European Union
# Public Licence applies ..."), states how it is accepted ("By downloading ..."), opens a preamble, or names
# its parties ("Between us, X and you", "Between A and B").
_SELF_START = re.compile(r"^\W{0,3}(?:(?:this|these)\s+(?:[\w'\u2019-]+\s+){0,8}?(?:agreement|licen[cs]e|terms|"
                         r"amendment|addendum|contract|conditions)\b|(?:by\s+and\s+)?between\s+(?:us\b|[^\n]{1,200}?\band\b)|by\s+(?:downloading|installing|using|accessing|exercising|"
                         r"clicking|signing|executing)\b|i\s+(?:hereby\s+)?(?:accept|agree)\b|preamble\b|version\s+\d|(?:important\s+)?notice\b|(?:please\s+)?read\s+"
                         r"(?:this|the\s+following|carefully|before)\b)", re.I)
SELF_WINDOW = 1500
SIGNATURE = re.compile(r"^\s*(?:By|Name|Title|Date|Its|Signature|Signed)\s*:", re.I)
CLOSE = re.compile(r"\bIN\s+WITNESS\s+WHEREOF\b|\bEND\s+OF\s+TERMS\s+AND\s+CONDITIONS\b"
                    r"|^\s*(?:By|Signature|Signed)\s*:\s*_{3,}|^\s*By\s*:\s*$"
                    r"|\bexecuted\s+(?:this\s+)?(?:Agreement|Amendment)\s+as\s+of\b", re.I | re.M)
_TITLE_WORDS = re.compile(rf"\b{INSTRUMENT}\b|\bnda\b|\bexhibit\b|\bschedule\b|\bannex\b|\bconditions\s+of\s+\w|"
                          r"\bgeneral\s+conditions\b", re.I)
_TITLE_LOOKBACK = 3  # title blocks above an opening that belong to its document
TITLE_GAP = 600  # characters between a title block and the opening


def title_of(text: str, bl, k: int) -> tuple[int, str]:
    """Start offset and name of the document whose opening is block ``k``: the heading blocks
    just above it (at most ``_TITLE_LOOKBACK``, no more than ``TITLE_GAP`` apart), or block ``k``
    itself when it is the title line. A title numbered 1 ("1. License Agreement for NVIDIA SDKs")
    is where the document begins: nothing above it is looked at."""
    own = " ".join(html_visible(text[bl[k].start:bl[k].end]).split())
    title_line = bl[k].heading or is_title(text, bl, k)
    start, at = bl[k].start, bl[k].start
    names = [own] if title_line else []
    numbered_one = title_line and re.match(r"1[.)]?\s", own) is not None
    lookback = 0 if numbered_one else _TITLE_LOOKBACK
    for j in range(k - 1, max(-1, k - 1 - lookback), -1):
        b = bl[j]
        if not b.heading or at - b.end > TITLE_GAP or SIGNATURE.match(text[b.start:b.end]):
            break
        if text.rfind("<!--", 0, b.start) > text.rfind("-->", 0, b.start):
            break  # a line of an HTML comment ("SPDX-License-Identifier: ..."), see _file_markup_above
        start, at = b.start, b.start
        names.append(" ".join(html_visible(text[b.start:b.end]).split()))
    j = next((j for j in range(k - 1, -1, -1) if bl[j].end <= start), None)
    if (j is not None and not numbered_one and start - bl[j].end <= TITLE_GAP
            and _is_legend(text[bl[j].start:bl[j].end])):
        start = bl[j].start  # "THIS NOTE ... HAS NOT BEEN REGISTERED ..." over "CONVERTIBLE PROMISSORY NOTE"
    start = _contents_above(text, bl, k, start)
    in_order = names[::-1]
    named = [n for n in in_order if _TITLE_WORDS.search(n)]
    if named:
        name = re.sub(r"^1[.)]?\s+", "", named[0])
        above = in_order[:in_order.index(named[0])]  # heading lines above the title, none naming an instrument
        if above and _ORGANISATION.search(above[-1]):
            # "GUROBI OPTIMIZATION, LLC" over "END-USER LICENSE AGREEMENT": whose agreement it is, so
            # that several end-user licences of one case file are told apart.
            name = f"{above[-1].rstrip(' ,.')} {name}"
        return _file_markup_above(text, start), _named_in_text(_MARKUP.sub("", _INLINE_TAG.sub("", name)).strip(), text,
                                                             bl[k].end)[:120]
    # The instrument the opening names: "this Evaluation Agreement" before "the terms" it mentions.
    m = (re.search(rf"\bthis\s+((?:[\w&'-]+\s+){{0,8}}?{INSTRUMENT})\b", own, re.I)
         or re.search(rf"(?:this|the)\s+((?:[\w&'-]+\s+){{0,8}}?{INSTRUMENT})\b", own, re.I))
    head = _file_markup_above(text, start)
    fm = next((f for f in _FRONT_MATTER.finditer(text, head, bl[k].end + 4000) if f.start() <= bl[k].start), None)
    front = _FRONT_MATTER_TITLE.search(text, fm.start(), fm.end()) if fm else None
    # An untitled opening under front matter ("title: GitHub Event Terms"): the page's own title names it.
    name = m.group(1) if m else (front["name"].strip().strip("'\"") if front else "document")
    return head, name[:120]


_FRONT_MATTER_TITLE = re.compile(r"(?im)^[ \t]*title[ \t]*[:=][ \t]*(?P<name>[^\n]*\w[^\n]*)$")


# A legend printed above an instrument's title, in capitals, that speaks of the instrument itself ("THIS NOTE AND
# THE SECURITIES ISSUABLE UPON ITS CONVERSION HAVE NOT BEEN REGISTERED ...", "THIS AGREEMENT CONTAINS A BINDING
# ARBITRATION CLAUSE"): part of the instrument, above its title.
_LEGEND = re.compile(r"^\W{0,3}TH(?:IS|ESE)\s+(?:[A-Z-]+\s+){0,3}?(?:NOTE|NOTES|AGREEMENT|SECURITIES|WARRANT|SHARES|"
                     r"CERTIFICATE|INSTRUMENT|DEBENTURE|BOND)S?\b")


def _is_legend(block: str) -> bool:
    letters = [c for c in block if c.isalpha()]
    return (_LEGEND.match(block) is not None and len(letters) >= 40
            and sum(c.isupper() for c in letters) >= 0.9 * len(letters))


# Markdown marks around a title line ("# Basecamp Terms of Service", "**MASTER AGREEMENT**"): layout, not name.
_MARKUP = re.compile(r"^\#{1,6}[ \t]+|(?<!\w)[*_]{1,3}|[*_]{1,3}(?!\w)|[ \t]+\#+$")


# A line that names an organisation: a heading of it above a title says whose agreement it is.
_ORGANISATION = re.compile(r"^[^\n]{2,60}?,?\s+(?:Inc|LLC|L\.L\.C|Ltd|Limited|GmbH|AG|S\.A|B\.V|PLC|Corp|Corporation|"
                           r"Co|LLP|SE|SAS)\.?$", re.I)

# A title that names no instrument of its own: every Common Paper agreement's terms are headed
# "Standard Terms", so a case file of four of them would list four documents of one name.
_GENERIC_TITLE = re.compile(r"^(?:the\s+)?(?:standard|general|common|master)?\s*terms(?:\s+and\s+conditions)?\W*$",
                            re.I)
_SELF_NAME = re.compile(rf"\bthis\s+((?:[A-Z][\w&'\u2019-]*\s+){{0,6}}{INSTRUMENT})\b", re.I)
_SELF_NAME_WINDOW = 1500


def _named_in_text(title: str, text: str, after: int) -> str:
    """``title``, or for a generic one the name the text gives itself soon after it ("This Mutual
    Non-Disclosure Agreement (which incorporates these Standard Terms ...)" ->
    "Mutual Non-Disclosure Agreement (Standard Terms)")."""
    if not _GENERIC_TITLE.match(title):
        return title
    for m in _SELF_NAME.finditer(text, after, after + _SELF_NAME_WINDOW):
        words = m.group(1).split()
        if len(words) > 1 and all(w[:1].isupper() for w in words):  # a proper name, not "this agreement"
            return f"{' '.join(words)} ({title})"
    return title


# What a file written as Markdown or a template carries above its title, no part of its text but of its file:
# YAML front matter between two "---" lines, an HTML comment (an SPDX line, a source note), a template tag line,
# a line of opening HTML tags.
_FRONT_MATTER = re.compile(r"(?m)^---[ \t]*\n(?:[ \t]*(?:[\w-]+:|-[ \t])[^\n]*\n){1,40}?---[ \t]*$")
_COMMENT = re.compile(r"(?:^|\n)[ \t]*<!--(?:(?!-->).){0,1500}?-->[ \t]*$", re.S)
_TEMPLATE_LINE = re.compile(r"(?:^|\n)[ \t]*\{%[^\n]{0,200}?%\}[ \t]*$")
# A line of opening tags only ("<section>", "<div class=...>") right above: the markup the document's text is in.
_OPEN_TAGS = re.compile(r"(?:^|\n)[ \t]*(?:<(?:section|div|article|main|body|html)\b[^<>\n]{0,200}>[ \t]*)+$", re.I)
_MARKUP_ABOVE_CHARS = 2000


# A letter that encloses the agreement (an offer of employment, an engagement letter): its salutation a short
# way above the title, no signature or close between, starts the document.
_SALUTATION = re.compile(r"(?m)^[^\w\n]{0,3}Dear\s+[^\n]{1,80},[ \t]*$")
_LETTER_CHARS = 1500


def _file_markup_above(text: str, start: int) -> int:
    """``start`` moved up over the front matter, comments and template tag lines right above it, and
    over the covering letter of the agreement (see ``_SALUTATION``)."""
    letter = list(_SALUTATION.finditer(text, max(0, start - _LETTER_CHARS), start))
    if letter and not CLOSE.search(text, letter[-1].start(), start) and not any(
            SIGNATURE.match(line) for line in text[letter[-1].start():start].splitlines()):
        start = letter[-1].start()
    while True:
        off = max(0, start - _MARKUP_ABOVE_CHARS)
        # front matter ending right above ``start``, or holding it (a "- item" line of it read as a heading)
        front = [m for m in _FRONT_MATTER.finditer(text, off, start + 300)
                 if m.start() < start and (m.end() > start or not text[m.end():start].strip())]
        if front:
            start = front[-1].start()
            continue
        head = text[off:start].rstrip()
        m = _COMMENT.search(head) or _TEMPLATE_LINE.search(head) or _OPEN_TAGS.search(head)
        if m is None:
            return start
        start = off + m.start() + (1 if m.group(0).startswith("\n") else 0)


def restarts_numbering(text: str, at: int) -> bool:
    """Whether the first numbered line within ``_RESTART_WINDOW`` after ``at`` is number 0 or 1."""
    first = NUMBERED.search(text, at, at + _RESTART_WINDOW)
    return first is not None and first["n"] in ("0", "1", "I")


def _begins_itself(text: str, bl, k: int) -> bool:
    """Whether a block within ``SELF_WINDOW`` after block ``k`` begins the way an instrument's text does."""
    end = bl[k].end + SELF_WINDOW
    for b in bl[k + 1:]:
        if b.start > end:
            return False
        if _SELF_START.match(text[b.start:b.start + 300]):
            return True
    return False

_INLINE_TAG = re.compile(r"</?(?:strong|b|em|i|u|span|font)\b[^>]{0,200}>", re.I)
# A line that refers to its instrument ("Changes to these Terms", "Termination of this Agreement") is a clause
# heading or a sentence of the instrument; a title names it.
_REFERS = re.compile(r"\b(?:this|these)\s+(?:[\w'\u2019-]+\s+){0,4}?(?:agreement|terms|licen[cs]e|contract|nda)\b",
                     re.I)
# A heading that names its instrument by the definite article after "of" ("Scope of the Agreement", "Termination
# of the Contract") heads a clause of the instrument it is in; a title names its own instrument.
_OF_THE = re.compile(r"\bof\s+the\s+(?:[\w'\u2019-]+\s+){0,2}?(?:agreement|contract|terms|licen[cs]e|conditions)\W*$",
                     re.I)
# The words that begin an agreement's operative part, after its recitals.
_OPERATIVE = re.compile(r"(?:now,?\s+therefore|it\s+is\s+(?:hereby\s+)?agreed|the\s+parties\s+(?:hereby\s+)?agree)\b",
                        re.I)


def is_title(text: str, bl, k: int) -> bool:
    """Whether block ``k`` is a title line naming an instrument, confirmed by what follows it."""
    b = bl[k]
    if not b.heading and ("\n" in text[b.start:b.end] or b.end - b.start > 90):
        return False  # a paragraph, not a title line
    nxt = bl[k + 1] if k + 1 < len(bl) else None
    if nxt is not None and nxt.heading and _TITLE.match(" ".join(html_visible(text[nxt.start:nxt.end]).split())):
        return False  # the next line is the title proper ("GUROBI OPTIMIZATION, LLC" over "END-USER LICENSE ...")
    line = " ".join(html_visible(text[b.start:b.end]).split())  # "<h1>Account Agreement</h1>": its visible text
    line = _INLINE_TAG.sub("", line)  # "<strong>MASTER AGREEMENT</strong>": emphasis, as "**...**" is
    if line.lower().strip(" .:") == "terms and conditions":
        return False  # the heading of a licence's operative part (GPL), not a title
    if line[:1].isdigit() and (len(line.split()) < 4 or line.endswith(".")):
        return False  # "1. LICENSE.": a first section; "1. License Agreement for NVIDIA SDKs" may be a title
    if re.match(r"(?:\#{1,6}\s+)?[A-Z][.)]\s", line):
        return False  # "### E. General Conditions": a lettered part of the instrument it is in
    if _REFERS.search(line) or _OF_THE.search(line):
        return False  # "Interpreting these Use Terms", "Scope of the Agreement": a clause names its instrument so
    if nxt is not None and _OPERATIVE.match(html_visible(text[nxt.start:nxt.start + 200]).lstrip("*_ \t")):
        return False  # "AGREEMENT" over "NOW, THEREFORE, ...": the heading of the operative part after the recitals
    if _TITLE.match(line) is None:
        return False
    if restarts_numbering(text, b.end):
        return True
    # Confirmed by its text alone, a title line right after clauses of drafting ("... any court with jurisdiction."
    # over "# General Terms") heads a part of the instrument those clauses are in: a new instrument follows a
    # signature block, other text or the start of the file, or starts its numbering again.
    return _begins_itself(text, bl, k) and not (k and b.start - bl[k - 1].end <= TITLE_GAP
                                                and drafting_block(text, bl[k - 1]))


def title_line_between(text: str, bl, start: int, end: int) -> bool:
    """Whether a heading block in ``[start, end)`` names an instrument or an attachment (see ``_TITLE_WORDS``)."""
    return any(b.heading and start <= b.start < end and _TITLE_WORDS.search(html_visible(text[b.start:b.end]))
               for b in bl)


# Words of legal drafting (a block with two of them reads as part of an instrument, see :mod:`.document_starts`).
LEGAL_WORDS = re.compile(r"\b(?:shall|hereby|herein|hereunder|hereto|hereof|thereof|whereas|licens(?:or|ee)s?|"
                         r"agreements?|part(?:y|ies)|warrant(?:y|ies)|liab(?:le|ility)|indemni\w*|governed|"
                         r"jurisdiction|breach|pursuant|notwithstanding)\b", re.I)


def drafting_block(text: str, b) -> bool:
    """Whether block ``b`` reads as drafting: a word of legal drafting, or a numbered clause."""
    return LEGAL_WORDS.search(text, b.start, b.end) is not None or NUMBERED.match(text, b.start) is not None


# A table of contents above an agreement's opening, and the cover page above it (short heading lines, one naming the
# instrument: "OUTSOURCING AGREEMENT dated as of ..., A and B", a filing's exhibit number): the agreement's first pages.
_CONTENTS = re.compile(r"^\W{0,3}(?:table\s+of\s+)?contents\W*$", re.I)
_CONTENTS_CHARS = 8000
_COVER_LINES = 4


def _contents_above(text: str, bl, k: int, start: int) -> int:
    """``start`` moved up to the cover page over a table of contents within ``_CONTENTS_CHARS`` above it (no
    signature or close between), else ``start``."""
    toc = next((j for j in range(k - 1, -1, -1) if bl[j].end <= start and bl[j].heading
                and _CONTENTS.match(text[bl[j].start:bl[j].end])), None)
    if toc is None or start - bl[toc].start > _CONTENTS_CHARS or CLOSE.search(text, bl[toc].start, start):
        return start
    at, named = bl[toc].start, False
    for j in range(toc - 1, max(-1, toc - 1 - _COVER_LINES), -1):
        b = bl[j]
        line = text[b.start:b.end]
        titled = _TITLE_WORDS.search(line) is not None
        if (b.end - b.start > 200 or at - b.end > TITLE_GAP or SIGNATURE.match(line)
                or not (b.heading or titled)):
            break
        at, named = b.start, named or titled
    return at if named else bl[toc].start
