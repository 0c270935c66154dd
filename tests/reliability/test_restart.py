"""Restart durability: the service stopped and started again with the same Redis, then the KV
store actor killed under traffic.

Stopping the stack (``stop_stack``: the Serve apps, the jobs and retrieval actors and the store
actor) frees every page and blob of the object store; Redis (AOF) keeps the directory, which
also keeps each document's text. After the restart every context Redis lists as ready must
answer with the same greedy output as before, a document review must succeed, and OpenAI chat
without a ``context_id`` must work. A context whose kept text is gone (made before the directory
kept documents) must fail clearly (409 ``context_lost``, a failed run without a traceback) and
be repaired by uploading the same text again.
"""

from __future__ import annotations

import re
import threading
import time

import pytest
import ray

from agentctx.kv_store.store import ACTOR_NAME
from tests._stack import CONTRACT, KEY_A, start_stack, stop_stack, tiny_config

pytestmark = [pytest.mark.ray, pytest.mark.redis, pytest.mark.reliability]

DOCS = [
    CONTRACT,
    CONTRACT.replace("thirty days", "forty-five days") + "7. Notices. Notices go to the addresses above.\n",
    "MEMO\n\nThe warehouse lease ends in March. The landlord keeps the deposit until the keys are returned.\n"
    "Deliveries stop on the first Monday of March.\n",
]
QUESTION = {"question": "When must invoices be paid?", "max_new_tokens": 12, "stop": []}
CHAT = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8, "temperature": 0}


@pytest.fixture(scope="module")
def redis(redis_server_factory):
    return redis_server_factory("always")


def _answers(client, cids, restore_s: float = 120.0) -> dict[str, str]:
    """Each context's answer; a context being restored answers 503 ``context_restoring`` with
    Retry-After (on a loaded box a restore can outlast ``serve.restore_wait_s``): asked again."""
    out = {}
    for cid in cids:
        deadline = time.monotonic() + restore_s
        while True:
            r = client.post(f"/v1/contexts/{cid}/query", json=QUESTION)
            if r.status_code == 503 and r.json()["error"]["code"] == "context_restoring":
                assert "retry-after" in r.headers and time.monotonic() < deadline, r.text
                time.sleep(0.5)
                continue
            break
        assert r.status_code == 200, r.text
        out[cid] = r.json()["answer"]
    return out


def _run_review(client, cid, timeout_s=180) -> dict:
    r = client.post("/v1/pipelines/document_review/runs",
                    json={"context_id": cid, "options": {"clause_kinds": ["payment", "termination"],
                                                         "summarize": False}})
    assert r.status_code == 202, r.text
    url, deadline = r.json()["status_url"], time.monotonic() + timeout_s
    while (st := client.get(url).json())["status"] not in ("succeeded", "failed", "cancelled"):
        assert time.monotonic() < deadline, st
        time.sleep(0.5)
    return st


def test_restart_keeps_every_context_then_store_actor_killed_under_traffic(ray_local, redis, tiny_ckpt):
    cfg = tiny_config(tiny_ckpt, redis.url, store={"lease_ttl_s": 5.0})
    stack = start_stack(cfg)
    try:
        a = stack.client(KEY_A)
        cids = []
        for text in DOCS:
            r = a.post("/v1/contexts", json={"text": text})
            assert r.status_code == 201, r.text
            cids.append(r.json()["id"])
        before = _answers(a, cids)
        chat_before = a.post("/v1/chat/completions", json=CHAT)
        assert chat_before.status_code == 200, chat_before.text
        # A context made before the directory kept documents: its kept text is gone.
        legacy = cids[2]
        stack.rt.store.directory.client.delete(f"{cfg.store.namespace}:doc:{legacy}")

        t_stop = time.monotonic()
        stop_stack(stack)  # pages and blobs die with the store actor; Redis keeps the directory
        stack = start_stack(cfg)
        a = stack.client(KEY_A)
        up_s = time.monotonic() - t_stop
        listed = a.get("/v1/contexts").json()["data"]
        assert {c["id"] for c in listed} >= set(cids)
        for cid in cids:
            assert a.get(f"/v1/contexts/{cid}").json()["status"] == "ready"

        # an async re-upload of a context the restart broke starts a load job that rebuilds it (202),
        # rather than answering 200 over the broken context
        r = a.post("/v1/contexts", json={"text": DOCS[1], "async": True})
        assert r.status_code == 202 and r.json()["id"] == cids[1], r.text
        rec = stack.rt.store.get_record(cids[1], "acme")
        deadline = time.monotonic() + 60
        while not all(stack.rt.store.has_pages(rec.page_ids)):
            assert time.monotonic() < deadline, "the load job did not rebuild the context"
            time.sleep(0.2)

        t0 = time.monotonic()
        restored = _answers(a, cids[:1])  # rebuilt by its first query: pages, blobs, retrieval index
        first_answer_s = time.monotonic() - t0
        restored.update(_answers(a, cids[1:2]))
        assert restored == {c: before[c] for c in cids[:2]}, "greedy output changed across the restart"

        # chat without a context_id: the tenant's no-document context is rebuilt too
        chat_after = a.post("/v1/chat/completions", json=CHAT)
        assert chat_after.status_code == 200, chat_after.text
        assert chat_after.json()["choices"][0]["message"] == chat_before.json()["choices"][0]["message"]

        # the context without a kept text: a clear 409, a run that fails saying why
        r = a.post(f"/v1/contexts/{legacy}/query", json=QUESTION)
        assert r.status_code == 409 and r.json()["error"]["code"] == "context_lost", r.text
        st = _run_review(a, legacy)
        assert st["status"] == "failed", st
        assert "ContextLostError" in st["error"] and "Traceback" not in st["error"], st["error"]
        assert not re.search(r"/\w+/.*\.py", st["error"]), st["error"]
        # ... and the same text uploaded again repairs it (not "prefilled: false" over a broken context)
        r = a.post("/v1/contexts", json={"text": DOCS[2]})
        assert r.status_code == 201 and r.json()["prefilled"] is True and r.json()["id"] == legacy, r.text
        assert _answers(a, [legacy]) == {legacy: before[legacy]}

        # a document review over a restored context succeeds with its clauses
        st = _run_review(a, cids[0])
        assert st["status"] == "succeeded", st
        report = st["result"]
        assert report["errors"] == [] and report["stats"]["clauses_found"] >= 1, report["stats"]
        print(f"\nrestart: {len(cids)} contexts restored; stack up again {up_s:.1f} s after the stop; "
              f"first answer of a context rebuilt by its query {first_answer_s:.2f} s")

        _kill_store_actor_under_traffic(stack, a, cids, before, cfg)
    finally:
        stop_stack(stack)


def _kill_store_actor_under_traffic(stack, a, cids, before, cfg) -> None:
    statuses: dict[int, int] = {}
    bad: list[str] = []
    stop = threading.Event()
    lock = threading.Lock()

    def traffic(worker: int) -> None:
        c = stack.client(KEY_A, timeout=60)
        i = 0
        while not stop.is_set():
            i += 1
            if i % 3 == 0:  # a write: a new document (its pages go through the store actor)
                r = c.post("/v1/contexts", json={"text": f"Traffic note {worker}-{i}. Nothing else.\n"})
            elif i % 3 == 1:
                r = c.post(f"/v1/contexts/{cids[i % len(cids)]}/query", json=QUESTION)
            else:
                r = c.get(f"/v1/contexts/{cids[i % len(cids)]}")
            with lock:
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                if r.status_code >= 500 and (r.status_code != 503 or "retry-after" not in r.headers):
                    bad.append(f"{r.status_code} {r.text[:200]}")
                elif r.status_code >= 400 and r.status_code != 503:
                    bad.append(f"{r.status_code} {r.text[:200]}")

    threads = [threading.Thread(target=traffic, args=(w,), daemon=True) for w in range(3)]
    for t in threads:
        t.start()
    time.sleep(2.0)
    actor = ray.get_actor(ACTOR_NAME, namespace=cfg.store.namespace)
    ray.kill(actor, no_restart=False)  # the detached actor restarts (max_restarts=-1), empty
    time.sleep(6.0)
    stop.set()
    for t in threads:
        t.join(timeout=90)
    assert not any(t.is_alive() for t in threads)
    print(f"store actor killed under traffic: statuses {dict(sorted(statuses.items()))}")
    assert not bad, bad[:5]
    assert statuses.get(500, 0) == 0
    # no context lost: each answers its greedy output, also from a replica that must reload it
    deadline = time.monotonic() + 30
    while True:
        r = a.post(f"/v1/contexts/{cids[0]}/query", json=QUESTION)
        if r.status_code == 200 or time.monotonic() > deadline:
            break
        assert r.status_code == 503 and "retry-after" in r.headers, r.text
        time.sleep(0.5)
    for cid in cids:
        assert a.post("/v1/contexts/" + cid + "/query", json=QUESTION).json()["answer"] == before[cid]
    handle = stack.rt.client.handle
    for cid in cids:  # drop the device copies: the next answers must come from the (restored) store
        handle.options(multiplexed_model_id=cid).drop_context.remote(cid).result(timeout_s=10)
    assert _answers(a, cids) == before
