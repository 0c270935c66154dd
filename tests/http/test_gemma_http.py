"""The HTTP API over the real Gemma 3 270M (CPU): a question about the bundled contract, streamed
and through the OpenAI client. Slow (model load, a 5.5K-token prefill)."""

from __future__ import annotations

import json

import pytest

from agentctx.entrypoints.cli import SAMPLE_CONTRACT
from tests._stack import KEY_A, free_port, running_stack, sse_events

pytestmark = [pytest.mark.model, pytest.mark.slow, pytest.mark.ray, pytest.mark.redis]


@pytest.fixture(scope="module")
def stack(ray_local, redis_url):
    from agentctx.config import AgentctxConfig

    cfg = AgentctxConfig.model_validate({
        "store": {"redis_url": redis_url, "namespace": f"gemma-http-{free_port()}"},
        "serve": {"port": free_port(), "api_keys": {KEY_A: "acme"}},
    })
    with running_stack(cfg) as s:
        yield s


def test_query_and_openai_over_the_real_model(stack):
    import openai

    a = stack.client(KEY_A, timeout=600)
    r = a.post("/v1/contexts", json={"text": SAMPLE_CONTRACT.read_text()})
    assert r.status_code in (200, 201), r.text
    cid = r.json()["id"]
    q = a.post(f"/v1/contexts/{cid}/query",
               json={"question": "How many days of notice are needed to terminate?", "max_new_tokens": 24})
    assert q.status_code == 200, q.text
    body = q.json()
    assert body["answer"].strip() and body["utilization"] < 1.0
    with a.stream("POST", f"/v1/contexts/{cid}/query",
                  json={"question": "How many days of notice are needed to terminate?", "max_new_tokens": 24,
                        "stream": True}) as s:
        events = sse_events(s.iter_lines())
    assert json.loads(events[-1][1])["answer"] == body["answer"]

    client = openai.OpenAI(base_url=stack.url + "/v1", api_key=KEY_A, max_retries=0, timeout=600)
    model = client.models.list().data[0].id
    chat = client.chat.completions.create(model=model, temperature=0, max_tokens=24,
                                          messages=[{"role": "user", "content": "Who are the parties?"}],
                                          extra_body={"context_id": cid})
    assert chat.choices[0].message.content.strip()
