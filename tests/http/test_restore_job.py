"""Issue 29, restore without starvation: a context that lost its pages is restored by one background
job of the ingress (``entrypoints/http/restore_jobs.py``), and its queries answer 503
``context_restoring`` + ``Retry-After`` with the restore's progress instead of waiting on it.

The unit tests drive ``RestoreJobs`` with a fake restore (no cluster). The stack test loses the
pages of two contexts for real (the KV store actor killed: it restarts empty; the replica's device
copies dropped) under a ``serve.restore_wait_s`` of 0, so that every restore outlasts the wait.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from agentctx.entrypoints.http.errors import APIError
from agentctx.entrypoints.http.restore_jobs import RestoreJobs
from agentctx.kv_store.errors import ContextLostError
from agentctx.serving.serve.progress import Progress
from agentctx.serving.serve.restore import RestoreResult
from tests._stack import CONTRACT, KEY_A, running_stack, tiny_config


# ------------------------------------------------------------------------------ unit: RestoreJobs
class FakeRestore:
    """A restore that reports 32 of 128 tokens, then waits for ``release`` (or fails with ``error``)."""

    def __init__(self, error: Exception | None = None):
        self.calls: list[tuple[str, str]] = []
        self.release = asyncio.Event()
        self.error = error

    async def __call__(self, context_id: str, tenant: str, on_progress) -> RestoreResult:
        self.calls.append((context_id, tenant))
        on_progress(Progress(32, 128, 0.5))
        await self.release.wait()
        if self.error is not None:
            raise self.error
        return RestoreResult(8, ("token_ids",), True)


def _restoring(exc: BaseException) -> dict:
    assert isinstance(exc, APIError) and exc.status == 503 and exc.code == "context_restoring", exc
    assert exc.headers == {"Retry-After": "2"}
    return exc.body()["error"]


def test_concurrent_requests_share_one_restore_then_answer_503_with_progress():
    async def scenario():
        run = FakeRestore()
        jobs = RestoreJobs(run, wait_s=0.05, retry_after_s=2.0)
        errs = await asyncio.gather(jobs.ensure("c1", "acme"), jobs.ensure("c1", "acme"), jobs.join("c1", "acme"),
                                    return_exceptions=True)
        assert run.calls == [("c1", "acme")]  # one restore for three requests
        for err in errs:
            body = _restoring(err)
            assert body["progress"]["tokens_done"] == 32 and body["progress"]["tokens_total"] == 128
            assert body["progress"]["tokens_per_s"] == 64.0 and body["progress"]["eta_s"] == 1.5
            assert "32 of 128 tokens" in body["message"] and body["param"] == "context_id"
        assert jobs.running("c1", "acme") is not None and jobs.running("c1", "globex") is None
        run.release.set()
        res = await jobs.ensure("c1", "acme")  # finishes within the wait: answered transparently
        assert res.pages_put == 8 and run.calls == [("c1", "acme")]
        assert jobs.running("c1", "acme") is None and await jobs.join("c1", "acme") is None
        await jobs.ensure("c1", "acme")  # lost again later: a new restore
        assert len(run.calls) == 2

    asyncio.run(scenario())


def test_a_short_restore_is_invisible():
    async def scenario():
        run = FakeRestore()
        run.release.set()
        jobs = RestoreJobs(run, wait_s=1.0, retry_after_s=2.0)
        assert (await jobs.ensure("c1", "acme")).prefilled
        assert jobs.running("c1", "acme") is None

    asyncio.run(scenario())


def test_a_failed_restore_answers_the_next_request_then_a_new_one_starts():
    async def scenario():
        run = FakeRestore(error=ContextLostError("c1"))
        jobs = RestoreJobs(run, wait_s=0.0, retry_after_s=2.0)
        with pytest.raises(APIError):
            await jobs.ensure("c1", "acme")
        run.release.set()
        await asyncio.sleep(0.01)
        assert jobs.running("c1", "acme") is None  # not running, but its error is kept ...
        with pytest.raises(ContextLostError):
            await jobs.join("c1", "acme")  # ... for the next request
        assert await jobs.join("c1", "acme") is None  # taken once
        jobs.wait_s = 0.5
        with pytest.raises(ContextLostError):  # a new restore, which fails within the wait
            await jobs.ensure("c1", "acme")
        assert len(run.calls) == 2

    asyncio.run(scenario())


def test_a_waiter_that_goes_away_leaves_the_restore_running():
    async def scenario():
        run = FakeRestore()
        jobs = RestoreJobs(run, wait_s=10.0, retry_after_s=2.0)
        waiter = asyncio.create_task(jobs.ensure("c1", "acme"))
        await asyncio.sleep(0.01)
        waiter.cancel()  # the client disconnected
        await asyncio.sleep(0.01)
        assert jobs.running("c1", "acme") is not None
        run.release.set()
        assert (await jobs.ensure("c1", "acme")).pages_put == 8 and len(run.calls) == 1

    asyncio.run(scenario())


# ------------------------------------------------------------------------------ the real stack
LONG = CONTRACT + "".join(f"{7 + i}. Schedule {i}. Service line {i} costs {100 + i} dollars a month, billed "
                          f"quarterly, with a {i % 5 + 1}% late fee after thirty days.\n" for i in range(20))
QUESTION = {"question": "When must invoices be paid?", "max_new_tokens": 8, "stop": []}


@pytest.fixture(scope="module")
def stack(ray_local, redis_url, tiny_ckpt):
    with running_stack(tiny_config(tiny_ckpt, redis_url, serve={"restore_wait_s": 0.0})) as s:
        yield s


def _restores(client) -> float:
    lines = client.get("/metrics").text.splitlines()
    return sum(float(x.split()[-1]) for x in lines if x.startswith("agentctx_context_restores_total{"))


def _lose_every_page(stack, cids) -> None:
    """What a restart does to the object store, with Redis (the directory) kept."""
    import ray

    from agentctx.kv_store.store import ACTOR_NAME

    ray.kill(ray.get_actor(ACTOR_NAME, namespace=stack.cfg.store.namespace), no_restart=False)
    handle = stack.rt.client.handle
    for cid in cids:  # the replica's device copies too: the restore must re-prefill
        handle.options(multiplexed_model_id=cid).drop_context.remote(cid).result(timeout_s=10)
    deadline = time.monotonic() + 60
    for cid in cids:
        rec = stack.rt.store.get_record(cid, "acme")
        while True:
            try:
                have = stack.rt.store.has_pages(rec.page_ids)
                break
            except Exception:  # the store actor is restarting
                assert time.monotonic() < deadline, "the store actor did not come back"
                time.sleep(0.2)
        assert not any(have), "the pages survived the store actor"


def _until_answered(client, cid, body, timeout_s=180.0) -> tuple[dict, list[dict], int]:
    """Poll a query (and the context's status) until it answers 200: (its body, the loading
    statuses seen, the 503s seen)."""
    loading, refused, deadline = [], 0, time.monotonic() + timeout_s
    while True:
        st = client.get(f"/v1/contexts/{cid}").json()
        if st["status"] == "loading":
            loading.append(st)
        r = client.post(f"/v1/contexts/{cid}/query", json=body)
        if r.status_code == 200:
            return r.json(), loading, refused
        assert r.status_code == 503 and r.json()["error"]["code"] == "context_restoring", r.text
        assert r.headers["retry-after"] == "1"
        refused += 1
        assert time.monotonic() < deadline, "the restore did not finish"
        time.sleep(0.05)


@pytest.mark.ray
@pytest.mark.redis
def test_lost_context_is_restored_in_the_background_once(stack):
    a = stack.client(KEY_A)
    r = a.post("/v1/contexts", json={"text": LONG})
    assert r.status_code == 201, r.text
    cid, prefill_s = r.json()["id"], r.json()["prefill_s"]
    short = a.post("/v1/contexts", json={"text": CONTRACT})
    assert short.status_code == 201, short.text
    sid = short.json()["id"]
    before = a.post(f"/v1/contexts/{cid}/query", json=QUESTION)
    dense_body = {**QUESTION, "dense": True}
    dense_before = a.post(f"/v1/contexts/{sid}/query", json=dense_body)
    assert before.status_code == dense_before.status_code == 200, (before.text, dense_before.text)
    restores_before = _restores(a)

    _lose_every_page(stack, [cid, sid])
    # Two queries at once (the plan path: the document blob is gone): both answer at once, one restore.
    clients = [stack.client(KEY_A), stack.client(KEY_A)]
    with ThreadPoolExecutor(2) as pool:
        first = list(pool.map(lambda c: c.post(f"/v1/contexts/{cid}/query", json=QUESTION), clients))
    for resp in first:
        assert resp.status_code == 503, resp.text
        assert resp.headers["retry-after"] == "1"
        err = resp.json()["error"]
        assert err["code"] == "context_restoring" and "progress" in err, err
    after, loading, refused = _until_answered(a, cid, QUESTION)
    assert after["answer"] == before.json()["answer"], "greedy output changed across the restore"
    if prefill_s > 0.5:  # long enough that a status poll lands inside the restore
        assert loading and loading[-1]["progress"]["tokens_total"] == r.json()["num_tokens"], loading
        assert loading[-1]["num_tokens"] == r.json()["num_tokens"]
    assert a.get(f"/v1/contexts/{cid}").json()["status"] == "ready"

    # The generation path (dense: no plan, the replica finds the pages missing): restored the same way.
    resp = a.post(f"/v1/contexts/{sid}/query", json=dense_body)
    assert resp.status_code == 503 and resp.json()["error"]["code"] == "context_restoring", resp.text
    dense_after, _, _ = _until_answered(a, sid, dense_body)
    assert dense_after["answer"] == dense_before.json()["answer"]

    assert _restores(a) - restores_before == 2  # one per context, whatever the number of queries
    print(f"\nrestore in the background: first prefill {prefill_s:.2f} s, {len(first) + refused} queries answered "
          f"503 context_restoring meanwhile, {len(loading)} status polls 'loading'")
