"""What the QA agent does for one question: a quote chosen from the source, then a short answer.

A 270M base model cannot be trusted to write a word-for-word quote (on the selection dev set it
matched 0 of 20 planted facts when asked to), but it can *score* sentences of the document as the
answer to a question. So the quote is chosen, not written:

1. Retrieval ranks pages for the question (in both attention modes, as the clause extractor does);
   the passage that got each of the best ``OPTIONS`` pages ranked is a candidate quote. Passages are
   whole sentences (retrieval.passages), so a candidate is never a fragment.
2. The model scores each candidate as the continuation of ``Quote the sentence that answers it``
   (mean log-probability per token), attending its plan (or every page when dense). Its scores
   are standardised and added to retrieval's rank prior with ``MODEL_WEIGHT``; the best is quoted.
3. The answer is generated after the chosen quote, and cited by the quote's span: source text by
   construction, so the citation is verified.

Without candidates (a document too short to need ranking), the model writes the quote and it is
located in the source (:func:`cite`), as before.

A question that asks for a clause kind ("Who may assign the agreement?") is answered by that
kind's operative sentence as the review finds it (:mod:`.question_scope`, docs/REVIEW.md): the
rules' sentence is the first candidate and is quoted (``chosen_by="rules"``); the model's scores
of every candidate are kept as a second opinion, as for the review's clauses, because on the
review's dev set the 270M model's choice among close candidates helped no pick. A question that
names one document of a case file keeps only that document's candidates.
"""

from __future__ import annotations

import statistics

from agentctx.agents.base import AgentTask
from agentctx.agents.clause_candidates import draw_candidates
from agentctx.agents.clause_lexicon import normalize
from agentctx.agents.question_scope import question_document, question_kind
from agentctx.agents.review_steps import plan_for, span_citation, task_structure
from agentctx.citations import Citation, locate_quote
from agentctx.findings import Answer, AnswerFields, QuoteOption
from agentctx.retrieval.documents import documents_of
from agentctx.retrieval.policy import AttendPlan
from agentctx.structured import fill_fields

__all__ = ["answer_question", "choose_quote", "cite", "quote_candidates", "standardise", "OPTIONS", "MODEL_WEIGHT",
           "RANK_PRIOR"]

OPTIONS = 4  # candidate quotes the model scores (the evidence of retrieval's best pages)
# The choice is retrieval's rank prior plus the model's standardised score times MODEL_WEIGHT.
# Set on the selection dev set's 32K documents (bench/bench_qa.py, BENCHMARKS §5).
MODEL_WEIGHT = 1.0
RANK_PRIOR = 0.5  # prior of rank r is -RANK_PRIOR * r (retrieval's first pick starts ahead)
MAX_QUOTE_CHARS = 600  # a longer passage (a run-on list) is shown to the model cut, cited whole


def cite(ctx, quote: str, plan: AttendPlan | None) -> Citation | None:
    """Locate a quote, preferring the attended pages; None for an empty quote."""
    hint_start, hint_end = 0, None
    if plan is not None:
        spans = [ctx.char_spans[p] for p in plan.pages if plan.reason_of(p) in ("retrieved", "neighbor")]
        if spans:
            hint_start, hint_end = min(s for s, _ in spans), max(e for _, e in spans)
    found = locate_quote(ctx.text, quote, hint_start, hint_end)
    if found is None:
        return None
    start, end, verified = found
    page = ctx.page_of_char(start)
    return Citation(page=page, page_id=ctx.page_ids[page], char_start=start, char_end=end,
                    quote=ctx.text[start:end] if verified else quote.strip(), verified=verified)


def quote_candidates(plan: AttendPlan | None, n: int = OPTIONS) -> list[tuple[int, int]]:
    """Char spans of the passages that got retrieval's best pages ranked, best first, distinct."""
    if plan is None or plan.retrieval is None or not plan.retrieval.evidence:
        return []
    out: list[tuple[int, int]] = []
    for span in plan.retrieval.evidence:
        span = (int(span[0]), int(span[1]))
        if span[1] > span[0] and span not in out:
            out.append(span)
        if len(out) == n:
            break
    return out


def quote_question(question: str) -> str:
    return f'Question: {question}\nQuote the sentence of the document that answers it.\nQuote: "'


def standardise(xs: list[float]) -> list[float]:
    if len(xs) < 2:
        return [0.0] * len(xs)
    sd = statistics.pstdev(xs) or 1.0
    mu = statistics.fmean(xs)
    return [(x - mu) / sd for x in xs]


def choose_quote(model_scores: list[float], weight: float = MODEL_WEIGHT,
                 prior: float = RANK_PRIOR) -> tuple[int, list[float]]:
    """Index of the chosen candidate (candidates in retrieval's order) and every candidate's total:
    ``-prior * rank + weight * z``, z the model's score standardised over the candidates."""
    z = standardise(model_scores)
    total = [-prior * r + weight * zi for r, zi in enumerate(z)]
    return max(range(len(total)), key=total.__getitem__), total


def answer_question(agent, ctx, task: AgentTask) -> Answer:
    question = str(task.need("question", agent.role)).strip()
    if not question:
        raise ValueError("qa task has an empty question")
    ranking = plan_for(ctx, question, agent.spec.policy)  # retrieval's view, in both attention modes
    plan = None if agent.spec.dense else ranking
    llm = agent.llm(ctx, plan)
    spans = quote_candidates(ranking)
    rule_span, doc = _scoped(ctx, question, ranking)
    if doc is not None:
        spans = [sp for sp in spans if doc.start <= sp[0] < doc.end]
    if rule_span is not None:
        spans = [rule_span] + [sp for sp in spans if not (sp[0] < rule_span[1] and rule_span[0] < sp[1])]
        spans = spans[:OPTIONS]
    if not spans:  # nothing ranked: the model writes the quote, which is then located
        body = f"Question: {question}\nAnswer as JSON with the answer and a word-for-word quote from the document:\n"
        fields = fill_fields(llm, agent.prompt(body), AnswerFields, max_chars={"answer": 300, "quote": 400},
                             max_attempts=agent.spec.max_attempts)
        return Answer(**fields.model_dump(), question=question, citation=cite(ctx, fields.quote, plan),
                      chosen_by="model-written")
    shown = [normalize(ctx.text[a:b])[:MAX_QUOTE_CHARS] for a, b in spans]
    model = llm.scores(agent.prompt(quote_question(question)), [s + '"' for s in shown], per_token=True)
    pick, total = choose_quote(model)
    if rule_span is not None:
        pick = 0  # the operative sentence of the kind asked for
    a, b = spans[pick]
    quote = normalize(ctx.text[a:b])
    answer = llm.complete(agent.prompt(f'Question: {question}\nThe document says: "{shown[pick]}"\nShort answer:'),
                          max_new_tokens=agent.spec.max_new_tokens, stop=("\n",)).strip()
    options = [QuoteOption(char_start=s, char_end=e, rank=r, model_score=round(m, 4), score=round(t, 4))
               for r, ((s, e), m, t) in enumerate(zip(spans, model, total))]
    return Answer(answer=answer, quote=quote, question=question, citation=span_citation(ctx, a, b),
                  options=options,
                  chosen_by="rules" if rule_span is not None else "retrieval" if pick == 0 else "model")


RULE_PAGES = OPTIONS + 2  # the rules' sentence answers only on one of retrieval's best pages for the question


def _scoped(ctx, question: str, ranking: AttendPlan | None):
    """(the operative sentence's span of the clause kind the question asks for, or None; the
    document of a case file the question names, or None).

    The rules' sentence answers only where retrieval, reading the whole question, ranks its page
    among its best ``RULE_PAGES``: "How long does a reseller have to pay once billed?" asks for a
    payment term, but in a document where the answer is a sentence of its own elsewhere, that
    sentence is retrieval's, not the payment clause's (the QA bench's planted facts)."""
    parts = documents_of(ctx.text)
    doc = question_document(question, parts)
    kind = question_kind(question)
    if kind is None:
        return None, doc
    dec = draw_candidates(task_structure(ctx, doc.index if doc is not None else None), kind)
    if not dec.found:
        return None, doc
    top = [int(p) for p in ranking.retrieval.pages[:RULE_PAGES]] if ranking is not None and ranking.retrieval else []
    if ctx.page_of_char(dec.pick.unit_start) not in top:
        return None, doc
    return (dec.pick.start, dec.pick.end), doc
