"""Score the engine against labelled sets of real logs.

Two sets, the same layout (``<set>/<category>/<name>.log`` plus ``<set>/labels/*.jsonl``):

* ``tests/corpus``: the development set. Entries and catalogs may be tuned on it.
* ``tests/heldout``: the locked held-out set, from threads the development set never used.
  Nothing is tuned on it: a held-out miss is fixed by a general message or rule, and the case
  then moves to the development set and a new one replaces it.

Used by tests/test_corpus.py (the development set's bar, the held-out figure reported) and
scripts/corpus_report.py (both sets side by side, per category and per framework, beside a
keyword grep).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "corpus"
HELDOUT = Path(__file__).resolve().parent / "heldout"


@dataclass
class Case:
    file: str
    category: str
    failure: str
    source: str
    hard: bool
    root: Path = CORPUS
    framework: str = ""
    lang: str = "en"
    xid: list[int] = field(default_factory=list)
    group: str = ""  # the labels file it came from (a harvest)

    @property
    def path(self) -> Path:
        return self.root / self.file


def load_cases(root: Path = CORPUS) -> list[Case]:
    cases = []
    for labels in sorted((root / "labels").glob("*.jsonl")):
        for n, line in enumerate(labels.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            row = json.loads(line)
            cases.append(Case(row["file"], row["category"], row.get("failure", ""), row["source"],
                              bool(row.get("hard")), root, row.get("framework", ""), row.get("lang", "en"),
                              [int(x) for x in row.get("xid") or []], labels.stem))
    return cases


@dataclass
class Result:
    case: Case
    predicted: list[str]  # categories of the ranked causes, best first
    xids: set[int] = field(default_factory=set)  # XID codes among the findings
    top_conf: float = 0.0

    @property
    def top1(self) -> bool:
        return bool(self.predicted) and self.predicted[0] == self.case.category

    @property
    def top3(self) -> bool:
        return self.case.category in self.predicted[:3]

    @property
    def xid_ok(self) -> bool:
        return set(self.case.xid) <= self.xids


def evaluate(engine, cases: list[Case] | None = None) -> list[Result]:
    results = []
    for case in load_cases() if cases is None else cases:
        diagnosis = engine.diagnose_paths([str(case.path)])
        cats: list[str] = []
        for cause in diagnosis.causes:
            if cause.category not in cats:
                cats.append(cause.category)
        xids = {f.attrs.get("code") for f in diagnosis.findings if f.kind == "xid"}
        results.append(Result(case, cats, {x for x in xids if isinstance(x, int)},
                              diagnosis.causes[0].confidence if diagnosis.causes else 0.0))
    return results


def summary(results: list[Result]) -> dict[str, float]:
    n = len(results) or 1
    xid_cases = [r for r in results if r.case.xid]
    return {"n": len(results), "top1": sum(r.top1 for r in results) / n, "top3": sum(r.top3 for r in results) / n,
            "xid": (sum(r.xid_ok for r in xid_cases) / len(xid_cases)) if xid_cases else float("nan"),
            "xid_n": len(xid_cases)}


def table(results: list[Result], by: str = "category", misses: bool = True) -> str:
    key = (lambda r: r.case.category) if by == "category" else (lambda r: r.case.framework or "-")
    groups = sorted({key(r) for r in results})
    rows = [f"{by:20} {'n':>4} {'top-1':>7} {'top-3':>7}"]
    for g in groups + ["ALL"]:
        rs = [r for r in results if g == "ALL" or key(r) == g]
        top1 = sum(r.top1 for r in rs) / len(rs)
        top3 = sum(r.top3 for r in rs) / len(rs)
        rows.append(f"{g:20} {len(rs):4} {top1:7.1%} {top3:7.1%}")
    s = summary(results)
    if s["xid_n"]:
        rows.append(f"XID codes found: {s['xid']:.1%} of {s['xid_n']} logs that show one")
    missed = [r for r in results if not r.top1]
    if misses and missed:
        rows.append("\nmisses (top-1):")
        for r in missed:
            rows.append(f"  {r.case.file}: want {r.case.category}, got {r.predicted[:3] or 'no confident cause'}")
    return "\n".join(rows)


# --------------------------------------------------------------------------------------------
# The peer: what a keyword grep would say (the category whose words appear most often)
# --------------------------------------------------------------------------------------------
GREP_WORDS = {
    "gpu-memory": r"out of memory|oom when allocating|resource_exhausted|cuda_error_out_of_memory|memory_allocation",
    "communication": r"nccl|timeout|timed out|watchdog|connection|socket|rendezvous|tcpstore|gloo|ibv_|net/ib",
    "shared-memory": r"/dev/shm|shared memory|bus error|shm",
    "gpu-hardware": r"xid|ecc|fallen off|nvlink|pcie|row remap|nvrm",
    "checkpoint-storage": r"no space left|disk quota|i/o error|input/output|nfs|stale file|read-only file|checkpoint",
    "host-memory": r"oom-kill|oom_kill|killed process|sigkill|exitcode: -9|cannot allocate memory|memoryerror|oomkilled",
    "scheduler": r"time limit|preempt|cancelled|node fail|evicted|requeue",
    "software": r"version|undefined symbol|no kernel image|not compiled|importerror|modulenotfounderror|mismatch",
}


def grep_category(text: str) -> str | None:
    low = text.lower()
    counts = {cat: len(re.findall(words, low)) for cat, words in GREP_WORDS.items()}
    best = max(counts.items(), key=lambda kv: kv[1])
    return best[0] if best[1] else None


def grep_top1(cases: list[Case]) -> float:
    ok = 0
    for case in cases:
        text = case.path.read_text(encoding="utf-8", errors="replace")
        ok += grep_category(text) == case.category
    return ok / (len(cases) or 1)


def terminal_cut(text: str, width: int) -> str:
    """What a terminal of ``width`` columns shows: every longer line cut at the exact column (the
    hard-wrapped pastes of tests/test_unwrap.py and scripts/wrap_report.py)."""
    rows = []
    for line in text.split("\n"):
        rows.extend([line[i:i + width] for i in range(0, len(line), width)] or [""])
    return "\n".join(rows)
