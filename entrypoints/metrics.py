"""Prometheus metrics of the HTTP ingress (``GET /metrics``, text exposition format).

Each ingress replica keeps its own registry; scrape every replica (or run one
ingress replica, the default) for the full picture. Families:

* ``agentctx_http_requests_total{route,method,status}``, ``agentctx_http_request_seconds{route}``,
  ``agentctx_http_in_flight`` — traffic by route template (never the raw path: ids would
  explode the label set) and outcome.
* ``agentctx_ttft_seconds{route}``, ``agentctx_decode_tokens_per_second{route}``,
  ``agentctx_generated_tokens_total{route}`` — generation speed as clients see it.
* ``agentctx_pages_attended{route}``, ``agentctx_context_utilization{route}`` — how much
  of each context a query actually read.
* ``agentctx_context_loads_total{result}`` — ``prefilled`` (a miss: one prefill) vs
  ``reattached`` (a hit: the same document was already loaded) vs ``failed``.
* ``agentctx_context_restores_total{how}`` — contexts rebuilt after a restart or eviction lost
  their pages or blobs (``prefilled`` from the kept document, ``republished`` from a replica's cache).
* ``agentctx_rejections_total{reason}`` — 503s by cause (``busy``, ``store_unavailable``,
  ``replica_unavailable``) and 504s (``timeout``).
* ``agentctx_replica_*{replica}`` — the model replicas' own counters (device-cache
  hits/misses, loads, prefills, cached bytes), requests running and waiting, queue time
  (``agentctx_replica_queue_seconds_total`` / ``agentctx_replica_requests_started_total``),
  refreshed at scrape time from ``info()`` of the replica the scrape reaches;
  ``agentctx_replica_scheduler_{running,waiting}`` are the engine scheduler's admitted and
  waiting requests.
* ``agentctx_time_per_output_token_seconds{route}``, ``agentctx_prompt_tokens_total{route}``
  (prompt + attended document tokens, as ``usage.prompt_tokens``).
* ``agentctx_kv_store_bytes`` / ``_budget_bytes`` / ``_pages``, ``agentctx_kv_store_evictions_total``,
  ``agentctx_kv_store_disk_restores_total`` — the shared store, from its metrics at scrape time.
* ``agentctx_pipeline_runs{state}`` — runs kept by the jobs actor, by state.
"""

from __future__ import annotations

import threading
import time

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["HttpMetrics", "CONTENT_TYPE_LATEST"]

_TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_TPS_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000)
_PAGE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384)
_UTIL_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 0.9, 1.0)
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

_REPLICA_COUNTERS = {"cache_hits": "device-cache hits", "cache_misses": "device-cache misses",
                     "loads": "contexts loaded from the shared store", "prefills": "prefills run",
                     "prefill_tokens": "tokens prefilled",
                     "resumed_tokens": "tokens a resumed prefill took from its checkpoint instead of computing",
                     "requests": "model requests",
                     "generated_tokens": "tokens generated", "errors": "failed model requests",
                     "queue_seconds": "seconds requests waited at the replica before their work started",
                     "requests_started": "requests whose work started (queue_seconds / this = mean queue time)"}
# From info()["decode_batching"]: steps / forwards is the mean number of requests' rows per scheduler step.
_BATCH_COUNTERS = {"forwards": "forwards (steps) run by the scheduler", "steps": "rows those steps carried",
                   "fallbacks": "steps that failed and were re-run row by row"}
# From info()["scheduler"]: admission control.
_SCHED_GAUGES = {"running": "requests the scheduler runs (one row each per step)",
                 "waiting": "requests waiting for admission (rows or KV bytes per step at their bound)"}
_REPLICA_GAUGES = {"cached_contexts": "contexts in the device cache", "cached_bytes": "KV bytes in the device cache",
                   "requests_running": "requests running (generating or scoring)",
                   "requests_waiting": "requests arrived and not started yet"}
_TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_STORE_GAUGES = {"bytes": ("agentctx_kv_store_bytes", "KV bytes in the store's host tier"),
                 "budget_bytes": ("agentctx_kv_store_budget_bytes", "Byte budget of the host tier"),
                 "pages": ("agentctx_kv_store_pages", "Pages in the host tier")}
_STORE_COUNTERS = {"evictions": ("agentctx_kv_store_evictions", "Pages evicted under the byte budget"),
                   "restores": ("agentctx_kv_store_disk_restores", "Pages reloaded from the disk tier")}


class _StoreCollector:
    """The KV store's bytes against its budget and its evictions, from the last scrape's metrics()."""

    def __init__(self) -> None:
        self._last: dict = {}

    def update(self, metrics: dict) -> None:
        host = (metrics.get("tiers") or {}).get("host") or {}
        self._last = {"bytes": host.get("bytes"), "budget_bytes": host.get("budget_bytes"),
                      "pages": host.get("pages"), "evictions": metrics.get("evictions"),
                      "restores": metrics.get("restores")}

    def collect(self):
        last = dict(self._last)
        for key, (name, doc) in _STORE_GAUGES.items():
            fam = GaugeMetricFamily(name, doc)
            if isinstance(last.get(key), (int, float)):
                fam.add_metric([], float(last[key]))
            yield fam
        for key, (name, doc) in _STORE_COUNTERS.items():
            fam = CounterMetricFamily(name, doc)
            if isinstance(last.get(key), (int, float)):
                fam.add_metric([], float(last[key]))
            yield fam


class _ReplicaCollector:
    """Exposes the last ``info()`` seen from each model replica."""

    def __init__(self) -> None:
        self._infos: dict[str, tuple[float, dict]] = {}
        self._lock = threading.Lock()

    def update(self, info: dict) -> None:
        name = str(info.get("replica", "unknown"))
        with self._lock:
            self._infos[name] = (time.time(), dict(info))
            # Forget replicas not heard of for 10 minutes (restarted ones get new names).
            cutoff = time.time() - 600
            for k in [k for k, (t, _) in self._infos.items() if t < cutoff]:
                del self._infos[k]

    def collect(self):
        with self._lock:
            infos = {k: v for k, (_, v) in self._infos.items()}
        batching = {name: b if isinstance(b := info.get("decode_batching"), dict) else {}
                    for name, info in infos.items()}
        for key, doc in _REPLICA_COUNTERS.items():
            yield _family(CounterMetricFamily, f"agentctx_replica_{key}", doc, infos, key)
        for key, doc in _BATCH_COUNTERS.items():
            yield _family(CounterMetricFamily, f"agentctx_replica_decode_{key}", doc, batching, key)
        for key, doc in _REPLICA_GAUGES.items():
            yield _family(GaugeMetricFamily, f"agentctx_replica_{key}", doc, infos, key)
        sched = {name: s if isinstance(s := info.get("scheduler"), dict) else {} for name, info in infos.items()}
        for key, doc in _SCHED_GAUGES.items():
            # Not agentctx_replica_requests_*: those names are the replica's own gauges above, and a
            # second HELP/TYPE for one name makes Prometheus reject the whole page.
            yield _family(GaugeMetricFamily, f"agentctx_replica_scheduler_{key}", doc, sched, key)


def _family(cls, metric: str, doc: str, per_replica: dict[str, dict], key: str):
    """One metric family with a sample per replica whose dict has a number under key."""
    fam = cls(metric, f"Model replica: {doc}", labels=["replica"])
    for name, values in per_replica.items():
        if isinstance(values.get(key), (int, float)):
            fam.add_metric([name], float(values[key]))
    return fam


class HttpMetrics:
    """One registry per ingress replica (never the process-global default registry)."""

    def __init__(self) -> None:
        # No "_created" twin series (process-wide switch; the ingress process exports only these).
        prometheus_client.disable_created_metrics()
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("agentctx_http_requests", "HTTP requests by route template, method and status",
                                ["route", "method", "status"], registry=r)
        self.latency = Histogram("agentctx_http_request_seconds", "HTTP request latency (to the last byte)",
                                 ["route"], buckets=_LATENCY_BUCKETS, registry=r)
        self.in_flight = Gauge("agentctx_http_in_flight", "HTTP requests being served", registry=r)
        self.ttft = Histogram("agentctx_ttft_seconds", "Time to first token of a generation", ["route"],
                              buckets=_TTFT_BUCKETS, registry=r)
        self.tps = Histogram("agentctx_decode_tokens_per_second", "Decode speed of a generation", ["route"],
                             buckets=_TPS_BUCKETS, registry=r)
        self.tokens = Counter("agentctx_generated_tokens", "Tokens generated", ["route"], registry=r)
        self.pages = Histogram("agentctx_pages_attended", "Pages a generation attended to", ["route"],
                               buckets=_PAGE_BUCKETS, registry=r)
        self.utilization = Histogram("agentctx_context_utilization", "Attended share of the context",
                                     ["route"], buckets=_UTIL_BUCKETS, registry=r)
        self.loads = Counter("agentctx_context_loads", "Context uploads by outcome (reattached = cache hit)",
                             ["result"], registry=r)
        self.restores = Counter("agentctx_context_restores", "Contexts rebuilt from their kept document after "
                                "losing pages or blobs (prefilled) or re-published from a replica's cache",
                                ["how"], registry=r)
        self.rejections = Counter("agentctx_rejections", "Requests refused with 503/504 by cause", ["reason"],
                                  registry=r)
        self.replicas = _ReplicaCollector()
        r.register(self.replicas)
        self.store = _StoreCollector()
        r.register(self.store)
        self.tpot = Histogram("agentctx_time_per_output_token_seconds", "Decode time per generated token after "
                              "the first", ["route"], buckets=_TPOT_BUCKETS, registry=r)
        self.prompt_tokens = Counter("agentctx_prompt_tokens", "Prompt tokens read: the prompt's own plus the "
                                     "document tokens attended", ["route"], registry=r)
        self.pipeline_runs = Gauge("agentctx_pipeline_runs", "Pipeline runs kept by the jobs actor, by state",
                                   ["state"], registry=r)

    def observe_generation(self, route: str, result) -> None:
        """Record a serving.types.GenerateResult."""
        self.ttft.labels(route).observe(max(0.0, float(result.ttft_s)))
        n = len(result.token_ids)
        self.tokens.labels(route).inc(n)
        if n > 1 and result.total_s > result.ttft_s:
            self.tps.labels(route).observe((n - 1) / (result.total_s - result.ttft_s))
            self.tpot.labels(route).observe((result.total_s - result.ttft_s) / (n - 1))
        self.prompt_tokens.labels(route).inc(result.prompt_tokens + result.attended_tokens)
        self.pages.labels(route).observe(result.pages_attended)
        if result.context_tokens:
            self.utilization.labels(route).observe(result.attended_tokens / result.context_tokens)

    def set_pipeline_runs(self, counts: dict) -> None:
        """Runs by state (queued, running, succeeded, failed, cancelled), as the jobs actor counts them."""
        for state in ("queued", "running", "succeeded", "failed", "cancelled"):
            self.pipeline_runs.labels(state).set(int(counts.get(state, 0)))

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
