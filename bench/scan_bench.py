"""Benchmark the training-log scanner against `grep -E -i -c` on a large synthetic log.

Generates a multi-rank torchrun log (NCCL INFO chatter, training-step lines, the odd
warning) with one buried failure at ~70%: a CUDA OOM traceback on one rank and an XID line
from the kernel log pasted in.  Then times

  (a) collectors.trainlog.parse_paths on it, in a child process, with its peak RSS;
  (b) grep -E -i -c with the same signatures (collectors.trainlog.signature_fragments).

Usage:  python bench/scan_bench.py [--size-mb 1024] [--out bench/out] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from collectors.trainlog import signature_fragments  # noqa: E402

RANKS = 16
HOSTS = ["gpu07", "gpu08"]
OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 5 has a total "
       "capacity of 79.15 GiB of which 1.20 GiB is free. Process 48213 has 77.90 GiB memory in use. Of the "
       "allocated memory 71.30 GiB is allocated by PyTorch, and 5.10 GiB is reserved by PyTorch but "
       "unallocated. If reserved but unallocated memory is large try setting "
       "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")
XID = "[Tue Aug 13 04:12:09 2024] NVRM: Xid (PCI:0000:9b:00): 79, pid=48213, name=pt_main_thread, GPU has fallen off the bus."


def _block(rng: random.Random, step: int, n: int) -> tuple[str, int]:
    out = []
    for _ in range(n):
        r = rng.randrange(RANKS)
        host = HOSTS[r // 8]
        x = rng.random()
        if x < 0.55:
            out.append(f"[rank{r}]:[2024-08-13 03:{(step // 60) % 60:02d}:{step % 60:02d},{rng.randrange(1000):03d}] "
                       f"INFO train.py:211 step {step} | loss {2 + rng.random():.4f} | lr 3.0e-04 | "
                       f"grad_norm {rng.random():.3f} | tokens/s {rng.randrange(90000, 120000)}")
            if r == 0:
                step += 1
        elif x < 0.97:
            ch = rng.randrange(32)
            out.append(f"{host}:{48000 + r}:{48100 + r} [{r % 8}] NCCL INFO Channel {ch:02d}/32 : "
                       f"{r}[{r % 8}] -> {(r + 1) % RANKS}[{(r + 1) % 8}] via P2P/IPC/read")
        elif x < 0.9999:
            out.append(f"[rank{r}]: dataloader: prefetched {rng.randrange(64)} batches, queue depth "
                       f"{rng.randrange(8)}, shard {rng.randrange(4096):04d}.bin")
        else:
            out.append(f"[rank{r}]:/opt/conda/lib/python3.10/site-packages/torch/utils/checkpoint.py:90: "
                       f"UserWarning: None of the inputs have requires_grad=True. Gradients will be None")
    return "\n".join(out) + "\n", step


def generate(path: str, size_mb: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    target = size_mb * 1024 * 1024
    written, step, buried = 0, 0, False
    with open(path, "w") as fh:
        fh.write("NCCL version 2.18.3+cuda12.2\n")
        for r in range(RANKS):
            fh.write(f"{HOSTS[r // 8]}:{48000 + r}:{48100 + r} [{r % 8}] NCCL INFO comm 0x55d1 rank {r} "
                     f"nranks {RANKS} cudaDev {r % 8} busId 1b000 commId 0x9d3e - Init COMPLETE\n")
        while written < target:
            text, step = _block(rng, step, 5000)
            fh.write(text)
            written += len(text)
            if not buried and written >= target * 0.7:
                fh.write(XID + "\n")
                fh.write("[rank5]: Traceback (most recent call last):\n")
                fh.write('[rank5]:   File "/workspace/train.py", line 311, in <module>\n')
                fh.write("[rank5]:     loss.backward()\n")
                fh.write(f"[rank5]: {OOM}\n")
                buried = True


CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from collectors.trainlog import parse_paths
t = time.perf_counter()
r = parse_paths([sys.argv[2]])
dt = time.perf_counter() - t
kinds = sorted({f.kind for f in r.findings})
print(json.dumps({"seconds": dt, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "kinds": kinds, "lines": len(r.lines), "first_error": r.first_error.line if r.first_error else None,
                  "lines_read": r.lines_read}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out"))
    ap.add_argument("--keep", action="store_true", help="keep the generated log")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"torchrun-{args.size_mb}mb.log")
    if not os.path.exists(path) or os.path.getsize(path) < args.size_mb * 1024 * 1024:
        t = time.perf_counter()
        generate(path, args.size_mb)
        print(f"generated {path} in {time.perf_counter() - t:.1f}s", file=sys.stderr)
    size = os.path.getsize(path)
    pattern = "|".join(signature_fragments())
    subprocess.run(["grep", "-E", "-i", "-c", pattern, path], capture_output=True)  # warm the page cache

    t = time.perf_counter()
    g = subprocess.run(["grep", "-E", "-i", "-c", pattern, path], capture_output=True, text=True)
    grep_s = time.perf_counter() - t

    p = subprocess.run([sys.executable, "-c", CHILD, ROOT, path], capture_output=True, text=True)
    if p.returncode:
        sys.exit(p.stderr)
    ours = json.loads(p.stdout)
    found = "cuda-oom" in ours["kinds"] and "xid" in ours["kinds"]
    mb = size / 1024 / 1024
    print(f"\nfile: {path}  {mb:.0f} MB, {ours['lines_read']} lines; grep matched {g.stdout.strip()} lines")
    print(f"{'scanner':<22}{'seconds':>9}{'MB/s':>9}{'peak MB':>9}{'x grep':>8}  buried error found")
    print(f"{'trainlog.parse_paths':<22}{ours['seconds']:>9.2f}{mb / ours['seconds']:>9.0f}"
          f"{ours['peak_mb']:>9.0f}{ours['seconds'] / grep_s:>8.2f}  {'yes' if found else 'NO'}")
    print(f"{'grep -E -i -c':<22}{grep_s:>9.2f}{mb / grep_s:>9.0f}{'-':>9}{1.0:>8.2f}  "
          f"{'(counts only)'}")
    print(f"first_error: {ours['first_error']}")
    print(f"kinds: {', '.join(ours['kinds'])}")
    if not args.keep:
        os.remove(path)


if __name__ == "__main__":
    main()
