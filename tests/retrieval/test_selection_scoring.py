"""Issue 32: captions vs content, clause windows of long sentences, evidence across a page boundary,
and plans scoped to one document of a case file."""

from __future__ import annotations

import numpy as np
import pytest

from agentctx.retrieval import DocumentIndex
from agentctx.retrieval.hierarchical import RetrieveResult
from agentctx.retrieval.passages import build_passages, clause_windows
from agentctx.retrieval.policy import SelectionPolicy, plan, plan_from_ranking

FILL = "The build system reads the configuration file and writes the object files to the output directory. "
GRANT = ("Subject to the terms and conditions of this agreement, the licensor hereby grants the licensee a "
         "nonexclusive, worldwide, perpetual, irrevocable, royalty-free license to reproduce, analyze, test, "
         "perform and display "
         "publicly, prepare derivative works, distribute, and otherwise use the software alone or in any derivative "
         "version, provided, however, that the licensor's notice of copyright and this list of conditions are retained "
         "in the software alone or in any derivative version prepared by the licensee.")
OLD = {"caption_penalty": 0.0, "clause_words": 0}  # the scoring before issue 32


def _index(tok, embedder, text, **kw):
    offsets = tok(text, return_offsets_mapping=True, add_special_tokens=False)["offset_mapping"]
    return DocumentIndex(text, offsets, embedder=embedder, page_size=32, **kw)


def test_a_heading_does_not_outrank_the_sentence_it_heads(wordpiece_tokenizer, embedder):
    text = ("Introduction to the build tools.\n\n" + FILL * 2 + "\n\nGoverning Law and Jurisdiction\n\n" + FILL * 2
            + "\n\nThe parties agree that this agreement, and any dispute arising from it, is construed under the laws "
            "of the State of Oregon, without regard to conflict of law rules, and that the courts of Portland hear all "
            "claims.\n\n" + FILL * 2)
    q = "Which state's law applies to this agreement?"
    answer = text.index("The parties agree")
    old = _index(wordpiece_tokenizer, embedder, text, **OLD)
    new = _index(wordpiece_tokenizer, embedder, text)
    heading_page = old.span_pages(text.index("Governing Law"), text.index("Governing Law") + 5)[0]
    answer_page = old.span_pages(answer, answer + 5)[0]
    assert heading_page != answer_page
    assert old.retrieve(q, 3).pages[0] == heading_page  # before: the caption wins
    got = new.retrieve(q, 3)
    assert got.pages[0] == answer_page
    assert text[slice(*got.evidence[0])].startswith("The parties agree")
    caption = [p for p in new.passages.passages if p.is_heading]
    assert [text[p.char_start:p.char_end] for p in caption] == ["Governing Law and Jurisdiction"]


def test_clause_windows_cut_a_long_sentence_at_its_clauses():
    w = clause_windows(GRANT, 0, len(GRANT))
    assert len(w) >= 4 and w[0][0] == 0 and w[-1][1] == len(GRANT)
    assert all(b <= a2 for (_, b), (a2, _) in zip(w, w[1:]))  # in order, no overlap
    assert any("royalty-free" in GRANT[a:b] and len(GRANT[a:b].split()) <= 24 for a, b in w)
    assert clause_windows("Fees are due monthly.", 0, 21) == []  # one clause: no windows
    text = "Short one. " + GRANT
    ps = build_passages(text, [(i, i + 1) for i in range(len(text))], 64, max_words=1, clause_words=30)
    assert len(ps.windows) == len(w) and set(ps.window_passage.tolist()) == {1}
    assert build_passages(text, [(i, i + 1) for i in range(len(text))], 64, max_words=1).windows == ()


def test_a_clause_of_a_long_grant_lifts_its_sentence_and_evidence_stays_whole(wordpiece_tokenizer, embedder):
    text = ("Introduction to the build tools.\n\n" + FILL * 2 + "\n\nInvoices for the software are payable within "
            "thirty days and late amounts bear interest.\n\n" + FILL * 2 + "\n\n" + GRANT + "\n\n" + FILL * 2)
    q = "Must I pay royalties?"
    old = _index(wordpiece_tokenizer, embedder, text, **OLD)
    new = _index(wordpiece_tokenizer, embedder, text)
    assert new.stats.num_windows > 0 and old.stats.num_windows == 0
    g = text.index("Subject to")
    page = new.span_pages(g, g + 5)[0]

    def score(idx):
        r = idx.retrieve(q, idx.num_pages)
        return float(r.scores[r.pages.tolist().index(page)]), r.evidence[r.pages.tolist().index(page)]

    (s_old, _), (s_new, ev) = score(old), score(new)
    assert s_new > s_old + 0.01
    assert ev == (g, g + len(GRANT))  # the sentence, not a window, is the evidence


class _SpanRetriever:
    """Fixed ranking; evidence spans given per page; pages are 100 chars each."""

    def __init__(self, ranking, evidence, num_pages):
        self.ranking, self.evidence, self.num_pages = list(ranking), evidence, num_pages
        self.scopes = []

    def retrieve(self, query, k, method="hybrid", scope=None):
        self.scopes.append(scope)
        pages = [p for p in self.ranking if scope is None or scope[0] <= p * 100 < scope[1]][:k]
        return RetrieveResult(np.array(pages, dtype=np.int64), np.linspace(1, 0, len(pages)).astype(np.float32),
                              "flat", 0.0, evidence=tuple(self.evidence.get(p, (p * 100, p * 100 + 50)) for p in pages))

    def span_pages(self, a, b):
        return range(a // 100, (b - 1) // 100 + 1)


def test_evidence_across_a_page_boundary_brings_the_other_page_before_lower_ranks():
    # Page 9 ranks first; its evidence starts on page 8 (the first half of a definition), ranked 39th.
    ret = _SpanRetriever([9, 30, 31, 32], {9: (880, 930)}, num_pages=64)
    pol = SelectionPolicy(budget_tokens=4 * 256 + 256, top_k_pages=None, sink_pages=1, recent_tokens=256)
    got = plan("what does 'Contribution' mean?", ret, 64, 256, pol)
    assert got.reason_of(9) == "retrieved" and got.reason_of(8) == "neighbor"
    assert 31 not in got.pages  # the companion took the budget before lower-ranked pages
    off = plan("what does 'Contribution' mean?", ret, 64, 256, pol.model_copy(update={"evidence_pages": False}))
    assert 8 not in off.pages and 31 in off.pages
    # No room for the companion: it is skipped, the budget holds.
    tight = plan_from_ranking([9], 64, 256, SelectionPolicy(budget_tokens=3 * 256, top_k_pages=None,
                                                            sink_pages=1, recent_tokens=256), companions={9: [8]})
    assert tight.attended_tokens <= 3 * 256


def test_a_scoped_plan_keeps_out_of_scope_pages_out():
    ret = _SpanRetriever([3, 40, 41, 5, 42, 6], {}, num_pages=64)
    pol = SelectionPolicy(budget_tokens=5 * 256, top_k_pages=None, sink_pages=1, recent_tokens=256)
    got = plan("governing law", ret, 64, 256, pol, scope=(4000, 5000))
    assert set(got.pages_with("retrieved")) <= set(range(40, 50))
    assert got.reason_of(0) == "sink" and got.reason_of(63) == "recent"
    assert ret.scopes[-1] == (4000, 5000)


def test_document_index_scope_scores_only_passages_inside(wordpiece_tokenizer, embedder):
    law = "This agreement is governed by the laws of the State of {}.\n\n"
    text = FILL * 3 + "\n\n" + law.format("Oregon") + FILL * 6 + "\n\n" + law.format("Texas") + FILL * 3
    idx = _index(wordpiece_tokenizer, embedder, text)
    a = text.index("\n\n", text.index("Oregon")) + 2
    scope = (a, len(text))
    q = "Which state's law governs this agreement?"
    inside = set(range(idx.span_pages(a, a + 1)[0], idx.num_pages))
    assert idx.retrieve(q, 1).pages[0] not in inside  # unscoped: the first clause ranks first
    r = idx.retrieve(q, idx.num_pages, scope=scope)
    assert set(r.pages.tolist()) <= inside
    assert "Texas" in text[slice(*r.evidence[0])]
    p = plan(q, idx, idx.num_pages, idx.last_page_len,
             SelectionPolicy(top_k_pages=1, sink_pages=1, recent_tokens=0), scope=scope)
    assert "Texas" in text[slice(*p.evidence_of(p.pages_with("retrieved")[0]))]


def test_context_and_service_pass_the_scope_down():
    from agentctx.agents.review_steps import plan_for
    from agentctx.context import Context

    class _Service:
        def __init__(self):
            self.calls = []

        def plan(self, context_id, tenant, query, policy, scope=None):
            self.calls.append(scope)
            return "plan"

    class _Record:
        context_id, tenant, model_id, num_tokens, page_ids, char_spans, extra = "c", "t", "m", 512, [1, 2], \
            [(0, 10), (10, 20)], {}

    class _Handle:
        record = _Record()

    svc = _Service()
    ctx = Context(_Handle(), None, svc, SelectionPolicy(top_k_pages=2, recent_tokens=0), text="x" * 20)
    assert ctx.plan("q", scope=(5, 15)) == "plan" and svc.calls == [(5, 15)]
    plan_for(ctx, "q", scope=(2, 8))
    plan_for(ctx, "q")
    assert svc.calls[1:] == [(2, 8), None]


@pytest.mark.parametrize("scope", [(0, 10), None])
def test_retrieval_service_plan_takes_a_scope(scope, monkeypatch):
    from agentctx import retrieval_service

    seen = {}
    svc = retrieval_service.RetrievalService.__new__(retrieval_service.RetrievalService)
    svc.page_size = 256
    monkeypatch.setattr(svc, "_index", lambda c, t: type("I", (), {"num_pages": 4, "last_page_len": 256})(),
                        raising=False)
    monkeypatch.setattr(retrieval_service, "plan", lambda *a, **kw: seen.update(kw) or "ok")
    assert svc.plan("c", "t", "q", SelectionPolicy(top_k_pages=1), scope=scope) == "ok"
    assert seen == {"scope": scope}


def test_a_tight_budget_does_not_buy_a_page_for_a_few_tokens_of_the_recent_window():
    # 128 pages, the last holding 200 tokens: the 256-token window has 56 tokens on page 126.
    # At 5% (1,636 tokens) rounding the window out to page 126 leaves room for 3 ranked pages
    # instead of 4.
    ranking = [10, 20, 30, 40, 50, 60]
    pol = SelectionPolicy(budget_fraction=0.05, top_k_pages=None, sink_pages=1, recent_tokens=256)
    got = plan_from_ranking(ranking, 128, 200, pol)
    assert got.pages == (0, 10, 20, 30, 40, 127) and got.attended_tokens <= got.budget_tokens
    assert got.reason_of(127) == "recent"
    old = plan_from_ranking(ranking, 128, 200, pol.model_copy(update={"tight_budget_pages": 0}))
    assert old.pages == (0, 10, 20, 30, 126, 127)
    # Most of page 126 inside the window (last page of 4 tokens): it stays.
    assert 126 in plan_from_ranking(ranking, 128, 4, pol).pages_with("recent")
    # A budget that is not tight (12%: 15 pages) keeps the window rounded out.
    wide = plan_from_ranking(ranking, 128, 200, pol.model_copy(update={"budget_fraction": 0.12}))
    assert wide.pages_with("recent") == (126, 127)


class _TextRetriever(_SpanRetriever):
    def __init__(self, ranking, evidence, num_pages, text):
        super().__init__(ranking, evidence, num_pages)
        self.text = text


def test_a_second_copy_of_the_same_sentence_goes_after_new_evidence():
    # Pages of 100 chars; the same disclaimer sits on pages 5 and 9 (two copies of one licence).
    text = list("." * 6400)
    clause, copy = "THE SOFTWARE IS PROVIDED AS IS.", "The software is\n  provided 'as is'."  # case, spacing
    text[500:500 + len(clause)] = clause
    text[900:900 + len(copy)] = copy
    text = "".join(text)
    ev = {5: (500, 500 + len(clause)), 9: (900, 900 + len(copy)), 20: (2000, 2050), 30: (3000, 3050)}
    pol = SelectionPolicy(budget_tokens=4 * 256, top_k_pages=None, sink_pages=1, recent_tokens=256)
    ret = _TextRetriever([5, 9, 20, 30], ev, 64, text)
    got = plan("is there a warranty?", ret, 64, 256, pol)
    assert got.pages_with("retrieved") == (5, 20)
    old = plan("is there a warranty?", ret, 64, 256, pol.model_copy(update={"demote_repeats": False}))
    assert old.pages_with("retrieved") == (5, 9)
    # One passage across a page boundary is the same span, not a copy: its other page keeps its rank.
    ret = _TextRetriever([5, 6, 20], {5: (550, 650), 6: (550, 650)}, 64, text)
    got = plan("is there a warranty?", ret, 64, 256, pol.model_copy(update={"evidence_pages": False}))
    assert got.pages_with("retrieved") == (5, 6)
