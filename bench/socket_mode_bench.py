#!/usr/bin/env python3
"""Benchmark: how each Socket Mode adapter rides out Slack's routine reconnects (issue 16).

The real Bolt app (``bot.slack.app.create_app``) is connected in Socket Mode to the loopback
WebSocket stand-in of the tests (``tests/slack_fakes.FakeSocketMode``, real frames), its URL handed
out by the loopback Web API's apps.connections.open. For each adapter and each case the stand-in
ends the connection or asks the client to reconnect, then sends an ``app_home_opened`` event the
moment the new connection's ``hello`` is out. Printed per case: seconds until the client is
connected again, seconds until that event was acked (Slack's deadline is 3 s), and the process's
CPU use (user + system, all threads, the stand-ins included) from the cut until the ack, over at
least 10 s.

Cases: ``fin`` (the TCP connection closed without a close frame), ``reset`` (TCP RST), ``stall``
(a black hole: nothing read or sent), and ``disconnect`` envelopes with the reasons
``refresh_requested``, ``link_disabled`` and ``warning``. A final line gives the idle CPU over a
quiet window.

    python bench/socket_mode_bench.py [--adapters gpu-triage,builtin,...] [--cases fin,...] [--cap 70]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from slack_fakes import (APP_TOKEN, BOT_TOKEN, FakeSlackAPI, FakeSocketMode,  # noqa: E402
                         app_home_opened_event)

WINDOW = 10.0   # CPU is measured from the cut over at least this many seconds
CASES = ("fin", "reset", "stall", "refresh_requested", "link_disabled", "warning")


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _sdk_handler(kind: str, app, api_url: str, ping_interval: float | None = None):
    """Start one of slack_bolt's adapters; returns (close, is_connected)."""
    if kind in ("builtin", "builtin-tuned"):
        from slack_bolt.adapter.socket_mode.builtin import SocketModeHandler

        kw = {"ping_interval": ping_interval} if ping_interval else {}
        handler = SocketModeHandler(app, APP_TOKEN, web_client=app.client, **kw)
        handler.connect()
        return handler.close, handler.client.is_connected
    if kind == "websocket-client":
        from slack_bolt.adapter.socket_mode.websocket_client import SocketModeHandler

        handler = SocketModeHandler(app, APP_TOKEN)
        handler.client.web_client = app.client
        handler.connect()
        return handler.close, handler.client.is_connected
    if kind == "aiohttp":
        from slack_bolt.adapter.socket_mode.aiohttp import SocketModeHandler
        from slack_sdk.web.async_client import AsyncWebClient

        loop = asyncio.new_event_loop()
        threading.Thread(target=loop.run_forever, name="bench-aiohttp", daemon=True).start()

        async def make():
            h = SocketModeHandler(app, APP_TOKEN, web_client=AsyncWebClient(token=BOT_TOKEN, base_url=api_url))
            await h.connect_async()
            return h

        handler = asyncio.run_coroutine_threadsafe(make(), loop).result(20)

        def close() -> None:
            asyncio.run_coroutine_threadsafe(handler.close_async(), loop).result(20)
            loop.call_soon_threadsafe(loop.stop)

        return close, lambda: True
    if kind == "gpu-triage":
        from bot.slack.socket_mode import SocketModeHandler

        handler = SocketModeHandler(app, APP_TOKEN, web_client=app.client).connect()
        return handler.close, handler.client.is_connected
    raise SystemExit(f"unknown adapter {kind!r}")


def run_case(kind: str, case: str, cap: float, engine_dir: str) -> dict:
    from bot.engine import Engine
    from bot.slack.app import create_app
    from bot.slack.config import SlackConfig

    with FakeSlackAPI() as api, FakeSocketMode(ping_interval=None) as server:
        server.attach(api)
        env = {"SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_APP_TOKEN": APP_TOKEN, "SLACK_API_URL": api.url,
               "GPU_TRIAGE_DATA_DIR": engine_dir}
        app, ctx = create_app(SlackConfig.from_env(env), engine=Engine(data_dir=engine_dir))
        close, _ = _sdk_handler(kind, app, api.url, ping_interval=1 if kind == "builtin-tuned" else None)
        out = {"adapter": kind, "case": case}
        try:
            server.wait_connected(1, timeout=20)
            server.wait_ack(server.send_event(app_home_opened_event()), timeout=20)
            time.sleep(1)
            before = server.connects
            t0, c0 = time.monotonic(), _cpu()
            if case in ("fin", "reset", "stall"):
                server.drop(case)
            else:
                server.send_disconnect(case)
            try:
                server.wait_connected(before + 1, timeout=cap)
                out["reconnect_s"] = server.hello_times()[-1] - t0
                ack = server.wait_ack(server.send_event(app_home_opened_event()), timeout=cap)
                out["ack_s"] = ack.seconds
            except TimeoutError:
                out.setdefault("reconnect_s", None)
                out.setdefault("ack_s", None)
            time.sleep(max(0.0, t0 + WINDOW - time.monotonic()))
            t1, c1 = time.monotonic(), _cpu()
            out["cpu_pct"] = 100 * (c1 - c0) / (t1 - t0)
            if case == CASES[-1] or case == "idle":
                time.sleep(1)
                t0, c0 = time.monotonic(), _cpu()
                time.sleep(5)
                out["idle_cpu_pct"] = 100 * (_cpu() - c0) / (time.monotonic() - t0)
        finally:
            close()
            ctx.pool.shutdown(wait=False, cancel_futures=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--adapters", default="gpu-triage,builtin,builtin-tuned,websocket-client,aiohttp")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--cap", type=float, default=70, help="seconds to wait for a reconnect or an ack")
    args = ap.parse_args()
    logging.basicConfig(level=logging.CRITICAL)
    print(f"{'adapter':18} {'case':18} {'reconnect s':>11} {'ack s':>7} {'CPU %':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.adapters.split(","):
            for case in args.cases.split(","):
                try:
                    r = run_case(kind, case, args.cap, tmp)
                except ImportError as exc:   # websocket-client and aiohttp are not dependencies
                    print(f"{kind:18} not installed ({exc.name}): pip install {exc.name}")
                    break
                fmt = lambda v: f"> {args.cap:.0f}" if v is None else f"{v:.2f}"  # noqa: E731
                print(f"{kind:18} {case:18} {fmt(r['reconnect_s']):>11} {fmt(r['ack_s']):>7} {r['cpu_pct']:6.0f}"
                      + (f"   idle CPU {r['idle_cpu_pct']:.1f} %" if "idle_cpu_pct" in r else ""), flush=True)


if __name__ == "__main__":
    main()
