"""Bundles: everything a collection saw, as a folder or a .tar.gz, replayable offline.

Layout (fixed by DESIGN.md)::

    manifest.json          {"format": 1, "job": "123"|null, "nodes": [...], "created": ISO-8601,
                            "collectors": {"<node>/<file>": {"command", "exit", "seconds"}}, ...}
    <node>/<collector>.txt raw stdout (stderr beside it as .err when there is any)
    log/<name>.txt         training logs that were pasted, uploaded or read from Slurm

Extra manifest keys (allowed by DESIGN.md): ``node_status`` (ok / unreachable / ... with the
reason), ``job_info`` (what the resolver learned) and ``tool`` (the version that wrote it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tarfile
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping

from collectors import flight_recorder
from collectors.redact import redact, redact_stream
from collectors.remote import NodeResult

FORMAT = 1
_SAFE = re.compile(r"^[A-Za-z0-9._-]+$")
MAX_MEMBER = 4 * 1024 ** 3
MAX_TOTAL = 8 * 1024 ** 3  # a bundle that unpacks to more is refused (a small archive can expand hugely)
MAX_NODE_FILE = 64 * 1024 ** 2  # a collector's output (gpu-triage writes at most 32 MB of it)
MAX_MANIFEST = 64 * 1024 ** 2  # manifest.json (about 40 000 nodes of 16 collectors each)
MAX_LOG = 256 * 1024 ** 2  # a training log copied into a bundle: its last 256 MB (the failure is at the end)


class BundleError(Exception):
    """A bundle that cannot be written or read; the message says what to change."""


def _safe(name: str, what: str) -> str:
    if not _SAFE.match(name) or name in (".", ".."):
        raise BundleError(f"{what} {name!r} cannot be a file name in a bundle")
    return name


def _private(path: str, flags: int) -> int:
    """An ``open()`` opener: a bundle's files are the owner's alone (0600 whatever the umask); they
    hold job logs and node outputs."""
    return os.open(path, flags, 0o600)


def _write_private(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8", opener=_private) as out:
        out.write(text)


def _open_log(path: Path):
    """A log to copy into a bundle, decompressed when it is gzip (so its text can be redacted)."""
    import gzip

    with open(path, "rb") as fh:
        magic = fh.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")


def _open_log_tail(path: Path):
    """:func:`_open_log` positioned at the log's last ``MAX_LOG`` bytes (of its text, for gzip:
    counted by reading it through once, never held), so a 100 GB log or a gzip bomb named by an
    inventory or given to ``collect --local`` cannot fill the disk."""
    import gzip

    src = _open_log(path)
    if not isinstance(src, gzip.GzipFile):  # a plain file: its size is known
        size = os.fstat(src.fileno()).st_size
    else:
        size = 0
        while chunk := src.read(1 << 20):
            size += len(chunk)
        src.seek(0)
    if size > MAX_LOG:
        src.seek(size - MAX_LOG)
    return src


def write_bundle(dest: str | Path, nodes: Mapping[str, NodeResult], *, job: str | None = None,
                 logs: Mapping[str, str | Path] | None = None, job_info: dict[str, Any] | None = None) -> Path:
    """Write a bundle folder, or a .tar.gz when ``dest`` ends in .tar.gz / .tgz."""
    dest = Path(dest)
    as_tar = dest.name.endswith((".tar.gz", ".tgz"))
    if dest.exists() and not as_tar and any(dest.iterdir()):
        raise BundleError(f"{dest} exists and is not empty; choose a new -o path (nothing was overwritten)")
    work = Path(tempfile.mkdtemp(prefix="gpu-triage-bundle-")) if as_tar else dest
    try:
        work.mkdir(parents=True, exist_ok=True, mode=0o700)  # mkdtemp's is 0700 too
        manifest: dict[str, Any] = {
            "format": FORMAT, "job": job, "nodes": list(nodes),
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "collectors": {}, "node_status": {}, "job_info": job_info, "tool": "gpu-triage",
        }
        for node, result in nodes.items():
            _safe(node, "node name")
            manifest["node_status"][node] = {"status": result.status, "detail": result.detail,
                                             "seconds": result.seconds}
            if not result.results:
                continue
            ndir = work / node
            ndir.mkdir(exist_ok=True, mode=0o700)
            for res in result.results:
                name = _safe(res.name, "collector name")
                # secrets (a token in a `ps` command line, a password in a log) never reach the bundle
                _write_private(ndir / f"{name}.txt", redact(res.stdout))
                if res.stderr:
                    _write_private(ndir / f"{name}.err", redact(res.stderr))
                manifest["collectors"][f"{node}/{name}.txt"] = {
                    "command": res.command, "exit": res.exit, "seconds": res.seconds, "timed_out": res.timed_out}
        if logs:
            ldir = work / "log"
            ldir.mkdir(exist_ok=True, mode=0o700)
            for name, content in logs.items():
                target = ldir / f"{_safe(Path(name).name.replace(' ', '_'), 'log name')}"
                if isinstance(content, Path) and flight_recorder.sniff_file(str(content)):
                    # a flight-recorder dump is data, not text: copied byte for byte (redacting it as
                    # text would break the pickle), under its own name (the rank is at its end);
                    # it holds op names, sizes and stack frames, read by the restricted reader
                    with open(content, "rb") as src, open(target, "wb", opener=_private) as out:
                        # at most one byte past the reader's limit: a larger dump is refused when read,
                        # by name, instead of filling the bundle
                        left = flight_recorder.MAX_DUMP_BYTES + 1
                        while left > 0:
                            block = src.read(min(left, 1 << 20))
                            if not block:
                                break
                            out.write(block)
                            left -= len(block)
                    continue
                if not target.name.endswith(".txt"):
                    target = target.with_name(target.name + ".txt")
                if isinstance(content, Path):
                    with _open_log_tail(content) as src, open(target, "wb", opener=_private) as out:
                        redact_stream(src, out)
                else:
                    _write_private(target, redact(content))
        _write_private(work / "manifest.json", json.dumps(manifest, indent=2, ensure_ascii=False))
        if as_tar:
            dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp = dest.with_name(dest.name + ".partial")
            tmp.unlink(missing_ok=True)  # a leftover keeps its mode; a new file gets 0600
            with open(tmp, "wb", opener=_private) as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
                for path in sorted(work.rglob("*")):
                    tar.add(path, arcname=str(path.relative_to(work)), recursive=False)
            tmp.replace(dest)
    except OSError as exc:
        raise BundleError(f"cannot write the bundle {dest}: {exc.strerror or exc}; choose a writable -o path") from exc
    finally:
        if as_tar:
            shutil.rmtree(work, ignore_errors=True)
    return dest


@dataclass
class NodeOutput:
    node: str
    status: str
    detail: str
    outputs: dict[str, str] = field(default_factory=dict)       # collector -> stdout
    meta: dict[str, dict[str, Any]] = field(default_factory=dict)  # collector -> manifest row


@dataclass
class Bundle:
    root: Path
    manifest: dict[str, Any]
    nodes: dict[str, NodeOutput]
    logs: list[Path]
    _tmp: str | None = None

    @property
    def job(self) -> str | None:
        return self.manifest.get("job")

    def close(self) -> None:
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> "Bundle":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _extract(path: Path) -> str:
    tmp = tempfile.mkdtemp(prefix="gpu-triage-replay-")
    total = 0
    try:
        with tarfile.open(path, "r:*") as tar:
            for member in tar.getmembers():
                parts = Path(member.name).parts
                if member.name.startswith("/") or ".." in parts:
                    raise BundleError(f"{path}: member {member.name!r} points outside the bundle; refusing it")
                if member.isdir():
                    continue
                if not member.isfile():
                    raise BundleError(f"{path}: member {member.name!r} is not a plain file; refusing it")
                if member.size > MAX_MEMBER:
                    raise BundleError(f"{path}: member {member.name!r} is larger than 4 GB")
                if parts[0] != "log" and len(parts) > 1 and member.size > MAX_NODE_FILE:
                    raise BundleError(f"{path}: member {member.name!r} is {member.size >> 20} MB; a collector's "
                                      f"output in a bundle is at most {MAX_NODE_FILE >> 20} MB")
                total += member.size
                if total > MAX_TOTAL:
                    raise BundleError(f"{path}: it unpacks to more than {MAX_TOTAL >> 30} GB; refusing it")
                target = Path(tmp, *parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                with tar.extractfile(member) as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
    except (tarfile.TarError, EOFError, OSError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise BundleError(f"{path} is not a readable .tar.gz bundle ({exc}); pass the folder or a complete archive") from exc
    except BundleError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp


def read_bundle(path: str | Path) -> Bundle:
    """Open a bundle folder or .tar.gz for replay."""
    path = Path(path)
    if not path.exists():
        raise BundleError(f"{path} does not exist; give the folder or .tar.gz that `gpu-triage collect` wrote")
    tmp = None
    root = path
    if path.is_file():
        tmp = _extract(path)
        root = Path(tmp)
    try:
        return _open(path, root, tmp)
    except BaseException:
        if tmp:  # a refused bundle leaves nothing unpacked behind
            shutil.rmtree(tmp, ignore_errors=True)
        raise


def _open(path: Path, root: Path, tmp: str | None) -> "Bundle":
    manifest_path = root / "manifest.json"
    try:
        if manifest_path.stat().st_size > MAX_MANIFEST:
            raise BundleError(f"{path}: manifest.json is over {MAX_MANIFEST >> 20} MB; refusing it")
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BundleError(f"{path} has no manifest.json; it is not a gpu-triage bundle") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BundleError(f"{path}: manifest.json is not valid JSON ({exc})") from exc
    except RecursionError:
        raise BundleError(f"{path}: manifest.json is nested too deeply to be a bundle's manifest") from None
    _check_manifest(path, manifest)
    statuses = manifest.get("node_status") or {}
    nodes: dict[str, NodeOutput] = {}
    for node in manifest.get("nodes") or []:
        if not isinstance(node, str) or not _SAFE_NAME.fullmatch(node):
            raise BundleError(f"{path}: manifest names a node {str(node)[:80]!r} that is not a plain name")
        st = statuses.get(node) or {}
        nodes[node] = NodeOutput(node, str(st.get("status", "ok")), str(st.get("detail", "")))
    collectors = manifest.get("collectors") or {}
    base = root.resolve()
    for key, meta in collectors.items():
        node, _, fname = str(key).partition("/")
        # "<node>/<collector>.txt" and nothing else: no "..", no absolute or nested paths
        if not (_SAFE_NAME.fullmatch(node) and _SAFE_NAME.fullmatch(fname)):
            raise BundleError(f"{path}: manifest entry {str(key)[:80]!r} is not '<node>/<file>'; refusing it")
        if node not in nodes:
            nodes[node] = NodeOutput(node, "ok", "")
        fpath = root / node / fname
        if fpath.is_symlink() or not fpath.is_file() or base not in fpath.resolve().parents:
            continue
        nodes[node].outputs[fname[:-4] if fname.endswith(".txt") else fname] = _read_capped(fpath)
        nodes[node].meta[fname[:-4]] = meta
    logs = sorted(p for p in (root / "log").glob("*") if p.is_file() and not p.is_symlink()) \
        if (root / "log").is_dir() else []
    return Bundle(root, manifest, nodes, logs, tmp)


_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")


def _check_manifest(path: Path, manifest: Any) -> None:
    """The manifest's keys have DESIGN.md's JSON types; anything else is refused by name."""
    def refuse(what: str) -> BundleError:
        return BundleError(f"{path}: manifest.json's {what}; this is not a bundle gpu-triage wrote")

    if not isinstance(manifest, dict):
        raise BundleError(f"{path}: manifest.json must be an object with format, nodes and collectors")
    if manifest.get("format") != FORMAT:
        raise BundleError(f"{path}: bundle format {manifest.get('format')!r} is not supported (this version reads {FORMAT})")
    if not isinstance(manifest.get("job"), (str, type(None))):
        raise refuse("job must be a string or null")
    if not isinstance(manifest.get("nodes") or [], list):
        raise refuse("nodes must be a list of node names")
    statuses = manifest.get("node_status") or {}
    if not isinstance(statuses, dict):
        raise refuse("node_status must be an object (node -> {status, detail})")
    for node, st in statuses.items():
        if not isinstance(st, dict):
            raise refuse(f"node_status of {str(node)[:80]!r} must be an object {{status, detail}}")
    collectors = manifest.get("collectors") or {}
    if not isinstance(collectors, dict):
        raise refuse("collectors must be an object ('<node>/<file>' -> {command, exit, seconds})")
    for key, meta in collectors.items():
        if not isinstance(meta, dict):
            raise refuse(f"entry {str(key)[:80]!r} must be an object {{command, exit, seconds}}")


def _read_capped(path: Path) -> str:
    """A collector's output, its last MAX_NODE_FILE bytes at most (a hand-made bundle can hold more)."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > MAX_NODE_FILE:
            fh.seek(size - MAX_NODE_FILE)
        return fh.read(MAX_NODE_FILE).decode("utf-8", errors="replace")


def node_results_from_outputs(node: str, outputs: Iterable[tuple[str, str, str, int | None, float]]) -> NodeResult:
    """Build a NodeResult from (name, command, stdout, exit, seconds) rows (used by the srun fan-out)."""
    from collectors.remote import CommandResult, _summarise

    result = NodeResult(node)
    for name, command, stdout, code, seconds in outputs:
        result.results.append(CommandResult(name, command, code, stdout, "", seconds, code == 124))
    _summarise(result)
    return result
