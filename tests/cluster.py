"""A fake GPU cluster for integration tests: one real OpenSSH ``sshd`` per node, on loopback.

Every node is a real ``/usr/sbin/sshd -D -e -f <config>`` (Debian package openssh-server)
listening on its own address ``127.0.0.(2+i)`` and a free port, with its own ed25519 host key.
One client key pair (for the current user) is authorised on all of them. The cluster writes an
OpenSSH client config (``ssh_config``) and a ``known_hosts`` file, so both ``ssh -F`` and code
that reads an OpenSSH config (gpu-triage's ``collectors.remote``) reach the nodes exactly like
real ones.

What a node "is" comes from its *scenario*: a mapping of scenario key -> behaviour. Each node has
its own PATH, set by ``SetEnv`` in its sshd_config::

    PATH=<node>/bin:<base-bin>   SHLVL=1

``<node>/bin`` holds the stand-ins (nvidia-smi, ibstat, dmesg, df, ...) that print real captured
outputs from ``tests/fixtures/cluster/``; ``base-bin`` (one per test process) holds links to
every program of /usr/bin, /bin, /usr/sbin and /sbin *except* the stand-in names, so
``timeout``, ``sh``, ``cat`` and ``python3`` work, while a tool that the scenario leaves out is
really absent (exit 127).
``SHLVL=1`` stops bash from reading the user's ~/.bashrc for an ssh command (bash does that
when SHLVL < 2), so a developer's pyenv or cargo PATH edits cannot leak into the nodes.

Behaviours (values of a scenario):

* ``"kernel-log/11.txt"`` (a path relative to tests/fixtures/cluster, or an absolute Path): the
  command prints that file and exits 0;
* :class:`Output` for anything else (a stderr fixture, an exit code, inline text);
* ``HANG``: the command never finishes (``sleep`` forever; its pid is recorded for teardown);
* ``FAIL``: exit 1 with a message on stderr;
* ``MISSING``: the tool is not on the node's PATH at all (the shell answers 127);
* ``REAL``: this machine's own program (only for tools that make sense here: ``ps`` in the
  healthy scenario, as no captured ``ps`` output exists; it then lists this machine's processes).

Scenario keys are the tool names, except that ``nvidia-smi`` dispatches on its arguments:
``topo`` -> ``nvidia-smi-topo``, ``--query-gpu``/``--query-*`` -> ``nvidia-smi-query``,
``-q``/``--query`` -> ``nvidia-smi-q``, anything else -> ``nvidia-smi``. Other stand-ins ignore
their arguments. Every call is appended to ``<node>/calls.log`` (``Cluster.calls(name)``).

Node kinds besides a normal node: ``unreachable`` (an address and port where nothing listens:
the port is held by a bound, non-listening socket, so a connection is refused at once),
``silent`` (a socket that accepts TCP but never says a word: SSH banner timeouts), a node whose
known_hosts entry is a different key (``wrong_host_key=True``), a ``bastion`` (an sshd that
allows TCP forwarding and logs each forwarded connection at DEBUG1), and nodes reached through
a bastion (``via="bastion"`` -> ``ProxyJump bastion`` in the client config).

No root needed for the nodes themselves (sshd runs as the current user, without privilege
separation, and only that user can log in); as root, /run/sshd is created if missing because
sshd insists on it. Set ``GPU_TRIAGE_KEEP_CLUSTER=1`` to keep the directory after a run.
"""

from __future__ import annotations

import atexit
import getpass
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "cluster"
SSHD = "/usr/sbin/sshd"
SSH_KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"

# Stand-in tools -> the scenario keys each one serves.
TOOLS: dict[str, tuple[str, ...]] = {
    "nvidia-smi": ("nvidia-smi", "nvidia-smi-q", "nvidia-smi-query", "nvidia-smi-topo"),
    "dmesg": ("dmesg",),
    "journalctl": ("journalctl",),
    "ibstat": ("ibstat",),
    "ibstatus": ("ibstatus",),
    "ibdev2netdev": ("ibdev2netdev",),
    "perfquery": ("perfquery",),
    "ethtool": ("ethtool",),
    "ip": ("ip",),
    "df": ("df",),
    "free": ("free",),
    "iostat": ("iostat",),
    "ps": ("ps",),
}
KEY_TO_TOOL = {key: tool for tool, keys in TOOLS.items() for key in keys}

HANG = "hang"
FAIL = "fail"
MISSING = "missing"
REAL = "real"
SYSTEM_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"


@dataclass(frozen=True)
class Output:
    """What a stand-in prints: stdout/stderr as a fixture path (relative to tests/fixtures/cluster,
    or absolute) or as literal ``text``; and the exit code."""

    stdout: str | Path | None = None
    stderr: str | Path | None = None
    exit: int = 0
    stdout_text: str | None = None
    stderr_text: str | None = None


Behaviour = str | Path | Output
Scenario = Mapping[str, Behaviour]

# --- scenarios -------------------------------------------------------------------------------------
# Fixtures and where they come from: tests/fixtures/cluster/SOURCES.jsonl.

HEALTHY: dict[str, Behaviour] = {
    "nvidia-smi": "nvidia-smi/01.txt",             # 8x H100, driver 550.90.07, ECC 0
    "nvidia-smi-q": "nvidia-smi-q/01.txt",         # A100 -q excerpt, healthy ECC / remapped rows
    "nvidia-smi-query": "nvidia-smi-query/01.txt",  # --query-gpu CSV, retired pages 0
    "nvidia-smi-topo": "nvidia-smi-topo/03.txt",   # HGX H100, NV18 all-to-all
    "dmesg": "kernel-log/09-banner-only.constructed.txt",    # driver banner, no Xid
    "journalctl": "kernel-log/09-banner-only.constructed.txt",
    "ibstat": "ibstat/07.txt",                     # two ports Active/LinkUp
    "ibdev2netdev": "ibdev2netdev/01.txt",         # 12 ports and their interfaces (IPoIB ones Down)
    "perfquery": "perfquery/01.txt",               # all error counters 0
    "ethtool": "ethtool-S/01.txt",                 # zero discards/errors
    "ip": "ip-link/02-lo-up.constructed.txt",
    "df": "df/06.txt",                             # root 77 %, /dev/shm 1 %
    "free": "free/03.txt",
    "iostat": "iostat/02.txt",
    "ps": REAL,                                    # no captured ps output: this machine's ps
}


def scenario(base: Scenario = HEALTHY, **changes: Behaviour) -> dict[str, Behaviour]:
    """A copy of ``base`` with some keys changed; use ``_`` for ``-`` (nvidia_smi_topo=HANG)."""
    out = dict(base)
    for key, value in changes.items():
        out[key.replace("_", "-")] = value
    return out


SCENARIOS: dict[str, dict[str, Behaviour]] = {
    "healthy": dict(HEALTHY),
    # NVRM Xid 79 "GPU has fallen off the bus" in the kernel log (kernel-log/11.txt).
    "xid79": scenario(dmesg="kernel-log/11.txt", journalctl="kernel-log/11.txt"),
    # mlx5_10 port 1: State Down, Physical state Polling, InfiniBand: no link partner (ibstat/08.txt).
    # (An administratively Disabled port, as mlx5_2 in ibstat/05.txt, is not a fault: collectors.healthy.)
    "ib-down": scenario(ibstat="ibstat/08.txt"),
    # /dev/shm 98 % used (constructed from df/06.txt; see SOURCES.jsonl).
    "shm-full": scenario(df="df/06-shm98.constructed.txt"),
    # ibstat never returns (a wedged HCA driver); everything else healthy.
    "ibstat-hang": scenario(ibstat=HANG),
}


# --- the standard layout ---------------------------------------------------------------------------


@dataclass
class NodeSpec:
    name: str
    scenario: Scenario = field(default_factory=lambda: dict(HEALTHY))
    kind: str = "sshd"             # "sshd" | "bastion" | "unreachable" | "silent"
    wrong_host_key: bool = False   # known_hosts holds a different key for this node
    via: str | None = None         # name of a bastion node: reached with ProxyJump through it


def standard_specs() -> list[NodeSpec]:
    """8 sshd nodes (one per scenario and the odd cases), a bastion, and two dead nodes."""
    return [
        NodeSpec("node01", SCENARIOS["healthy"]),
        NodeSpec("node02", SCENARIOS["xid79"]),
        NodeSpec("node03", SCENARIOS["ib-down"]),
        NodeSpec("node04", SCENARIOS["shm-full"]),
        NodeSpec("node05", SCENARIOS["ibstat-hang"]),
        NodeSpec("node06", SCENARIOS["healthy"], wrong_host_key=True),
        NodeSpec("node07", SCENARIOS["healthy"], via="bastion"),
        NodeSpec("node08", SCENARIOS["healthy"]),
        NodeSpec("bastion", {}, kind="bastion"),
        NodeSpec("node09", kind="unreachable"),
        NodeSpec("node10", kind="silent"),
    ]


# --- the cluster -----------------------------------------------------------------------------------


class ClusterError(RuntimeError):
    pass


@dataclass
class Node:
    spec: NodeSpec
    host: str
    port: int
    dir: Path
    host_key: Path | None = None          # private key file (sshd's HostKey)
    known_key: str = ""                   # "ssh-ed25519 AAAA..." written to known_hosts
    proc: subprocess.Popen | None = None
    sock: socket.socket | None = None     # unreachable/silent nodes hold their port with this

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def runs_sshd(self) -> bool:
        return self.kind in ("sshd", "bastion")

    @property
    def log(self) -> Path:
        return self.dir / "sshd.log"

    @property
    def bin(self) -> Path:
        return self.dir / "bin"

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""


_STANDIN = r"""#!/bin/sh
# Stand-in for a node tool on a fake gpu-triage test node (generated by tests/cluster.py).
# It prints the real captured output the node's scenario names; see tests/cluster.py.
tool=${0##*/}
bin=${0%/*}
node=${bin%/*}
key=$tool
if [ "$tool" = nvidia-smi ]; then
    case " $* " in
        *" topo "*) key=nvidia-smi-topo ;;
        *" --query-"*) key=nvidia-smi-query ;;
        *" -q "*|*" --query "*|*" -q="*) key=nvidia-smi-q ;;
        *) key=nvidia-smi ;;
    esac
fi
printf '%s\n' "$tool $*" >> "$node/calls.log"
d=$node/scenario/$key
if [ ! -d "$d" ]; then
    echo "$tool: [fake node ${node##*/}] no captured output for '$tool $*' (scenario key '$key' not set)" >&2
    exit 1
fi
if [ -e "$d/hang" ]; then
    echo $$ > "$node/run/hang.$$"
    exec sleep 2147483647
fi
[ -f "$d/stdout" ] && cat "$d/stdout"
[ -f "$d/stderr" ] && cat "$d/stderr" >&2
exit "$(cat "$d/exit")"
"""


_BASE_BIN: Path | None = None
_BASE_BIN_LOCK = threading.Lock()


def base_bin() -> Path:
    """Links to every system program except the stand-in names, so that MISSING really means 127.

    Built once per test process (some 1,300 links; slow on some file systems) and shared by all
    clusters of the process; removed when the process exits.
    """
    global _BASE_BIN
    with _BASE_BIN_LOCK:
        if _BASE_BIN is not None and _BASE_BIN.is_dir():
            return _BASE_BIN
        base = Path(tempfile.mkdtemp(prefix="gpu-triage-base-bin-")).resolve()
        seen: set[str] = set()
        for d in SYSTEM_PATH.split(":"):
            try:
                names = sorted(os.listdir(d))
            except OSError:
                continue
            for name in names:
                if name in seen or name in TOOLS:
                    continue
                target = os.path.join(d, name)
                if os.path.isfile(target) and os.access(target, os.X_OK):
                    seen.add(name)
                    os.symlink(target, base / name)
        atexit.register(shutil.rmtree, base, True)
        _BASE_BIN = base
        return base


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _descendants(pid: int) -> list[int]:
    """Pids of all processes below ``pid`` (from /proc), deepest last."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _kill(pid: int, sig: int = signal.SIGTERM) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def socket_owner(local_port: int, local_host: str = "127.0.0.1") -> int | None:
    """The pid owning the TCP socket bound to ``local_host:local_port`` (from /proc/net/tcp)."""
    want = f"{socket.inet_aton(local_host)[::-1].hex().upper()}:{local_port:04X}"
    inodes = set()
    with open("/proc/net/tcp") as fh:
        next(fh)
        for line in fh:
            parts = line.split()
            if parts[1] == want:
                inodes.add(parts[9])
    if not inodes:
        return None
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{entry}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                return int(entry)
    return None


class Cluster:
    """Start with :meth:`start` (or ``with Cluster(specs) as c:``); stop with :meth:`stop`."""

    def __init__(self, specs: Iterable[NodeSpec] | None = None, *, root: str | Path | None = None,
                 start_timeout: float = 15.0, connect_timeout: int = 5, first_address: int = 2):
        self.specs = list(specs if specs is not None else standard_specs())
        names = [s.name for s in self.specs]
        if len(set(names)) != len(names):
            raise ValueError(f"node names must be unique: {names}")
        for spec in self.specs:
            if spec.kind not in ("sshd", "bastion", "unreachable", "silent"):
                raise ValueError(f"{spec.name}: unknown kind {spec.kind!r}")
            if spec.via and spec.via not in names:
                raise ValueError(f"{spec.name}: via={spec.via!r} is not a node of this cluster")
            for key, value in spec.scenario.items():
                if key not in KEY_TO_TOOL:
                    raise ValueError(f"{spec.name}: unknown scenario key {key!r}; known: {sorted(KEY_TO_TOOL)}")
                if value == REAL:
                    if key != KEY_TO_TOOL[key] or not shutil.which(key, path=SYSTEM_PATH):
                        raise ValueError(f"{spec.name}: {key!r}=REAL needs {key} on this machine ({SYSTEM_PATH})")
                    continue
                if isinstance(value, (str, Path)) and str(value) not in (HANG, FAIL, MISSING):
                    path = Path(value) if Path(value).is_absolute() else FIXTURES / value
                    if not path.is_file():
                        raise ValueError(f"{spec.name}: fixture {path} for {key!r} does not exist")
        if len(self.specs) + first_address > 254:
            raise ValueError("at most 252 nodes fit in 127.0.0.2-127.0.0.254")
        self._root_arg = root
        self.start_timeout = start_timeout
        self.connect_timeout = connect_timeout
        self.first_address = first_address
        self.user = getpass.getuser()
        self.root: Path | None = None
        self.nodes: dict[str, Node] = {}
        self.started_seconds: float | None = None
        self.base_bin: Path | None = None

    # -- paths --
    @property
    def ssh_config(self) -> Path:
        return self._need_root() / "ssh_config"

    @property
    def known_hosts(self) -> Path:
        return self._need_root() / "known_hosts"

    @property
    def client_key(self) -> Path:
        return self._need_root() / "client_ed25519"

    def _need_root(self) -> Path:
        if self.root is None:
            raise ClusterError("the cluster is not started")
        return self.root

    def node(self, name: str) -> Node:
        try:
            return self.nodes[name]
        except KeyError:
            raise KeyError(f"no node {name!r}; nodes: {', '.join(self.nodes)}") from None

    def names(self, kind: str | None = None) -> list[str]:
        return [n.name for n in self.nodes.values() if kind is None or n.kind == kind]

    # -- lifecycle --
    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> Cluster:
        started = time.monotonic()
        if self._root_arg is not None:
            self.root = Path(self._root_arg).resolve()
            self.root.mkdir(parents=True, exist_ok=True)
        else:
            self.root = Path(tempfile.mkdtemp(prefix="gpu-triage-cluster-")).resolve()
        try:
            self._prepare()
            self._start_daemons()
        except BaseException:
            self.stop()
            raise
        self.started_seconds = round(time.monotonic() - started, 3)
        return self

    def _prepare(self) -> None:
        root = self.root
        assert root is not None
        if not Path(SSHD).exists():
            raise ClusterError(f"{SSHD} not found: install the Debian package openssh-server "
                               "(apt-get install openssh-server), as .ci/run does")
        if os.geteuid() == 0 and not Path("/run/sshd").is_dir():
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege-separation dir

        for i, spec in enumerate(self.specs):
            host = f"127.0.0.{self.first_address + i}"
            ndir = root / "nodes" / spec.name
            (ndir / "run").mkdir(parents=True)
            self.nodes[spec.name] = Node(spec, host, 0, ndir)

        # Keys: the client pair, one host key per node, one unrelated key per wrong-key node.
        jobs = {"client": self.client_key}
        for node in self.nodes.values():
            jobs[f"host:{node.name}"] = node.dir / "ssh_host_ed25519_key"
            if node.spec.wrong_host_key or not node.runs_sshd:
                jobs[f"other:{node.name}"] = node.dir / "not_the_host_key"
        procs = {name: subprocess.Popen([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", f"gpu-triage-test-{name}",
                                         "-f", str(path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                 for name, path in jobs.items()}
        for name, proc in procs.items():
            out = proc.communicate()[0]
            if proc.returncode:
                raise ClusterError(f"ssh-keygen for {name} failed: {out.decode(errors='replace')}")
        (root / "authorized_keys").write_text(Path(f"{self.client_key}.pub").read_text())
        for node in self.nodes.values():
            node.host_key = node.dir / "ssh_host_ed25519_key"
            pub = node.host_key if node.runs_sshd and not node.spec.wrong_host_key else node.dir / "not_the_host_key"
            node.known_key = " ".join(Path(f"{pub}.pub").read_text().split()[:2])

        self.base_bin = base_bin()
        (root / "standin").write_text(_STANDIN)
        (root / "standin").chmod(0o755)
        for node in self.nodes.values():
            self._write_scenario(node)

    def _write_scenario(self, node: Node) -> None:
        node.bin.mkdir()
        (node.dir / "calls.log").touch()
        tools = set()
        for key, behaviour in node.spec.scenario.items():
            if behaviour == MISSING:
                continue
            if behaviour == REAL:
                os.symlink(shutil.which(key, path=SYSTEM_PATH), node.bin / key)
                continue
            tools.add(KEY_TO_TOOL[key])
            kdir = node.dir / "scenario" / key
            kdir.mkdir(parents=True)
            code = 0
            if behaviour == HANG:
                (kdir / "hang").touch()
            elif behaviour == FAIL:
                (kdir / "stderr").write_text(f"{KEY_TO_TOOL[key]}: failed on fake node {node.name} "
                                             "(scenario behaviour 'fail')\n")
                code = 1
            else:
                out = behaviour if isinstance(behaviour, Output) else Output(stdout=behaviour)
                for stream, path, text in (("stdout", out.stdout, out.stdout_text),
                                           ("stderr", out.stderr, out.stderr_text)):
                    if path is not None:
                        src = Path(path) if Path(path).is_absolute() else FIXTURES / path
                        shutil.copyfile(src, kdir / stream)
                    elif text is not None:
                        (kdir / stream).write_text(text)
                code = out.exit
            (kdir / "exit").write_text(f"{code}\n")
        for tool in sorted(tools):
            os.symlink(self._need_root() / "standin", node.bin / tool)

    def _sshd_config(self, node: Node) -> str:
        root = self._need_root()
        bastion = node.kind == "bastion"
        path = f"{node.bin}:{self.base_bin}"
        return "\n".join([
            f"# Fake gpu-triage node {node.name} ({node.kind}), written by tests/cluster.py.",
            "# Absolute paths only: sshd re-executes itself for every connection.",
            f"ListenAddress {node.host}:{node.port}",
            f"HostKey {node.host_key}",
            f"PidFile {node.dir / 'sshd.pid'}",
            f"AuthorizedKeysFile {root / 'authorized_keys'}",
            "StrictModes no",
            "UsePAM no",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "AuthenticationMethods publickey",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "HostbasedAuthentication no",
            "PermitUserEnvironment no",
            "UseDNS no",
            "PrintMotd no",
            "PrintLastLog no",
            "X11Forwarding no",
            "AllowAgentForwarding no",
            f"AllowTcpForwarding {'yes' if bastion else 'no'}",
            "MaxStartups 200",
            "MaxSessions 64",
            "LoginGraceTime 20",
            # DEBUG1 makes the bastion log every direct-tcpip (ProxyJump) forward it serves.
            f"LogLevel {'DEBUG1' if bastion else 'VERBOSE'}",
            f"SetEnv PATH={path} SHLVL=1 GPU_TRIAGE_FAKE_NODE={node.name}",
            "Subsystem sftp internal-sftp",
            "",
        ])

    def _start_daemons(self) -> None:
        for node in self.nodes.values():
            if node.kind == "unreachable":
                # Bound, never listening: the port stays ours and every connection is refused.
                node.sock = socket.socket()
                node.sock.bind((node.host, 0))
                node.port = node.sock.getsockname()[1]
            elif node.kind == "silent":
                # Accepts TCP (the kernel completes the handshake) and never sends an SSH banner.
                node.sock = socket.socket()
                node.sock.bind((node.host, 0))
                node.sock.listen(64)
                node.port = node.sock.getsockname()[1]
        sshd_nodes = [n for n in self.nodes.values() if n.runs_sshd]
        for attempt in range(3):
            for node in sshd_nodes:
                if node.proc is None:
                    self._spawn(node)
            with ThreadPoolExecutor(max_workers=max(1, len(sshd_nodes))) as pool:
                failures = [f for f in pool.map(self._wait_ready, sshd_nodes) if f]
            retry = [n for n, why in failures if "in use" in why or "Cannot bind" in why]
            if not failures or len(retry) != len(failures) or attempt == 2:
                break
            for node in retry:  # another test run took the port between our probe and sshd's bind
                node.proc = None
        if failures:
            raise ClusterError("sshd did not start:\n" + "\n".join(f"--- {n.name} ({n.host}:{n.port}): {why}"
                                                                  for n, why in failures))
        self._write_client_files()

    def _spawn(self, node: Node) -> None:
        node.port = _free_port(node.host)
        (node.dir / "sshd_config").write_text(self._sshd_config(node))
        with open(node.log, "ab") as log:
            node.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(node.dir / "sshd_config")],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log)

    def _wait_ready(self, node: Node) -> tuple[Node, str] | None:
        """None once the port answers with an SSH banner; else (node, why)."""
        assert node.proc is not None
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if node.proc.poll() is not None:
                return node, f"sshd exited with {node.proc.returncode}; its stderr:\n{node.log_text().strip()}"
            try:
                with socket.create_connection((node.host, node.port), timeout=1) as s:
                    if s.recv(64).startswith(b"SSH-2.0-"):
                        return None
            except OSError:
                pass
            time.sleep(0.02)
        return node, (f"no SSH banner on {node.host}:{node.port} within {self.start_timeout}s; "
                      f"its stderr:\n{node.log_text().strip()}")

    def _write_client_files(self) -> None:
        lines = ["# OpenSSH client config for the fake gpu-triage cluster (tests/cluster.py)."]
        for node in self.nodes.values():
            lines += [
                f"Host {node.name}",
                f"    HostName {node.host}",
                f"    Port {node.port}",
                f"    User {self.user}",
                f"    IdentityFile {self.client_key}",
                "    IdentitiesOnly yes",
                f"    UserKnownHostsFile {self.known_hosts}",
                "    GlobalKnownHostsFile /dev/null",
                "    StrictHostKeyChecking yes",
                "    BatchMode yes",
                f"    ConnectTimeout {self.connect_timeout}",
            ]
            if node.spec.via:
                lines.append(f"    ProxyJump {node.spec.via}")
            lines.append("")
        self.ssh_config.write_text("\n".join(lines))
        self.known_hosts.write_text("".join(f"[{n.host}]:{n.port} {n.known_key}\n" for n in self.nodes.values()))

    def stop(self) -> None:
        """Stop every sshd (and what runs under it), close the held sockets, remove the directory."""
        for node in self.nodes.values():
            if node.sock is not None:
                node.sock.close()
                node.sock = None
            if node.proc is not None and node.proc.poll() is None:
                below = _descendants(node.proc.pid)
                node.proc.terminate()
                for pid in below:
                    _kill(pid)
            # Hung stand-ins whose session already ended were re-parented; they left their pid.
            for pidfile in (node.dir / "run").glob("hang.*") if (node.dir / "run").is_dir() else ():
                try:
                    pid = int(pidfile.read_text().strip())
                except (OSError, ValueError):
                    continue
                if _is_our_sleep(pid, node.dir):
                    _kill(pid, signal.SIGKILL)
        for node in self.nodes.values():
            if node.proc is not None:
                try:
                    node.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    node.proc.kill()
                    node.proc.wait(timeout=5)
        if self.root is not None and self._root_arg is None and not os.environ.get("GPU_TRIAGE_KEEP_CLUSTER"):
            shutil.rmtree(self.root, ignore_errors=True)

    # -- helpers for tests --
    def ssh(self, name: str, command: str, *options: str, timeout: float = 30) -> subprocess.CompletedProcess:
        """Run ``command`` on a node with the OpenSSH client and this cluster's config."""
        return subprocess.run(["ssh", "-F", str(self.ssh_config), *options, name, command],
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False)

    def calls(self, name: str) -> list[str]:
        """The stand-in invocations seen on a node, e.g. ``["nvidia-smi topo -m", "ibstat"]``."""
        return self.node(name).dir.joinpath("calls.log").read_text().splitlines()

    def hanging_pids(self, name: str) -> list[int]:
        out = []
        for pidfile in (self.node(name).dir / "run").glob("hang.*"):
            pid = int(pidfile.read_text().strip())
            if _is_our_sleep(pid, self.node(name).dir):
                out.append(pid)
        return out

    def forwarded(self, bastion: str = "bastion") -> list[tuple[str, int]]:
        """(host, port) of every direct-tcpip (ProxyJump) forward the bastion's sshd opened."""
        pattern = re.compile(r"server_request_direct_tcpip: originator \S+ port \d+, target (\S+) port (\d+)")
        return [(m.group(1), int(m.group(2))) for m in pattern.finditer(self.node(bastion).log_text())]

    def connections_from(self, name: str) -> list[tuple[str, int]]:
        """(address, source port) of every TCP connection the node's sshd accepted, from its log."""
        pattern = re.compile(r"Connection from (\S+) port (\d+) on ")
        return [(m.group(1), int(m.group(2))) for m in pattern.finditer(self.node(name).log_text())]

    def sshd_pid(self, name: str) -> int:
        node = self.node(name)
        if node.proc is None:
            raise ClusterError(f"{name} runs no sshd (kind {node.kind})")
        return node.proc.pid

    def describe(self) -> str:
        return "\n".join(f"{n.name:8} {n.kind:11} {n.host}:{n.port}"
                         + (" wrong-host-key" if n.spec.wrong_host_key else "")
                         + (f" via {n.spec.via}" if n.spec.via else "") for n in self.nodes.values())


def _is_our_sleep(pid: int, node_dir: Path) -> bool:
    """True if ``pid`` is still the ``sleep`` a HANG stand-in exec'd (pids get reused)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
    except OSError:
        return False
    return bool(argv) and argv[0].endswith(b"sleep") and (node_dir / "run" / f"hang.{pid}").exists()


def ssh_command(cluster: Cluster, name: str, command: str) -> str:
    """A shell line to run ``command`` on a node by hand (handy when debugging a failing test)."""
    return f"ssh -F {shlex.quote(str(cluster.ssh_config))} {name} {shlex.quote(command)}"
