"""Generate the scan benchmark's logs: the four shapes of issue 11 and a folder of per-rank files.

Each profile is what a real job prints, at a size chosen by the caller, with one real failure
buried at about 70 % that the scan must still find (and the rank or host it came from):

``nccl-info``   a 64-rank torchrun job (8 hosts x 8 GPUs) run with NCCL_DEBUG=INFO: communicator
                set-up chatter (Init START/COMPLETE with ``nranks``, channels via P2P and NET/IB,
                ``Allocated ... bytes of shared memory in /dev/shm``, ``NCCL_IB_TIMEOUT set by
                environment``, service threads closing connections), rank 0's step/loss lines and
                PyTorch ``UserWarning`` s with their ``warnings.warn(`` echo. Buried: rank 37's IB
                completion error (status 12, vendor err 129) ahead of the other ranks' watchdog
                timeouts.
``megatron``    Megatron-LM iteration lines and DeepSpeed ``log_dist`` step lines with DeepSpeed's
                periodic "pytorch allocator cache flushes" warning and checkpoint ``UserWarning`` s.
                Buried: rank 13's CUDA out-of-memory traceback and torchrun's failure summary.
``kernel``      ``journalctl -k`` of a GPU node: mlx5 and nvidia driver lines, perf's "interrupt
                took too long", NVRM GPU/serial lines, audit, IPv6 link changes. Buried: gpu07's
                Xid 79 (fallen off the bus) after an Xid 13.
``storm``       an error storm: after a healthy 30 %, rank 21's IB completion error, then 64 ranks
                each printing NCCL WARN lines, c10d watchdog timeouts and Python tracebacks, again and
                again (10 % of all lines), between NCCL INFO chatter and step lines. The IB error is
                the first in time.
``folder``      64 files ``rank<N>.log``, one per rank, of the ``nccl-info`` shape without the
                rank prefix (each file's name gives its rank). Buried: in ``rank37.log``.

The line shapes follow real captures in this repository (tests/fixtures/benign/, tests/corpus/,
tests/fixtures/kernel-log/); the values are made up. ``EXPECT`` says what a diagnosis must name.

    python bench/profiles.py PROFILE PATH [--size-mb N]
"""

from __future__ import annotations

import argparse
import os
import random
import sys

RANKS = 64
HOSTS = [f"gpu{n:02d}" for n in range(1, 9)]  # rank r runs on HOSTS[r // 8], device r % 8

# what the diagnosis must name for each profile: a finding kind, the rank (or host) it came from
EXPECT = {
    "nccl-info": {"kind": "ib-error", "rank": 37, "node": None},
    "megatron": {"kind": "cuda-oom", "rank": 13, "node": None},
    "kernel": {"kind": "xid", "rank": None, "node": "gpu07"},
    "storm": {"kind": "ib-error", "rank": 21, "node": None},
    "folder": {"kind": "ib-error", "rank": 37, "node": None},
}


def _ts(sec: float) -> str:
    s = int(sec)
    return f"2024-08-13 {3 + s // 3600 % 20:02d}:{s // 60 % 60:02d}:{s % 60:02d}"


def _nccl(r: int, msg: str) -> str:
    return f"{HOSTS[r // 8]}:{48000 + r}:{48100 + r} [{r % 8}] NCCL INFO {msg}"


def _comm_setup(rng: random.Random, r: int, comm: int) -> list[str]:
    """One rank's NCCL INFO lines while one communicator is created (NCCL 2.18-2.21 shapes)."""
    cid = f"0x{comm:012x}"
    nxt, prv = (r + 1) % RANKS, (r - 1) % RANKS
    lines = [
        _nccl(r, f"ncclCommInitRank comm {cid} rank {r} nranks {RANKS} cudaDev {r % 8} nvmlDev {r % 8} "
                 f"busId {(r % 8) * 0x10 + 0x1b:x}000 commId 0x{comm * 7919:016x} - Init START"),
        _nccl(r, f"NCCL_IB_TIMEOUT set by environment to 22."),
        _nccl(r, "NCCL_ASYNC_ERROR_HANDLING set by environment to 1."),
        _nccl(r, f"Setting affinity for GPU {r % 8} to ffff,ffffffff"),
        _nccl(r, f"comm {cid} rank {r} nRanks {RANKS} nNodes 8 localRanks 8 localRank {r % 8} MNNVL 0"),
        _nccl(r, f"Trees [0] {nxt}/-1/-1->{r}->{prv} [1] {nxt}/-1/-1->{r}->{prv}"),
        _nccl(r, "P2P Chunksize set to 524288"),
    ]
    for ch in range(rng.randrange(4, 12)):
        if r % 8 == 7:
            lines.append(_nccl(r, f"Channel {ch:02d}/0 : {r}[{r % 8}] -> {nxt}[{nxt % 8}] [send] via "
                                  f"NET/IB/{ch % 4}/GDRDMA"))
        else:
            lines.append(_nccl(r, f"Channel {ch:02d}/0 : {r}[{r % 8}] -> {nxt}[{nxt % 8}] via P2P/IPC/read"))
    lines += [
        _nccl(r, f"Allocated 4194656 bytes of shared memory in /dev/shm/nccl-{rng.randrange(16 ** 6):06x}"),
        _nccl(r, "Connected all rings"),
        _nccl(r, "Connected all trees"),
        _nccl(r, "threadThresholds 8/8/64 | 512/8/64 | 512 | 512"),
        _nccl(r, "32 coll channels, 32 collnet channels, 0 nvls channels, 32 p2p channels, 32 p2p channels per peer"),
        _nccl(r, "TUNER/Plugin: Using internal tuner plugin."),
        _nccl(r, f"ncclCommInitRank comm {cid} rank {r} nranks {RANKS} cudaDev {r % 8} nvmlDev {r % 8} "
                 f"busId {(r % 8) * 0x10 + 0x1b:x}000 commId 0x{comm * 7919:016x} - Init COMPLETE"),
        _nccl(r, f"Init timings: rank {r} nranks {RANKS} total 0.52 (kernels 0.21, alloc 0.11, bootstrap 0.05, "
                 f"allgathers 0.01, topo 0.08, graphs 0.01, connections 0.04, rest 0.01)"),
    ]
    if rng.random() < 0.3:
        lines.append(_nccl(r, f"[Service thread] Connection closed by localRank {rng.randrange(8)}"))
    return lines


_USERWARN = [
    ("torch/utils/checkpoint.py:464", "UserWarning: torch.utils.checkpoint: the use_reentrant parameter should be "
     "passed explicitly. In version 2.4 we will raise an exception if use_reentrant is not passed. "
     "use_reentrant=False is recommended, but if you need to preserve the current default behavior, you can "
     "pass use_reentrant=True. Refer to docs for more details on the differences between the two variants."),
    ("torch/distributed/fsdp/_state_dict_utils.py:773", "UserWarning: When using ``NO_SHARD`` for "
     "``ShardingStrategy``, full_state_dict will be returned."),
    ("torch/_dynamo/variables/functions.py:663", "UserWarning: Graph break due to unsupported builtin "
     "posix.getpid. This function is either a Python builtin or a third-party C/C++ Python extension."),
]


def _warn(rng: random.Random, r: int, prefix: bool = True) -> list[str]:
    where, msg = _USERWARN[rng.randrange(len(_USERWARN))]
    p = f"[rank{r}]:" if prefix else ""
    return [f"{p}/opt/conda/lib/python3.10/site-packages/{where}: {msg}", f"{p}  warnings.warn("]


def _step(rng: random.Random, step: int, t: float, prefix: str = "[rank0]:") -> str:
    return (f"{prefix}[titan] {_ts(t)},{rng.randrange(1000):03d} - root - INFO - step: {step:5d}  "
            f"loss: {2 + rng.random() * 5:7.4f}  memory: 61.{rng.randrange(100):02d}GiB(77.{rng.randrange(100):02d}%)  "
            f"tps: {rng.randrange(2800, 3600):,}  mfu: 41.{rng.randrange(100):02d}%")


def _ib_failure(r: int, t: float) -> list[str]:
    """Rank ``r``'s IB completion error (NCCL 2.18 net_ib.cc wording) and its c10d echo."""
    h = HOSTS[r // 8]
    peer = HOSTS[(r // 8 + 1) % 8]
    return [
        f"[rank{r}]:{h}:{48000 + r}:{48200 + r} [{r % 8}] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer "
        f"10.12.0.{(r // 8 + 1) % 8 + 11}<59123> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid "
        f"fe80::ba3f:d203:4c:a1b2 remoteGids fe80::ba3f:d203:4c:a1c4 hca mlx5_{r % 8} ({peer})",
        f"[rank{r}]:{h}:{48000 + r}:{48200 + r} [{r % 8}] NCCL INFO transport/net.cc:1302 -> 6",
        f"[rank{r}]:{h}:{48000 + r}:{48200 + r} [{r % 8}] NCCL INFO proxy.cc:698 -> 6",
        f"[rank{r}]:[E813 {_ts(t)[11:]}.123456789 ProcessGroupNCCL.cpp:1375] [PG 0 Rank {r}] Process group "
        f"watchdog thread terminated with exception: NCCL error: remote process exited or there was a network "
        f"error, NCCL version 2.18.3",
        f"[rank{r}]:ncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
        f"prematurely.",
    ]


def _watchdog(r: int, t: float, seq: int) -> str:
    return (f"[rank{r}]:[E813 {_ts(t)[11:]}.{r:03d}000000 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught "
            f"collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=8388608, "
            f"NumelOut=8388608, Timeout(ms)=600000) ran for 600081 milliseconds before timing out.")


def _traceback(r: int, exc: str) -> list[str]:
    p = f"[rank{r}]:"
    return [f"{p}Traceback (most recent call last):",
            f'{p}  File "/workspace/torchtitan/train.py", line 311, in <module>',
            f"{p}    main(config)",
            f'{p}  File "/workspace/torchtitan/train.py", line 264, in main',
            f"{p}    loss.backward()",
            f'{p}  File "/opt/conda/lib/python3.10/site-packages/torch/_tensor.py", line 521, in backward',
            f"{p}    torch.autograd.backward(",
            f"{p}{exc}"]


OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 5 has a total capacity of "
       "79.15 GiB of which 1.20 GiB is free. Process 48213 has 77.90 GiB memory in use. Of the allocated memory "
       "71.30 GiB is allocated by PyTorch, and 5.10 GiB is reserved by PyTorch but unallocated. If reserved but "
       "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
       "fragmentation.")


def _childfailed(r: int) -> list[str]:
    return ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
            "============================================================",
            "train.py FAILED",
            "------------------------------------------------------------",
            "Failures:",
            "  <NO_OTHER_FAILURES>",
            "------------------------------------------------------------",
            "Root Cause (first observed failure):",
            "[0]:",
            "  time      : 2024-08-13_04:12:11",
            f"  host      : {HOSTS[r // 8]}",
            f"  rank      : {r} (local_rank: {r % 8})",
            "  exitcode  : 1 (pid: 48213)",
            "  error_file: <N/A>",
            "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
            "============================================================"]


# --- the profiles: each yields (lines, seconds) blocks until the caller has enough -----------------
def _nccl_info_block(rng: random.Random, state: dict, prefix: bool = True, only: int | None = None) -> list[str]:
    out: list[str] = []
    state["comm"] += 1
    for r in (range(RANKS) if only is None else [only]):
        # torchrun --role rank --tee 3 puts "[rank<N>]:" before everything a worker prints, NCCL's lines too
        p = f"[rank{r}]:" if prefix else ""
        out += [p + ln for ln in _comm_setup(rng, r, 0x55d1a0000000 + state["comm"])]
    for _ in range(40 if only is None else 1):
        state["t"] += 1.3
        state["step"] += 1
        if only in (None, 0):
            out.append(_step(rng, state["step"], state["t"], "[rank0]:" if prefix else ""))
        if rng.random() < 0.25:
            r = rng.randrange(RANKS) if only is None else only
            out += _warn(rng, r, prefix)
    return out


def _megatron_block(rng: random.Random, state: dict) -> list[str]:
    out: list[str] = []
    for _ in range(50):
        state["t"] += 1.4
        state["step"] += 1
        it = state["step"]
        out.append(f" [{_ts(state['t'])}] iteration {it:8d}/  500000 | consumed samples: {it * 1024:12d} | elapsed "
                   f"time per iteration (ms): {1400 + rng.random() * 50:.1f} | learning rate: 2.999E-04 | global "
                   f"batch size:  1024 | lm loss: {2 + rng.random():.6E} | loss scale: 1.0 | grad norm: "
                   f"{rng.random():.3f} | number of skipped iterations:   0 | number of nan iterations:   0 |")
        out.append(f"[{_ts(state['t'])},{rng.randrange(1000):03d}] [INFO] [logging.py:96:log_dist] [Rank 0] "
                   f"step={it}, skipped=0, lr=[0.0003], mom=[(0.9, 0.95)]")
        out.append(f"[{_ts(state['t'])},{rng.randrange(1000):03d}] [INFO] [timer.py:260:stop] epoch=0/micro_step="
                   f"{it * 8}/global_step={it}, RunningAvgSamplesPerSec={180 + rng.random():.2f}, CurrSamplesPerSec="
                   f"{180 + rng.random():.2f}, MemAllocated=31.2GB, MaxMemAllocated=61.7GB")
        if it % 20 == 0:
            out.append(f"[{_ts(state['t'])},{rng.randrange(1000):03d}] [WARNING] [stage3.py:1898:step] 2 pytorch "
                       "allocator cache flushes since last step. this happens when there is high memory pressure "
                       "and is detrimental to performance. if this is happening frequently consider adjusting "
                       "settings to reduce memory consumption. If you are unable to make the cache flushes go away "
                       "consider adding get_accelerator().empty_cache() calls in your training loop to ensure that "
                       "all ranks flush their caches at the same time")
        if it % 25 == 0:
            out += _warn(rng, rng.randrange(RANKS))
    return out


_MONTH = "Aug"


def _kernel_block(rng: random.Random, state: dict) -> list[str]:
    out: list[str] = []
    for _ in range(100):
        state["t"] += 0.7
        t = _ts(state["t"])
        pre = f"{_MONTH} 13 {t[11:]} gpu07 kernel: "
        x = rng.random()
        bus = f"0000:{rng.choice(['0c', '2a', '41', '58', '8d', 'a5', 'bd', 'e1'])}:00.0"
        if x < 0.3:
            out.append(pre + f"mlx5_core {bus}: mlx5_fw_tracer_handle_traces:{rng.randrange(700, 760)}:(pid "
                             f"{rng.randrange(100, 9000)}): FW trace: module MLX5_CORE, event 0x{rng.randrange(256):x}")
        elif x < 0.45:
            out.append(pre + f"mlx5_core {bus} ib{rng.randrange(8)}: Link up")
        elif x < 0.55:
            out.append(pre + f"perf: interrupt took too long ({rng.randrange(2501, 6000)} > 2500), lowering "
                             f"kernel.perf_event_max_sample_rate to {rng.randrange(30000, 79000)}")
        elif x < 0.7:
            out.append(pre + f"NVRM: GPU at PCI:{bus[:-2]}: GPU-{rng.randrange(16 ** 8):08x}-5798-a6e7-4c46-12518fa15375")
            out.append(pre + f"NVRM: GPU Board Serial Number: 16504230{rng.randrange(10 ** 5):05d}")
        elif x < 0.8:
            out.append(pre + f"IPv6: ADDRCONF(NETDEV_CHANGE): ib{rng.randrange(8)}: link becomes ready")
        elif x < 0.9:
            out.append(pre + f"audit: type=1400 audit({1723521129 + int(state['t'])}.{rng.randrange(1000):03d}:"
                             f"{rng.randrange(10 ** 5)}): apparmor=\"ALLOWED\" operation=\"open\" profile=\"slurmd\" "
                             f"name=\"/proc/{rng.randrange(99999)}/status\" pid={rng.randrange(99999)} comm=\"slurmstepd\"")
        else:
            out.append(pre + f"nvidia-nvswitch{rng.randrange(4)}: open (major={rng.randrange(500, 510)})")
    return out


def _storm_block(rng: random.Random, state: dict) -> list[str]:
    """About 1 line in 7 a rank's NCCL WARN, watchdog timeout or traceback, between chatter and steps."""
    errors: list[str] = []
    state["t"] += 5
    r = rng.randrange(RANKS)
    for _ in range(3):
        state["seq"] += 1
        errors.append(_watchdog(rng.randrange(RANKS), state["t"], state["seq"]))
    h = HOSTS[r // 8]
    errors.append(f"[rank{r}]:{h}:{48000 + r}:{48200 + r} [{r % 8}] NCCL WARN Cuda failure 'unspecified launch "
                  "failure'")
    errors.append(f"[rank{r}]:{h}:{48000 + r}:{48200 + r} [{r % 8}] NCCL WARN [Proxy Service {r}] Failed to execute operation "
                  f"Connect from rank {(r + 3) % RANKS}, retcode 3")
    errors += _traceback(rng.randrange(RANKS), "torch.distributed.DistBackendError: NCCL error in: "
                         "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run "
                         "with NCCL_DEBUG=INFO for details), NCCL version 2.18.3")
    chatter: list[str] = []
    while len(chatter) < len(errors) * 5:
        cr = rng.randrange(RANKS)
        chatter += [f"[rank{cr}]:" + ln for ln in _comm_setup(rng, cr, 0x55d1a0000000 + rng.randrange(1 << 20))]
        state["step"] += 1
        chatter.append(_step(rng, state["step"], state["t"]))
    return chatter + errors


def _write(path: str, size: int, block, state: dict, bury, rng: random.Random, mode: str = "w") -> None:
    written = 0
    buried = bury is None
    with open(path, mode) as fh:
        while written < size:
            lines = block(rng, state)
            if not buried and written >= size * 0.7:
                lines = bury(state) + lines
                buried = True
            text = "\n".join(lines) + "\n"
            fh.write(text)
            written += len(text)


def generate(profile: str, path: str, size_mb: int, seed: int = 11) -> None:
    rng = random.Random(seed)
    size = size_mb * 1024 * 1024
    state = {"t": 0.0, "step": 0, "comm": 0, "seq": 100}
    if profile == "nccl-info":
        def bury(st):
            t = st["t"]
            return (_ib_failure(37, t) + [_watchdog(r, t + 600, 9000) for r in range(RANKS) if r != 37]
                    + _childfailed(37))
        _write(path, size, _nccl_info_block, state, bury, rng)
    elif profile == "megatron":
        def bury(st):
            return _traceback(13, OOM) + _childfailed(13)
        _write(path, size, _megatron_block, state, bury, rng)
    elif profile == "kernel":
        def bury(st):
            t = _ts(st["t"])[11:]
            pre = f"{_MONTH} 13 {t} gpu07 kernel: "
            return [pre + "NVRM: Xid (PCI:0000:8d:00): 13, pid=48213, name=python, Graphics SM Warp Exception on "
                          "(GPC 0, TPC 1, SM 0): Out Of Range Address",
                    pre + "NVRM: Xid (PCI:0000:8d:00): 79, pid=48213, name=python, GPU has fallen off the bus.",
                    pre + "NVRM: GPU 0000:8d:00.0: GPU has fallen off the bus."]
        _write(path, size, _kernel_block, state, bury, rng)
    elif profile == "storm":
        # a healthy start, then rank 21's IB error, then the storm: every later error echoes it
        _write(path, size * 3 // 10, _nccl_info_block, state, None, rng)
        with open(path, "a") as fh:
            fh.write("\n".join(_ib_failure(21, state["t"] + 0.5)) + "\n")
        _write(path, size - os.path.getsize(path), _storm_block, state, None, rng, mode="a")
    elif profile == "folder":
        os.makedirs(path, exist_ok=True)
        per = size // RANKS
        for r in range(RANKS):
            st = {"t": 0.0, "step": 0, "comm": 0, "seq": 100}
            rr = random.Random(seed * 1000 + r)

            def block(rg, s, r=r):
                return _nccl_info_block(rg, s, prefix=False, only=r)

            def bury(s, r=r):
                if r == 37:
                    return [ln.split(":", 1)[1] for ln in _ib_failure(37, s["t"])]
                return [_watchdog(r, s["t"] + 600, 9000).split(":", 1)[1]]
            _write(os.path.join(path, f"rank{r}.log"), per, block, st, bury, rr)
    else:
        raise SystemExit(f"unknown profile {profile!r}; one of: {', '.join(EXPECT)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profile", choices=sorted(EXPECT))
    ap.add_argument("path")
    ap.add_argument("--size-mb", type=int, default=1024)
    args = ap.parse_args(argv)
    generate(args.profile, args.path, args.size_mb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
