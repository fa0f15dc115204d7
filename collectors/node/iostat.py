"""`iostat -dxm 1 2`: per block device utilisation and latency from the last report.

The first report of iostat is the average since boot; the second is the one second just
sampled, so the last device table wins.  Columns are found by name, which covers sysstat <= 11
(``Device:``, ``await``, ``svctm``) and sysstat >= 12 (``Device``, ``r_await``/``w_await``,
``aqu-sz``, discard and flush columns), kB or MB units, and a comma decimal separator.
"""

from __future__ import annotations

import re

from collectors.findings import Finding
from collectors.node import _text
from collectors.registry import Collector

NAME = "iostat"

_NUM = re.compile(r"^-?\d+(?:[.,]\d+)?$")
_BANNER = re.compile(r"^Linux\s+\S+\s+\(")
_CPU_VALUES = re.compile(r"^\s*[\d.,]+(?:\s+[\d.,]+){3,}\s*$")
# device columns (sysstat 10-12 names) -> attrs; units in the name (kB or MB, whichever iostat printed)
_DEVICE_COLUMNS = {"r/s": "reads_per_s", "w/s": "writes_per_s", "rkb/s": "read_kb_per_s", "wkb/s": "write_kb_per_s",
                   "rmb/s": "read_mb_per_s", "wmb/s": "write_mb_per_s", "r_await": "r_await_ms",
                   "w_await": "w_await_ms", "aqu-sz": "queue_size", "avgqu-sz": "queue_size", "svctm": "svctm_ms",
                   "rareq-sz": "read_size_kb", "wareq-sz": "write_size_kb"}
_CPU_KEYS = ("user", "nice", "system", "iowait", "steal", "idle")
_TIME = re.compile(r"^\d{1,4}[/.-]\d{1,2}[/.-]\d{1,4}\s+\d{1,2}:\d{2}:\d{2}(?:\s*[AP]M)?\s*$")


def _float(token: str) -> float:
    return float(token.replace(",", "."))


def parse(text: str) -> tuple[list[Finding], list[str]]:
    unparsed: list[str] = []
    tables: list[tuple[list[str], list[tuple[int, str, list[str]]]]] = []
    columns: list[str] | None = None
    in_cpu = False
    cpu_columns: list[str] = []
    cpu: tuple[int, str, dict[str, float]] | None = None  # the last avg-cpu report
    for no, raw in _text.lines(text, ("iostat",)):
        line = raw.strip()
        if not line:
            in_cpu = False
            continue
        if _BANNER.match(line) or _TIME.match(line):
            continue
        if line.startswith("avg-cpu"):
            in_cpu = True
            columns = None
            cpu_columns = [c.lstrip("%").lower() for c in line.split(":", 1)[-1].split()]
            continue
        if in_cpu and _CPU_VALUES.match(line):
            values = line.split()
            if len(values) == len(cpu_columns):
                cpu = (no, line, {c: _float(v) for c, v in zip(cpu_columns, values)})
            continue
        in_cpu = False
        tokens = line.split()
        if tokens[0].rstrip(":") == "Device":
            columns = [t.lower() for t in tokens[1:]]
            tables.append((columns, []))
            continue
        if columns is not None and len(tokens) == len(columns) + 1 and all(_NUM.match(t) for t in tokens[1:]):
            tables[-1][1].append((no, line, tokens))
            continue
        unparsed.append(raw)

    findings: list[Finding] = []
    if cpu is not None:
        no, line, values = cpu
        findings.append(Finding(kind="host-cpu", attrs={f"{c}_pct": v for c, v in values.items() if c in _CPU_KEYS},
                                line=line, line_no=no, source=NAME))
    if not tables:
        return findings, unparsed
    columns, rows = tables[-1]
    for no, line, tokens in rows:
        values = {col: _float(tok) for col, tok in zip(columns, tokens[1:])}
        attrs: dict = {"device": tokens[0]}
        if "%util" in values:
            attrs["util_pct"] = values["%util"]
        for column, key in _DEVICE_COLUMNS.items():
            if column in values:
                attrs[key] = values[column]
        awaits = [values[c] for c in ("r_await", "w_await") if c in values]
        if awaits:
            attrs["await_ms"] = max(awaits)
        elif "await" in values:
            attrs["await_ms"] = values["await"]
        findings.append(Finding(kind="disk-io", attrs=attrs, line=line, line_no=no, source=NAME))
    return findings, unparsed


COLLECTOR = Collector(
    name=NAME,
    command="iostat -dxm 1 2",
    parse=parse,
    binaries=("iostat",),
    timeout=20.0,
    root=False,
    description="iostat extended device statistics (one-second sample): %util and read/write await per "
    "block device, for checkpoint writes stalling on a saturated or slow disk",
    tags=("storage",),
)
