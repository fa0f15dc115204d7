#!/usr/bin/env python3
"""Benchmark: wall time to collect from 1, 8, 32 and 64 nodes, beside ClusterShell's clush.

Starts a fake cluster of real OpenSSH sshd instances on loopback (tests/cluster.py: one sshd per
node, stand-in tools printing real captured outputs), then for each size runs

  * gpu-triage's collector fan-out (collectors.remote.collect_nodes: one paramiko connection per
    node, every collector as its own command, concurrency = the node count up to 64), and
  * `clush -w nodeXX -f N` running the same collector commands as one script per node over
    OpenSSH, with the same SSH config.

Targets: 64 nodes within 2x the time of one node, and no slower than the peer. Read the first
with care on a small machine: here every fake node's sshd and its commands run on the same cores
as the collector, so the servers' own work grows with the node count; "client CPU s" is what the
collecting process itself spent.

    python bench/collect_bench.py [--sizes 1,8,32,64] [--runs 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from cluster import SCENARIOS, Cluster, NodeSpec  # noqa: E402

from collectors.registry import collectors  # noqa: E402
from collectors.remote import SSHSettings, collect_nodes  # noqa: E402


def ours(names: list[str], settings: SSHSettings, cols) -> tuple[float, int, float]:
    import resource

    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    res = collect_nodes(names, cols, settings=settings, concurrency=min(64, len(names)))
    wall = time.perf_counter() - start
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    ok = sum(1 for r in res.values() if r.status == "ok")
    return wall, ok, (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)


def clush(names: list[str], config: Path, cols) -> tuple[float, int]:
    script = "; ".join(f"timeout -k 3 {int(c.timeout)} sh -c {shquote(c.command)}" for c in cols)
    nodes = ",".join(names)
    start = time.perf_counter()
    proc = subprocess.run(["clush", "-w", nodes, "-f", str(min(64, len(names))), "-o", f"-F {config}",
                           "-S", "-b", script], capture_output=True, text=True)
    return time.perf_counter() - start, len(names) if proc.returncode == 0 else 0


def shquote(s: str) -> str:
    import shlex

    return shlex.quote(s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,8,32,64")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    cols = [c for c in collectors().values() if c.name != "processes"]  # ps is real, not a capture
    specs = [NodeSpec(f"node{i:02d}", SCENARIOS["healthy"]) for i in range(1, max(sizes) + 1)]
    have_clush = shutil.which("clush") is not None
    with Cluster(specs) as cluster:
        settings = SSHSettings(str(cluster.ssh_config), connect_timeout=10)
        print(f"{len(cols)} collectors per node: {', '.join(c.name for c in cols)}")
        print(f"{'nodes':>5} {'gpu-triage s':>13} {'ok':>4} {'client CPU s':>13} {'clush s':>9} {'ok':>4} "
              f"{'vs 1 node':>10}")
        base = None
        for n in sizes:
            names = [f"node{i:02d}" for i in range(1, n + 1)]
            runs = [ours(names, settings, cols) for _ in range(args.runs)]
            t_ours = statistics.median(r[0] for r in runs)
            ok_ours = min(r[1] for r in runs)
            cpu = statistics.median(r[2] for r in runs)
            if have_clush:
                t_peer = statistics.median(clush(names, cluster.ssh_config, cols)[0] for _ in range(args.runs))
                ok_peer = clush(names, cluster.ssh_config, cols)[1]
            else:
                t_peer, ok_peer = float("nan"), 0
            base = base or t_ours
            print(f"{n:5d} {t_ours:13.2f} {ok_ours:4d} {cpu:13.2f} {t_peer:9.2f} {ok_peer:4d} {t_ours / base:9.2f}x")
    if not have_clush:
        print("clush not found: pip install clustershell to print the peer column")


if __name__ == "__main__":
    main()
