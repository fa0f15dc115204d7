"""Undo a terminal's hard wrap in a pasted log.

A log copied out of a terminal (tmux or screen copy mode, a web console, a narrow SSH window) often
arrives cut into rows of the terminal's width: "NCCL WARN NET/IB : Got completion from peer ...
with error 12" becomes two lines, and neither matches the message any more. A terminal cuts at the
exact column, mid-word, so such a paste has a tell no natural log has: its longest length is shared
by many lines and no line is longer.

:func:`unwrap` finds that width and glues each full-width row to the row after it. The glued line
takes the first row's place and the rows it swallowed become empty, so every line keeps its line
number (evidence still points at the right line of the file). Tables whose rows all have the same
width (nvidia-smi, kubectl, DCGM) are left alone: a row that ends or a row that starts with a box
or border character is never glued, nor is a row followed by what starts a log line of its own.

:func:`unquote_lines` undoes the other damage a paste picks up on the way: a message copied out of a
URL (an issue title, a search link, a chat preview) arrives percent-encoded, "undefined%20symbol:%20..."
with no space left in it. A run of such text (two or more encoded spaces, commas or colons, not a
URL) is decoded in place.

:func:`fill_result_rows` repairs a table layout: ``dcgmi diag`` prints one row per result of a test,
and only the first of them names the test ("| GPU Memory | Pass - GPU: 1 |" then "|  | Fail - GPU: 0 |"),
so the failing row alone does not say which test failed. Each such row gets its test's name back.
"""

from __future__ import annotations

import re
from collections import Counter
from urllib.parse import unquote

MIN_WIDTH = 60    # narrower "terminals" are more likely a fixed-width table or a banner
MIN_FULL = 3      # full-width rows needed before the input counts as hard-wrapped
MIN_SHARE = 0.05  # ... and their share of the non-empty lines

_BORDER = "|+│┃║─━═┼╋╬┤├┐┌┘└╗╔╝╚"
# what begins a line of its own: a timestamp, a rank/host/launcher prefix, a traceback line, a
# log level, a shell prompt (a row that starts so was not cut from the row above)
_LINE_START = re.compile(
    r"(?:\d{4}-\d\d-\d\d[ T]\d|\d\d:\d\d:\d\d|[A-Z][a-z]{2} [ \d]\d \d\d:|\[\s*\d+\.\d+\]|\[rank\d+\]|"
    r"\[\d+,\d+\]<std|Traceback \(most recent call last\)|  File \"|[A-Z]\d{4} \d\d:\d\d|"
    r"(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|FATAL)\b|\S+:\d+:\d+ \[\d+\] NCCL|\$ |# |"
    r"(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Warning|Interrupt|Exit)\b)")
# a progress bar (tqdm pads its line to the terminal width: full-width rows that were never cut)
_PROGRESS = re.compile(r"\d+%\||it/s\]|s/it\]")


def wrap_width(lines: list[str]) -> int | None:
    """The width the input was hard-wrapped at, or None when it was not."""
    lengths = [len(line) for line in lines if line]
    if not lengths:
        return None
    width = max(lengths)
    if width < MIN_WIDTH:
        return None
    full = sum(1 for n in lengths if n == width)
    if full < MIN_FULL or full < MIN_SHARE * len(lengths):
        return None
    return width


PREFIX = 8  # a row that begins as other rows begin starts a line of its own


def _glues(row: str, nxt: str, common: set[str]) -> bool:
    """Whether ``nxt`` is the rest of the full-width ``row`` rather than a line of its own."""
    if not nxt or row[-1] in _BORDER or nxt[0] in _BORDER or _PROGRESS.search(row):
        return False
    if row.endswith("  ") or nxt.startswith("  "):
        return False  # padded to the width (a console logger's own layout), or an indented line
    if nxt[:PREFIX] in common or nxt[:PREFIX] == row[:PREFIX]:
        return False  # begins as other lines begin: a line of its own
    return _LINE_START.match(nxt) is None


def unwrap(text: str) -> str:
    """``text`` with its hard-wrapped rows glued back; the same number of lines."""
    lines = text.split("\n")
    ends_cr = [line.endswith("\r") for line in lines]
    rows = [line[:-1] if cr else line for line, cr in zip(lines, ends_cr)]
    width = wrap_width(rows)
    if width is None:
        return text
    # how lines begin here, read from the rows that surely begin one (the row above is not full)
    starts = Counter(row[:PREFIX] for prev, row in zip([""] + rows, rows)
                     if len(row) >= PREFIX and len(prev) < width)
    common = {p for p, n in starts.items() if n >= 3}
    cuts = [i for i in range(len(rows) - 1) if len(rows[i]) == width and _glues(rows[i], rows[i + 1], common)]
    if len(cuts) < MIN_FULL:
        return text  # full-width rows, but not cut ones: repeated messages, a table, a padded console
    cut = set(cuts)
    out = list(rows)
    i = 0
    while i < len(rows):
        j = i
        while j in cut:
            j += 1
        if j > i:
            out[i] = "".join(rows[i:j + 1])
            for k in range(i + 1, j + 1):
                out[k] = ""
        i = j + 1
    return "\n".join(line + ("\r" if cr else "") for line, cr in zip(out, ends_cr))



_ENCODED_SPACE = re.compile(r"%20|%2C|%3A", re.IGNORECASE)
_SPACES = re.compile(r"(\s+)")


def _decoded(run: str) -> str:
    if "%20" not in run or "://" in run or len(_ENCODED_SPACE.findall(run)) < 2:
        return run  # a URL quoted in a log line stays a URL
    return re.sub(r"[\r\n]", " ", unquote(run, errors="replace"))


def unquote_lines(text: str) -> str:
    """``text`` with its percent-encoded runs (no space inside, two or more encoded spaces, commas or
    colons, one of them a space) decoded; the same number of lines (an encoded line break stays a
    space). A run with one encoded space (a file name in a URL) is left as it is. Linear in the
    text: it is split at white space once, and only runs holding "%20" are looked at."""
    if "%20" not in text:
        return text
    parts = _SPACES.split(text)  # runs at even indices, the white space between them at odd ones
    for i in range(0, len(parts), 2):
        if "%20" in parts[i]:
            parts[i] = _decoded(parts[i])
    return "".join(parts)


_RESULT_ROW = re.compile(r"^([^|]*\|)([^|]*)(\|\s*(?:Pass|Fail|Skip|Warn)\b)")


def fill_result_rows(text: str) -> str:
    """``text`` with the unnamed result rows of a ``dcgmi diag`` table named after the row above
    that names its test (same number of lines, nothing else changed)."""
    if "| Fail" not in text and "|  Fail" not in text and "Fail - " not in text:
        return text
    lines = text.split("\n")
    name = ""
    changed = False
    for i, line in enumerate(lines):
        m = _RESULT_ROW.match(line)
        if m is None:
            if "|" not in line or "|-" in line or "+--" in line:
                name = ""  # the table (or its section) ended
            continue
        if m.group(2).strip():
            name = m.group(2).strip()
        elif name:
            cell = " " + name
            lines[i] = m.group(1) + cell.ljust(len(m.group(2))) + line[m.end(2):]
            changed = True
    return "\n".join(lines) if changed else text
