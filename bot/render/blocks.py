"""Slack Block Kit: the threaded reply, the collection progress message, App Home and the runbook modal.

Everything is built from the reply document of :func:`bot.render.as_dict`; every word comes from
:mod:`bot.messages`. Slack's limits are enforced here, not hoped for: at most 50 blocks a message,
3000 characters in a section, 150 in a header, 2000 in a button value. When something does not
fit it is cut at a line (or list item) boundary, a context block says the rest is in the full
report, and ``Reply.overflow`` is set so the caller uploads ``report_markdown``. Nothing is
dropped silently, and a node that could not be checked is always named or counted.

Text that came from a log or a node is escaped for mrkdwn (``&``, ``<``, ``>``), so a log line
cannot mention a user or a channel, and code blocks are built so that a triple backtick inside
a line cannot close them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable

from bot.messages import t
from bot.render import (culprit_line, first_error_also, first_error_is_evidence, first_error_label, markdown,
                        nodes_line)
from bot.render.markdown import _estimate_line
from knowledge.loader import CATEGORIES

MAX_BLOCKS = 50
MAX_SECTION = 3000
MAX_HEADER = 150
MAX_BUTTON_VALUE = 2000
MAX_VIEW_BLOCKS = 100
MAX_LOG_LINE = 1000      # one log line as shown in Slack; the full report keeps it whole
MAX_DETAIL = 200         # one node's failure detail, one warning
MAX_WARNINGS = 5
MAX_EVIDENCE = 8         # evidence lines of the top cause shown in Slack
MAX_OTHER_CAUSES = 10
MAX_NODE_SECTIONS = 3    # sections listing unchecked nodes one by one; the rest are counted and named compactly


STATUS_EMOJI = {
    "connecting": ":hourglass_flowing_sand:",
    "running": ":arrows_counterclockwise:",
    "ok": ":white_check_mark:",
    "unreachable": ":x:",
    "auth-failed": ":closed_lock_with_key:",
    "timeout": ":alarm_clock:",
    "partial": ":warning:",
}
PENDING = ("connecting", "running")
OUTCOME_EMOJI = {"confirmed": ":white_check_mark:", "not-it": ":no_entry_sign:", "open": ":grey_question:"}

# the buttons of a reply; their action_ids are what bot/slack listens for
ACTION_CONFIRM = "feedback_confirm"
ACTION_REJECT = "feedback_reject"
ACTION_COLLECT = "collect_nodes"
ACTION_RUNBOOK = "add_runbook"
ACTION_REPORT = "full_report"
ACTIONS_BLOCK_ID = "triage_actions"
RUNBOOK_CALLBACK = "add_runbook"
RUNBOOK_FIELDS = ("title", "category", "signature", "cause", "fix", "next_commands")


@dataclass
class Reply:
    text: str
    blocks: list[dict[str, Any]]
    overflow: bool
    report_markdown: str = field(repr=False)


# --- text helpers -------------------------------------------------------------------------------

def escape(text: Any) -> str:
    """Escape the three characters Slack's mrkdwn treats as control characters."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _esc_clip(text: Any, limit: int) -> tuple[str, bool]:
    """Escape ``text`` and keep it within ``limit`` characters without splitting an entity."""
    out = escape(text)
    if len(out) <= limit:
        return out, False
    kept, size = [], 0
    for ch in str(text):
        piece = escape(ch)
        if size + len(piece) > limit - 1:
            break
        kept.append(piece)
        size += len(piece)
    return "".join(kept) + "…", True


def _defuse_backticks(text: str) -> str:
    # a zero-width space between neighbouring backticks: no ``` survives to close the fence
    return re.sub(r"`(?=`)", "`\u200b", text)


def code_block(text: Any, limit: int = MAX_LOG_LINE) -> tuple[str, bool]:
    """A fenced code block holding ``text`` escaped; returns (mrkdwn, whether the text was cut)."""
    body, cut = _esc_clip(text, limit)
    return f"```\n{_defuse_backticks(body)}\n```", cut


def _inline_code(command: str) -> str:
    if "`" in command or "\n" in command:
        return code_block(command)[0]
    return f"`{escape(command)}`"


def _label(text: str, lang: str) -> str:
    """``text:`` followed by the space the language wants (none after a full-width colon)."""
    return escape(t("label", lang, label=text)) + ("" if lang == "zh" else " ")


def _one_line(text: Any) -> str:
    return " ".join(str(text).split())


def _plain(text: str, limit: int) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    return text[:limit - 1] + "…", True


class _Blocks:
    """Blocks with priorities: when over budget the least important go first, and that is recorded."""

    def __init__(self) -> None:
        self.items: list[tuple[int, dict[str, Any]]] = []
        self.overflow = False

    def add(self, block: dict[str, Any], prio: int) -> None:
        """Add a block; a higher ``prio`` number gives way first when the message is full."""
        self.items.append((prio, block))

    def sections(self, units: Iterable[str], prio: int, *, head: str | None = None,
                 more_prio: int | None = None, max_items: int | None = None, lang: str = "en") -> None:
        """Pack text units into sections of at most 3000 characters (see :func:`pack`).

        Sections after the first get ``more_prio``, so a long list gives way before the parts
        that matter more. Beyond ``max_items`` units, one line counts the rest.
        """
        units = list(units)
        if max_items is not None and len(units) > max_items:
            units = units[:max_items] + [f"_{escape(t('more_in_report', lang, n=len(units) - max_items))}_"]
            self.overflow = True
        texts = pack(([f"*{escape(head)}*"] if head else []) + units, self)
        for i, text in enumerate(texts):
            self.add(section(text), prio if i == 0 or more_prio is None else more_prio)

    def fit(self, budget: int) -> list[dict[str, Any]]:
        items = list(self.items)
        while len(items) > budget:
            worst = max(range(len(items)), key=lambda i: (items[i][0], i))
            self.overflow = True
            del items[worst]
        return [b for _, b in items]


def pack(units: list[str], sink: Any = None, limit: int = MAX_SECTION) -> list[str]:
    """Join units with newlines into texts of at most ``limit`` characters, cutting only at line boundaries."""
    texts: list[str] = []
    cur = ""
    for unit in units:
        if len(unit) > limit:
            unit = _cut_lines(unit, limit)
            if sink is not None:
                sink.overflow = True
        if cur and len(cur) + 1 + len(unit) > limit:
            texts.append(cur)
            cur = unit
        else:
            cur = f"{cur}\n{unit}" if cur else unit
    if cur:
        texts.append(cur)
    return texts


def _cut_lines(text: str, limit: int) -> str:
    """Keep the whole lines of ``text`` that fit in ``limit``, closing a code fence left open."""
    kept: list[str] = []
    size = 0
    for line in text.split("\n"):
        extra = len(line) + (1 if kept else 0)
        if size + extra > limit - 4:  # room to close an open fence
            break
        kept.append(line)
        size += extra
    if not kept:  # a single line longer than the limit: cut it, without splitting an &entity;
        cut = text[:limit - 1]
        amp = cut.rfind("&", len(cut) - 5)
        if amp != -1 and ";" not in cut[amp:]:
            cut = cut[:amp]
        return cut + "…"
    if sum(1 for line in kept if line == "```") % 2:
        kept.append("```")
    return "\n".join(kept)


def section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def context(text: str) -> dict[str, Any]:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text[:MAX_SECTION]}]}


def header(text: str) -> tuple[dict[str, Any], bool]:
    text, cut = _plain(text, MAX_HEADER)
    return {"type": "header", "text": {"type": "plain_text", "text": text, "emoji": True}}, cut


def button(label: str, action_id: str, value: str, style: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "button", "action_id": action_id,
                           "text": {"type": "plain_text", "text": _plain(label, 75)[0], "emoji": True},
                           "value": value[:MAX_BUTTON_VALUE]}
    if style:
        out["style"] = style
    return out


def button_value(incident_id: str | None, cause_id: str | None) -> str:
    """What every reply button carries: ``<incident id>:<cause id>`` (either part may be empty)."""
    return f"{incident_id or ''}:{cause_id or ''}"


def parse_button_value(value: str) -> tuple[str | None, str | None]:
    """The inverse of :func:`button_value`: (incident id, cause id), None for an empty part."""
    incident, _, cause = (value or "").partition(":")
    return incident or None, cause or None


def _source_name(source: str | None) -> str:
    if not source:
        return ""
    return os.path.basename(source) if "/" in source else source


def _where(item: dict[str, Any], lang: str) -> str:
    parts = [_source_name(item.get("source"))]
    if item.get("line_no"):
        parts.append(t("where.line", lang, n=item["line_no"]))
    if item.get("rank") is not None:
        parts.append(t("where.rank", lang, n=item["rank"]))
    if item.get("node"):
        parts.append(t("where.node", lang, n=item["node"]))
    return " · ".join(p for p in parts if p)


# --- the reply ----------------------------------------------------------------------------------

def render(doc: dict[str, Any], *, incident_id: str | None = None, actions: bool = True) -> Reply:
    """The threaded reply for one diagnosis document (``bot.render.as_dict``)."""
    lang = doc.get("lang", "en")
    out = _Blocks()
    causes = doc.get("causes") or []
    top = causes[0] if causes else None

    if top:
        title = t("slack_header", lang, title=top["title"], conf=top["confidence"])
        text = t("slack_fallback", lang, title=top["title"], category=top["category"], conf=top["confidence"])
    else:
        title = t("no_cause_title", lang)
        text = title
    head, cut = header(title)
    out.overflow |= cut
    out.add(head, 0)

    esc = doc.get("escalation")
    if esc:
        lines = [f":rotating_light: *{escape(esc['title'])}* — {escape(esc['advice'])}"]
        lines += [f"• {escape(r['text'])}" for r in esc.get("reasons") or []]
        out.sections(["\n".join(lines)], 0)
    if top:
        category = escape(t(f"category.{top['category']}", lang)) + f" ({escape(top['category'])})"
        meta = [f"`{escape(top['id'])}`", category]
        if top.get("basis") == "words":
            meta.append(escape(t("words_only", lang)))
        if doc.get("job"):
            meta.append(escape(t("where.job", lang, n=doc["job"])))
        out.add(context(" · ".join(meta)), 0)
        _top_cause(out, top, doc, lang)
    else:
        out.sections([escape(doc.get("message") or t("no_cause", lang))], 0)
        steps = [f"{n}. {_inline_code(s['command'])} — {escape(s['why'])}"
                 for n, s in enumerate(doc.get("generic_next_steps") or [], 1)]
        out.sections(steps, 1, head=t("generic_steps", lang), more_prio=6)

    similar = [f":repeat: {escape(s['text'])}" for s in doc.get("similar") or []]
    if similar:
        out.sections(similar, 1, head=t("similar", lang), more_prio=6, max_items=3, lang=lang)
    if not top:
        _first_error(out, doc, lang)
        who = culprit_line(doc, lang)
        if who:
            out.sections([f":dart: *{escape(who)}*"], 1)
    if len(causes) > 1:
        conf = escape(t("confidence", lang))
        lines = [f"• {escape(c['title'])} — {conf} {c['confidence']:.2f} (`{escape(c['id'])}`)" for c in causes[1:]]
        out.sections(lines, 4, head=t("other_causes", lang), more_prio=8, max_items=MAX_OTHER_CAUSES, lang=lang)
    _nodes(out, doc, lang)
    _warnings(out, doc.get("warnings") or [], lang)

    tail: list[dict[str, Any]] = []
    hint = doc.get("collect_hint")
    offer_collect = actions and bool(hint) and not doc.get("nodes")
    if offer_collect:
        tail.append(context(escape(t("collect_hint", lang, hint=_plain(str(hint), 300)[0]))))
    if actions:
        value = button_value(incident_id, top["id"] if top else None)
        buttons = []
        if top:
            buttons += [button(t("btn.confirm", lang), ACTION_CONFIRM, value, "primary"),
                        button(t("btn.reject", lang), ACTION_REJECT, value)]
        if offer_collect:
            buttons.append(button(t("btn.collect", lang), ACTION_COLLECT, value))
        buttons += [button(t("btn.runbook", lang), ACTION_RUNBOOK, value),
                    button(t("btn.report", lang), ACTION_REPORT, value)]
        tail.append({"type": "actions", "block_id": ACTIONS_BLOCK_ID, "elements": buttons})

    blocks = out.fit(MAX_BLOCKS - len(tail) - 1)  # one kept free for the overflow note
    if out.overflow:
        blocks.append(context(":page_facing_up: " + escape(t("overflow_note", lang))))
    blocks += tail
    return Reply(text=escape(text), blocks=blocks, overflow=out.overflow, report_markdown=markdown.render(doc))


def _top_cause(out: _Blocks, cause: dict[str, Any], doc: dict[str, Any], lang: str) -> None:
    """The top cause in the terminal summary's order: who to look at, the evidence, the first error,
    the commands and the support tier first; why (the cause, the XIDs) and the fix after them."""
    who = culprit_line(doc, lang)
    if who:
        out.sections([f":dart: *{escape(who)}*"], 1)
    units = []
    for ev in cause.get("evidence") or []:
        block, cut = code_block(ev.get("line", ""))
        out.overflow |= cut
        where = _esc_clip(_where(ev, lang), 300)[0]
        units.append((f"_{where}_\n" if where else "") + block)
    if units:
        out.sections(units, 1, head=t("evidence", lang), more_prio=7, max_items=MAX_EVIDENCE, lang=lang)
    _first_error(out, doc, lang)

    steps = [f"{n}. {_inline_code(c['command'])} — {escape(c.get('why') or '')}"
             + (f"\n    :warning: *{escape(t('caution', lang))}*: {escape(c['caution'])}" if c.get("caution") else "")
             for n, c in enumerate(cause.get("next_commands") or [], 1)]
    if steps:
        out.sections(steps, 1, head=t("next_commands", lang), more_prio=5)
    _support(out, cause, lang)
    paragraphs = [escape(p) for p in str(cause.get("cause") or "").split("\n") if p.strip()]
    if paragraphs:
        out.sections(paragraphs, 1, head=t("why_cause", lang), more_prio=3)
    xids = [f"• {escape(t('xid_detail', lang, code=x['code'], name=x['name'], action=x['action']))}"
            for x in cause.get("xid") or []]
    if xids:
        out.sections(xids, 2, more_prio=6)
    fixes = cause.get("fix") or []
    if isinstance(fixes, str):
        fixes = [fixes]
    if fixes:
        out.sections([f"• {escape(f)}" for f in fixes], 2, head=t("fix", lang), more_prio=5)


def _support(out: _Blocks, cause: dict[str, Any], lang: str) -> None:
    sup = cause.get("support") or {}
    if not sup:
        return
    tier = escape(sup.get("tier_name") or sup.get("tier"))
    lines = [f"*{escape(t('label', lang, label=t('support', lang)))}* *{tier}* — {escape(sup.get('why') or '')}"]
    if sup.get("change_reason"):
        lines.append("• " + escape(t("tier_changed", lang, old=sup.get("changed_from"), why=sup["change_reason"])))
    if sup.get("drivers"):
        names = [(d.get("name") or d.get("driver", "")) + (f" ({d['shown']})" if d.get("shown") else "")
                 for d in sup["drivers"]]
        lines.append(f"• {_label(t('cost_drivers', lang), lang)}" + escape(", ".join(names)))
    est = _estimate_line(sup.get("estimate"), lang)
    if est:
        lines.append(f"• {_label(t('estimate', lang), lang)}{escape(est)}")
    out.sections(lines, 2, more_prio=6)


def _first_error(out: _Blocks, doc: dict[str, Any], lang: str) -> None:
    fe = doc.get("first_error")
    if not fe:
        return
    if first_error_is_evidence(doc):
        return  # the evidence line above is the first error: said once
    block, cut = code_block(fe.get("line", ""))
    out.overflow |= cut
    where = _esc_clip(_where(fe, lang), 300)[0]
    text = f"*{escape(first_error_label(fe, lang, len((doc.get('stats') or {}).get('sources') or [])))}*" + (f" — _{where}_" if where else "") + "\n" + block
    also = first_error_also(fe, lang)
    if also:
        text += "\n" + escape(also)
    out.sections([text], 2)
    if len((doc.get("stats") or {}).get("sources") or []) > 1 or fe.get("rank") is not None:
        out.add(context(escape(t("first_error_note", lang))), 3)


def _nodes(out: _Blocks, doc: dict[str, Any], lang: str) -> None:
    nodes = doc.get("nodes") or []
    if nodes:
        ok = [n for n in nodes if n.get("status") == "ok"]
        bad = [n for n in nodes if n.get("status") != "ok"]
        summary = f"*{escape(t('label', lang, label=t('nodes', lang)))}* {escape(nodes_line(nodes, lang))}"
        if bad:
            counts: dict[str, int] = {}
            for n in bad:
                counts[n.get("status", "?")] = counts.get(n.get("status", "?"), 0) + 1
            summary += " · " + ", ".join(f"{_emoji(s)} {c} {escape(_status(s, lang))}" for s, c in counts.items())
        out.add(section(summary), 0)
        if bad:
            texts, cut = _unchecked(bad, t("nodes_not_checked", lang), lang)
            out.overflow |= cut
            for text in texts:
                out.add(section(text), 0)
    odd = [f"• {escape(o.get('text') or o.get('node'))}" for o in doc.get("odd_nodes") or []]
    if odd:
        out.sections(odd, 3, head=t("odd_one_out", lang), more_prio=8)


def _unchecked(bad: list[dict[str, Any]], heading: str, lang: str) -> tuple[list[str], bool]:
    """Sections naming each node that could not be checked, with its status and reason.

    Beyond :data:`MAX_NODE_SECTIONS` the rest are counted and named in one line (never dropped);
    returns (texts, whether anything was shortened).
    """
    lines = [f"{_emoji(n.get('status'))} `{escape(n.get('node'))}` {escape(_status(n.get('status'), lang))} — "
             + _esc_clip(_one_line(n.get("detail") or ""), MAX_DETAIL)[0] for n in bad]
    texts = pack([f"*{escape(heading)}*"] + lines)
    if len(texts) <= MAX_NODE_SECTIONS:
        return texts, False
    texts = texts[:MAX_NODE_SECTIONS - 1]
    shown = sum(x.count("\n") + 1 for x in texts) - 1  # minus the heading line
    rest = bad[shown:]
    note, _ = _esc_clip(t("nodes_not_checked_more", lang, n=len(rest),
                          names=", ".join(str(n.get("node")) for n in rest)), MAX_SECTION)
    return texts + [note], True


def _emoji(status: str | None) -> str:
    return STATUS_EMOJI.get(status or "", ":grey_question:")


def _status(status: str | None, lang: str) -> str:
    try:
        return t(f"status.{status}", lang)
    except KeyError:
        return str(status)


def _warnings(out: _Blocks, warnings: list[str], lang: str) -> None:
    if not warnings:
        return
    lines = []
    for w in warnings[:MAX_WARNINGS]:
        text, cut = _esc_clip(_one_line(w), MAX_DETAIL)
        out.overflow |= cut
        lines.append(f"• {text}")
    if len(warnings) > MAX_WARNINGS:
        lines.append(escape(t("more_in_report", lang, n=len(warnings) - MAX_WARNINGS)))
        out.overflow = True
    out.add(context(f":warning: *{escape(t('warnings', lang))}*\n" + "\n".join(lines)), 4)


# --- progress message -----------------------------------------------------------------------------

def progress_blocks(job: str | None, nodes: list[dict[str, Any]], lang: str) -> tuple[str, list[dict[str, Any]]]:
    """The in-channel progress message, edited in place as each node moves on.

    ``nodes``: ``[{"node", "status", "detail"?}]`` with status connecting / running / ok /
    unreachable / auth-failed / timeout / partial. Returns (fallback text, blocks).
    """
    total = len(nodes)
    done = sum(1 for n in nodes if n.get("status") not in PENDING)
    finished = total > 0 and done == total
    if job:
        title = t("progress_done_job" if finished else "progress_job", lang, job=job)
    elif total == 1:
        title = t("progress_done_node" if finished else "progress_node", lang, node=str(nodes[0].get("node")))
    else:
        title = t("progress_done_nodes" if finished else "progress_nodes", lang, n=total)
    counts_line = t("progress_counts", lang, done=done, total=total)
    blocks: list[dict[str, Any]] = [header(title)[0]]
    if not nodes:
        blocks.append(context(":hourglass_flowing_sand: " + escape(t("progress_resolving", lang))))
        return escape(title), blocks

    order = ["ok", "running", "connecting", "partial", "timeout", "auth-failed", "unreachable"]
    by_status: dict[str, list[str]] = {}
    for n in nodes:
        by_status.setdefault(n.get("status") or "?", []).append(str(n.get("node")))
    statuses = sorted(by_status, key=lambda s: order.index(s) if s in order else len(order))
    summary = " · ".join(f"{_emoji(s)} {len(by_status[s])} {escape(_status(s, lang))}" for s in statuses)
    blocks.append(context(f"*{escape(counts_line)}* · {summary}"))

    # every node by name, grouped by status, in at most a few sections
    lines = []
    for s in statuses:
        names, _ = _esc_clip(", ".join(by_status[s]), 1500)
        lines.append(f"{_emoji(s)} *{escape(_status(s, lang))}* ({len(by_status[s])}): {names}")
    blocks += [section(x) for x in pack(lines)]

    bad = [n for n in nodes if n.get("status") not in PENDING + ("ok",)]
    if bad:
        blocks += [section(x) for x in _unchecked(bad, t("progress_problems", lang), lang)[0]]
    return escape(t("label", lang, label=title) + " " + counts_line), blocks


# --- App Home -------------------------------------------------------------------------------------

def _when(created: str | None) -> str:
    """Slack's date token (shown in the reader's time zone), falling back to the stored ISO text."""
    if not created:
        return ""
    try:
        stamp = int(datetime.fromisoformat(created).timestamp())
    except ValueError:
        return escape(created)
    return f"<!date^{stamp}^{{date_short_pretty}} {{time}}|{escape(created)}>"


def home_view(recent: list[dict[str, Any]], top_causes: list[tuple[str, int]], runbook_size: int,
              lang: str) -> dict[str, Any]:
    """App Home. ``recent`` rows as ``knowledge.runbook.Runbook.recent`` returns them (id, created,
    top_cause, category, confidence, outcome, job); a ``title`` or ``when`` key is used if present."""
    blocks: list[dict[str, Any]] = [header(t("heading", lang))[0]]
    blocks.append(section(f"*{escape(t('home_recent', lang))}*"))
    if recent:
        lines = []
        for r in recent:
            title = r.get("title") or r.get("top_cause") or t("no_cause_title", lang)
            outcome = r.get("outcome") or "open"
            when = r.get("when") and escape(r["when"]) or _when(r.get("created"))
            parts = [f"`{escape(r.get('id'))}`", when, escape(title)]
            if r.get("job"):
                parts.append(escape(t("where.job", lang, n=r["job"])))
            label = t(f"outcome.{outcome}", lang) if outcome in OUTCOME_EMOJI else outcome
            parts.append(f"{OUTCOME_EMOJI.get(outcome, ':grey_question:')} {escape(label)}")
            lines.append(" · ".join(p for p in parts if p))
        blocks += [section(x) for x in pack(lines)][:40]
    else:
        blocks.append(context(escape(t("home_no_incidents", lang))))
    blocks.append({"type": "divider"})
    blocks.append(section(f"*{escape(t('home_top', lang))}*"))
    if top_causes:
        lines = [f"{n}. {escape(t('home_top_line', lang, cause=cause, n=count))}"
                 for n, (cause, count) in enumerate(top_causes, 1)]
        blocks += [section(x) for x in pack(lines)][:40]
    else:
        blocks.append(context(escape(t("home_no_top", lang))))
    blocks.append({"type": "divider"})
    blocks.append(context(":books: " + escape(t("home_runbook", lang, n=runbook_size))))
    return {"type": "home", "blocks": blocks[:MAX_VIEW_BLOCKS]}


# --- "Add to runbook" modal -----------------------------------------------------------------------

def runbook_prefill(doc: dict[str, Any], incident_id: str | None) -> dict[str, Any]:
    """What the modal starts with, taken from an incident's reply document."""
    top = (doc.get("causes") or [None])[0] or {}
    fe = doc.get("first_error") or {}
    signature = fe.get("line") or next((e.get("line") for e in top.get("evidence") or []), "")
    return {"incident_id": incident_id, "title": top.get("title", ""), "category": top.get("category"),
            "signature": signature, "cause": top.get("cause", ""), "fix": top.get("fix") or [],
            "next_commands": top.get("next_commands") or []}


def _text_input(name: str, label: str, initial: str, *, multiline: bool = False, optional: bool = False,
                hint: str | None = None, max_length: int = 3000) -> dict[str, Any]:
    element: dict[str, Any] = {"type": "plain_text_input", "action_id": name, "multiline": multiline,
                               "max_length": max_length}
    if initial:
        element["initial_value"] = initial[:max_length]
    block: dict[str, Any] = {"type": "input", "block_id": name, "optional": optional, "element": element,
                             "label": {"type": "plain_text", "text": label}}
    if hint:
        block["hint"] = {"type": "plain_text", "text": hint}
    return block


def runbook_modal(prefill: dict[str, Any], lang: str) -> dict[str, Any]:
    """The "Add to runbook" modal. Values come back in ``view.state.values[name][name]`` for each
    name in :data:`RUNBOOK_FIELDS`; fix is one step per line, next commands one per line with the
    reason after `` # ``. ``private_metadata`` is the incident id."""
    def opt(cat: str) -> dict[str, Any]:
        return {"text": {"type": "plain_text", "text": _plain(f"{t(f'category.{cat}', lang)} · {cat}", 75)[0]},
                "value": cat}

    select: dict[str, Any] = {"type": "static_select", "action_id": "category",
                              "placeholder": {"type": "plain_text", "text": t("category_placeholder", lang)},
                              "options": [opt(c) for c in CATEGORIES]}
    if prefill.get("category") in CATEGORIES:
        select["initial_option"] = opt(prefill["category"])
    fixes = prefill.get("fix") or []
    fix_text = fixes if isinstance(fixes, str) else "\n".join(str(f) for f in fixes)
    cmds = prefill.get("next_commands") or []
    cmd_text = cmds if isinstance(cmds, str) else "\n".join(
        (c["command"] + (f"  # {c['why']}" if c.get("why") else "")) if isinstance(c, dict) else str(c) for c in cmds)
    signature = str(prefill.get("signature") or "").split("\n")[0]
    blocks = [
        context(escape(t("modal_intro", lang))),
        _text_input("title", t("field.title", lang), str(prefill.get("title") or ""), max_length=200),
        {"type": "input", "block_id": "category", "element": select,
         "label": {"type": "plain_text", "text": t("field.category", lang)}},
        _text_input("signature", t("field.signature", lang), signature, hint=t("field.signature_hint", lang)),
        _text_input("cause", t("field.cause", lang), str(prefill.get("cause") or ""), multiline=True),
        _text_input("fix", t("field.fix", lang), fix_text, multiline=True, optional=True),
        _text_input("next_commands", t("field.next_commands", lang), cmd_text, multiline=True, optional=True),
    ]
    return {"type": "modal", "callback_id": RUNBOOK_CALLBACK,
            "private_metadata": str(prefill.get("incident_id") or "")[:3000],
            "title": {"type": "plain_text", "text": _plain(t("modal_title", lang), 24)[0]},
            "submit": {"type": "plain_text", "text": _plain(t("modal_submit", lang), 24)[0]},
            "close": {"type": "plain_text", "text": _plain(t("modal_close", lang), 24)[0]},
            "blocks": blocks}


# --- /runbook ---------------------------------------------------------------------------------------

def runbook_search_blocks(words: str, hits: list, lang: str) -> tuple[str, list[dict[str, Any]]]:
    """Ephemeral results of ``/runbook search <words>``: one line per entry (``knowledge.store.Store.search``)."""
    if not hits:
        text = t("runbook_no_hits", lang, words=words)
        return text, [section(escape(text))]
    head = t("runbook_hits", lang, words=_plain(words, 100)[0])
    lines = [f"• `{escape(e.id)}` {escape(e.title.get(lang) or e.title['en'])} "
             f"_({escape(t(f'origin.{e.origin}', lang))}, {escape(e.category)})_" for e, _ in hits]
    return head, [section(x) for x in pack([f"*{escape(head)}*"] + lines)][:MAX_BLOCKS]


def runbook_entry_blocks(entry, lang: str) -> tuple[str, list[dict[str, Any]]]:
    """Ephemeral ``/runbook <id>``: the entry's title, cause, commands and fix."""
    title = entry.title.get(lang) or entry.title["en"]
    head, _ = header(title)
    out = [head, context(f"`{escape(entry.id)}` · {escape(entry.category)} · "
                         f"{escape(t(f'origin.{entry.origin}', lang))} · {escape(t('tier.' + entry.support['tier'], lang))}")]
    units = [escape(entry.cause.get(lang) or entry.cause["en"])]
    steps = [f"{n}. {_inline_code(c['command'])} — {escape((c.get('why') or {}).get(lang) or '')}"
             for n, c in enumerate(entry.next_commands, 1)]
    fixes = [f"• {escape(f)}" for f in entry.fix.get(lang) or entry.fix["en"]]
    texts = pack(units + [f"*{escape(t('next_commands', lang))}*"] + steps + [f"*{escape(t('fix', lang))}*"] + fixes)
    out += [section(x) for x in texts]
    return title, out[:MAX_BLOCKS]
