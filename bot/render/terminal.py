"""Terminal output with rich: colour on a terminal, plain text when piped."""

from __future__ import annotations

from typing import Any, TextIO

from bot.messages import t
from bot.render.markdown import _estimate_line

TIER_STYLE = {"self": "green", "remote": "cyan", "onsite": "yellow", "vendor": "magenta"}


def _conf_style(conf: float) -> str:
    return "bold red" if conf >= 0.8 else "bold yellow" if conf >= 0.6 else "bold"


def render(doc: dict[str, Any], file: TextIO | None = None) -> None:
    from rich.console import Console
    from rich.text import Text

    console = Console(file=file, highlight=False, soft_wrap=True)
    lang = doc["lang"]
    esc = doc.get("escalation")
    if esc:
        console.print(Text(f"{esc['title']}: {esc['advice']}", style="bold magenta"))
        for r in esc["reasons"]:
            console.print(Text(f"  - {r['text']}", style="magenta"))
        console.print()
    for i, cause in enumerate(doc["causes"]):
        head = t("probable_cause", lang) if i == 0 else f"{t('other_causes', lang)} #{i + 1}"
        if cause.get("alternative"):
            head += f" ({t('alternative', lang)})"
        console.print(Text.assemble((f"{head}: ", "bold"), (cause["title"], "bold underline"),
                                    f"  [{cause['category']}] ", (f"{t('confidence', lang)} {cause['confidence']:.2f}",
                                                                  _conf_style(cause["confidence"]))))
        if i > 0 and not cause.get("explain"):
            console.print(Text(f"  {cause['id']}", style="dim"))
            continue
        console.print(Text(f"  {cause['id']}", style="dim"))
        console.print(Text("  " + cause["cause"]))
        for x in cause.get("xid", []):
            console.print(Text("  • " + t("xid_detail", lang, code=x["code"], name=x["name"], action=x["action"])))
        console.print(Text(f"\n  {t('evidence', lang)}", style="bold"))
        for ev in cause["evidence"][:6]:
            where = " ".join(x for x in (ev.get("source") or "", f":{ev['line_no']}" if ev.get("line_no") else "",
                                           f" rank {ev['rank']}" if ev.get("rank") is not None else "",
                                           f" {ev['node']}" if ev.get("node") else "") if x)
            console.print(Text(f"    {where}", style="dim"))
            console.print(Text(f"      {ev['line'][:300]}", style="cyan"))
        console.print(Text(f"\n  {t('next_commands', lang)}", style="bold"))
        for n, cmd in enumerate(cause["next_commands"], 1):
            console.print(Text.assemble(f"    {n}. ", (cmd["command"], "green"), f"\n       {cmd['why']}"))
        console.print(Text(f"\n  {t('fix', lang)}", style="bold"))
        for f in cause["fix"]:
            console.print(Text(f"    - {f}"))
        sup = cause["support"]
        console.print(Text.assemble(f"\n  {t('support', lang)}: ", (sup["tier_name"], TIER_STYLE.get(sup["tier"], "")),
                                    f" — {sup['why']}"))
        if sup.get("change_reason"):
            console.print(Text("    " + t("tier_changed", lang, old=sup["changed_from"], why=sup["change_reason"])))
        if sup.get("drivers"):
            console.print(Text(f"    {t('cost_drivers', lang)}: " + ", ".join(
                d["name"] + (f" ({d['shown']})" if d.get("shown") else "") for d in sup["drivers"])))
        est = _estimate_line(sup.get("estimate"), lang)
        if est:
            console.print(Text(f"    {t('estimate', lang)}: {est}"))
        if cause.get("explain"):
            console.print(Text(f"\n  {t('why_ranked', lang)}", style="bold"))
            for e in cause["explain"]:
                console.print(Text(f"    {e}"))
        console.print()
    for sim in doc.get("similar") or []:
        console.print(Text.assemble((f"{t('similar', lang)}: ", "bold"), sim["text"]))
    if doc.get("similar"):
        console.print()
    if not doc["causes"]:
        console.print(Text(doc["message"], style="bold yellow"))
        console.print(Text(f"\n{t('generic_steps', lang)}", style="bold"))
        for n, s in enumerate(doc["generic_next_steps"], 1):
            console.print(Text.assemble(f"  {n}. ", (s["command"], "green"), f"\n     {s['why']}"))
        console.print()
    for cand in doc.get("candidates", []):
        console.print(Text(f"  below threshold: {cand['id']} {cand['confidence']:.2f} — " + "; ".join(cand["explain"]),
                           style="dim"))
    _nodes(console, doc, Text)
    fe = doc.get("first_error")
    if fe:
        who = ", ".join(x for x in (f"rank {fe['rank']}" if fe.get("rank") is not None else "", fe.get("node") or "",
                                    f"{fe.get('source')}:{fe['line_no']}") if x)
        console.print(Text.assemble((f"{t('first_error', lang)}: ", "bold"), who))
        console.print(Text(f"  {fe['line'][:300]}", style="red"))
        console.print(Text(f"  {t('first_error_note', lang)}", style="dim"))
    for w in doc.get("warnings", []):
        console.print(Text(f"{t('warnings', lang)}: {w}", style="yellow"))
    s = doc["stats"]
    if s["sources"]:
        console.print(
            Text(t("scanned", lang, lines=s["lines"], mb=s["bytes"] / 1e6, sources=", ".join(s["sources"]),
                   secs=s["seconds"]), style="dim"))


def _nodes(console, doc: dict[str, Any], Text) -> None:
    lang = doc["lang"]
    nodes = doc.get("nodes") or []
    if nodes:
        ok = [n for n in nodes if n["status"] == "ok"]
        bad = [n for n in nodes if n["status"] != "ok"]
        console.print(Text.assemble((f"{t('nodes', lang)}: ", "bold"), t("nodes_ok", lang, n=len(ok))))
        if bad:
            console.print(Text(f"  {t('nodes_not_checked', lang)}:", style="yellow"))
            for n in bad:
                console.print(Text(f"    {n['node']:20} {n['status']:12} {n['detail'][:200]}", style="yellow"))
    if doc.get("odd_nodes"):
        console.print(Text(f"{t('odd_one_out', lang)}:", style="bold"))
        for odd in doc["odd_nodes"]:
            console.print(Text(f"  {odd['text']}"))
