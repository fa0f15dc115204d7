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
_TIME = re.compile(r"^\d{1,4}[/.-]\d{1,2}[/.-]\d{1,4}\s+\d{1,2}:\d{2}:\d{2}(?:\s*[AP]M)?\s*$")


def _float(token: str) -> float:
    return float(token.replace(",", "."))


def parse(text: str) -> tuple[list[Finding], list[str]]:
    unparsed: list[str] = []
    tables: list[tuple[list[str], list[tuple[int, str, list[str]]]]] = []
    columns: list[str] | None = None
    in_cpu = False
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
            continue
        if in_cpu and _CPU_VALUES.match(line):
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
    if not tables:
        return findings, unparsed
    columns, rows = tables[-1]
    for no, line, tokens in rows:
        values = {col: _float(tok) for col, tok in zip(columns, tokens[1:])}
        attrs: dict = {"device": tokens[0]}
        if "%util" in values:
            attrs["util_pct"] = values["%util"]
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
