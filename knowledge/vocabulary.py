"""The last resort: a category read from the words of the failure lines.

When nothing the knowledge base knows reaches the bar (no catalogued message, no entry signature, no
finding rule), a log still says something: its failure lines ("PreemptionError: Nodes of this job got
pre-empted", "worker 3 died: bus error", "failed to allocate 2.1 GiB on device") are written in the
words of the layer that gave way. :func:`read` counts, per category, the failure lines that use that
category's words (``vocabulary.yaml``) and names the family of the category they use most, at the bar
and no higher, with the runners-up below it as what to check next. It is what an engineer's
``grep -i`` gives, said as weakly as it is.

Which lines count: a line that says something failed (an error word, an exception name, "killed",
"timed out", "preempted", ...) and is not logged as information, debug output or a warning, and is
not a retry notice; NCCL INFO chatter, Python warnings and progress lines never vote.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

import yaml

from collectors.findings import FirstError, LogLine

HERE = Path(__file__).resolve().parent
MAX_LINES = 20_000    # failure lines read (a paste holds far fewer; a storm repeats itself)
MAX_PER_CATEGORY = 3  # distinct failure lines that count per category (a chorus counts once)
FIRST_ERROR_BONUS = 2
ECHO_FACTOR = 0.5

FAILURE = re.compile(
    r"\b(errors?|fatal|failed|failure|fails?|exception|abort(?:ed|ing)?|killed|crash(?:ed|es)?|died|dead|"
    r"lost|terminated|pre-?empted|evicted|timed out|timeout|exceeded|unable to|cannot|can't|could not|"
    r"couldn't|not enough|exhausted|insufficient|panic|segmentation fault|core dumped|hung|stuck|refused)\b"
    r"|[a-z](?:error|exception)\b|错误|失败|异常|报错|超时|崩溃|中断|不足|被杀|卡住")
# a line logged as information, debug output or a warning, or a retry notice, says nothing failed
QUIET = re.compile(
    r"\b(?:nccl|gloo) (?:info|trace)\b|^\s*(?:info|debug|trace|warn(?:ing)?)\b|\[(?:info|debug|warn(?:ing)?)\]|"
    r"\b(?:userwarning|futurewarning|deprecationwarning|runtimewarning|resourcewarning)\b|"
    r"\bretry(?:ing)?\b|will retry|\bdeprecat")
QUIET_LEVELS = {"I", "D", "W", "INFO", "DEBUG", "WARNING", "WARN", "TRACE"}


@dataclass
class Reading:
    """One category the failure lines speak of: ``family`` the backstop entry that speaks for it,
    ``lines`` the failure lines (at most :data:`MAX_PER_CATEGORY`) and the word each used."""

    category: str
    family: str
    score: float
    lines: list[tuple[LogLine, str]]


@dataclass
class _Category:
    name: str
    family: str
    words: re.Pattern[str]
    families: list[tuple[re.Pattern[str], str]]


@lru_cache(maxsize=4)
def load(path: str = str(HERE / "vocabulary.yaml")) -> tuple[list[_Category], list[str], frozenset[str]]:
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    cats = []
    for name, spec in data["categories"].items():
        words = re.compile("|".join(f"(?:{w})" for w in spec["words"]))
        fams = [(re.compile(f["words"]), f["family"]) for f in spec.get("families", ())]
        cats.append(_Category(name, spec["family"], words, fams))
    return cats, list(data["order"]), frozenset(data.get("echo", ()))


def failure_line(line: LogLine) -> bool:
    if getattr(line, "level", None) in QUIET_LEVELS:
        return False
    low = line.text.lower()
    return bool(FAILURE.search(low)) and not QUIET.search(low)


def read(lines: Sequence[LogLine], first_error: FirstError | None = None) -> list[Reading]:
    """The categories whose words the failure lines use, best first (empty when none does)."""
    cats, order, echo = load()
    seen: dict[str, set[str]] = {c.name: set() for c in cats}
    hits: dict[str, list[tuple[LogLine, str]]] = {c.name: [] for c in cats}
    first_key = (first_error.source, first_error.line_no) if first_error is not None else None
    first_cats: set[str] = set()
    n = 0
    for line in lines:
        if not failure_line(line):
            continue
        n += 1
        if n > MAX_LINES:
            break
        low = line.text.lower()[:2000]
        norm = re.sub(r"\d+", "#", low)
        for c in cats:
            m = c.words.search(low)
            if m is None:
                continue
            if (line.source, line.line_no) == first_key:
                first_cats.add(c.name)
            if norm in seen[c.name] or len(hits[c.name]) >= MAX_PER_CATEGORY:
                continue
            seen[c.name].add(norm)
            hits[c.name].append((line, m.group(0)))
    scores = {name: len(h) + (FIRST_ERROR_BONUS if name in first_cats else 0) for name, h in hits.items() if h}
    if not scores:
        return []
    if any(name not in echo for name in scores):
        # beside another layer's words, the echo's lines are how that failure reached the other
        # ranks: they count half, and being first in the file says nothing about the root
        for name in echo:
            if name in scores:
                scores[name] = len(hits[name]) * ECHO_FACTOR
    rank = {name: i for i, name in enumerate(order)}
    out = []
    for name in sorted(scores, key=lambda k: (-scores[k], rank.get(k, len(order)))):
        c = next(c for c in cats if c.name == name)
        family = c.family
        text = " ".join(ln.text.lower() for ln, _ in hits[name])
        for pattern, fam in c.families:
            if pattern.search(text):
                family = fam
                break
        out.append(Reading(name, family, scores[name], hits[name]))
    return out


def summary(reading: Reading) -> dict[str, Any]:
    """What the explanation says about a reading: how many lines, which words, the first line."""
    words = sorted({w for _, w in reading.lines})
    return {"lines": len(reading.lines), "words": words, "line_no": reading.lines[0][0].line_no}
