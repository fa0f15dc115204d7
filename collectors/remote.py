"""Run the declared collector commands on nodes over SSH (paramiko), in parallel.

* The OpenSSH client config is honoured (``~/.ssh/config`` or ``ssh_config=``): Host, HostName,
  User, Port, IdentityFile, UserKnownHostsFile, StrictHostKeyChecking, ConnectTimeout, ProxyJump.
* Host keys are verified against known_hosts; an unknown or changed key is refused, and the
  message says how to fix it.
* One connection per node, reused for all its collectors; bounded concurrency across nodes.
* Every command is wrapped in ``timeout`` on the node and guarded by a deadline here, so a ``df``
  stuck on a dead NFS mount costs one collector, not the node and not the job.
* A result per node, never an exception for one bad node: ok / unreachable / auth-failed /
  timeout / partial, with the reason in ``detail``.

paramiko, socket and OS errors are mapped into :class:`SSHError` subclasses in one place
(:func:`_mapped`). No user text reaches a remote shell: commands come from collectors only, and
node names are validated by the resolvers before they get here.
"""

from __future__ import annotations

import getpass
import os
import shlex
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

from collectors.registry import Collector

# --- errors -------------------------------------------------------------------------------------


class SSHError(Exception):
    status = "unreachable"

    def __init__(self, host: str, port: int, message: str):
        self.host, self.port = host, port
        super().__init__(message)


class Unreachable(SSHError):
    status = "unreachable"


class AuthFailed(SSHError):
    status = "auth-failed"


class HostKeyMismatch(AuthFailed):
    """The node's host key is unknown or differs from known_hosts (reported as auth-failed)."""


class Timeout(SSHError):
    status = "timeout"


@contextmanager
def _mapped(host: str, port: int, known_hosts: Sequence[str] = ()) -> Iterator[None]:
    import paramiko

    where = f"{host}:{port}"
    kh = ", ".join(known_hosts) or "~/.ssh/known_hosts"
    try:
        yield
    except paramiko.BadHostKeyException as exc:
        raise HostKeyMismatch(host, port, (
            f"{where}: the host key changed ({exc.key.get_name()} {exc.key.get_fingerprint().hex()} does not "
            f"match {kh}). If the node was reinstalled, check the new key with the admins, then "
            f"`ssh-keygen -R '[{host}]:{port}'` and connect once with ssh to accept it")) from exc
    except paramiko.AuthenticationException as exc:
        raise AuthFailed(host, port, f"{where}: authentication failed ({exc}); check User and IdentityFile "
                                     "in the SSH config, or load the key into ssh-agent") from exc
    except paramiko.SSHException as exc:
        text = str(exc)
        if "not found in known_hosts" in text:
            raise HostKeyMismatch(host, port, (
                f"{where}: unknown host key (not in {kh}). Verify and add it: "
                f"`ssh-keyscan -p {port} {host} >> ~/.ssh/known_hosts` after checking the fingerprint")) from exc
        if any(w in text.lower() for w in ("timed out", "timeout", "protocol banner", "no existing session")):
            raise Timeout(host, port, f"{where}: SSH handshake timed out; is sshd overloaded?") from exc
        raise Unreachable(host, port, f"{where}: SSH error: {text}") from exc
    except (socket.timeout, TimeoutError) as exc:
        raise Timeout(host, port, f"{where}: connection timed out; check the node is up and the "
                                  "port is open (ConnectTimeout in the SSH config sets the limit)") from exc
    except socket.gaierror as exc:
        raise Unreachable(host, port, f"{where}: cannot resolve the name ({exc.strerror}); check HostName "
                                      "in the SSH config") from exc
    except (ConnectionRefusedError, paramiko.ssh_exception.NoValidConnectionsError) as exc:
        raise Unreachable(host, port, f"{where}: connection refused; is sshd running and the Port right?") from exc
    except ConnectionResetError as exc:
        raise Unreachable(host, port, f"{where}: the connection was reset during the handshake") from exc
    except OSError as exc:
        raise Unreachable(host, port, f"{where}: {exc.strerror or exc}") from exc
    except EOFError as exc:
        raise Unreachable(host, port, f"{where}: the connection closed during the handshake") from exc


# --- targets from the SSH config ------------------------------------------------------------------


@dataclass
class Target:
    alias: str
    hostname: str
    port: int = 22
    user: str | None = None
    identity_files: list[str] = field(default_factory=list)
    known_hosts: list[str] = field(default_factory=list)
    strict: bool = True
    connect_timeout: float = 10.0
    proxy_jump: str | None = None


def quiet_paramiko() -> None:
    """paramiko logs handshake failures as tracebacks on stderr; the node's status says it instead."""
    import logging

    logger = logging.getLogger("paramiko")
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
        logger.propagate = False


def _expand(path: str) -> str:
    return os.path.expanduser(os.path.expandvars(path))


class SSHSettings:
    """Read an OpenSSH client config once; ``target(alias)`` applies it like ``ssh`` would."""

    def __init__(self, config_path: str | None = None, *, connect_timeout: float = 10.0,
                 user: str | None = None, identity_file: str | None = None, port: int | None = None):
        import paramiko

        self.path = config_path
        self.config = paramiko.SSHConfig()
        default = Path("~/.ssh/config").expanduser()
        path = Path(config_path).expanduser() if config_path else default
        if config_path and not path.is_file():
            raise FileNotFoundError(f"SSH config {path} does not exist; check --ssh-config")
        if path.is_file():
            self.config = paramiko.SSHConfig.from_path(str(path))
        self.connect_timeout = connect_timeout
        self.overrides = {"user": user, "identity_file": identity_file, "port": port}

    def target(self, alias: str) -> Target:
        opts = self.config.lookup(alias)
        known = [_expand(p) for p in opts.get("userknownhostsfile", "").split()] or \
            [str(Path("~/.ssh/known_hosts").expanduser())]
        strict = str(opts.get("stricthostkeychecking", "yes")).lower() not in ("no", "off", "accept-new")
        timeout = float(opts.get("connecttimeout", self.connect_timeout))
        identity = [_expand(p) for p in opts.get("identityfile", [])]
        if self.overrides["identity_file"]:
            identity = [_expand(self.overrides["identity_file"])]
        return Target(alias=alias, hostname=opts.get("hostname", alias),
                      port=int(self.overrides["port"] or opts.get("port", 22)),
                      user=self.overrides["user"] or opts.get("user") or getpass.getuser(),
                      identity_files=[p for p in identity if Path(p).exists()], known_hosts=known,
                      strict=strict, connect_timeout=timeout, proxy_jump=opts.get("proxyjump"))


# --- one connection ---------------------------------------------------------------------------

MAX_SESSIONS = 8  # channels at once on one connection; sshd allows 10 by default (MaxSessions)


MAX_OUTPUT = 32 * 1024 * 1024  # bytes of one collector's stdout kept (its end: the newest lines)
MAX_STDERR = 1024 * 1024


@dataclass
class _Running:
    index: int
    name: str
    command: str
    chan: object
    started: float
    deadline: float
    out: bytearray = field(default_factory=bytearray)
    err: bytearray = field(default_factory=bytearray)
    dropped: int = 0  # bytes of stdout dropped from the front (only the last MAX_OUTPUT are kept)


@dataclass
class CommandResult:
    name: str
    command: str
    exit: int | None
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False

    @property
    def not_found(self) -> bool:
        return self.exit == 127


class Connection:
    """A paramiko client to one node (through its ProxyJump chain when configured)."""

    def __init__(self, settings: SSHSettings, alias: str):
        self.settings = settings
        self.target = settings.target(alias)
        self._clients: list = []
        self.client = None

    def open(self) -> "Connection":
        quiet_paramiko()
        sock = None
        if self.target.proxy_jump:
            hops = [h.strip() for h in self.target.proxy_jump.split(",") if h.strip() and h.strip() != "none"]
            for hop in hops:
                jump = self.settings.target(hop.split("@")[-1])
                client = self._connect(jump, sock)
                self._clients.append(client)
                transport = client.get_transport()
                with _mapped(self.target.hostname, self.target.port, self.target.known_hosts):
                    sock = transport.open_channel("direct-tcpip", (self.target.hostname, self.target.port),
                                                  ("127.0.0.1", 0), timeout=self.target.connect_timeout)
        self.client = self._connect(self.target, sock)
        return self

    def _connect(self, target: Target, sock):
        import paramiko

        client = paramiko.SSHClient()
        with _mapped(target.hostname, target.port, target.known_hosts):
            for kh in target.known_hosts:
                if Path(kh).is_file():
                    client.load_host_keys(kh)
            client.set_missing_host_key_policy(paramiko.RejectPolicy() if target.strict
                                               else paramiko.WarningPolicy())
            client.connect(target.hostname, port=target.port, username=target.user,
                           key_filename=target.identity_files or None, timeout=target.connect_timeout,
                           banner_timeout=target.connect_timeout, auth_timeout=target.connect_timeout,
                           sock=sock, allow_agent=True, look_for_keys=not target.identity_files)
        return client

    def run(self, name: str, command: str, timeout: float) -> CommandResult:
        """Run one fixed command under ``timeout`` on the node; never raises for the command's failures."""
        return self.run_many([(name, command, timeout)])[0]

    def run_many(self, jobs: Sequence[tuple[str, str, float]], parallel: int = MAX_SESSIONS) -> list[CommandResult]:
        """Run several fixed commands over this one connection, up to ``parallel`` channels at once
        (sshd's MaxSessions is 10 by default). Results come back in the order given."""
        results: list[CommandResult | None] = [None] * len(jobs)
        pending = list(enumerate(jobs))
        active: list[_Running] = []
        transport = self.client.get_transport()
        while pending or active:
            while pending and len(active) < parallel:
                index, (name, command, timeout) = pending.pop(0)
                wrapped = f"timeout -k 3 {int(timeout)} sh -c {shlex.quote(command)}"
                with _mapped(self.target.hostname, self.target.port):
                    chan = transport.open_session(timeout=self.target.connect_timeout)
                    chan.exec_command(wrapped)
                now = time.monotonic()
                # the node's `timeout` should win; this deadline catches a command stuck in D state
                active.append(_Running(index, name, command, chan, now, now + timeout + 8))
            progressed = False
            for run in list(active):
                chan = run.chan
                while chan.recv_ready():
                    run.out += chan.recv(65536)
                    if len(run.out) > 2 * MAX_OUTPUT:  # a flooding node: keep its last MAX_OUTPUT bytes
                        run.dropped += len(run.out) - MAX_OUTPUT
                        del run.out[:len(run.out) - MAX_OUTPUT]
                    progressed = True
                while chan.recv_stderr_ready():
                    run.err += chan.recv_stderr(65536)
                    if len(run.err) > MAX_STDERR:
                        del run.err[:len(run.err) - MAX_STDERR]
                    progressed = True
                done = chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready()
                late = time.monotonic() > run.deadline
                if done or late:
                    code = None if late and not done else chan.recv_exit_status()
                    chan.close()
                    if len(run.out) > MAX_OUTPUT:
                        run.dropped += len(run.out) - MAX_OUTPUT
                        del run.out[:len(run.out) - MAX_OUTPUT]
                    results[run.index] = CommandResult(
                        run.name, run.command, code, run.out.decode("utf-8", "replace"),
                        _dropped_note(run.dropped) + run.err.decode("utf-8", "replace"),
                        round(time.monotonic() - run.started, 3), late and not done or code == 124)
                    active.remove(run)
                    progressed = True
            if not progressed:
                time.sleep(0.003)
        return [r for r in results if r is not None]

    def close(self) -> None:
        for client in ([self.client] if self.client else []) + self._clients[::-1]:
            try:
                client.close()
            except Exception:  # noqa: BLE001 - closing a dead connection is not an error
                pass


# --- fan-out ----------------------------------------------------------------------------------


@dataclass
class NodeResult:
    node: str
    status: str = "ok"
    detail: str = ""
    results: list[CommandResult] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict:
        return {"node": self.node, "status": self.status, "detail": self.detail}


Progress = Callable[[str, str, str], None]  # (node, event, text)


def _summarise(node: NodeResult) -> None:
    timed = [r.name for r in node.results if r.timed_out]
    missing = [r.name for r in node.results if r.not_found]
    failed = [r.name for r in node.results if r.exit not in (0, None, 127) and not r.timed_out]
    if node.results and len(timed) == len(node.results):
        node.status, node.detail = "timeout", f"every collector timed out ({', '.join(timed)})"
        return
    parts = []
    if timed:
        parts.append(f"timed out: {', '.join(timed)}")
    if missing:
        parts.append(f"command not found: {', '.join(missing)}")
    if failed:
        parts.append(f"non-zero exit: {', '.join(failed)}")
    node.status = "partial" if (timed or missing or failed) else "ok"
    node.detail = "; ".join(parts)


def collect_node(settings: SSHSettings, node: str, collectors: Sequence[Collector],
                 progress: Progress | None = None) -> NodeResult:
    result = NodeResult(node)
    started = time.monotonic()
    conn = Connection(settings, node)
    try:
        if progress:
            progress(node, "connecting", "")
        conn.open()
        if progress:
            progress(node, "running", ",".join(c.name for c in collectors))
        result.results.extend(conn.run_many([(c.name, c.command, c.timeout) for c in collectors]))
        _summarise(result)
    except SSHError as exc:
        result.status, result.detail = exc.status, str(exc)
    finally:
        conn.close()
        result.seconds = round(time.monotonic() - started, 3)
        if progress:
            progress(node, "done", result.status)
    return result


def collect_nodes(nodes: Sequence[str], collectors: Sequence[Collector], *, settings: SSHSettings,
                  concurrency: int = 32, progress: Progress | None = None) -> dict[str, NodeResult]:
    """Collect from every node in parallel (at most ``concurrency`` connections at once)."""
    results: dict[str, NodeResult] = {}
    lock = threading.Lock()

    def one(node: str) -> None:
        res = collect_node(settings, node, collectors, progress)
        with lock:
            results[node] = res

    with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(nodes)))) as pool:
        list(pool.map(one, nodes))
    return {node: results[node] for node in nodes}


def _dropped_note(dropped: int) -> str:
    return (f"gpu-triage: the output was over {MAX_OUTPUT >> 20} MB; its first {dropped} bytes were dropped "
            "and the last part kept\n") if dropped else ""


def _run_bounded(command: str, timeout: float) -> tuple[int | None, bytes, bytes, int, bool]:
    """Run ``sh -c command`` here, keeping only the last MAX_OUTPUT bytes of stdout (and MAX_STDERR
    of stderr) however much it prints; killed at ``timeout``."""
    import selectors

    proc = subprocess.Popen(["sh", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err, dropped = bytearray(), bytearray(), 0
    deadline = time.monotonic() + timeout
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, "out")
    sel.register(proc.stderr, selectors.EVENT_READ, "err")
    open_streams = 2
    timed_out = False
    while open_streams:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            proc.kill()
            break
        for key, _ in sel.select(timeout=min(left, 0.5)):
            chunk = os.read(key.fileobj.fileno(), 65536)
            if not chunk:
                sel.unregister(key.fileobj)
                open_streams -= 1
                continue
            if key.data == "out":
                out += chunk
                if len(out) > 2 * MAX_OUTPUT:
                    dropped += len(out) - MAX_OUTPUT
                    del out[:len(out) - MAX_OUTPUT]
            else:
                err += chunk
                if len(err) > MAX_STDERR:
                    del err[:len(err) - MAX_STDERR]
    sel.close()
    if len(out) > MAX_OUTPUT:
        dropped += len(out) - MAX_OUTPUT
        del out[:len(out) - MAX_OUTPUT]
    try:
        code = proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    return (None if timed_out else code), bytes(out), bytes(err), dropped, timed_out


def collect_local(collectors: Sequence[Collector], node: str | None = None) -> NodeResult:
    """Run the collectors on this machine (``gpu-triage collect --local``)."""
    result = NodeResult(node or socket.gethostname().split(".")[0])
    started = time.monotonic()
    for col in collectors:
        t0 = time.monotonic()
        if col.local is not None:
            try:
                out, code, err = col.local(), 0, ""
            except Exception as exc:  # noqa: BLE001 - a probe failure is a result, not a crash
                out, code, err = "", 1, f"{col.name}: {exc.__class__.__name__}: {exc}"
            result.results.append(CommandResult(col.name, f"(in process) {col.command[:60]}", code, out, err,
                                                round(time.monotonic() - t0, 3)))
            continue
        code, out, err, dropped, timed_out = _run_bounded(col.command, col.timeout)
        result.results.append(CommandResult(col.name, col.command, code, out.decode("utf-8", "replace"),
                                            _dropped_note(dropped) + err.decode("utf-8", "replace"),
                                            round(time.monotonic() - t0, 3), timed_out))
    _summarise(result)
    result.seconds = round(time.monotonic() - started, 3)
    return result


def login_runner(settings: SSHSettings, login: str, timeout: float = 30.0):
    """A runner for :class:`collectors.resolve.SlurmResolver` that runs on a login node over SSH."""

    def run(argv: Sequence[str]) -> tuple[int, str, str]:
        conn = Connection(settings, login)
        try:
            conn.open()
            res = conn.run(argv[0], " ".join(shlex.quote(a) for a in argv), timeout)
        finally:
            conn.close()
        return (124 if res.timed_out else (res.exit if res.exit is not None else 1)), res.stdout, res.stderr

    return run
