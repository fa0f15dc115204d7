"""Typed evidence shared by every parser and read by the matcher.

A :class:`Finding` is one fact pulled out of a log line or a collector's output: an XID code
with its PCI id, a CUDA OOM with its figures, an NCCL watchdog timeout with its sequence
number.  ``KINDS`` is the one list of finding kinds and the attributes each may carry; the
knowledge loader validates entries' ``findings:`` rules against it, so a typo in an entry is
caught when the entry is loaded, not when an incident is missed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# kind -> {attribute: description}.  Attribute values are int, float, str or bool.
KINDS: dict[str, dict[str, str]] = {
    # --- training log ---
    "cuda-oom": {
        "tried_gib": "size of the failed allocation, GiB",
        "gpu": "GPU index from 'GPU 0 has a total capacity'",
        "total_gib": "GPU total capacity, GiB",
        "free_gib": "free memory on the GPU, GiB",
        "allocated_gib": "memory allocated by PyTorch tensors, GiB",
        "reserved_gib": "memory reserved by the PyTorch caching allocator, GiB",
        "reserved_unallocated_gib": "reserved but unallocated (fragmentation), GiB",
        "process_gib": "memory in use by this process, GiB",
        "frag_ratio": "reserved_unallocated / reserved, 0..1",
        "elsewhere_share": "share of the GPU neither free nor this process's: other processes' memory, 0..1",
        "at_start": "true when no training step was logged before the OOM",
    },
    "nccl-timeout": {
        "op": "collective op type, e.g. ALLREDUCE",
        "seq": "collective sequence number (SeqNum)",
        "timeout_ms": "watchdog timeout, ms",
        "elapsed_ms": "time the op ran before the watchdog fired, ms",
        "numel_in": "NumelIn",
        "pg": "process group id, when printed ([PG 0 Rank 3], [PG ID 1 ...])",
        "last_enqueued": "the last work this rank enqueued (the PG status the watchdog prints)",
        "last_completed": "the last work this rank completed (the PG status the watchdog prints)",
        "stack": "the Python frames that called the collective, innermost first (flight-recorder dumps)",
    },
    "nccl-error": {
        "reason": "one of: unhandled-system-error, unhandled-cuda-error, internal-error, "
        "invalid-usage, remote-error, connection-closed, other",
        "text": "the error text",
    },
    "nccl-warn": {"text": "text after 'NCCL WARN'"},
    "ib-error": {
        "status": "completion status name or number, e.g. transport retry counter exceeded / 12",
        "vendor_err": "vendor error code",
        "peer": "remote host or address when printed",
    },
    "rendezvous-error": {"reason": "timeout, connect-failed, closed, store-error", "text": "the error text"},
    "exit-signal": {
        "exitcode": "process exit code, negative for a signal (-9 SIGKILL, -7 SIGBUS, -6 SIGABRT)",
        "signal": "signal name, e.g. SIGKILL",
        "local_rank": "local rank of the failed process",
        "host": "host named in the failure summary",
        "pid": "pid of the failed process",
    },
    "shm-bus-error": {"text": "the DataLoader / bus error line"},
    "shm-error": {"text": "shared-memory allocation failures other than a bus error"},
    "disk-full": {"path": "path named in the error, when printed", "errno": "28 (ENOSPC) or 122 (EDQUOT)"},
    "io-error": {"text": "EIO, stale handle, read-only filesystem, checkpoint write failures"},
    "nfs-stall": {"server": "NFS server that stopped responding", "text": "the kernel line"},
    "oom-killer": {"pid": "killed pid", "process": "killed process name", "anon_rss_kb": "anon-rss, kB",
                   "total_vm_kb": "total-vm, kB", "file_rss_kb": "file-rss, kB", "shmem_rss_kb": "shmem-rss, kB",
                   "uid": "uid of the killed process", "scope": "global (the node ran out) or cgroup (a memory limit)",
                   "constraint": "CONSTRAINT_NONE / CONSTRAINT_MEMCG / ...", "oom_memcg": "the cgroup that hit its limit",
                   "task_memcg": "the killed task's cgroup"},
    "host-oom": {"text": "CPU-side allocation failure (e.g. 'DefaultCPUAllocator: not enough memory')"},
    "xid": {"code": "XID number", "pci": "PCI id, e.g. 0000:3b:00", "pid": "pid or None", "process": "process name",
            "caused_by": "the Xid the driver names as the cause ('caused by previous Xid 149'), when printed",
            "uuid": "the GPU's UUID (kernel log: from the driver's 'GPU at PCI:... GPU-...' line)"},
    "gpu-lost": {"pci": "PCI id", "text": "fallen off the bus / GPU lost / unable to determine the device handle",
                 "uuid": "the GPU's UUID, when the log names it"},
    "ecc-error": {"type": "uncorrectable, correctable, row-remap, page-retired", "text": "the line",
                  "gpu": "GPU index, from GPU collectors", "count": "error count (GPU collectors)",
                  "counter": "volatile (since driver load) or aggregate (lifetime)"},
    "cuda-error": {
        "error": "normalised CUDA error, e.g. illegal-memory-access, device-side-assert, launch-failure, "
        "ecc-uncorrectable, no-kernel-image, driver-insufficient, not-ready, other",
        "text": "the line",
    },
    "slurm-event": {
        "event": "time-limit, preempted, node-fail, cancelled, requeued, oom",
        "job": "job id when printed",
        "text": "the line",
    },
    "elastic-restart": {"text": "restarts exhausted / worker group failed"},
    "collective-mismatch": {
        "seq": "sequence number at which the ranks disagree",
        "ops": "the differing op types or sizes, e.g. ALLREDUCE/ALLGATHER or NumelIn 1024/2048",
        "ranks": "the ranks seen, comma-separated",
        "pg": "the process group, when known (flight-recorder dumps)",
        "odd_ranks": "the minority that ran the other collective, when one side is smaller (flight-recorder dumps)",
    },
    "container-shm-default": {
        "runtime": "docker or podman: a `run` command in the paste sets neither --shm-size nor --ipc=host",
        "shm_bytes": "the /dev/shm size that container got (the engine's default, 64 MB)",
        "beside": "nccl-system-error when the paste's NCCL error is a bare 'unhandled system error'",
    },
    "pod-status": {
        "pod": "the pod's name (the NAME column of kubectl get pods)",
        "status": "its STATUS column: OOMKilled, Evicted or UnexpectedAdmissionError",
    },
    "gpu-idle-holder": {
        "pid": "a process nvidia-smi shows holding GPU memory that ps shows stopped or a zombie",
        "gpu": "the GPU it holds memory on",
        "mib": "how much, MiB",
        "state": "stopped (ps STAT T) or zombie (Z)",
    },
    "gpu-extra-context": {
        "gpu": "the GPU index that carries other GPUs' processes (nvidia-smi's process table)",
        "processes": "how many processes whose main allocation is on another GPU also hold memory there",
        "mib": "their memory on that GPU, MiB",
    },
    "rank-straggler": {
        "ranks": "comma-separated ranks that did not report the collective timeout the others did",
        "seq": "the sequence number the other ranks were stuck at",
        "waiting": "how many ranks reported the timeout at that sequence number",
        "op": "the collective they wait in (ALLREDUCE, ...), when they agree",
        "pg": "the process group's id, when the lines name it",
        "node": "the one laggard's host, when a line of that rank named it",
        "last_completed": "the last work the one laggard completed, from its own watchdog line",
        "last_entered": "the one laggard's last recorded collective (op, #seq, PG, state; flight-recorder dumps)",
        "stack": "the Python frames of that collective's call, innermost first (flight-recorder dumps)",
        "no_dump": "true when the silent ranks are members of the group that wrote no flight-recorder dump",
    },
    "python-exception": {"type": "exception class, e.g. RuntimeError", "message": "first line of the message",
                         "launcher": "true for a launcher's report of a worker's death (ChildFailedError, "
                                     "CalledProcessError), not the worker's own exception"},
    "version": {"component": "driver, cuda, nccl, pytorch, python, deepspeed, ofed", "value": "version string"},
    "nvlink-error": {"text": "the line"},
    "pcie-error": {"text": "AER or link line", "severity": "corrected or uncorrected"},
    "thermal": {"text": "the line", "gpu": "GPU index, from GPU collectors"},
    # --- node collectors (collectors/node/*): facts as well as problems, so that nodes can be compared ---
    "gpu": {
        "index": "GPU index", "name": "product name", "bus_id": "PCI bus id", "uuid": "GPU UUID",
        "serial": "board serial", "memory_used_mib": "memory in use, MiB", "memory_total_mib": "memory, MiB",
        "utilization_pct": "GPU utilisation", "temperature_c": "temperature", "power_w": "power draw",
        "ecc_uncorrected": "volatile uncorrected ECC count", "ecc_corrected": "volatile corrected ECC count",
        "processes": "number of compute processes on it",
        "fan_pct": "fan speed, %", "memory_free_mib": "free memory, MiB", "utilization_memory_pct":
        "memory controller utilisation, %", "power_limit_w": "power limit (cap), W", "pstate": "performance state, P0..P12",
        "compute_cap": "CUDA compute capability, e.g. 8.9", "vbios": "VBIOS version", "driver_model": "WDDM/TCC (Windows)",
        "clock_sm_mhz": "SM clock, MHz", "clock_mem_mhz": "memory clock, MHz",
        "memory_temperature_c": "HBM temperature, C", "compute_mode": "Default/Exclusive_Process/Prohibited",
        "persistence_mode": "Enabled/Disabled (On/Off in the table)",
    },
    "gpu-throttle": {"gpu": "GPU index", "reasons": "comma-separated active throttle reasons"},
    "pcie-link": {"gpu": "GPU index", "width": "current width", "max_width": "max width", "gen": "current gen",
                  "max_gen": "max gen", "degraded": "true when below max under load"},
    "retired-pages": {"gpu": "GPU index", "sbe": "single-bit retired", "dbe": "double-bit retired",
                      "pending": "retirement pending"},
    "net-link": {"interface": "interface name", "state": "UP/DOWN/UNKNOWN", "mtu": "MTU", "kind": "ether/infiniband",
                 "admin_up": "true when the UP flag is set (administratively up)",
                 "carrier": "link has carrier (LOWER_UP); false on NO-CARRIER; absent when admin down"},
    "nic-counter": {"device": "interface or HCA:port", "counter": "counter name", "value": "its value",
                    "queue": "per-queue counter's queue as printed, e.g. '0' for '[0]: ', 'rxq0' for 'rxq0: '"},
    "ib-port-counters": {"device": "lid N port N", "xmit_data": "PortXmitData as printed (the counter's unit)",
                         "rcv_data": "PortRcvData as printed (the counter's unit)", "xmit_pkts": "PortXmitPkts", "rcv_pkts": "PortRcvPkts",
                         "unicast_xmit_pkts": "PortUnicastXmitPkts", "unicast_rcv_pkts": "PortUnicastRcvPkts",
                         "multicast_xmit_pkts": "PortMulticastXmitPkts", "multicast_rcv_pkts": "PortMulticastRcvPkts",
                         "xmit_wait": "PortXmitWait (ticks the port had data and could not send)"},
    "memlock": {"limit_kb": "RLIMIT_MEMLOCK in kB (-1 = unlimited)"},
    "host-memory": {"total_mib": "RAM", "used_mib": "used", "available_mib": "available",
                    "available_pct": "available / total", "swap_total_mib": "swap", "swap_used_mib": "swap used",
                    "free_mib": "free (unused), MiB", "shared_mib": "shared (mostly tmpfs and /dev/shm), MiB",
                    "buff_cache_mib": "buffers + page cache, MiB", "buffers_mib": "buffers (free -w, old procps), MiB",
                    "cache_mib": "page cache (free -w, old procps), MiB", "swap_free_mib": "swap free, MiB",
                    "used_with_cache_mib": "old procps: the Mem row's used, page cache included, MiB"},
    "disk-io": {"device": "block device", "util_pct": "%util", "await_ms": "r/w await, ms",
                "reads_per_s": "r/s", "writes_per_s": "w/s", "read_kb_per_s": "rkB/s", "write_kb_per_s": "wkB/s",
                "read_mb_per_s": "rMB/s (iostat -m)", "write_mb_per_s": "wMB/s (iostat -m)",
                "r_await_ms": "read await, ms", "w_await_ms": "write await, ms",
                "queue_size": "average queue size (aqu-sz / avgqu-sz)", "svctm_ms": "svctm, ms (old sysstat)",
                "read_size_kb": "average read size, kB", "write_size_kb": "average write size, kB"},
    "host-cpu": {"user_pct": "%user", "nice_pct": "%nice", "system_pct": "%system", "iowait_pct": "%iowait",
                 "steal_pct": "%steal", "idle_pct": "%idle"},
    "dataloader-workers": {"count": "worker processes", "trainers": "training processes", "per_rank": "workers per rank"},

    "shm-usage": {"size_bytes": "size of /dev/shm", "used_pct": "percent used", "docker_default": "64 MB",
                  "used_bytes": "used, bytes", "avail_bytes": "available, bytes", "device": "filesystem column",
                  "fstype": "filesystem type (df -T)"},
    "disk-usage": {"mount": "mount point", "used_pct": "percent used", "inodes": "true for df -i",
                   "device": "filesystem / device column", "size_bytes": "size (not for inodes)",
                   "avail_bytes": "available to non-root users (not for inodes)", "used_bytes": "used, bytes",
                   "fstype": "filesystem type (df -T)", "inodes_total": "inodes (df -i)",
                   "inodes_used": "inodes used (df -i)", "inodes_free": "inodes free (df -i)"},
    "ib-port": {"device": "mlx5_0", "port": "port number", "state": "Active/Down/Polling/...", "rate": "Gb/s",
                "phys_state": "physical state: LinkUp/Polling/Disabled/...", "link_layer": "InfiniBand or Ethernet",
                "width": "link width, e.g. 4X (ibstatus)", "speed": "link speed name, e.g. HDR, NDR (ibstatus)",
                "base_lid": "base LID", "sm_lid": "subnet manager LID", "lmc": "LID mask count",
                "port_guid": "port GUID", "gid": "default GID (ibstatus)"},
    "gpu-nic-affinity": {"gpu": "GPU index", "nic": "nearest NIC", "link": "PIX/PXB/PHB/NODE/SYS",
                         "nics": "comma-separated NICs tied at the nearest link",
                         "cpu_affinity": "CPU list of the GPU's row", "numa": "NUMA affinity of the GPU"},
    "gpu-topology": {"gpus": "GPU columns in nvidia-smi topo -m", "nics": "NIC columns",
                     "nvlink": "NVLink width between GPUs, e.g. NV12 (the narrowest when they differ)",
                     "nvlink_links": "bonded NVLinks of that width (12 for NV12)",
                     "peer_link": "the farthest GPU-to-GPU path (NV#, PIX, PXB, PHB, NODE, SYS)",
                     "nic_names": "comma-separated NIC names (HCA names from the NIC legend when printed)",
                     "header": "false when the rows were pasted without their header line"},
    "gpu-affinity": {"gpu": "GPU index", "cpu_affinity": "CPU list", "numa": "NUMA affinity",
                     "gpu_numa_id": "GPU NUMA ID (Grace/C2C systems)",
                     "nvlink": "narrowest NVLink width to a peer GPU, e.g. NV12", "nvlink_links": "its link count",
                     "nvlink_peers": "peer GPUs reached over NVLink", "peer_link": "the farthest path to a peer GPU"},
    "ib-netdev": {"device": "RDMA device, e.g. mlx5_0", "port": "port number", "netdev": "its network interface",
                  "state": "the interface's state (Up/Down), not the IB link's"},
    "traceback-cut": {"area": "rendezvous, collective, file-io or shared-memory: the layer of the innermost frame",
                      "path": "that frame's file", "function": "that frame's function"},
    "py-stack": {"pid": "process id", "command": "its command line (py-spy's Process line)",
                 "thread": "the thread whose stack is given (MainThread when there is one)",
                 "state": "py-spy's thread state (active/idle)",
                 "where": "collective (in torch.distributed's collectives), dataloader, checkpoint or python",
                 "function": "the innermost frame's function", "frames": "frames, innermost first (at most 12)"},
    "row-remap": {"gpu": "GPU index", "pending": "remapping pending", "failure": "remapping failed",
                  "correctable": "rows remapped for correctable errors",
                  "uncorrectable": "rows remapped for uncorrectable errors",
                  "banks_max": "memory banks with every spare row left (Bank Remap Availability Histogram)",
                  "banks_high": "banks with most spare rows left", "banks_partial": "banks with some spare rows left",
                  "banks_low": "banks with few spare rows left (near a failed remap)",
                  "banks_none": "banks with no spare row left (the next error there cannot be remapped)"},
    "gpu-process": {"gpu": "GPU index", "pid": "process id", "name": "process name (nvidia-smi table)",
                    "type": "C (compute), G (graphics), C+G", "memory_mib": "GPU memory used by the process"},
    "node-mismatch": {"what": "driver/cuda/nccl/ofed/...", "value": "odd value", "others": "peer value",
                      "gpu": "GPU index when one GPU is the odd one (gpu-memory-used-mib)",
                      "device": "HCA for an ib-port mismatch", "port": "port for an ib-port mismatch"},
}


@dataclass
class Finding:
    """One fact with the line it came from.

    ``source`` is where it was seen (``log``, ``kernel-log``, ``ibstat``...), ``line_no`` the
    1-based line in that source, ``rank``/``node`` when the line says so, ``ts`` an ISO-8601
    timestamp when the line carries one.  ``normal`` says why a fact that can look like a fault
    is what a healthy node shows (``collectors.healthy``); such a finding supports no cause.
    """

    kind: str
    attrs: dict[str, Any] = field(default_factory=dict)
    line: str = ""
    line_no: int | None = None
    rank: int | None = None
    node: str | None = None
    source: str = "log"
    ts: str | None = None
    normal: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = {
            "kind": self.kind,
            "node": self.node,
            "rank": self.rank,
            "source": self.source,
            "attrs": self.attrs,
            "line": self.line,
            "line_no": self.line_no,
            "ts": self.ts,
        }
        if self.normal:
            out["normal"] = self.normal
        return out


@dataclass
class LogLine:
    """A cleaned log line kept for matching: rank/host prefixes and ANSI codes removed."""

    text: str
    line_no: int
    rank: int | None = None
    node: str | None = None
    ts: str | None = None
    source: str = "log"


@dataclass
class FirstError:
    """The earliest error line in time (by timestamp where present, else by position)."""

    line: str
    line_no: int
    rank: int | None = None
    node: str | None = None
    ts: str | None = None
    source: str = "log"
    basis: str = "time"  # "time": earliest by timestamp; "file-order": no comparable times, first in order
    also: dict[str, Any] | None = None  # another host's first error within the clock skew, when there is one

    def to_json(self) -> dict[str, Any]:
        out = {"rank": self.rank, "node": self.node, "line": self.line, "line_no": self.line_no,
               "ts": self.ts, "source": self.source, "basis": self.basis}
        if self.also:
            out["also"] = self.also
        return out
