"""``gpu-triage kb add|edit|export|import`` and ``gpu-triage runbook export``: the team runbook's CLI.

Thin over ``knowledge.team`` (validation, YAML), ``knowledge.store`` (team rows) and
``knowledge.runbook`` (drafts, confirmed incidents); the Markdown runbook pages are rendered by
:mod:`bot.render.runbook`. Heavy imports stay inside the functions (``--help`` starts fast).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

TEAM_KB_COMMANDS = ("add", "edit", "export", "import")


def add_parsers(sub, kbsub) -> None:
    add = kbsub.add_parser(
        "add", help="add a team entry (from a YAML file, flags, or a Slack draft)",
        description="Add a team entry, validated with the same rules as the curated files "
                    "(docs/knowledge-entries.md), and matched from then on. A text given in one language "
                    "is used for both until it is translated in review.")
    add.add_argument("file", nargs="?", help="entry YAML in the curated format")
    add.add_argument("--draft", type=int, metavar="N", help="turn the Slack 'Add to runbook' draft N into an entry "
                                                           "(gpu-triage kb add --list-drafts shows them)")
    add.add_argument("--list-drafts", action="store_true", help="list the drafts saved from Slack")
    add.add_argument("--id", help="entry id, lowercase-hyphenated (default: from the title)")
    add.add_argument("--category", help="one of the eight categories")
    add.add_argument("--title", help="title (English or Chinese)")
    add.add_argument("--title-zh", help="Chinese title, when --title is English")
    add.add_argument("--cause", help="what went wrong and why")
    add.add_argument("--cause-zh", help="Chinese cause, when --cause is English")
    add.add_argument("--line", action="append", default=[],
                     help="a real log line of this failure: becomes a signature (numbers generalised) and an example")
    add.add_argument("--signature", action="append", default=[], help="a regex signature")
    add.add_argument("--phrase", action="append", default=[], help="a fuzzy-matched phrase")
    add.add_argument("--near-miss", action="append", default=[], help="a real line the entry must not match")
    add.add_argument("--command", action="append", default=[], help="a next command, reason after '#'")
    add.add_argument("--fix", action="append", default=[], help="a fix step")
    add.add_argument("--tier", choices=("self", "remote", "onsite", "vendor"), help="support tier (default self)")
    add.add_argument("--reference", action="append", default=[], help="public URL (or ticket URL) for the facts")
    edit = kbsub.add_parser("edit", help="edit a team entry in $EDITOR (or replace it with --file)")
    edit.add_argument("id")
    edit.add_argument("--file", help="the new entry YAML instead of opening $EDITOR")
    exp = kbsub.add_parser("export", help="write entries as YAML in the curated format, one file per entry",
                           description="Write entries to DIR/<category>/<id>.yaml in the curated format: team "
                                       "entries go to review and into knowledge/entries/ by pull request.")
    exp.add_argument("-o", "--output", required=True, help="folder to write")
    exp.add_argument("--team", action="store_true", help="only the team's entries")
    imp = kbsub.add_parser("import", help="add or update team entries from a folder of YAML files")
    imp.add_argument("dir")

    rb = sub.add_parser("runbook", help="publish the team runbook")
    rbsub = rb.add_subparsers(dest="runbook_command", metavar="RUNBOOK_COMMAND")
    rexp = rbsub.add_parser("export", help="write a Markdown runbook, one page per failure mode",
                            description="One Markdown page per failure mode (team entries and curated entries "
                                        "with incidents): what it looks like, the confirmed incidents, commands "
                                        "and fixes, in English and Chinese, plus an index (README.md).")
    rexp.add_argument("-o", "--output", required=True, help="folder to write")
    rexp.add_argument("--all", action="store_true", help="every entry, also those without incidents")


def _finder():
    from collectors.trainlog import parse_text

    return lambda line: parse_text(line, source="example").findings


def _clean(line: str) -> str:
    from collectors.trainlog import clean_line

    return clean_line(line).text or line


def _errors(errors, Failure) -> None:
    for error in errors:
        print(error, file=sys.stderr)
    raise Failure(f"{len(errors)} problem(s) in the entry; fix them and run the command again")


def run(args, Failure, known_errors) -> int:
    from knowledge.store import Store

    try:
        if args.command == "runbook":
            return runbook_export(args, Failure)
        store = Store(args.data_dir)
        cmd = args.kb_command
        if cmd == "add":
            return kb_add(args, store, Failure)
        if cmd == "edit":
            return kb_edit(args, store, Failure)
        if cmd == "export":
            from knowledge import team

            entries = store.team_entries() if args.team else store.entries()
            written = team.export(entries, Path(args.output))
            print(f"{len(written)} entr{'y' if len(written) == 1 else 'ies'} written to {args.output}")
            return 0
        if cmd == "import":
            return kb_import(args, store, Failure)
    except known_errors() as exc:
        raise Failure(str(exc)) from exc
    return 2


def kb_add(args, store, Failure) -> int:
    from knowledge import team
    from knowledge.runbook import Runbook

    runbook = Runbook(args.data_dir)
    if args.list_drafts:
        for d in runbook.drafts():
            state = f"-> {d['entry_id']}" if d.get("entry_id") else "pending"
            print(f"{d['id']:4}  {d['created'][:10]}  {state:20} {d['entry'].get('title', '')}")
        return 0
    if args.file:
        entry, errors = team.load_yaml(Path(args.file), _finder())
    else:
        if args.draft is not None:
            draft = runbook.draft(args.draft)
            if draft is None:
                raise Failure(f"no draft {args.draft}; gpu-triage kb add --list-drafts lists them")
            data = team.data_from_draft(draft, id=args.id, references=args.reference, tier=args.tier, clean=_clean)
            for line in args.line:
                data.setdefault("signatures", []).append(team.signature_regex(_clean(line)))
                data["examples"]["match"].append(line)
        else:
            if not (args.title and args.category and args.cause):
                raise Failure("give an entry file, --draft N, or at least --title, --category and --cause "
                              "(with --line or --signature)")
            data = team.data_from_fields(
                id=args.id, category=args.category, title=args.title, cause=args.cause, title_zh=args.title_zh,
                cause_zh=args.cause_zh, signatures=args.signature, lines=args.line, phrases=args.phrase,
                near_miss=args.near_miss, commands=args.command, fix=args.fix, tier=args.tier,
                references=args.reference, clean=_clean)
        entry, errors = team.validate_data(data, name=f"{data.get('id')}.yaml", finder=_finder())
        if errors and not data.get("references"):
            print("gpu-triage: hint: add --reference URL (a public source or your ticket)", file=sys.stderr)
    if errors:
        _errors(errors, Failure)
    new = store.put_team_entry(entry)
    if args.draft is not None and not args.file:
        runbook.mark_draft(args.draft, entry.id)
    print(f"{'added' if new else 'updated'} team entry {entry.id} [{entry.category}]: {entry.title['en']}")
    return 0


def kb_edit(args, store, Failure) -> int:
    import shlex
    import subprocess
    import tempfile

    from knowledge import team

    current = store.get(args.id)
    if current is None:
        raise Failure(f"no entry {args.id!r} (gpu-triage kb list shows them all)")
    if current.origin != "team":
        raise Failure(f"{args.id!r} is a curated entry: edit knowledge/entries/{current.category}/{args.id}.yaml "
                      "and open a pull request")
    if args.file:
        path = Path(args.file)
    else:
        folder = Path(tempfile.mkdtemp(prefix="gpu-triage-edit-"))
        path = folder / f"{args.id}.yaml"
        path.write_text(team.to_yaml(current), encoding="utf-8")
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
        if subprocess.call(shlex.split(editor) + [str(path)]) != 0:
            raise Failure(f"the editor ({editor}) failed; your text is kept in {path}")
    entry, errors = team.load_yaml(path, _finder())
    if not errors and entry.id != args.id:
        raise Failure(f"the file's id is {entry.id!r}, not {args.id!r}; use kb add for a new entry")
    if errors:
        for error in errors:
            print(error, file=sys.stderr)
        raise Failure(f"the entry was not changed; fix {path} and run gpu-triage kb edit {args.id} --file {path}")
    store.put_team_entry(entry)
    print(f"updated team entry {entry.id}")
    return 0


def kb_import(args, store, Failure) -> int:
    from knowledge import team

    folder = Path(args.dir)
    if not folder.is_dir():
        raise Failure(f"{folder} is not a folder of entry files")
    entries, errors = team.load_folder(folder, _finder())
    if errors:
        _errors(errors, Failure)
    added = updated = skipped = 0
    for entry in entries:
        existing = store.get(entry.id)
        if existing is not None and existing.origin != "team":
            skipped += 1
            print(f"skipped {entry.id}: a curated entry has this id (change it by pull request)", file=sys.stderr)
            continue
        if store.put_team_entry(entry):
            added += 1
        else:
            updated += 1
    print(f"{added} added, {updated} updated, {skipped} skipped")
    return 0


def runbook_export(args, Failure) -> int:
    if args.runbook_command != "export":
        print("usage: gpu-triage runbook export -o DIR [--all]", file=sys.stderr)
        return 2
    from bot.render.runbook import write_runbook
    from knowledge.runbook import Runbook
    from knowledge.store import Store

    pages = write_runbook(Store(args.data_dir), Runbook(args.data_dir), Path(args.output), everything=args.all)
    print(f"{len(pages)} page(s) written to {args.output} (index: README.md)")
    if not pages and not args.all:
        print("gpu-triage: no failure mode has a confirmed incident yet; confirm answers in Slack or with "
              "`gpu-triage feedback ID confirm`, or add --all for a page per failure mode", file=sys.stderr)
    return 0


def parse_help(parser: argparse.ArgumentParser) -> None:  # pragma: no cover - argparse exits
    parser.print_help()
