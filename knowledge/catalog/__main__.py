"""``python -m knowledge.catalog check [DIR]``: validate the message catalogs.

Checks each row (id, category, family, specificity, finding, example), that families are
backstop entries of the row's category and entries exist, and that no row matches a benign line
(``tests/fixtures/benign/`` and ``unrelated/``, when the repository's tests are present). ``stats`` prints the
number of rows per file and per category.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from knowledge.catalog import catalog_dir, check_against_entries, check_benign, load

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in ("check", "stats"):
        print("usage: python -m knowledge.catalog check|stats [DIR]", file=sys.stderr)
        return 2
    directory = Path(args[1]) if len(args) > 1 else catalog_dir()
    catalog = load(directory)
    if args[0] == "stats":
        by_file = Counter(r.source for r in catalog.rows)
        by_cat = Counter(r.category for r in catalog.rows)
        for name, n in sorted(by_file.items()):
            print(f"{name:20} {n:5}")
        print(f"{'ALL':20} {len(catalog):5}")
        for cat, n in sorted(by_cat.items()):
            print(f"  {cat:20} {n:5}")
        return 0
    from knowledge.loader import load_dir

    entries, _ = load_dir(examples=False)
    errors = list(catalog.errors) + check_against_entries(catalog, entries)
    for name in ("benign", "unrelated"):
        benign = ROOT / "tests" / "fixtures" / name
        if benign.is_dir():
            errors += check_benign(catalog, benign)
    for e in errors:
        print(e, file=sys.stderr)
    print(f"{len(catalog)} catalog rows valid, {len(errors)} problems", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
