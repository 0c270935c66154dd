"""What a session asks and what each answer recorded.

A :class:`Workload` is one document (token ids) and the session's questions in submission
order: ``agents x questions`` :class:`Query` objects, each with the page(s) of the needle it
asks about. Two kinds:

* :func:`random_workload`: random token ids; each question carries 8 ids copied from the
  document (the needle), so its page is known (random-weight runs);
* :func:`contract_workload`: a synthetic contract (tests/fixtures/contracts.py) with planted
  facts, tokenized; each question asks for one fact, scored by :func:`needle_hit` (real weights).

A :class:`QueryRun` is what one query produced and what it cost.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

import torch

__all__ = ["Query", "Workload", "QueryRun", "random_workload", "contract_workload", "needle_hit",
           "REAL_HEADER", "REAL_QUESTION"]

REAL_HEADER = "Contract:\n"
REAL_QUESTION = "\n\nQuestion: {q}\nAnswer:"


@dataclass
class Query:
    agent: int
    turn: int
    ids: list[int]
    needle_pages: list[int]
    text: str | None = None  # question text (real-weight runs)
    needle_value: str | None = None  # expected answer substring (real-weight runs)


@dataclass
class Workload:
    """One document and the session's questions, in submission order."""

    doc_ids: torch.Tensor  # (N,) int64 on CPU
    queries: list[Query]
    page_size: int
    kind: str  # "random-ids" | "contract"
    doc_text: str | None = None
    offsets: list[tuple[int, int]] | None = None

    @property
    def num_tokens(self) -> int:
        return int(self.doc_ids.numel())

    @property
    def num_pages(self) -> int:
        return -(-self.num_tokens // self.page_size)

    @property
    def last_page_len(self) -> int:
        return self.num_tokens - (self.num_pages - 1) * self.page_size


@dataclass
class QueryRun:
    """What one query produced and what it cost."""

    agent: int
    turn: int
    tokens: list[int]
    ttft_s: float
    decode_s: float
    decode_steps: int  # forwards after the first token
    select_s: float = 0.0
    attended_tokens: int = 0
    pages_selected: int = 0
    needle_pages_covered: bool | None = None
    answer: str | None = None
    needle_hit: bool | None = None
    attn_ttft_s: float | None = None  # in-model time inside attend_selected (prompt forward)
    attn_decode_s_per_token: float | None = None

    @property
    def total_s(self) -> float:
        return self.ttft_s + self.decode_s

    @property
    def decode_tok_s(self) -> float | None:
        return self.decode_steps / self.decode_s if self.decode_steps and self.decode_s > 0 else None

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["decode_tok_s"] = self.decode_tok_s
        return d


def random_workload(n: int, args, vocab: int, seed: int) -> Workload:
    lo, hi = (4, 259) if vocab <= 300 else (10, vocab - 10)
    g = torch.Generator().manual_seed(seed)
    doc = torch.randint(lo, hi, (n,), generator=g)
    rng = random.Random(seed)
    ps, qlen = args.page_size, max(args.question_tokens, 8)
    queries = []
    for turn in range(args.questions):
        for agent in range(args.agents):
            start = min(ps, n // 4)
            pos = rng.randrange(start, max(start + 1, n - 40))
            needle = (pos, min(n, pos + 32))
            key = doc[pos : pos + 8].tolist()
            pre = torch.randint(lo, hi, (4,), generator=g).tolist()
            post = torch.randint(lo, hi, (max(0, qlen - 4 - len(key)),), generator=g).tolist()
            pages = sorted({t // ps for t in range(*needle)})
            queries.append(Query(agent, turn, pre + key + post, pages))
    return Workload(doc, queries, ps, "random-ids")


def contract_workload(n: int, args, tokenizer, seed: int) -> Workload:
    from tests.fixtures.contracts import generate_contract

    nq = args.agents * args.questions
    c = generate_contract(n, nq, seed=seed, tokenizer=tokenizer)
    text = REAL_HEADER + c.text
    enc = tokenizer(text, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"], [tuple(o) for o in enc["offset_mapping"]]
    shift = len(REAL_HEADER)
    ps = args.page_size
    queries = []
    needles = list(c.needles)[:nq]
    for i, nd in enumerate(needles):
        s, e = nd.char_start + shift, nd.char_end + shift
        pages = sorted({t // ps for t, (a, b) in enumerate(offsets) if b > a and a < e and b > s})
        q_ids = tokenizer(REAL_QUESTION.format(q=nd.question), add_special_tokens=False)["input_ids"]
        queries.append(Query(i % args.agents, i // args.agents, q_ids, pages, nd.question, nd.value))
    return Workload(torch.tensor(ids, dtype=torch.long), queries, ps, "contract", text, offsets)


def _norm(s: str) -> str:
    return re.sub(r"[^0-9a-z.%]", "", s.lower())


def needle_hit(value: str, answer: str) -> bool:
    """The planted value appears in the answer (case, spacing, punctuation and currency code ignored)."""
    v = _norm(value).rstrip(".")
    core = re.sub(r"^(usd|eur|gbp|chf|cad|aud|jpy|sgd)", "", v)
    a = _norm(answer)
    # digit boundaries: "7" must not match inside "17"
    return bool(core) and any(re.search(r"(?<![0-9])" + re.escape(x) + r"(?![0-9])", a) for x in {v, core})

