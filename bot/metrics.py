"""A few process-wide counters, one histogram and one gauge in the Prometheus text format; no
dependencies.

Incremented at one seam each: the engine (diagnoses by category, latency), bot.investigate
(nodes collected by status, SSH failures by reason), the Slack listeners' client (Web API
errors), the Socket Mode client (connected or not: the gauge, and a health check).
``render()`` is what ``/metrics`` serves (text format 0.0.4); ``health()`` what ``/healthz`` says.
"""

from __future__ import annotations

import threading
import time
from typing import Iterable

_lock = threading.Lock()
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

# name -> (type, help)
_META = {
    "gpu_triage_diagnoses_total": ("counter", "Diagnoses made, by the category of the top cause (none: no confident cause)."),
    "gpu_triage_diagnosis_seconds": ("histogram", "Time to produce a diagnosis from parsed evidence, seconds."),
    "gpu_triage_nodes_collected_total": ("counter", "Nodes collected from, by status (ok, partial, unreachable, auth-failed, timeout)."),
    "gpu_triage_ssh_failures_total": ("counter", "Nodes that could not be collected over SSH, by reason."),
    "gpu_triage_slack_api_errors_total": ("counter", "Slack Web API calls that failed, by method and error code."),
    "gpu_triage_preflight_nodes_total": ("counter", "Nodes checked by preflight, by severity."),
    "gpu_triage_socket_connected": ("gauge", "1 while the bot holds an open Socket Mode connection to Slack, else 0 "
                                             "(absent in HTTP mode)."),
}
_counters: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
_hist: dict[str, dict[str, list[float]]] = {}  # name -> {"buckets": counts..., "sum": [s], "count": [n]}
_gauges: dict[str, float] = {}
_checks: dict[str, tuple[bool, str, float]] = {}  # health check -> (ok, detail, time.time() of the change)


def _key(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, str(v)) for k, v in labels.items()))


def inc(name: str, amount: float = 1.0, **labels: str) -> None:
    with _lock:
        series = _counters.setdefault(name, {})
        k = _key(labels)
        series[k] = series.get(k, 0.0) + amount


def observe(name: str, value: float, buckets: Iterable[float] = LATENCY_BUCKETS) -> None:
    with _lock:
        h = _hist.setdefault(name, {"le": list(buckets), "counts": [0.0] * len(tuple(buckets)), "sum": [0.0],
                                    "count": [0.0]})
        for i, le in enumerate(h["le"]):
            if value <= le:
                h["counts"][i] += 1
        h["sum"][0] += value
        h["count"][0] += 1


def value(name: str, **labels: str) -> float:
    with _lock:
        if name in _gauges and not labels:
            return _gauges[name]
        return _counters.get(name, {}).get(_key(labels), 0.0)


def set_gauge(name: str, v: float) -> None:
    with _lock:
        _gauges[name] = float(v)


def set_health(check: str, ok: bool, detail: str, since: float | None = None) -> None:
    """Record one health check's state; ``/healthz`` fails while any check is not ok."""
    with _lock:
        _checks[check] = (ok, detail, time.time() if since is None else since)


def health() -> tuple[bool, str]:
    """(healthy, one line per check); healthy with no checks (nothing to watch)."""
    now = time.time()
    with _lock:
        checks = sorted(_checks.items())
    if not checks:
        return True, "ok"
    lines = [f"{name}: {'ok' if ok else 'FAILING'} for {max(0, int(now - since))} s: {detail}"
             for name, (ok, detail, since) in checks]
    healthy = all(state[0] for _, state in checks)
    return healthy, ("ok\n" if healthy else "unhealthy\n") + "\n".join(lines)


def reset() -> None:
    with _lock:
        _counters.clear()
        _hist.clear()
        _gauges.clear()
        _checks.clear()


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(key: tuple[tuple[str, str], ...], extra: str = "") -> str:
    parts = [f'{k}="{_esc(v)}"' for k, v in key]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(v)


def render() -> str:
    lines: list[str] = []
    with _lock:
        for name, (kind, help_) in _META.items():
            lines.append(f"# HELP {name} {help_}")
            lines.append(f"# TYPE {name} {kind}")
            if kind == "histogram":
                h = _hist.get(name) or {"le": list(LATENCY_BUCKETS), "counts": [0.0] * len(LATENCY_BUCKETS),
                                        "sum": [0.0], "count": [0.0]}
                for le, count in zip(h["le"], h["counts"]):
                    lines.append(f'{name}_bucket{{le="{_num(float(le))}"}} {_num(count)}')
                lines.append(f'{name}_bucket{{le="+Inf"}} {_num(h["count"][0])}')
                lines.append(f"{name}_sum {_num(h['sum'][0])}")
                lines.append(f"{name}_count {_num(h['count'][0])}")
                continue
            if kind == "gauge":
                if name in _gauges:
                    lines.append(f"{name} {_num(_gauges[name])}")
                continue
            for key, v in sorted(_counters.get(name, {}).items()):
                lines.append(f"{name}{_labels(key)} {_num(v)}")
    return "\n".join(lines) + "\n"


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def serve(host: str, port: int):
    """A small threaded HTTP server with /metrics and /healthz (Socket Mode has no HTTP server):
    /healthz answers 200 while every health check is ok, 503 with the failing one named otherwise."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                body, ctype, status = render().encode(), CONTENT_TYPE, 200
            elif path == "/healthz":
                healthy, text = health()
                body, ctype, status = (text.rstrip("\n") + "\n").encode(), "text/plain; charset=utf-8", \
                    200 if healthy else 503
            else:
                body, ctype, status = b"not found\n", "text/plain", 404
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    class Server(ThreadingHTTPServer):
        daemon_threads = True

    server = Server((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="gpu-triage-metrics", daemon=True).start()
    return server
