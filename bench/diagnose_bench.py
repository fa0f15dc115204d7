#!/usr/bin/env python3
"""Benchmark: in-process diagnose of a Slack-sized paste, and CLI start-up.

(a) diagnose time for a 40 000-character paste (Slack's message limit) with 500+ entries in the
    base (the shipped entries cloned under new ids), median of N runs; target < 100 ms. Beside it,
    `grep -E -i -f` with every signature over the same paste.
(c) `gpu-triage --help` wall time, median of N runs; target < 300 ms. Beside it, `python -c pass`.

    python bench/diagnose_bench.py [--runs 20] [--entries 500]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.engine import Engine  # noqa: E402
from knowledge.loader import entries_dir, entry_files  # noqa: E402


def cloned_entries(dest: Path, target: int) -> int:
    """Copy the shipped entries, then clone them under new ids until there are ``target``."""
    shutil.copytree(entries_dir(), dest)
    files = entry_files(dest)
    count, k = len(files), 0
    while count < target:
        k += 1
        for f in files:
            if count >= target:
                break
            new_id = f"{f.stem}-clone{k}"
            text = f.read_text(encoding="utf-8").replace(f"id: {f.stem}", f"id: {new_id}", 1)
            (f.parent / f"{new_id}.yaml").write_text(text, encoding="utf-8")
            count += 1
    return count


def paste(limit: int = 40_000) -> str:
    """Real corpus logs concatenated up to Slack's message limit."""
    text = ""
    for f in sorted((ROOT / "tests" / "corpus").rglob("*.log")):
        text += f.read_text(encoding="utf-8", errors="replace") + "\n"
        if len(text) >= limit:
            break
    return text[:limit]


def median_ms(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--entries", type=int, default=500)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        n = cloned_entries(tmp / "entries", args.entries)
        t0 = time.perf_counter()
        engine = Engine(data_dir=str(tmp / "data"), entries=tmp / "entries")
        build = time.perf_counter() - t0
        t0 = time.perf_counter()
        Engine(data_dir=str(tmp / "data"), entries=tmp / "entries")
        warm = time.perf_counter() - t0
        text = paste()
        engine.diagnose_text(text)  # warm-up
        ours = median_ms(lambda: engine.diagnose_text(text), args.runs)
        result = engine.diagnose_text(text)

        sigs = tmp / "sigs.txt"
        sigs.write_text("\n".join(s for e in engine.matcher.entries for s in e.signatures) + "\n")
        (tmp / "paste.txt").write_text(text)
        grep = shutil.which("grep")
        grep_ms = median_ms(lambda: subprocess.run([grep, "-E", "-i", "-c", "-f", str(sigs), str(tmp / "paste.txt")],
                                                   capture_output=True), max(3, args.runs // 4)) if grep else None

    exe = shutil.which("gpu-triage")
    cmd = [exe, "--help"] if exe else [sys.executable, "-m", "bot.cli", "--help"]
    help_ms = median_ms(lambda: subprocess.run(cmd, capture_output=True, check=True), args.runs)
    py_ms = median_ms(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), args.runs)

    print(f"(a) diagnose a {len(text):,}-character paste, {n} entries, {len(text.splitlines())} lines")
    print(f"    gpu-triage (in-process, median of {args.runs}) : {ours:8.1f} ms   target < 100 ms")
    if grep_ms is not None:
        print(f"    grep -E -i -f <all signatures> (process)   : {grep_ms:8.1f} ms   (peer: signatures only)")
    print(f"    top cause: {result.causes[0].id if result.causes else 'none'}; "
          f"store build {build * 1000:.0f} ms first time, open {warm * 1000:.0f} ms after")
    print("(c) start-up")
    print(f"    gpu-triage --help (median of {args.runs})     : {help_ms:8.1f} ms   target < 300 ms")
    print(f"    python -c pass                              : {py_ms:8.1f} ms   (peer: the interpreter alone)")


if __name__ == "__main__":
    main()
