"""The engine loop (serving/engine/loop.py) with real callers on threads and the real packed forward
of a tiny model: concurrent requests keep the tokens they get alone, share steps, fail and cancel
alone, wait when admission says so, a short request is not held behind a long prompt, and a
prefill shares the replica's time. The planner alone: tests/serving/test_engine_scheduler.py."""

from __future__ import annotations

import threading

import pytest
import torch

from agentctx.serving.engine import GenerationCancelled, LocalEngine
from agentctx.serving.engine.loop import EngineLoop
from agentctx.serving.engine.request import Request
from agentctx.serving.engine.scheduler import Scheduler
from agentctx.serving.model_loader import load_model
from agentctx.serving.runner.batch_forward import Row, StepOutput, run_rows, run_step
from agentctx.serving.runner.paged_kv import QueryTail
from agentctx.serving.types import GenerateRequest, ScoreRequest
from tests.factories import make_tiny_checkpoint

DOC_A = "The supplier shall deliver 40 crates of apples every Monday. " * 4
DOC_B = "Either party may terminate this agreement on ninety days written notice. " * 3


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    return load_model(make_tiny_checkpoint("gemma3_text", tmp_path_factory.mktemp("g")), device="cpu")


def _engine(loaded, **kw):
    e = LocalEngine(loaded, page_size=16, prefill_chunk_tokens=32, **kw)
    for cid, text in (("a", DOC_A), ("b", DOC_B)):
        e.prefill(cid, e.tokenize_document(text), progress=False)
    return e


@pytest.fixture(scope="module")
def alone(loaded):
    return _engine(loaded, decode_batch=1)


@pytest.fixture(scope="module")
def batched(loaded):
    return _engine(loaded, decode_batch=8)


def _concurrently(fn, args, barrier: bool = True):
    results, errors = [None] * len(args), [None] * len(args)
    start = threading.Barrier(len(args)) if barrier else None

    def run(i, a):
        if start is not None:
            start.wait()
        try:
            results[i] = fn(a)
        except Exception as exc:  # noqa: BLE001 - checked by the test
            errors[i] = exc

    threads = [threading.Thread(target=run, args=(i, a)) for i, a in enumerate(args)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return results, errors


REQS = [GenerateRequest("a", "Question: who delivers?", max_new_tokens=10),
        GenerateRequest("a", "Q: what?", pages=(0, 2, 5), max_new_tokens=14),
        GenerateRequest("b", "Quote:", pages=(1, 3), max_new_tokens=12, constraint="copy"),
        GenerateRequest("b", "Summary of the notice period and what either party must do " * 2, max_new_tokens=6,
                        stop=("e",)),
        GenerateRequest("a", "Answer:", pages=(4,), max_new_tokens=9)]


def _same(g, w):
    return g.token_ids == w.token_ids and g.text == w.text and g.finish_reason == w.finish_reason


def test_concurrent_requests_keep_their_tokens_and_share_steps(alone, batched):
    """Two contexts, five plans, a copy-constrained quote, a stop string and a 120-token prompt
    (cut into chunks): every request's tokens equal the same request run alone."""
    want = [alone.generate(r) for r in REQS]
    s = batched.scheduler.stats
    before = s.steps, s.rows, s.decode_rows
    got, errors = _concurrently(batched.generate, REQS)
    assert errors == [None] * len(REQS)
    assert all(_same(g, w) for g, w in zip(got, want))
    steps, rows = s.steps - before[0], s.rows - before[1]
    # One host sync per step that picked tokens, whatever the number of rows.
    assert batched.loop.stats.host_syncs <= batched.loop.stats.steps
    # Every generated token but a generation's last is one decode row (a stop string may end early).
    assert s.decode_rows - before[2] <= sum(len(w.token_ids) for w in want)
    assert steps < rows and s.max_rows_seen >= 3  # steps carried several requests' rows
    info = batched.describe()
    assert info["scheduler"]["running"] == 0 and info["scheduler"]["waiting"] == 0
    assert info["decode_batching"]["forwards"] >= steps


def test_scores_and_generations_share_steps(alone, batched):
    sreq = ScoreRequest("b", " Risk:", (" low", " high", " medium risk"), pages=(0, 2))
    want_s, want_g = alone.score(sreq), alone.generate(REQS[0])
    got, errors = _concurrently(lambda r: batched.score(r) if isinstance(r, ScoreRequest) else batched.generate(r),
                                [sreq, REQS[0], sreq])
    assert errors == [None] * 3
    for g in (got[0], got[2]):
        assert g == pytest.approx(want_s, abs=1e-4)
    assert _same(got[1], want_g)


def test_a_failing_row_fails_alone(batched):
    """A request whose forward raises (a token past the vocabulary) makes the packed step fail; the
    step is re-run row by row, and only that request gets the error."""
    runner = batched.runner
    kv = batched.kv.get("a")
    loop = EngineLoop(lambda rows: run_step(runner, rows), Scheduler(max_rows=4))
    prompts = [[40, 41, 42], [50, 51], [60, 61, 62, 63]]

    def alone_tokens(p):
        tail = runner.new_tail(kv)
        out = [int(runner.extend(kv, tail, p).argmax())]
        for _ in range(4):
            out.append(int(runner.extend(kv, tail, [out[-1]]).argmax()))
        return out

    want = [alone_tokens(p) for p in prompts]
    reqs = [Request(kv, runner.new_tail(kv), p, max_new_tokens=5) for p in
            (prompts[0], [runner.model.config.vocab_size + 7], prompts[1], prompts[2])]
    for r in reqs:
        loop.submit(r)
    for r in reqs:
        list(r.stream)
    assert isinstance(reqs[1].error, IndexError) and [reqs[i].error for i in (0, 2, 3)] == [None] * 3
    assert [reqs[i].output_ids for i in (0, 2, 3)] == want
    assert loop.stats.fallbacks >= 1 and loop.stats.failed_rows == 1
    loop.shutdown()
    assert not loop._thread.is_alive()


def test_cancelled_generation_leaves_the_others_unchanged(alone, batched):
    want = [alone.generate(r) for r in REQS[:3]]
    victim = GenerateRequest("b", "Question: how long is the notice?", max_new_tokens=30)

    def run(i):
        if i == 3:  # cancelled after its first streamed text: its consumer raises
            def gone(_):
                raise GenerationCancelled("consumer went away")
            return batched.generate(victim, on_text=gone)
        return batched.generate(REQS[i])

    got, errors = _concurrently(run, [0, 1, 2, 3])
    assert isinstance(errors[3], GenerationCancelled) and errors[:3] == [None] * 3
    assert all(_same(g, w) for g, w in zip(got, want))
    assert batched.scheduler.counts() == {"running": 0, "waiting": 0}


def test_a_stream_whose_consumer_stops_is_cancelled(batched):
    req = GenerateRequest("a", "Question: who delivers?", max_new_tokens=40)
    before = batched.scheduler.stats.decode_rows
    stream = batched.stream(req)
    next(stream)
    stream.close()  # the consumer goes away (Serve closes the generator on disconnect)
    done = threading.Event()
    threading.Thread(target=lambda: (batched.generate(GenerateRequest("a", "x", max_new_tokens=2)), done.set()),
                     daemon=True).start()
    assert done.wait(60)
    # The abandoned generation stopped well before its 40 tokens.
    assert batched.scheduler.stats.decode_rows - before < 30


def test_a_short_request_is_not_held_behind_a_long_prompt(loaded):
    """With a ~600-token prompt in flight (step_tokens 64), a short request sent after the long
    prompt's first step runs its prompt in the next step and finishes all of its tokens before
    the long prompt's last chunk has run."""
    e = _engine(loaded, decode_batch=8, step_tokens=64, step_tokens_decoding=32)
    steps: list[list[tuple[int, int]]] = []
    first_step = threading.Event()

    def record(plan):
        steps.append([(r.request.id, len(r.token_ids)) for r in plan.rows])
        first_step.set()

    e.loop.on_step = record
    long_req = GenerateRequest("a", "Explain every obligation of the supplier in detail. " * 12, max_new_tokens=2)
    short = GenerateRequest("b", "Who may terminate?", max_new_tokens=6)
    n_long = len(e.tokenizer(long_req.prompt, add_special_tokens=False)["input_ids"])
    assert n_long > 500
    results = {}
    t_long = threading.Thread(target=lambda: results.setdefault("long", e.generate(long_req)))
    t_long.start()
    assert first_step.wait(60)
    results["short"] = e.generate(short)
    t_long.join(120)
    assert results["short"].token_ids == _engine(loaded, decode_batch=1).generate(short).token_ids
    long_id = steps[0][0][0]
    long_chunks = [i for i, plan in enumerate(steps) if any(s == long_id and n > 1 for s, n in plan)]
    short_steps = [i for i, plan in enumerate(steps) if any(s != long_id for s, _ in plan)]
    # The short request's prompt and decode steps all ran while the long prompt was still being cut.
    assert len(short_steps) == len(results["short"].token_ids)
    assert short_steps[-1] < long_chunks[-1]
    # While the short one decoded, the long prompt took the smaller per-step budget.
    assert all(n <= 32 for i in short_steps[1:] for s, n in steps[i] if s == long_id)
    assert results["long"].prompt_tokens == n_long


def test_admission_bounds_rows_and_kv_bytes(loaded, alone):
    want = [alone.generate(r) for r in REQS]
    two = _engine(loaded, decode_batch=2)
    seen = []
    two.loop.on_step = lambda plan: seen.append((len(plan.rows), two.scheduler.counts()))
    got, errors = _concurrently(two.generate, REQS)
    assert errors == [None] * len(REQS) and all(_same(g, w) for g, w in zip(got, want))
    assert max(n for n, _ in seen) == 2
    assert any(c["waiting"] > 0 for _, c in seen) and all(c["running"] <= 2 for _, c in seen)
    # A byte bound below two requests' reads: one request at a time, whatever decode_batch says.
    tight = _engine(loaded, decode_batch=8, max_step_kv_bytes=1)
    got, errors = _concurrently(tight.generate, REQS[:3])
    assert errors == [None] * 3 and all(_same(g, w) for g, w in zip(got, want[:3]))
    assert tight.scheduler.stats.max_rows_seen == 1


def test_a_prefill_interleaves_with_running_generations(loaded):
    """A document prefill runs one chunk per scheduler job, so a running generation keeps
    stepping between the chunks instead of waiting for the whole prefill."""
    e = _engine(loaded, decode_batch=4)
    jobs_at_step: list[int] = []
    started = threading.Event()

    def record(plan):
        jobs_at_step.append(e.loop.stats.jobs)
        started.set()

    e.loop.on_step = record
    big = e.tokenize_document(DOC_B * 6)
    n_chunks = -(-len(big.token_ids) // 32)
    assert n_chunks >= 8
    gen = threading.Thread(target=lambda: e.generate(GenerateRequest("a", "Q:", max_new_tokens=60)))
    gen.start()
    assert started.wait(60)
    jobs0 = e.loop.stats.jobs
    e.prefill("big", big, progress=False)
    gen.join(120)
    assert e.loop.stats.jobs - jobs0 == n_chunks + 1  # one job per chunk, one to finish
    # Steps of the generation ran between prefill chunks.
    assert any(jobs0 < j < jobs0 + n_chunks for j in jobs_at_step)
    assert e.generate(GenerateRequest("big", "Q:", max_new_tokens=3)).token_ids


def test_a_prefill_chunk_lets_running_requests_step_between_its_layers(loaded, alone):
    """On a CPU a prefill chunk pays the steps it owes between its layers (serving/runner/layer_breaks.py):
    a running generation steps inside the chunks' jobs and keeps the tokens it gets alone, and the
    prefilled pages and window are bit-identical to the same prefill with nothing beside it."""
    e = _engine(loaded, decode_batch=4)
    assert e.runner.layer_breaks
    big = e.tokenize_document(DOC_B * 6)
    req = GenerateRequest("a", "Q:", max_new_tokens=400, ignore_eos=True)
    want = alone.generate(req)
    started, out = threading.Event(), {}
    e.loop.on_step = lambda plan: started.set()
    gen = threading.Thread(target=lambda: out.setdefault("got", e.generate(req)))
    gen.start()
    assert started.wait(60)
    e.prefill("big", big, progress=False)
    in_breaks = e.loop.stats.break_steps
    gen.join(120)
    assert in_breaks > 0
    assert out["got"].token_ids == want.token_ids
    quiet = _engine(loaded, decode_batch=4)
    quiet.prefill("big", big, progress=False)
    (n, pages, window), (qn, qpages, qwindow) = e.export("big"), quiet.export("big")
    assert n == qn and len(pages) == len(qpages) and torch.equal(window, qwindow)
    assert all(torch.equal(a, b) for a, b in zip(pages, qpages))
    assert e.generate(GenerateRequest("big", "Q:", max_new_tokens=5)).token_ids == \
        quiet.generate(GenerateRequest("big", "Q:", max_new_tokens=5)).token_ids


def test_layer_breaks_are_only_taken_inside_a_job_and_not_nested(loaded):
    """Outside a job (a plain forward, a step) the break function is never set; inside a break the
    steps see none of their own."""
    from agentctx.serving.runner.layer_breaks import LAYER_BREAK, layer_breaks

    e = _engine(loaded, decode_batch=2)
    seen = []
    e.loop.on_step = lambda plan: seen.append(LAYER_BREAK.get())
    e.generate(GenerateRequest("a", "Q:", max_new_tokens=3))
    assert seen and all(f is None for f in seen)
    calls = []
    with layer_breaks(lambda: calls.append(LAYER_BREAK.get())):
        e.runner.prefill(e.tokenize_document(DOC_A).token_ids, progress=False)
    n_layers = len(e.runner.model.model.layers)
    assert calls and set(calls) == {None} and len(calls) % (n_layers - 1) == 0


def test_jobs_and_steps_share_the_time_while_requests_run():
    """A prefill's jobs (0.1 s each) beside a decoding request (10 ms steps): between two jobs the
    steps get about as long as a job took (~10 steps), instead of one step per job."""
    import time

    def run_step(rows):
        time.sleep(0.010)
        logits = torch.zeros(len(rows), 8)
        return StepOutput(logits, list(range(len(rows))))

    loop = EngineLoop(run_step, Scheduler())
    jobs_at_step: list[int] = []
    loop.on_step = lambda plan: jobs_at_step.append(loop.stats.jobs)
    req = loop.submit(Request(None, QueryTail(0), [1], pages=(0,), max_new_tokens=200))
    for _ in range(4):
        loop.call(lambda: time.sleep(0.1))
    list(req.stream)
    between = [jobs_at_step.count(j) for j in (1, 2, 3)]  # steps run after job j and before job j + 1
    assert all(n >= 4 for n in between), between  # ~10 each; one step per job before
    loop.shutdown()


def test_shutdown_ends_what_is_queued_and_leaves_no_thread(loaded):
    e = _engine(loaded, decode_batch=2)
    reqs = [e.submit(GenerateRequest("a", "Q: who?", max_new_tokens=200)) for _ in range(3)]
    e.close()
    assert not e.loop._thread.is_alive()
    for r in reqs:
        evs = list(r.stream)
        assert evs[-1].finish_reason is not None or evs[-1].error is not None
    with pytest.raises(RuntimeError, match="shut down"):
        e.submit(GenerateRequest("a", "Q: who?", max_new_tokens=2))


def test_real_threads_get_identical_logits_to_alone(batched):
    """The logits a request reads through a shared step equal its own forward (fp32, < 1e-4)."""
    runner, kv = batched.runner, batched.kv.get("b")
    tail = runner.new_tail(kv)
    want = runner.extend(kv, tail, [70, 71, 72], (0, 1))
    got = run_rows(runner, [Row(kv, runner.new_tail(kv), [70, 71, 72], (0, 1)),
                            Row(kv, runner.new_tail(kv), [5, 6], None)])[0]
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)


@pytest.mark.model
def test_real_gemma_concurrent_requests_equal_alone():
    """The real Gemma 3 270M (fp32 CPU), short inputs: two contexts, four plans, a prompt longer
    than the step budget; greedy tokens of every request equal the same request run alone."""
    real = load_model(None, device="cpu")
    engines = {}
    for name, rows in (("alone", 1), ("batched", 4)):
        e = engines[name] = LocalEngine(real, page_size=32, prefill_chunk_tokens=64, decode_batch=rows,
                                        step_tokens=32, step_tokens_decoding=16)
        e.prefill("a", e.tokenize_document(DOC_A * 2), progress=False)
        e.prefill("b", e.tokenize_document(DOC_B * 2), progress=False)
    reqs = [GenerateRequest("a", "\nQuestion: What does the supplier deliver?\nAnswer:", max_new_tokens=8),
            GenerateRequest("b", "\nQuestion: How much notice is needed?\nAnswer:", pages=(0, 2), max_new_tokens=8),
            GenerateRequest("a", "\nQuote:", pages=(1, 2), max_new_tokens=8, constraint="copy"),
            GenerateRequest("b", "\nSummarise the termination clause, the notice period and who may end the "
                                 "agreement, in one sentence.\nSummary:", max_new_tokens=8)]
    want = [engines["alone"].generate(r) for r in reqs]
    got, errors = _concurrently(engines["batched"].generate, reqs)
    assert errors == [None] * len(reqs)
    assert [g.token_ids for g in got] == [w.token_ids for w in want]
    assert engines["batched"].scheduler.stats.max_rows_seen >= 2


# ---------------------------------------------------------------------------- the GPU path, eagerly on CPU

@pytest.fixture(scope="module")
def static(loaded):
    """query_mode="static": decode rows in batched static rows (serving/runner/batch_slots.py), prompts
    through QuerySlots: the CUDA-graph path's forwards, run eagerly."""
    return _engine(loaded, decode_batch=8, query_mode="static")


def test_static_rows_keep_the_eager_tokens(alone, static):
    want = [alone.generate(r) for r in REQS]
    s = static.scheduler.stats
    before = s.steps, s.rows
    got, errors = _concurrently(static.generate, REQS)
    assert errors == [None] * len(REQS)
    assert all(_same(g, w) for g, w in zip(got, want))
    assert s.steps - before[0] < s.rows - before[1]
    # Both documents got batched decode rows, and every row was given back.
    for cid in ("a", "b"):
        slots = list(static.kv.get(cid).batch_slots.values())
        assert slots and not any(any(bs.live) for bs in slots)
    sreq = ScoreRequest("b", " Risk:", (" low", " high", " medium risk"), pages=(0, 2))
    assert static.score(sreq) == pytest.approx(alone.score(sreq), abs=1e-4)


def test_static_rows_logits_equal_the_eager_forward(loaded):
    """Decode rows of four queries over two documents in static batched rows against each
    query's eager forward (fp32, < 1e-4); for three steps one query sits out, so its row runs
    as a dummy, and it must continue intact."""
    eager = _engine(loaded, decode_batch=1)
    st = _engine(loaded, decode_batch=8, query_mode="static")
    plans = [("a", None), ("a", (0, 3)), ("b", (1,)), ("a", (2, 4, 5))]
    toks = [[40, 41, 42], [50, 51], [60, 61, 62, 63], [70]]
    tails = {e: [e.runner.new_tail(e.kv.get(c)) for c, _ in plans] for e in (eager, st)}

    def step(e, which):
        return run_rows(e.runner, [Row(e.kv.get(plans[i][0]), tails[e][i], toks[i], plans[i][1]) for i in which])

    for which in ([0, 1, 2, 3], [0, 1, 2, 3], [0, 2, 3], [0, 2, 3], [0, 2, 3], [0, 1, 2, 3]):
        want, got = step(eager, which), step(st, which)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, atol=1e-4, rtol=0)
        for i, w in zip(which, want):
            toks[i] = [int(w.argmax())]
    assert all(t.batch is not None for t in tails[st])  # decoding in batched rows
    assert [t.length for t in tails[st]] == [t.length for t in tails[eager]]


def test_a_tail_that_outgrows_its_row_continues_eagerly(alone, loaded):
    st = _engine(loaded, decode_batch=4, query_mode="static")
    st.runner.batch_tail_tokens = 40  # REQS[3]'s 120-token prompt never fits; the others outgrow theirs
    long = [GenerateRequest("a", "Question: who delivers?", max_new_tokens=30), REQS[3], REQS[1]]
    want = [alone.generate(r) for r in long]
    got, errors = _concurrently(st.generate, long)
    assert errors == [None] * 3 and all(_same(g, w) for g, w in zip(got, want))


def test_a_long_prompt_runs_in_slots_of_its_own(alone, loaded):
    """Static mode: a prompt whose tail outgrows the shared query slots holds slots of its own from
    its first chunk to its last token (graph replays, nothing copied), beside short requests; all
    tokens equal the eager engine's, and the slots are free again afterwards."""
    st = _engine(loaded, decode_batch=4, query_mode="static", step_tokens=128, step_tokens_decoding=64)
    st.runner.static_tail_tokens = 512
    long = GenerateRequest("a", "Explain every obligation of the supplier in detail. " * 12, max_new_tokens=6)
    reqs = [long, REQS[0], REQS[2]]
    want = [alone.generate(r) for r in reqs]
    got, errors = _concurrently(st.generate, reqs)
    assert errors == [None] * 3 and all(_same(g, w) for g, w in zip(got, want))
    pools = st.kv.get("a").long_slots
    assert pools and all(qs.held_by is None for pool in pools.values() for qs in pool)
    (cap,) = {c for _, c in pools}
    assert cap >= got[0].prompt_tokens + 6 and not st.kv.get("b").long_slots


# ---------------------------------------------------------------------------- greedy decode windows

def test_greedy_windows_keep_the_tokens(alone, loaded):
    """Static rows with greedy decode windows of 4 forwards per sync (the CUDA-graph default): the
    eager engine's tokens for every request (lengths that are no multiple of the window, a quote
    constraint and a stop string that keep their steps out of windows), fewer syncs than forwards,
    and every row given back."""
    st = _engine(loaded, decode_batch=8, query_mode="static")
    st.loop.decode_steps = 4
    want = [alone.generate(r) for r in REQS]
    got, errors = _concurrently(st.generate, REQS)
    assert errors == [None] * len(REQS)
    assert all(_same(g, w) for g, w in zip(got, want))
    ls = st.loop.stats
    assert ls.windows > 0 and ls.host_syncs < ls.steps
    for cid in ("a", "b"):
        assert not any(any(bs.live) for bs in st.kv.get(cid).batch_slots.values())


def _window_run(runner, doc, k: int, stops, prompts):
    from agentctx.serving.runner.batch_forward import run_greedy_steps

    loop = EngineLoop(lambda rows: run_step(runner, rows), Scheduler(max_rows=8), thread=False,
                      run_greedy=lambda rows, kk: run_greedy_steps(runner, rows, kk), decode_steps=k)
    reqs = [loop.submit(Request(doc, runner.new_tail(doc), p, pages, max_new_tokens=n, stop_ids=frozenset(s)))
            for (p, pages, n), s in zip(prompts, stops)]
    while loop.step():
        pass
    loop.shutdown()
    return [r.output_ids for r in reqs], [r.finish_reason for r in reqs], loop.stats


def test_a_stop_token_inside_a_window_ends_the_request_there(loaded):
    """A request whose end token comes in the middle of a window stops at it, with the tokens and
    finish reasons of single steps; the others run on, and their lengths (7, 13: no multiple of
    the window) end exactly."""
    st = _engine(loaded, decode_batch=8, query_mode="static")
    doc = st.kv.get("a")
    prompts = [([30, 31, 32], (0, 2), 9), ([40, 41], None, 7), ([50, 51, 52, 53], (1, 3, 4), 13)]
    free, _, _ = _window_run(st.runner, doc, 1, [(), (), ()], prompts)
    stops = [(free[0][5],), (), (free[2][2],)]
    want = _window_run(st.runner, doc, 1, stops, prompts)
    got = _window_run(st.runner, doc, 4, stops, prompts)
    assert got[0] == want[0] and got[1] == want[1]
    assert want[1][0] == "stop" and len(want[0][0]) <= 5 and want[1][1] == "length"
    assert got[2].windows > 0 and got[2].host_syncs < got[2].steps
    assert not any(any(bs.live) for bs in doc.batch_slots.values())


def test_a_window_without_room_runs_single_steps(loaded):
    """Rows whose tails have no room for a whole window run single steps, with the same tokens."""
    st = _engine(loaded, decode_batch=8, query_mode="static")
    st.runner.batch_tail_tokens = 16  # row capacity: a 6-token prompt + 8 tokens leaves no room for 4 more
    doc = st.kv.get("b")
    prompts = [([60, 61, 62, 63, 64, 65], (0,), 8), ([70, 71, 72, 73, 74, 75], None, 8)]
    want = _window_run(st.runner, doc, 1, [(), ()], prompts)
    got = _window_run(st.runner, doc, 4, [(), ()], prompts)
    assert got[0] == want[0] and got[1] == want[1]


def test_decode_steps_must_be_positive():
    with pytest.raises(ValueError, match="decode_steps"):
        EngineLoop(lambda rows: None, Scheduler(max_rows=1), thread=False, decode_steps=0)
