"""Terminal output with rich: a summary block first, then the details; colour on a terminal, plain
text when piped; wrapped to the terminal's width (80 columns when it cannot be told) with hanging
indents, so nothing is wider than the window.

The summary block answers the 3 a.m. questions in at most ~12 rows at any width: the cause and how
sure, where (rank, host, file:line), the one line of evidence, the first two commands, the support
tier with its cost, and what else to check. The details follow, each fact once.
"""

from __future__ import annotations

import re

from typing import Any, TextIO

from bot.messages import t
from bot.render import (culprit_line, first_error_also, first_error_is_evidence, first_error_label, nodes_line,
                        printable)
from bot.render.markdown import _estimate_line

TIER_STYLE = {"self": "green", "remote": "cyan", "onsite": "yellow", "vendor": "magenta"}
SUMMARY_COMMANDS = 2
SUMMARY_OTHERS = 2
MAX_FILES_LISTED = 3


def _conf_style(conf: float) -> str:
    # how sure, not how bad: the surest answer is not an alarm
    return "bold green" if conf >= 0.8 else "bold" if conf >= 0.6 else "dim"


def _files(sources: list[str], lang: str) -> str:
    if len(sources) <= MAX_FILES_LISTED:
        return ", ".join(sources)
    return t("files_folded", lang, n=len(sources), first=sources[0], last=sources[-1])


_CJK = re.compile(r"[\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef\u3000-\u303f]")
# no line starts with closing punctuation, none ends with opening punctuation (Chinese line breaking)
_NO_START = set("，。、；：？！）」』】》〉”’.,;:?!)]}%")
_NO_END = set("（「『【《〈“‘([{")


def _wrap_cjk(txt, room: int) -> list:
    """Wrap a rich Text holding Chinese: a line may break between any two Chinese characters, as
    Chinese is written, not only at spaces (rich's wrap treats a run of Chinese as one long word and
    leaves half-empty rows before it); English words inside stay whole. Styles are kept."""
    from rich.cells import get_character_cell_size

    plain = txt.plain
    breaks: list[int] = []
    start, width, last_ok = 0, 0, None
    i = 0
    while i < len(plain):
        ch = plain[i]
        if i > start and (ch == " " or _CJK.match(ch) or _CJK.match(plain[i - 1])) \
                and ch not in _NO_START and plain[i - 1] not in _NO_END:
            last_ok = i
        width += get_character_cell_size(ch)
        if width > room and i > start:
            cut = last_ok if last_ok is not None and last_ok > start else i
            breaks.append(cut)
            while cut < len(plain) and plain[cut] == " ":
                cut += 1
            start, last_ok = cut, None
            width = sum(get_character_cell_size(c) for c in plain[start:i + 1])
        i += 1
    out = []
    for k, ln in enumerate(txt.divide(breaks)):
        lead = len(ln.plain) - len(ln.plain.lstrip(" ")) if k else 0
        row = ln[lead:] if lead else ln
        row.rstrip()
        out.append(row)
    return out


def render(doc: dict[str, Any], file: TextIO | None = None) -> None:
    from rich.console import Console
    from rich.text import Text

    from rich.cells import cell_len

    doc = printable(doc)  # nothing a log or a node printed reaches the terminal as a control sequence
    console = Console(file=file, highlight=False)
    width = console.width
    lang = doc["lang"]
    colon = "：" if lang == "zh" else ": "  # full-width punctuation in Chinese text

    def line(text: Text | str, indent: int = 0, hang: int = 2, style: str = "") -> None:
        """One paragraph, wrapped to the width; continuation rows indented ``hang`` more."""
        txt = text if isinstance(text, Text) else Text(text, style=style)
        if indent + hang + 10 >= width:
            indent = hang = 0
        console.print(_hanging(txt, indent, hang))

    def _hanging(txt: Text, indent: int, hang: int):
        from rich.console import Group

        room = max(width - indent - hang, 10)
        lines = _wrap_cjk(txt, room) if _CJK.search(txt.plain) else txt.wrap(console, room)
        rows = []
        for i, row in enumerate(lines):
            pad = indent if i == 0 else indent + hang
            row.rstrip()
            rows.append(Text(" " * pad) + row)
        return Group(*rows)

    def clipped(text: str | Text, indent: int, style: str = "", tail: bool = False) -> None:
        """One row, cut at the width (the full text is in the JSON and the bundle); ``tail`` keeps
        the end (a file name and line number) rather than the start."""
        txt = text.copy() if isinstance(text, Text) else Text(text, style=style)
        room = max(width - indent, 10)
        if txt.cell_len > room:
            if tail:
                txt = Text("…") + txt[len(txt) - room + 1:]
            else:
                txt.truncate(room - 1)
                txt.append("…")
        console.print(Text(" " * indent) + txt, overflow="ignore", no_wrap=True, crop=True)

    def where(label: str, ev: dict[str, Any], indent: int, style: str = "bold") -> None:
        """``label: rank 3, host, file:line`` on one row; a long file name keeps its end."""
        head = Text.assemble((f"{label}{colon}" if label else "", style),
                             ", ".join(x for x in (f"rank {ev['rank']}" if ev.get("rank") is not None else "",
                                                   str(ev.get("node") or "")) if x))
        src = ev.get("source") or ""
        if src and ev.get("line_no"):
            src = f"{src}:{ev['line_no']}"
        if src:
            if len(head) > len(label) + 2:
                head.append(", ")
            room = max(width - indent - head.cell_len, 12)
            head.append(src if len(src) <= room else "…" + src[len(src) - room + 1:], style="" if label else "dim")
        clipped(head, indent)

    causes = doc["causes"]
    fe = doc.get("first_error")
    esc = doc.get("escalation")

    # ---- the summary block ----------------------------------------------------------------
    if esc:
        line(Text.assemble((f"{esc['title']}{colon}", "bold magenta"), esc["advice"]))
    if causes:
        top = causes[0]
        line(Text.assemble((f"{t('probable_cause', lang)}{colon}", "bold"), (top["title"], "bold"),
                           f"  [{top['category']}] ",
                           (f"{t('confidence', lang)} {top['confidence']:.2f}", _conf_style(top["confidence"]))))
        if top.get("basis") == "words":
            line(Text(t("words_only", lang), style="dim"), indent=2)
        ev = top["evidence"][0] if top["evidence"] else None
        if ev:
            where(t("evidence", lang), ev, 2)
            clipped(ev["line"], 4, "cyan")
        if fe and not first_error_is_evidence(doc):
            where(first_error_label(fe, lang, len((doc.get('stats') or {}).get('sources') or [])), fe, 2)
            clipped(fe["line"], 4, "red")
        also = first_error_also(fe, lang)
        if also:
            clipped(also, 4, "red")
        who = culprit_line(doc, lang)
        if who:
            line(Text(who, style="bold"), indent=2)
        for n, cmd in enumerate(top["next_commands"][:SUMMARY_COMMANDS], 1):
            first = f"{t('run_first', lang)}{colon}"
            label = first if n == 1 else " " * cell_len(first)
            line(Text.assemble(label, f"{n}. ", (cmd["command"], "green"),
                               (f"  ⚠ {t('caution', lang)}", "yellow") if cmd.get("caution") else ""),
                 indent=2, hang=cell_len(label) + 3)
        sup = top["support"]
        est = _estimate_line(sup.get("estimate"), lang)
        line(Text.assemble((f"{t('support', lang)}{colon}", "bold"), (sup["tier_name"], TIER_STYLE.get(sup["tier"], "")),
                           f" — {est}" if est else ""), indent=2)
        label = f"{t('also_check', lang)}{colon}"
        for n, c in enumerate(causes[1:1 + SUMMARY_OTHERS]):
            clipped(Text.assemble((label if n == 0 else " " * cell_len(label), "bold"),
                                  f"[{c['category']}] {c['confidence']:.2f} {c['title']}"), 2)
    else:
        line(Text(doc["message"], style="bold yellow"))
        if fe:
            where(first_error_label(fe, lang, len((doc.get('stats') or {}).get('sources') or [])), fe, 2)
            clipped(fe["line"], 4, "red")
        who = culprit_line(doc, lang)
        if who:  # a hung job with no error yet: the process that is elsewhere is still the answer
            line(Text(who, style="bold"), indent=2)
    console.print(Text("─" * min(width, 80), style="dim"))

    # ---- the details ----------------------------------------------------------------------
    shown = {(e.get("source"), e.get("line_no"), e["line"]) for e in (causes[0]["evidence"][:1] if causes else [])}
    for sim in doc.get("similar") or []:
        line(Text.assemble((f"{t('similar', lang)}{colon}", "bold"), sim["text"]))
    if esc:
        for r in esc["reasons"]:
            line(f"- {r['text']}", indent=2, style="magenta")
    for i, cause in enumerate(causes):
        if i:
            head = f"{t('other_causes', lang)} #{i + 1}"
            if cause.get("alternative"):
                head += f" ({t('alternative', lang)})"
            console.print()
            line(Text.assemble((f"{head}{colon}", "bold"), (cause["title"], "bold"), f"  [{cause['category']}] ",
                               (f"{t('confidence', lang)} {cause['confidence']:.2f}",
                                _conf_style(cause["confidence"]))))
        line(Text(cause["id"], style="dim"), indent=2)
        line(cause["cause"], indent=2, hang=0)
        for x in cause.get("xid", []):
            line("• " + t("xid_detail", lang, code=x["code"], name=x["name"], action=x["action"]), indent=2)
        evs = [e for e in (cause["evidence"][1:6] if i == 0 else cause["evidence"][:3])
               if (e.get("source"), e.get("line_no"), e["line"]) not in shown]
        shown.update((e.get("source"), e.get("line_no"), e["line"]) for e in evs)
        if evs:
            line(Text(t("evidence", lang), style="bold"), indent=2)
            for ev in evs:
                where("", ev, 4)
                clipped(ev["line"], 6, "cyan")
        cmds = cause["next_commands"]
        if cmds:
            line(Text(t("next_commands", lang), style="bold"), indent=2)
            for n, cmd in enumerate(cmds, 1):
                line(Text.assemble(f"{n}. ", (cmd["command"], "green")), indent=4, hang=3)
                line(cmd["why"], indent=7, hang=0)
                if cmd.get("caution"):
                    line(Text.assemble((f"⚠ {t('caution', lang)}{colon}", "yellow bold"), cmd["caution"]), indent=7)
        if cause["fix"]:
            line(Text(t("fix", lang), style="bold"), indent=2)
            for f in cause["fix"]:
                line(f"- {f}", indent=4)
        sup = cause["support"]
        line(Text.assemble((f"{t('support', lang)}{colon}", "bold"), (sup["tier_name"], TIER_STYLE.get(sup["tier"], "")),
                           f" — {sup['why']}"), indent=2)
        if sup.get("change_reason"):
            line(t("tier_changed", lang, old=sup["changed_from"], why=sup["change_reason"]), indent=4)
        if sup.get("drivers"):
            line(f"{t('cost_drivers', lang)}{colon}" + ("、" if lang == "zh" else ", ").join(
                d["name"] + (f" ({d['shown']})" if d.get("shown") else "") for d in sup["drivers"]), indent=4)
        est = _estimate_line(sup.get("estimate"), lang)
        if est:
            line(f"{t('estimate', lang)}{colon}{est}", indent=4)
        if cause.get("explain"):
            line(Text(t("why_ranked", lang), style="bold"), indent=2)
            for e in cause["explain"]:
                line(e, indent=4)
    if not causes:
        line(Text(t("generic_steps", lang), style="bold"))
        for n, s in enumerate(doc["generic_next_steps"], 1):
            line(Text.assemble(f"{n}. ", (s["command"], "green")), indent=2, hang=3)
            line(s["why"], indent=5, hang=0)
    for cand in doc.get("candidates", []):
        line(f"{t('below_threshold', lang)}{colon}{cand['id']} {cand['confidence']:.2f} — "
             + ("；" if lang == "zh" else "; ").join(cand["explain"]),
             indent=2, style="dim")
    console.print()
    _nodes(line, doc, Text)
    if first_error_is_evidence(doc):
        sources = len((doc.get("stats") or {}).get("sources") or [])
        label = first_error_label(fe, lang, sources)
        line(Text.assemble((f"{label}{colon}", "bold"), t("first_error_is_evidence", lang)))
    s = doc["stats"]
    if fe and (len(s["sources"]) > 1 or fe.get("rank") is not None):
        line(Text(t("first_error_note", lang), style="dim"))
    warnings = doc.get("warnings", [])
    if warnings:
        line(Text(f"{t('warnings', lang)} ({len(warnings)}):", style="yellow"))
        for w in warnings:
            line(f"- {w}", indent=2, style="yellow")
    if s["sources"]:
        line(Text(t("scanned", lang, lines=s["lines"], mb=s["bytes"] / 1e6, sources=_files(s["sources"], lang),
                    secs=s["seconds"]), style="dim"))


def _nodes(line, doc: dict[str, Any], Text) -> None:
    lang = doc["lang"]
    nodes = doc.get("nodes") or []
    if nodes:
        ok = [n for n in nodes if n["status"] == "ok"]
        bad = [n for n in nodes if n["status"] != "ok"]
        line(Text.assemble((f"{t('nodes', lang)}{'：' if lang == 'zh' else ': '}", "bold"), nodes_line(nodes, lang)))
        if bad:
            line(Text(f"{t('nodes_not_checked', lang)}:", style="yellow"), indent=2)
            for n in bad:
                line(Text(f"{n['node']} {n['status']} {n['detail'][:200]}", style="yellow"), indent=4)
    if doc.get("odd_nodes"):
        line(Text(f"{t('odd_one_out', lang)}:", style="bold"))
        for odd in doc["odd_nodes"]:
            line(odd["text"], indent=2)
