"""deploy/: the agentctx config, the Serve config and the KubeRay manifest load and validate,
and the Serve config deploys (through the controller, as ``serve deploy`` does) and serves /healthz."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
import yaml

from agentctx.config import AgentctxConfig, load_config
from agentctx.entrypoints.auth import ApiKeyAuth

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


@pytest.fixture
def api_key_env(monkeypatch):
    monkeypatch.setenv("AGENTCTX_API_KEY", "local-test-key-0123456789")
    monkeypatch.setenv("AGENTCTX_API_KEY_ACME", "acme-test-key-0123456789")
    monkeypatch.setenv("AGENTCTX_API_KEY_GLOBEX", "globex-test-key-0123456789")


def test_agentctx_yaml_validates(api_key_env):
    cfg = load_config(DEPLOY / "agentctx.yaml")
    assert cfg.store.redis_url == "redis://127.0.0.1:6379/0" and cfg.serve.port == 8000
    assert cfg.retrieval.page_size_tokens == cfg.model.page_size
    auth = ApiKeyAuth(cfg.serve.api_keys)
    assert auth.enabled and auth.tenant_for("Bearer local-test-key-0123456789") == "default"
    assert auth.tenant_for("Bearer nope") is None


def test_missing_env_key_fails_fast(monkeypatch):
    monkeypatch.delenv("AGENTCTX_API_KEY", raising=False)
    cfg = load_config(DEPLOY / "agentctx.yaml")
    with pytest.raises(ValueError, match="AGENTCTX_API_KEY"):
        ApiKeyAuth(cfg.serve.api_keys)


def test_serve_yaml_validates_and_builds(api_key_env, monkeypatch):
    from ray._common.utils import import_attr
    from ray.serve.schema import ServeDeploySchema

    raw = yaml.safe_load((DEPLOY / "serve.yaml").read_text())
    schema = ServeDeploySchema.model_validate(raw)
    (app,) = schema.applications
    assert app.import_path == "agentctx.entrypoints.http.app:app_builder"
    assert {d.name for d in app.deployments} == {"HttpIngress", "ModelReplica"}
    assert (ROOT / app.args["config"]).is_file()
    monkeypatch.chdir(ROOT)  # serve run is started from the repository root
    built = import_attr(app.import_path)(app.args)
    from ray.serve._private.build_app import build_app

    names = {d.name for d in build_app(built, name=app.name).deployments}
    assert names == {"HttpIngress", "ModelReplica"}


def test_kuberay_manifest_validates():
    from ray.serve.schema import ServeDeploySchema

    docs = [d for d in yaml.safe_load_all((DEPLOY / "kuberay-rayservice.yaml").read_text()) if d]
    (svc,) = [d for d in docs if d.get("kind") == "RayService"]
    assert svc["apiVersion"] == "ray.io/v1"
    serve_cfg = ServeDeploySchema.model_validate(yaml.safe_load(svc["spec"]["serveConfigV2"]))
    (app,) = serve_cfg.applications
    assert app.import_path == "agentctx.entrypoints.http.app:app_builder"
    cfg = AgentctxConfig.model_validate(app.args["agentctx"])
    assert cfg.serve.num_gpus_per_replica == 1 and cfg.store.redis_url.startswith("redis://agentctx-redis")
    # Every env: key the config reads is provided by the Secret the pods load.
    (secret,) = [d for d in docs if d.get("kind") == "Secret"]
    wanted = {k[4:] for k in cfg.serve.api_keys if k.startswith("env:")}
    assert wanted and wanted <= set(secret["stringData"])
    cluster = svc["spec"]["rayClusterConfig"]
    pods = [cluster["headGroupSpec"]["template"]] + [g["template"] for g in cluster["workerGroupSpecs"]]
    for pod in pods:
        (container,) = pod["spec"]["containers"]
        assert {"secretRef": {"name": secret["metadata"]["name"]}} in container["envFrom"]
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 8000}
    gpu = cluster["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert gpu["nvidia.com/gpu"] == 1
    assert {d["kind"] for d in docs} == {"Secret", "StatefulSet", "Service", "RayService"}


@pytest.mark.ray
@pytest.mark.redis
def test_serve_yaml_deploys_and_serves_healthz(ray_local, redis_url, tiny_ckpt):
    """deploy/serve.yaml as the controller deploys it, with the tiny model and a test Redis namespace."""
    import ray
    from ray import serve
    from ray.serve.context import _get_global_client
    from ray.serve.schema import ServeDeploySchema

    from tests._stack import KEY_A, tiny_config

    raw = yaml.safe_load((DEPLOY / "serve.yaml").read_text())
    cfg = tiny_config(tiny_ckpt, redis_url)
    port = cfg.serve.port
    raw["http_options"]["port"] = port
    (app,) = raw["applications"]
    app["args"] = {"agentctx": cfg.model_dump(mode="json")}
    schema = ServeDeploySchema.model_validate(raw)
    serve.shutdown()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        _get_global_client().deploy_apps(schema, _blocking=True)
        deadline = time.monotonic() + 120
        while True:
            status = serve.status().applications.get("agentctx")
            if status is not None and status.status == "RUNNING":
                break
            assert status is None or status.status != "DEPLOY_FAILED", status
            assert time.monotonic() < deadline, status
            time.sleep(0.5)
        url = f"http://127.0.0.1:{port}"
        assert httpx.get(url + "/healthz", timeout=10).json() == {"status": "ok"}
        assert httpx.get(url + "/v1/models", timeout=10).status_code == 401
        r = httpx.get(url + "/v1/models", headers={"Authorization": f"Bearer {KEY_A}"}, timeout=30)
        assert r.status_code == 200 and r.json()["data"][0]["id"].startswith("local:")
        r = httpx.post(url + "/v1/contexts", headers={"Authorization": f"Bearer {KEY_A}"}, timeout=60,
                       json={"text": "A short agreement. It ends on notice."})
        assert r.status_code == 201, r.text
    finally:
        serve.shutdown()
        from agentctx.entrypoints.http.jobs import JOBS_ACTOR
        from agentctx.kv_store.store import ACTOR_NAME
        from agentctx.runtime import RETRIEVAL_ACTOR

        for name in (JOBS_ACTOR, RETRIEVAL_ACTOR, ACTOR_NAME):
            try:
                ray.kill(ray.get_actor(name, namespace=cfg.store.namespace), no_restart=True)
            except ValueError:
                pass
