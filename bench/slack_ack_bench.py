#!/usr/bin/env python3
"""Benchmark: acknowledgement latency of concurrent /diagnose commands against the HTTP app.

Starts the real Bolt app in HTTP mode (signature verification on) with its Web API pointed at the
loopback fake Slack API of the tests, then fires N signed slash commands at once, each carrying a
real pasted log, so that diagnoses run in the worker pool while the later commands arrive. Prints
the latency from sending each request to receiving Slack's 200 (the ack), and how long until every
diagnosis was answered. Slack gives up on an app after 3 s; target: p99 well under that.

    python bench/slack_ack_bench.py [--commands 50]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from slack_fakes import BOT_TOKEN, FakeSlackAPI, signed_headers, slash_body  # noqa: E402

from bot.engine import Engine  # noqa: E402
from bot.slack.app import create_app  # noqa: E402
from bot.slack.config import SlackConfig  # noqa: E402
from bot.slack.http import make_server, serve_in_thread  # noqa: E402

SECRET = "bench-signing-secret"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commands", type=int, default=50)
    args = ap.parse_args()
    logs = sorted((ROOT / "tests" / "corpus").rglob("*.log"))
    with tempfile.TemporaryDirectory() as tmp, FakeSlackAPI() as api:
        env = {"SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_URL": api.url,
               "GPU_TRIAGE_DATA_DIR": tmp}
        cfg = SlackConfig.from_env(env, http=True)
        app, ctx = create_app(cfg, engine=Engine(data_dir=tmp), http=True)
        server = make_server(app, "127.0.0.1", 0)
        serve_in_thread(server)
        url = f"http://127.0.0.1:{server.server_address[1]}/slack/events"
        latencies: list[float] = []
        errors: list[str] = []
        lock = threading.Lock()
        barrier = threading.Barrier(args.commands)

        def one(i: int) -> None:
            text = logs[i % len(logs)].read_text(encoding="utf-8", errors="replace")[:20000]
            body = slash_body(text=text, user_id=f"U{i:03d}", channel_id="CBENCH", response_url=api.response_url(i))
            req = urllib.request.Request(url, data=body, headers=signed_headers(SECRET, body), method="POST")
            barrier.wait()
            start = time.perf_counter()
            try:
                with urllib.request.urlopen(req, timeout=30) as resp:
                    resp.read()
                    ok = resp.status == 200
            except Exception as exc:  # noqa: BLE001 - counted and printed
                ok = False
                with lock:
                    errors.append(str(exc))
            with lock:
                if ok:
                    latencies.append(time.perf_counter() - start)

        started = time.perf_counter()
        threads = [threading.Thread(target=one, args=(i,)) for i in range(args.commands)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        acked = time.perf_counter() - started
        deadline = time.time() + 120
        while time.time() < deadline and sum(c.method.startswith("response.") for c in api.calls()) < args.commands:
            time.sleep(0.05)
        answered = time.perf_counter() - started
        replies = sum(c.method.startswith("response.") for c in api.calls())
        server.shutdown()
        ctx.pool.shutdown(wait=True)
    lat = sorted(latencies)
    q = statistics.quantiles(lat, n=100) if len(lat) >= 2 else lat * 99
    print(f"{args.commands} concurrent signed /diagnose commands with pasted logs (HTTP mode, "
          f"{cfg.workers} workers)")
    print(f"  acked: {len(lat)}/{args.commands}   errors: {len(errors)}")
    print(f"  ack latency  p50 {q[49] * 1000:7.1f} ms   p90 {q[89] * 1000:7.1f} ms   p99 {q[98] * 1000:7.1f} ms   "
          f"max {lat[-1] * 1000:7.1f} ms   (Slack's limit: 3000 ms)")
    print(f"  all acked after {acked:.2f} s; {replies} diagnoses answered after {answered:.2f} s")


if __name__ == "__main__":
    main()
