"""Resolve a job or a node expression to the nodes to collect from.

* ``expand_hostlist("gpu[01-04,07],gpu-b[1-2]")`` expands Slurm hostlist syntax;
* :class:`SlurmResolver` asks ``scontrol show job`` (then ``sacct`` for finished jobs) for the
  job's nodes, state and log paths, locally or on a configured login node;
* :func:`load_inventory` reads a static YAML inventory (job or cluster name -> nodes and SSH
  settings) for teams without a scheduler.

Job IDs and node names are validated before anything runs: no user text reaches a shell, and
commands are built as argument lists from validated values only.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

JOB_ID = re.compile(r"^(\d{1,12})(?:_(\d{1,9}))?(?:\.(\d{1,9}|batch|extern))?$")
NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
_BRACKET = re.compile(r"\[([^\[\]]+)\]")


class ResolveError(Exception):
    """The job or nodes cannot be resolved; the message says what to change."""


def parse_job_id(text: str) -> str:
    """Accept ``123``, ``job-123``, ``123_4`` (array task); return the canonical id or raise."""
    raw = text.strip()
    if raw.lower().startswith("job-"):
        raw = raw[4:]
    if raw.lower().startswith("job"):
        raw = raw[3:]
    m = JOB_ID.match(raw)
    if not m:
        raise ResolveError(f"{text!r} is not a Slurm job ID; give digits such as 123 or job-123 "
                           "(an array task as 123_4)")
    return m.group(1) + (f"_{m.group(2)}" if m.group(2) else "")


def check_node(name: str) -> str:
    if not NODE_NAME.match(name):
        raise ResolveError(f"{name!r} is not a valid node name (letters, digits, '.', '_' and '-')")
    return name


def _split_top(expr: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts, depth, cur = [], 0, []
    for ch in expr:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ResolveError(f"unbalanced ']' in node list {expr!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise ResolveError(f"unbalanced '[' in node list {expr!r}")
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _expand_one(item: str, limit: int, total: int | None = None) -> list[str]:
    total = limit if total is None else total
    m = _BRACKET.search(item)
    if not m:
        return [item]
    head, tail = item[: m.start()], item[m.end():]
    out: list[str] = []
    for rng in m.group(1).split(","):
        rng = rng.strip()
        if "-" in rng:
            lo, hi = rng.split("-", 1)
            if not (lo.isdigit() and hi.isdigit()) or int(hi) < int(lo):
                raise ResolveError(f"bad range {rng!r} in node list {item!r}")
            width = len(lo) if lo.startswith("0") or len(lo) == len(hi) else 0
            if int(hi) - int(lo) + 1 > limit - len(out):  # counted before anything is built
                raise ResolveError(f"node list {item[:80]!r} expands to more than {total} nodes")
            values = (str(n).zfill(width) for n in range(int(lo), int(hi) + 1))
        elif rng.isdigit():
            values = [rng]
        else:
            raise ResolveError(f"bad range {rng!r} in node list {item!r}")
        for v in values:
            out.extend(_expand_one(head + v + tail, limit - len(out), total))
            if len(out) > limit:
                raise ResolveError(f"node list {item[:80]!r} expands to more than {total} nodes")
    return out


def expand_hostlist(expr: str, limit: int = 100_000) -> list[str]:
    """Expand Slurm hostlist syntax (``gpu[01-04,07],gpu-b[1-2]``) into node names, in order."""
    nodes: list[str] = []
    for item in _split_top(expr.strip()):
        nodes.extend(_expand_one(item, limit - len(nodes), limit))
        if len(nodes) > limit:
            raise ResolveError(f"node list {expr[:80]!r} expands to more than {limit} nodes")
    seen, ordered = set(), []
    for node in nodes:
        check_node(node)
        if node not in seen:
            seen.add(node)
            ordered.append(node)
    if not ordered:
        raise ResolveError(f"node list {expr!r} names no nodes")
    return ordered


@dataclass
class JobInfo:
    job_id: str
    nodes: list[str]
    state: str | None = None
    exit_code: str | None = None
    reason: str | None = None
    stdout: str | None = None
    stderr: str | None = None
    work_dir: str | None = None
    num_gpus: int | None = None
    uid: int | None = None  # the job's user: its logs are read only when that user owns them
    source: str = "scontrol"
    raw: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"job": self.job_id, "nodes": self.nodes, "state": self.state, "exit_code": self.exit_code,
                "reason": self.reason, "stdout": self.stdout, "stderr": self.stderr, "source": self.source}


_KV = re.compile(r"(?:(?<=\s)|^)([A-Za-z][\w:/]*)=(\S*)")


def parse_scontrol_job(text: str) -> dict[str, str]:
    """``scontrol show job`` (multi-line or ``-o``) into a key -> value mapping."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        for key, value in _KV.findall(line):
            fields.setdefault(key, value)
    return fields


def _gpus_from_tres(tres: str | None) -> int | None:
    if not tres:
        return None
    m = re.search(r"gres/gpu(?::[\w-]+)?=(\d+)", tres)
    return int(m.group(1)) if m else None


SACCT_FIELDS = ("JobID", "State", "ExitCode", "NodeList", "StdOut", "StdErr", "UID")


# A shell prompt before a pasted command (``$ sacct ...``, ``user@fe1:~$ sacct -b``), or the
# dashes under a fixed-width table's header.
_PROMPT = re.compile(r"^\s*(?:\S*[$#%>]\s+)(?:sudo\s+)?(?:sacct|squeue|scontrol)\b")
_DASHES = re.compile(r"^\s*-+(?:\s+-+)*\s*$")


def table_rows(text: str, fields: Sequence[str] = ()) -> list[dict[str, str]]:
    """The rows of a Slurm table: parsable (``-P``/``--parsable2``, ``|`` between cells; the header,
    when there is one, names the columns, else ``fields`` does) or the default fixed-width layout
    (a header line, then a line of dashes whose runs give each column's span; the last column runs
    to the end of the line). A cell that ends in ``+`` was cut to the column's width. Prompt lines
    of a pasted session are skipped."""
    lines = [line.rstrip() for line in text.splitlines()
             if line.strip() and not _PROMPT.match(line)]
    rows: list[dict[str, str]] = []
    if any("|" in line for line in lines):
        cols = list(fields)
        for line in lines:
            cells = [c.strip() for c in line.split("|")]
            if len(cells) < 2:
                continue
            if cells[0] in ("JobID", "JOBID", "JobId"):
                cols = cells
                continue
            rows.append(dict(zip(cols, cells)))
        return rows
    for i, line in enumerate(lines[1:], 1):
        if not _DASHES.match(line):
            continue
        spans = [(m.start(), m.end()) for m in re.finditer(r"-+", line)]
        spans[-1] = (spans[-1][0], 1 << 20)
        header = [lines[i - 1][a:b].strip() for a, b in spans]
        for body in lines[i + 1:]:
            if _DASHES.match(body):
                continue
            rows.append(dict(zip(header, (body[a:b].strip() for a, b in spans))))
        break
    return rows


def parse_sacct(text: str, job_id: str, fields: Sequence[str] = SACCT_FIELDS) -> JobInfo | None:
    """sacct rows for the job (parsable or fixed-width: :func:`table_rows`); the allocation row
    (no step suffix) speaks for the job."""
    best = None
    for row in table_rows(text, fields):
        jid = row.get("JobID", "").split(".")[0]
        if jid != job_id:
            continue
        if best is not None and "." in row.get("JobID", ""):
            continue  # the allocation row (no step suffix) speaks for the job
        nodes = row.get("NodeList", "")
        best = JobInfo(job_id=job_id,
                       nodes=expand_hostlist(nodes) if nodes and nodes not in ("None assigned", "(null)") else [],
                       state=(row.get("State") or "").split()[0] or None, exit_code=row.get("ExitCode") or None,
                       stdout=_path(row.get("StdOut")), stderr=_path(row.get("StdErr")),
                       uid=int(row["UID"]) if (row.get("UID") or "").isdigit() else None, source="sacct")
    return best


Runner = Callable[[Sequence[str]], "tuple[int, str, str]"]


def local_runner(argv: Sequence[str], timeout: float = 30.0) -> tuple[int, str, str]:
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return 127, "", f"{argv[0]}: command not found"
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]} timed out after {timeout:.0f} s"
    return proc.returncode, proc.stdout, proc.stderr


def nodes_from_environment(job_id: str, env: Mapping[str, str]) -> list[str]:
    """The job's nodes from the environment Slurm gives its epilogs and the job itself
    (``SLURM_JOB_NODELIST``), when that environment is the named job's; otherwise ``[]``.

    While ``EpilogSlurmctld`` runs, ``scontrol show job`` says ``JobState=COMPLETING`` with an empty
    ``NodeList=``; the epilog's own environment still names the nodes.
    """
    nodelist = (env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or "").strip()
    if not nodelist:
        return []
    ids = {env.get("SLURM_JOB_ID"), env.get("SLURM_JOBID")}
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        ids.add(f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}")
    if job_id not in ids:
        return []
    try:
        return expand_hostlist(nodelist)
    except ResolveError:
        return []


class SlurmResolver:
    """Ask Slurm which nodes ran a job. ``runner`` runs an argument list (locally by default,
    or on a login node over SSH: see ``collectors.remote.login_runner``).

    The nodes come from, in order: the environment when it is the job's own (an epilog's
    ``SLURM_JOB_NODELIST``), ``scontrol show job``, then ``sacct``'s NodeList (a job that has left
    the controller's memory, or one completing with an empty NodeList).
    """

    def __init__(self, runner: Runner | None = None, where: str = "this machine",
                 env: Mapping[str, str] | None = None):
        self.runner = runner or local_runner
        self.where = where
        self.env = os.environ if env is None else env
        self._sacct_err = ""

    def resolve(self, job: str) -> JobInfo:
        job_id = parse_job_id(job)
        env_nodes = nodes_from_environment(job_id, self.env)
        code, out, err = self.runner(["scontrol", "show", "job", job_id])
        if code == 127:
            raise ResolveError(f"scontrol is not installed on {self.where}; run gpu-triage on the login node, "
                               "set a login node in the configuration, or name the nodes with --nodes")
        if code == 0 and "JobId=" in out:
            fields = parse_scontrol_job(out)
            nodelist = fields.get("NodeList")
            nodes = expand_hostlist(nodelist) if nodelist and nodelist != "(null)" else []
            source = "scontrol"
            if env_nodes:
                nodes, source = env_nodes, "environment+scontrol"
            elif not nodes:  # completing: the controller has let go of the nodes; accounting has not
                acct = self._sacct(job_id)
                if acct is not None and acct.nodes:
                    nodes, source = acct.nodes, "scontrol+sacct"
            return JobInfo(job_id=job_id, nodes=nodes, state=fields.get("JobState"),
                           exit_code=fields.get("ExitCode"), reason=fields.get("Reason"),
                           stdout=_path(fields.get("StdOut")), stderr=_path(fields.get("StdErr")),
                           work_dir=_path(fields.get("WorkDir")),
                           num_gpus=_gpus_from_tres(fields.get("AllocTRES") or fields.get("TRES")),
                           uid=_uid(fields.get("UserId")), source=source, raw=fields)
        # finished jobs leave scontrol after MinJobAge: ask the accounting database
        info = self._sacct(job_id)
        if info is not None:
            if env_nodes:
                info.nodes, info.source = env_nodes, "environment+sacct"
            return info
        if env_nodes:  # Slurm does not answer for the job, but the job's own environment names its nodes
            uid = (self.env.get("SLURM_JOB_UID") or "").strip()
            return JobInfo(job_id=job_id, nodes=env_nodes, exit_code=self.env.get("SLURM_JOB_EXIT_CODE2"),
                           uid=int(uid) if uid.isdigit() else None, source="environment")
        serr = self._sacct_err
        detail = (err or serr or "").strip().splitlines()
        why = f" ({detail[-1]})" if detail else ""
        said = f"{err}\n{serr}".lower()
        if any(k in said for k in _CONTROLLER_DOWN):
            raise ResolveError(f"Slurm on {self.where} did not answer{why}: the controller (or the accounting "
                               f"database) is unreachable, so job {job_id} may well exist; check `scontrol ping` "
                               "and retry, or name the nodes with --nodes")
        raise ResolveError(f"Slurm on {self.where} does not know job {job_id}{why}; check the ID with "
                           "squeue/sacct, or name the nodes with --nodes")

    def _sacct(self, job_id: str) -> JobInfo | None:
        """The job's allocation row from the accounting database (``-P``), or None."""
        scode, sout, serr = self.runner(["sacct", "-j", job_id, "-P", "-n", "-X", "--format",
                                         ",".join(SACCT_FIELDS)])
        self._sacct_err = serr
        info = parse_sacct(sout, job_id) if scode == 0 else None
        if info is None:  # older Slurm has no StdOut/StdErr fields in sacct
            short = SACCT_FIELDS[:4]
            scode2, sout2, _ = self.runner(["sacct", "-j", job_id, "-P", "-n", "-X", "--format", ",".join(short)])
            info = parse_sacct(sout2, job_id, short) if scode2 == 0 else None
        return info


# Slurm's texts for a controller or slurmdbd it cannot reach (slurm_strerror, sacct)
_CONTROLLER_DOWN = ("unable to contact slurm controller", "connect failure", "socket timed out",
                    "connection refused", "problem talking to the database", "zero bytes were transmitted")


def _uid(user_id: str | None) -> int | None:
    """``UserId=alice(1001)`` -> 1001."""
    m = re.search(r"\((\d+)\)", user_id or "")
    return int(m.group(1)) if m else None


def _path(value: str | None) -> str | None:
    return value if value and value not in ("(null)", "") else None


@dataclass
class InventoryTarget:
    nodes: list[str]
    ssh: dict[str, Any] = field(default_factory=dict)
    log: str | None = None


def load_inventory(path: str | Path) -> dict[str, InventoryTarget]:
    """Read a YAML inventory: ``{name: {nodes: "gpu[01-08]" | [..], ssh: {user, port, ...}, log: path}}``."""
    import yaml

    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ResolveError(f"cannot read the inventory {p}: {exc.strerror}; check --inventory") from exc
    except UnicodeDecodeError:
        raise ResolveError(f"{p}: the inventory is not UTF-8 text; check --inventory") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ResolveError(f"{p}:{mark.line + 1 if mark else 1}: the inventory is not valid YAML") from exc
    except RecursionError:
        raise ResolveError(f"{p}: the inventory is nested too deeply to be an inventory") from None
    if not isinstance(data, dict):
        raise ResolveError(f"{p}: an inventory maps names to {{nodes: ..., ssh: {{...}}}}")
    out: dict[str, InventoryTarget] = {}
    for name, spec in data.items():
        if isinstance(spec, (str, list)):
            spec = {"nodes": spec}
        if not isinstance(spec, dict) or "nodes" not in spec:
            raise ResolveError(f"{p}: entry {name!r} needs 'nodes' (a hostlist such as gpu[01-08] or a list)")
        out[str(name)] = _inventory_target(p, name, spec)
    return out


# the type each inventory setting must have, and how to write it
_INVENTORY_SSH = {"user": (str, "a user name"), "port": (int, "a port number such as 2222"),
                  "identity_file": (str, "a path to a private key")}


def _inventory_target(p: Path, name: Any, spec: dict) -> InventoryTarget:
    """One inventory entry with its values' types checked: a wrong one is named, never a traceback."""
    def refuse(what: str) -> ResolveError:
        return ResolveError(f"{p}: entry {name!r}: {what}")

    nodes_spec = spec["nodes"]
    if isinstance(nodes_spec, str):
        nodes = expand_hostlist(nodes_spec)
    elif isinstance(nodes_spec, list) and nodes_spec and all(
            isinstance(n, (str, int)) and not isinstance(n, bool) for n in nodes_spec):
        nodes = [check_node(str(n)) for n in nodes_spec]
    else:
        raise refuse("'nodes' must be a hostlist such as gpu[01-08] or a list of node names")
    ssh = spec.get("ssh") or {}
    if not isinstance(ssh, dict):
        raise refuse("'ssh' must be a mapping (user, port, identity_file)")
    for key, (kind, example) in _INVENTORY_SSH.items():
        value = ssh.get(key)
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
            raise refuse(f"ssh.{key} must be {example}, not {str(value)[:40]!r}")
    if isinstance(ssh.get("port"), int) and not 0 < ssh["port"] < 65536:
        raise refuse(f"ssh.port {ssh['port']} is not a port number (1-65535)")
    log = spec.get("log")
    if log is not None and not isinstance(log, str):
        raise refuse("'log' must be the path of the job's log file")
    return InventoryTarget(nodes=nodes, ssh=ssh, log=log)


def shell_quote(argv: Sequence[str]) -> str:
    """Join validated arguments for a remote shell (used for the login-node runner only)."""
    return " ".join(shlex.quote(a) for a in argv)
