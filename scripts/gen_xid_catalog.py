#!/usr/bin/env python3
"""Generate ``knowledge/xid_catalog.py`` from ``shared/reference/xid-catalog.csv``.

Usage (from the repository root)::

    python scripts/gen_xid_catalog.py              # write knowledge/xid_catalog.py
    python scripts/gen_xid_catalog.py --check      # exit 1 if the file is out of date
    python scripts/gen_xid_catalog.py --csv PATH   # read another copy of the CSV

The CSV (``code,name,indicates,action,source``) is the source of the English facts; the
Chinese texts come from ``knowledge/xid_zh.yaml`` (written by hand: one short name per code
and one action text per NVIDIA resolution bucket).  Every code in the CSV must have a Chinese
name and every bucket a Chinese action, otherwise the script stops with an error.

Each generated row is::

    code: {"name", "name_zh", "indicates", "action", "action_zh", "bucket", "hardware", "sources"}

``action`` is the CSV action text without the trailing ``[NVIDIA bucket: X]``; ``bucket`` is
X normalised to upper-case with underscores (the CSV writes ``see triggering Xid`` for
Xid 154; that becomes ``SEE_TRIGGERING_XID``).

How ``hardware`` is decided
---------------------------
``hardware`` answers "does this code by itself point at the GPU, its memory, its links or the
board, so that the node should be drained and the GPU checked/RMA'd rather than the job simply
restarted?".  The rule, applied in order:

0. NVIDIA's bucket says to ignore it or restart the application (``IGNORE``, ``RESTART_APP``)
   -> False, even when the code records a memory event: a contained ECC error (94), a pending
   remap (63), a high corrected-error rate (92) are handled by containment, page blacklisting and
   the next reset, so they never by themselves call for draining the node or an RMA (escalation
   on repeats is knowledge.escalation's job).
1. The bucket says the GPU or node must be reset, rebooted or physically checked, or it is one
   of NVIDIA's memory/NVLink workflows: ``RESET_GPU``, ``RESTART_BM``, ``CHECK_MECHANICALS``,
   ``WORKFLOW_XID_48``, ``WORKFLOW_NVLINK_ERR``, ``WORKFLOW_NVLINK5_ERR`` -> True, unless the
   first-named suspect (rule 3) is ``user application`` or ``driver`` (109: a hung kernel).
2. The bucket is a software/configuration procedure: ``UPDATE_SWFW``, ``RESTART_VM``,
   ``CHECK_UVM``, ``WORKFLOW_XID_45`` (a side effect of another Xid) -> False.
3. Otherwise look at the *first-named suspect* in ``indicates``: parenthesised remarks
   removed, then the text before the first ``;``, cut at the first `` or ``, `` / `` or ``, ``.
   It is hardware when it names a hardware class -- memory/ECC/DRAM/HBM, NVLink, PCIe or bus,
   thermal/temperature, power, firmware/micro-controller/InfoROM/flash, cache, interconnect,
   or the word hardware -- and does not start with ``user application`` or ``driver``.

Hedged, later mentions ("rarely hardware", "hardware if persistent", "can also be thermal")
therefore do not make a code hardware: Xid 13, 31, 43 and the copy-engine exceptions stay
application-level; the knowledge entries tell the reader to escalate only when the fault
follows one GPU.  Display/video-engine codes are not hardware for this purpose (they do not
matter on compute nodes).
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CSV = REPO.parent / "shared" / "reference" / "xid-catalog.csv"
ZH_YAML = REPO / "knowledge" / "xid_zh.yaml"
OUTPUT = REPO / "knowledge" / "xid_catalog.py"
HEADER = "# Generated from shared/reference/xid-catalog.csv by scripts/gen_xid_catalog.py — do not edit."

HARDWARE_BUCKETS = {
    "RESET_GPU", "RESTART_BM", "CHECK_MECHANICALS",
    "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR", "WORKFLOW_NVLINK5_ERR",
}
SOFTWARE_BUCKETS = {"UPDATE_SWFW", "RESTART_VM", "CHECK_UVM", "WORKFLOW_XID_45"}
# NVIDIA says keep running or restart the job: nobody needs to touch the GPU, whatever it records
NO_HANDS_BUCKETS = {"IGNORE", "RESTART_APP"}
HARDWARE_WORDS = re.compile(
    r"\b(memory|ecc|dram|hbm|nvlink|pcie|bus|thermal|temperature|power|firmware|"
    r"micro-controller|inforom|flash|cache|interconnect|hardware)\b",
    re.I,
)
NOT_HARDWARE_START = re.compile(r"^(user application|driver)\b", re.I)
BUCKET_RE = re.compile(r"\s*\[NVIDIA bucket:\s*([^\]]+)\]\s*$")


class CatalogError(Exception):
    pass


def normalise_bucket(raw: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", raw.strip()).strip("_").upper()


def first_suspect(indicates: str) -> str:
    primary = re.sub(r"\([^)]*\)", "", indicates).split(";", 1)[0]
    primary = re.split(r"\s+or\s+|\s+/\s+|,\s*", primary, maxsplit=1)[0]
    return primary.strip()


def is_hardware(indicates: str, bucket: str) -> bool:
    if bucket in NO_HANDS_BUCKETS:
        return False
    if bucket in HARDWARE_BUCKETS:
        return not NOT_HARDWARE_START.search(first_suspect(indicates))
    if bucket in SOFTWARE_BUCKETS:
        return False
    suspect = first_suspect(indicates)
    if NOT_HARDWARE_START.search(suspect):
        return False
    return bool(HARDWARE_WORDS.search(suspect))


def load_zh(path: Path) -> tuple[dict[int, str], dict[str, str]]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise CatalogError(f"{path}: cannot read: {exc}") from exc
    if not isinstance(data, dict) or "names" not in data or "buckets" not in data:
        raise CatalogError(f"{path}: expected top-level keys 'buckets' and 'names'")
    names = {int(k): str(v).strip() for k, v in (data["names"] or {}).items()}
    buckets = {str(k): str(v).strip() for k, v in (data["buckets"] or {}).items()}
    return names, buckets


def read_rows(csv_path: Path) -> list[dict]:
    try:
        with csv_path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            want = {"code", "name", "indicates", "action", "source"}
            if not reader.fieldnames or not want.issubset(reader.fieldnames):
                raise CatalogError(f"{csv_path}: expected columns {sorted(want)}, got {reader.fieldnames}")
            rows = list(reader)
    except OSError as exc:
        raise CatalogError(f"{csv_path}: cannot read: {exc}") from exc
    return rows


def build(csv_path: Path, zh_path: Path) -> dict[int, dict]:
    rows = read_rows(csv_path)
    names_zh, buckets_zh = load_zh(zh_path)
    catalog: dict[int, dict] = {}
    problems: list[str] = []
    for lineno, row in enumerate(rows, start=2):
        try:
            code = int(row["code"])
        except ValueError:
            problems.append(f"{csv_path}:{lineno}: code {row['code']!r} is not a number")
            continue
        if code in catalog:
            problems.append(f"{csv_path}:{lineno}: duplicate code {code}")
            continue
        m = BUCKET_RE.search(row["action"])
        if not m:
            problems.append(f"{csv_path}:{lineno}: Xid {code}: action has no [NVIDIA bucket: ...]")
            continue
        bucket = normalise_bucket(m.group(1))
        if code not in names_zh or not names_zh[code]:
            problems.append(f"{zh_path}: Xid {code} ({row['name']}) has no Chinese name under 'names'")
        if bucket not in buckets_zh or not buckets_zh[bucket]:
            problems.append(f"{zh_path}: bucket {bucket} (Xid {code}) has no Chinese text under 'buckets'")
        catalog[code] = {
            "name": row["name"].strip(),
            "name_zh": names_zh.get(code, ""),
            "indicates": row["indicates"].strip(),
            "action": row["action"][: m.start()].strip(),
            "action_zh": buckets_zh.get(bucket, ""),
            "bucket": bucket,
            "hardware": is_hardware(row["indicates"], bucket),
            "sources": [s.strip() for s in row["source"].split(" ; ") if s.strip()],
        }
    extra = sorted(set(names_zh) - set(catalog))
    if extra:
        problems.append(f"{zh_path}: Chinese names for codes not in the CSV: {extra}")
    if problems:
        raise CatalogError("\n".join(problems))
    return dict(sorted(catalog.items()))


def render(catalog: dict[int, dict]) -> str:
    out = [
        HEADER,
        '"""NVIDIA Xid catalog: code -> facts and what to do (English and Chinese).',
        "",
        "Regenerate with ``python scripts/gen_xid_catalog.py``; see that script for how",
        "``hardware`` is decided.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "XID: dict[int, dict] = {",
    ]
    keys = ["name", "name_zh", "indicates", "action", "action_zh", "bucket", "hardware", "sources"]
    for code, row in catalog.items():
        out.append(f"    {code}: {{")
        for key in keys:
            value = row[key]
            if key == "sources":
                out.append("        'sources': [")
                out.extend(f"            {s!r}," for s in value)
                out.append("        ],")
            else:
                out.append(f"        {key!r}: {value!r},")
        out.append("    },")
    out.append("}")
    out.append("")
    out.append("HARDWARE_XIDS: frozenset[int] = frozenset(c for c, r in XID.items() if r['hardware'])")
    out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV, help=f"catalog CSV (default {DEFAULT_CSV})")
    ap.add_argument("--zh", type=Path, default=ZH_YAML, help="Chinese texts (default knowledge/xid_zh.yaml)")
    ap.add_argument("--out", type=Path, default=OUTPUT, help="output module (default knowledge/xid_catalog.py)")
    ap.add_argument("--check", action="store_true", help="exit 1 if the output is out of date; write nothing")
    args = ap.parse_args(argv)
    try:
        text = render(build(args.csv, args.zh))
    except CatalogError as exc:
        print(f"gen_xid_catalog: error:\n{exc}", file=sys.stderr)
        return 2
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else None
        if current != text:
            print(f"{args.out} is out of date with {args.csv}; run scripts/gen_xid_catalog.py", file=sys.stderr)
            return 1
        print(f"{args.out} is up to date")
        return 0
    args.out.write_text(text, encoding="utf-8")
    n_hw = text.count("'hardware': True,")
    print(f"wrote {args.out} ({text.count(chr(10))} lines, hardware codes: {n_hw})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
