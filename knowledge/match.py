"""Combine regex signatures, fuzzy phrases and finding rules into ranked causes.

How a confidence is made (``--explain`` prints the same story for each cause):

* every piece of evidence has a weight in (0, 1): a signature hit 0.6, each further line hit by
  a signature 0.05 (up to three), the best fuzzy phrase hit 0.4-0.6 by its score, each
  satisfied finding rule its ``weight`` (0.5 by default), evidence from a second source (a
  kernel log beside the training log, a collector's output) 0.2, and an entry whose evidence
  includes the first error in time 0.25;
* the weights combine as independent votes: ``1 - prod(1 - w)``; a ``rules_out`` finding
  multiplies the result by 0.35;
* a line that matches a message-catalog row (``knowledge/catalog/``) counts as a signature hit
  for the row's entry, when it names one, and as a hit of weight 0.5 for the row's family
  (a ``backstop`` entry); a backstop is halved when a specific cause of its own category reached
  the bar, so it only speaks when nothing more specific does (beside a cause of another category it
  stays, as an alternative);
* entries marked ``symptom`` (the "remote process exited" chorus, and wrappers such as NCCL's
  "unhandled system error" that say "look underneath") are halved when a specific cause reached
  0.5, so the echo never outranks what it echoes;
* an entry needs primary evidence: a signature, a phrase, a finding rule of weight 0.5 or more,
  or supporting findings of two different kinds that agree. One kind of supporting finding alone
  caps the entry at 0.3, below the bar. The first-error vote counts only when primary evidence
  sits on the first error line.

Only causes at or above ``CONFIDENT`` are reported; below it the reply says "no confident cause".
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Collection, Iterable, Sequence

from rapidfuzz import fuzz, utils

from collectors.findings import Finding, FirstError, LogLine
from collectors.said import Said
from knowledge.loader import Entry

CONFIDENT = 0.4
FUZZY_CUTOFF = 88.0
W_SIGNATURE = 0.6
W_MORE_LINES = 0.05
W_SOURCES = 0.2
W_FIRST_ERROR = 0.25
RULES_OUT_FACTOR = 0.35
SYMPTOM_FACTOR = 0.5
W_BACKSTOP = 0.5
BACKSTOP_FACTOR = 0.5
PRIMARY_RULE = 0.5  # a finding rule with at least this weight can make a cause on its own
SUPPORT_ONLY_CAP = 0.3
MAX_LINE = 400  # characters of a line that take part in fuzzy matching
TEXT_MEMO = 50_000  # distinct line texts whose signature and phrase hits one match() remembers

_NORMALISE = [
    (re.compile(r"0x[0-9a-f]+", re.I), " "),
    (re.compile(r"\b[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}(?:\.[0-9a-f])?\b", re.I), " "),
    (re.compile(r"\d+(?:[.,:]\d+)*"), " "),
]
_WORD = re.compile(r"[a-z_][a-z_]{3,}")


def normalise(text: str) -> str:
    """Lower-case, drop numbers, addresses and punctuation (the rapidfuzz default processor)."""
    text = text[:MAX_LINE]
    for pattern, repl in _NORMALISE:
        text = pattern.sub(repl, text)
    return " ".join(utils.default_process(text).split())


def literal_anchor(pattern: str) -> str | None:
    """The longest literal run (4+ chars) every match of ``pattern`` must contain, lower-cased.

    Lets the matcher skip a regex on lines that cannot match it; ``None`` means "always try".
    """
    from knowledge.catalog import regex_literals

    best = max(regex_literals(pattern, re.IGNORECASE), key=len, default="").lower()
    return best if len(best) >= 4 else None


def rule_matches(rule: dict[str, Any], finding: Finding) -> bool:
    """True when ``finding`` satisfies the conditions of an entry's findings rule."""
    return _satisfies(rule, finding)


def _satisfies(rule: dict[str, Any], finding: Finding) -> bool:
    if finding.kind != rule["kind"]:
        return False
    for key, want in rule.items():
        if key in ("kind", "rules_out", "weight"):
            continue
        if key.startswith("min_") or key.startswith("max_"):
            have = finding.attrs.get(key[4:])
            if not isinstance(have, (int, float)) or isinstance(have, bool):
                return False
            if key.startswith("min_") and have < want:
                return False
            if key.startswith("max_") and have > want:
                return False
            continue
        have = finding.attrs.get(key)
        wants = want if isinstance(want, list) else [want]
        if not any(_equal(have, w) for w in wants):
            return False
    return True


def _equal(have: Any, want: Any) -> bool:
    if isinstance(have, str) and isinstance(want, str):
        return have.lower() == want.lower()
    return have == want


@dataclass
class Evidence:
    source: str
    line: str
    line_no: int | None = None
    node: str | None = None
    rank: int | None = None
    why: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "node": self.node, "rank": self.rank, "line": self.line,
                "line_no": self.line_no, "why": self.why}


@dataclass
class Cause:
    entry: Entry
    confidence: float
    evidence: list[Evidence] = field(default_factory=list)
    explain: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    learned: float = 0.0  # how much the team's feedback moved it (knowledge.learning)
    alternative: bool = False  # below the bar, shown as what to check next (bot.engine.alternatives)
    support: float = 0.0  # the score before any cap: orders causes capped at the same confidence
    basis: str = ""  # "words": read from the words of the failure lines only (knowledge.vocabulary)

    @property
    def id(self) -> str:
        return self.entry.id

    @property
    def category(self) -> str:
        return self.entry.category


@dataclass
class _Compiled:
    entry: Entry
    sigs: list[tuple[str, str | None]]  # (signature, its literal anchor)
    phrases: list[str]  # normalised
    # each signature compiled when a line first reaches it (most never are: a new process would spend
    # a third of its start-up compiling all of them)
    patterns: list[Any] = field(default_factory=list)

    def pattern(self, si: int):
        if not self.patterns:
            self.patterns = [None] * len(self.sigs)
        p = self.patterns[si]
        if p is None:
            p = self.patterns[si] = compile_signature(self.sigs[si][0], self.entry)
        return p


def compile_signature(sig: str, entry: Entry):
    """A team entry's signature runs in RE2 (linear time: a pattern such as ``(a+)+$`` cannot stall
    every diagnosis); the curated ones, reviewed in git, may use Python's look-around."""
    if entry.origin == "team":
        import re2

        opts = re2.Options()
        opts.case_sensitive = False
        opts.max_mem = 8 << 20
        return re2.compile(sig, opts)
    return re.compile(sig, re.IGNORECASE)


def entry_matches_line(entry: Entry, line: str) -> bool:
    """True when a signature or a phrase of ``entry`` matches ``line`` (used to check examples)."""
    for sig in entry.signatures:
        if compile_signature(sig, entry).search(line):
            return True
    norm = normalise(line)
    return any(fuzz.partial_ratio(normalise(p), norm) >= FUZZY_CUTOFF for p in entry.phrases if normalise(p))


class Matcher:
    """Compiled once per process; :meth:`match` is the per-diagnosis hot path."""

    def entry(self, entry_id: str) -> Entry | None:
        i = self._index.get(entry_id)
        return None if i is None else self.entries[i]

    def check_next(self, entry: Entry, findings: Sequence[Finding] = ()) -> list[str]:
        """The families to check after ``entry``: first those the XID codes (:func:`xid_families`)
        and the exit status (:func:`exit_families`) it rests on name, then its own ``check_next``, else those of the family its catalogued
        messages belong to (an ECC error's next checks are the GPU-fault family's; an entry no
        catalogued message points at has none)."""
        if entry.check_next:
            own = list(entry.check_next)
        else:
            fam = self._family_of.get(entry.id)
            target = self.entry(fam) if fam else None
            own = [f for f in target.check_next if f != entry.id] if target is not None else []
        led: list[str] = []
        for f in xid_families(findings) + exit_families(findings):
            if f != entry.id and f not in led and self.entry(f) is not None:
                led.append(f)
        return led + [f for f in own if f not in led]

    def __init__(self, entries: Sequence[Entry], catalog: Any = None):
        self.entries = list(entries)
        self.catalog = catalog
        self._index = {e.id: i for i, e in enumerate(self.entries)}
        # an entry's family: the one most of the catalogued messages that point at it belong to
        votes: dict[str, Counter[str]] = {}
        for row in getattr(catalog, "rows", None) or ():
            if row.entry and row.family and row.family != row.entry:
                votes.setdefault(row.entry, Counter())[row.family] += 1
        self._family_of = {eid: c.most_common(1)[0][0] for eid, c in votes.items()}
        self._compiled = [
            _Compiled(e, [(s, literal_anchor(s)) for s in e.signatures],
                      [p for p in (normalise(p) for p in e.phrases) if p])
            for e in self.entries
        ]
        # signature index: anchor -> [(entry index, sig index)]; unanchored run on every line
        self._anchored: dict[str, list[tuple[int, int]]] = {}
        self._unanchored: list[tuple[int, int]] = []
        for ei, comp in enumerate(self._compiled):
            for si, (_, anchor) in enumerate(comp.sigs):
                if anchor:
                    self._anchored.setdefault(anchor, []).append((ei, si))
                else:
                    self._unanchored.append((ei, si))
        self._automaton = _build_automaton(self._anchored)
        # specific finding rules (with conditions) by kind: a generic rule such as {kind: xid}
        # yields the findings they claim, so the catalog entry speaks only for unclaimed codes
        self._specific: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        for ei, comp in enumerate(self._compiled):
            for rule in comp.entry.findings:
                if not rule.get("rules_out") and _conditions(rule):
                    self._specific.setdefault(rule["kind"], []).append((ei, rule))
        # phrase index: a rare word of each phrase -> phrases that contain it
        doc_freq: dict[str, int] = {}
        for comp in self._compiled:
            for phrase in comp.phrases:
                for word in set(_WORD.findall(phrase)):
                    doc_freq[word] = doc_freq.get(word, 0) + 1
        self._phrase_index: dict[str, list[tuple[int, int]]] = {}
        self._phrase_any: list[tuple[int, int]] = []
        for ei, comp in enumerate(self._compiled):
            for pi, phrase in enumerate(comp.phrases):
                words = sorted(set(_WORD.findall(phrase)), key=lambda w: (doc_freq[w], -len(w)))
                if not words:
                    self._phrase_any.append((ei, pi))
                for word in words[:2]:
                    self._phrase_index.setdefault(word, []).append((ei, pi))

    def anchors(self) -> set[str]:
        """Literal keywords the log parser should keep lines for, besides its own vocabulary."""
        out = set(self._anchored)
        if self.catalog is not None:
            out |= self.catalog.anchors()
        return out

    def _signature_candidates(self, low: str) -> Iterable[tuple[int, int]]:
        if self._automaton is not None:
            seen = set()
            for _, anchor in self._automaton.iter(low):
                if anchor not in seen:
                    seen.add(anchor)
                    yield from self._anchored[anchor]
        else:
            for anchor, sigs in self._anchored.items():
                if anchor in low:
                    yield from sigs
        yield from self._unanchored

    def match(self, lines: Sequence[LogLine], findings: Sequence[Finding] = (),
              first_error: FirstError | None = None, hits: Sequence[Any] | None = None) -> list[Cause]:
        """Score every entry against the lines and findings; all causes, best first.

        ``hits`` are the message-catalog hits on ``lines`` when the caller already scanned them
        (to draw findings from them); otherwise the matcher's catalog scans the lines here.
        """
        n = len(self._compiled)
        sig_hits: list[dict[tuple[str, int], tuple[LogLine, str]]] = [dict() for _ in range(n)]
        phrase_best: list[tuple[float, LogLine, str] | None] = [None] * n
        if hits is None and self.catalog is not None:
            hits = self.catalog.scan(lines)
        soft: set[tuple[str, int]] = set()  # lines holding a retry notice (a row marked transient)
        for hit in hits or ():
            if hit.row.pointer:
                continue  # "see the error above": the line is a failure line, the layer is elsewhere
            key = (hit.line.source, hit.line.line_no)
            if hit.row.transient:
                soft.add(key)
            targets = [hit.row.entry, hit.row.family]
            ei = self._index.get(hit.row.entry) if hit.row.entry else None
            if ei is not None and self.entries[ei].symptom:
                # a wrapper or an echo ("unhandled system error", "remote process exited") says
                # "look underneath": it speaks for its symptom entry only, not for a whole family
                targets = [hit.row.entry]
            for target in targets:
                ti = self._index.get(target) if target else None
                if ti is not None and key not in sig_hits[ti]:
                    sig_hits[ti][key] = (hit.line, f"{CATALOG_TAG}{hit.row.id}")
        # what the signatures and phrases say of a text depends on the text alone: a log that repeats
        # a line (a warning from every rank, a traceback per rank) is read once per distinct text
        seen: dict[str, tuple[list[tuple[int, Any]], list[tuple[int, float, int]]]] = {}
        for line in lines:
            text = line.text
            said = seen.get(text)
            if said is None:
                said = self._read_text(text)
                if len(seen) < TEXT_MEMO:
                    seen[text] = said
            key = (line.source, line.line_no)
            for ei, pattern in said[0]:
                if key not in sig_hits[ei]:
                    sig_hits[ei][key] = (line, pattern.pattern)
            for ei, score, pi in said[1]:
                if phrase_best[ei] is None or score > phrase_best[ei][0]:
                    phrase_best[ei] = (score, line, self._compiled[ei].entry.phrases[pi])

        by_kind: dict[str, list[Finding]] = {}  # each rule reads only its own kind's findings
        for f in findings:
            by_kind.setdefault(f.kind, []).append(f)
        causes = []
        for ei, comp in enumerate(self._compiled):
            cause = self._score(ei, comp.entry, sig_hits[ei], phrase_best[ei], by_kind, first_error, soft)
            if cause is not None:
                causes.append(cause)
        specific = {c.category for c in causes
                    if c.confidence >= CONFIDENT and not c.entry.symptom and not c.entry.backstop}
        for cause in causes:
            if cause.entry.backstop and cause.category in specific:
                cause.confidence = round(cause.confidence * BACKSTOP_FACTOR, 3)
                cause.explain.append(Said(f"x{BACKSTOP_FACTOR}: a family-level cause while a specific cause of "
                                          "the same category is present",
                                          f"x{BACKSTOP_FACTOR}：同一类别已有具体原因，这只是大类原因"))
        strong = any(c.confidence >= 0.5 and not c.entry.symptom for c in causes)
        if strong:
            for cause in causes:
                if cause.entry.symptom:
                    cause.confidence *= SYMPTOM_FACTOR
                    cause.explain.append(Said(f"x{SYMPTOM_FACTOR}: a symptom (an echo of another failure) "
                                              "while a specific cause is present",
                                              f"x{SYMPTOM_FACTOR}：这是症状（别的故障引起的连带报错），"
                                              "而已有具体原因"))
        # on a tie the curated entry leads (a team entry earns its place with the team's feedback),
        # then the one with more support before the caps (two causes held at 0.3 by the same cap)
        causes.sort(key=lambda c: (-c.confidence, c.entry.origin != "curated", -c.support, _first_line(c)))
        return causes

    def _read_text(self, text: str) -> tuple[list[tuple[int, Any]], list[tuple[int, float, int]]]:
        """The signatures (entry, pattern) and fuzzy phrases (entry, score, phrase) that match ``text``."""
        low = text.lower()
        sigs: list[tuple[int, Any]] = []
        hit: set[int] = set()
        for ei, si in self._signature_candidates(low):
            if ei in hit:
                continue
            pattern = self._compiled[ei].pattern(si)
            if pattern.search(text):
                hit.add(ei)
                sigs.append((ei, pattern))
        phrases: list[tuple[int, float, int]] = []
        norm = None
        cands: set[tuple[int, int]] = set(self._phrase_any)
        for word in set(_WORD.findall(low)):
            cands.update(self._phrase_index.get(word, ()))
        for ei, pi in cands:
            if norm is None:
                norm = normalise(text)
            score = fuzz.partial_ratio(self._compiled[ei].phrases[pi], norm, score_cutoff=FUZZY_CUTOFF)
            if score:
                phrases.append((ei, score, pi))
        return sigs, phrases

    def _claimed(self, ei: int, finding: Finding) -> bool:
        return any(other != ei and _satisfies(rule, finding) for other, rule in self._specific.get(finding.kind, ()))

    def _score(self, ei: int, entry: Entry, sig_hits: dict, phrase_hit, by_kind: dict[str, list[Finding]],
               first_error: FirstError | None, soft: Collection[tuple[str, int]] = ()) -> Cause | None:
        weights: list[float] = []
        explain: list[Said] = []
        evidence: list[Evidence] = []
        used: list[Finding] = []
        sources: set[str] = set()
        primary: set[tuple[str, int | None]] = set()  # lines of evidence strong enough alone
        # kinds of supporting facts read by a rule with conditions (reason=, min_...): "any NCCL WARN"
        # says a warning was printed, not which, so it never makes a second, agreeing kind
        specific_kinds: set[str] = set()

        if sig_hits:
            hits = sorted(sig_hits.values(), key=lambda h: (h[0].source, h[0].line_no))
            w_sig = W_BACKSTOP if entry.backstop else W_SIGNATURE
            weights.append(w_sig)
            hit, n = _hit_said(hits[0][1]), hits[0][0].line_no
            explain.append(Said(f"+{w_sig}: {hit} matched line {n}", f"+{w_sig}：{hit.zh} 匹配第 {n} 行"))
            more = min(len(hits) - 1, 3)
            for _ in range(more):
                weights.append(W_MORE_LINES)
            if more:
                explain.append(Said(f"+{W_MORE_LINES}x{more}: {len(hits)} lines matched in all",
                                    f"+{W_MORE_LINES}x{more}：共匹配 {len(hits)} 行"))
            for line, pattern in hits[:5]:
                evidence.append(Evidence(line.source, line.text, line.line_no, line.node, line.rank,
                                         _hit_text(pattern)))
                sources.add(_source_kind(line.source))
            primary.update((line.source, line.line_no) for line, _ in hits)
        if phrase_hit is not None:
            score, line, phrase = phrase_hit
            w = 0.4 + 0.2 * (score - FUZZY_CUTOFF) / (100 - FUZZY_CUTOFF)
            if sig_hits and (line.source, line.line_no) in sig_hits:
                w = 0.1
            weights.append(round(w, 3))
            explain.append(Said(f"+{w:.2f}: phrase {phrase!r} scored {score:.0f} on line {line.line_no}",
                                f"+{w:.2f}：短语 {phrase!r} 在第 {line.line_no} 行得分 {score:.0f}"))
            if (line.source, line.line_no) not in sig_hits:
                evidence.append(Evidence(line.source, line.text, line.line_no, line.node, line.rank,
                                         f"phrase {phrase!r} ({score:.0f})"))
            sources.add(_source_kind(line.source))
            primary.add((line.source, line.line_no))

        penalty = 1.0
        # one vote per kind of fact: rules of one finding kind (exit-signal signal=SIGKILL and
        # exitcode=-9 read the same exit) count once, at the strongest rule that matched
        kind_weight: dict[str, float] = {}
        for rule in entry.findings:
            matched = [f for f in by_kind.get(rule["kind"], ()) if _satisfies(rule, f)]
            if not rule.get("rules_out"):
                # what a healthy node shows (collectors.healthy) supports nothing; it can still rule out
                matched = [f for f in matched if not f.normal]
            if not _conditions(rule) and not rule.get("rules_out"):
                matched = [f for f in matched if not self._claimed(ei, f)]
            if not matched:
                continue
            desc = Said(_rule_text(rule), _rule_text(rule))
            if rule.get("rules_out"):
                penalty *= RULES_OUT_FACTOR
                n = matched[0].line_no
                explain.append(Said(f"x{RULES_OUT_FACTOR}: ruled out by {desc} (line {n})",
                                    f"x{RULES_OUT_FACTOR}：被 {desc} 排除（第 {n} 行）"))
                continue
            w = float(rule.get("weight", 0.5))
            if sig_hits and all((f.source, f.line_no) in sig_hits for f in matched):
                # read from the very lines a signature already counted: the same fact, not a second
                # one; together they count as the stronger of the two (the part above the signature)
                w_sig = W_BACKSTOP if entry.backstop else W_SIGNATURE
                w = round(max(0.0, (w - w_sig) / (1.0 - w_sig)), 3)
                desc += Said(" on the signature's line", "（与特征同一行）")
            before = kind_weight.get(rule["kind"])
            if before is not None and before >= w:
                explain.append(Said(f"+0: finding {desc} seen {len(matched)}x (the same fact as a stronger "
                                    f"{rule['kind']} rule)",
                                    f"+0：发现 {desc.zh} 出现 {len(matched)} 次（与更强的 {rule['kind']} "
                                    "规则是同一事实）"))
                continue
            if before is not None:
                weights.remove(before)
            kind_weight[rule["kind"]] = w
            weights.append(w)
            instead = (Said(f" (in place of the +{before} of a weaker {rule['kind']} rule)",
                            f"（取代较弱的 {rule['kind']} 规则的 +{before}）") if before is not None else Said("", ""))
            explain.append(Said(f"+{w}: finding {desc} seen {len(matched)}x{instead}",
                                f"+{w}：发现 {desc.zh} 出现 {len(matched)} 次{instead.zh}"))
            if w >= PRIMARY_RULE:
                primary.update((f.source, f.line_no) for f in matched)
            if _conditions(rule):
                specific_kinds.add(rule["kind"])
            for f in matched[:3]:
                used.append(f)
                sources.add(_source_kind(f.source))
                if not any(e.line == f.line and e.line_no == f.line_no for e in evidence):
                    evidence.append(Evidence(f.source, f.line, f.line_no, f.node, f.rank, f"finding {desc}"))

        if not weights:
            return None
        # the cross-node comparison is read from the collectors' own findings: not a source of its own
        sources.discard("compare")
        if len(sources) > 1:
            weights.append(W_SOURCES)
            names = ", ".join(sorted(sources))
            explain.append(Said(f"+{W_SOURCES}: evidence from {len(sources)} sources ({names})",
                                f"+{W_SOURCES}：证据来自 {len(sources)} 个来源（{names}）"))
        if first_error is not None and (first_error.source, first_error.line_no) in primary:
            weights.append(W_FIRST_ERROR)
            n = first_error.line_no
            explain.append(Said(f"+{W_FIRST_ERROR}: includes the first error in time (line {n})",
                                f"+{W_FIRST_ERROR}：包含时间上最早的错误（第 {n} 行）"))
        confidence = 1.0 - math.prod(1.0 - w for w in weights)
        confidence = min(confidence * penalty, 0.99)
        support = confidence
        if entry.requires and not sig_hits and phrase_hit is None and not any(by_kind.get(k) for k in entry.requires):
            # an entry about one kind of failure, held up only by evidence every failure of its
            # family shows (a timeout, a laggard): not without its own kind of fact
            if confidence > SUPPORT_ONLY_CAP:
                confidence = SUPPORT_ONLY_CAP
                kinds = ", ".join(entry.requires)
                explain.append(Said(f"capped at {SUPPORT_ONLY_CAP}: none of the facts it requires ({kinds}) was found",
                                    f"上限 {SUPPORT_ONLY_CAP}：没有找到它所要求的事实（{kinds}）"))
        info = [(e.line, (e.source, e.line_no) in soft) for e in evidence if (e.source, e.line_no) in primary]
        if info and all(retry or _info_only(t) for t, retry in info) and _retries(sig_hits, soft) < RETRIES_STUCK \
                and not any(_PATH_BROKEN.search(t) for t, _ in info) and not any(by_kind.get(k) for k in FAILURE_KINDS):
            # NCCL reports a failure with WARN; what it prints at INFO (a probe that fell back, a
            # connect refused while the peer is not yet listening, a teardown) and a client's retry
            # notice healthy runs print too: beside no failure at all it is no cause. A call retried
            # again and again, or a connect whose packets go nowhere (timed out, no route), is a
            # failure in progress: the job hangs there
            if confidence > SUPPORT_ONLY_CAP:
                confidence = SUPPORT_ONLY_CAP
                explain.append(Said(f"capped at {SUPPORT_ONLY_CAP}: only NCCL INFO lines or a retry or two, and "
                                    "no failure anywhere in the log",
                                    f"上限 {SUPPORT_ONLY_CAP}：只有 NCCL INFO 行或一两次重试，日志里没有任何失败"))
        elif not primary and len(specific_kinds) >= 2:
            explain.append(Said("two kinds of supporting findings agree: no cap", "两类辅助发现相互印证：不设上限"))
        elif not primary:
            confidence = min(confidence, SUPPORT_ONLY_CAP)
            explain.append(Said(f"capped at {SUPPORT_ONLY_CAP}: only supporting findings (weight < {PRIMARY_RULE}), "
                                "no signature, phrase or primary finding",
                                f"上限 {SUPPORT_ONLY_CAP}：只有辅助发现（权重 < {PRIMARY_RULE}），"
                                "没有特征、短语或主要发现"))
        return Cause(entry, round(confidence, 3), evidence, explain, used, support=round(support, 3))


# findings that say something failed (not a probe, a setting or a count)
FAILURE_KINDS = ("nccl-warn", "nccl-error", "nccl-timeout", "exit-signal", "python-exception", "cuda-error",
                 "cuda-oom", "rendezvous-error", "slurm-event", "oom-killer", "host-oom", "ib-error", "xid",
                 "gpu-lost", "disk-full", "io-error", "shm-error", "shm-bus-error", "nvlink-error")
RETRIES_STUCK = 3  # retry notices from one process that make a call stuck, not a start-up race or a blip
_PATH_BROKEN = re.compile(r"(?i)connection timed out|no route to host|network is unreachable")
_NCCL_INFO = re.compile(r"^NCCL INFO\b(?!.*-> ?[1-9]\d*\s*(?:\[[^\]]*\])?\s*$)")


# What a process's exit status says about where to look next, when the log holds only the
# status (a torchrun summary, srun's "exited with exit code", a shell's "Killed"): 1 is a Python
# exception, whose commonest kinds in training are a CUDA out-of-memory and a version or code
# error; SIGKILL is the host OOM killer or a scheduler's kill; SIGBUS a shared-memory mapping
# that could not be backed; SIGABRT a C++ abort (the NCCL watchdog tearing a hung rank down);
# SIGSEGV a native crash (mismatched builds, then a faulty GPU or host).
_EXIT: dict[str, tuple[tuple[str, ...], Said]] = {
    "EXIT1": (("family-gpu-oom", "family-version-mismatch"),
              Said("exit code 1, a Python exception whose traceback is in that rank's own output",
                   "退出码 1，即 Python 异常，traceback 在该 rank 自己的输出里")),
    "SIGKILL": (("family-host-oom", "family-scheduler-termination"),
                Said("SIGKILL without a traceback, a kill from outside",
                     "SIGKILL 且没有 traceback，即被外部杀掉")),
    "SIGBUS": (("family-shared-memory",),
               Said("SIGBUS, a memory mapping that could not be backed", "SIGBUS，即内存映射无法落实")),
    "SIGABRT": (("family-collective-timeout", "family-version-mismatch"),
                Said("SIGABRT, a C++ abort", "SIGABRT，即 C++ abort")),
    "SIGSEGV": (("family-version-mismatch", "family-gpu-hardware-fault"),
                Said("SIGSEGV, a native crash", "SIGSEGV，即原生代码崩溃")),
}


def _exit_keys(findings: Sequence[Finding]) -> list[str]:
    keys: list[str] = []
    for f in findings:
        if f.kind != "exit-signal":
            continue
        key = f.attrs.get("signal")
        if not key and f.attrs.get("exitcode") == 1:
            key = "EXIT1"
        key = str(key).upper() if key else ""
        if key in _EXIT and key not in keys:
            keys.append(key)
    return keys


def exit_families(findings: Sequence[Finding]) -> list[str]:
    """The families an expert checks next for the exit statuses among ``findings``, in order of
    the statuses' first appearance."""
    out: list[str] = []
    for key in _exit_keys(findings):
        for fam in _EXIT[key][0]:
            if fam not in out:
                out.append(fam)
    return out


def exit_reason(family: str, findings: Sequence[Finding]) -> Said | None:
    """Why the exit status among ``findings`` sends an expert to ``family`` next (None: it does not)."""
    for key in _exit_keys(findings):
        families, said = _EXIT[key]
        if family in families:
            return said
    return None


# Where NVIDIA's XID catalog (shared/reference/xid-catalog.csv, column `indicates`) says a code's
# fault may lie besides the GPU itself, and the family an expert checks for it: XID 13 and 31 name
# the application first, 109 the application or the driver, 79 the PCIe bus, 54 the power cables.
_XID_LEADS: tuple[tuple[tuple[str, ...], str, Said], ...] = (
    (("user application",), "family-cuda-runtime-error", Said("the application's own kernels", "应用程序自身的 kernel")),
    (("driver",), "family-version-mismatch", Said("the driver", "驱动")),
    (("system-memory", "pcie bus", "bus related"), "family-node-hardware",
     Said("the PCIe bus or host memory", "PCIe 总线或主机内存")),
    (("power delivery",), "family-node-hardware", Said("the power delivery", "供电")),
)


def _xid_leads(findings: Sequence[Finding]) -> list[tuple[int, str, Said]]:
    """(code, family, layer) for the XID codes among ``findings``, in the order of the codes' first
    appearance and, for one code, of the layers in the catalog's text."""
    from knowledge.xid_catalog import XID

    out: list[tuple[int, str, Said]] = []
    for f in findings:
        code = f.attrs.get("code") if f.kind == "xid" else None
        facts = XID.get(code) if isinstance(code, int) else None
        if facts is None:
            continue
        text = facts["indicates"].lower()
        at = [(min(text.find(k) for k in keys if k in text), fam, layer)
              for keys, fam, layer in _XID_LEADS if any(k in text for k in keys)]
        for _, fam, layer in sorted(at):
            if all(fam != o[1] for o in out):
                out.append((code, fam, layer))
    return out


def xid_families(findings: Sequence[Finding]) -> list[str]:
    """The families an expert checks next for the XID codes among ``findings`` (see _XID_LEADS)."""
    return [fam for _, fam, _ in _xid_leads(findings)]


def next_reason(family: str, findings: Sequence[Finding]) -> Said | None:
    """Why ``family`` is checked next after a cause resting on ``findings``: an XID code's catalog
    entry names its layer, or the exit status most often has its cause there (None: neither)."""
    for code, fam, layer in _xid_leads(findings):
        if fam == family:
            return Said(f"checked next: NVIDIA's XID catalog lists {layer} among the causes of XID {code}",
                        f"下一步排查：NVIDIA 的 XID 目录把{layer.zh}列为 XID {code} 的可能原因之一")
    why = exit_reason(family, findings)
    if why is not None:
        return Said(f"checked next: the exit status in the log ({why}) most often has its cause in this layer",
                    f"下一步排查：日志里的退出状态（{why.zh}）最常由这一层引起")
    return None


def _retries(sig_hits: dict, soft: Collection[tuple[str, int]]) -> int:
    """The most retry notices one process printed (a retry each rank prints once at start-up is a
    race; one process retrying again and again is stuck). A process is its file, host, rank and pid
    as far as the line says them."""
    per: Counter[tuple] = Counter()
    for line, _ in sig_hits.values():
        if (line.source, line.line_no) in soft or "retrying" in line.text:
            per[(line.source, line.node, line.rank, getattr(line, "pid", None))] += 1
    return max(per.values(), default=0)


def _info_only(text: str) -> bool:
    """An NCCL INFO line that is not one of the error-return traces ("misc/socket.cc:581 -> 2")
    NCCL prints only while an error unwinds."""
    return _NCCL_INFO.match(text) is not None


CATALOG_TAG = "catalog:"


def _hit_text(pattern: str) -> str:
    return str(_hit_said(pattern))


def _hit_said(pattern: str) -> Said:
    if pattern.startswith(CATALOG_TAG):
        name = pattern[len(CATALOG_TAG):]
        return Said(f"catalog message {name}", f"消息目录条目 {name}")
    return Said(f"signature /{pattern}/", f"特征 /{pattern}/")


def _source_kind(source: str) -> str:
    """Training logs count as one source whatever their file name; collectors by their name.

    Node collectors use DESIGN.md's bundle names, and cross-node comparison is "compare"; a
    training log is a file name (or "paste"), so anything with a dot or a slash is a log.
    """
    return source if source in _COLLECTOR_SOURCES else "log"


_COLLECTOR_SOURCES = {
    "kernel-log", "ibstat", "ibstatus", "ip-link", "df", "free", "ulimit-l", "nvidia-smi", "nvidia-smi-query",
    "nvidia-smi-q", "nvidia-smi-topo", "nvml", "iostat", "ethtool-S", "perfquery", "processes", "compare",
}


def _conditions(rule: dict[str, Any]) -> list[str]:
    return [k for k in rule if k not in ("kind", "rules_out", "weight")]


def _rule_text(rule: dict[str, Any]) -> str:
    conds = ", ".join(f"{k}={v}" for k, v in rule.items() if k not in ("kind", "rules_out", "weight"))
    return f"{rule['kind']}({conds})" if conds else rule["kind"]


def _first_line(cause: Cause) -> int:
    nums = [e.line_no for e in cause.evidence if e.line_no is not None]
    return min(nums) if nums else 1 << 30


def _build_automaton(anchored: dict[str, list]):
    try:
        import ahocorasick  # type: ignore[import-not-found]
    except ImportError:  # the plain substring loop is slower but equivalent
        return None
    if not anchored:
        return None
    automaton = ahocorasick.Automaton()
    for anchor in anchored:
        automaton.add_word(anchor, anchor)
    automaton.make_automaton()
    return automaton
