"""Case-file page-selection set: real agreements inside real documentation, questions in plain words.

    from bench.devsets.casefile import build, families, SIZES
    doc = build("eulas", SIZES["32k"], tokenizer)

See README.md.
"""

from .build import PAGE_SIZE, SIZES, CaseDoc, Fact, agreement_text, build, families, load_facts

__all__ = ["PAGE_SIZE", "SIZES", "CaseDoc", "Fact", "agreement_text", "build", "families", "load_facts"]
