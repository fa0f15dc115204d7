"""Load and validate the curated knowledge entries (one YAML file per failure mode).

Every problem is reported as ``file:line: reason``.  A bad file is never skipped silently:
:func:`load_dir` returns the good entries *and* every error, and callers decide to stop.

Run ``python -m knowledge.loader [DIR]`` to validate a folder of entries.
"""

from __future__ import annotations

import hashlib
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import yaml

from collectors.findings import KINDS

Finder = Callable[[str], Iterable[Any]]

CATEGORIES = (
    "gpu-memory",
    "communication",
    "shared-memory",
    "gpu-hardware",
    "checkpoint-storage",
    "host-memory",
    "scheduler",
    "software",
)
TIERS = ("self", "remote", "onsite", "vendor")
DRIVERS = ("gpu-count", "network", "reproducibility", "parts")
LANGS = ("en", "zh")

REQUIRED = ("id", "category", "title", "cause", "next_commands", "fix", "support", "references", "examples")
OPTIONAL = ("signatures", "phrases", "findings", "symptom", "backstop", "check_next", "requires")
ID_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
URL_RE = re.compile(r"^https?://\S+$")
# Sizes an entry may have (curated entries stay far below: titles under 140 characters, files
# under 10 KB). Every entry is matched against every error line of every diagnosis, so a team
# entry of 200 000 phrases or a 20 MB title would slow down everyone's answers.
LIMITS = {
    "file_bytes": 256 * 1024,  # an entry file
    "depth": 20,               # YAML nesting
    "title": 300,              # characters of a title, in each language
    "text": 4000,              # characters of any other text (cause, why, a fix step, a signature, ...)
    "items": 50,               # items in any list (signatures, phrases, fix steps, examples, ...)
}
# YAML's folded scalars join lines with a space; between two CJK characters (or after CJK
# punctuation) that space is an artefact of the line break, not part of the text.
_CJK = "\u3000-\u303f\u4e00-\u9fff\uff00-\uffef"
_ZH_FOLD = re.compile(rf"(?<=[{_CJK}]) (?=[{_CJK}])|(?<=[、，。：；！？）」』]) ")


def tidy_zh(text: str) -> str:
    return _ZH_FOLD.sub("", text)


def _tidy(data: Any) -> Any:
    """Apply :func:`tidy_zh` to every ``zh`` text in an entry."""
    if isinstance(data, dict):
        return {k: (tidy_zh(v) if k == "zh" and isinstance(v, str) else
                    [tidy_zh(x) for x in v] if k == "zh" and isinstance(v, list) else _tidy(v))
                for k, v in data.items()}
    if isinstance(data, list):
        return [_tidy(x) for x in data]
    return data


def entries_dir() -> Path:
    """The curated entries shipped as package data."""
    return Path(__file__).resolve().parent / "entries"


class EntryError(Exception):
    """A knowledge entry that cannot be used, located as ``file:line``."""

    def __init__(self, path: Path | str, line: int | None, reason: str):
        self.path = str(path)
        self.line = line
        self.reason = reason
        super().__init__(f"{self.path}:{line if line else 1}: {reason}")


@dataclass
class Entry:
    id: str
    category: str
    title: dict[str, str]
    cause: dict[str, str]
    next_commands: list[dict[str, Any]]
    fix: dict[str, list[str]]
    support: dict[str, Any]
    references: list[str]
    examples: dict[str, list[str]] = field(default_factory=dict)
    signatures: list[str] = field(default_factory=list)
    phrases: list[str] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    symptom: bool = False
    backstop: bool = False  # a family-level cause the message catalogs fall back on (knowledge/catalog/)
    # families (backstops) of other categories that an expert checks next when this entry is the
    # answer (bot.engine.alternatives): the readings its messages themselves admit
    check_next: list[str] = field(default_factory=list)
    # finding kinds one of which must be present (or a signature match) for this entry to be confident:
    # an entry about one kind of failure is not made by generic evidence alone
    requires: list[str] = field(default_factory=list)
    origin: str = "curated"  # curated | team
    path: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "category": self.category, "title": self.title, "symptom": self.symptom,
            "backstop": self.backstop, "check_next": self.check_next, "requires": self.requires, "signatures": self.signatures, "phrases": self.phrases, "findings": self.findings,
            "cause": self.cause, "next_commands": self.next_commands, "fix": self.fix,
            "support": self.support, "references": self.references, "examples": self.examples,
            "origin": self.origin, "path": self.path,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Entry":
        return cls(**data)


# --- locating lines --------------------------------------------------------------------------

class _Lines:
    """Maps a path of keys/indices in the document to the line where it starts."""

    def __init__(self, node: yaml.Node | None):
        self.node = node

    def line(self, *path: Any) -> int:
        node = self.node
        best = node.start_mark.line + 1 if node is not None else 1
        for key in path:
            if isinstance(node, yaml.MappingNode):
                nxt = None
                for k, v in node.value:
                    if getattr(k, "value", None) == key:
                        best = k.start_mark.line + 1
                        nxt = v
                        break
                if nxt is None:
                    return best
                node = nxt
            elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
                node = node.value[key]
                best = node.start_mark.line + 1
            else:
                return best
        return best


# --- parsing ---------------------------------------------------------------------------------

class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses nesting deeper than ``LIMITS["depth"]`` (PyYAML composes recursively:
    50 000 opening brackets would otherwise end in a RecursionError)."""

    _depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > LIMITS["depth"]:
                raise yaml.composer.ComposerError(
                    None, None, f"nested deeper than {LIMITS['depth']} levels", self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def parse_yaml(text: str) -> tuple[yaml.Node | None, Any]:
    """An entry's YAML as (node, data), parsed once, safely (no tags that run code), depth-bounded."""
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        return node, (loader.construct_document(node) if node is not None else None)
    finally:
        loader.dispose()


# --- validation ------------------------------------------------------------------------------

def _bilingual(data: Any, what: str, err, path: tuple) -> None:
    if not isinstance(data, dict):
        err(path, f"{what} must be a mapping with 'en' and 'zh'")
        return
    for lang in LANGS:
        val = data.get(lang)
        if not isinstance(val, str) or not val.strip():
            err(path + (lang,) if lang in data else path, f"{what} needs a non-empty '{lang}' text")
    extra = set(data) - set(LANGS)
    if extra:
        err(path, f"{what} has unknown language keys {sorted(extra)}; use 'en' and 'zh'")


def _string_list(data: Any, what: str, err, path: tuple) -> list[str]:
    if data is None:
        return []
    if not isinstance(data, list) or not all(isinstance(x, str) and x.strip() for x in data):
        err(path, f"{what} must be a list of non-empty strings")
        return []
    return data


def _check_rule(rule: Any, err, path: tuple) -> None:
    if not isinstance(rule, dict) or "kind" not in rule:
        err(path, "a findings rule is a mapping with 'kind', e.g. {kind: xid, code: 79}")
        return
    kind = rule["kind"]
    if kind not in KINDS:
        err(path + ("kind",), f"unknown finding kind {kind!r}; known kinds: {', '.join(sorted(KINDS))}")
        return
    attrs = KINDS[kind]
    for key, val in rule.items():
        if key in ("kind", "rules_out", "weight"):
            if key == "rules_out" and not isinstance(val, bool):
                err(path + (key,), "rules_out must be true or false")
            if key == "weight" and not (isinstance(val, (int, float)) and 0 < val <= 1):
                err(path + (key,), "weight must be a number in (0, 1]")
            continue
        name = key[4:] if key.startswith(("min_", "max_")) else key
        if name not in attrs:
            err(path + (key,), f"finding kind {kind!r} has no attribute {name!r}; it has: {', '.join(attrs)}")
        elif key.startswith(("min_", "max_")) and not isinstance(val, (int, float)):
            err(path + (key,), f"{key} must be a number")
        elif not all(isinstance(v, (str, int, float, bool)) for v in (val if isinstance(val, list) else [val])):
            # nested values have no meaning here, and aliased ones would expand when stored
            err(path + (key,), f"{key} must be text, a number, true/false or a list of them")


def _check_sizes(data: Any, err, path: tuple = (), seen: set[int] | None = None) -> None:
    """Every list, title and text within :data:`LIMITS`, each excess reported once where it is.
    A mapping or list that YAML aliases share is looked at once (a billion laughs stays small)."""
    seen = set() if seen is None else seen
    if isinstance(data, (dict, list)):
        if id(data) in seen:
            return
        seen.add(id(data))
    if isinstance(data, dict):
        for key, val in data.items():
            _check_sizes(val, err, path + (key,), seen)
    elif isinstance(data, list):
        if len(data) > LIMITS["items"]:
            err(path, f"{'.'.join(map(str, path)) or 'a list'} has {len(data)} items; an entry allows at most "
                      f"{LIMITS['items']} (split it into several entries)")
            return
        for i, val in enumerate(data):
            _check_sizes(val, err, path + (i,), seen)
    elif isinstance(data, str):
        cap = LIMITS["title"] if path[:1] == ("title",) else LIMITS["text"]
        if len(data) > cap:
            where = ".".join(map(str, path))
            err(path, f"{where} is {len(data)} characters long; at most {cap} are allowed")


def validate(data: Any, path: Path, lines: _Lines) -> tuple[Entry | None, list[EntryError]]:
    errors: list[EntryError] = []

    def err(where: tuple, reason: str) -> None:
        errors.append(EntryError(path, lines.line(*where), reason))

    if not isinstance(data, dict):
        err((), "an entry is a YAML mapping (id: ..., category: ..., ...)")
        return None, errors
    _check_sizes(data, err)
    if errors:  # nothing more is looked at in an oversized entry (no 200 000 regexes compiled)
        return None, errors
    for key in REQUIRED:
        if key not in data:
            err((), f"missing required key '{key}'")
    for key in data:
        if key not in REQUIRED and key not in OPTIONAL:
            err((key,), f"unknown key {key!r}; allowed: {', '.join(REQUIRED + OPTIONAL)}")
    if not any(data.get(k) for k in ("signatures", "phrases", "findings")) and data.get("backstop") is not True:
        err((), "an entry needs at least one of signatures, phrases or findings to be matched "
                "(or backstop: true, when only message-catalog rows point at it)")

    eid = data.get("id")
    if not isinstance(eid, str) or not ID_RE.match(eid):
        err(("id",), f"id {eid!r} must be lowercase-hyphenated (a-z, 0-9, -)")
    elif eid != path.stem:
        err(("id",), f"id {eid!r} must equal the file name ({path.stem!r}); rename one of them")
    if data.get("category") not in CATEGORIES:
        err(("category",), f"category {data.get('category')!r} is not one of: {', '.join(CATEGORIES)}")
    for flag in ("symptom", "backstop"):
        if flag in data and not isinstance(data[flag], bool):
            err((flag,), f"{flag} must be true or false")
    for key in ("title", "cause"):
        if key in data:
            _bilingual(data[key], key, err, (key,))

    sigs = _string_list(data.get("signatures"), "signatures", err, ("signatures",))
    for i, sig in enumerate(sigs):
        try:
            re.compile(sig, re.IGNORECASE)
        except re.error as exc:
            err(("signatures", i), f"signature {sig!r} does not compile: {exc}")
    _string_list(data.get("phrases"), "phrases", err, ("phrases",))
    nxt = _string_list(data.get("check_next"), "check_next", err, ("check_next",))
    for i, other in enumerate(nxt):
        if not ID_RE.match(other):
            err(("check_next", i), f"check_next names entry ids; {other!r} is not one")
    for i, kind in enumerate(_string_list(data.get("requires"), "requires", err, ("requires",))):
        if kind not in KINDS and kind != "signature":
            err(("requires", i), f"requires names finding kinds (or 'signature'); {kind!r} is not one "
                                 "(collectors/findings.py KINDS)")
    rules = data.get("findings") or []
    if not isinstance(rules, list):
        err(("findings",), "findings must be a list of rules")
        rules = []
    for i, rule in enumerate(rules):
        _check_rule(rule, err, ("findings", i))

    cmds = data.get("next_commands")
    if cmds is not None:
        if not isinstance(cmds, list) or not cmds:
            err(("next_commands",), "next_commands must be a non-empty list of {command, why}")
        else:
            for i, cmd in enumerate(cmds):
                if not isinstance(cmd, dict) or not isinstance(cmd.get("command"), str):
                    err(("next_commands", i), "each next command needs 'command' (text) and 'why' {en, zh}")
                    continue
                extra = set(cmd) - {"command", "why", "caution", "root"}
                if extra:
                    err(("next_commands", i), f"unknown keys {sorted(extra)} in a next command; "
                                              "allowed: command, why, caution, root")
                _bilingual(cmd.get("why"), "why", err, ("next_commands", i, "why"))
                if "caution" in cmd:
                    _bilingual(cmd["caution"], "caution", err, ("next_commands", i, "caution"))
                if "root" in cmd and not isinstance(cmd["root"], bool):
                    err(("next_commands", i, "root"), "root must be true or false")
    fix = data.get("fix")
    if fix is not None:
        if not isinstance(fix, dict):
            err(("fix",), "fix must be {en: [...], zh: [...]}")
        else:
            for lang in LANGS:
                _string_list(fix.get(lang), f"fix.{lang}", err, ("fix", lang))
                if not fix.get(lang):
                    err(("fix",), f"fix needs a non-empty '{lang}' list")
    sup = data.get("support")
    if sup is not None:
        if not isinstance(sup, dict):
            err(("support",), "support must be {tier, why, drivers}")
        else:
            if sup.get("tier") not in TIERS:
                err(("support", "tier"), f"support tier {sup.get('tier')!r} is not one of: {', '.join(TIERS)}")
            _bilingual(sup.get("why"), "support.why", err, ("support", "why"))
            drivers = sup.get("drivers", [])
            if not isinstance(drivers, list) or any(d not in DRIVERS for d in drivers):
                err(("support", "drivers"), f"support drivers must be a list drawn from: {', '.join(DRIVERS)}")
            extra = set(sup) - {"tier", "why", "drivers"}
            if extra:
                err(("support",), f"unknown keys {sorted(extra)} in support")
    refs = _string_list(data.get("references"), "references", err, ("references",))
    if "references" in data and not refs:
        err(("references",), "at least one reference (a public URL for the facts) is required")
    for i, ref in enumerate(refs):
        if not URL_RE.match(ref):
            err(("references", i), f"reference {ref!r} is not an http(s) URL")
    ex = data.get("examples")
    if ex is not None:
        if not isinstance(ex, dict) or set(ex) - {"match", "near_miss"}:
            err(("examples",), "examples must be {match: [...], near_miss: [...]}")
        else:
            if not _string_list(ex.get("match"), "examples.match", err, ("examples", "match")):
                err(("examples",), "examples.match needs at least one real line the entry matches")
            _string_list(ex.get("near_miss"), "examples.near_miss", err, ("examples", "near_miss"))

    if errors:
        return None, errors
    data = _tidy(data)
    cmds, fix, sup = data["next_commands"], data["fix"], data["support"]
    entry = Entry(
        id=eid, category=data["category"], title=data["title"], cause=data["cause"],
        next_commands=cmds, fix=fix, support={"drivers": [], **sup}, references=refs,
        examples={"match": ex.get("match") or [], "near_miss": ex.get("near_miss") or []},
        signatures=sigs, phrases=data.get("phrases") or [], findings=rules,
        symptom=bool(data.get("symptom", False)), backstop=bool(data.get("backstop", False)),
        check_next=list(data.get("check_next") or []), requires=list(data.get("requires") or []), path=str(path),
    )
    return entry, errors


def check_examples(entry: Entry, lines: _Lines | None = None, finder: Finder | None = None) -> list[EntryError]:
    """Each example line must match the entry; no near miss may.

    An example matches by a signature or a phrase, or, when ``finder`` is given (a function from
    a line to the findings a parser draws from it), by one of the entry's finding rules. Without
    a finder, an example that only a finding rule could match is left unchecked here; the
    ``kb validate`` command and the tests pass the training-log parser as the finder. A near
    miss is checked against the text layer only (signatures and phrases): finding rules are
    broad supporting evidence by design, and the near miss guards the wording.
    """
    from knowledge.match import entry_matches_line, rule_matches  # local: matcher imports this module

    def matches(line: str) -> bool | None:
        if entry_matches_line(entry, line):
            return True
        rules = [r for r in entry.findings if not r.get("rules_out")]
        if not rules:
            return False
        if finder is None:
            return None
        return any(rule_matches(rule, f) for rule in rules for f in finder(line))

    errors = []
    where = lines.line("examples") if lines else None
    if entry.backstop:
        # a family fed by catalog rows: `python -m knowledge.catalog check` checks its examples
        return errors
    for line in entry.examples.get("match", []):
        if matches(line) is False:
            errors.append(EntryError(entry.path, where, f"example {line[:80]!r} is not matched by any "
                                     "signature, phrase or finding rule of this entry; fix the entry or the example"))
    for line in entry.examples.get("near_miss", []):
        if entry_matches_line(entry, line):
            errors.append(EntryError(entry.path, where, f"near miss {line[:80]!r} is matched by this entry; "
                                     "make the signature or rule more specific"))
    return errors


def load_file(path: Path, *, examples: bool = True, finder: Finder | None = None) -> Entry:
    """Load one entry file or raise the first :class:`EntryError`."""
    entry, errors = _load(path, examples=examples, finder=finder)
    if errors:
        raise errors[0]
    assert entry is not None
    return entry


def _load(path: Path, *, examples: bool, finder: Finder | None = None) -> tuple[Entry | None, list[EntryError]]:
    try:
        with open(path, "rb") as fh:
            raw = fh.read(LIMITS["file_bytes"] + 1)
    except OSError as exc:
        return None, [EntryError(path, None, f"cannot read: {exc.strerror}")]
    if len(raw) > LIMITS["file_bytes"]:
        return None, [EntryError(path, None, f"the file is over {LIMITS['file_bytes'] // 1024} KB; an entry "
                                             "is a few KB (split it into several entries)")]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        return None, [EntryError(path, line, "not valid UTF-8; save the file as UTF-8")]
    try:
        node, data = parse_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        return None, [EntryError(path, mark.line + 1 if mark else None, f"YAML syntax error: {problem}")]
    lines = _Lines(node)
    entry, errors = validate(data, path, lines)
    if entry is not None and examples:
        errors = check_examples(entry, lines, finder)
        if errors:
            entry = None
    return entry, errors


def entry_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*.yaml") if p.is_file()) + sorted(
        p for p in directory.rglob("*.yml") if p.is_file())


def load_dir(directory: Path | None = None, *, examples: bool = True,
             finder: Finder | None = None) -> tuple[list[Entry], list[EntryError]]:
    """Load every entry under ``directory``; return the good entries and all errors."""
    directory = Path(directory) if directory else entries_dir()
    entries: list[Entry] = []
    errors: list[EntryError] = []
    if not directory.is_dir():
        return [], [EntryError(directory, None, "no such folder of knowledge entries")]
    seen: dict[str, str] = {}
    for path in entry_files(directory):
        entry, errs = _load(path, examples=examples, finder=finder)
        errors.extend(errs)
        if entry is None:
            continue
        if entry.id in seen:
            errors.append(EntryError(path, 1, f"duplicate id {entry.id!r}; also in {seen[entry.id]}"))
            continue
        seen[entry.id] = str(path)
        entries.append(entry)
    errors.extend(_check_next_targets(entries))
    return entries, errors


def _check_next_targets(entries: list[Entry]) -> list[EntryError]:
    """Each ``check_next`` names a backstop entry of another category."""
    by_id = {e.id: e for e in entries}
    errors = []
    for e in entries:
        for other in e.check_next:
            target = by_id.get(other)
            if target is None or not target.backstop:
                errors.append(EntryError(Path(e.path), None, f"check_next: {other!r} is not a backstop entry"))
            elif target.category == e.category:
                errors.append(EntryError(Path(e.path), None, f"check_next: {other!r} is in the same category "
                                         f"({e.category}); name families of other categories"))
    return errors


def fingerprint(directory: Path | None = None) -> str:
    """A hash of every entry file's name and content: the store rebuilds when it changes."""
    directory = Path(directory) if directory else entries_dir()
    digest = hashlib.sha256()
    for path in entry_files(directory):
        digest.update(str(path.relative_to(directory)).encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    directory = Path(args[0]) if args else entries_dir()
    entries, errors = load_dir(directory)
    for error in errors:
        print(error, file=sys.stderr)
    print(f"{len(entries)} entries valid, {len(errors)} problems", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
