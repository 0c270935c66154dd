"""Would plans that put the asked clause kind's operative sentence first lift recall at small budgets?

    python bench/experiments/kind_rule_plans.py [bench_selection args, e.g. --devset casefile --sizes 32k
                                                 --methods hybrid]

Runs bench/bench_selection.py twice in one process: as is, then with every plan of a question that
asks for a clause kind (agentctx.agents.question_scope.question_kind) ranking first the page of that
kind's operative sentence, by the QA agent's own rule (agentctx/agents/answering.py ``_scoped``: the
review's pick within the document the question names, used only where retrieval ranks its page among
its best ``RULE_PAGES``). Prints both runs' recall; nothing in the product changes.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


NO_GUARD = False


def main(argv: list[str]) -> None:
    import agentctx.retrieval.policy as policy
    from agentctx.agents.answering import RULE_PAGES
    from agentctx.agents.clause_candidates import draw_candidates
    from agentctx.agents.question_scope import question_document, question_kind
    from agentctx.retrieval.documents import document_structure, documents_of
    from bench import bench_selection

    original_plan, original_ranking = policy.plan, policy._ranking
    moved = {"questions": 0, "kind": 0, "moved": 0}

    def rule_page(question, index, method, scope):
        kind = question_kind(question)
        if kind is None:
            return None
        moved["kind"] += 1
        text = index.text
        doc = question_document(question, documents_of(text))
        dec = draw_candidates(document_structure(text, doc), kind)
        if not dec.found:
            return None
        page = index.span_pages(dec.pick.unit_start, dec.pick.unit_start + 1)[0]
        kw = {} if scope is None else {"scope": scope}
        top = index.retrieve(question, RULE_PAGES, method=method, **kw).pages.tolist()[:RULE_PAGES]
        return page if (page in top or NO_GUARD) else None

    def boosted_plan(query, index, num_pages, last_page_len, pol, scope=None):
        moved["questions"] += 1
        page = rule_page(query, index, pol.method, scope)
        if page is None:
            return original_plan(query, index, num_pages, last_page_len, pol, scope=scope)
        moved["moved"] += 1

        def ranking(idx, result, p):
            pages = original_ranking(idx, result, p)
            return [page] + [x for x in pages if x != page]

        policy._ranking = ranking
        try:
            return original_plan(query, index, num_pages, last_page_len, pol, scope=scope)
        finally:
            policy._ranking = original_ranking

    print("== retrieval's ranking (as the product plans today)", flush=True)
    bench_selection.main(argv)
    policy.plan = boosted_plan
    try:
        print("== the asked kind's operative sentence first", flush=True)
        bench_selection.main(argv)
    finally:
        policy.plan = original_plan
    print(f"questions planned {moved['questions']}, asking for a kind {moved['kind']}, moved {moved['moved']}")


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--no-guard" in args:  # the review's pick first even where retrieval does not rank its page high
        args.remove("--no-guard")
        NO_GUARD = True
    main(args)
