"""Native page-selection dev set: questions answered by real documents' own sentences (nothing planted).

    from bench.devsets.native import build, load_questions, SIZES, SOURCES
    doc = build("gpl-3.0", SIZES["128k"], tokenizer)

See README.md.
"""

from .build import SIZES, SOURCES, Answer, NativeDoc, NativeQuestion, build, find_answer, load_questions, source_text

__all__ = ["SIZES", "SOURCES", "Answer", "NativeDoc", "NativeQuestion", "build", "find_answer", "load_questions",
           "source_text"]
