"""Code the benchmarks share; the entry points sit beside this package in bench/.

* :mod:`.models`: the models a benchmark runs (random-weight real architectures, the real Gemma 3
  270M, tiny test configs);
* :mod:`.workloads`: a session's document and questions, and what each answer recorded;
* :mod:`.peers`: naive re-prefill, dense reuse and agentctx page selection, run the same way;
* :mod:`.physics`: measured machine rates and the floor of every figure;
* :mod:`.memory`: peak tracking and the KV capacity probe;
* :mod:`.session`, :mod:`.session_plan`, :mod:`.session_report`: the session benchmark's runner,
  its time planner and its report; :mod:`.plot` its PNG plots; :mod:`.report` the helpers any
  such report uses.

The synthetic contracts come from tests/fixtures/contracts.py (shared with the tests).
"""
