"""The message catalogs: what the software in a training job can print when it fails.

``knowledge/catalog/<source>.yaml`` holds one row per failure message of one source (NCCL,
PyTorch, CUDA, the NVIDIA driver, the Linux kernel, Slurm, ...), read from that software's own
source or binaries (``docs/catalogs.md``).  This module loads and validates the rows, turns each
message's format string into a pattern, and scans cleaned log lines for them:

* :func:`load` -> a :class:`Catalog` (rows and every problem, as ``file:line: reason``);
* :meth:`Catalog.scan` -> the :class:`Hit` s on a list of :class:`LogLine` s, found through an
  Aho-Corasick pass over each row's longest literal run and confirmed with RE2 (linear time,
  whatever the line);
* :meth:`Catalog.findings` -> the typed findings the hit rows declare;
* :meth:`Catalog.anchors` -> literal keywords for the scan's byte-level prefilter.

Run ``python -m knowledge.catalog check`` to validate every catalog.
"""

from __future__ import annotations

import functools
import hashlib
import marshal
import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Sequence

import yaml

from collectors.findings import KINDS, Finding, LogLine
from knowledge.loader import _Lines

CATEGORIES = ("gpu-memory", "communication", "shared-memory", "gpu-hardware", "checkpoint-storage",
              "host-memory", "scheduler", "software")
FILE_KEYS = ("source", "library", "version", "read_from", "url", "defaults", "messages")
ROW_KEYS = ("id", "text", "pattern", "where", "category", "family", "entry", "finding", "example", "note", "wrapper", "pointer",
            "transient")
ID_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
MIN_LITERAL = 12  # literal characters a message needs in all ...
MIN_RUN = 6       # ... and in one run, so that it says something specific
MAX_HITS_PER_ROW = 50  # lines kept per row: a log repeating one message a million times says it once
HEAD = 24       # a message whose opening literal has this many characters ...
HEAD_TAIL = 60  # ... is recognised from it alone when the line ends at most this far after it
TEXT_MEMO = 50_000  # distinct line texts whose rows one scan() remembers

# printf conversions (flags, width, precision, length) and {}-style fields
_PRINTF = re.compile(r"%(?P<flags>[-+ #0']*)(?P<width>\*|\d+)?(?:\.(?P<prec>\*|\d+))?"
                     r"(?P<len>hh|h|ll|l|L|q|j|z|Z|t|I64|I32|I)?(?P<conv>[diouxXeEfFgGaAcspnm])")
_BRACE = re.compile(r"\{(?P<name>[A-Za-z_]\w*|\d+)?(?:![rsa])?(?::(?P<spec>[^{}]*))?\}")


def catalog_dir() -> Path:
    return Path(__file__).resolve().parent


class CatalogError(Exception):
    def __init__(self, path: Path | str, line: int | None, reason: str):
        self.path, self.line, self.reason = str(path), line, reason
        super().__init__(f"{self.path}:{line or 1}: {reason}")


# --------------------------------------------------------------------------------------------
# Format strings -> patterns
# --------------------------------------------------------------------------------------------
@dataclass
class _Piece:
    literal: str | None = None  # a literal run, or None for a placeholder
    conv: str = "s"             # printf conversion, or "s" for {} fields
    name: str | None = None


def _pieces(text: str) -> list[_Piece]:
    """Split a format string into literal runs and placeholders (printf and {} styles)."""
    out: list[_Piece] = []
    buf: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "%":
            if text.startswith("%%", i):
                buf.append("%")
                i += 2
                continue
            m = _PRINTF.match(text, i)
            if m:
                if buf:
                    out.append(_Piece("".join(buf)))
                    buf = []
                out.append(_Piece(None, m.group("conv")))
                i = m.end()
                continue
        elif c == "{":
            if text.startswith("{{", i):
                buf.append("{")
                i += 2
                continue
            m = _BRACE.match(text, i)
            if m:
                if buf:
                    out.append(_Piece("".join(buf)))
                    buf = []
                spec = m.group("spec") or ""
                conv = "d" if spec.endswith("d") else "f" if spec.endswith(("f", "e", "g", "%")) else \
                    "x" if spec.endswith(("x", "X")) else "s"
                name = m.group("name")
                out.append(_Piece(None, conv, name if name and not name.isdigit() else None))
                i = m.end()
                continue
        elif c == "}" and text.startswith("}}", i):
            buf.append("}")
            i += 2
            continue
        buf.append(c)
        i += 1
    if buf:
        out.append(_Piece("".join(buf)))
    return out


_CONV_RE = {
    "d": r"[-+]?\d+", "i": r"[-+]?\d+", "u": r"\d+", "o": r"[0-7]+",
    "x": r"(?:0[xX])?[0-9a-fA-F]+", "X": r"(?:0[xX])?[0-9a-fA-F]+", "p": r"(?:0[xX])?[0-9a-fA-F]+|\(nil\)",
    "f": r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|inf|nan)", "c": r".",
}
_FILL = {"d": "3", "i": "3", "u": "12", "o": "17", "x": "1f", "X": "1F", "p": "0x7f3a2c000000",
         "f": "1.50", "c": "x", "s": "value", "m": "Input/output error"}


def _literal_re(lit: str) -> str:
    # runs of whitespace in a format string match any run of whitespace in a log
    parts = re.split(r"\s+", lit)
    return r"\s+".join(re.escape(p) for p in parts)


def text_to_pattern(text: str) -> tuple[str, list[str]]:
    """A printf/{} format string -> (RE2 pattern, group name of each placeholder in order).

    Placeholders become capture groups ``p1``, ``p2``... (or their ``{name}``); leading and
    trailing placeholders are dropped, since "anywhere in the line" already covers them.
    """
    pieces = _pieces(text)
    while pieces and pieces[0].literal is None:
        pieces.pop(0)
    while pieces and pieces[-1].literal is None:
        pieces.pop()
    out, names = [], []
    n = 0
    for k, p in enumerate(pieces):
        if p.literal is not None:
            out.append(_literal_re(p.literal))
            continue
        n += 1
        name = p.name or f"p{n}"
        if name in names:
            name = f"p{n}"
        names.append(name)
        body = _CONV_RE.get(p.conv)
        if body is None:  # %s, {}: anything (RE2 has no backtracking, so this stays linear)
            body = r".*?"
        out.append(f"(?P<{name}>{body})")
    return "".join(out), names


def fill(text: str) -> str:
    """The format string with each placeholder filled with a plain value (a default example)."""
    return "".join(p.literal if p.literal is not None else _FILL.get(p.conv, "value") for p in _pieces(text))


def literal_runs(text: str | None, pattern: str | None) -> list[str]:
    """The literal runs every match must contain (lower-cased, whitespace-normalised)."""
    if text is not None:
        pieces = _pieces(text)
        runs = [p.literal for p in pieces if p.literal is not None]
    else:
        runs = regex_literals(pattern or "")
    return [" ".join(r.split()).lower() for r in runs if r.strip()]


def regex_literals(pattern: str, flags: int = 0) -> list[str]:
    """Top-level literal runs of a regex (a run breaks at anything that is not a plain character)."""
    try:
        import re._parser as sre_parse  # type: ignore[import-not-found]
        from re._constants import LITERAL  # type: ignore[import-not-found]
    except ImportError:  # pragma: no cover - Python < 3.11
        import sre_parse  # type: ignore[no-redef]
        from sre_constants import LITERAL  # type: ignore[no-redef]
    try:
        parsed = sre_parse.parse(pattern, flags)
    except re.error:
        return []
    runs, run = [], []
    for op, arg in list(parsed) + [(None, None)]:
        if op is LITERAL:
            run.append(chr(arg))
            continue
        if run:
            runs.append("".join(run))
        run = []
    return runs


# literal runs that healthy output is full of: never the run a row is looked up by
# runs that healthy output holds everywhere: NCCL_DEBUG=INFO prefixes, and "for GPU" ("Setting affinity
# for GPU 3 to ...", on every rank at every init)
_CHATTER = {"nccl info", "nccl info ", "nccl warn", "error:", "warning:", "for gpu"}


def _anchor(runs: list[str]) -> str | None:
    """The longest literal run, the one the prefilter and the automaton look for (a run that
    every NCCL_DEBUG=INFO line contains is passed over when the message has another one)."""
    runs = [r.strip() for r in runs]
    useful = [r for r in runs if r not in _CHATTER and len(r) >= MIN_RUN] or runs
    best = max(useful, key=len, default="")
    return best if len(best) >= MIN_RUN else None


def _prefilter_anchor(row: "Row") -> str:
    """The literal run a log line must hold for ``row`` to match it that healthy output holds least:
    a run of two or more words (": sxid (pci:") before a longer single word ("nvidia-nvswitch",
    which every NVSwitch driver line starts with), then the longest. Every match of the row holds
    each of its runs, so any one of them is a sound prefilter; the matcher's own anchor (the
    longest run) is not changed."""
    runs = [r.strip() for r in literal_runs(row.text, row.pattern)]
    useful = [r for r in runs if r not in _CHATTER and len(r) >= MIN_RUN]
    if not useful:
        return row.anchor
    return max(useful, key=lambda r: (" " in r, len(r)))


# --------------------------------------------------------------------------------------------
# Rows
# --------------------------------------------------------------------------------------------
@dataclass
class Row:
    id: str
    source: str
    category: str
    family: str
    pattern: str
    names: list[str]
    anchor: str
    text: str | None = None
    entry: str | None = None
    finding: dict[str, Any] | None = None
    example: str = ""
    where: str = ""
    path: str = ""
    index: int = 0  # position in the file's messages list
    library: str = ""
    version: str = ""
    # a frame around another message ("NCCL error in: %s:%d, %s"): when its placeholder holds a
    # catalogued message, that message speaks and the frame is dropped
    wrapper: bool = False
    # a message that only points at an error printed elsewhere ("See root cause above", "WorkerProc
    # hit an exception." before the traceback): a failure line, but it says nothing about the layer,
    # so it speaks for no family
    pointer: bool = False
    # a retry notice ("connect returned Connection refused, retrying", "Retrying WriteObject ... Attempt: 2"):
    # a healthy run prints it once when the retry succeeds, so alone, once or twice, it is no cause; seen
    # again and again, or beside a failure, it speaks for its family (knowledge.match.RETRIES_STUCK)
    transient: bool = False
    # the scan's byte-level prefilter literal (_prefilter_anchor), worked out once at load and kept in
    # the parsed-catalog cache, so a new process does not parse 3 600 format strings again
    prefilter: str = ""
    # the opening literal that recognises the message cut short (_head), likewise worked out at load
    # and cached: "" when it has none, None when not worked out yet
    head: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "source": self.source, "category": self.category, "family": self.family,
                "entry": self.entry, "library": self.library, "version": self.version, "where": self.where,
                "wrapper": self.wrapper, "pointer": self.pointer, "transient": self.transient}


@dataclass
class Hit:
    row: Row
    line: LogLine
    groups: dict[str, str] = field(default_factory=dict)


def _compile(pattern: str):
    import re2

    opts = re2.Options()
    opts.case_sensitive = False
    opts.max_mem = 8 << 20
    return re2.compile(pattern, opts)


def _line_of(node: yaml.Node | None, *path: Any) -> int:
    return _Lines(node).line(*path)


def _loader():
    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def catalog_files(directory: Path | None = None) -> list[Path]:
    directory = Path(directory) if directory else catalog_dir()
    return sorted(p for p in directory.glob("*.yaml") if p.is_file())


def fingerprint(directory: Path | None = None) -> str:
    digest = hashlib.sha256()
    for path in catalog_files(directory):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _finding_ok(spec: Any, names: list[str], err, where: tuple) -> dict[str, Any] | None:
    if not isinstance(spec, dict) or "kind" not in spec:
        err(where, "finding must be a mapping with 'kind', e.g. {kind: xid, code: $2}")
        return None
    kind = spec["kind"]
    if kind not in KINDS:
        err(where, f"unknown finding kind {kind!r}; known kinds: {', '.join(sorted(KINDS))}")
        return None
    for key, val in spec.items():
        if key == "kind":
            continue
        if key not in KINDS[kind]:
            err(where, f"finding kind {kind!r} has no attribute {key!r}; it has: {', '.join(KINDS[kind])}")
            return None
        if isinstance(val, str) and val.startswith("$"):
            ref = val[1:]
            group = f"p{ref}" if ref.isdigit() else ref
            if ref.isdigit() and int(ref) <= len(names):
                group = names[int(ref) - 1]
            if group not in names:
                err(where, f"finding attribute {key!r} refers to {val}, which the message has no placeholder for "
                           f"(it has {len(names)}: {', '.join(names) or 'none'})")
                return None
    return dict(spec)


def _resolve(spec: dict[str, Any], names: list[str]) -> dict[str, Any]:
    out = {}
    for key, val in spec.items():
        if isinstance(val, str) and val.startswith("$"):
            ref = val[1:]
            out[key] = ("$", names[int(ref) - 1] if ref.isdigit() else ref)
        else:
            out[key] = val
    return out


def load_file(path: Path, *, validate: bool = True) -> tuple[list[Row], list[CatalogError]]:
    """Load one catalog file; returns its good rows and every problem (``file:line: reason``).

    ``validate=False`` skips compiling each pattern and matching its example (the check command
    and the tests do that); the engine loads that way and compiles a row when a line first hits it.
    """
    errors: list[CatalogError] = []
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return [], [CatalogError(path, None, f"cannot read as UTF-8 text: {exc}")]
    try:
        data = yaml.load(text, Loader=_loader())  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        return [], [CatalogError(path, mark.line + 1 if mark else None,
                                 f"YAML syntax error: {getattr(exc, 'problem', None) or exc}")]
    node: yaml.Node | None = None

    def err(where: tuple, reason: str) -> None:
        nonlocal node
        if node is None:  # composing is slow; do it only when there is something to locate
            node = yaml.compose(text, Loader=_loader())
        errors.append(CatalogError(path, _line_of(node, *where), reason))

    if not isinstance(data, dict):
        err((), "a catalog is a mapping: source, library, version, read_from, url, messages")
        return [], errors
    for key in data:
        if key not in FILE_KEYS:
            err((key,), f"unknown key {key!r}; allowed: {', '.join(FILE_KEYS)}")
    if data.get("source") != path.stem:
        err(("source",), f"source {data.get('source')!r} must equal the file name ({path.stem!r})")
    for key in ("library", "version", "read_from", "url"):
        if not isinstance(data.get(key), (str, int, float)) or not str(data.get(key)).strip():
            err((key,), f"missing '{key}': say where the messages were read (provenance)")
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict) or set(defaults) - {"category", "family", "entry"}:
        err(("defaults",), "defaults may set category, family and entry")
        defaults = {}
    rows_in = data.get("messages")
    if not isinstance(rows_in, list) or not rows_in:
        err(("messages",), "messages must be a non-empty list of rows")
        return [], errors
    rows: list[Row] = []
    for i, raw in enumerate(rows_in):
        where = ("messages", i)
        before = len(errors)
        if not isinstance(raw, dict):
            err(where, "a row is a mapping: id, text (or pattern), where, category, family ...")
            continue
        for flag in ("wrapper", "pointer", "transient"):
            if flag in raw and not isinstance(raw[flag], bool):
                err(where + (flag,), f"{raw.get('id')}: {flag} must be true or false")
        extra = set(raw) - set(ROW_KEYS)
        if extra:
            err(where, f"unknown keys {sorted(extra)}; allowed: {', '.join(ROW_KEYS)}")
        rid = raw.get("id")
        if not isinstance(rid, str) or not ID_RE.match(rid):
            err(where + ("id",), f"id {rid!r} must be lowercase-hyphenated")
            continue
        text_, pat = raw.get("text"), raw.get("pattern")
        if (text_ is None) == (pat is None) or not isinstance(text_ if text_ is not None else pat, str):
            err(where, f"{rid}: give exactly one of 'text' (the format string) or 'pattern' (RE2)")
            continue
        category = raw.get("category", defaults.get("category"))
        family = raw.get("family", defaults.get("family"))
        entry = raw.get("entry", defaults.get("entry"))
        if category not in CATEGORIES:
            err(where + ("category",), f"{rid}: category {category!r} is not one of: {', '.join(CATEGORIES)}")
        if not isinstance(family, str) or not family:
            err(where, f"{rid}: no family (a backstop entry id); set 'family' or defaults.family")
        if not isinstance(raw.get("where", ""), str) or not str(raw.get("where", "")).strip():
            err(where, f"{rid}: 'where' (the source file it was read from) is required")
        if text_ is not None:
            pattern, names = text_to_pattern(text_)
        else:
            pattern = pat
            names = list(dict.fromkeys(re.findall(r"\(\?P<(\w+)>", pat)))
        runs = literal_runs(text_, pat)
        anchor = _anchor(runs)
        if sum(len(r.strip()) for r in runs) < MIN_LITERAL or anchor is None:
            err(where, f"{rid}: too generic to say anything; a message needs {MIN_LITERAL}+ literal "
                       f"characters and a literal run of {MIN_RUN}+")
        compiled = None
        if validate:
            try:
                compiled = _compile(pattern)
            except Exception as exc:  # noqa: BLE001 - re2.error and friends
                err(where, f"{rid}: the pattern does not compile as RE2: {exc}")
        spec = None
        if raw.get("finding") is not None:
            spec = _finding_ok(raw["finding"], names, err, where + ("finding",))
        example = raw.get("example")
        if example is not None and not isinstance(example, str):
            err(where + ("example",), f"{rid}: example must be text")
            example = None
        if example is None:
            if text_ is None:
                err(where, f"{rid}: a row with a 'pattern' needs an 'example'")
                example = ""
            else:
                example = fill(text_)
        if compiled is not None and example and not compiled.search(example):
            err(where + ("example",), f"{rid}: the example does not match the message")
        if len(errors) > before:
            continue
        rows.append(Row(
            id=rid, source=path.stem, category=category, family=family, pattern=pattern, names=names,
            anchor=anchor or "", text=text_, entry=entry, finding=_resolve(spec, names) if spec else None,
            example=example, where=str(raw.get("where", "")), path=str(path), index=i,
            library=str(data.get("library", "")), version=str(data.get("version", "")),
            wrapper=raw.get("wrapper") is True, pointer=raw.get("pointer") is True,
            transient=raw.get("transient") is True))
        rows[-1].prefilter = _prefilter_anchor(rows[-1])
        rows[-1].head = _head(rows[-1]) or ""
    return rows, errors


# --------------------------------------------------------------------------------------------
# The compiled catalog
# --------------------------------------------------------------------------------------------
class Catalog:
    def __init__(self, rows: Sequence[Row], errors: Sequence[CatalogError] = ()):
        self.rows = list(rows)
        self.errors = list(errors)
        self.by_id = {r.id: r for r in self.rows}
        self._compiled: list[Any] = [None] * len(self.rows)
        self._by_anchor: dict[str, list[int]] = {}
        self._by_head: dict[str, list[int]] = {}
        for i, row in enumerate(self.rows):
            self._by_anchor.setdefault(row.anchor, []).append(i)
            head = row.head if row.head is not None else _head(row)
            if head:
                self._by_head.setdefault(head, []).append(i)
        self._automaton = None
        if self._by_anchor:
            import ahocorasick

            auto = ahocorasick.Automaton()
            for anchor in set(self._by_anchor) | set(self._by_head):
                auto.add_word(anchor, anchor)
            auto.make_automaton()
            self._automaton = auto

    def __len__(self) -> int:
        return len(self.rows)

    def anchors(self) -> set[str]:
        """Literal keywords for the scan's byte-level prefilter, one per row: the literal run of its
        message that says most (see :func:`_prefilter_anchor`). A ``pointer`` row speaks for no
        family, so it keeps no line of its own (NCCL's "[Service thread] Connection closed by
        localRank", printed by every rank at every clean exit, was 1 line in 80 of an
        NCCL_DEBUG=INFO log); a line it shares with another message is kept by that one."""
        return {row.prefilter or _prefilter_anchor(row) for row in self.rows if not row.pointer}

    def _pattern(self, i: int):
        c = self._compiled[i]
        if c is None:
            c = self._compiled[i] = _compile(self.rows[i].pattern)
        return c

    def match_line(self, text: str) -> list[tuple[Row, dict[str, str]]]:
        """Every row whose message is in ``text``, with the values of its placeholders.

        Where one row's match lies inside a longer, more specific row's match ("Failed to
        initialize NVML: %s" inside "Failed to initialize NVML: Driver/library version mismatch"),
        only the specific row is kept.
        """
        if self._automaton is None or not text:
            return []
        low = " ".join(text.lower().split()) if "  " in text or "\t" in text else text.lower()
        found: list[tuple[Row, dict[str, str], int, int, list[tuple[int, int]]]] = []
        seen: set[str] = set()
        heads: list[tuple[int, int]] = []  # (row, end of its head in low) for lines cut short
        for end, anchor in self._automaton.iter(low):
            if anchor in seen:
                continue
            seen.add(anchor)
            for i in self._by_head.get(anchor, ()):
                heads.append((i, end))
            for i in self._by_anchor.get(anchor, ()):
                m = self._pattern(i).search(text)
                if m is not None:
                    groups = {k: v for k, v in m.groupdict().items() if v is not None}
                    index = self._pattern(i).groupindex
                    spans = [m.span(index[k]) for k in groups]
                    found.append((self.rows[i], groups, m.start(), m.end(), spans))
        matched = {id(f[0]) for f in found}
        for i, end in heads:
            # the line holds the start of the message and stops soon after: a message cut short
            # (a console, a pasted excerpt) is still that message
            row = self.rows[i]
            if id(row) not in matched and _cut_short_of(row, low[end + 1:], strict=len(low) - end - 1 > HEAD_TAIL):
                matched.add(id(row))
                found.append((row, {}, 0, 0, []))
        if len(found) > 1:
            found = [h for h in found if not any(o is not h and _covers(o, h) for o in found)]
        if len(found) > 1:
            # a row marked ``wrapper`` ("NCCL error in: %s:%d, %s") whose placeholder holds another
            # catalogued message yields to the message it wraps: that one says what failed
            found = [o for o in found if not (o[0].wrapper and any(h is not o and _wraps(o, h) for h in found))]
        return [(row, groups) for row, groups, _, _, _ in found]

    def scan(self, lines: Iterable[LogLine]) -> list[Hit]:
        hits: list[Hit] = []
        per_row: dict[str, int] = {}
        # the rows a text matches depend on the text alone: an error storm's repeated lines are read once
        seen: dict[str, list[tuple[Row, dict[str, str]]]] = {}
        for line in lines:
            found = seen.get(line.text)
            if found is None:
                found = self.match_line(line.text)
                if len(seen) < TEXT_MEMO:
                    seen[line.text] = found
            for row, groups in found:
                n = per_row.get(row.id, 0)
                if n >= MAX_HITS_PER_ROW:
                    continue
                per_row[row.id] = n + 1
                hits.append(Hit(row, line, groups))
        return hits

    def findings(self, hits: Iterable[Hit], existing: Iterable[Finding] = ()) -> list[Finding]:
        """The typed findings the hit rows declare, skipping a kind already found on that line."""
        have = {(f.source, f.line_no, f.node, f.kind) for f in existing}
        out = []
        for hit in hits:
            spec = hit.row.finding
            if not spec:
                continue
            kind = spec["kind"]
            ln = hit.line
            key = (ln.source, ln.line_no, ln.node, kind)
            if key in have:
                continue
            have.add(key)
            attrs: dict[str, Any] = {}
            for k, v in spec.items():
                if k == "kind":
                    continue
                if isinstance(v, tuple) and v[:1] == ("$",):
                    val = hit.groups.get(v[1])
                    if val is None:
                        continue
                    attrs[k] = _typed(val)
                else:
                    attrs[k] = v
            if "text" in KINDS[kind] and "text" not in attrs:
                attrs["text"] = ln.text
            attrs["catalog"] = hit.row.id
            out.append(Finding(kind=kind, attrs=attrs, line=ln.text, line_no=ln.line_no, rank=ln.rank,
                               node=ln.node, source=ln.source, ts=ln.ts))
        return out


def _head(row: Row) -> str | None:
    """The opening literal of a format-string message, when it alone is specific enough to
    recognise a line that was cut short; None for patterns and short openings."""
    if row.text is None:
        return None
    pieces = _pieces(row.text)
    while pieces and pieces[0].literal is None:
        pieces.pop(0)
    if len(pieces) < 2 or pieces[0].literal is None:
        return None  # the whole message is one literal: the full match covers it
    head = " ".join(pieces[0].literal.split()).lower()
    return head if len(head) >= HEAD else None


def _cut_short_of(row: Row, rest: str, strict: bool = False) -> bool:
    """``rest`` (what follows the message's opening literal on the line, lower case) could be the
    message cut short: every literal it reaches agrees, as far as the line goes, and every number
    placeholder holds a number. "..., Cable plugged" is not "..., Cable unplugged" cut short.

    ``strict`` (a long line after the opening): a free-text placeholder must be followed by the
    next literal, or the line must end in its first characters: the message broken across lines
    by a console or a paste ("... CUDA error 401 'the operation cannot be performed'." with "This
    is usually caused by ..." on the next line)."""
    pieces = _pieces(row.text or "")
    while pieces and pieces[0].literal is None:
        pieces.pop(0)
    pos, n = 0, len(rest)
    rest_end = rest.rstrip()
    for k, piece in enumerate(pieces[1:], start=1):
        while pos < n and rest[pos] == " ":  # the line's whitespace was folded, the head's trimmed
            pos += 1
        if pos >= n:
            return True
        if piece.literal is not None:
            lit = " ".join(piece.literal.split()).lower()
            seen = rest[pos:pos + len(lit)]
            if not lit.startswith(seen):
                return False
            pos += len(lit)
            continue
        body = _CONV_RE.get(piece.conv)
        if body is None:
            if not strict:
                return True  # a free-text placeholder: where it ends cannot be told
            nxt = next((p.literal for p in pieces[k + 1:] if p.literal is not None), None)
            if nxt is None:
                return True
            lit = " ".join(nxt.split()).lower()
            at = rest.find(lit, pos)
            if at >= 0:
                pos = at  # the placeholder's text ends where the next literal starts
                continue
            tail = lit.rstrip()
            return any(rest_end.endswith(tail[:j]) for j in range(min(len(tail), 40), 1, -1))
        m = re.match(body, rest[pos:])
        if m is None:
            return False
        pos += m.end()
    return True


def _wraps(o, h) -> bool:
    """``h``'s match lies inside one of ``o``'s placeholders, or starts inside ``o``'s own text and
    runs on into the placeholder (Paddle's "NCCL error(1), unhandled cuda error" read whole by one row,
    inside the frame "(External) NCCL error(%d), %s")."""
    return h[3] > h[2] and any((a <= h[2] and h[3] <= b) or (o[2] <= h[2] < a < h[3] <= b) for a, b in o[4])


def _covers(o, h) -> bool:
    """``o`` says all that ``h`` says and more: ``h``'s match lies inside ``o``'s, not inside one
    of ``o``'s placeholders (where ``h`` would be the more specific reading), and ``o`` has
    more literal text."""
    if not (o[2] <= h[2] and h[3] <= o[3]):
        return False
    if any(a <= h[2] and h[3] <= b for a, b in o[4]):
        return False
    return _specificity(o[0]) > _specificity(h[0])


@functools.lru_cache(maxsize=None)
def _spec_of(text: str | None, pattern: str | None) -> int:
    return sum(len(r) for r in literal_runs(text, None if text is not None else pattern))


def _specificity(row: Row) -> int:
    """Literal characters of a row's message: the more, the more specific."""
    return _spec_of(row.text, row.pattern)


def _typed(val: str) -> Any:
    v = val.strip()
    if re.fullmatch(r"[-+]?\d+", v):
        return int(v)
    return v


def load(directory: Path | None = None, *, validate: bool = True) -> Catalog:
    """Every catalog under ``directory`` (default: the shipped ones); problems in ``.errors``."""
    rows: list[Row] = []
    errors: list[CatalogError] = []
    seen: dict[str, str] = {}
    for path in catalog_files(directory):
        got, errs = load_file(path, validate=validate)
        errors.extend(errs)
        for row in got:
            if row.id in seen:
                errors.append(CatalogError(path, None, f"duplicate id {row.id!r}; also in {seen[row.id]}"))
                continue
            seen[row.id] = row.path
            rows.append(row)
    return Catalog(rows, errors)


_CACHE: dict[str, Catalog] = {}
_CACHE_VERSION = "4"


CACHE_KEEP = 4  # parsed-catalog caches kept in the data directory


def shipped(cache_dir: str | Path | None = None) -> Catalog:
    """The shipped catalogs, loaded once per process.

    With ``cache_dir`` the parsed rows are kept there (keyed by a hash of the catalog files and of
    this module), so a new process skips the YAML; a damaged cache is rebuilt. The cache is
    ``marshal`` data (each row a tuple of its fields), which a new process reads four times faster
    than the same rows as JSON objects; it holds plain values only, nothing that runs.
    """
    key = fingerprint() + ":" + _module_hash()
    cat = _CACHE.get(key)
    if cat is not None:
        return cat
    names = [f.name for f in fields(Row)]
    path = Path(cache_dir) / f"catalog-{hashlib.sha256(key.encode()).hexdigest()[:16]}.marshal" if cache_dir else None
    if path is not None and path.is_file():
        try:
            data = marshal.loads(path.read_bytes())
            if data["version"] == _CACHE_VERSION and data["fields"] == names:
                cat = _CACHE[key] = Catalog([Row(*r) for r in data["rows"]])
                return cat
        except (OSError, ValueError, EOFError, KeyError, TypeError):
            pass  # rebuilt below
    cat = _CACHE[key] = load(validate=False)
    if path is not None:
        try:
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            rows = [tuple(getattr(r, n) for n in names) for r in cat.rows]
            tmp.write_bytes(marshal.dumps({"version": _CACHE_VERSION, "fields": names, "rows": rows}))
            os.replace(tmp, path)
            # one cache per catalog version: keep the newest few, not one per upgrade forever (the
            # JSON caches of earlier versions go too)
            old = sorted([*path.parent.glob("catalog-*.marshal"), *path.parent.glob("catalog-*.json")],
                         key=lambda p: p.stat().st_mtime, reverse=True)
            for stale in old[CACHE_KEEP:]:
                stale.unlink(missing_ok=True)
        except (OSError, ValueError):
            pass  # a read-only data dir: load from YAML next time too
    return cat


def _module_hash() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


_NODES: dict[str, yaml.Node] = {}


def row_line(row: Row) -> int:
    """The line of ``row`` in its file (for messages about a row found after loading)."""
    node = _NODES.get(row.path)
    if node is None:
        node = _NODES[row.path] = yaml.compose(Path(row.path).read_text(encoding="utf-8"), Loader=_loader())
    return _line_of(node, "messages", row.index)


def check_against_entries(catalog: Catalog, entries: Sequence[Any]) -> list[CatalogError]:
    """Families must be backstop entries of the row's category; entries must exist."""
    by_id = {e.id: e for e in entries}
    errors = []
    for row in catalog.rows:
        fam = by_id.get(row.family)
        if fam is None:
            errors.append(CatalogError(row.path, row_line(row), f"{row.id}: family {row.family!r} is not an entry; "
                                                       f"add knowledge/entries/{row.category}/{row.family}.yaml"))
        elif not getattr(fam, "backstop", False):
            errors.append(CatalogError(row.path, row_line(row), f"{row.id}: family {row.family!r} is not marked backstop: true"))
        elif fam.category != row.category:
            errors.append(CatalogError(row.path, row_line(row), f"{row.id}: family {row.family!r} is {fam.category}, "
                                                       f"the row is {row.category}; pick a family of the same category"))
        if row.entry and row.entry not in by_id:
            errors.append(CatalogError(row.path, row_line(row), f"{row.id}: entry {row.entry!r} does not exist"))
    for entry in entries:
        if not getattr(entry, "backstop", False):
            continue
        for line in entry.examples.get("match", []):
            fams = {row.family for row, _ in catalog.match_line(line)}
            if entry.id not in fams:
                errors.append(CatalogError(entry.path, None, f"{entry.id}: example {line[:80]!r} is matched by no "
                                                             "catalog row of this family"))
    return errors


def check_benign(catalog: Catalog, benign_dir: Path) -> list[CatalogError]:
    """No row may match a line of the benign logs (healthy output)."""
    from collectors.trainlog import clean_line

    errors = []
    for path in sorted(benign_dir.glob("*.log")):
        for n, raw in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            text = clean_line(raw).text
            for row, _ in catalog.match_line(text):
                errors.append(CatalogError(row.path, row_line(row), f"{row.id}: matches a benign line "
                                                           f"({path.name}:{n}: {text[:80]!r}); make it more specific"))
    return errors
