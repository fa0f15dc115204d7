"""Team entries: validated with the curated rules, stored with ``origin = 'team'``, exported as YAML.

A team entry is a knowledge entry the team wrote (``gpu-triage kb add``, a Slack "Add to runbook"
draft, ``kb import``). It is validated by :func:`knowledge.loader.validate` and
:func:`knowledge.loader.check_examples` exactly like a curated file, kept in the ``entries`` table
beside the curated rows (a rebuild replaces only those), and matched from then on.
``kb export`` writes it back in the curated format, ``<category>/<id>.yaml``, to be reviewed and
merged into ``knowledge/entries/`` by pull request; once merged, the curated row replaces it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable

import yaml

from knowledge.loader import Entry, EntryError, Finder, _Lines, check_examples, load_dir, parse_yaml, validate
from knowledge.loader import _load as load_entry_file

KEY_ORDER = ("id", "category", "title", "symptom", "check_next", "requires", "signatures", "phrases", "findings", "cause",
             "next_commands", "fix", "support", "references", "examples")


def validate_data(data: Any, *, name: str, text: str | None = None,
                  finder: Finder | None = None) -> tuple[Entry | None, list[EntryError]]:
    """Validate an entry given as data (from YAML, flags or a draft) with the loader's rules.

    ``name`` is the file name errors are reported against (``<id>.yaml``); ``text``, when the data
    came from YAML, locates errors on their line; ``finder`` (the training-log parser, passed by
    the caller: knowledge does not import it) lets an example be matched by a finding rule.
    """
    path = Path(name)
    node = parse_yaml(text)[0] if text else None
    lines = _Lines(node)
    entry, errors = validate(data, path, lines)
    if entry is not None:
        entry.origin, entry.path = "team", ""  # before the examples: they are matched as the team's
        errors = _re2_signatures(entry, path, lines) or check_examples(entry, lines, finder)
        if errors:
            entry = None
    return entry, errors


def _re2_signatures(entry: Entry, path: Path, lines: _Lines | None = None) -> list[EntryError]:
    """A team entry's signatures must compile in RE2 (linear time, no backreferences or look-around):
    they run on every diagnosis, the bot's included."""
    import re2

    opts = re2.Options()
    opts.case_sensitive = False
    opts.max_mem = 8 << 20
    errors = []
    for i, sig in enumerate(entry.signatures):
        try:
            re2.compile(sig, opts)
        except Exception as exc:  # noqa: BLE001 - re2 raises its own error type
            where = lines.line("signatures", i) if lines else None
            errors.append(EntryError(path, where, f"signature {sig[:80]!r} is not a linear-time (RE2) pattern "
                                     f"({str(exc)[:80]}); team signatures may not use backreferences or "
                                     "look-around"))
    return errors


def load_yaml(path: Path, finder: Finder | None = None) -> tuple[Entry | None, list[EntryError]]:
    """One entry file, with the loader's own parsing and rules, as a team entry."""
    entry, errors = load_entry_file(path, examples=False, finder=finder)
    if entry is not None:
        entry.origin, entry.path = "team", ""
        errors = _re2_signatures(entry, path) or check_examples(entry, None, finder)
        if errors:
            entry = None
    return entry, errors


def to_data(entry: Entry) -> dict[str, Any]:
    """The entry as the curated YAML holds it: the documented key order, defaults left out."""
    doc = entry.to_json()
    out: dict[str, Any] = {}
    for key in KEY_ORDER:
        value = doc.get(key)
        if key == "symptom" and not value:
            continue
        if key in ("signatures", "phrases", "findings", "check_next", "requires") and not value:
            continue
        if key == "examples":
            value = {k: v for k, v in value.items() if v}
        out[key] = value
    return out


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(entry: Entry) -> str:
    """The entry in the curated file format; a team entry says where to propose it, a curated one
    where it lives."""
    if entry.origin == "team":
        header = (f"# team entry exported by gpu-triage kb export; review it and merge it into\n"
                  f"# knowledge/entries/{entry.category}/ by pull request (docs/knowledge-entries.md)\n")
    else:
        header = f"# curated entry, kept in knowledge/entries/{entry.category}/{entry.id}.yaml\n"
    body = yaml.dump(to_data(entry), Dumper=_Dumper, allow_unicode=True, sort_keys=False, width=110)
    return header + body


def export(entries: Iterable[Entry], directory: Path) -> list[Path]:
    """One file per entry, ``DIR/<category>/<id>.yaml``."""
    written = []
    for entry in entries:
        dest = directory / entry.category / f"{entry.id}.yaml"
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(to_yaml(entry), encoding="utf-8")
        written.append(dest)
    return written


def load_folder(directory: Path, finder: Finder | None = None) -> tuple[list[Entry], list[EntryError]]:
    """Every ``*.yaml`` under ``directory``, validated by the loader; duplicate ids are errors."""
    entries, errors = load_dir(directory, finder=finder)
    for entry in entries:
        entry.origin, entry.path = "team", ""
    return entries, errors


# --- from flags and from Slack drafts -------------------------------------------------------------

def signature_regex(line: str) -> str:
    """A regex for a pasted log line: literal text, with numbers, hex addresses and hex ids as patterns."""
    line = line.strip()
    parts = re.split(r"(0x[0-9a-fA-F]+|\b[0-9a-fA-F]*\d[0-9a-fA-F]*\b|\d+)", line)
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(r"0x[0-9a-f]+" if part.lower().startswith("0x") else
                       r"\d+" if part.isdigit() else r"[0-9a-f]+")
        else:
            out.append(re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\1", part))
    return "".join(out)


def _both(en: str | None, zh: str | None) -> dict[str, str]:
    en, zh = (en or "").strip(), (zh or "").strip()
    return {"en": en or zh, "zh": zh or en}


def _command(text: str) -> dict[str, Any]:
    cmd, _, why = text.partition("#")
    why = why.strip() or "suggested by the team"
    return {"command": cmd.strip(), "why": {"en": why, "zh": why}}


def _slug(text: str) -> str:
    words = re.findall(r"[a-z0-9]+", text.lower())
    return "-".join(words[:8]) or "team-entry"


def data_from_fields(*, id: str | None, category: str | None, title: str | None, cause: str | None,
                     title_zh: str | None = None, cause_zh: str | None = None, signatures: list[str] | None = None,
                     lines: list[str] | None = None, phrases: list[str] | None = None,
                     near_miss: list[str] | None = None, commands: list[str] | None = None,
                     fix: list[str] | None = None, fix_zh: list[str] | None = None, tier: str | None = None,
                     references: list[str] | None = None, clean=None) -> dict[str, Any]:
    """An entry mapping from plain fields (CLI flags, the Slack modal). A text given in one language
    is used for both until someone translates it in review. ``lines`` are real log lines: each
    becomes a signature (numbers and addresses generalised) and an example; ``clean`` (the
    training-log parser's line cleaner, passed by the caller) strips rank/host/time prefixes first,
    as the matcher sees the line."""
    lines = [x for x in (lines or []) if x.strip()]
    sigs = list(signatures or []) + [signature_regex(clean(x) if clean else x) for x in lines]
    fixes = [f for f in (fix or []) if f.strip()]
    data: dict[str, Any] = {
        "id": id or _slug(title or ""),
        "category": category,
        "title": _both(title, title_zh),
        "cause": _both(cause, cause_zh),
        "next_commands": [_command(c) for c in (commands or []) if c.strip()] or [
            {"command": "gpu-triage diagnose <the job's log>",
             "why": {"en": "re-run the diagnosis on the next occurrence", "zh": "再次发生时重新运行诊断"}}],
        "fix": {"en": fixes or list(fix_zh or []), "zh": list(fix_zh or []) or fixes},
        "support": {"tier": tier or "self", "why": {"en": "from the team's runbook", "zh": "来自团队运行手册"}},
        "references": list(references or []),
        "examples": {"match": lines},
    }
    if near_miss:
        data["examples"]["near_miss"] = list(near_miss)
    if sigs:
        data["signatures"] = sigs
    if phrases:
        data["phrases"] = list(phrases)
    return data


def data_from_draft(draft: dict[str, Any], *, id: str | None = None, references: list[str] | None = None,
                    tier: str | None = None, clean=None) -> dict[str, Any]:
    """A Slack "Add to runbook" draft (``runbook_drafts.entry``: title, category, signature, cause,
    fix, next_commands as the modal returns them) as entry data."""
    e = draft.get("entry") or {}
    split = (lambda v: [x.strip() for x in str(v or "").splitlines() if x.strip()])
    return data_from_fields(id=id, category=e.get("category"), title=e.get("title"), cause=e.get("cause"),
                            lines=split(e.get("signature"))[:1], commands=split(e.get("next_commands")),
                            fix=[re.sub(r"^[-•*]\s*", "", x) for x in split(e.get("fix"))], tier=tier,
                            references=references, clean=clean)
