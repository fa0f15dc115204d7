"""Parse every real capture under a fixtures folder with its collector; count the files read
without a "not understood" row.

Usage: python scripts/real_parse_report.py [FOLDER] [-v]

FOLDER holds <collector>/<NN>.txt (default: ../shared/fixtures/real, relative to the repository);
folders without a node collector of that name (sacct, squeue, ...) are listed as "no parser".
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from collectors.node._text import not_understood  # noqa: E402
from collectors.registry import collectors  # noqa: E402


def main(argv: list[str]) -> int:
    verbose = "-v" in argv
    args = [a for a in argv if a != "-v"]
    folder = Path(args[0]) if args else ROOT.parent / "shared" / "fixtures" / "real"
    if not folder.is_dir():
        print(f"{folder} is not a folder of captures (<collector>/<NN>.txt); pass one", file=sys.stderr)
        return 2
    registry = collectors()
    clean = total = 0
    no_parser: list[str] = []
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        col = registry.get(sub.name)
        files = sorted(sub.glob("*.txt"))
        if col is None:
            no_parser += [f"{sub.name}/{f.name}" for f in files]
            continue
        for f in files:
            total += 1
            findings, unparsed = col.parse(f.read_text(encoding="utf-8", errors="replace"))
            unparsed = not_understood(unparsed)  # a tool's own "could not check" message is understood
            ok = not unparsed
            clean += ok
            if verbose or not ok:
                print(f"{'ok  ' if ok else 'NOTE'} {sub.name}/{f.name}: {len(findings)} findings, "
                      f"{len(unparsed)} not understood")
                for line in unparsed[:5]:
                    print(f"       {line[:110]}")
    print(f"{clean}/{total} files parsed with zero rows not understood")
    if no_parser:
        print(f"no node parser for {len(no_parser)} files: {', '.join(no_parser)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
