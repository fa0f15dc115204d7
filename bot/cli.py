"""``gpu-triage``: the command line face.

Exit codes: 0 a diagnosis was produced (even "no confident cause"), 1 a failure (bad input,
unusable data directory, invalid knowledge entry), 2 misuse (bad flags).  Heavy imports happen
inside the commands so that ``gpu-triage --help`` starts fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

EPILOG = """examples:
  gpu-triage diagnose job.log                 one log
  gpu-triage diagnose logs/                   a folder of per-rank logs
  kubectl logs trainer-0 | gpu-triage diagnose -
  gpu-triage diagnose job.log --format json   DESIGN.md's JSON
  gpu-triage diagnose job.log --lang zh       中文输出
  gpu-triage kb search watchdog timeout
"""


class Failure(Exception):
    """A failure the user can fix; printed without a traceback, exit 1."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpu-triage",
        description="Diagnose why a multi-GPU training job died: probable cause, evidence, next commands, fix "
                    "and which support tier is worth paying for.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", help="where the knowledge database lives (default: $GPU_TRIAGE_DATA_DIR or the "
                                      "user data directory)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    d = sub.add_parser("diagnose", help="diagnose training logs (files, folders, or - for stdin)",
                       description="Diagnose training logs: files, folders of per-rank logs (searched recursively), "
                                   ".gz files, or - for standard input.")
    d.add_argument("paths", nargs="+", metavar="LOG", help="log file, folder, or - for stdin")
    d.add_argument("--format", choices=("text", "json", "markdown"), default="text",
                   help="text (terminal, default), json (DESIGN.md's schema) or markdown (for a ticket)")
    d.add_argument("--lang", choices=("en", "zh"), default=os.environ.get("GPU_TRIAGE_LANG", "en"),
                   help="language of the reply (default: $GPU_TRIAGE_LANG or en)")
    d.add_argument("--explain", action="store_true", help="show why each cause ranked where it did")
    d.add_argument("--rate-card", default=os.environ.get("GPU_TRIAGE_RATE_CARD"),
                   help="YAML rate card for support estimates (see deploy/rate-card.example.yaml)")
    d.add_argument("--region", help="region in the rate card (e.g. beijing, shanghai, shenzhen)")
    d.add_argument("--gpus", type=int, help="GPU count of the job, when the log does not tell")

    kb = sub.add_parser("kb", help="inspect and validate the knowledge base")
    kbsub = kb.add_subparsers(dest="kb_command", metavar="KB_COMMAND")
    ls = kbsub.add_parser("list", help="list entries")
    ls.add_argument("--category", help="only this category")
    ls.add_argument("--format", choices=("text", "json"), default="text")
    show = kbsub.add_parser("show", help="show one entry")
    show.add_argument("id")
    show.add_argument("--lang", choices=("en", "zh"), default=os.environ.get("GPU_TRIAGE_LANG", "en"))
    show.add_argument("--format", choices=("text", "json", "yaml"), default="text")
    search = kbsub.add_parser("search", help="full-text search (English or Chinese)")
    search.add_argument("words", nargs="+")
    search.add_argument("--limit", type=int, default=10)
    val = kbsub.add_parser("validate", help="validate entry files (default: the shipped entries)")
    val.add_argument("dir", nargs="?", help="folder of entries")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "kb" and args.kb_command is None:
        parser.parse_args(["kb", "--help"])
    try:
        if args.command == "diagnose":
            return cmd_diagnose(args)
        return cmd_kb(args)
    except Failure as exc:
        print(f"gpu-triage: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("gpu-triage: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0


def _known_errors():
    from collectors.trainlog import InputError
    from knowledge.loader import EntryError
    from knowledge.store import KnowledgeInvalid, StoreError
    from knowledge.support import RateCardError

    return (InputError, KnowledgeInvalid, StoreError, RateCardError, EntryError)


def _engine(args, **kw):
    from bot.engine import Engine

    try:
        return Engine(data_dir=args.data_dir, **kw)
    except _known_errors() as exc:
        raise Failure(str(exc)) from exc


def cmd_diagnose(args) -> int:
    if args.gpus is not None and args.gpus <= 0:
        print("gpu-triage: --gpus must be a positive number", file=sys.stderr)
        return 2
    if args.paths.count("-") > 1:
        print("gpu-triage: '-' (standard input) can be given once", file=sys.stderr)
        return 2
    engine = _engine(args, rate_card=args.rate_card, region=args.region, gpus=args.gpus)
    try:
        diagnosis = engine.diagnose_paths(args.paths, stdin=sys.stdin.buffer if "-" in args.paths else None)
        from bot.render import as_dict

        doc = as_dict(diagnosis, lang=args.lang, explain=args.explain)
    except _known_errors() as exc:
        raise Failure(str(exc)) from exc
    if args.format == "json":
        import json

        sys.stdout.write(json.dumps(doc, ensure_ascii=False, indent=2) + "\n")
    elif args.format == "markdown":
        from bot.render.markdown import render

        sys.stdout.write(render(doc))
    else:
        from bot.render.terminal import render

        render(doc)
    for warning in diagnosis.warnings if args.format != "text" else ():
        print(f"gpu-triage: warning: {warning}", file=sys.stderr)
    return 0


def cmd_kb(args) -> int:
    if args.kb_command == "validate":
        from pathlib import Path

        from knowledge.loader import entries_dir, load_dir

        directory = Path(args.dir) if args.dir else entries_dir()
        if not directory.is_dir():
            raise Failure(f"{directory} is not a folder of knowledge entries")
        from collectors.trainlog import parse_text

        entries, errors = load_dir(directory, finder=lambda line: parse_text(line, source="example").findings)
        for error in errors:
            print(error, file=sys.stderr)
        cats = sorted({e.category for e in entries})
        print(f"{len(entries)} entries valid in {len(cats)} categories; {len(errors)} problems")
        return 1 if errors else 0

    from knowledge.store import Store

    try:
        store = Store(args.data_dir)
        if args.kb_command == "list":
            entries = [e for e in store.entries() if not args.category or e.category == args.category]
            if args.category and not entries:
                from knowledge.loader import CATEGORIES

                raise Failure(f"no entries in category {args.category!r}; categories: {', '.join(CATEGORIES)}")
            if args.format == "json":
                import json

                print(json.dumps([{"id": e.id, "category": e.category, "title": e.title} for e in entries],
                                 ensure_ascii=False, indent=2))
            else:
                for e in entries:
                    print(f"{e.category:20} {e.id:45} {e.title['en']}")
                print(f"{len(entries)} entries")
            return 0
        if args.kb_command == "show":
            entry = store.get(args.id)
            if entry is None:
                hits = store.search(args.id.replace("-", " "), limit=5)
                hint = f"; did you mean: {', '.join(e.id for e, _ in hits)}" if hits else ""
                raise Failure(f"no entry {args.id!r} (gpu-triage kb list shows them all){hint}")
            return _show(entry, args)
        if args.kb_command == "search":
            hits = store.search(" ".join(args.words), limit=args.limit)
            for entry, _ in hits:
                print(f"{entry.category:20} {entry.id:45} {entry.title['en']} / {entry.title['zh']}")
            if not hits:
                print("no matching entries")
            return 0
    except _known_errors() as exc:
        raise Failure(str(exc)) from exc
    return 2


def _show(entry, args) -> int:
    import json

    if args.format == "json":
        print(json.dumps(entry.to_json(), ensure_ascii=False, indent=2))
        return 0
    if args.format == "yaml":
        import yaml

        data = {k: v for k, v in entry.to_json().items() if k not in ("origin", "path")}
        print(yaml.safe_dump(data, allow_unicode=True, sort_keys=False), end="")
        return 0
    from bot.messages import pick

    lang = args.lang
    print(f"{entry.id}  [{entry.category}]  {pick(entry.title, lang)}\n")
    print(pick(entry.cause, lang) + "\n")
    for n, cmd in enumerate(entry.next_commands, 1):
        print(f"  {n}. {cmd['command']}\n     {pick(cmd['why'], lang)}")
    print()
    for f in pick(entry.fix, lang):
        print(f"  - {f}")
    print(f"\nsupport: {entry.support['tier']} — {pick(entry.support['why'], lang)}")
    print("references: " + " ".join(entry.references))
    return 0


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
