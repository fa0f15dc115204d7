"""Benchmark `gpu-triage diagnose --format json` on the logs people actually have (issue 11).

For each profile of bench/profiles.py (an NCCL_DEBUG=INFO 64-rank torchrun log, Megatron/DeepSpeed
iteration logs, a journalctl kernel log, an error storm, and a folder of 64 per-rank files) it
generates the input under --dir (default: the system's temporary folder; never the repository),
then times, best of --repeat runs, on the same warm file:

  gpu-triage   the whole process: `python -m bot.cli diagnose PATH --format json`, with its peak RSS
               (VmHWM), the largest scan worker's peak RSS (a folder, or a large file read in ranges,
               is prefiltered in worker processes) and whether the answer names the buried failure
               and its rank (or host);
  grep -E -i   `grep -E -i -c 'error|warn|fail|timeout|killed|xid|nccl'` (what an engineer types);
  wc -l        plain `wc -l`.

    python bench/scan_bench.py [--size-mb 1024] [--profiles nccl-info,storm] [--repeat 3] [--keep]

The prefilter engine is printed too: Hyperscan when the `hyperscan` package is installed
(pip install 'gpu-triage[fast]'), else RE2; GPU_TRIAGE_PREFILTER=re2 forces RE2.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

import profiles  # noqa: E402

GREP = "error|warn|fail|timeout|killed|xid|nccl"
CHILD = ("import sys\nfrom bot.cli import main\nrc = main(sys.argv[1:])\n"
         "print(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')), file=sys.stderr)\n"
         "import resource\n"
         "print('WorkerHWM:', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
         "sys.exit(rc)")


def _best(cmd: list[str], repeat: int, **kw) -> tuple[float, subprocess.CompletedProcess]:
    best, proc = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, **kw)
        best = min(best, time.perf_counter() - t)
    return best, proc


def _found(doc: dict, want: dict) -> bool:
    """The buried failure is among the findings, and the first error or the culprit names its rank (or host)."""
    kinds = {f["kind"] for f in doc.get("findings", [])}
    if want["kind"] not in kinds:
        return False
    places = [doc.get("first_error") or {}, doc.get("culprit") or {}]
    if want["rank"] is not None:
        return any(p.get("rank") == want["rank"] for p in places)
    return any(p.get("node") == want["node"] for p in places)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--profiles", default=",".join(profiles.EXPECT))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "gpu-triage-scan-bench"))
    ap.add_argument("--keep", action="store_true", help="keep the generated inputs")
    args = ap.parse_args()
    names = [p for p in args.profiles.split(",") if p]
    bad = [p for p in names if p not in profiles.EXPECT]
    if bad:
        ap.error(f"unknown profile(s) {', '.join(bad)}; choose from {', '.join(profiles.EXPECT)}")
    os.makedirs(args.dir, exist_ok=True)
    from collectors.trainlog import _compile_prefilter

    engine = _compile_prefilter(()).engine
    data_dir = tempfile.mkdtemp(prefix="gpu-triage-bench-data-")
    env = {**os.environ, "GPU_TRIAGE_DATA_DIR": data_dir, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    # build the knowledge database once, outside the timings
    subprocess.run([sys.executable, "-m", "bot.cli", "kb", "list"], capture_output=True, env=env, cwd=ROOT)
    print(f"prefilter: {engine}; {os.cpu_count()} CPUs; best of {args.repeat}; {args.size_mb} MB per profile\n")
    print(f"{'profile':<11}{'MB':>6}{'lines':>11}{'gpu-triage s':>13}{'peak MB':>8}{'worker MB':>10}"
          f"{'grep -E -i s':>13}{'wc -l s':>9}{'x grep':>8}  buried failure named")
    for name in names:
        path = os.path.join(args.dir, f"{name}-{args.size_mb}mb" + ("" if name == "folder" else ".log"))
        if not os.path.exists(path):
            t = time.perf_counter()
            profiles.generate(name, path, args.size_mb)
            print(f"  (generated {path} in {time.perf_counter() - t:.0f}s)", file=sys.stderr)
        files = ([os.path.join(path, f) for f in sorted(os.listdir(path))] if os.path.isdir(path) else [path])
        size = sum(os.path.getsize(f) for f in files)
        subprocess.run(["cat", *files], stdout=subprocess.DEVNULL)  # warm the page cache
        grep_s, g = _best(["grep", "-E", "-i", "-c", GREP, *files], args.repeat)
        wc_s, w = _best(["wc", "-l", *files], args.repeat)
        lines = int(w.stdout.split()[-2 if len(files) > 1 else 0])
        ours_s, p = _best([sys.executable, "-c", CHILD, "diagnose", path, "--format", "json"], args.repeat,
                          env=env, cwd=ROOT)
        if p.returncode:
            print(f"{name}: gpu-triage failed ({p.returncode}): {p.stderr.decode()[-500:]}")
            continue
        hwm = [ln for ln in p.stderr.decode().splitlines() if ln.startswith("VmHWM")]
        peak = int(hwm[-1].split()[1]) / 1024 if hwm else float("nan")
        # the scan's worker processes (a folder, or a large file read in ranges): the largest one's peak
        whwm = [ln for ln in p.stderr.decode().splitlines() if ln.startswith("WorkerHWM:")]
        wpeak = int(whwm[-1].split()[1]) / 1024 if whwm else 0.0
        ok = _found(json.loads(p.stdout), profiles.EXPECT[name])
        want = profiles.EXPECT[name]
        what = f"{want['kind']} at {'rank ' + str(want['rank']) if want['rank'] is not None else want['node']}"
        print(f"{name:<11}{size / 2 ** 20:>6.0f}{lines:>11}{ours_s:>13.2f}{peak:>8.0f}{wpeak:>10.0f}"
              f"{grep_s:>13.2f}{wc_s:>9.2f}"
              f"{ours_s / grep_s:>8.2f}  {'yes' if ok else 'NO'} ({what})")
        if not args.keep:
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    shutil.rmtree(data_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
