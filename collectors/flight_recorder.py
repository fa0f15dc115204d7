"""PyTorch flight-recorder dumps: which rank a hung collective waited for, read from the dumps.

What they are: with ``TORCH_FR_BUFFER_SIZE`` (older name ``TORCH_NCCL_TRACE_BUFFER_SIZE``) > 0,
every rank of a PyTorch job keeps its last N collectives in a ring buffer; with
``TORCH_NCCL_DUMP_ON_TIMEOUT=1`` the NCCL watchdog writes each rank's buffer to
``<prefix><rank>`` when a collective times out. The prefix is ``TORCH_FR_DUMP_TEMP_FILE`` or
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``, by default ``/tmp/nccl_trace_rank_`` in older releases and
``~/.cache/torch/comm_lib_trace_rank_`` in recent ones (pytorch/pytorch,
torch/csrc/distributed/c10d/FlightRecorder.cpp, DebugInfoWriter::getWriter); sites choose
their own (``comm_lib_trace_rank_``, ``trace_rank_``, ``nccl_fr_rank_``...), so a dump is known
by its content, and its rank by the number that ends its name, as PyTorch's own reader does
(torch/distributed/flight_recorder/components/loader.py, read_dump).

Format (torch/csrc/distributed/c10d/FlightRecorderDetail.hpp, dump_dict and dump_json; read in
torch 2.13.0): a pickle (protocol 2, written by torch's own pickler: plain dicts, lists, tuples,
strings, ints, floats, bools and None), or the same as JSON from the JSON dump call. Keys:
``version`` ("2.10"), ``pg_config`` {pg name: {name, desc, ranks: "[0, 1]"}}, ``pg_status``
{pg id: {last_enqueued_collective, last_started_collective, last_completed_collective}} (ints in
the pickle, strings in the JSON), ``comm_lib_version``, and ``entries``: one dict per recorded
operation with record_id, pg_id, process_group (name, desc), collective_seq_id, p2p_seq_id,
op_id, profiling_name ("nccl:all_reduce", "gloo:all_gather"), input_sizes, input_dtypes,
output_sizes, output_dtypes, state (scheduled/started/completed), time_created_ns,
time_discovered_started_ns, time_discovered_completed_ns, retired, timeout_ms, is_p2p and, in
pickles with stacks, frames [{name, filename, line}].

Safety: a pickle can run code when loaded, so this module never calls ``pickle.load``: its
unpickler refuses every global (the only way a pickle reaches a callable), so nothing but the
plain containers and scalars above can be built, and anything else is refused with a message.
A dump is read up to ``MAX_DUMP_BYTES`` and ``MAX_ENTRIES`` entries (the newest are kept); of
many dumps, each one's newest share of ``ANALYSE_BUDGET`` entries is compared.

The analysis, per process group (by its name, the same on every rank), over its collectives
(point-to-point sends and receives are left out): the first collective not every rank entered
(the lowest "last enqueued" + 1), the
ranks that entered it and wait (``nccl-timeout`` each, with the stuck op, its size and the
rank's Python stack) and the ranks that never entered it, the laggards (``rank-straggler``, with
how far the one laggard got and its own last stack). When every rank entered every collective,
they wait in the first one no rank completed (else the last one some rank has not), and with
timing on (states started/scheduled), ranks whose kernel never started are the laggards. Gloo
sets ``retired`` on a collective that failed too, so completion alone never names a laggard. At one sequence number
of one group, another op type, size or dtype on some ranks is a desync (``collective-mismatch``,
``odd_ranks`` the minority). A group whose membership names ranks that wrote no dump says so.

Fixtures: tests/fixtures/flight-recorder (real dumps written by torch 2.13.0+cpu over gloo:
a held-back rank, and a size desync in the JSON form; README.md there tells how).
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import os
import pickle
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from collectors import trainlog
from collectors.findings import Finding
from collectors.trainlog import InputError, ParseResult

MAX_DUMP_BYTES = 64 * 1024 * 1024  # one rank's dump; TORCH_FR_BUFFER_SIZE=20000 writes a few MB
MAX_TOTAL_BYTES = 1024 * 1024 * 1024  # all dumps of one diagnosis
MAX_ENTRIES = 100_000  # per dump; the newest are kept
MAX_DUMPS = 16_384
ANALYSE_BUDGET = 400_000  # entries compared across all dumps (~3 s); each dump keeps its newest share
ANALYSE_MIN = 256  # ... but never fewer than these per dump
MAX_WAITING_FINDINGS = 64  # nccl-timeout findings per stuck collective; the count is in rank-straggler
SNIFF = 4096

_PICKLE_HEAD = re.compile(rb"\A\x80[\x02-\x05]")
_JSON_KEYS = (b'"collective_seq_id"', b'"pg_config"', b'"pg_status"', b'"comm_lib_version"')
# the rank at the end of a dump's name: nccl_trace_rank_17, trace_rank_3.json, comm_lib_trace_rank_0.pkl
# (a bundle stores an uploaded file as log/<name>.txt)
_NAME_RANK = re.compile(r"(\d+)(?:\.(?:json|pkl|pickle|bin|dump))?(?:\.txt)?$", re.I)
_TORCH_FRAME = re.compile(r"[/\\]torch[/\\](?:distributed|nn|_dynamo|utils)[/\\]")


class DumpError(InputError):
    """A file that looks like a flight-recorder dump cannot be read; ``str(e)`` says what to do."""


@dataclass
class Dump:
    name: str
    rank: int | None
    version: str
    entries: list[dict[str, Any]]
    pg_status: dict[str, dict[str, Any]]
    pg_config: dict[str, dict[str, Any]]
    size: int
    form: str  # "pickle" or "json"
    dropped: int = 0  # entries over MAX_ENTRIES, oldest first


@dataclass
class Analysis:
    findings: list[Finding] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    bytes_read: int = 0


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------
class _PlainUnpickler(pickle.Unpickler):
    """Builds only what pickle builds without a global: dict, list, tuple, set, str, bytes,
    int, float, bool, None. Every class or function a pickle names is refused, before it is
    looked up, so a pickle that would run code (os.system through REDUCE) stops here."""

    def find_class(self, module: str, name: str):  # noqa: D102 - see the class
        raise pickle.UnpicklingError(f"it names the Python object {module}.{name}")

    def persistent_load(self, pid):  # noqa: D102
        raise pickle.UnpicklingError("it refers to outside objects (persistent ids)")


def looks_like_dump(head: bytes) -> str | None:
    """'pickle' or 'json' when the first bytes of a file are a flight-recorder dump's, else None.
    A text log never starts with byte 0x80; a JSON dump opens with its sorted keys."""
    if _PICKLE_HEAD.match(head):
        return "pickle"
    s = head.lstrip()
    if s[:1] == b"{" and any(k in s[:SNIFF] for k in _JSON_KEYS):
        return "json"
    return None


def rank_from_name(name: str) -> int | None:
    m = _NAME_RANK.search(os.path.basename(name))
    return int(m.group(1)) if m else None


def read_dump(name: str, data: bytes, max_entries: int = MAX_ENTRIES) -> Dump:
    """One rank's dump from its bytes (already bounded by the caller); of more than
    ``max_entries`` entries, the newest are kept."""
    form = looks_like_dump(data[:SNIFF])
    if form is None:
        raise DumpError(f"{name}: not a PyTorch flight-recorder dump (neither its pickle nor its JSON form); "
                        f"pass the files TORCH_NCCL_DUMP_ON_TIMEOUT wrote (nccl_trace_rank_N) as they are")
    if form == "pickle":
        try:
            doc = _PlainUnpickler(io.BytesIO(data)).load()
        except pickle.UnpicklingError as exc:
            what = str(exc)
            if what.startswith(("it names", "it refers")):
                raise DumpError(f"{name}: refused: this pickle is not a plain flight-recorder dump ({what}); "
                                f"gpu-triage never runs code from a pickle. Dumps written by PyTorch hold "
                                f"only plain data; re-dump with TORCH_NCCL_DUMP_ON_TIMEOUT, or use the JSON "
                                f"form (torch._C._distributed_c10d._dump_fr_trace_json)") from None
            raise DumpError(f"{name}: the flight-recorder dump is damaged or cut short ({what}); copy the "
                            f"whole file again (a dump still being written is incomplete)") from None
        except (EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError, MemoryError,
                OverflowError, RecursionError) as exc:
            raise DumpError(f"{name}: the flight-recorder dump is damaged or cut short "
                            f"({exc.__class__.__name__}: {str(exc)[:100]}); copy the whole file again") from None
    else:
        try:
            doc = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise DumpError(f"{name}: the flight-recorder JSON dump is damaged or cut short ({str(exc)[:120]}); "
                            f"copy the whole file again") from None
    if not isinstance(doc, dict) or not ({"entries", "pg_status"} & set(doc)) or "version" not in doc:
        raise DumpError(f"{name}: the file is a {form}, but not a flight-recorder dump (it has no 'version' and "
                        f"'entries' or 'pg_status'); pass the per-rank files PyTorch wrote")
    entries = doc.get("entries") or []
    pg_status = doc.get("pg_status") or {}
    pg_config = doc.get("pg_config") or {}
    if not isinstance(entries, list) or not isinstance(pg_status, dict) or not isinstance(pg_config, dict):
        raise DumpError(f"{name}: the flight-recorder dump has an unexpected shape ('entries' is not a list, or "
                        f"'pg_status'/'pg_config' not a mapping); is it from a PyTorch release this tool knows?")
    entries = [e for e in entries if isinstance(e, dict)]
    dropped = max(0, len(entries) - max_entries)
    if dropped:
        entries = entries[-max_entries:]
    return Dump(name=name, rank=rank_from_name(name), version=str(doc.get("version")), entries=entries,
                pg_status={str(k): v for k, v in pg_status.items() if isinstance(v, dict)},
                pg_config={str(k): v for k, v in pg_config.items() if isinstance(v, dict)},
                size=len(data), form=form, dropped=dropped)


def read_file(path: str, name: str | None = None) -> Dump:
    name = name or path
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_DUMP_BYTES + 1)
    except PermissionError:
        raise DumpError(f"{name}: permission denied; make the dump readable") from None
    except OSError as exc:
        raise DumpError(f"{name}: cannot be read ({exc.strerror or exc})") from None
    if len(data) > MAX_DUMP_BYTES:
        raise DumpError(f"{name}: larger than {MAX_DUMP_BYTES >> 20} MB, more than one rank's flight recorder "
                        f"writes; lower TORCH_FR_BUFFER_SIZE, or pass the dump with onlyActive (fewer entries)")
    return read_dump(name, data)


def sniff_file(path: str) -> str | None:
    try:
        with open(path, "rb") as fh:
            return looks_like_dump(fh.read(SNIFF))
    except OSError:
        return None


def split_paths(paths: Sequence[str]) -> tuple[list[str], list[str], set[str]]:
    """(dumps, the other inputs, dumps inside folders). A file given by name is a dump when its
    content says so; a folder is searched (hidden folders skipped) and stays among the other
    inputs only when it holds something besides dumps."""
    dumps: list[str] = []
    rest: list[str] = []
    inside: set[str] = set()
    for p in paths:
        if p == "-" or not os.path.exists(p):
            rest.append(p)
            continue
        if os.path.isdir(p):
            others = False
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for fn in sorted(files):
                    if fn.startswith("."):
                        continue
                    full = os.path.join(root, fn)
                    if os.path.isfile(full) and sniff_file(full):
                        dumps.append(full)
                        inside.add(full)
                    elif trainlog._is_log_name(fn):
                        others = True
            if others or not inside:
                rest.append(p)
            continue
        if os.path.isfile(p) and sniff_file(p):
            dumps.append(p)
        else:
            rest.append(p)
    return dumps, rest, inside


def read_paths(paths: Sequence[str], names: dict[str, str] | None = None) -> list[Dump]:
    if len(paths) > MAX_DUMPS:
        raise DumpError(f"{len(paths)} flight-recorder dumps; at most {MAX_DUMPS} are read in one diagnosis")
    out, total = [], 0
    for p in paths:
        d = read_file(p, (names or {}).get(p, p))
        total += d.size
        if total > MAX_TOTAL_BYTES:
            raise DumpError(f"the flight-recorder dumps add up to more than {MAX_TOTAL_BYTES >> 20} MB; pass the "
                            f"dumps of one job, or dumps taken with onlyActive")
        out.append(d)
    return out


def _read_found(paths: Sequence[str], inside: set[str]) -> tuple[list[Dump], list[str]]:
    """Dumps named by the user must read (or the diagnosis stops with the reason); a file found
    inside a folder that turns out not to be a readable dump (another pickle, a refused one, a
    damaged one) is skipped with a warning, as a binary file in a folder of logs is."""
    named = [p for p in paths if p not in inside]
    out = read_paths(named)
    warnings: list[str] = []
    total = sum(d.size for d in out)
    for p in paths:
        if p not in inside:
            continue
        if len(out) >= MAX_DUMPS or total > MAX_TOTAL_BYTES:
            warnings.append(f"{p}: skipped, more flight-recorder dumps than one diagnosis reads "
                            f"({MAX_DUMPS} files, {MAX_TOTAL_BYTES >> 20} MB)")
            continue
        try:
            d = read_file(p)
        except DumpError as exc:
            warnings.append(f"skipped: {exc}")
            continue
        total += d.size
        out.append(d)
    order = {p: i for i, p in enumerate(paths)}
    out.sort(key=lambda d: order.get(d.name, 0))
    return out, warnings


# --------------------------------------------------------------------------------------------
# Analysis
# --------------------------------------------------------------------------------------------
def op_name(profiling_name: Any) -> str:
    """'nccl:all_reduce' -> 'ALLREDUCE', 'nccl:_allgather_base' -> '_ALLGATHER_BASE': the OpType
    spelling the watchdog prints, so findings from dumps and from logs compare."""
    return _op_name(str(profiling_name or "?")[:200])


@functools.lru_cache(maxsize=1024)
def _op_name(profiling_name: str) -> str:
    s = profiling_name.split(":", 1)[-1].split(" ", 1)[0].upper()
    s = s.replace("ALL_TO_ALL", "ALLTOALL")
    return re.sub(r"^(_?)ALL_", r"\1ALL", s)


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and re.fullmatch(r"-?\d{1,19}", v.strip()):
        return int(v)
    return None


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _numel(sizes: Any) -> int | None:
    if not isinstance(sizes, list):
        return None
    total = 0
    for shape in sizes:
        if not isinstance(shape, list):
            return None
        n = 1
        for d in shape:
            d = _int(d)
            if d is None:
                return None
            n *= d
        total += n
    return total


def _pg_key(e: dict[str, Any]) -> tuple[str, str] | None:
    pg = e.get("process_group")
    if isinstance(pg, (list, tuple)) and pg:
        return str(pg[0]), str(pg[1]) if len(pg) > 1 else ""
    pid = _int(e.get("pg_id"))
    return (str(pid), "") if pid is not None else None


def _completed(e: dict[str, Any]) -> bool:
    return e.get("state") == "completed" or e.get("retired") is True


def format_stack(frames: Any, limit: int = 6) -> str:
    """The caller's frames of one collective, innermost first, without torch's own wrappers:
    'train_step (/workspace/train.py:79) < main (/workspace/train.py:120)'."""
    if not isinstance(frames, list):
        return ""
    rows = [f for f in frames if isinstance(f, dict)]
    mine = [f for f in rows if not _TORCH_FRAME.search(str(f.get("filename", "")))] or rows
    return " < ".join(f"{f.get('name', '?')} ({f.get('filename', '?')}:{f.get('line', '?')})" for f in mine[:limit])


@dataclass
class _Rank:
    """One rank's view of one process group."""

    rank: int
    dump: Dump
    colls: dict[int, list[dict[str, Any]]]  # collective_seq_id -> entries (several when coalesced)
    enqueued: int
    completed: int
    pg_id: int | None
    _sigs: dict[int, tuple[str, int | None, str]] = field(default_factory=dict)

    def entry(self, seq: int) -> dict[str, Any] | None:
        es = self.colls.get(seq)
        return es[-1] if es else None

    def signature(self, seq: int) -> tuple[str, int | None, str] | None:
        """(op types, input numel, dtypes) of the collective at ``seq``, or None if not recorded."""
        if seq in self._sigs:
            return self._sigs[seq]
        es = self.colls.get(seq)
        if not es:
            return None
        ops = "+".join(sorted({op_name(e.get("profiling_name")) for e in es}))
        sizes = [_numel(e.get("input_sizes")) for e in es]
        numel = None if any(s is None for s in sizes) else sum(sizes)  # type: ignore[arg-type]
        dtypes = "/".join(sorted({str(d) for e in es for d in _list(e.get("input_dtypes"))}))
        self._sigs[seq] = (ops, numel, dtypes)
        return self._sigs[seq]

    def raw(self, seq: int) -> tuple:
        """A cheap fingerprint of the collective at ``seq``: equal ones need no closer look."""
        return tuple((e.get("profiling_name"), str(e.get("input_sizes")), str(e.get("input_dtypes")))
                     for e in self.colls.get(seq, ()))

    def done(self, seq: int) -> bool:
        if seq <= self.completed:
            return True
        es = self.colls.get(seq)
        return bool(es) and all(_completed(e) for e in es)


def _groups(dumps: list[Dump]) -> dict[tuple[str, str], dict[int, _Rank]]:
    out: dict[tuple[str, str], dict[int, _Rank]] = {}
    for d in dumps:
        if d.rank is None:
            continue
        per: dict[tuple[str, str], dict[int, list[dict[str, Any]]]] = {}
        ids: dict[tuple[str, str], int | None] = {}
        for e in d.entries:
            if e.get("is_p2p") is True:
                continue
            key, seq = _pg_key(e), _int(e.get("collective_seq_id"))
            if key is None or seq is None:
                continue
            per.setdefault(key, {}).setdefault(seq, []).append(e)
            ids[key] = _int(e.get("pg_id"))
        for key, colls in per.items():
            status = d.pg_status.get(str(ids[key])) if ids[key] is not None else None
            enq = max(colls)
            done = max((s for s, es in colls.items() if all(_completed(e) for e in es)), default=min(colls) - 1)
            if status:
                le, lc = _int(status.get("last_enqueued_collective")), _int(status.get("last_completed_collective"))
                enq = max(enq, le) if le is not None else enq
                done = max(done, lc) if lc is not None else done
            out.setdefault(key, {})[d.rank] = _Rank(d.rank, d, colls, enq, done, ids[key])
    return out


def _members(dumps: list[Dump], key: tuple[str, str]) -> set[int]:
    """The ranks a group's configuration names (NCCL dumps; gloo records none usable)."""
    out: set[int] = set()
    for d in dumps:
        cfg = d.pg_config.get(key[0])
        if isinstance(cfg, dict) and cfg.get("name") == key[0]:
            out |= {int(x) for x in re.findall(r"\d+", str(cfg.get("ranks", "")))[:MAX_DUMPS]}
    return out


def _pg_attr(key: tuple[str, str]) -> int | str:
    """The group's name as the logs' PG id when it is a number (0 for the default group)."""
    return int(key[0]) if key[0].isdigit() else key[0]


def _ranks(rs: Iterable[int]) -> str:
    return ",".join(map(str, sorted(rs)))


def _pg_label(key: tuple[str, str]) -> str:
    return f"PG {key[0]}" + (f" ({key[1]})" if key[1] and key[1] != "undefined" else "")


def _entry_line(r: _Rank, seq: int, what: str) -> str:
    e = r.entry(seq) or {}
    sig = r.signature(seq) or ("?", None, "")
    size = f", NumelIn={sig[1]}" if sig[1] is not None else ""
    dtype = f", {sig[2]}" if sig[2] else ""
    return (f"flight recorder, rank {r.rank}: {sig[0]} #{seq} of {what}{size}{dtype}, state {e.get('state', '?')}; "
            f"last enqueued #{r.enqueued}, last completed #{r.completed}")


def analyse(dumps: list[Dump], rank_node: dict[int, str] | None = None) -> Analysis:
    """Findings from the dumps of one job (see the module's docstring)."""
    rank_node = rank_node or {}
    out = Analysis(sources=[d.name for d in dumps], bytes_read=sum(d.size for d in dumps))
    seen: dict[int, str] = {}
    usable = []
    for d in dumps:
        if d.dropped:
            out.warnings.append(f"{d.name}: {d.dropped + len(d.entries)} flight-recorder entries; only the newest "
                                f"{len(d.entries)} were read")
        if d.rank is None:
            out.warnings.append(f"{d.name}: cannot tell which rank wrote this flight-recorder dump (no number at the "
                                f"end of its name); keep PyTorch's names, e.g. nccl_trace_rank_3")
            continue
        if d.rank in seen:
            out.warnings.append(f"{d.name}: a second dump of rank {d.rank} (after {seen[d.rank]}); only the first is "
                                f"read: pass the dumps of one job")
            continue
        seen[d.rank] = d.name
        usable.append(d)
    window = max(ANALYSE_MIN, ANALYSE_BUDGET // max(1, len(usable)))
    if any(len(d.entries) > window for d in usable):
        out.warnings.append(f"{len(usable)} flight-recorder dumps: the newest {window} entries of each were compared")
        usable = [dataclasses.replace(d, entries=d.entries[-window:]) for d in usable]
    versions = sorted({d.version for d in usable})
    if len(versions) > 1:
        out.warnings.append(f"the flight-recorder dumps come from different PyTorch versions ({', '.join(versions)}): "
                            f"are they from one job?")
    for key, ranks in sorted(_groups(usable).items(), key=lambda kv: kv[0]):
        _mismatch(key, ranks, out)
        _hang(key, ranks, _members(usable, key), out, rank_node)
    return out


def _mismatch(key: tuple[str, str], ranks: dict[int, _Rank], out: Analysis) -> None:
    """The first sequence number of the group at which ranks ran different collectives."""
    if len(ranks) < 2:
        return
    seqs = sorted({s for r in ranks.values() for s in r.colls})
    for seq in seqs:
        if len({r.raw(seq) for r in ranks.values() if seq in r.colls}) < 2:
            continue
        sigs = {rk: r.signature(seq) for rk, r in ranks.items() if seq in r.colls}
        if len(sigs) < 2 or len(set(sigs.values())) < 2:
            continue
        ops = sorted({s[0] for s in sigs.values() if s})
        sizes = sorted({s[1] for s in sigs.values() if s and s[1] is not None})
        dtypes = sorted({s[2] for s in sigs.values() if s and s[2]})
        if len(ops) > 1:
            what = "/".join(ops)
        elif len(sizes) > 1:
            what = "NumelIn " + "/".join(map(str, sizes))
        else:
            what = "dtype " + "/".join(dtypes)
        by_sig: dict[Any, list[int]] = {}
        for rk, s in sigs.items():
            by_sig.setdefault(s, []).append(rk)
        groups = sorted(by_sig.values(), key=len, reverse=True)
        attrs: dict[str, Any] = {"seq": seq, "ops": what, "ranks": _ranks(sigs), "pg": _pg_attr(key)}
        if len(groups[0]) > len(groups[1]):
            attrs["odd_ranks"] = _ranks(rk for g in groups[1:] for rk in g)
        odd = attrs.get("odd_ranks")
        first = ranks[int(odd.split(",")[0]) if odd else min(sigs)]
        out.findings.append(Finding(kind="collective-mismatch", attrs=attrs, rank=None, source=first.dump.name,
                                    line=_entry_line(first, seq, _pg_label(key)) + f"; ranks disagree: {what}",
                                    line_no=None))
        return


def _hang(key: tuple[str, str], ranks: dict[int, _Rank], members: set[int], out: Analysis,
          rank_node: dict[int, str]) -> None:
    label = _pg_label(key)
    no_dump = sorted(members - set(ranks)) if members else []
    low = min(r.enqueued for r in ranks.values())
    high = max(r.enqueued for r in ranks.values())
    laggards: list[int] = []
    if low < high:
        seq = low + 1  # the first collective some rank never entered
        laggards = sorted(rk for rk, r in ranks.items() if r.enqueued < seq)
        waiting = sorted(rk for rk, r in ranks.items() if r.enqueued >= seq)
    else:
        # every rank entered every collective: where do they wait? the first one nobody completed,
        # else the last one some rank has not completed
        # only sequence numbers some rank recorded: pg_status numbers alone can be anything
        recorded = sorted({s for r in ranks.values() for s in r.colls})
        floor = min(r.completed for r in ranks.values())
        pending = [s for s in recorded if s > floor and not any(r.done(s) for r in ranks.values())]
        if pending:
            seq = pending[0]
        else:
            open_ = [s for s in reversed(recorded) if any(not r.done(s) for r in ranks.values())][:1]
            if not open_:
                if no_dump:
                    out.warnings.append(f"flight recorder: {label} names ranks {_ranks(no_dump)}, which wrote no "
                                        f"dump; the ranks that did completed every collective they recorded")
                return
            seq = open_[0]
        waiting = sorted(rk for rk, r in ranks.items() if not r.done(seq))
        states = {rk: (ranks[rk].entry(seq) or {}).get("state") for rk in waiting}
        if "started" in states.values():
            laggards = sorted(rk for rk, st in states.items() if st == "scheduled")
            waiting = sorted(rk for rk, st in states.items() if st != "scheduled")
    if not waiting:
        return
    ref = ranks[waiting[0]]
    sig = ref.signature(seq) or ("?", None, "")
    for rk in waiting[:MAX_WAITING_FINDINGS]:
        r = ranks[rk]
        rsig = r.signature(seq) or sig
        attrs: dict[str, Any] = {"seq": seq, "op": rsig[0], "pg": _pg_attr(key), "last_enqueued": r.enqueued,
                                 "last_completed": r.completed}
        if rsig[1] is not None:
            attrs["numel_in"] = rsig[1]
        tmo = _int((r.entry(seq) or {}).get("timeout_ms"))
        if tmo:
            attrs["timeout_ms"] = tmo
        stack = format_stack((r.entry(seq) or {}).get("frames"))
        if stack:
            attrs["stack"] = stack
        out.findings.append(Finding(kind="nccl-timeout", attrs=attrs, rank=rk, node=rank_node.get(rk),
                                    source=r.dump.name, line=_entry_line(r, seq, label)))
    silent = laggards or no_dump
    if not silent:
        return
    attrs = {"ranks": _ranks(silent), "seq": seq, "waiting": len(waiting), "op": sig[0], "pg": _pg_attr(key)}
    if not laggards:
        attrs["no_dump"] = True
    why = "wrote no dump" if not laggards else ("never entered it" if low < high else "never started it")
    if len(silent) == 1:
        lag = silent[0]
        if lag in rank_node:
            attrs["node"] = rank_node[lag]
        if laggards:
            r = ranks[lag]
            attrs["last_completed"] = r.completed
            last = max((x for x in r.dump.entries if x.get("is_p2p") is not True and _int(x.get("record_id")) is not None),
                       key=lambda x: _int(x.get("record_id")) or 0, default=None)
            if last is not None:
                lk = _pg_key(last) or ("?", "")
                attrs["last_entered"] = (f"{op_name(last.get('profiling_name'))} #{last.get('collective_seq_id')} of "
                                         f"{_pg_label(lk)}, state {last.get('state', '?')}")
                stack = format_stack(last.get("frames"))
                if stack:
                    attrs["stack"] = stack
    who = f"rank {silent[0]}" if len(silent) == 1 else f"ranks {_ranks(silent)}"
    size = f", NumelIn={sig[1]}" if sig[1] is not None else ""
    line = (f"flight recorder: {len(waiting)} rank(s) wait in {sig[0]} #{seq} of {label}{size}; "
            f"{who} {why}")
    if laggards and len(silent) == 1:
        line += f" (last enqueued #{ranks[silent[0]].enqueued}, last completed #{ranks[silent[0]].completed})"
        if attrs.get("stack"):
            line += f"; its last collective, {attrs['last_entered']}, was called from {attrs['stack']}"
    out.findings.append(Finding(kind="rank-straggler", attrs=attrs, rank=None, source=ref.dump.name, line=line,
                                node=None, ts=None))


# --------------------------------------------------------------------------------------------
# Beside logs
# --------------------------------------------------------------------------------------------
def parse_paths(paths: Sequence[str], *, keywords: Iterable[str] = (), stdin=None) -> ParseResult:
    """``trainlog.parse_paths`` for inputs that may hold flight-recorder dumps (files, or inside
    folders): the dumps are analysed here, everything else is read as logs, and one result holds
    both. A laggard's host comes from the logs when a line of that rank names it."""
    paths = [paths] if isinstance(paths, str) else list(paths)
    dumps, logs, inside = split_paths(paths)
    if not dumps:
        return trainlog.parse_paths(paths, keywords=keywords, stdin=stdin)
    read, skipped = _read_found(dumps, inside)
    if not read and not logs:
        raise DumpError(f"{', '.join(paths)}: nothing to read: " + "; ".join(skipped[:3]))
    if logs:
        parsed = trainlog.parse_paths(logs, keywords=keywords, stdin=stdin, skip=inside)
    else:
        parsed = ParseResult(findings=[], lines=[], first_error=None, sources=[], bytes_read=0, lines_read=0,
                             truncated=False, warnings=[])
    rank_node: dict[int, str] = {}
    for item in list(parsed.lines) + list(parsed.findings):
        if item.rank is not None and item.node and item.rank not in rank_node:
            rank_node[item.rank] = item.node
    fr = analyse(read, rank_node)
    fr.warnings[:0] = skipped
    if not fr.findings and read:
        fr.warnings.append(f"{len(read)} flight-recorder dump(s) read: no collective left waiting and no ranks out "
                           f"of step in them")
    parsed.findings = fr.findings + parsed.findings
    parsed.sources = list(parsed.sources) + fr.sources
    parsed.warnings = list(parsed.warnings) + fr.warnings
    parsed.bytes_read += fr.bytes_read
    return parsed
