"""The training-log parser: pasted text, uploaded files, folders, .gz, stdin.

It turns a training job's output into typed :class:`Finding` s (CUDA OOM with its figures,
NCCL watchdog timeouts, XIDs, signals, ...), a bounded list of cleaned :class:`LogLine` s for
the matcher, and the first real error in time.

Speed: logs can be gigabytes.  Input is read in byte chunks; a single RE2 pass over each chunk
(a case-insensitive alternation of the error vocabulary plus the caller's keywords) finds the
few candidate lines, and only those are decoded, cleaned and run through the detailed rules.
Inputs under 4 MB are small enough to keep whole, so every line is cleaned and kept.

Nothing here knows about the knowledge base; callers pass its anchors in ``keywords``.
"""

from __future__ import annotations

import calendar
import functools
import gzip
import hashlib
import html
import io
import itertools
import json
import os
import platform
import re
import stat
import sys
import threading
import time
import zlib
from collections import deque
from dataclasses import dataclass, field
from typing import BinaryIO, Callable, Iterable, NamedTuple, Sequence

import re2

from collectors.findings import KINDS, Finding, FirstError, LogLine
from collectors.unwrap import fill_result_rows, unquote_lines, unwrap
from collectors.kernel_patterns import (DRIVER_LOADED, r_gpu_lost, r_io_error, r_nfs, r_nvlink, r_oom_killer,
                                        r_pcie, r_xid)
from collectors.locale_table import ZH_TO_EN
from collectors.redact import Redactor

__all__ = ["InputError", "ParseResult", "CleanLine", "parse_text", "parse_paths", "clean_line",
           "signature_fragments"]

FULL_LIMIT = 4 * 1024 * 1024  # inputs below this keep every non-blank line
UNWRAP_LIMIT = 1024 * 1024  # inputs up to this size are checked for a terminal's hard wrap (collectors/unwrap.py)
MAX_FULL_LINES = 20_000
HEAD_LINES = 2_000
TAIL_LINES = 5_000
SMALL_CHUNK = 1 << 20  # read size while the input may still be "small"
BIG_CHUNK = 16 << 20  # read size once it is not
MAX_LINE_BYTES = 8 << 20  # a "line" longer than this is cut, to keep memory bounded
MAX_TEXT = 4000  # characters kept of one line (its first and last halves)
SNIFF = 8192
LITERAL_PREFIX = 16  # characters of each keyword the prefilter looks for
FINDING_CAP = 5_000  # per kind; a log repeating one warning a million times gains nothing
XID_CAP = 200_000  # every XID line is a finding, within reason
LOG_EXTS = (".log", ".txt", ".out", ".err", ".gz")


class InputError(Exception):
    """The input cannot be read as a log; ``str(e)`` tells the user what to change."""


@dataclass
class ParseResult:
    findings: list[Finding]
    lines: list[LogLine]
    first_error: FirstError | None
    sources: list[str]
    bytes_read: int
    lines_read: int
    truncated: bool
    warnings: list[str]


@dataclass
class CleanLine(LogLine):
    """A :class:`LogLine` with what the prefixes said besides rank, node and time."""

    device: int | None = None  # local device / local rank ([default3], NCCL's "[3]")
    pid: int | None = None
    level: str | None = None  # E/W/I/F from glog-style prefixes, or ERROR/WARNING words


# --------------------------------------------------------------------------------------------
# The byte-level prefilter: failure messages, not words
# --------------------------------------------------------------------------------------------
# Every rule below (``_r_*``, the traceback and summary rules, the first-error tiers) looks at a line
# only when the line holds one of these.  Each fragment is a rule's own necessary condition, so a
# line the prefilter rejects is one no rule would have said anything about: NCCL_DEBUG=INFO set-up
# chatter ("NCCL_IB_TIMEOUT set by environment", "Allocated ... in /dev/shm" aside), step and loss
# lines and Python warnings are rejected before a byte of them is decoded.  Fragments are lower
# case, in the common subset of RE2, Hyperscan and POSIX ERE (``grep -E -i`` runs them in the
# benchmark), and never cross a line.
# the first-error tiers' trigger: a line that says it failed (_WEAK_WORD)
_WEAK_TRIGGER = r"\b(error|fatal|failed|failure|exception|abort|aborted)\b"
_TRIGGERS = [
    # GPU and host memory (_r_oom, _r_host_mem, r_oom_killer)
    r"out of memory", r"cannot allocate memory", r"not enough memory", r"bad_alloc", r"memoryerror",
    r"total capac", r"cpu virtual memory:[^\n]*percent = (9[0-9]|100)",
    # NCCL and c10d (_r_watchdog, _r_nccl_error, _r_nccl_warn)
    r"watchdog caught", r"timeout at nccl work", r"nccl error", r"ncclsystemerror", r"ncclinternalerror",
    r"ncclremoteerror", r"ncclinvalidusage", r"ncclunhandledcudaerror", r"nccl warn", r"got completion",
    r"transport retry count", r"retry_exc_err",
    # the GPU (_r_xid, r_gpu_lost, _r_ecc, _r_cuda_error, r_nvlink, r_pcie, thermal)
    r"xid \(", r"fallen off the bus", r"gpu lost", r"gpu is lost", r"unable to determine the device handle",
    r"rminitadapter failed", r"rm_init_adapter failed", r"row remap", r"page retire", r"retired page",
    r"pages pending retirement", r"\becc\b", r"cuda error", r"cudaerror", r"cuda driver error", r"cuda runtime error",
    r"cublas_status_", r"cudnn_status_", r"device-side assert triggered", r"illegal memory access was encountered",
    r"nvlink[^\n]*(error|fatal|fail|inactive|down)", r"(error|fatal|fail|inactive|down)[^\n]*nvlink",
    r"\baer: ", r"pcie bus error", r"(thermal|throttl|slowdown)[^\n]*(gpu|hw|temperature|nvrm|clocks)",
    r"(gpu|hw|temperature|nvrm|clocks)[^\n]*(thermal|throttl|slowdown)",
    # shared memory (_r_shm; a line that only names shared memory is a _STATE line)
    r"bus error", r"(shared memory|/dev/shm|</torch_|shm_open|shm\.h:|shmutils|posix_fallocate|semlock|"
    r"multiprocessing/synchronize\.py|multiprocessing/heap\.py|joblib will operate in serial mode|"
    r"_multiprocessing_helpers\.py)[^\n]*(error|unable|no space|failed|cannot)",
    r"(error|unable|no space|failed|cannot)[^\n]*(shared memory|/dev/shm|</torch_|shm_open|shm\.h:|shmutils|"
    r"posix_fallocate|semlock|multiprocessing/synchronize\.py|multiprocessing/heap\.py|"
    r"joblib will operate in serial mode|_multiprocessing_helpers\.py)",
    # storage (_r_disk, r_io_error, r_nfs, and the frames that make a later ENOTCONN a file's: _FILE_FRAME)
    r"resourceexhaustederror", r"resource exhausted", r"resource_exhausted", r"transport endpoint is not connected",
    r"no space left on device", r"disk quota exceeded", r"errno 28", r"insufficient disk space",
    r"not enough space on the disk", r"input/output error", r"errno 5\]",
    r"stale file handle", r"read-only file system", r"i/o error", r"remounting filesystem read-only",
    r"critical medium error", r"ext[234]-fs", r"xfs \(", r"not responding",
    # the scheduler (_r_slurm) and the launcher (_r_rdzv, _r_exit, _r_elastic, torchrun's summary)
    r"cancelled", r"oom-kill event", r"oom_kill event", r"requeue",
    r"rendezvoustimeouterror", r"rendezvousconnectionerror", r"rendezvousclosederror", r"diststoreerror",
    r"distnetworkerror", r"client socket has timed out", r"waiting for clients", r"waiting for workers",
    r"rendezvous[^\n]*timed out", r"connection refused", r"failed to connect", r"connect\(\) failed",
    r"store->get", r"failed \(exitcode: ", r"return code", r"error code", r"exit code", r"returncode",
    r"killed by signal: ", r"srun: error: ", r"(bus error|segmentation fault|aborted|killed)( \(core dumped\))?[ \t\r]*$",
    r"[0-9] +(bus error|segmentation fault|aborted|killed|terminated)", r"signals\.sig", r"got signal",
    r"^zsh: (killed|segmentation fault|bus error|abort) ", r"terminated by signal sig",
    r"(docker|podman) +(container +)?run ",
    r"[0-9]/[0-9]+ +(init:)?(oomkilled|evicted|unexpectedadmissionerror)",
    r"^(sigkill|sigbus|sigsegv|sigabrt)[ \t\r]*$",
    r"signal [0-9]+ \(sig[a-z]+\) received by pid", r"worker group", r"restarts exhausted", r"max_restarts",
    r"root cause \(first observed failure\)", r"failures:",
    # Python tracebacks (_stateful): the head, and an exception line ("FooError: ...", "KeyboardInterrupt")
    r"traceback \(most recent call last\)",
    r"[a-z0-9_](error|exception|interrupt|exit|failure|fault)(:|[ \t\r]*$)",
    # the first-error tiers: any other line that says it failed (_WEAK_WORD) or is logged as critical
    _WEAK_TRIGGER, r"\[critical\]",
    # ... or whose prefix logs it at level E or F (glog "[E ProcessGroupNCCL.cpp:583]", "E0813 04:12:09.123 ...",
    # syslog's "kern :err :")
    r"\[[ef] [a-z0-9_./-]+:[0-9]+\]", r"(^|[^a-z0-9\n])\[?[ef][0-9]{3,4} [0-9]{2}:[0-9]{2}:[0-9]{2}",
    r"(kern|user|daemon|syslog) *: *(emerg|alert|crit|err) *:",
    # versions (_r_version, DRIVER_LOADED)
    r"nvrm: loading nvidia unix", r"driver version:", r"nvidia-smi [0-9]{3}\.", r"cuda version",
    r"cuda compilation tools, release", r"nccl version",
    r"torch(\.__version__)?[ _]*(version)?[ \t]*[:=]*[ \t]*v?[0-9]+\.[0-9]+\.[0-9]+",
    r"deepspeed( info)?[ .]*(version)?[ \t]*[:=]*[ \t]*v?[0-9]+\.[0-9]+\.[0-9]+", r"python version",
    r"mlnx_ofed_linux-",
    # a row of nvidia-smi's process table (GPU [GI CI] PID Type name memory), read by _SMI_PROC: it
    # ends with the memory and the frame ("0MiB |")
    r"[0-9]+mib +\|[ \t\r]*$",
]
# Lines that only move the scan's state, read without decoding once the input is large (_state):
# where shared memory was last named (_SHM_HINTS: an ENOSPC right under it is /dev/shm's, not the
# disk's; "unable"/"cannot" on the same line makes it a rule's line), where a traceback last wrote a
# file (_FILE_FRAME), and the world size and ranks NCCL names ("rank 3 nranks 64").
_STATE = [
    r"shared memory", r"/dev/shm", r"</torch_", r"shm_open", r"shm\.h:", r"shmutils", r"posix_fallocate",
    r"semlock", r"multiprocessing/synchronize\.py", r"multiprocessing/heap\.py",
    r"joblib will operate in serial mode", r"_multiprocessing_helpers\.py",
    r"\.write\(", r"\.flush\(", r"\bopen\(", r"torch\.save", r"atomic_save", r"save_checkpoint", r"fsspec",
    r"os\.replace", r"\.save\(",
    r"\brank [0-9]+ nranks [0-9]+",
]
# Once the input is large, no STATE line is visited: the ranks are gathered from each chunk at once,
# and a rule's line looks back STATE_BACK lines for the last shared-memory name and file frame.
# "rank N nranks M" as _extract reads it (case-sensitive). Only the largest M matters at byte level
# (the world size; every rank such a line names is below it): each chunk is searched once for an M
# above the largest seen so far, so an NCCL_DEBUG=INFO log's thousands of Init lines are skipped at
# the speed of the search, not turned into tuples one by one.
def _above(n: int) -> str:
    """A pattern for the decimal numbers greater than ``n`` (no leading zeros)."""
    d = str(n)
    alts = [f"[1-9][0-9]{{{len(d)},}}"]
    for i, c in enumerate(d):
        if c != "9":
            alts.append(f"{d[:i]}[{int(c) + 1}-9][0-9]{{{len(d) - i - 1}}}")
    return "|".join(alts)


@functools.lru_cache(maxsize=64)
def _nranks_above(n: int) -> "re.Pattern[bytes]":
    # starting with a literal lets re search 8x faster than behind \b: the word start is checked by hand
    return re.compile(rb"rank [0-9]+ nranks (%s)(?![0-9])" % _above(n).encode())


def _max_nranks(buf, floor: int = 0) -> int:
    """The largest M of a ``rank N nranks M`` that starts a word in ``buf``, or ``floor`` when none
    is larger."""
    if b" nranks " not in buf:
        return floor
    pos = 0
    while True:
        m = _nranks_above(floor).search(buf, pos)
        if m is None:
            return floor
        st = m.start()
        if st > 0 and (buf[st - 1:st].isalnum() or buf[st - 1:st] == b"_"):
            pos = st + 1
            continue
        floor, pos = int(m.group(1)), st


_STATE_B = re.compile(b"|".join(t.encode() for t in _STATE))  # on the lower-cased line
_FILE_FRAME_B = re.compile(b"|".join(t.encode() for t in _STATE[12:21]))
_SHM_HINTS_B = tuple(t.replace("\\", "").encode() for t in _STATE[:12])
STATE_BACK = 8  # _extract: an ENOSPC/ENOTCONN at most this many lines under the frame
# lines after which the next few are read whatever they hold (torchrun's failure summary): the
# parallel scan hands the parent FOLLOW_LINES lines after each, so the parent follows as it would
_FOLLOW_SETTERS = r"childfailederror|root cause \(first observed failure\)|failures:|\[[0-9]+\]:[ \t\r]*$"
FOLLOW_LINES = 40
# A caller's keyword that is one short word ("using", "memory", "line") is in healthy output as
# often as in failures: such lines reach the matcher through a failure message on the same line.
_GENERIC_KEYWORD = re.compile(r"[\w-]{1,11} ?")
# Lines that say training is under way (for cuda-oom's at_start).
_STEP = (r"(\b(global_)?step\b[ :=#]*[0-9]+|\biter(ation)?\b[ :=#]*[0-9]+|"
         r"\bloss\b[ :=]*[0-9]|\bepoch\b[ :=]*[0-9]+|[0-9]it/s)")

# what the prefilter says of a line (bits): a rule may speak about it; a caller's keyword is on it; it
# only moves the scan's state; it follows a follow-setter (the parallel scan)
RULE, KEYWORD, CONTEXT = 1, 2, 8
_SETTER = 16  # inside the Hyperscan pass only: the line holds a follow-setter (see _Prefilter.context)
# The thermal triggers in Hyperscan: the rare words alone, their partner word checked on the few lines
# they hit ("gpu...[^\n]*thermal" kept Hyperscan's state busy on every line of a log whose host names
# start with "gpu": 40 % of the whole pass on the NCCL_DEBUG=INFO and kernel profiles)
_THERMAL_PAIR = (r"(thermal|throttl|slowdown)[^\n]*(gpu|hw|temperature|nvrm|clocks)",
                 r"(gpu|hw|temperature|nvrm|clocks)[^\n]*(thermal|throttl|slowdown)")
_THERMAL, _THERMAL_WORDS, _THERMAL_PARTNERS = 32, r"thermal|throttl|slowdown", (b"gpu", b"hw", b"temperature", b"nvrm",
                                                                              b"clocks")
# A line the first-error tiers' trigger (_WEAK_TRIGGER) alone keeps is dropped when it is a Python
# warning: "UserWarning: ... we will raise an exception" is no failure, and PyTorch prints such a
# warning from every rank at every step
_WEAK = 64
# a Python warning as the warnings module prints it (Lib/warnings.py _formatwarnmsg_impl:
# "{filename}:{lineno}: {category}: {message}"): a warning, however it words its message ("In
# version 2.4 we will raise an exception ..."), is not a line that says the job failed
_PY_WARNING = r":[0-9]+: (?:[A-Za-z_][\w.]*\.)?[A-Z]\w*Warning: "
_PY_WARNING_S, _PY_WARNING_B = re.compile(_PY_WARNING), re.compile(_PY_WARNING.encode())


def _py_warning(line: bytes | str) -> bool:
    """The line (raw bytes or text) is a Python warning as the warnings module prints it."""
    if isinstance(line, str):
        return "Warning: " in line and _PY_WARNING_S.search(line) is not None
    return b"Warning: " in line and _PY_WARNING_B.search(line) is not None


def _escape(k: str) -> str:
    return re.sub(r"([.^$*+?()\[\]{}|\\/-])", r"\\\1", k)


def prefilter_keywords(keywords: Iterable[str]) -> list[str]:
    """The caller's keywords the prefilter looks for: lower case, without the generic ones."""
    out = {k.strip().lower() for k in keywords if k and k.strip()}
    return sorted(k for k in out if not _GENERIC_KEYWORD.fullmatch(k))


def signature_fragments(keywords: Iterable[str] = ()) -> list[str]:
    """The prefilter's fragments (ERE-compatible): the rules' triggers plus escaped caller keywords."""
    return list(_TRIGGERS) + list(_STATE) + [_escape(k) for k in prefilter_keywords(keywords)]


def _hyperscan():
    if os.environ.get("GPU_TRIAGE_PREFILTER", "").lower() == "re2":
        return None
    try:
        import hyperscan  # optional: pip install 'gpu-triage[fast]'
    except ImportError:
        return None
    return hyperscan


HS_CACHE_KEEP = 8  # compiled prefilter databases kept in the cache folder (one per set of keywords)


def cache_dir() -> str:
    """Where compiled prefilters are kept: ``$GPU_TRIAGE_CACHE_DIR``, else the user's cache folder."""
    env = os.environ.get("GPU_TRIAGE_CACHE_DIR")
    if env:
        return env
    from platformdirs import user_cache_dir

    return user_cache_dir("gpu-triage", appauthor=False)


def _cpu_flags() -> bytes:
    """The CPU's feature flags (a Hyperscan database is built for them), where Linux says."""
    try:
        with open("/proc/cpuinfo", "rb") as fh:
            head = fh.read(16384)
    except OSError:
        return b""
    for ln in head.split(b"\n"):
        if ln.startswith((b"flags", b"Features")):
            return ln
    return b""


def _hs_database(hs, exprs: list[bytes], flags: int):
    """The Hyperscan database of ``exprs``, each matched with ``flags``. Compiling the ~3 500 patterns
    takes a third of a second, so a compiled database is kept in :func:`cache_dir`, named by a hash of
    the patterns, the flags, the hyperscan version and the CPU (a database is built for the CPU's
    features), and read back by the next process in a millisecond. A cache that cannot be read
    (missing, damaged, built elsewhere) is compiled anew; one that cannot be written is skipped."""
    h = hashlib.sha256()
    for part in (str(getattr(hs, "__version__", "")).encode(), platform.machine().encode(), _cpu_flags(),
                 str(flags).encode(), *exprs):
        h.update(part)
        h.update(b"\0")
    folder = cache_dir()
    path = os.path.join(folder, f"prefilter-{h.hexdigest()[:32]}.hsdb")
    try:
        with open(path, "rb") as fh:
            db = hs.loadb(fh.read(), hs.HS_MODE_BLOCK)
        db.scratch = hs.Scratch(db)
        db.scan(b"probe\n", match_event_handler=lambda *_: None)
        return db
    except Exception:  # noqa: BLE001 - any failure to read it back means: compile it
        pass
    db = hs.Database(mode=hs.HS_MODE_BLOCK)
    db.compile(expressions=exprs, ids=list(range(len(exprs))), elements=len(exprs), flags=[flags] * len(exprs))
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(hs.dumpb(db))
        os.replace(tmp, path)
        old = sorted((e for e in os.scandir(folder) if e.name.startswith("prefilter-") and e.name.endswith(".hsdb")),
                     key=lambda e: e.stat().st_mtime, reverse=True)
        for e in old[HS_CACHE_KEEP:]:
            os.remove(e.path)
    except OSError:
        pass  # a read-only cache folder: compiled again next time
    return db


class _Prefilter:
    """Says, for a chunk of raw bytes, which lines a rule may speak about (RULE), which hold one of
    the caller's keywords (KEYWORD: kept for the matcher, no rule runs) and, on request, which
    follow a follow-setter (CONTEXT).

    With Hyperscan (the optional ``hyperscan`` package) every fragment and keyword is one pattern of
    one database, matched case-insensitively on the raw bytes in a single pass that reports which
    pattern ended where.  Without it, RE2 runs one case-sensitive alternation over the lower-cased
    chunk (keywords cut to their first LITERAL_PREFIX characters, which keeps the DFA small); each
    line it stops on is then sorted by the rule and state alternations, and a keyword line is
    confirmed against the whole keywords with an Aho-Corasick automaton.  Both engines say the
    same of every line.
    """

    def __init__(self, keywords: tuple[str, ...]) -> None:
        self.keywords = list(keywords)
        self.rules = list(_TRIGGERS) + [re.escape(w) for w in sorted(ZH_TO_EN)]
        self.setter_b = re2.compile(b"(?m)" + _FOLLOW_SETTERS.encode())
        hs = _hyperscan()
        self.engine = "hyperscan" if hs is not None else "re2"
        if hs is not None:
            rules = [t for t in self.rules if t not in _THERMAL_PAIR] + [_THERMAL_WORDS]
            exprs = [t.encode("utf-8") for t in rules] + [_escape(k).encode("utf-8") for k in self.keywords]
            self.flag_of = ([_WEAK if t == _WEAK_TRIGGER else RULE for t in rules[:-1]] + [_THERMAL]
                            + [KEYWORD] * len(self.keywords))
            # the follow-setters ride on the same pass: context() then needs no pass of its own
            exprs.append(_FOLLOW_SETTERS.encode("utf-8"))
            self.flag_of.append(_SETTER)
            self.db = _hs_database(hs, exprs, hs.HS_FLAG_CASELESS | hs.HS_FLAG_MULTILINE)
            # a scan needs scratch space of its own: one per thread (the Slack bot diagnoses in a pool)
            self._hs, self._local = hs, threading.local()
            return
        words: list[str] = []
        for w in sorted({k[:LITERAL_PREFIX] for k in self.keywords}):
            if not (words and w.startswith(words[-1])):
                words.append(w)
        opts = re2.Options()
        opts.case_sensitive = True
        opts.max_mem = 64 << 20

        def alt(frags: list[str]) -> bytes:
            return b"(?m)" + "|".join(f"(?:{f})" for f in frags).encode("utf-8")

        self.any_b = re2.compile(alt(self.rules + [re.escape(w) for w in words]), opts)
        self.rule_b = re2.compile(alt([t for t in self.rules if t != _WEAK_TRIGGER]), opts)
        self.weak_b = re2.compile(alt([_WEAK_TRIGGER]), opts)
        self.auto = None
        if self.keywords:
            import ahocorasick

            self.auto = ahocorasick.Automaton()
            for k in self.keywords:
                self.auto.add_word(k, k)
            self.auto.make_automaton()

    def select(self, buf: bytes) -> dict[int, int]:
        """Line start -> flags (RULE, KEYWORD), for the lines of ``buf`` (whole lines) kept."""
        return self.select_with_setters(buf)[0]

    def select_with_setters(self, buf: bytes) -> tuple[dict[int, int], list[int] | None]:
        """:meth:`select`, and the starts of the lines that hold a follow-setter when the same pass
        found them (Hyperscan), for :meth:`context`; None when it did not (RE2)."""
        if self.engine == "hyperscan":
            sel = self._select_hs(buf)
            setters = sorted(s for s, f in sel.items() if f & _SETTER)
            for s in setters:
                if sel[s] == _SETTER:
                    del sel[s]
                else:
                    sel[s] &= ~_SETTER
            return sel, setters
        return self._select_re2(buf), None

    def _select_hs(self, buf: bytes) -> dict[int, int]:
        ends: list[tuple[int, int]] = []
        add = ends.append

        def on_match(pid: int, _frm: int, to: int, _flags: int, _ctx) -> None:
            add((to, pid))

        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = self._hs.Scratch(self.db)
        self.db.scan(buf, match_event_handler=on_match, scratch=scratch)
        out: dict[int, int] = {}
        rfind, flag_of = buf.rfind, self.flag_of
        for to, pid in ends:
            s = rfind(b"\n", 0, to - 1) + 1  # the line the match ends on
            out[s] = out.get(s, 0) | flag_of[pid]
        for s in [s for s, f in out.items() if f & (_THERMAL | _WEAK)]:
            f = out[s]
            e = buf.find(b"\n", s)
            line = buf[s:e if e >= 0 else len(buf)]
            if f & _THERMAL and any(w in line.lower() for w in _THERMAL_PARTNERS):
                f |= RULE
            if f & _WEAK and not (f & RULE) and not _py_warning(line):
                f |= RULE
            f &= ~(_THERMAL | _WEAK)
            if f:
                out[s] = f
            else:
                del out[s]
        return out

    def _select_re2(self, buf: bytes) -> dict[int, int]:
        low = buf.lower()
        out: dict[int, int] = {}
        pos, n = 0, len(low)
        search, find, rfind = self.any_b.search, low.find, low.rfind
        while pos < n:
            m = search(low, pos)
            if m is None:
                break
            s = rfind(b"\n", 0, m.end() - 1) + 1  # the line the match ends on
            e = find(b"\n", m.end())
            e = n if e < 0 else e
            flags = RULE if self.rule_b.search(low, s, e) is not None or (
                self.weak_b.search(low, s, e) is not None and not _py_warning(buf[s:e])) else 0
            if self.auto is not None and next(self.auto.iter(low[s:e].decode("utf-8", "replace")), None):
                flags |= KEYWORD
            if flags:
                out[s] = flags
            pos = e + 1
        return out

    def context(self, buf: bytes, owed: int, setters: list[int] | None = None) -> tuple[list[int], int]:
        """Starts of the lines a follow-setter may make the scanner read: ``owed`` lines at the top
        (left over from the chunk before), and FOLLOW_LINES after every setter; returns those and
        how many are owed to the next chunk. ``setters``: the setter lines' starts, when the
        prefilter's own pass found them (:meth:`select_with_setters`)."""
        if setters is not None and not setters and not owed:
            return [], 0
        low = buf if setters is not None else buf.lower()
        starts: list[int] = []
        n = len(low)
        pos = 0
        want = owed
        todo = iter(setters) if setters is not None else None
        while True:
            nxt = n
            if todo is not None:
                m = next((s for s in todo if s >= pos), None) if pos < n else None
                if m is not None:
                    nxt = m
            else:
                m = self.setter_b.search(low, pos) if pos < n else None
                if m is not None:
                    nxt = low.rfind(b"\n", 0, m.start()) + 1
            while want > 0 and pos < nxt:
                starts.append(pos)
                want -= 1
                e = low.find(b"\n", pos)
                pos = n if e < 0 else e + 1
            if m is None:
                break
            pos = max(pos, nxt)
            e = low.find(b"\n", pos)
            pos = n if e < 0 else e + 1
            want = FOLLOW_LINES
        return starts, want


@functools.lru_cache(maxsize=4)
def _prefilter(keywords: tuple[str, ...]) -> _Prefilter:
    return _Prefilter(keywords)


def _compile_prefilter(keywords: Iterable[str]):
    return _prefilter(tuple(prefilter_keywords(keywords)))


# --------------------------------------------------------------------------------------------
# Cleaning
# --------------------------------------------------------------------------------------------
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][A-Z0-9]|\x1b[=>]")
# the same colours after rsyslog escaped the control character (ESC written as "#033")
_ANSI_SYSLOG = re.compile(r"#033\[[0-9;?]*[ -/]*[@-~]")
_SLACK_LINK = re.compile(r"<((?:https?|ftp|mailto):[^|>\s]*)\|([^>]*)>|<((?:https?|ftp|mailto):[^>\s]*)>")
_FENCE = re.compile(r"^\s*```[\w-]*\s*|\s*```\s*$")
_MON = {m: i for i, m in enumerate(
    ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"], 1)}
_NOT_HOST = re.compile(r"(?i)(error|exception|warning|interrupt|\.py|\.cc|\.cpp|\.cu|\.h)$")

_P_NCCL = re.compile(r"([A-Za-z0-9][\w.-]*):(\d+):(\d+) \[(\d+)\] ")
_P_SRUN = re.compile(r"\s*(\d{1,5}): ")
_P_HOSTRANK = re.compile(r"([A-Za-z][\w.-]*):(\d{1,5}): ")
_P_HOST = re.compile(
    r"((?:[A-Za-z][\w-]*\d[\w-]*|[A-Za-z]\w*-[\w-]+|\d{1,3}(?:\.\d{1,3}){3})(?:\.[A-Za-z][\w-]*)*): ")
_P_DEFAULT = re.compile(r"\[default(\d+)\]:\s?")
_P_RANK = re.compile(r"\[rank(\d+)\]:\s?")
_P_LIGHTNING = re.compile(r"\[rank: ?(\d+)\]\s?")
_P_WORKER = re.compile(r"\(\w+ rank=(\d+) pid=(\d+)\)\s?")
# Ray's prefix on every line a worker, actor or task prints (python/ray/_private/worker.py,
# print_to_stdstream): "(CommandActor pid=552, ip=10.130.6.168)", "(pid=4121)", "(raylet, ip=...)".
_P_RAY = re.compile(r"\((?:[\w.:+-]+(?:, | ))?pid=(\d+)(?:, ip=([\w.:-]+))?\)\s?")
# (then, in a CRI log as containerd writes it under /var/log/pods, the stream and a full/partial tag)
_P_ISO = re.compile(
    r"\[?(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})([.,]\d+)?(Z|[+-]\d{2}:?\d{2})?\]?:?\s*"
    r"(?:(?:stdout|stderr) [FP] )?")
_P_USDATE = re.compile(r"(\d{2})/(\d{2})/(\d{4}) (\d{2}):(\d{2}):(\d{2})(?:\s*-)?\s*")
_P_GLOG_BR = re.compile(
    r"\[([IWEF])(\d{1,2})(\d{2}) (\d{2}):(\d{2}):(\d{2})(\.\d+)?(?: +\d+)?(?: [\w./-]+:\d+)?\]\s?")
_P_GLOG_OLD = re.compile(r"\[([IWEF]) [\w./-]+:\d+\]\s?")
_P_GLOG = re.compile(r"([IWEF])(\d{1,2})(\d{2}) (\d{2}):(\d{2}):(\d{2})(\.\d+)?\s+\d+\s+[\w./-]+:\d+\]\s?")
_P_CTIME = re.compile(
    r"\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) ([A-Z][a-z]{2}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) (\d{4})\]\s?")
_P_MONO = re.compile(r"\[\s*\d+\.\d+\]\s?")
_P_SYSLOG = re.compile(
    r"([A-Z][a-z]{2}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) ([\w.-]+) ([\w./-]+)(?:\[\d+\])?: ")
_P_FACILITY = re.compile(
    r"(?:kern|user|daemon|syslog)\s*:\s*(emerg|alert|crit|err|error|warning|warn|notice|info|debug)\s*:\s*")
_P_KERNEL = re.compile(r"kernel: ")
_P_LEVEL = re.compile(r"\[(INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL)\]\s*")
_P_QUOTE = re.compile(r">\s?")


# A job run under LANG=zh_CN prints the C library's error and signal texts in Chinese
# ("[Errno 28] 设备上没有空间", "已杀死"); they are put back into English so that one set of rules
# reads both (collectors/locale_table.py, generated from glibc's own translations).
_ZH = re.compile("|".join(re.escape(k) for k in sorted(ZH_TO_EN, key=len, reverse=True)))


def _unlocalise(s: str) -> str:
    return _ZH.sub(lambda m: ZH_TO_EN[m.group(0)], s)


# a tqdm progress bar that the next message was printed onto, without a newline
_TQDM = re.compile(r".*?\d{1,3}%\|[^|]*\|\s*[\d.]+[kMG]?/[\d.]+[kMG]?\s*\[[^\]]*\]\s*")


def _unslack(s: str) -> str:
    if "<" in s:
        s = _SLACK_LINK.sub(lambda m: m.group(2) if m.group(1) else m.group(3), s)
    if "&" in s and ";" in s:
        # Slack's three escapes, and the entities a page scraped or copied as HTML source carries
        s = html.unescape(s)
    return s


# one record of a structured log: Docker's json-file driver ({"log": ..., "stream": ..., "time": ...}),
# a JSON logger or a cloud logging export ("message", "msg", "textPayload")
_JSON_TEXT = ("log", "message", "msg", "textPayload", "MESSAGE")
_JSON_TIME = ("time", "timestamp", "ts", "@timestamp", "asctime")
MAX_JSON_LINE = 1 << 16  # a longer line is read as it is (no record of a failing job is that long)


def _unjson(s: str) -> str:
    """The message of a one-line JSON log record, after its time when it has one; else ``s``."""
    if not (s.startswith("{") and s.rstrip().endswith("}")) or len(s) > MAX_JSON_LINE:
        return s
    try:
        rec = json.loads(s)
    except ValueError:
        return s
    if not isinstance(rec, dict):
        return s
    text = next((rec[k] for k in _JSON_TEXT if isinstance(rec.get(k), str)), None)
    if text is None:
        return s
    when = next((rec[k] for k in _JSON_TIME if isinstance(rec.get(k), str)), "")
    text = text.rstrip("\n")
    return f"{when} {text}" if when and _P_ISO.match(when) else text


def _iso(y: int | None, mo: int, d: int, h: int, mi: int, sec: int, frac: str | None, tz: str | None) -> str:
    # without a year (glog, syslog) the ISO 8601 form "--MM-DD" is used
    out = f"{y:04d}-{mo:02d}-{d:02d}" if y else f"--{mo:02d}-{d:02d}"
    out += f"T{h:02d}:{mi:02d}:{sec:02d}"
    if frac:
        out += "." + frac[1:]
    if tz:
        out += tz
    return out


def _epoch(y: int, mo: int, d: int, h: int, mi: int, sec: int, frac: str | None, tz: str | None) -> float | None:
    try:
        t = calendar.timegm((y, mo, d, h, mi, sec, 0, 0, 0))
    except (ValueError, OverflowError):
        return None
    if frac:
        t += float("0." + frac[1:])
    if tz and tz != "Z":
        sign = -1 if tz[0] == "+" else 1
        tz = tz[1:].replace(":", "")
        t += sign * (int(tz[:2]) * 3600 + int(tz[2:4] or 0) * 60)
    return t


class _Stamp:
    """What a line's prefixes said of its time while they are read: the epoch time, whether it lacked
    a year, and the run's year when known (for glog and syslog times)."""

    __slots__ = ("tkey", "yearless", "year_hint")

    def __init__(self, year_hint: int | None) -> None:
        self.tkey: float | None = None
        self.yearless = False
        self.year_hint = year_hint


# One function per prefix: it reads the prefix's match into the line and says whether the prefix is
# taken (a "host" that is a file name or an error word is not).
def _h_srun(m, out: CleanLine, st: _Stamp) -> bool:
    if out.rank is None:
        out.rank = int(m.group(1))
    return True


def _h_rank(m, out: CleanLine, st: _Stamp) -> bool:
    out.rank = int(m.group(1))
    return True


def _h_default(m, out: CleanLine, st: _Stamp) -> bool:
    out.device = int(m.group(1))
    if out.rank is None:
        out.rank = out.device
    return True


def _h_worker(m, out: CleanLine, st: _Stamp) -> bool:
    out.rank, out.pid = int(m.group(1)), int(m.group(2))
    return True


def _h_ray(m, out: CleanLine, st: _Stamp) -> bool:
    out.pid = int(m.group(1))
    if m.group(2) and out.node is None:
        out.node = m.group(2)
    return True


def _h_skip(m, out: CleanLine, st: _Stamp) -> bool:
    return True


def _h_iso(m, out: CleanLine, st: _Stamp) -> bool:
    g = m.groups()
    y, mo, d, h, mi, sec = (int(x) for x in g[:6])
    frac = g[6] and g[6].replace(",", ".")
    out.ts = _iso(y, mo, d, h, mi, sec, frac, g[7])
    st.tkey = _epoch(y, mo, d, h, mi, sec, frac, g[7])
    return True


def _h_ctime(m, out: CleanLine, st: _Stamp) -> bool:
    mo = _MON.get(m.group(1).lower(), 1)
    d, h, mi, sec, y = (int(x) for x in m.group(2, 3, 4, 5, 6))
    out.ts = _iso(y, mo, d, h, mi, sec, None, None)
    st.tkey = _epoch(y, mo, d, h, mi, sec, None, None)
    return True


def _h_glog(m, out: CleanLine, st: _Stamp) -> bool:
    out.level = m.group(1)
    mo, d, h, mi, sec = (int(x) for x in m.group(2, 3, 4, 5, 6))
    st.yearless = st.year_hint is None
    frac = m.group(7)
    out.ts = _iso(st.year_hint, mo, d, h, mi, sec, frac, None)
    st.tkey = _epoch(st.year_hint or 1970, mo, d, h, mi, sec, frac, None)
    return True


def _h_level(m, out: CleanLine, st: _Stamp) -> bool:
    lvl = m.group(1).upper()
    out.level = "E" if lvl in ("ERROR", "CRITICAL") else lvl[:1]
    return True


def _h_usdate(m, out: CleanLine, st: _Stamp) -> bool:
    mo, d, y, h, mi, sec = (int(x) for x in m.groups())
    if 1 <= mo <= 12:
        out.ts = _iso(y, mo, d, h, mi, sec, None, None)
        st.tkey = _epoch(y, mo, d, h, mi, sec, None, None)
    return True


def _h_nccl(m, out: CleanLine, st: _Stamp) -> bool:
    out.node = out.node or m.group(1)
    out.pid = int(m.group(2))
    out.device = int(m.group(4))
    return True


def _h_syslog(m, out: CleanLine, st: _Stamp) -> bool:
    if m.group(1).lower() not in _MON:
        return False
    mo = _MON[m.group(1).lower()]
    d, h, mi, sec = (int(x) for x in m.group(2, 3, 4, 5))
    st.yearless = st.year_hint is None
    out.ts = _iso(st.year_hint, mo, d, h, mi, sec, None, None)
    st.tkey = _epoch(st.year_hint or 1970, mo, d, h, mi, sec, None, None)
    out.node = out.node or m.group(6)
    return True


def _h_facility(m, out: CleanLine, st: _Stamp) -> bool:
    lvl = m.group(1).upper()
    out.level = "E" if lvl in ("ERR", "ERROR", "CRIT", "ALERT", "EMERG") else lvl[:1]
    return True


def _h_hostrank(m, out: CleanLine, st: _Stamp) -> bool:
    if _NOT_HOST.search(m.group(1)):
        return False
    out.node = out.node or m.group(1)
    if out.rank is None:
        out.rank = int(m.group(2))
    return True


def _h_host(m, out: CleanLine, st: _Stamp) -> bool:
    if _NOT_HOST.search(m.group(1)):
        return False
    out.node = out.node or m.group(1)
    return True


_P_GT = re.compile(r"> *")  # a quote's ">" (Slack, e-mail) and the spaces after it
# `docker compose logs`: "<service>-<n>  | " (v1: "<project>_<service>_<n>"), names padded to one width
_P_COMPOSE = re.compile(r"([\w.-]+[-_]\d+) +\| ")
# `kubectl logs --prefix` (and stern-like tools): "[pod/<pod>/<container>] "; the pod stands for the host
_P_KPOD = re.compile(r"\[pod/([\w.-]+)/[\w.-]+\]\s?")


def _h_kpod(m, out: CleanLine, st: _Stamp) -> bool:
    out.node = out.node or m.group(1)
    return True


_SRUN, _ISO, _USDATE = (_P_SRUN, _h_srun), (_P_ISO, _h_iso), (_P_USDATE, _h_usdate)
_NCCL, _HOSTRANK, _HOST = (_P_NCCL, _h_nccl), (_P_HOSTRANK, _h_hostrank), (_P_HOST, _h_host)
_NAMED = ((_P_SYSLOG, _h_syslog), (_P_KERNEL, _h_skip), (_P_FACILITY, _h_facility))
_BRACKET = ((_P_RANK, _h_rank), (_P_KPOD, _h_kpod), (_P_DEFAULT, _h_default), (_P_LIGHTNING, _h_rank), _ISO,
            (_P_CTIME, _h_ctime), (_P_GLOG_BR, _h_glog), (_P_GLOG_OLD, _h_level), (_P_LEVEL, _h_level),
            (_P_MONO, _h_skip))


@functools.lru_cache(maxsize=512)
def _prefix_steps(c: str) -> tuple:
    """The prefixes tried, in order, on a line that starts with ``c``; the first that is taken is cut
    off and the next character decides again. None taken: the prefixes end."""
    if c in " \t":
        return (_SRUN,)
    if c == "[":
        return _BRACKET
    if c == "(":
        return ((_P_WORKER, _h_worker), (_P_RAY, _h_ray))
    if c == ">":
        return ((_P_GT, _h_skip),)
    steps: tuple = ()
    if c.isdigit():
        steps = (_ISO, _SRUN, _USDATE)
    elif c in "IWEF":
        steps = ((_P_GLOG, _h_glog),)
    if not c.isalnum():
        return steps
    return steps + (_NCCL,) + (_NAMED if c.isalpha() else ()) + (_HOSTRANK, _HOST, (_P_COMPOSE, _h_kpod))


def _undecorate(raw: str) -> str:
    """A raw line without what a terminal or chat put around it: ANSI colours, carriage-return
    overwrites, Slack and HTML escapes, a tqdm bar printed over, Chinese-locale C library texts, code
    fences; a one-line JSON log record (Docker's json-file driver, a JSON logger) becomes its message."""
    s = raw
    if s[:1] == "{":
        s = _unjson(s)
    if "\x1b" in s:
        s = _ANSI.sub("", s)
    if "#033[" in s:
        s = _ANSI_SYSLOG.sub("", s)
    if "\r" in s:
        parts = [p for p in s.split("\r") if p.strip()]
        s = parts[-1] if parts else ""
    s = _unslack(s)
    if "|" in s and "%" in s:
        m = _TQDM.match(s)
        if m and s[m.end():].strip():
            s = s[m.end():]
    if not s.isascii():
        s = _unlocalise(s)
    if "```" in s:
        s = _FENCE.sub("", s)
    return s.rstrip()


def _cut_text(out: CleanLine, s: str) -> None:
    out.text = s.strip()
    if len(out.text) > MAX_TEXT:
        # a huge line keeps its start and its end: the error a program prints last (after a progress
        # bar, a dump, a 100 MB line of padding) is at the end
        half = MAX_TEXT // 2
        out.text = out.text[:half] + " … " + out.text[-half:].lstrip()


def _clean_plan(raw: str, year_hint: int | None = None) -> tuple[CleanLine, float | None, bool, tuple]:
    """:func:`_clean`, and the prefixes it took (the plan :func:`_clean_by_plan` replays)."""
    s = _undecorate(raw)
    out = CleanLine(text="", line_no=0)
    st = _Stamp(year_hint)
    plan = []
    for _ in range(12):
        if not s:
            break
        for step in _prefix_steps(s[0]):
            m = step[0].match(s)
            if m and step[1](m, out, st):
                plan.append(step)
                s = s[m.end():]
                break
        else:
            break
    _cut_text(out, s)
    return out, st.tkey, st.yearless, tuple(plan)


def _clean(raw: str, year_hint: int | None = None) -> tuple[CleanLine, float | None, bool]:
    """Clean one raw line; returns the line, an epoch time when known, and whether the
    timestamp lacked a year (so the caller may want to fix it from context)."""
    out, tkey, yearless, _ = _clean_plan(raw, year_hint)
    return out, tkey, yearless


def _plain(raw: str) -> bool:
    """A line :func:`_undecorate` leaves as it is but for trailing space (ASCII, no escapes or overwrites)."""
    return (raw.isascii() and "\x1b" not in raw and "\r" not in raw and "<" not in raw and "&" not in raw
            and "`" not in raw and raw[:1] != "{" and "#033[" not in raw and not ("|" in raw and "%" in raw))


def _clean_by_plan(raw: str, plan: tuple, year_hint: int | None) -> tuple[CleanLine, float | None, bool] | None:
    """:func:`_clean` of a plain line whose digit template (every digit read as 0) was cleaned before
    with ``plan``: every prefix pattern treats all ASCII digits alike (tests/test_scan_speed_memo.py
    checks), so the same prefixes are taken, at the same places; only their values are read here.
    None where a step does not match (it cannot; the caller then cleans the long way)."""
    s = raw.rstrip()
    out = CleanLine(text="", line_no=0)
    st = _Stamp(year_hint)
    for rx, handler in plan:
        m = rx.match(s)
        if m is None or not handler(m, out, st):
            return None
        s = s[m.end():]
    _cut_text(out, s)
    return out, st.tkey, st.yearless


def clean_line(raw: str) -> CleanLine:
    """Strip ANSI colours, Slack escapes and rank/host/timestamp prefixes from one line.

    Returns a :class:`CleanLine` (a :class:`LogLine`): ``text`` is the message, ``rank``,
    ``node``, ``ts`` what the prefixes said; ``device``/``pid``/``level`` the rest.
    """
    return _clean(raw)[0]


# --------------------------------------------------------------------------------------------
# Rules: cleaned line -> findings
# --------------------------------------------------------------------------------------------
_U = r"([\d.]+) ?([KMGT]i?B|bytes?|B)\b"
_UNIT = {"b": 2.0 ** -30, "byte": 2.0 ** -30, "bytes": 2.0 ** -30, "kib": 2.0 ** -20, "kb": 2.0 ** -20,
         "mib": 2.0 ** -10, "mb": 2.0 ** -10, "gib": 1.0, "gb": 1.0, "tib": 1024.0, "tb": 1024.0}


def _gib(num: str, unit: str) -> float | None:
    try:
        return round(float(num) * _UNIT[unit.lower()], 4)
    except (KeyError, ValueError):
        return None


_OOM_TRIED = re.compile(r"Tried to allocate " + _U)
_OOM_OLD = re.compile(r"\(GPU (\d+); " + _U + r" total capacity; " + _U + r" already allocated; " + _U
                      + r" free; (?:" + _U + r" reserved in total by PyTorch|" + _U + r" cached)")
_OOM_TOTAL = re.compile(r"GPU (\d+) has a total capac\w* of " + _U + r" of which " + _U + r" is free")
_OOM_PROC = re.compile(r"this process has " + _U + r" memory in use")
# PyTorch 2.1-2.3 listed every process on the GPU as "Process N has X memory in use", itself included
_OOM_PROCS = re.compile(r"Process \d+ has " + _U + r" memory in use")
_OOM_ALLOC = re.compile(r"Of the allocated memory " + _U + r" is allocated by PyTorch, and " + _U
                        + r" is reserved by PyTorch but unallocated")


def _maybe(t: str, low: str, words: tuple[str, ...]) -> bool:
    """Whether a case-insensitive pattern, every match of which holds one of ``words`` (lower case),
    may match ``t``: a substring test that saves the search on most lines. Outside ASCII, case
    folding matches letters that lower() does not give (the Kelvin sign, the long s), so such a
    line is always searched."""
    return not t.isascii() or any(w in low for w in words)


def _r_oom(t: str, low: str) -> list:
    if "out of memory" not in low or ("cuda" not in low and "tried to allocate" not in low):
        # the caching allocator's message cut before "CUDA out of memory." (a paste that starts
        # mid-line): its own figures say what it is
        if "total capac" not in low or not (_OOM_OLD.search(t) or (_OOM_TOTAL.search(t) and _OOM_TRIED.search(t))):
            return []
    a: dict = {}
    m = _OOM_TRIED.search(t)
    if m:
        a["tried_gib"] = _gib(*m.group(1, 2))
    m = _OOM_OLD.search(t)
    if m:
        a["gpu"] = int(m.group(1))
        a["total_gib"] = _gib(*m.group(2, 3))
        a["allocated_gib"] = _gib(*m.group(4, 5))
        a["free_gib"] = _gib(*m.group(6, 7))
        if m.group(8):
            res = _gib(*m.group(8, 9))
        else:  # PyTorch <= 1.3 said "X cached": held by the allocator on top of what is allocated
            cached = _gib(*m.group(10, 11))
            res = None if cached is None or a["allocated_gib"] is None else round(a["allocated_gib"] + cached, 4)
        a["reserved_gib"] = res
        if res is not None and a["allocated_gib"] is not None:
            a["reserved_unallocated_gib"] = round(max(res - a["allocated_gib"], 0.0), 4)
    m = _OOM_TOTAL.search(t)
    if m:
        a["gpu"] = int(m.group(1))
        a["total_gib"] = _gib(*m.group(2, 3))
        a["free_gib"] = _gib(*m.group(4, 5))
    m = _OOM_PROC.search(t)
    procs = _OOM_PROCS.findall(t) if m is None else []
    if m:
        a["process_gib"] = _gib(*m.group(1, 2))
    elif len(procs) == 1:  # the only process on the GPU is this one (with several, which is unknown)
        a["process_gib"] = _gib(*procs[0])
    m = _OOM_ALLOC.search(t)
    if m:
        al, ru = _gib(*m.group(1, 2)), _gib(*m.group(3, 4))
        a["allocated_gib"] = al
        a["reserved_unallocated_gib"] = ru
        if al is not None and ru is not None:
            a["reserved_gib"] = round(al + ru, 4)
    res, ru = a.get("reserved_gib"), a.get("reserved_unallocated_gib")
    if res and ru is not None:
        a["frag_ratio"] = round(ru / res, 4)
    # what neither this process nor the free pool accounts for: another process's memory on the GPU
    total, free = a.get("total_gib"), a.get("free_gib")
    mine = max(a.get("process_gib") or 0.0, a.get("reserved_gib") or 0.0)
    if total and free is not None and mine:
        a["elsewhere_share"] = round(max(total - free - mine, 0.0) / total, 4)
    return [("cuda-oom", {k: v for k, v in a.items() if v is not None})]


_WATCHDOG = re.compile(r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(\d+), OpType=(\w+)"
                       r"(?:, NumelIn=(\d+))?[^)]*?Timeout\(ms\)=(\d+)\) ran for (\d+) milli")
_PG_RANK = re.compile(r"\[(?:PG [^\]]*?)?Rank (\d+)\]")
_PG_ID = re.compile(r"\[PG (?:ID )?(\d+)")


EVENT_CAP = 20_000   # first-error candidates of one class before the ones that cannot be first go
EVENT_KEEP = 2_000   # how many the pruning keeps by position and by time
MAX_RANK_NODES = 65536  # ranks whose host is remembered
_TIMEOUT_AT = re.compile(r"Timeout at NCCL work: (\d+), last enqueued NCCL work: (-?\d+), "
                         r"last completed NCCL work: (-?\d+)")
# PyTorch 2.4+ (ProcessGroupNCCL's watchdog): "[PG ID 0 PG GUID 0(default_pg) Rank 5] failure detected by
# watchdog at work sequence id: 20917 PG status: last enqueued work: 20918, last completed work: 20916"
_PG_STATUS = re.compile(r"failure detected by watchdog at work sequence id: (\d+)\s+PG status: "
                        r"last enqueued work: (-?\d+), last completed work: (-?\d+)")


def _r_watchdog(t: str, low: str) -> list:
    if "timeout at nccl work" in low or "failure detected by watchdog" in low:
        m = _TIMEOUT_AT.search(t) or _PG_STATUS.search(t)
        if not m:
            return [("nccl-timeout", {})]
        return [("nccl-timeout", {"seq": int(m.group(1)), "last_enqueued": int(m.group(2)),
                                  "last_completed": int(m.group(3))})]
    if "watchdog caught" not in low:
        return []
    m = _WATCHDOG.search(t)
    if not m:
        return [("nccl-timeout", {})]
    a = {"seq": int(m.group(1)), "op": m.group(2).lstrip("_").upper(), "timeout_ms": int(m.group(4)),
         "elapsed_ms": int(m.group(5))}
    if m.group(3):
        a["numel_in"] = int(m.group(3))
    return [("nccl-timeout", a)]


_NCCL_REASONS = [
    ("unhandled system error", "unhandled-system-error"), ("ncclsystemerror", "unhandled-system-error"),
    ("unhandled cuda error", "unhandled-cuda-error"), ("ncclunhandledcudaerror", "unhandled-cuda-error"),
    ("internal error", "internal-error"), ("ncclinternalerror", "internal-error"),
    ("invalid usage", "invalid-usage"), ("ncclinvalidusage", "invalid-usage"),
    ("remote process exited", "remote-error"), ("ncclremoteerror", "remote-error"),
    ("connection closed by", "connection-closed"), ("connection reset by peer", "connection-closed"),
]


def _r_nccl_error(t: str, low: str) -> list:
    if "nccl" not in low or ("error" not in low) or "nccl warn" in low or "nccl info" in low:
        return []
    if not ("nccl error" in low or "ncclsystemerror" in low or "ncclinternalerror" in low
            or "ncclremoteerror" in low or "ncclinvalidusage" in low or "ncclunhandledcudaerror" in low):
        return []
    reason = "other"
    for needle, r in _NCCL_REASONS:
        if needle in low:
            reason = r
            break
    return [("nccl-error", {"reason": reason, "text": t})]


_NCCL_WARN = re.compile(r"NCCL WARN\s*(.*)")
_IB_COMPL = re.compile(r"Got completion from peer (\S+?)(?:<\d+>)? with (?:error|status=?)\s*(\d+)"
                       r"(?:.*?vendor err (\d+))?")
_IB_RETRY = re.compile(r"(?i)transport retry count(?:er)? exceeded|retry_exc_err")
_IB_RETRY_WORDS = ("transport retry count", "retry_exc_err")


def _r_nccl_warn(t: str, low: str) -> list:
    out = []
    if "nccl warn" in low:
        m = _NCCL_WARN.search(t)
        out.append(("nccl-warn", {"text": m.group(1).strip() if m else t}))
    if "got completion" in low:
        m = _IB_COMPL.search(t)
        if m:
            a: dict = {"status": int(m.group(2)), "peer": m.group(1)}
            if m.group(3):
                a["vendor_err"] = int(m.group(3))
            out.append(("ib-error", a))
    elif _maybe(t, low, _IB_RETRY_WORDS) and _IB_RETRY.search(t):
        out.append(("ib-error", {"status": "transport retry counter exceeded"}))
    return out


def _r_xid(t: str, low: str) -> list:
    return r_xid(t, low) + r_gpu_lost(t, low)


def _r_ecc(t: str, low: str) -> list:
    if "row remap" in low:
        return [("ecc-error", {"type": "row-remap", "text": t})]
    if "page retire" in low or "retired page" in low or "pages pending retirement" in low:
        return [("ecc-error", {"type": "page-retired", "text": t})]
    if "ecc" in low and re.search(r"\becc\b", low) and ("error" in low or "fault" in low):
        typ = "uncorrectable" if ("uncorrect" in low or "double bit" in low or "double-bit" in low
                                  or re.search(r"\bdbe\b", low)) else \
            "correctable" if ("correct" in low or "single bit" in low or "single-bit" in low
                              or re.search(r"\bsbe\b", low)) else "uncorrectable"
        return [("ecc-error", {"type": typ, "text": t})]
    return []


_CUDA_ERRS = [
    ("illegal memory access", "illegal-memory-access"), ("device-side assert", "device-side-assert"),
    ("launch failure", "launch-failure"), ("uncorrectable ecc error", "ecc-uncorrectable"),
    ("no kernel image", "no-kernel-image"), ("driver version is insufficient", "driver-insufficient"),
    ("cudaerrorinsufficientdriver", "driver-insufficient"), ("not ready", "not-ready"),
]
_CUDA_ERR_TRIG = re.compile(r"(?i)CUDA error|cudaError\w+|CUDA driver error|cuda runtime error|"
                            r"CUBLAS_STATUS_\w+|CUDNN_STATUS_\w+|device-side assert triggered|"
                            r"illegal memory access was encountered")
# what every _CUDA_ERR_TRIG match holds, lower-cased
_CUDA_ERR_WORDS = ("cuda", "cublas_status_", "cudnn_status_", "device-side assert triggered",
                   "illegal memory access was encountered")


def _r_cuda_error(t: str, low: str) -> list:
    if "out of memory" in low or not (_maybe(t, low, _CUDA_ERR_WORDS) and _CUDA_ERR_TRIG.search(t)):
        return []
    err = "other"
    for needle, e in _CUDA_ERRS:
        if needle in low:
            err = e
            break
    return [("cuda-error", {"error": err, "text": t})]


_SHM_HINTS = ("shared memory", "/dev/shm", "</torch_", "shm_open", "shm.h:", "shmutils", "posix_fallocate",
              "semlock", "multiprocessing/synchronize.py", "multiprocessing/heap.py",
              # joblib probes a POSIX semaphore (sem_open: a file in /dev/shm) and warns when it fails
              "joblib will operate in serial mode", "_multiprocessing_helpers.py")


# a GPU kernel's on-chip shared memory (SMEM: Triton's OutOfResources, ptxas, a kernel's dynamic shared
# memory attribute) is not /dev/shm: its limit is the GPU's, and the fix is the kernel's configuration
_GPU_SMEM = ("out of resource: shared memory", "hardware limit", "shared memory, required", "too much shared",
             "shared data (", "dynamicsharedmemory", "dynamic shared memory", "shared memory per block", "smem")


def _shm_context(low: str) -> bool:
    """The line is about POSIX shared memory (/dev/shm, NCCL's shm transport, torch's shm files),
    not a GPU kernel's on-chip shared memory."""
    return any(h in low for h in _SHM_HINTS) and not any(g in low for g in _GPU_SMEM)


def _r_shm(t: str, low: str) -> list:
    if "bus error" in low and ("dataloader" in low or "shared memory" in low or "shm" in low):
        return [("shm-bus-error", {"text": t})]
    if _shm_context(low) and any(w in low for w in ("error", "unable", "no space", "failed", "cannot")):
        return [("shm-error", {"text": t})]
    return []


_NOSPACE_PATH = re.compile(r"(?:No space left on device|Disk quota exceeded)\)?:? ?['\"]?(/[^'\"\s]*)")
_PATH_BEFORE = re.compile(r"(/[\w./@+-]+)['\"]?:? No space left")


_FILE_FRAME = re.compile(r"\.write\(|\.flush\(|\bopen\(|torch\.save|atomic_save|save_checkpoint|fsspec|os\.replace|\.save\(")
_ENOTCONN_PATH = re.compile(r"(?:Errno 107\]|Transport endpoint is not connected)[^/]*['\"]?(/|b'/)")


# TensorFlow/TSL map a file operation's ENOSPC and EDQUOT to RESOURCE_EXHAUSTED (tsl/platform/errors.cc,
# ErrnoToCode); old versions print only the file, e.g. "ResourceExhaustedError: ./m/model-49.tempstate57"
_TF_EXHAUSTED_FILE = re.compile(r"(?:ResourceExhaustedError|Resource exhausted|RESOURCE_EXHAUSTED):\s*['\"]?"
                                r"((?:\.{0,2}/|~/)[^\s;'\"]+|[^\s;'\"]*\.tempstate\d*)")


def _r_disk(t: str, low: str) -> list:
    out = []
    if "exhausted" in low and "no space left" not in low and "quota" not in low:
        m = _TF_EXHAUSTED_FILE.search(t)
        if m:
            out.append(("disk-full", {"path": m.group(1)}))
    if "transport endpoint is not connected" in low and _ENOTCONN_PATH.search(t):
        # ENOTCONN on a file path: the FUSE or network mount behind it (s3fs, NFS, GCS FUSE) went away
        out.append(("io-error", {"text": t}))
    if ("no space left on device" in low or "disk quota exceeded" in low or "errno 28" in low
            or "insufficient disk space" in low or "not enough space on the disk" in low):
        # the last two: a service's own wording (SageMaker's "Artifact upload failed:Insufficient
        # disk space") and Windows' ERROR_DISK_FULL text ("[WinError 112] There is not enough space
        # on the disk")
        if not _shm_context(low):
            a: dict = {"errno": 122 if "quota" in low else 28}
            m = _NOSPACE_PATH.search(t) or _PATH_BEFORE.search(t)
            if m:
                a["path"] = m.group(1)
            out.append(("disk-full", a))
    out += r_io_error(t, low)
    out += r_nfs(t, low)
    return out


# DeepSpeed's see_memory_usage: "CPU Virtual Memory:  used = 502.63 GB, percent = 99.8%" (psutil's
# virtual_memory(): percent is (total - available) / total, page cache not counted as used)
_DS_CPU_MEM = re.compile(r"CPU Virtual Memory:\s+used = ([\d.]+) GB, percent = ([\d.]+)%")


def _pinning(low: str) -> bool:
    """The line is about pinning memory for RDMA (verbs calls, the locked-memory limit)."""
    return "ibv_" in low or "locked memory" in low or "memlock" in low or "reg_mr" in low


def _r_host_mem(t: str, low: str) -> list:
    out = r_oom_killer(t, low)
    if "cpu virtual memory" in low:
        m = _DS_CPU_MEM.search(t)
        if m and float(m.group(2)) <= 100:
            out.append(("host-memory", {"used_mib": round(float(m.group(1)) * 1024),
                                        "available_pct": round(100 - float(m.group(2)), 1)}))
    if ("not enough memory" in low or "cannot allocate memory" in low or "bad_alloc" in low
            or re.match(r"(?:\w+\.)*MemoryError\b", t)) and not _shm_context(low) and not _pinning(low):
        # ENOMEM on a shared-memory file (mmap of </torch_...>, /dev/shm) is the shm rule's; on an RDMA
        # registration (ibv_reg_mr, ibv_create_cq, "max locked memory") the locked-memory limit's
        out.append(("host-oom", {"text": t}))
    return out


_SLURM = re.compile(r"\*\*\* (?:JOB|STEP) (\d+)(?:\.\w+)?(?: ON \S+)? CANCELLED AT \S+(?: DUE TO ([A-Z ]+?))?"
                    r"(?: on \S+)? \*\*\*")


def _r_slurm(t: str, low: str) -> list:
    out = []
    if "cancelled" in low and ("***" in t or "slurm" in low):
        m = _SLURM.search(t)
        due = (m.group(2) if m else "") or ""
        if not due:
            dm = re.search(r"DUE TO ([A-Z ]+?)(?: on \S+)? \*\*\*", t)
            due = dm.group(1) if dm else ""
        ev = {"TIME LIMIT": "time-limit", "PREEMPTION": "preempted", "NODE FAILURE": "node-fail"}.get(
            due.strip(), "cancelled")
        a: dict = {"event": ev, "text": t}
        jm = m or re.search(r"(?:JOB|STEP) (\d+)", t)
        if jm:
            a["job"] = jm.group(1)
        out.append(("slurm-event", a))
    elif "oom-kill event" in low or "oom_kill event" in low:
        a = {"event": "oom", "text": t}
        jm = re.search(r"StepId=(\d+)|job (\d+)", t)
        if jm:
            a["job"] = jm.group(1) or jm.group(2)
        out.append(("slurm-event", a))
    elif "requeue" in low and ("slurm" in low or "job" in low) and not any(k in low for k in _OTHER_SCHEDULERS):
        # PBS/LSF/SGE/Flux requeue lines are their catalogs' (knowledge/catalog/pbs.yaml ...), not Slurm's
        out.append(("slurm-event", {"event": "requeued", "text": t}))
    return out


_OTHER_SCHEDULERS = ("pbs", "term_requeue", "execution node", "qmaster", "rescheduling", "flux")

_RDZV = [
    ("rendezvoustimeouterror", "timeout"), ("rendezvousconnectionerror", "connect-failed"),
    ("rendezvousclosederror", "closed"), ("diststoreerror", "store-error"),
    ("distnetworkerror", "connect-failed"),
]


def _r_rdzv(t: str, low: str) -> list:
    reason = None
    for needle, r in _RDZV:
        if needle in low:
            reason = r
            break
    if reason is None:
        if ("client socket has timed out" in low or "waiting for clients" in low
                or "waiting for workers" in low or ("rendezvous" in low and "timed out" in low)):
            reason = "timeout"
        elif ("store" in low or "c10d" in low or "rendezvous" in low) and (
                "connection refused" in low or "failed to connect" in low or "connect() failed" in low):
            reason = "connect-failed"
        elif "store->get" in low and "error" in low:
            reason = "store-error"
    if reason is None:
        return []
    if reason == "store-error" and "timed out" in low or "timeout" in low and reason == "store-error":
        reason = "timeout"
    return [("rendezvous-error", {"reason": reason, "text": t})]


_SIGNALS = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE",
            9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM"}
_AGENT_FAIL = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)")
_SUM_EXIT = re.compile(r"^exitcode\s*: (-?\d+) \(pid: (\d+)\)")
_SUM_HOST = re.compile(r"^host\s*: (\S+)")
_SUM_RANK = re.compile(r"^rank\s*: (\d+) \(local_rank: (\d+)\)")
_SUM_TB = re.compile(r"^traceback\s*: Signal (\d+) \((SIG\w+)\) received by PID (\d+)", re.I)
_SIG_RECV = re.compile(r"Signal (\d+) \((SIG\w+)\) received by PID (\d+)", re.I)
_RET_CODE = re.compile(r"(?:exits? with return code|return code|error code|exit code|returncode)\s?[=:]?\s?(-?\d+)",
                       re.IGNORECASE)
_RET_CODE_WORDS = ("return code", "error code", "exit code", "returncode")
_KILLED_BY = re.compile(r"killed by signal: (Killed|Bus error|Segmentation fault|Aborted|Terminated)", re.IGNORECASE)
_SRUN_TASK = re.compile(r"srun: error: (\S+): tasks? ([\d,-]+): (Killed|Bus error|Segmentation fault|Aborted|"
                        r"Terminated|Exited with exit code \d+)")
_SHELL_SIG = re.compile(r"^(Bus error|Segmentation fault|Aborted|Killed)(?: \(core dumped\))?$")
# bash's job report: "train.sh: line 3: 12345 Killed                 python train.py"
# (zh_CN bash, from its message catalog: "train.sh: 第 3 行：12345 已杀死 ...")
_BASH_JOB = re.compile(r"(?:\bline ?\d+|第 ?\d+ ?行|行 ?\d+)[:：]\s*\d+ (Bus error|Segmentation fault|Aborted|Killed|Terminated)"
                       r"(?:\s+\(core dumped\))?(?:\s|$)")
_SHELL_NAMES = {"bus error": "SIGBUS", "segmentation fault": "SIGSEGV", "aborted": "SIGABRT",
                "killed": "SIGKILL", "terminated": "SIGTERM", "abort": "SIGABRT"}
# the other shells' reports of a job killed by a signal: zsh's "zsh: killed     python train.py"
# (its names: killed, segmentation fault, bus error, abort), fish's "fish: Job 1, 'python train.py'
# terminated by signal SIGKILL (Forced quit)", and a supervisor's bare signal name on a line of its own
_ZSH_SIG = re.compile(r"^zsh: (killed|segmentation fault|bus error|abort) +\S")
_FISH_SIG = re.compile(r"^fish: Job \d+, .* terminated by signal (SIGKILL|SIGBUS|SIGSEGV|SIGABRT|SIGTERM)\b")
_BARE_SIG = re.compile(r"^(SIGKILL|SIGBUS|SIGSEGV|SIGABRT)$")
# the shell's report glued to a progress bar that never printed its newline (tqdm, mmcv's
# ProgressBar: "[>>>>  ] 1022/5000, 1.5 task/s, elapsed: 673s, ETA: 2621sKilled")
_GLUED_SIG = re.compile(r"(?:ETA: ?[\d:]+s?|\d(?:it|s|task)/(?:s|it)\]?|\d+/\d+ \[[^\]]*\])\s*"
                        r"(Bus error|Segmentation fault|Aborted|Killed)(?: \(core dumped\))?$")


def _sig_attrs(code: int) -> dict:
    a: dict = {"exitcode": code}
    if code < 0 and -code in _SIGNALS:
        a["signal"] = _SIGNALS[-code]
    elif code > 128 and code - 128 in _SIGNALS:
        a["signal"] = _SIGNALS[code - 128]
    return a


def _r_exit(t: str, low: str) -> list:
    m = _AGENT_FAIL.search(t) if "failed (exitcode: " in t else None
    if m:
        a = _sig_attrs(int(m.group(1)))
        a["local_rank"] = int(m.group(2))
        a["pid"] = int(m.group(3))
        return [("exit-signal", a)]
    m = _RET_CODE.search(t) if _maybe(t, low, _RET_CODE_WORDS) else None
    if m and int(m.group(1)) != 0:
        return [("exit-signal", _sig_attrs(int(m.group(1))))]
    m = _KILLED_BY.search(t) if _maybe(t, low, ("killed by signal: ",)) else None
    if m:
        return [("exit-signal", {"signal": _SHELL_NAMES[m.group(1).lower()]})]
    m = _SRUN_TASK.search(t) if "srun: error: " in t else None
    if m:
        what = m.group(3).lower()
        a = {"host": m.group(1)}
        if what.startswith("exited with exit code"):
            a.update(_sig_attrs(int(what.rsplit(" ", 1)[1])))
        else:
            a["signal"] = _SHELL_NAMES.get(what)
        return [("exit-signal", {k: v for k, v in a.items() if v is not None})]
    m = _SHELL_SIG.match(t) or (_BASH_JOB.search(t) if ("line" in t or "行" in t) else None) \
        or (_GLUED_SIG.search(t) if t.endswith(("Killed", "fault", "error", "Aborted", "dumped)")) else None)
    if m:
        return [("exit-signal", {"signal": _SHELL_NAMES[m.group(1).lower()]})]
    m = _ZSH_SIG.match(t) if t.startswith("zsh: ") else None
    if m:
        return [("exit-signal", {"signal": _SHELL_NAMES[m.group(1)]})]
    m = (_FISH_SIG.match(t) if t.startswith("fish: ") else None) or (_BARE_SIG.match(t) if t[:3] == "SIG" else None)
    if m:
        return [("exit-signal", {"signal": m.group(1)})]
    if "signals.sig" in low:
        m = re.search(r"Signals\.(SIG\w+): (\d+)", t)
        if m:
            return [("exit-signal", {"signal": m.group(1), "exitcode": -int(m.group(2))})]
    if "got signal" in low:
        m = re.search(r"Process (\d+) got signal: (\d+)", t)
        if m:
            a = _sig_attrs(-int(m.group(2)))
            a["pid"] = int(m.group(1))
            return [("exit-signal", a)]
    return []


def _r_elastic(t: str, low: str) -> list:
    if ("worker group" in low and "fail" in low) or "restarts exhausted" in low or \
            ("max_restarts" in low and "exceed" in low):
        return [("elastic-restart", {"text": t})]
    return []


def _r_misc(t: str, low: str) -> list:
    out = r_nvlink(t, low) + r_pcie(t, low)
    if ("thermal" in low or "throttl" in low or "slowdown" in low) and any(
            w in low for w in ("gpu", "hw", "temperature", "nvrm", "clocks")):
        out.append(("thermal", {"text": t}))
    if " run " in low and ("docker" in low or "podman" in low):
        m = _CONTAINER_RUN.search(low)
        if m and not _SHM_FLAG.search(low):
            # the container the job runs in got the engine's default /dev/shm (64 MB: docker run's
            # --shm-size default, podman's too): nothing on the command line raised it or shared the host's
            out.append(("container-shm-default", {"runtime": m.group(1), "shm_bytes": 64 * 1024 * 1024}))
    if "OOMKilled" in t or "Evicted" in t or "UnexpectedAdmissionError" in t:
        m = _POD_ROW.search(t)
        if m:
            out.append(("pod-status", {"pod": m.group(1), "status": m.group(2)}))
    return out


# a row of kubectl get pods (pkg/printers/internalversion printPod: [NAMESPACE] NAME READY STATUS
# RESTARTS AGE), READY as ready/total containers; STATUS is the pod's reason (Evicted,
# UnexpectedAdmissionError) or a container's terminated reason (OOMKilled, "Init:" for an init
# container), whatever RESTARTS looks like ("3", "3 (41s ago)") or where the row was cut
_POD_ROW = re.compile(r"(?:^|\s)([a-z0-9][a-z0-9.-]*)\s+\d+/\d+\s+(?:Init:)?(OOMKilled|Evicted|UnexpectedAdmissionError)"
                      r"(?=\s|$)")


# a container started by hand: "docker run ...", "sudo nvidia-docker run ...", "podman run ..."
_CONTAINER_RUN = re.compile(r"(?:^|[\s$#>])(?:sudo\s+)?(?:nvidia-)?(docker|podman)\s+(?:container\s+)?run\s+\S")
_SHM_FLAG = re.compile(r"--ipc[= ]+host|--shm-size|--shm_size|--ipc[= ]+container:|-v\s+/dev/shm:/dev/shm|"
                       r"--mount\s+\S*(?:target|dst|destination)=/dev/shm")


_VERSIONS = [
    ("driver", DRIVER_LOADED),
    ("driver", re.compile(r"Driver Version:\s*(\d{3}\.\d+(?:\.\d+)?)")),
    ("driver", re.compile(r"NVIDIA-SMI (\d{3}\.\d+(?:\.\d+)?)")),
    ("cuda", re.compile(r"CUDA Version:?\s*(\d+\.\d+(?:\.\d+)?)")),
    ("cuda", re.compile(r"Cuda compilation tools, release (\d+\.\d+)")),
    ("nccl", re.compile(r"NCCL version:?\s*(\d+\.\d+\.\d+(?:\+[\w.]+)?)")),
    ("pytorch", re.compile(r"(?i)(?<![\w.])(?:py)?torch(?:\.__version__)?[ _]*(?:version)?\s*[:=]*\s*v?"
                           r"(\d+\.\d+\.\d+(?:[+.][\w.]+)?)")),
    ("deepspeed", re.compile(r"(?i)deepspeed(?: info)?[ .]*(?:version)?\s*[:=]*\s*v?(\d+\.\d+\.\d+)")),
    ("python", re.compile(r"(?i)python version:?\s*(\d+\.\d+(?:\.\d+)?)")),
    ("ofed", re.compile(r"(?i)MLNX_OFED_LINUX-([\d.-]+)")),
]


# what each _VERSIONS match holds: (text, case-sensitive) or (lower-cased text, case-insensitive)
_VERSION_WORDS = [("NVRM: loading NVIDIA UNIX", True), ("Driver Version:", True), ("NVIDIA-SMI ", True),
                  ("CUDA Version", True), ("Cuda compilation tools, release ", True), ("NCCL version", True),
                  ("torch", False), ("deepspeed", False), ("python version", False), ("mlnx_ofed_linux-", False)]
assert len(_VERSION_WORDS) == len(_VERSIONS)


def _r_version(t: str, low: str) -> list:
    out = []
    for (comp, rx), (word, exact) in zip(_VERSIONS, _VERSION_WORDS):
        if not (word in t if exact else _maybe(t, low, (word,))):
            continue
        m = rx.search(t)
        if m:
            out.append(("version", {"component": comp, "value": m.group(1).rstrip(".")}))
    return out


_RULES: list[Callable[[str, str], list]] = [
    _r_oom, _r_watchdog, _r_nccl_error, _r_nccl_warn, _r_xid, _r_ecc, _r_cuda_error, _r_shm, _r_disk,
    _r_host_mem, _r_slurm, _r_rdzv, _r_exit, _r_elastic, _r_misc, _r_version,
]

_EXC = re.compile(r"^((?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit|Failure|Fault)))"
                  r"(?::\s*(.*))?$")
_TB_HEAD = "Traceback (most recent call last)"

# --- first-error tiers ---
ROOT, ECHO, WEAK, CHORUS, NONE = 0, 1, 2, 3, 4
_ROOT_KINDS = {"cuda-oom", "xid", "gpu-lost", "ecc-error", "cuda-error", "shm-bus-error", "shm-error",
               "disk-full", "io-error", "nfs-stall", "oom-killer", "host-oom", "ib-error", "nccl-error",
               "rendezvous-error", "slurm-event", "nvlink-error", "pcie-error", "thermal", "python-exception",
               "pod-status"}
_CHORUS_TEXT = ("remote process exited", "closing signal", "childfailederror", "root cause (first observed",
                "traceback (most recent call last)", "error_file", "failures:", "<no_other_failures>",
                "exitcode", "sigkill_handler", "killing subprocess")
_ECHO_TEXT = ("watchdog caught", "detected by watchdog", "communicator was aborted", "nccl operations have failed",
              "to avoid data inconsistency", "taking the entire process down", "heartbeat monitor",
              "connection reset by peer", "connection closed by peer")
_WEAK_WORD = re.compile(r"(?i)\b(error|fatal|failed|failure|exception|abort(ed)?)\b")


def _tier(kind: str, attrs: dict, chorus: bool, echo: bool) -> int:
    """A finding's first-error tier; ``chorus``/``echo``: its line holds a _CHORUS_TEXT/_ECHO_TEXT."""
    if kind in ("version", "rank-straggler"):
        return NONE
    if kind in ("exit-signal", "elastic-restart") or chorus:
        return CHORUS
    if kind == "nccl-timeout" or echo:
        return ECHO
    if kind == "slurm-event" and attrs.get("event") == "cancelled":
        return CHORUS
    if kind == "pcie-error" and attrs.get("severity") == "corrected":
        return WEAK
    if kind in _ROOT_KINDS:
        return ROOT
    return WEAK


@dataclass
class _Event:
    tier: int
    tkey: float | None
    order: tuple[int, int]
    line: LogLine
    yearless: bool = False  # tkey from a time without a year (glog, syslog), set on 1970 until known


PLAN_MEMO = 4096  # digit templates of lines whose prefixes are remembered
REDACT_MEMO = 4096  # digit templates of lines known to hold no secret
_DIGITS_B = bytes.maketrans(b"123456789", b"000000000")
FACTS_MEMO = 2048  # texts whose _TextFacts are remembered (an error storm repeats its lines)
_NRANKS_TEXT = re.compile(r"\brank (\d+) nranks (\d+)")
_FILE_FRAME_WORDS = (".write(", ".flush(", "open(", "torch.save", "atomic_save", "save_checkpoint", "fsspec",
                     "os.replace", ".save(")
_WEAK_WORDS = ("error", "fatal", "fail", "exception", "abort")


class _TextFacts(NamedTuple):
    """What the rules and checks that read nothing but a line's cleaned text say of it. They are pure
    functions of the text, so a text seen before (a traceback's frames, one NCCL WARN from every rank,
    the same UserWarning) is not read again: _Scanner._extract keeps these by text."""

    low: str
    found: tuple  # (kind, attrs) of every rule in _RULES
    file_frame: bool  # a traceback line that writes, saves or opens a file (_FILE_FRAME)
    enotconn: bool
    shm: bool  # names shared memory (_shm_context)
    smi: tuple | None  # a row of nvidia-smi's process table: (gpu, pid, name, MiB)
    nranks: tuple | None  # NCCL's "rank N nranks M"
    weak: bool  # a word that says it failed (_WEAK_WORD)
    chorus: bool  # holds a _CHORUS_TEXT
    echo: bool  # holds an _ECHO_TEXT

    @classmethod
    def of(cls, t: str) -> "_TextFacts":
        low = t.lower()
        found = []
        for rule in _RULES:
            found.extend(rule(t, low))
        smi = None
        if t.endswith("|") and "mib" in low:
            m = _SMI_PROC.match(t)
            if m:
                smi = (int(m.group(1)), int(m.group(2)), m.group(3), int(m.group(4)))
        m = _NRANKS_TEXT.search(t) if "nranks" in t else None
        # each search only where a word every match holds is on the line
        frame = any(w in low for w in _FILE_FRAME_WORDS) and _FILE_FRAME.search(low) is not None
        weak = (_maybe(t, low, _WEAK_WORDS) and _WEAK_WORD.search(t) is not None
                and not _py_warning(t))
        return cls(low, tuple(found), frame, "transport endpoint is not connected" in low, _shm_context(low), smi,
                   (int(m.group(1)), int(m.group(2))) if m else None, weak,
                   any(c in low for c in _CHORUS_TEXT), any(e in low for e in _ECHO_TEXT))


@dataclass
class _Src:
    idx: int
    name: str
    last_tkey: float | None = None
    last_yearless: bool = False
    file_rank: int | None = None  # the rank a per-rank file's name gives (rank17.log, *_rank_17_*, log.17)
    file_node: str | None = None  # the host or pod a file's name gives (gpu-node-017.log, trainer-worker-3.log)
    first_step: int | None = None
    follow: int = 0
    shm_line: int = -100  # last line that spoke of shared memory (a SemLock frame, a /dev/shm path)
    file_line: int = -100  # last traceback line that wrote, saved or opened a file
    tb: dict = field(default_factory=dict)  # (rank, node) -> in traceback
    prev: bytes = b""  # the last lines of the chunk before (for _look_back)
    summary: dict = field(default_factory=dict)
    bad_lines: int = 0


def _chunks(fh: BinaryIO, size: Callable[[], int]) -> Iterable[tuple[int, bytes]]:
    """(bytes read, whole lines) pairs: each read's size, and the complete lines it finished
    (b"" while a long line goes on); the last line gets its newline if it had none."""
    carry = b""
    while True:
        data = fh.read(size())
        if not data:
            break
        buf = carry + data if carry else data
        cut = buf.rfind(b"\n")
        if cut < 0:
            if len(buf) > MAX_LINE_BYTES:
                cut = len(buf) - 1  # an absurdly long line: cut it here
            else:
                carry = buf
                yield len(data), b""
                continue
        carry = buf[cut + 1:]
        yield len(data), buf[:cut + 1]
    if carry:
        yield 0, carry + b"\n"


def _last_lines(buf: bytes, k: int) -> bytes:
    """The last ``k`` lines of ``buf`` (whole lines, with their newlines)."""
    pos = len(buf) - 1
    for _ in range(k):
        pos = buf.rfind(b"\n", 0, pos)
        if pos < 0:
            return buf
    return buf[pos + 1:]


_SHM_HINTS_RE = re.compile(b"|".join(re.escape(h) for h in _SHM_HINTS_B))
# The only lines that read what the look-back finds (_extract): a full disk (turned into a full
# /dev/shm under a shared-memory frame) and ENOTCONN (an I/O error under a file-writing frame), in
# English or as a Chinese-locale C library prints them. Other lines skip the look-back.
_BACK_PHRASES = ("exhausted", "no space left on device", "disk quota exceeded", "errno 28",
                 "transport endpoint is not connected")
_NEEDS_BACK = re.compile(b"|".join(
    [re.escape(p.encode()) for p in _BACK_PHRASES]
    + [re.escape(zh.encode()) for zh, en in ZH_TO_EN.items() if en.lower() in _BACK_PHRASES]))


def _back(buf: bytes, s: int, prev: bytes) -> tuple[int, int]:
    """:func:`_look_back` for the line at ``s`` when that line can use it, else (0, 0)."""
    e = buf.find(b"\n", s)
    if not _NEEDS_BACK.search(buf[s:e if e >= 0 else len(buf)].lower()):
        return 0, 0
    return _look_back(buf, s, prev)


def _look_back(buf: bytes, s: int, prev: bytes) -> tuple[int, int]:
    """How many lines above the line at ``s`` shared memory was last named and a file last written
    (each 0 when not within STATE_BACK lines); ``prev`` holds the lines before ``buf``. The
    STATE_BACK lines above are lower-cased once and searched once per hint kind (an error storm
    asks this for every line); tests/test_trainlog.py compares it with a line-by-line reading."""
    st = s
    for _ in range(STATE_BACK):
        if st <= 0:
            break
        st = buf.rfind(b"\n", 0, st - 1) + 1
    window = buf[st:s]
    need = STATE_BACK - window.count(b"\n")
    if st <= 0 and need > 0 and prev:
        window = _last_lines(prev, need) + window
    low = window.lower()
    shm = frame = 0
    for rx, which in ((_SHM_HINTS_RE, "shm"), (_FILE_FRAME_B, "frame")):
        last = None
        for m in rx.finditer(low):
            if b"\n" not in m.group():
                last = m
        if last is not None:
            d = low.count(b"\n", last.end())
            if which == "shm":
                shm = d
            else:
                frame = d
    return shm, frame


def _bad_lines(buf: bytes) -> int:
    """Lines of ``buf`` that are not valid UTF-8."""
    if buf.isascii():
        return 0
    try:
        buf.decode("utf-8")
        return 0
    except UnicodeDecodeError:
        bad = 0
        for raw in buf.split(b"\n"):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                bad += 1
        return bad


@dataclass
class _Picked:
    """What a worker hands back for one file: the lines the prefilter kept (line number, raw
    bytes, the prefilter's flags) and the file's counts."""
    lines: list[tuple[int, bytes, int, int, int]]  # line number, raw, flags, shm_back, file_back
    n_lines: int
    bytes_read: int
    bad_lines: int
    first_step: int | None
    world: int = 0
    error: str | None = None
    # a plain file's piece whose world size was not read: only the laggard analysis needs it, and then
    # the parent reads it (_Scanner._read_world); an NCCL_DEBUG=INFO log holds thousands of Init lines
    world_from: tuple[str, int, int | None] | None = None


_WORKER: dict = {}  # the prefilter and step pattern, set before the workers are forked


class _Slice:
    """The bytes ``[start, end)`` of an open file, read as a stream."""

    def __init__(self, fh: BinaryIO, start: int, end: int) -> None:
        fh.seek(start)
        self.fh, self.left = fh, end - start

    def read(self, n: int = -1) -> bytes:
        if self.left <= 0:
            return b""
        data = self.fh.read(self.left if n < 0 else min(n, self.left))
        self.left -= len(data)
        return data


def _plain_large(fh: BinaryIO, start: int, end: int | None) -> bool:
    """Whether ``[start, end)`` of ``fh`` is read as it is: larger than UNWRAP_LIMIT (no hard wrap
    to undo) and not gzip-compressed."""
    if not hasattr(os, "preadv"):  # pragma: no cover - every Linux has it
        return False
    fd = fh.fileno()
    stop = os.fstat(fd).st_size if end is None else end
    return stop - start > UNWRAP_LIMIT and os.pread(fd, 2, 0) != b"\x1f\x8b"


def _aligned_chunks(fd: int, start: int, end: int | None) -> Iterable[tuple[int, bytearray]]:
    """:func:`_chunks` for a plain file: each read ends at its last newline and the next read starts
    right after it, so a chunk is never copied to join a line cut in two (an aligned read of 16 MB
    costs one copy from the page cache instead of three). ``end`` None: to the end of the file. The
    chunk yielded is overwritten by the next one."""
    pos = start
    buf = bytearray()
    stop = os.fstat(fd).st_size if end is None else end  # a file still written to is read on to its end
    while end is None or pos < end:
        # no 16 MB buffer for a 4 MB file; past the size it had, a growing file is read on in 64 KB
        want = min(BIG_CHUNK, stop - pos if end is not None else max(stop - pos, 1 << 16))
        # one buffer, read into again and again: its pages stay mapped (a fresh 16 MB costs 4 096
        # page faults); the caller keeps nothing of a chunk but copies
        if len(buf) < want:
            buf.extend(bytes(want - len(buf)))
        elif len(buf) > want:
            del buf[want:]
        n = os.preadv(fd, [buf], pos)
        if n <= 0:
            break
        last = n < want or (end is not None and pos + n >= end)
        if n < want:
            del buf[n:]
        if last:
            if buf[-1] != 10:
                buf.append(10)  # the last line gets its newline
        else:
            cut = buf.rfind(b"\n")
            if 0 <= cut < n - 1:
                del buf[cut + 1:]  # shrinking keeps the buffer in place
                n = cut + 1
            # no newline at all: a "line" longer than a read (BIG_CHUNK > MAX_LINE_BYTES) is cut here
        pos += n
        yield n, buf


def _piece_world(piece: tuple[str, int, int | None]) -> int:
    """The largest M of the ``rank N nranks M`` lines of a plain file's piece (0: none, or the file
    is gone since the scan)."""
    path, start, end = piece
    world = 0
    try:
        with open(path, "rb") as fh:
            for _, buf in _aligned_chunks(fh.fileno(), start, end):
                world = _max_nranks(buf, world)
    except OSError:
        pass
    return world


def _lines_before(fh: BinaryIO, start: int) -> bytes:
    """The last STATE_BACK lines before byte ``start`` (the look-back of a range's first lines)."""
    if start <= 0:
        return b""
    back = min(start, 1 << 20)
    fh.seek(start - back)
    return _last_lines(fh.read(back), STATE_BACK)


def _pick_file(path: str, start: int = 0, end: int | None = None) -> _Picked:
    """Prefilter one file, or the lines between byte ``start`` and ``end`` (both at line starts), in
    a worker process (the byte-level part of :meth:`_Scanner.scan`). Line numbers count from the
    start of what was read; a range after the first also offers its first FOLLOW_LINES lines as
    context, since a follow-setter may end the range before it (the parent decides)."""
    pre, step_b = _WORKER["pre"], _WORKER["step_b"]
    out: list[tuple[int, bytes, int, int, int]] = []
    base = nbytes = bad = world = 0
    first_step = None
    owed = FOLLOW_LINES if start > 0 else 0
    try:
        with open(path, "rb") as fh:
            prev = _lines_before(fh, start)
            aligned = _plain_large(fh, start, end)
            if aligned:
                if start == 0:
                    _sniff(path, os.pread(fh.fileno(), SNIFF, 0))
                pieces = _aligned_chunks(fh.fileno(), start, end)
            else:
                if end is None:
                    stream = _open_stream(path, fh)
                elif start == 0:
                    stream = _open_stream(path, _Slice(fh, 0, end))  # type: ignore[arg-type]
                else:
                    stream = _Slice(fh, start, end)  # type: ignore[assignment]
                pieces = _chunks(stream, lambda: BIG_CHUNK)
            for nread, buf in pieces:
                nbytes += nread
                if not buf:
                    continue
                bad += _bad_lines(buf)
                if first_step is None:
                    m = step_b.search(buf)
                    if m:
                        first_step = base + buf.count(b"\n", 0, m.start()) + 1
                sel, setters = pre.select_with_setters(buf)
                ctx, owed = pre.context(buf, owed, setters)
                for st in ctx:
                    sel.setdefault(st, CONTEXT)
                ln, counted = base, 0
                for st in sorted(sel):
                    ln += buf.count(b"\n", counted, st)
                    counted = st
                    out.append((ln + 1, bytes(buf[st:buf.find(b"\n", st)]), sel[st], *_back(buf, st, prev)))
                if not aligned:
                    world = _max_nranks(buf, world)
                prev = bytes(_last_lines(buf, STATE_BACK))
                base = ln + buf.count(b"\n", counted)
    except InputError as e:
        return _Picked([], 0, 0, 0, None, error=str(e))
    except PermissionError:
        return _Picked([], 0, 0, 0, None, error="permission")
    return _Picked(out, base, nbytes, bad, first_step, world, world_from=(path, start, end) if aligned else None)


def _known_size(files: Sequence[str]) -> int | None:
    """The inputs' total size when every one is a plain file (not stdin, not gzip), else None."""
    total = 0
    for f in files:
        if f == "-" or _gzipped(f):
            return None
        try:
            total += os.path.getsize(f)
        except OSError:
            return None
    return total


def _workers() -> int:
    env = os.environ.get("GPU_TRIAGE_SCAN_WORKERS", "")
    if env.isdigit():
        return max(1, int(env))
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


RANGE_BYTES = 32 << 20  # a file this many times two or larger is prefiltered in ranges of about this size


def _range_bytes() -> int:
    env = os.environ.get("GPU_TRIAGE_SCAN_RANGE_KB", "")
    return max(64, int(env)) << 10 if env.isdigit() else RANGE_BYTES


def _ranges(path: str) -> list[tuple[str, int, int | None]]:
    """The pieces a worker each prefilters: the whole file, or, for a large plain file, ranges of
    about _range_bytes() that start and end at line starts."""
    step = _range_bytes()
    try:
        size = os.path.getsize(path)
    except OSError:
        return [(path, 0, None)]
    if size < 2 * step or _gzipped(path):
        return [(path, 0, None)]
    cuts = [0]
    with open(path, "rb") as fh:
        for at in range(step, size, step):
            if at <= cuts[-1]:
                continue
            fh.seek(at)
            block = fh.read(MAX_LINE_BYTES)
            nl = block.find(b"\n")
            if nl < 0 or at + nl + 1 >= size:
                break
            cuts.append(at + nl + 1)
    cuts.append(size)
    return [(path, a, b) for a, b in zip(cuts, cuts[1:])]


def _parallel_from(files: Sequence[str]) -> int:
    """Index of the first file a worker may prefilter: the ones before it are read in this process
    (they keep every line while the input is under FULL_LIMIT), and so is everything from standard
    input on."""
    known = _known_size(files)
    if known is not None and known > FULL_LIMIT:
        return 0  # known to be large: no line is kept whole, so every file may go to a worker
    total = 0
    for i, f in enumerate(files):
        if total > FULL_LIMIT:
            return i
        if f == "-":
            return len(files)
        try:
            total += os.path.getsize(f)
        except OSError:
            return len(files)
    return len(files)


class _Scanner:
    def __init__(self, keywords: Iterable[str], size: int | None = None) -> None:
        kws = [k.strip().lower() for k in keywords if k and k.strip()]
        self.pre = _compile_prefilter(kws)
        self.step_b = re2.compile(_STEP.encode(), _ci())
        self.step_s = re.compile(_STEP, re.IGNORECASE)  # linear: no nested repeats; cheaper than re2 on str
        self.redact = Redactor()
        self._plain: set[bytes] = set()  # digit templates of lines the redactor leaves as they are
        self._pem_seen = False
        self.findings: list[Finding] = []
        self.kind_count: dict[str, int] = {}
        self.capped: set[str] = set()
        self.head: list[LogLine] = []
        self.tail: deque[LogLine] = deque(maxlen=TAIL_LINES)
        self.finding_lines: dict[tuple[int, int], LogLine] = {}
        # every line is kept while the input may be small; an input known to be large (``size``, the
        # files' sizes) is prefiltered from its first byte
        self.full: deque[LogLine] | None = deque(maxlen=MAX_FULL_LINES) if (size or 0) <= FULL_LIMIT else None
        self.full_overflow = False
        self.bytes_read = 0
        self.lines_read = 0
        self.events: list[_Event] = []
        self._count = {"strong": 0, "weak": 0}          # candidates kept per class (see _event)
        self._months: dict[str, set[int]] = {"strong": set(), "weak": set()}
        self._untimed = {"strong": False, "weak": False}
        self.sources: list[str] = []
        self.warnings: list[str] = []
        self.versions: set[tuple[str, str]] = set()
        self.ranks_seen: set[int] = set()
        self.rank_node: dict[int, str] = {}  # a rank's host, where one line said both
        self.world: int | None = None
        self._world_todo: list[tuple[str, int, int | None]] = []  # pieces whose world size is unread
        self.year_hint: int | None = None
        self.n_candidates = 0
        self.last_exit: Finding | None = None
        self.first_step: dict[str, int | None] = {}
        # nvidia-smi process-table rows: (gpu, pid, process name, MiB, line, source index)
        self.gpu_procs: list[tuple[int, int, str, int, CleanLine, int]] = []
        self._facts: dict[str, _TextFacts] = {}
        self._plans: dict[bytes, tuple] = {}  # digit template of a plain line -> the prefixes it took

    # ---- streaming -------------------------------------------------------------------------
    def scan(self, name: str, fh: BinaryIO) -> None:
        src = self._source(name)
        base = 0  # lines before the current buffer
        start_bytes = self.bytes_read
        for nread, buf in _chunks(fh, lambda: SMALL_CHUNK if self.full is not None else BIG_CHUNK):
            self.bytes_read += nread
            if self.full is not None and self.bytes_read > FULL_LIMIT:
                self.full = None  # too big to keep whole; candidates only from here on
            if buf:
                base = self._chunk(src, buf, base, self.full is not None)
        self._done(src, base, self.bytes_read == start_bytes)

    def _source(self, name: str) -> _Src:
        src = _Src(len(self.sources), name)
        src.file_rank, src.file_node = rank_and_node_from_name(name)
        self.sources.append(name)
        return src

    def _done(self, src: _Src, lines: int, empty: bool) -> None:
        self.lines_read += lines
        self.first_step[src.name] = src.first_step
        if empty:
            self.warnings.append(f"{src.name}: the file is empty")
        if src.bad_lines:
            self.warnings.append(f"{src.name}: {src.bad_lines} lines were not valid UTF-8; decoded with U+FFFD")

    def merge(self, name: str, picked: "_Picked") -> None:
        """Take in a file a worker prefiltered (:func:`_pick_file`): its lines are read here, in
        order, exactly as :meth:`scan` would have read them once the input is past FULL_LIMIT."""
        src = self._source(name)
        self.merge_piece(src, picked, 0)
        self._done(src, picked.n_lines, picked.bytes_read == 0)

    def merge_piece(self, src: _Src, picked: "_Picked", offset: int) -> None:
        """Take in one prefiltered piece of ``src``: a whole file, or a range of one whose lines
        start after ``offset`` lines (the ranges before it, merged in order)."""
        src.bad_lines += picked.bad_lines
        if src.first_step is None and picked.first_step is not None:
            src.first_step = offset + picked.first_step
        self.bytes_read += picked.bytes_read
        for line_no, raw, flags, shm_back, file_back in picked.lines:
            if src.follow > 0:
                src.follow -= 1
                flags = RULE
            elif flags == CONTEXT:
                continue
            self._take(src, raw, offset + line_no, flags, shm_back, file_back)
        if picked.world:
            self.world = max(self.world or 0, picked.world)
        if picked.world_from is not None:
            self._world_todo.append(picked.world_from)

    def _chunk(self, src: _Src, buf: bytes, base: int, small: bool) -> int:
        src.bad_lines += _bad_lines(buf)
        nlines = buf.count(b"\n")
        if src.first_step is None:
            m = self.step_b.search(buf)
            if m:
                src.first_step = base + buf.count(b"\n", 0, m.start()) + 1
        sel = self.pre.select(buf)
        if small and self.full is not None:
            off = 0
            for i, raw in enumerate(buf[:-1].split(b"\n")):
                flags = sel.get(off, 0)
                if src.follow > 0:
                    flags = RULE
                    src.follow -= 1
                off += len(raw) + 1
                if not flags & RULE and _STATE_B.search(raw.lower()):
                    flags |= RULE  # every line is read here: a STATE line moves the state as it is read
                self._line(src, raw.decode("utf-8", "replace"), base + i + 1, flags != 0, keep_all=True,
                           extract=bool(flags & RULE))
            return base + nlines
        starts = sorted(sel)
        n = len(buf)
        pos = counted = 0
        ln = base
        i = 0
        while pos < n:
            if src.follow > 0:
                s = pos
                flags = RULE
                src.follow -= 1
            else:
                while i < len(starts) and starts[i] < pos:
                    i += 1
                if i >= len(starts):
                    break
                s = starts[i]
                flags = sel[s]
                i += 1
            e = buf.find(b"\n", s)
            if e < 0:
                e = n
            ln += buf.count(b"\n", counted, s)
            counted = s
            self._take(src, buf[s:e], ln + 1, flags, *_back(buf, s, src.prev))
            pos = e + 1
        self._ranks(buf)
        src.prev = _last_lines(buf, STATE_BACK)
        return base + nlines

    def _read_world(self) -> None:
        """The world size from the pieces the workers left unread (see _Picked.world_from), read on
        all cores like the scan itself."""
        todo, self._world_todo = self._world_todo, []
        n = min(_workers(), len(todo))
        if n > 1:
            import concurrent.futures
            import multiprocessing

            with concurrent.futures.ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("fork")) as pool:
                worlds = list(pool.map(_piece_world, todo))
        else:
            worlds = [_piece_world(piece) for piece in todo]
        world = max([self.world or 0, *worlds])
        if world:
            self.world = world

    def _ranks(self, buf: bytes) -> None:
        world = _max_nranks(buf, self.world or 0)
        if world:
            self.world = world

    def _take(self, src: _Src, raw: bytes, line_no: int, flags: int, shm_back: int = 0, file_back: int = 0) -> None:
        """One kept line of a large input; ``shm_back``/``file_back``: how many lines above it shared
        memory was last named or a file last written (0: not within STATE_BACK lines)."""
        if shm_back:
            src.shm_line = max(src.shm_line, line_no - shm_back)
        if file_back:
            src.file_line = max(src.file_line, line_no - file_back)
        self._line(src, raw.decode("utf-8", "replace"), line_no, True, keep_all=False, extract=bool(flags & RULE))

    # ---- one line --------------------------------------------------------------------------
    def _cleaned(self, raw: str) -> tuple[CleanLine, float | None, bool]:
        """``_clean(raw, self.year_hint)``; a plain line whose digit template was seen before replays
        the prefixes that one took (:func:`_clean_by_plan`) instead of trying them all again."""
        if not _plain(raw):
            return _clean(raw, self.year_hint)
        key = raw.encode("ascii").translate(_DIGITS_B)
        plan = self._plans.get(key)
        if plan is not None:
            done = _clean_by_plan(raw, plan, self.year_hint)
            if done is not None:
                return done
        out, tkey, yearless, plan = _clean_plan(raw, self.year_hint)
        if len(self._plans) >= PLAN_MEMO:
            self._plans.clear()
        self._plans[key] = plan
        return out, tkey, yearless

    def _redacted(self, text: str) -> str:
        """``self.redact(text)``, remembering which lines it leaves as they are by their digit template
        (every digit read as 0): the redactor's patterns treat all digits alike (no literal digit, no
        class that splits them; tests/test_scan_speed_memo.py checks), so two lines that differ only in
        their digits are both left alone or neither is. A watchdog line ("caught" holds the hint "gh")
        costs seven substitutions otherwise. Its one state, inside a PEM private-key block, starts on a
        "-----BEGIN" line only: from the first such line on every line goes through it."""
        if self._pem_seen or "-----BEGIN" in text:
            self._pem_seen = True
            return self.redact(text)
        key = text.encode("utf-8", "surrogatepass").translate(_DIGITS_B)
        if key in self._plain:
            return text
        out = self.redact(text)
        if out == text:
            if len(self._plain) >= REDACT_MEMO:
                self._plain.clear()
            self._plain.add(key)
        return out

    def _line(self, src: _Src, raw: str, line_no: int, cand: bool, keep_all: bool, extract: bool = True) -> None:
        if not keep_all and not cand:
            return
        if not raw.strip():
            return
        cl, tkey, yearless = self._cleaned(raw)
        if tkey is not None and not yearless and cl.ts and cl.ts[:4].isdigit() and cl.ts[:4] != "1970":
            self.year_hint = int(cl.ts[:4])
        # a glog/syslog time has no year: it is kept (on 1970) and given the run's year, once one is
        # known, when first errors across files are compared (_first_error)
        if tkey is None and cl.ts is None:
            tkey = src.last_tkey  # carry the last time forward (tracebacks have none of their own)
            yearless = src.last_yearless
        elif tkey is not None:
            src.last_tkey, src.last_yearless = tkey, yearless
        if cl.rank is None and src.file_rank is not None:
            cl.rank = src.file_rank
        if cl.node is None and src.file_node is not None:
            cl.node = src.file_node
        if not cl.text:
            return
        cl.text = self._redacted(cl.text)
        cl.line_no = line_no
        cl.source = src.name
        if cl.rank is not None:
            self.ranks_seen.add(cl.rank)
            if cl.node is not None and cl.rank not in self.rank_node and len(self.rank_node) < MAX_RANK_NODES:
                self.rank_node[cl.rank] = cl.node
        if keep_all and self.full is not None:
            if len(self.full) == MAX_FULL_LINES:
                self.full_overflow = True
            self.full.append(cl)
        if not cand:
            if src.first_step is None and self.step_s.search(cl.text):
                src.first_step = line_no
            return
        self.n_candidates += 1
        if len(self.head) < HEAD_LINES:
            self.head.append(cl)
        else:
            self.tail.append(cl)
        if extract:
            self._extract(src, cl, tkey, yearless)

    def _extract(self, src: _Src, cl: CleanLine, tkey: float | None, yearless: bool = False) -> None:
        t = cl.text
        facts = self._facts.get(t)
        if facts is None:
            if len(self._facts) >= FACTS_MEMO:
                self._facts.clear()
            facts = self._facts[t] = _TextFacts.of(t)
        low = facts.low
        # the attrs are the findings' own (later steps add to them): copied from the memo's
        found: list[tuple[str, dict]] = [(k, dict(a)) for k, a in facts.found]
        if facts.file_frame:
            src.file_line = cl.line_no
        if (facts.enotconn and cl.line_no - src.file_line <= 8
                and not any(k == "io-error" for k, _ in found)):
            # ENOTCONN raised by a file write: the FUSE or network mount behind the file went away
            found.append(("io-error", {"text": t}))
        if facts.shm:
            src.shm_line = cl.line_no
        elif cl.line_no - src.shm_line <= 8:
            # ENOSPC right under a SemLock or /dev/shm frame of the same traceback: /dev/shm is full,
            # not the disk
            found = [("shm-error", {"text": t}) if k == "disk-full" else (k, a) for k, a in found]
        found.extend(self._stateful(src, cl, t, low))
        if facts.smi is not None and len(self.gpu_procs) < 4096:
            self.gpu_procs.append((*facts.smi, cl, src.idx))
        if facts.nranks is not None:
            self.ranks_seen.add(facts.nranks[0])
            self.world = max(self.world or 0, facts.nranks[1])
        best = NONE
        for kind, attrs in found:
            if kind == "version":
                key = (attrs["component"], attrs["value"])
                if key in self.versions:
                    continue
                self.versions.add(key)
            f = self._add(kind, attrs, cl, src)
            if f is not None:
                best = min(best, _tier(kind, attrs, facts.chorus, facts.echo))
        if best == NONE and (cl.level in ("E", "F") or facts.weak):
            best = CHORUS if facts.chorus or t.endswith(" FAILED") else ECHO if facts.echo else WEAK
        if best < CHORUS:  # the chorus never decides the first error: it is not kept
            self._event(_Event(best, tkey, (src.idx, cl.line_no), cl, yearless and tkey is not None))

    def _stateful(self, src: _Src, cl: CleanLine, t: str, low: str) -> list:
        """Rules that need the lines before: tracebacks and torchrun's failure summary."""
        out: list[tuple[str, dict]] = []
        key = (cl.rank, cl.node)
        if t.startswith(_TB_HEAD):
            src.tb[key] = True
            return out
        m = _EXC.match(t)
        if m and (m.group(3) is not None or src.tb.get(key)):
            typ = m.group(2)
            msg = (m.group(3) or "").strip()
            src.tb[key] = False
            out.append(("python-exception", {"type": typ, "message": msg[:500],
                                             "launcher": typ in _LAUNCHER_EXCEPTIONS}))
            if typ == "ChildFailedError":
                src.follow = max(src.follow, 40)
        if "root cause (first observed failure)" in low or low.startswith("failures:"):
            src.summary = {}
            src.follow = max(src.follow, 12)
            return out
        sm = src.summary
        mh = _SUM_HOST.match(t)
        if mh:
            sm["host"] = mh.group(1)
            return out
        mr = _SUM_RANK.match(t)
        if mr:
            sm["rank"], sm["local_rank"] = int(mr.group(1)), int(mr.group(2))
            return out
        if re.match(r"^\[\d+\]:$", t):
            src.summary = {}
            src.follow = max(src.follow, 8)
            return out
        me = _SUM_EXIT.match(t)
        if me:
            a = _sig_attrs(int(me.group(1)))
            a["pid"] = int(me.group(2))
            if "host" in sm:
                a["host"] = sm["host"]
            if "local_rank" in sm:
                a["local_rank"] = sm["local_rank"]
            if "rank" in sm:
                cl.rank = cl.rank if cl.rank is not None else sm["rank"]
            if "host" in sm and cl.node is None:
                cl.node = sm["host"]
            out.append(("exit-signal", a))
            return out
        ms = _SIG_RECV.search(t)
        if ms:
            prev = self.last_exit
            if prev is not None and prev.attrs.get("pid") == int(ms.group(3)):
                prev.attrs.setdefault("signal", ms.group(2).upper())
            else:
                out.append(("exit-signal", {"exitcode": -int(ms.group(1)), "signal": ms.group(2).upper(),
                                            "pid": int(ms.group(3))}))
        return out

    def _add(self, kind: str, attrs: dict, cl: CleanLine, src: _Src) -> Finding | None:
        n = self.kind_count.get(kind, 0)
        if n >= (XID_CAP if kind == "xid" else FINDING_CAP):
            self.capped.add(kind)
            return None
        self.kind_count[kind] = n + 1
        rank = cl.rank
        if kind == "nccl-timeout":
            m = _PG_RANK.search(cl.text)
            if m and rank is None:
                rank = int(m.group(1))
            m = _PG_ID.search(cl.text)
            if m:
                attrs["pg"] = int(m.group(1))
        f = Finding(kind=kind, attrs=attrs, line=cl.text, line_no=cl.line_no, rank=rank, node=cl.node,
                    source=cl.source, ts=cl.ts)
        self.findings.append(f)
        if kind == "exit-signal":
            self.last_exit = f
        self.finding_lines[(src.idx, cl.line_no)] = cl
        return f

    # ---- the end ---------------------------------------------------------------------------
    def finish(self) -> ParseResult:
        self._extra_contexts()
        self._idle_holders()
        self._container_beside()
        self._cut_tracebacks()
        self._stragglers()
        self._oom_at_start()
        for kind in sorted(self.capped):
            cap = XID_CAP if kind == "xid" else FINDING_CAP
            self.warnings.append(f"more than {cap} '{kind}' findings; only the first {cap} are listed")
        if self.full is not None and self.bytes_read <= FULL_LIMIT:
            lines: list[LogLine] = list(self.full)
            truncated = self.full_overflow
        else:
            idx = {n: i for i, n in enumerate(self.sources)}
            merged: dict[tuple[int, int], LogLine] = {}
            for ln in self.head:
                merged[(idx[ln.source], ln.line_no)] = ln
            for ln in self.tail:
                merged[(idx[ln.source], ln.line_no)] = ln
            merged.update(self.finding_lines)
            lines = [merged[k] for k in sorted(merged)]
            truncated = True
        return ParseResult(findings=self.findings, lines=lines, first_error=_with_detail(self._first_error(), lines),
                           sources=list(self.sources), bytes_read=self.bytes_read, lines_read=self.lines_read,
                           truncated=truncated, warnings=self.warnings)

    def _cut_tracebacks(self) -> None:
        """A paste that ends inside a Python traceback, before its exception line (cut by the person
        pasting, a full disk, a killed process): the innermost frame still says which layer the
        program was in (a rendezvous store, a collective, a file read or write, a shared-memory
        lock). Read where the whole input is kept (a paste, an excerpt), once per source."""
        if self.full is None or self.bytes_read > FULL_LIMIT:
            return
        last: dict[str, list[CleanLine]] = {}
        for cl in self.full:
            if cl.text.strip():
                tail = last.setdefault(cl.source, [])
                tail.append(cl)
                if len(tail) > 12:
                    del tail[0]
        for tail in last.values():
            cut = _cut_traceback(tail)
            if cut is not None:
                cl, attrs = cut
                self.findings.append(Finding(kind="traceback-cut", attrs=attrs, line=cl.text, line_no=cl.line_no,
                                             rank=cl.rank, node=cl.node, source=cl.source, ts=cl.ts))

    def _event(self, e: _Event) -> None:
        """Keep a first-error candidate. An error storm (every rank printing its traceback for hours)
        would keep millions; past EVENT_CAP a class keeps only those that can still be first: the
        earliest by position and by time (either way a December-to-January run may go), and one
        without a time. What decides the answer is tracked whole: which months yearless times fall
        in, whether any candidate had no time."""
        cls = "strong" if e.tier in (ROOT, ECHO) else "weak"
        if e.tkey is None:
            self._untimed[cls] = True
        elif e.yearless:
            self._months[cls].add(time.gmtime(e.tkey).tm_mon)
        self.events.append(e)
        self._count[cls] += 1
        if self._count[cls] > EVENT_CAP:
            self._prune(cls)

    def _prune(self, cls: str) -> None:
        mine = [e for e in self.events if (e.tier in (ROOT, ECHO)) == (cls == "strong")]
        others = [e for e in self.events if (e.tier in (ROOT, ECHO)) != (cls == "strong")]
        timed = [e for e in mine if e.tkey is not None]
        next_year = 366 * 86400.0

        def shifted(e: _Event) -> float:  # the time if this turns out to be a run across New Year
            return e.tkey + (next_year if e.yearless and time.gmtime(e.tkey).tm_mon <= 6 else 0.0)

        keep = {id(e): e for e in sorted(mine, key=lambda e: e.order)[:EVENT_KEEP]}
        keep.update((id(e), e) for e in sorted(timed, key=lambda e: (e.tkey, e.order))[:EVENT_KEEP])
        keep.update((id(e), e) for e in sorted(timed, key=lambda e: (shifted(e), e.order))[:EVENT_KEEP])
        untimed = [e for e in mine if e.tkey is None]
        if untimed:
            keep[id(untimed[0])] = untimed[0]
        self.events = others + sorted(keep.values(), key=lambda e: e.order)
        self._count[cls] = len(keep)

    def _first_error(self) -> FirstError | None:
        strong = [e for e in self.events if e.tier in (ROOT, ECHO)]
        cls = "strong" if strong else "weak"
        pool = strong or [e for e in self.events if e.tier == WEAK]
        if not pool:
            return None
        times = self._comparable_times(pool, cls)
        also = None
        if times is not None:
            best = min(pool, key=lambda e: (times[id(e)], e.tier, e.order))
            basis = "time"
            # clocks of different hosts disagree by up to a second: a rival that close, elsewhere, is said too
            rivals = [e for e in pool if e is not best and e.tier == best.tier
                      and 0 <= times[id(e)] - times[id(best)] <= CLOCK_SKEW and _elsewhere(e.line, best.line)]
            if rivals:
                r = min(rivals, key=lambda e: (times[id(e)], e.order))
                also = {"line": r.line.text, "line_no": r.line.line_no, "rank": r.line.rank, "node": r.line.node,
                        "source": r.line.source, "ts": r.line.ts,
                        "seconds_later": round(times[id(r)] - times[id(best)], 3)}
        else:
            best = min(pool, key=lambda e: e.order)
            basis = "file-order"
        ln = best.line
        return FirstError(line=ln.text, line_no=ln.line_no, rank=ln.rank, node=ln.node, ts=ln.ts,
                          source=ln.source, basis=basis, also=also)

    def _comparable_times(self, pool: list[_Event], cls: str) -> dict[int, float] | None:
        """Each event's time on one axis, or None when some event has none. Times without a year
        take the run's year (from any dated line; a nominal one when none is dated); when those
        times run from December into January, the early months are the next year."""
        if self._untimed[cls] or any(e.tkey is None for e in pool):
            return None
        out: dict[int, float] = {}
        year = self.year_hint or 2001
        months = self._months[cls]
        new_year = 12 in months and 1 in months
        for e in pool:
            t = e.tkey
            if e.yearless:
                g = time.gmtime(t)
                y = year + (1 if new_year and g.tm_mon <= 6 else 0)
                t = calendar.timegm((y, g.tm_mon, g.tm_mday, g.tm_hour, g.tm_min, g.tm_sec, 0, 0, 0)) + (t % 1)
            out[id(e)] = t
        return out

    def _stragglers(self) -> None:
        """Ranks that did not report a collective timeout every other rank of the process group
        reported at one sequence number: they never entered that collective (the laggards). The
        finding says how many ranks wait where (op, sequence number, process group) and, for one
        laggard, its node and the last work it completed, when its own lines say so."""
        self._mismatches()
        by_seq: dict[tuple, list[Finding]] = {}
        own: dict[int, list[Finding]] = {}
        for f in self.findings:
            if f.kind == "nccl-timeout" and "seq" in f.attrs and f.rank is not None:
                by_seq.setdefault((f.attrs.get("pg"), f.attrs["seq"]), []).append(f)
                own.setdefault(f.rank, []).append(f)
        if self._world_todo and any(len({f.rank for f in fs}) >= 2 for fs in by_seq.values()):
            self._read_world()
        known = set(self.ranks_seen)
        if self.world:
            known |= set(range(self.world))
        for (pg, seq), fs in sorted(by_seq.items(), key=lambda kv: (kv[0][1], kv[0][0] or 0)):
            reporting = {f.rank for f in fs}
            if len(reporting) < 2:
                continue
            silent = sorted(known - reporting)
            if not silent:
                continue
            first = fs[0]
            attrs: dict = {"ranks": ",".join(map(str, silent)), "seq": seq, "waiting": len(reporting)}
            ops = sorted({f.attrs["op"] for f in fs if "op" in f.attrs})
            if len(ops) == 1:
                attrs["op"] = ops[0]
            if pg is not None:
                attrs["pg"] = pg
            if len(silent) == 1:
                lag = silent[0]
                if lag in self.rank_node:
                    attrs["node"] = self.rank_node[lag]
                # the laggard's own timeout (in another collective, or another sequence number) says
                # how far it got
                done = [g.attrs["last_completed"] if "last_completed" in g.attrs else g.attrs["seq"] - 1
                        for g in own.get(lag, []) if pg is None or g.attrs.get("pg") in (None, pg)]
                if done:
                    attrs["last_completed"] = max(done)
            self.findings.append(Finding(
                kind="rank-straggler", attrs=attrs,
                line=first.line, line_no=first.line_no, rank=None, node=first.node, source=first.source,
                ts=first.ts))

    def _mismatches(self) -> None:
        """Ranks stuck at the same sequence number of one process group in different collectives
        (another op type, or another size) are out of step: a code desync, not the network."""
        by_key: dict[tuple, list[Finding]] = {}
        for f in self.findings:
            if f.kind == "nccl-timeout" and "seq" in f.attrs and "op" in f.attrs:
                by_key.setdefault((f.attrs.get("pg"), f.attrs["seq"]), []).append(f)
        for (_, seq), fs in sorted(by_key.items(), key=lambda kv: kv[0][1]):
            ops = sorted({f.attrs["op"] for f in fs})
            sizes = sorted({f.attrs["numel_in"] for f in fs if "numel_in" in f.attrs})
            if len(ops) < 2 and len(sizes) < 2:
                continue
            what = "/".join(ops) if len(ops) > 1 else "NumelIn " + "/".join(map(str, sizes))
            ranks = sorted({f.rank for f in fs if f.rank is not None})
            first = fs[0]
            self.findings.append(Finding(
                kind="collective-mismatch", attrs={"seq": seq, "ops": what, "ranks": ",".join(map(str, ranks))},
                line=first.line, line_no=first.line_no, rank=None, node=first.node, source=first.source,
                ts=first.ts))

    def _extra_contexts(self) -> None:
        """nvidia-smi's process table shows other ranks' processes holding memory on one GPU: every
        rank opened a CUDA context there (a CUDA call before ``torch.cuda.set_device``, ``torch.load``
        without ``map_location``, DataLoader workers touching CUDA), so that GPU carries an extra
        context per process and runs out first. Two shapes: a process whose main allocation is on
        another GPU also holds some on this one; or, with only this GPU's rows shown, the GPU's main
        process has two or more small twins of the same program. One process spread over several
        GPUs (DataParallel, a model split with ``device_map``) is alone where it is a guest and is
        not this; 0 MiB rows (containers without PID visibility) say nothing."""
        by_gpu: dict[int, dict[int, tuple[str, int]]] = {}
        first_row: dict[tuple[int, int], tuple[CleanLine, int]] = {}
        for gpu, pid, name, mib, cl, idx in self.gpu_procs:
            if mib <= 0:
                continue
            prev = by_gpu.setdefault(gpu, {}).get(pid, (name, 0))
            by_gpu[gpu][pid] = (name, prev[1] + mib)
            first_row.setdefault((gpu, pid), (cl, idx))
        home: dict[int, tuple[int, int]] = {}  # pid -> (gpu, MiB) where it holds the most
        for gpu, procs in by_gpu.items():
            for pid, (_, mib) in procs.items():
                if pid not in home or mib > home[pid][1]:
                    home[pid] = (gpu, mib)
        for gpu, procs in sorted(by_gpu.items()):
            guests = [pid for pid in procs if home[pid][0] != gpu]
            owners = [pid for pid in procs if home[pid][0] == gpu]
            if guests and (owners or len(guests) >= 2):
                pass
            elif len(procs) >= 3:
                main = max(procs, key=lambda p: procs[p][1])
                name, big = procs[main]
                guests = [p for p, (n, mib) in procs.items()
                          if p != main and n == name and mib * 4 <= big]
                if len(guests) < 2:
                    continue
            else:
                continue
            cl, idx = first_row[(gpu, guests[0])]
            self._add("gpu-extra-context", {"gpu": gpu, "processes": len(guests),
                                            "mib": sum(procs[p][1] for p in guests)}, cl, _SrcRef(idx))
            break

    def _idle_holders(self) -> None:
        """nvidia-smi's process table shows a process holding GPU memory, and ``ps`` in the same
        paste shows that process stopped (STAT T: a job suspended with Ctrl+Z, or a traced one) or
        a zombie (Z, <defunct>): it runs nothing and frees nothing until it is resumed, killed or
        reaped, so the next job on that GPU starts without the memory. Read from pastes small
        enough to be kept whole (the two tables are a person's check, not a job's output)."""
        if self.full is None or not self.gpu_procs:
            return
        held: dict[int, tuple[int, int]] = {}  # pid -> (gpu, MiB) of its first row with memory
        for gpu, pid, _name, mib, _cl, _idx in self.gpu_procs:
            if mib > 0 and pid not in held:
                held[pid] = (gpu, mib)
        idx_of = {n: i for i, n in enumerate(self.sources)}
        for ln in self.full:
            m = _PS_ROW.match(ln.text) if ("T" in ln.text or "Z" in ln.text) else None
            if not m or int(m.group(1)) not in held:
                continue
            gpu, mib = held.pop(int(m.group(1)))
            stat = m.group(2)
            cl = CleanLine(ln.text, ln.line_no, ln.rank, ln.node, ln.ts, ln.source)
            self._add("gpu-idle-holder", {"pid": int(m.group(1)), "gpu": gpu, "mib": mib,
                                          "state": "zombie" if stat.startswith("Z") else "stopped"},
                      cl, _SrcRef(idx_of.get(ln.source, 0)))

    def _container_beside(self) -> None:
        """A container started with the default /dev/shm, in a paste whose NCCL error is a bare
        "unhandled system error": NCCL's intra-node segments live in that /dev/shm, so the two
        together read as the container's shared memory first (the finding says what it stands beside)."""
        boxes = [f for f in self.findings if f.kind == "container-shm-default"]
        if boxes and any(f.kind == "nccl-error" and f.attrs.get("reason") == "unhandled-system-error"
                         for f in self.findings):
            for f in boxes:
                f.attrs["beside"] = "nccl-system-error"

    def _oom_at_start(self) -> None:
        """An OOM is at start when no training step was logged before it. An excerpt that begins at
        the error shows no steps either, so when its own traceback (the lines just before it) runs
        through a training step (backward, optimizer.step, run_step ...) it is mid-run."""
        by_source: dict[str, list[LogLine]] = {}
        if self.full is not None and self.bytes_read <= FULL_LIMIT:
            for ln in self.full:
                by_source.setdefault(ln.source, []).append(ln)
        for f in self.findings:
            if f.kind != "cuda-oom":
                continue
            first = self.first_step.get(f.source)
            at_start = first is None or (f.line_no or 0) <= first
            if at_start and first is None and f.line_no:
                near = [ln.text for ln in by_source.get(f.source, ())
                        if f.line_no - OOM_CONTEXT <= ln.line_no <= f.line_no + 3]
                if any(_TRAINING_FRAME.search(t) for t in near):
                    at_start = False
            f.attrs["at_start"] = at_start


# a traceback frame or message of a training step: the OOM came after training started
OOM_CONTEXT = 60  # lines before an OOM searched for its traceback
_TRAINING_FRAME = re.compile(
    r"\.backward\(|\bin backward\b|\boptimizer\.step\(|\bin (?:training_step|train_step|run_step|train_one_epoch|"
    r"_training_step|optimizer_step|inner_training_loop|train_batch)\b|recover from OOM in forward/backward|"
    r"\b\d+ iterations in\b")

CLOCK_SKEW = 1.0  # seconds: two first errors this close on different hosts are both named


_TB_FRAME = re.compile(r'(?:^|\s)File "([^"]+)", line (\d+), in (\S+)$')
# an exception line, behind whatever prefix a launcher put before it
_EXC_ANY = re.compile(r"(?:^|[\s\]>)])(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit|Failure|Fault)"
                      r"(?::\s|:?$)")
# The layer an innermost frame's file belongs to (the library's own module paths).
_CUT_AREAS = (
    ("rendezvous", re.compile(r"torch/distributed/(?:elastic/rendezvous/|rendezvous\.py)|c10d_rendezvous_backend")),
    ("collective", re.compile(r"torch/distributed/(?:distributed_c10d|c10d_logger|_functional_collectives)\.py|"
                              r"deepspeed/comm/|horovod/torch/mpi_ops")),
    ("file-io", re.compile(r"torch/serialization\.py|torch/distributed/checkpoint/|safetensors/|h5py/|"
                           r"tensorflow/python/(?:training/saver|checkpoint/|lib/io/file_io)|orbax/checkpoint/")),
    ("shared-memory", re.compile(r"multiprocessing/(?:synchronize|shared_memory|heap)\.py|"
                                 r"torch/multiprocessing/reductions\.py|torch/storage\.py.*share_memory")),
)
# Frameworks keep checkpoint I/O inside larger modules: there the function says it (Fabric.load,
# DeepSpeedEngine.load_checkpoint, Trainer._save_checkpoint, Accelerator.save_state, the
# checkpoint-IO plugins and checkpoint connectors of Lightning, Megatron's checkpointing).
_CUT_CKPT_PATH = re.compile(r"lightning/(?:fabric|pytorch)/|pytorch_lightning/|deepspeed/runtime/|transformers/"
                            r"(?:trainer|modeling_utils)\.py|accelerate/(?:accelerator|checkpointing)\.py|megatron/")
_CUT_CKPT_FUNC = re.compile(r"(?:_?(?:save|load)(?:_(?:checkpoint|state|model|state_dict|zero_checkpoint|"
                            r"module_state_dict|optimizer_state|from_checkpoint))?|_load_from_checkpoint|"
                            r"restore(?:_training_state|_model)?|resume_start|save_(?:zero_)?checkpoint|"
                            r"load_(?:zero_)?checkpoint|load_state_dict_from_file|_rotate_checkpoints)$")


DETAIL_WITHIN = 6  # lines between an NCCL error and the "Last error:" PyTorch appends to it


def _with_detail(fe: FirstError | None, lines: Sequence[LogLine]) -> FirstError | None:
    """The first error, or, when it is an NCCL error whose message goes on with PyTorch's
    "Last error:" and the text NCCL recorded (ncclGetLastError: "NET/OFI Unable to insert remote
    address ...", "socketPollConnect ... failed"), that text: the same error, said specifically."""
    if fe is None:
        return fe
    at = next((i for i, ln in enumerate(lines) if ln.source == fe.source and ln.line_no == fe.line_no), None)
    if at is None:
        return fe
    for i in range(at + 1, min(at + 1 + DETAIL_WITHIN, len(lines))):
        ln = lines[i]
        if ln.source != fe.source or ln.line_no - fe.line_no > DETAIL_WITHIN:
            break
        if ln.text.rstrip().endswith("Last error:"):
            nxt = next((d for d in lines[i + 1:i + 3] if d.source == fe.source and d.text.strip()), None)
            if nxt is None or nxt.line_no - ln.line_no > 2:
                return fe
            return FirstError(line=nxt.text, line_no=nxt.line_no, rank=nxt.rank if nxt.rank is not None else fe.rank,
                              node=nxt.node or fe.node, ts=nxt.ts or fe.ts, source=fe.source, basis=fe.basis,
                              also=fe.also)
    return fe


def _cut_traceback(tail: list[CleanLine]) -> tuple[CleanLine, dict] | None:
    """The innermost frame of a traceback the input ends in before its exception line, with the
    layer its file belongs to; None when the input does not end so or the file says nothing."""
    i = len(tail) - 1
    if i < 1:
        return None
    if not _TB_FRAME.search(tail[i].text):
        # the source line printed under a frame; an exception line ends the traceback properly
        if _EXC_ANY.search(tail[i].text) or not _TB_FRAME.search(tail[i - 1].text):
            return None
        i -= 1
    m = _TB_FRAME.search(tail[i].text)
    if not any(_TB_FRAME.search(c.text) or _TB_HEAD in c.text for c in tail[:i]):
        return None  # one frame-like line alone is not a traceback
    path = m.group(1).replace("\\", "/")
    for area, rx in _CUT_AREAS:
        if rx.search(path):
            return tail[i], {"area": area, "path": path, "function": m.group(3)}
    if _CUT_CKPT_PATH.search(path) and _CUT_CKPT_FUNC.match(m.group(3)):
        return tail[i], {"area": "file-io", "path": path, "function": m.group(3)}
    return None


def _elsewhere(a: LogLine, b: LogLine) -> bool:
    """On another host (when both say theirs), else in another file: where clocks may disagree."""
    if a.node and b.node:
        return a.node != b.node
    return a.source != b.source

# a per-rank file's name: rank17.log, train_rank_17_x.log, rank-3.txt, log.17
_NAME_RANK = re.compile(r"(?i)(?:^|[/_.-])rank[_-]?(\d{1,5})(?=[_.-]|$)|(?:^|/)log\.(\d{1,5})$")
# a host or pod in a file's name: gpu-node-017.log, node03.out, trainer-worker-3.log, host-12_stderr.txt
_NAME_NODE = re.compile(r"(?i)^((?:[a-z][a-z0-9]*-)*(?:gpu|node|host|worker|compute|cn|nid|dgx)[a-z0-9]*-?\d+)"
                        r"(?=$|[._])")


def rank_and_node_from_name(name: str) -> tuple[int | None, str | None]:
    """The rank or host a log's file name gives, for lines that carry no prefix of their own."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    m = _NAME_RANK.search(base)
    rank = int(m.group(1) or m.group(2)) if m else None
    stem = base.split(".", 1)[0] if not base.startswith("log.") else ""
    n = _NAME_NODE.match(stem) if rank is None else None
    return rank, (n.group(1) if n else None)


# exceptions a launcher raises about its worker (torchrun's agent, subprocess-based launchers such as
# DeepSpeed's and accelerate's): they report a rank's death, they are not the rank's own exception
_LAUNCHER_EXCEPTIONS = frozenset({"ChildFailedError", "CalledProcessError"})

# a traceback frame or message of a training step: the OOM came after training started
OOM_CONTEXT = 60  # lines before an OOM searched for its traceback
_TRAINING_FRAME = re.compile(
    r"\.backward\(|\bin backward\b|\boptimizer\.step\(|\bin (?:training_step|train_step|run_step|train_one_epoch|"
    r"_training_step|optimizer_step|inner_training_loop|train_batch)\b|recover from OOM in forward/backward|"
    r"\b\d+ iterations in\b")

# exceptions a launcher raises about its worker (torchrun's agent, subprocess-based launchers such as
# DeepSpeed's and accelerate's): they report a rank's death, they are not the rank's own exception
_LAUNCHER_EXCEPTIONS = frozenset({"ChildFailedError", "CalledProcessError"})

# a row of `ps aux`-style output whose process is stopped (T, t) or a zombie (Z):
# USER PID %CPU %MEM VSZ RSS TTY STAT START TIME COMMAND
_PS_ROW = re.compile(r"^\S+\s+(\d+)\s+[\d.]+\s+[\d.]+\s+\d+\s+\d+\s+\S+\s+([TtZ][A-Za-z<+]*)\s+\S+\s+\S+\s+\S")
# nvidia-smi process-table row: |  GPU  [GI  CI]  PID  Type  Process name  Usage |
_SMI_PROC = re.compile(r"\|?\s*(\d+)\s+(?:(?:N/A|\d+)\s+(?:N/A|\d+)\s+)?(\d+)\s+(?:C|G|C\+G|M|M\+C)\s+(\S.*?)\s+(\d+)MiB\s*\|$")


@dataclass
class _SrcRef:
    idx: int


def _ci():
    o = re2.Options()
    o.case_sensitive = False
    return o


# --------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------
def _sniff(name: str, head: bytes) -> None:
    if b"\x00" in head[:SNIFF]:
        raise InputError(f"{name}: this looks like a binary file (it contains NUL bytes), not a text log; "
                         f"pass the job's text output (.log/.out/.err/.txt, or .gz of one) instead")
    sample = head[:SNIFF]
    if sample:
        bad = sample.decode("utf-8", "replace").count("\ufffd")
        # a multi-byte character cut at the end of the sample is not the file's fault
        if bad > 16 and bad > len(sample) * 0.3:
            raise InputError(f"{name}: most of the first {len(sample)} bytes are not text (UTF-8); "
                             f"pass the job's text log, or decompress/convert it first")


class _Peek(io.RawIOBase):
    """A binary stream with its first bytes already read (for sniffing stdin/gzip)."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self._head, self._rest = head, rest

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        if self._head:
            if n < 0:
                out, self._head = self._head + self._rest.read(), b""
                return out
            out, self._head = self._head[:n], self._head[n:]
            if len(out) < n:
                out += self._rest.read(n - len(out))
            return out
        return self._rest.read(n)


def _open_stream(name: str, fh: BinaryIO) -> BinaryIO:
    head = fh.read(SNIFF)
    stream: BinaryIO = _Peek(head, fh)  # type: ignore[assignment]
    if head[:2] == b"\x1f\x8b":
        gz = gzip.GzipFile(fileobj=stream, mode="rb")
        try:
            head = gz.read(SNIFF)
        except (OSError, EOFError, zlib.error) as e:
            raise InputError(f"{name}: looks gzip-compressed but cannot be decompressed ({e}); "
                             f"check the upload is complete, or pass the uncompressed log") from None
        stream = _Peek(head, _GzSafe(name, gz))  # type: ignore[assignment]
    _sniff(name, head)
    return _unwrapped(stream)


def _unwrapped(stream: BinaryIO) -> BinaryIO:
    """A small input (a paste saved to a file, an excerpt) with a terminal's hard wrap undone;
    a large one as it is (no log of that size was copied out of a terminal)."""
    data = stream.read(UNWRAP_LIMIT + 1)
    if len(data) > UNWRAP_LIMIT:
        return _Peek(data, stream)  # type: ignore[return-value]
    text = data.decode("utf-8", "surrogateescape")
    # colours off before the prefilter reads the bytes ("Bus \x1b[31merror" is "Bus error")
    plain = _ANSI.sub("", text) if "\x1b" in text else text
    plain = _ANSI_SYSLOG.sub("", plain) if "#033[" in plain else plain
    glued = fill_result_rows(unquote_lines(unwrap(plain)))
    return io.BytesIO(data if glued == text else glued.encode("utf-8", "surrogateescape"))


class _GzSafe:
    def __init__(self, name: str, gz: gzip.GzipFile) -> None:
        self.name, self.gz = name, gz

    def read(self, n: int = -1) -> bytes:
        try:
            return self.gz.read(n)
        except (OSError, EOFError, zlib.error) as e:
            raise InputError(f"{self.name}: the gzip stream is damaged or cut short ({e}); "
                             f"re-upload the file or pass the uncompressed log") from None


def _is_log_name(fn: str) -> bool:
    base = os.path.basename(fn)
    if base.startswith("."):
        return False
    low = base.lower()
    return low.endswith(LOG_EXTS) or "." not in base


def _expand(paths: Sequence[str], skip: frozenset[str] = frozenset()) -> list[str]:
    out: list[str] = []
    for p in paths:
        if p == "-":
            out.append(p)
            continue
        if not os.path.exists(p):
            raise InputError(f"{p}: no such file or folder; check the path (or pass '-' to read the log "
                             f"from standard input)")
        if os.path.isdir(p):
            found = []
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for fn in sorted(files):
                    if _is_log_name(fn) and os.path.join(root, fn) not in skip:
                        found.append(os.path.join(root, fn))
            if not found:
                raise InputError(f"{p}: the folder holds no log files (*.log, *.txt, *.out, *.err, *.gz or "
                                 f"extensionless text); point at the folder with the job's output")
            out.extend(found)
        else:
            out.append(p)
    kept = []
    for p in out:
        if p == "-":
            kept.append(p)
            continue
        try:
            mode = os.stat(p).st_mode
        except OSError:
            mode = None
        if mode is not None and not stat.S_ISREG(mode):
            # a FIFO would block forever waiting for a writer; a device reads without end
            if p in paths:
                raise InputError(f"{p}: not a regular file (a pipe, socket or device); save the log to a file, "
                                 f"or pipe it in with '-'")
            continue  # found in a folder: skipped
        kept.append(p)
    return kept


# --------------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------------
def parse_paths(paths: Sequence[str], *, keywords: Iterable[str] = (), stdin: BinaryIO | None = None,
                skip: Iterable[str] = ()) -> ParseResult:
    """Parse log files, folders (recursively), ``-`` (standard input); ``.gz`` transparently.
    Files in ``skip`` found inside a folder are left out (flight-recorder dumps, read elsewhere)."""
    if isinstance(paths, str):
        paths = [paths]
    if not paths:
        raise InputError("no input given; pass a log file, a folder of logs, or '-' for standard input")
    files = _expand(paths, frozenset(skip))
    sc = _Scanner(keywords, _known_size(files))
    walked = {f for f in files} - set(paths)

    def refused(f: str, error: str) -> None:
        if error == "permission":
            raise InputError(f"{f}: permission denied; make the file readable or copy it somewhere you "
                             f"can read")
        if f in walked and ("binary" in error or "not text" in error):
            sc.warnings.append(f"{f}: skipped, not a text log")
            return
        raise InputError(error)

    split = _parallel_from(files)
    tasks = [piece for f in files[split:] for piece in _ranges(f)]
    if len(tasks) < 2 or _workers() < 2:
        split, tasks = len(files), []
    for f in files[:split]:
        if f == "-":
            fh = stdin if stdin is not None else sys.stdin.buffer
            _scan_one(sc, "stdin", fh)
            continue
        try:
            with open(f, "rb") as fh:
                try:
                    _scan_one(sc, f, fh)
                except InputError as e:
                    refused(f, str(e))
        except PermissionError:
            refused(f, "permission")
        except IsADirectoryError:
            continue
    # the pieces come back in order; a file's ranges are merged into one source, line numbers running on
    cur: list = []  # [source, lines so far, bytes so far] of the file being merged
    failed = ""
    for (f, start, _end), picked in _pick_all(sc, tasks):
        if start == 0:
            if cur:
                sc._done(cur[0], cur[1], cur[2] == 0)
            cur, failed = [], ""
        if f == failed:
            continue
        if picked.error is not None:
            failed = f
            refused(f, picked.error)
            continue
        if not cur:
            cur = [sc._source(f), 0, 0]
        sc.merge_piece(cur[0], picked, cur[1])
        cur[1] += picked.n_lines
        cur[2] += picked.bytes_read
    if cur:
        sc._done(cur[0], cur[1], cur[2] == 0)
    if sc.bytes_read == 0 or not sc.lines_read:
        names = ", ".join(sc.sources) or ", ".join(paths)
        raise InputError(f"{names}: the input is empty; pass the job's log with its content "
                         f"(for a running job, wait until it has written output)")
    return sc.finish()


def _gzipped(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(2) == b"\x1f\x8b"
    except OSError:
        return False


def _pick_all(sc: _Scanner, tasks: Sequence[tuple[str, int, int | None]]
              ) -> Iterable[tuple[tuple[str, int, int | None], _Picked]]:
    """Prefilter ``tasks`` (whole files, or byte ranges of a large one: :func:`_ranges`) on all
    cores, one worker per piece, and yield the results in order. At most two pieces per worker are
    in flight, so memory stays bounded by the kept lines of those pieces, not by the whole input. A
    gzip file is read in this process, in its turn."""
    import concurrent.futures
    import multiprocessing

    if not tasks:
        return
    n = min(_workers(), len(tasks))
    _WORKER.update(pre=sc.pre, step_b=sc.step_b)
    ctx = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(max_workers=n, mp_context=ctx) as pool:
        def submit(task: tuple[str, int, int | None]):
            return None if task[2] is None and _gzipped(task[0]) else pool.submit(_pick_file, *task)

        todo = iter(tasks)
        pending: deque = deque((t, submit(t)) for t in itertools.islice(todo, 2 * n))
        while pending:
            task, fut = pending.popleft()
            nxt = next(todo, None)
            if nxt is not None:
                pending.append((nxt, submit(nxt)))
            yield task, (_pick_file(*task) if fut is None else fut.result())


def _scan_one(sc: _Scanner, name: str, fh: BinaryIO) -> None:
    sc.scan(name, _open_stream(name, fh))


def parse_text(text: str, *, source: str = "paste", keywords: Iterable[str] = ()) -> ParseResult:
    """Parse pasted text (a Slack message, an uploaded snippet)."""
    if text is None or not text.strip():
        raise InputError(f"{source}: the pasted text is empty; paste the end of the job's log "
                         f"(the traceback and the lines before it)")
    if "\x00" in text[:SNIFF]:
        raise InputError(f"{source}: the text contains NUL bytes, so it is binary data, not a log; "
                         f"paste the job's text output instead")
    sc = _Scanner(keywords)
    sc.scan(source, _unwrapped(io.BytesIO(text.encode("utf-8", "surrogatepass"))))
    return sc.finish()


assert set(KINDS) >= {"cuda-oom", "nccl-timeout", "xid", "rank-straggler", "python-exception"}
