"""A Markdown page to paste into a ticket."""

from __future__ import annotations

from typing import Any

from bot.messages import t


def _fence(text: str) -> str:
    return "```\n" + text.replace("```", "`\u200b``") + "\n```"


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:g}"


def _estimate_line(est: dict[str, Any] | None, lang: str) -> str | None:
    if not est:
        return None
    hours = _fmt(est.get("expected_hours", 0))
    if "idle_cost_per_hour" in est:
        pre = t("at_least", lang) if est.get("gpus_at_least") else ""
        line = t("idle_cost", lang, cur=est["currency"], fee=_fmt(est["tier_cost"]), hours=hours,
                 gpus=f"{pre}{est['gpus']}", wait=pre + _fmt(est["idle_cost_while_waiting"]),
                 total=pre + _fmt(est["total_cost"]))
    else:
        line = t("tier_cost", lang, cur=est["currency"], fee=_fmt(est["tier_cost"]), hours=hours)
    if est.get("example_rates"):
        line += f" ({t('example_rates', lang)})"
    return line


def _summary(doc: dict[str, Any], lang: str) -> list[str]:
    """The same first screen as the terminal: cause, where, the evidence line, the first two
    commands, support and cost, what else to check."""
    causes = doc["causes"]
    if not causes:
        return []
    top = causes[0]
    colon = "：" if lang == "zh" else ": "
    out = [f"**{t('probable_cause', lang)}{colon}{top['title']}** · {top['category']} · "
           f"{t('confidence', lang)} {top['confidence']:.2f}", ""]
    if top.get("basis") == "words":
        out += [f"_{t('words_only', lang)}_", ""]
    if top["evidence"]:
        ev = top["evidence"][0]
        where = ", ".join(x for x in (f"rank {ev['rank']}" if ev.get("rank") is not None else "", ev.get("node") or "",
                                      f"{ev.get('source')}:{ev['line_no']}" if ev.get("line_no") else "") if x)
        out += [f"- {t('evidence', lang)}{colon}{where}", "", _fence(ev["line"]), ""]
    from bot.render import culprit_line

    who = culprit_line(doc, lang)
    if who:
        out.append(f"- **{who}**")
    for n, cmd in enumerate(top["next_commands"][:2], 1):
        warn = f" ⚠ {t('caution', lang)}" if cmd.get("caution") else ""
        out.append(f"- {t('run_first', lang)} {n}{colon}`{cmd['command']}`{warn}")
    sup = top["support"]
    est = _estimate_line(sup.get("estimate"), lang)
    out.append(f"- {t('support', lang)}{colon}{sup['tier_name']}" + (f" — {est}" if est else ""))
    others = causes[1:3]
    if others:
        out.append(f"- {t('also_check', lang)}{colon}" + "; ".join(
            f"{c['title']} ({c['category']}, {c['confidence']:.2f})" for c in others))
    return out + [""]


def render(doc: dict[str, Any]) -> str:
    from bot.render import printable

    doc = printable(doc)
    lang = doc["lang"]
    out = [f"# {t('heading', lang)}", ""]
    esc = doc.get("escalation")
    if esc:
        out += [f"> **{esc['title']}** — {esc['advice']}", ">"] + [f"> - {r['text']}" for r in esc["reasons"]] + [""]
    out += _summary(doc, lang)
    if doc.get("similar"):
        out += [f"**{t('similar', lang)}:**", ""] + [f"- {s['text']}" for s in doc["similar"]] + [""]
    for i, cause in enumerate(doc["causes"]):
        head = t("probable_cause", lang) if i == 0 else t("other_causes", lang) + f" #{i + 1}"
        out += [f"## {head}: {cause['title']}",
                f"`{cause['id']}` · {cause['category']} · {t('confidence', lang)} **{cause['confidence']:.2f}**", "",
                cause["cause"], ""]
        for x in cause.get("xid", []):
            out.append(f"- {t('xid_detail', lang, code=x['code'], name=x['name'], action=x['action'])}")
        if cause.get("xid"):
            out.append("")
        out += [f"### {t('evidence', lang)}", ""]
        for ev in cause["evidence"]:
            where = " ".join(x for x in (ev.get("source") or "", f"line {ev['line_no']}" if ev.get("line_no") else "",
                                           f"rank {ev['rank']}" if ev.get("rank") is not None else "",
                                           ev.get("node") or "") if x)
            out += [f"- {where}", "", _fence(ev["line"]), ""]
        out += [f"### {t('next_commands', lang)}", ""]
        for n, cmd in enumerate(cause["next_commands"], 1):
            out.append(f"{n}. `{cmd['command']}` — {cmd['why']}")
            if cmd.get("caution"):
                out.append(f"   ⚠ **{t('caution', lang)}**{'：' if lang == 'zh' else ': '}{cmd['caution']}")
        out += ["", f"### {t('fix', lang)}", ""] + [f"- {f}" for f in cause["fix"]]
        sup = cause["support"]
        out += ["", f"### {t('support', lang)}", "", f"**{sup['tier_name']}** — {sup['why']}"]
        if sup.get("change_reason"):
            out.append(f"- {t('tier_changed', lang, old=sup['changed_from'], why=sup['change_reason'])}")
        if sup.get("drivers"):
            out.append(f"- {t('cost_drivers', lang)}: " + ", ".join(
                d["name"] + (f" ({d['shown']})" if d.get("shown") else "") for d in sup["drivers"]))
        est = _estimate_line(sup.get("estimate"), lang)
        if est:
            out.append(f"- {t('estimate', lang)}: {est}")
        if cause.get("explain"):
            out += ["", f"### {t('why_ranked', lang)}", ""] + [f"- {e}" for e in cause["explain"]]
        out += ["", f"{t('references', lang)}: " + " ".join(f"<{r}>" for r in cause["references"]), ""]
    if not doc["causes"]:
        out += [doc["message"], ""]
        from bot.render import culprit_line

        who = culprit_line(doc, lang)
        if who:
            out += [f"**{who}**", ""]
        out += [f"## {t('generic_steps', lang)}", ""]
        out += [f"{n}. `{s['command']}` — {s['why']}" for n, s in enumerate(doc["generic_next_steps"], 1)]
        out.append("")
    nodes = doc.get("nodes") or []
    if nodes:
        out += [f"## {t('nodes', lang)}", "", "| node | status | detail |", "|---|---|---|"]
        out += [f"| {n['node']} | {n['status']} | {n['detail'].replace('|', '/')[:200]} |" for n in nodes] + [""]
    if doc.get("odd_nodes"):
        out += [f"## {t('odd_one_out', lang)}", ""] + [f"- {o['text']}" for o in doc["odd_nodes"]] + [""]
    fe = doc.get("first_error")
    if fe:
        who = ", ".join(x for x in (f"rank {fe['rank']}" if fe.get("rank") is not None else "", fe.get("node") or "",
                                    f"{fe.get('source')}:{fe['line_no']}") if x)
        from bot.render import first_error_also, first_error_label

        out += [f"## {first_error_label(fe, lang, len((doc.get('stats') or {}).get('sources') or []))}", "", who, "", _fence(fe["line"]), ""]
        also = first_error_also(fe, lang)
        if also:
            out += [also, ""]
        if len(doc["stats"]["sources"]) > 1 or fe.get("rank") is not None:
            out += [t("first_error_note", lang), ""]
    if doc.get("warnings"):
        out += [f"## {t('warnings', lang)}", ""] + [f"- {w}" for w in doc["warnings"]] + [""]
    return "\n".join(out)
