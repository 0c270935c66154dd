"""The HTTP API end to end: real Ray Serve on 127.0.0.1, real redis-server, tiny random Gemma.

One stack per module (Serve + model replica + ingress start once, ~20 s); the
tiny model's text is gibberish but every code path (prefill, retrieval plan,
paged generation, streaming, pipelines) runs for real.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from tests._stack import CONTRACT, KEY_A, KEY_B, KEYS, running_stack, sse_events, tiny_config

pytestmark = [pytest.mark.ray, pytest.mark.redis]


@pytest.fixture(scope="module")
def stack(ray_local, redis_url, tiny_ckpt):
    with running_stack(tiny_config(tiny_ckpt, redis_url)) as s:
        yield s


@pytest.fixture(scope="module")
def a(stack):
    return stack.client(KEY_A)


@pytest.fixture(scope="module")
def b(stack):
    return stack.client(KEY_B)


@pytest.fixture(scope="module")
def ctx_a(a):
    r = a.post("/v1/contexts", json={"text": CONTRACT})
    assert r.status_code in (200, 201), r.text
    return r.json()["id"]


def _query(client, cid, **body):
    body.setdefault("question", "How much notice does termination need?")
    body.setdefault("max_new_tokens", 8)
    return client.post(f"/v1/contexts/{cid}/query", json=body)


# ------------------------------------------------------------------------------ basics
def test_healthz_is_open_and_everything_else_needs_a_key(stack):
    anon = stack.client(None)
    assert anon.get("/healthz").json() == {"status": "ok"}
    r = anon.get("/v1/models")
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "Bearer"
    assert r.json()["error"]["code"] == "invalid_api_key"
    assert "x-request-id" in r.headers


def test_end_to_end_upload_query_stream_delete(stack, a):
    text = CONTRACT + "\n7. Notices. Notices are sent by email to the addresses above.\n"
    r = a.post("/v1/contexts", json={"text": text})
    assert r.status_code == 201, r.text
    ctx = r.json()
    cid = ctx["id"]
    assert ctx["status"] == "ready" and ctx["prefilled"] is True
    assert ctx["num_tokens"] > len(text) // 2 and ctx["num_pages"] == -(-ctx["num_tokens"] // 16)
    assert ctx["status_url"] == f"/v1/contexts/{cid}"

    again = a.post("/v1/contexts", json={"text": text})  # same document: reattached, no prefill
    assert again.status_code == 200 and again.json()["id"] == cid and again.json()["prefilled"] is False

    info = a.get(f"/v1/contexts/{cid}").json()
    assert info["num_tokens"] == ctx["num_tokens"] and info["num_pages"] == ctx["num_pages"]
    assert cid in [c["id"] for c in a.get("/v1/contexts").json()["data"]]

    q = _query(a, cid, max_new_tokens=12)
    assert q.status_code == 200, q.text
    ans = q.json()
    plan = ans["plan"]
    assert plan["pages"] and plan["pages"] == sorted(plan["pages"]) and len(plan["reasons"]) == len(plan["pages"])
    assert ans["pages_attended"] == len(plan["pages"])
    assert 0 < ans["utilization"] <= 1 and ans["context_tokens"] == ctx["num_tokens"]
    assert ans["usage"]["completion_tokens"] <= 12 and ans["finish_reason"] in ("stop", "length")

    dense = _query(a, cid, max_new_tokens=4, dense=True).json()
    assert dense["plan"]["dense"] and dense["utilization"] == 1.0
    budget = _query(a, cid, max_new_tokens=4, top_k_pages=1).json()
    assert budget["pages_attended"] <= ans["pages_attended"]

    with a.stream("POST", f"/v1/contexts/{cid}/query",
                  json={"question": "How much notice does termination need?", "max_new_tokens": 12,
                        "stream": True}) as s:
        assert s.status_code == 200 and s.headers["content-type"].startswith("text/event-stream")
        events = sse_events(s.iter_lines())
    kinds = [e for e, _ in events]
    assert kinds[0] == "plan" and kinds[-1] == "done" and set(kinds[1:-1]) <= {"delta"}
    done = json.loads(events[-1][1])
    deltas = "".join(json.loads(d)["text"] for e, d in events if e == "delta")
    assert done["answer"] == ans["answer"], "greedy stream and non-stream answers differ"
    assert deltas.strip() == ans["answer"]
    assert json.loads(events[0][1])["pages"] == plan["pages"]

    assert a.delete(f"/v1/contexts/{cid}").json() == {"id": cid, "object": "context", "deleted": True}
    assert a.get(f"/v1/contexts/{cid}").status_code == 404
    assert _query(a, cid).status_code == 404
    assert a.delete(f"/v1/contexts/{cid}").status_code == 404
    assert stack.wait_no_holders([cid]) == {}


def test_multipart_upload_and_async_load(stack, a):
    doc = "Annex A. The supplier delivers the goods within ten business days.\n" * 3
    r = a.post("/v1/contexts", files={"file": ("annex.txt", doc.encode(), "text/plain")})
    assert r.status_code == 201, r.text
    cid = r.json()["id"]
    # the same text as JSON is the same context (same tenant, model and text)
    assert a.post("/v1/contexts", json={"text": doc}).json()["id"] == cid

    bad = a.post("/v1/contexts", files={"file": ("x.bin", b"\xff\xfe\x00garbage", "application/octet-stream")})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "file"
    assert a.post("/v1/contexts", files={"other": (None, b"y")}).status_code == 422  # a field, no file

    doc2 = "Annex B. Warranty claims are made within twelve months of delivery.\n" * 4
    r = a.post("/v1/contexts", json={"text": doc2, "async": True})
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["status"] == "loading" and r.headers["location"] == body["status_url"]
    deadline = time.monotonic() + 60
    while True:
        st = a.get(body["status_url"])
        assert st.status_code == 200, st.text
        if st.json()["status"] == "ready":
            break
        assert st.json()["status"] == "loading" and time.monotonic() < deadline
        time.sleep(0.2)
    assert st.json()["num_pages"] >= 1
    # the async-loaded context answers queries
    assert _query(a, body["id"], max_new_tokens=3).status_code == 200


def test_pipeline_run_document_review(stack, a, b, ctx_a):
    r = a.post("/v1/pipelines/document_review/runs",
               json={"context_id": ctx_a, "options": {"clause_kinds": ["termination"], "summarize": False}})
    assert r.status_code == 202, r.text
    run = r.json()
    assert run["status"] in ("queued", "running") and run["status_url"] == r.headers["location"]
    # another tenant cannot see the run
    assert b.get(run["status_url"]).status_code == 404
    deadline = time.monotonic() + 180
    while True:
        st = a.get(run["status_url"]).json()
        if st["status"] in ("succeeded", "failed"):
            break
        assert time.monotonic() < deadline, st
        time.sleep(0.5)
    assert st["status"] == "succeeded", st["error"]
    report = st["result"]
    assert report["document"]["context_id"] == ctx_a
    assert [c["kind"] for c in report["clauses"]] == ["termination"]
    assert "model_calls" in report["stats"] and report["errors"] == [], json.dumps(report)
    assert stack.wait_no_holders([ctx_a], timeout_s=30) == {}


def _agreement(title: str, law: str) -> str:
    return (f"{title}\n\nThis {title.title()} is entered into by and between Alder Ltd. and Birch Inc.\n\n"
            f"1. Termination. Either party may terminate this Agreement on 30 days' written notice.\n\n"
            f"2. Governing Law. This Agreement is governed by the laws of the State of {law}.\n")


def test_case_file_upload_and_review_per_document(stack, a):
    docs = [{"name": "supply.txt", "text": _agreement("SUPPLY AGREEMENT", "Oregon")},
            {"name": "services.txt", "text": _agreement("SERVICES AGREEMENT", "Vermont")}]
    r = a.post("/v1/contexts", json={"documents": docs})
    assert r.status_code == 201, r.text
    cid = r.json()["id"]
    # the same files as multipart parts are the same context (one text, one prefill)
    files = [("file", (d["name"], d["text"].encode(), "text/plain")) for d in docs]
    again = a.post("/v1/contexts", files=files)
    assert again.status_code == 200 and again.json()["id"] == cid and again.json()["prefilled"] is False
    # bad case files: 422 naming the field, nothing stored
    for body, param in [({"documents": [docs[0], dict(docs[1], name="supply.txt")]}, "documents"),
                        ({"documents": [docs[0], dict(docs[1], text="")]}, "documents.1.text"),
                        ({"documents": [dict(docs[0], name="a\nb"), docs[1]]}, "documents.0.name"),
                        ({"documents": []}, "documents"),
                        ({"text": "x", "documents": docs}, "documents"),
                        ({"async": True}, None)]:
        bad = a.post("/v1/contexts", json=body)
        assert bad.status_code == 422 and bad.json()["error"]["param"] == param, (body, bad.text)
    empty = a.post("/v1/contexts", files=[files[0], ("file", ("blank.txt", b"  \n", "text/plain"))])
    assert empty.status_code == 422 and empty.json()["error"]["param"] == "file[1]", empty.text

    r = a.post("/v1/pipelines/document_review/runs",
               json={"context_id": cid, "options": {"clause_kinds": ["termination", "governing_law"],
                                                    "summarize": False}})
    assert r.status_code == 202, r.text
    deadline = time.monotonic() + 180
    while (st := a.get(r.json()["status_url"]).json())["status"] not in ("succeeded", "failed"):
        assert time.monotonic() < deadline, st
        time.sleep(0.5)
    assert st["status"] == "succeeded", st.get("error")
    report = st["result"]
    assert [d["name"] for d in report["documents"]] == ["supply.txt", "services.txt"]
    laws = {c["document"]: c["quote"] for c in report["clauses"] if c["kind"] == "governing_law"}
    assert "Oregon" in laws[0] and "Vermont" in laws[1]
    assert any("different laws" in n for n in report["notes"])
    assert stack.wait_no_holders([cid], timeout_s=30) == {}


def test_pipeline_errors(a, ctx_a):
    r = a.post("/v1/pipelines/no_such_pipeline/runs", json={"context_id": ctx_a})
    assert r.status_code == 404 and r.json()["error"]["code"] == "pipeline_not_found"
    r = a.post("/v1/pipelines/document_review/runs",
               json={"context_id": ctx_a, "options": {"clause_kinds": ["nonsense"]}})
    assert r.status_code == 422 and r.json()["error"]["param"] == "options.clause_kinds"
    spec = {"name": "mine", "steps": [{"name": "s", "agent": "no_such_role"}]}
    r = a.post("/v1/pipelines/mine/runs", json={"context_id": ctx_a, "spec": spec})
    assert r.status_code == 422 and r.json()["error"]["param"].startswith("spec")
    r = a.post("/v1/pipelines/document_review/runs", json={"context_id": "ctx-" + "0" * 32})
    assert r.status_code == 404
    assert a.get("/v1/pipelines/document_review/runs/run-" + "0" * 32).status_code == 404
    assert a.get("/v1/pipelines/document_review/runs/not-a-run").status_code == 404


# ------------------------------------------------------------------------------ OpenAI
def test_openai_client_completions_and_chat(stack, ctx_a):
    import openai

    client = openai.OpenAI(base_url=stack.url + "/v1", api_key=KEY_A, max_retries=0, timeout=60)
    model = client.models.list().data[0].id

    plain = client.completions.create(model=model, prompt="Hello there", max_tokens=6, temperature=0)
    assert plain.object == "text_completion" and isinstance(plain.choices[0].text, str)
    assert plain.usage.completion_tokens <= 6 and plain.choices[0].finish_reason in ("stop", "length")

    over = client.completions.create(model=model, prompt="The notice period is", max_tokens=8, temperature=0,
                                     extra_body={"context_id": ctx_a})
    streamed = client.completions.create(model=model, prompt="The notice period is", max_tokens=8, temperature=0,
                                         stream=True, extra_body={"context_id": ctx_a})
    chunks = list(streamed)
    assert "".join(c.choices[0].text for c in chunks) == over.choices[0].text
    assert chunks[-1].choices[0].finish_reason == over.choices[0].finish_reason

    msgs = [{"role": "system", "content": "Answer from the contract."},
            {"role": "user", "content": "What is the payment term?"}]
    chat = client.chat.completions.create(model=model, messages=msgs, max_tokens=8, temperature=0,
                                          extra_body={"context_id": ctx_a})
    assert chat.object == "chat.completion" and chat.choices[0].message.role == "assistant"
    parts = list(client.chat.completions.create(model=model, messages=msgs, max_tokens=8, temperature=0,
                                                stream=True, stream_options={"include_usage": True},
                                                extra_body={"context_id": ctx_a}))
    text = "".join((p.choices[0].delta.content or "") for p in parts if p.choices)
    assert text == chat.choices[0].message.content
    assert parts[-1].usage.completion_tokens == chat.usage.completion_tokens

    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-model", prompt="x", max_tokens=1)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=stack.url + "/v1", api_key="wrong-key-0123456789", max_retries=0).models.list()
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=model, prompt="x", max_tokens=1, n=2)
    with pytest.raises(openai.UnprocessableEntityError) as err:
        client.completions.create(model=model, prompt="x", max_tokens=10**6)
    assert err.value.body["param"] == "max_tokens" and err.value.body["limit"] == 4096
    with pytest.raises(openai.NotFoundError):  # another tenant's context
        openai.OpenAI(base_url=stack.url + "/v1", api_key=KEY_B, max_retries=0).completions.create(
            model=model, prompt="x", max_tokens=1, extra_body={"context_id": ctx_a})


# ------------------------------------------------------------------------------ tenants and auth
@pytest.mark.reliability
def test_tenant_isolation(stack, a, b, ctx_a):
    missing = "ctx-" + "f" * 32
    for method, path, body in [("GET", "/v1/contexts/{}", None), ("DELETE", "/v1/contexts/{}", None),
                               ("POST", "/v1/contexts/{}/query", {"question": "q", "max_new_tokens": 1})]:
        theirs = b.request(method, path.format(ctx_a), json=body)
        nothing = b.request(method, path.format(missing), json=body)
        assert theirs.status_code == nothing.status_code == 404
        # the same answer as for an id that does not exist, up to the id itself
        assert theirs.json()["error"]["code"] == nothing.json()["error"]["code"]
        assert theirs.text.replace(ctx_a, missing) == nothing.text
    r = b.post("/v1/pipelines/document_review/runs", json={"context_id": ctx_a})
    assert r.status_code == 404
    assert ctx_a not in [c["id"] for c in b.get("/v1/contexts").json()["data"]]
    assert a.get(f"/v1/contexts/{ctx_a}").status_code == 200  # still there for its owner

    # The same document uploaded by both tenants: two contexts and no page in common.
    cid_b = b.post("/v1/contexts", json={"text": CONTRACT}).json()["id"]
    assert cid_b != ctx_a
    pages_a = set(stack.rt.store.get_record(ctx_a, "acme").page_ids)
    pages_b = set(stack.rt.store.get_record(cid_b, "globex").page_ids)
    assert pages_a and pages_b and not (pages_a & pages_b)


ROUTES = [
    ("GET", "/v1/models"), ("GET", "/metrics"), ("GET", "/v1/contexts"), ("POST", "/v1/contexts"),
    ("GET", "/v1/contexts/ctx-x"), ("DELETE", "/v1/contexts/ctx-x"), ("POST", "/v1/contexts/ctx-x/query"),
    ("POST", "/v1/pipelines/document_review/runs"), ("GET", "/v1/pipelines/document_review/runs/run-x"),
    ("POST", "/v1/completions"), ("POST", "/v1/chat/completions"), ("GET", "/docs"), ("GET", "/openapi.json"),
]


@pytest.mark.reliability
def test_auth_sweep_every_route(stack, ctx_a):
    anon = stack.client(None)
    bad_headers = [{}, {"Authorization": "Bearer"}, {"Authorization": "Bearer wrong-key-000000000000"},
                   {"Authorization": f"Basic {KEY_A}"}, {"Authorization": KEY_A}, {"X-API-Key": "nope"},
                   {"Authorization": "Bearer " + KEY_A[:-1]}, {"Authorization": "Bearer " + "x" * 5000}]
    n = 0
    for method, path in ROUTES + [("GET", f"/v1/contexts/{ctx_a}"), ("POST", f"/v1/contexts/{ctx_a}/query")]:
        for headers in bad_headers:
            r = anon.request(method, path, headers=headers, json={"question": "q"} if method == "POST" else None)
            assert r.status_code == 401, (method, path, headers, r.status_code, r.text)
            assert r.json()["error"]["type"] == "authentication_error"
            assert ctx_a not in r.text
            n += 1
    assert n == 15 * len(bad_headers)
    # a path no route serves is a 404 to anyone (issue 29: it was a 401, sending users to their key)
    assert anon.get("/no/such/route").status_code == 404
    for key in KEYS:  # both header styles work
        assert anon.get("/v1/models", headers={"X-API-Key": key}).status_code == 200
        assert anon.get("/v1/models", headers={"Authorization": f"bearer {key}"}).status_code == 200


# ------------------------------------------------------------------------------ limits and malformed input
def test_limits_name_the_field_and_the_limit(stack, a, ctx_a):
    limit = stack.cfg.serve.max_request_bytes
    r = a.post("/v1/contexts", json={"text": "x" * (limit + 10)})
    assert r.status_code == 413 and r.json()["error"]["limit"] == limit
    r = a.post("/v1/contexts", content=b"x" * (limit + 10), headers={"content-type": "application/json"})
    assert r.status_code == 413
    # chunked, no Content-Length: counted while reading
    r = a.post("/v1/contexts", content=iter([b"x" * 65536] * (limit // 65536 + 2)),
               headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"

    too_many = stack.cfg.model.max_context_tokens + 100  # byte-level tokenizer: one token per byte
    r = a.post("/v1/contexts", json={"text": "y" * too_many})
    assert r.status_code == 413, r.text
    assert r.json()["error"] == {**r.json()["error"], "param": "text", "limit": stack.cfg.model.max_context_tokens}

    r = _query(a, ctx_a, max_new_tokens=5000)
    assert r.status_code == 422 and r.json()["error"]["param"] == "max_new_tokens"
    assert r.json()["error"]["limit"] == 4096
    r = _query(a, ctx_a, question="q" * 20000)
    assert r.status_code == 422 and r.json()["error"]["param"] == "question" and r.json()["error"]["limit"] == 16384
    r = _query(a, ctx_a, temperature=9)
    assert r.status_code == 422 and r.json()["error"] ["param"] == "temperature" and r.json()["error"]["limit"] == 2
    r = _query(a, ctx_a, stop=["a"] * 9)
    assert r.status_code == 422 and r.json()["error"]["param"] == "stop"
    r = _query(a, ctx_a, budget_fraction=1e-9)
    assert r.status_code == 422 and r.json()["error"]["param"] == "budget_fraction"


def _malformed(cid: str) -> list[tuple[str, str, dict]]:
    """(method, path, httpx kwargs): each must get a 4xx."""
    J = {"content-type": "application/json"}
    q = f"/v1/contexts/{cid}/query"
    cases = [
        ("POST", "/v1/contexts", {"content": b"{", "headers": J}),
        ("POST", "/v1/contexts", {"content": b"[]", "headers": J}),
        ("POST", "/v1/contexts", {"content": b'"text"', "headers": J}),
        ("POST", "/v1/contexts", {"content": b"", "headers": J}),
        ("POST", "/v1/contexts", {"content": b"null", "headers": J}),
        ("POST", "/v1/contexts", {"json": {"text": 5}}),
        ("POST", "/v1/contexts", {"json": {"text": ""}}),
        ("POST", "/v1/contexts", {"json": {"text": "   \n\t"}}),
        ("POST", "/v1/contexts", {"json": {"text": "a", "extra": 1}}),
        ("POST", "/v1/contexts", {"json": {"text": ["a"]}}),
        ("POST", "/v1/contexts", {"json": {"text": "a\x00b"}}),
        ("POST", "/v1/contexts", {"content": b'{"text": "\xff\xfe"}', "headers": J}),
        ("POST", "/v1/contexts", {"content": b'{"text": "\\ud800"}', "headers": J}),
        ("POST", "/v1/contexts", {"content": b'{"text": NaN}', "headers": J}),
        ("POST", "/v1/contexts", {"content": b'{"text": 1e99999}', "headers": J}),
        ("POST", "/v1/contexts", {"content": b'{"text": ' + b"9" * 5000 + b"}", "headers": J}),
        ("POST", "/v1/contexts", {"content": b"[" * 100000 + b"]" * 100000, "headers": J}),
        ("POST", "/v1/contexts", {"content": b"text=hello", "headers": {"content-type": "text/plain"}}),
        ("POST", "/v1/contexts", {"content": b"--x\r\nbroken", "headers": {"content-type": "multipart/form-data"}}),
        ("POST", "/v1/contexts", {"content": b"--b\r\n\r\n--b--", "headers":
                                  {"content-type": "multipart/form-data; boundary=b"}}),
        ("PUT", "/v1/contexts", {"json": {"text": "a"}}),
        ("GET", "/v1/contexts/..%2F..%2Fetc%2Fpasswd", {}),
        ("GET", "/v1/contexts/%2e%2e", {}),
        ("GET", "/v1/contexts/ctx-%00", {}),
        ("GET", "/v1/contexts/" + "a" * 300, {}),
        ("GET", "/v1/contexts/ctx%20x", {}),
        ("GET", "/v1/contexts/%E2%98%83", {}),
        ("DELETE", "/v1/contexts/..", {}),
        ("POST", "/v1/contexts/ctx-" + "0" * 32 + "/query", {"json": {"question": "q"}}),
        ("POST", q, {"json": {}}),
        ("POST", q, {"json": {"question": ""}}),
        ("POST", q, {"json": {"question": "   "}}),
        ("POST", q, {"json": {"question": 7}}),
        ("POST", q, {"json": {"question": "q", "max_new_tokens": -1}}),
        ("POST", q, {"json": {"question": "q", "max_new_tokens": "many"}}),
        ("POST", q, {"json": {"question": "q", "max_new_tokens": 10**9}}),
        ("POST", q, {"json": {"question": "q", "temperature": -1}}),
        ("POST", q, {"json": {"question": "q", "seed": -5}}),
        ("POST", q, {"json": {"question": "q", "budget_fraction": 0}}),
        ("POST", q, {"json": {"question": "q", "budget_fraction": 3}}),
        ("POST", q, {"json": {"question": "q", "top_k_pages": -1}}),
        ("POST", q, {"json": {"question": "q", "stream": "maybe"}}),
        ("POST", q, {"json": {"question": "q", "stop": [1, 2]}}),
        ("POST", q, {"json": {"question": "q", "bogus": True}}),
        ("POST", q, {"content": b"\xc3\x28", "headers": J}),
        ("POST", "/v1/completions", {"json": {}}),
        ("POST", "/v1/completions", {"json": {"prompt": []}}),
        ("POST", "/v1/completions", {"json": {"prompt": [1, 2, 3]}}),
        ("POST", "/v1/completions", {"json": {"prompt": ["a", "b"]}}),
        ("POST", "/v1/completions", {"json": {"prompt": "a", "n": 3}}),
        ("POST", "/v1/completions", {"json": {"prompt": "a", "logprobs": 5}}),
        ("POST", "/v1/completions", {"json": {"prompt": "a", "max_tokens": 10**7}}),
        ("POST", "/v1/completions", {"json": {"prompt": "a", "model": "gpt-9"}}),
        ("POST", "/v1/completions", {"json": {"prompt": "a", "temperature": "hot"}}),
        ("POST", "/v1/completions", {"json": {"prompt": "a", "context_id": "../../x"}}),
        ("POST", "/v1/completions", {"json": {"prompt": "a", "context_id": "ctx-" + "1" * 32}}),
        ("POST", "/v1/completions", {"json": {"prompt": "a", "suffix": "zz"}}),
        ("GET", "/v1/completions", {}),
        ("POST", "/v1/chat/completions", {"json": {"messages": []}}),
        ("POST", "/v1/chat/completions", {"json": {"messages": [{"role": "robot", "content": "hi"}]}}),
        ("POST", "/v1/chat/completions", {"json": {"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "http://127.0.0.1/x.png"}}]}]}}),
        ("POST", "/v1/chat/completions", {"json": {"messages": "hello"}}),
        ("POST", "/v1/chat/completions", {"json": {"messages": [{"role": "user", "content": "x" * 70000}]}}),
        ("POST", "/v1/pipelines/document_review/runs", {"json": {}}),
        ("POST", "/v1/pipelines/document_review/runs", {"json": {"context_id": "../x"}}),
        ("POST", "/v1/pipelines/document_review/runs", {"json": {"context_id": cid, "spec": {"name": "x"}}}),
        ("POST", "/v1/pipelines/..%2F..%2Fsecrets/runs", {"json": {"context_id": cid}}),
        ("POST", "/v1/pipelines/a%20b/runs", {"json": {"context_id": cid}}),
        ("POST", "/v1/pipelines/other/runs", {"json": {"context_id": cid, "options": {}}}),
        ("GET", "/v1/pipelines/document_review/runs/%2e%2e%2f%2e%2e", {}),
        ("GET", "/v1/pipelines/document_review/runs/run-" + "z" * 32, {}),
        ("GET", "/v1/nothing", {}),
        ("DELETE", "/v1/models", {}),
    ]
    return cases


@pytest.mark.reliability
def test_1000_malformed_requests_only_4xx_and_replicas_survive(stack, a, ctx_a):
    from ray import serve

    cases = _malformed(ctx_a)
    n_requests, concurrency, budget_s = 1000, 16, 180
    statuses: dict[int, int] = {}
    bad: list = []

    async def run() -> None:
        sem = asyncio.Semaphore(concurrency)
        async with httpx.AsyncClient(base_url=stack.url, headers={"Authorization": f"Bearer {KEY_A}"},
                                     timeout=30) as client:
            async def one(i: int) -> None:
                method, path, kw = cases[i % len(cases)]
                async with sem:
                    r = await client.request(method, path, **kw)
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                ok = 400 <= r.status_code < 500 and r.headers["content-type"].startswith("application/json")
                if not ok or "error" not in r.json():
                    bad.append((method, path, r.status_code, r.text[:200]))
            await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(n_requests))), budget_s)

    t0 = time.monotonic()
    asyncio.run(run())
    elapsed = time.monotonic() - t0
    assert not bad, bad[:10]
    assert sum(statuses.values()) == n_requests and all(400 <= s < 500 for s in statuses)
    apps = serve.status().applications
    for name in ("agentctx-model", "agentctx-http"):
        assert apps[name].status == "RUNNING"
        for dep in apps[name].deployments.values():
            assert dep.replica_states.get("RUNNING", 0) >= 1
    # Protocol-level garbage straight on a socket: the proxy answers 4xx (or closes), never 5xx.
    import socket
    from urllib.parse import urlsplit

    host, port = urlsplit(stack.url).hostname, urlsplit(stack.url).port
    raw = [b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
           b"POST /v1/contexts HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
           b"GARBAGE\r\n\r\n", b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
           b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n"]
    for payload in raw:
        with socket.create_connection((host, port), timeout=10) as sock:
            sock.sendall(payload)
            try:
                head = sock.recv(64)
            except (ConnectionResetError, TimeoutError):
                head = b""
        assert head == b"" or head.split(b" ")[1][:1] == b"4", head
    ok = _query(a, ctx_a, max_new_tokens=2)
    assert ok.status_code == 200, ok.text
    print(f"1000 malformed requests in {elapsed:.1f} s, statuses {dict(sorted(statuses.items()))}")


def test_concurrent_queries_give_the_answers_they_give_alone(stack, a, ctx_a):
    """Queries in flight together share decode forwards on the replica (decode batching);
    each must still get exactly its own greedy answer."""
    questions = ["How much notice does termination need?", "Who pays the fees?",
                 "What law governs the agreement?", "Is there a liability cap?"]

    async def run() -> list[dict]:
        async with httpx.AsyncClient(base_url=stack.url, headers={"Authorization": f"Bearer {KEY_A}"},
                                     timeout=60) as client:
            rs = await asyncio.gather(*(client.post(f"/v1/contexts/{ctx_a}/query",
                                                    json={"question": q, "max_new_tokens": 12}) for q in questions))
        assert all(r.status_code == 200 for r in rs), [r.text for r in rs]
        return [r.json() for r in rs]

    together = asyncio.run(run())
    alone = [_query(a, ctx_a, question=q, max_new_tokens=12).json() for q in questions]
    assert [t["answer"] for t in together] == [x["answer"] for x in alone]


# ------------------------------------------------------------------------------ metrics and leaks
def test_metrics_exposition(stack, a, ctx_a):
    assert _query(a, ctx_a, max_new_tokens=3).status_code == 200
    text = a.get("/metrics").text
    for needle in ('agentctx_http_requests_total{method="POST",route="/v1/contexts/{context_id}/query",status="200"}',
                   "agentctx_ttft_seconds_bucket", "agentctx_pages_attended_bucket", "agentctx_context_utilization",
                   "agentctx_generated_tokens_total", "agentctx_context_loads_total", "agentctx_replica_cache_hits",
                   "agentctx_http_in_flight", "agentctx_replica_decode_steps_total",
                   "agentctx_replica_requests_running", "agentctx_replica_requests_waiting"):
        assert needle in text, needle
    assert "/v1/contexts/ctx-" not in text  # route templates only, never raw ids


def test_no_leaked_references(stack):
    """After every test above, no context of either tenant is still held by anyone."""
    ids = stack.rt.store.list_contexts()
    assert ids
    assert stack.wait_no_holders(ids, timeout_s=30) == {}
