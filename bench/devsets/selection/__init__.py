"""Page-selection dev set: real texts (Debian / PyPI) with planted facts and paraphrased questions.

    from bench.devsets.selection import build, families, SIZES
    doc = build("oss-licenses", SIZES["128k"], tokenizer)

See README.md.
"""

from .build import PAGE_SIZE, SIZES, Doc, PlantedFact, build, families, load_facts, load_source

__all__ = ["PAGE_SIZE", "SIZES", "Doc", "PlantedFact", "build", "families", "load_facts", "load_source"]
