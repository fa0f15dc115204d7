"""The diagnose API: the one function every face (CLI, Slack) calls.

``Engine`` opens the knowledge store once (building it on first use), compiles the matcher, and
turns parsed evidence into a :class:`Diagnosis`; renderers turn that into text, JSON, Markdown
or Block Kit.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Sequence

from collectors import flight_recorder, trainlog
from collectors.findings import Finding, FirstError, LogLine
from collectors.said import Said, in_lang
from knowledge import catalog as catalog_mod
from knowledge.loader import Entry
from knowledge import vocabulary
from knowledge.match import CONFIDENT, Cause, Evidence, Matcher, next_reason
from knowledge.store import Store
from knowledge.support import RateCard, adjust_tier, drivers_text, job_shape

if TYPE_CHECKING:
    from collectors.bundle import Bundle


# a shell's "command not found" as the collector's whole output (sh: 1: ethtool: not found)
_NOT_FOUND = re.compile(r"^(?:\S*sh|bash): (?:\d+: )?[\w.-]+: (?:command )?not found$")


def parse_node_outputs(bundle: "Bundle") -> tuple[list[Finding], list[str]]:
    """Run each collector's parser over its output in the bundle; compare the nodes.

    Returns the findings (node set on each) and notes for the reply: collectors that could not
    run, and lines a parser could not read. A node that was not reached contributes no findings
    and is reported through ``nodes`` — never as healthy.
    """
    from collectors import healthy
    from collectors.compare import compare
    from collectors.node._text import Note
    from collectors.registry import collectors

    registry = collectors()
    per_node: dict[str, list[Finding]] = {}
    notes: list[str] = []
    said: dict[str, list[str]] = {}  # note -> nodes, so forty nodes without pynvml say it once

    missing: dict[str, list[str]] = {}  # node -> collectors whose command is not installed there

    def note(node: str, text: str) -> None:
        said.setdefault(text, []).append(node)

    unread: dict[str, tuple[int, str, list[str]]] = {}  # collector -> (lines, first line, nodes)

    def fold_notes(node: str, name: str, unparsed: list[str]) -> None:
        """What the tool said it could not check, as it said it; lines not understood, counted."""
        told = [u for u in unparsed if isinstance(u, Note)]
        raw = [u for u in unparsed if not isinstance(u, Note)]
        if told:
            more = f" (+{len(told) - 1} more)" if len(told) > 1 else ""
            note(node, Said(f"{name}: {told[0][:100]}{more}",
                            f"{name}：{told[0][:100]}" + (f"（另有 {len(told) - 1} 条）" if len(told) > 1 else "")))
        if raw:
            count, first, nodes = unread.get(name, (0, raw[0].strip(), []))
            unread[name] = (count + len(raw), first, nodes + [node])

    for node in bundle.nodes.values():
        found: list[Finding] = []
        for name, text in node.outputs.items():
            col = registry.get(name)
            meta = node.meta.get(name, {})
            lines = text.strip().splitlines()
            if meta.get("exit") == 127 or (lines and all(_NOT_FOUND.match(ln.strip()) for ln in lines)):
                missing.setdefault(node.node, []).append(name)
                continue
            if meta.get("timed_out"):
                note(node.node, Said(f"{name} not checked (timed out)", f"{name} 未检查（超时）"))
            if col is None:
                note(node.node, Said(f"no parser for {name}; its output is kept in the bundle",
                                     f"{name} 没有解析器；其输出保存在 bundle 中"))
                continue
            try:
                parsed, unparsed = col.parse(text)
            except Exception as exc:  # noqa: BLE001 - a parser bug must not lose the other nodes
                note(node.node, Said(f"the {name} parser failed ({exc.__class__.__name__}); its output is kept",
                                     f"{name} 解析器出错（{exc.__class__.__name__}）；输出已保留"))
                continue
            for f in parsed:
                f.node = node.node
                f.source = name
            found.extend(parsed)
            fold_notes(node.node, name, unparsed)
        # ibstatus reads the ports ibstat could not: a port both printed is one port
        by_ibstat = {(f.attrs.get("device"), f.attrs.get("port")) for f in found if f.kind == "ib-port"
                     and f.source == "ibstat"}
        per_node[node.node] = [f for f in found if not (f.kind == "ib-port" and f.source == "ibstatus"
                                                        and (f.attrs.get("device"), f.attrs.get("port")) in by_ibstat)]
    # one line per set of missing commands, not one per command: "not checked, not installed: ..."
    for node, names in missing.items():
        note(node, Said(f"not checked, command not installed: {', '.join(names)}",
                        f"未检查，命令未安装：{'、'.join(names)}"))
    for text, nodes in said.items():
        notes.append(Said(f"{text} — {_where(nodes)}", f"{in_lang(text, 'zh')} —— {_where(nodes, 'zh')}"))
    # lines a parser could not read: one line per collector, whatever the number of nodes and lines
    for name, (count, first, nodes) in unread.items():
        lines = "1 line" if count == 1 else f"{count} lines"
        notes.append(Said(f"{name}: {lines} not understood (kept in the bundle), e.g. {first[:100]!r} — {_where(nodes)}",
                          f"{name}：{count} 行无法解析（已保存在 bundle 中），例如 {first[:100]!r} —— "
                          f"{_where(nodes, 'zh')}"))
    for fs in per_node.values():
        healthy.mark(fs)
    findings = [f for fs in per_node.values() for f in fs]
    odd = compare({n: fs for n, fs in per_node.items() if fs})
    healthy.mark_mismatches(odd, per_node)
    findings.extend(odd)
    return findings, notes


def _where(nodes: list[str], lang: str = "en") -> str:
    if lang == "zh":
        return "、".join(nodes[:6]) + (f" 等 {len(nodes)} 个节点" if len(nodes) > 6 else "")
    return ", ".join(nodes[:6]) + (f" and {len(nodes) - 6} more" if len(nodes) > 6 else "")


ALTERNATIVE_FLOOR = 0.3  # weaker evidence an expert would still check next
MAX_ALTERNATIVES = 2


def alternatives(ranked: Sequence[Cause], causes: Sequence[Cause],
                 entry: Callable[[str], Entry | None] = lambda _id: None,
                 next_of: Callable[[Entry], list[str]] = lambda e: list(e.check_next),
                 reason: Callable[[str], Said | None] = lambda _fam: None) -> list[Cause]:
    """Causes below the bar, from categories the reported causes do not cover, that the evidence
    still points at: what an expert would check next when the evidence fits more than one cause.

    First the weaker causes the evidence itself scored; then the families the top cause's entry
    names in ``check_next`` (``next_of``: an entry that names none takes its family's): the readings
    its messages admit (a lost heartbeat: a dead node, a preemption or the network; a kubelet
    eviction: the node's memory or disk). Only beside a confident cause (a paste with no known
    failure keeps "no confident cause"), one per category, marked ``alternative``.
    """
    if not causes:
        return []
    seen = {c.category for c in causes}
    out: list[Cause] = []
    for cause in ranked:
        if len(out) >= MAX_ALTERNATIVES:
            break
        if cause in causes or cause.category in seen or not ALTERNATIVE_FLOOR <= cause.confidence < CONFIDENT:
            continue
        seen.add(cause.category)
        cause.alternative = True
        out.append(cause)
    top = causes[0]
    by_id = {c.id: c for c in ranked}
    for fam in next_of(top.entry):
        if len(out) >= MAX_ALTERNATIVES:
            break
        target = by_id.get(fam)
        if target is None:
            e = entry(fam)
            if e is None:
                continue
            target = Cause(e, 0.0)
        if target.category in seen or target in causes:
            continue
        seen.add(target.category)
        target.confidence = max(target.confidence, ALTERNATIVE_FLOOR)
        if not target.evidence:
            target.evidence = list(top.evidence[:1])
        why = reason(fam)
        if why is not None:
            target.explain.append(why)
        else:
            target.explain.append(Said(f"checked next: the messages behind {top.id} also fit this family",
                                       f"下一步排查：{top.id} 背后的消息也符合这一大类"))
        target.alternative = True
        out.append(target)
    return out


WORDS_CONFIDENCE = CONFIDENT  # the category the failure lines' words name: at the bar, no higher
WORDS_ALTERNATIVE = ALTERNATIVE_FLOOR  # the runners-up: what to check next


def from_words(ranked: list[Cause], readings: Sequence["vocabulary.Reading"],
               entry: Callable[[str], Entry | None]) -> list[Cause]:
    """When nothing known reached the bar: the family of the category the failure lines' words name
    (:mod:`knowledge.vocabulary`) at the bar, the next two categories below it, as alternatives."""
    if not readings:
        return ranked
    by_id = {c.id: c for c in ranked}
    out = list(ranked)
    for i, reading in enumerate(readings[:1 + MAX_ALTERNATIVES]):
        e = entry(reading.family)
        if e is None:
            continue
        cause = by_id.get(e.id)
        if cause is None:
            cause = Cause(e, 0.0)
            out.append(cause)
        conf = WORDS_CONFIDENCE if i == 0 else WORDS_ALTERNATIVE
        cause.confidence = max(cause.confidence, conf)
        cause.support = max(cause.support, reading.score / 10)
        cause.basis = "words"
        words = ", ".join(repr(w) for w in sorted({w for _, w in reading.lines}))
        n, first = len(reading.lines), reading.lines[0][0].line_no
        cause.explain.append(Said(
            f"={conf}: no known message matched; {n} failure line(s) use the words of {reading.category} "
            f"({words}, first on line {first}): a reading from the words only",
            f"={conf}：没有匹配到已知报错；{n} 行报错用的是{reading.category}这一类的词（{words}，"
            f"最早在第 {first} 行）：仅凭用词判断"))
        for line, word in reading.lines:
            if not any(ev.line_no == line.line_no and ev.source == line.source for ev in cause.evidence):
                cause.evidence.append(Evidence(line.source, line.text, line.line_no, line.node, line.rank,
                                               f"words of {reading.category}: {word!r}"))
    out.sort(key=lambda c: -c.confidence)
    return out


@dataclass
class Diagnosis:
    causes: list[Cause]
    candidates: list[Cause]
    findings: list[Finding]
    first_error: FirstError | None
    nodes: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    lines_read: int = 0
    bytes_read: int = 0
    seconds: float = 0.0
    support: dict[str, dict[str, Any]] = field(default_factory=dict)  # cause id -> support block
    job: str | None = None
    signature: str = ""                     # knowledge.learning.signature of this evidence
    similar: list[dict[str, Any]] = field(default_factory=list)  # confirmed past incidents alike
    escalation: Any = None                  # knowledge.escalation.Escalation when a threshold is crossed

    @property
    def confident(self) -> bool:
        return bool(self.causes)


class Engine:
    def __init__(self, *, data_dir: str | None = None, entries: Path | None = None,
                 rate_card: str | None = None, region: str | None = None, gpus: int | None = None,
                 max_causes: int = 5, runbook=None, thresholds=None):
        from knowledge.escalation import DEFAULT

        self.data_dir, self.entries_path = data_dir, entries
        self.store = Store(data_dir, entries=entries)
        self.catalog = catalog_mod.shipped(self.store.directory)
        self.matcher = Matcher(self.store.entries(), self.catalog)
        self.keywords = sorted(self.matcher.anchors())
        self._team_rev = self.store.team_revision()
        self._reload_lock = threading.Lock()
        self._runbook = runbook
        self.thresholds = thresholds or DEFAULT
        self.rate_card = RateCard.load(rate_card) if rate_card else None
        self.region = region
        self.gpus = gpus
        self.max_causes = max_causes

    @property
    def runbook(self):
        """The team runbook in the same database (incidents, feedback, hardware history)."""
        if self._runbook is None:
            from knowledge.runbook import Runbook

            self._runbook = Runbook(self.data_dir)
        return self._runbook

    def refresh(self) -> None:
        """Recompile the matcher when a team entry was added or edited since (kb add, kb import)."""
        try:
            row = self.runbook.conn.execute("SELECT value FROM meta WHERE key = 'team_rev'").fetchone()
        except Exception:  # noqa: BLE001 - no meta table yet, or the runbook is unusable: keep the matcher
            return
        rev = row[0] if row else "0"
        if rev == self._team_rev:
            return
        with self._reload_lock:
            if rev != self._team_rev:
                matcher = Matcher(Store(self.data_dir, entries=self.entries_path).entries(), self.catalog)
                self.matcher, self.keywords, self._team_rev = matcher, sorted(matcher.anchors()), rev

    def diagnose_paths(self, paths: Sequence[str], *, stdin: BinaryIO | None = None) -> Diagnosis:
        started = time.perf_counter()
        parsed = flight_recorder.parse_paths(list(paths), keywords=self.keywords, stdin=stdin)
        return self.diagnose_parsed(parsed, started)

    def diagnose_text(self, text: str, *, source: str = "paste") -> Diagnosis:
        started = time.perf_counter()
        parsed = trainlog.parse_text(text, source=source, keywords=self.keywords)
        return self.diagnose_parsed(parsed, started)

    def diagnose_bundle(self, bundle: "Bundle", extra_logs: Sequence[str] = ()) -> Diagnosis:
        """Diagnose a collection: every node's collector outputs, compared, plus the job's logs."""
        started = time.perf_counter()
        findings, notes = parse_node_outputs(bundle)
        logs = [str(p) for p in bundle.logs] + list(extra_logs)
        if logs:
            parsed = flight_recorder.parse_paths(logs, keywords=self.keywords)
        else:
            parsed = trainlog.ParseResult(findings=[], lines=[], first_error=None, sources=[], bytes_read=0,
                                          lines_read=0, truncated=False, warnings=[])
        # the lines behind node findings (an XID line from a node's kernel log) are matched by the
        # entries' text signatures too, exactly as the same line pasted into a log would be
        seen = set()
        for f in findings:
            key = (f.node, f.source, f.line_no)
            if f.line and f.source != "compare" and not f.normal and key not in seen:
                seen.add(key)
                parsed.lines.append(LogLine(text=f.line, line_no=f.line_no or 0, node=f.node, source=f.source))
        diagnosis = self.diagnose_parsed(parsed, started, extra_findings=findings)
        diagnosis.nodes = [{"node": n.node, "status": n.status, "detail": n.detail}
                           for n in bundle.nodes.values()]
        diagnosis.warnings.extend(notes)
        diagnosis.job = bundle.job
        return diagnosis

    def diagnose_parsed(self, parsed: "trainlog.ParseResult", started: float | None = None,
                        extra_findings: Sequence[Finding] = ()) -> Diagnosis:
        from knowledge import learning

        started = time.perf_counter() if started is None else started
        self.refresh()
        findings = list(parsed.findings) + list(extra_findings)
        hits = self.catalog.scan(parsed.lines)
        findings += self.catalog.findings(hits, findings)
        ranked = self.matcher.match(parsed.lines, findings, parsed.first_error, hits=hits)
        if not any(c.confidence >= CONFIDENT for c in ranked):
            ranked = from_words(ranked, vocabulary.read(parsed.lines, parsed.first_error), self.matcher.entry)
        fe = parsed.first_error
        first_line = fe.line if fe else next((e.line for c in ranked[:1] for e in c.evidence[:1]), "")
        sig = learning.signature(first_line, (f.kind for f in findings))
        verdicts = self._verdicts()
        if verdicts and sig:
            learning.apply(ranked, learning.adjustments(sig, verdicts))
        causes = [c for c in ranked if c.confidence >= CONFIDENT][: self.max_causes]
        top_facts = causes[0].findings if causes else ()
        causes += alternatives(ranked, causes, self.matcher.entry, lambda e: self.matcher.check_next(e, top_facts),
                               lambda fam: next_reason(fam, top_facts))
        candidates = [c for c in ranked if c.confidence < CONFIDENT and c not in causes][:5]
        shape = job_shape(parsed.lines, findings, self.gpus)
        diagnosis = Diagnosis(
            causes=causes, candidates=candidates, findings=findings, first_error=parsed.first_error,
            warnings=list(parsed.warnings), sources=list(parsed.sources), lines_read=parsed.lines_read,
            bytes_read=parsed.bytes_read, signature=sig)
        if verdicts and sig:
            diagnosis.similar = self._similar(learning.similar_incidents(sig, verdicts))
        diagnosis.escalation = self._escalation(findings, fe)
        for cause in causes:
            diagnosis.support[cause.id] = self._support(cause, findings, shape, diagnosis.escalation)
        diagnosis.seconds = time.perf_counter() - started
        from bot import metrics

        metrics.inc("gpu_triage_diagnoses_total", category=causes[0].category if causes else "none")
        metrics.observe("gpu_triage_diagnosis_seconds", diagnosis.seconds)
        return diagnosis

    def _verdicts(self) -> list[dict[str, Any]]:
        try:
            return self.runbook.verdicts()
        except Exception:  # noqa: BLE001 - an unreadable runbook must not stop a diagnosis
            return []

    def _similar(self, groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
        by_id = {e.id: e for e in self.matcher.entries}
        out = []
        for g in groups:
            entry = by_id.get(g["cause_id"])
            fix = entry.fix if entry else {}
            out.append({**g, "title": entry.title if entry else {"en": g["cause_id"], "zh": g["cause_id"]},
                        "fixed_by": {lang: (fix.get(lang) or [""])[0] for lang in ("en", "zh")} if fix else {}})
        return out

    def _escalation(self, findings: Sequence[Finding], fe: FirstError | None):
        from knowledge.escalation import HARDWARE_KINDS, evaluate

        if not any(f.kind in HARDWARE_KINDS and f.node for f in findings):
            return None
        doc = {"findings": [f.to_json() for f in findings], "first_error": fe.to_json() if fe else None}
        try:
            return evaluate(doc, lambda node, since: self.runbook.node_events(node, since=since),
                            thresholds=self.thresholds)
        except Exception:  # noqa: BLE001 - history is a bonus; never lose the diagnosis over it
            import logging

            logging.getLogger("gpu_triage").warning("gpu-triage: repeat-aware escalation failed", exc_info=True)
            return None

    def _support(self, cause: Cause, findings: Sequence[Finding], shape, escalation=None) -> dict[str, Any]:
        base = cause.entry.support.get("tier", "self")
        tier, changed = adjust_tier(base, cause.category, findings)
        if escalation is not None and tier != "vendor":
            tier, changed = "vendor", "the same GPU or node keeps failing (repeat-aware escalation)"
        block: dict[str, Any] = {
            "tier": tier,
            "why": cause.entry.support.get("why", {}),
            "drivers": drivers_text(cause.entry.support.get("drivers", []), shape),
        }
        if changed:
            block["changed_from"] = base
            block["change_reason"] = changed
        if self.rate_card is not None:
            block["estimate"] = self.rate_card.estimate(tier, shape.gpus, self.region, shape.gpus_exact)
        return block
