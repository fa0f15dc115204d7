"""Renderers. ``as_dict`` assembles the reply once (DESIGN.md's JSON); each renderer formats it."""

from __future__ import annotations

import re
from typing import Any

from bot.messages import GENERIC_STEPS, pick, t
from collectors.resolve import NODE_NAME
from collectors.said import in_lang


def _cause_dict(diagnosis, cause, lang: str, explain: bool) -> dict[str, Any]:
    entry = cause.entry
    out: dict[str, Any] = {
        "id": entry.id,
        "category": entry.category,
        "title": pick(entry.title, lang),
        "confidence": round(cause.confidence, 2),
        "evidence": [e.to_json() for e in cause.evidence],
        "next_commands": _commands(diagnosis, cause, lang),
        "support": _support(diagnosis.support.get(entry.id), entry, lang),
        "cause": pick(entry.cause, lang),
        "fix": pick(entry.fix, lang),
        "references": entry.references,
        "symptom": entry.symptom,
    }
    if getattr(cause, "alternative", False):
        out["alternative"] = True
    if getattr(cause, "basis", "") == "words":
        out["basis"] = "words"  # no known message: read from the words of the failure lines
    codes = [f.attrs.get("code") for f in cause.findings if f.kind == "xid"]
    if codes:
        from knowledge.xid import describe

        out["xid"] = describe(codes, lang)
    if explain:
        out["explain"] = [in_lang(e, lang) for e in cause.explain]
    return out


_LOG_PLACEHOLDERS = ("<first-failed-rank-log>", "<log of that rank>", "<launcher log>", "<log>", "train.log")


def _commands(diagnosis, cause, lang: str) -> list[dict[str, Any]]:
    """The entry's next commands with this diagnosis's own file and host filled in where the entry
    writes a placeholder (``train.log``, ``rank*.log``, ``<log>``, ``<node>``); the entry's text
    stays in ``template``. Only printed, never run; names are shell-quoted."""
    import os
    import shlex

    # only real files are named in a command: a paste, stdin or an upload's label is not a path
    files = [s for s in getattr(diagnosis, "sources", []) or [] if s and s not in ("-", "paste", "stdin")
             and not s.startswith("<") and "://" not in s and os.path.isfile(s)]
    fe = getattr(diagnosis, "first_error", None)
    shown = {f: _as_user_named(f) for f in files}
    mine = next((e.source for e in cause.evidence if e.source in files), None)
    log = mine or (fe.source if fe is not None and fe.source in files else None) or (files[0] if len(files) == 1 else None)
    node = next((e.node for e in cause.evidence if e.node), None) or (fe.node if fe is not None else None)
    if len(files) > 1:
        parent = os.path.commonpath([os.path.dirname(shown[f]) or "." for f in files])
        all_logs = f"{shlex.quote(parent)}/*" if parent not in ("", ".") else \
            " ".join(shlex.quote(shown[f]) for f in files[:8])
    else:
        all_logs = shlex.quote(shown[files[0]]) if files else None
    out = []
    for c in cause.entry.next_commands:
        cmd = c["command"]
        if all_logs:  # <logs>: the job's log file(s), whether one per rank or one for all
            cmd = cmd.replace("<logs>", all_logs).replace("rank*.log", all_logs)
        if log:
            for ph in _LOG_PLACEHOLDERS:
                cmd = cmd.replace(ph, shlex.quote(shown[log]))
        if node and "<node>" in cmd and NODE_NAME.match(node):
            cmd = cmd.replace("<node>", node)
        item = {"command": cmd, "why": pick(c.get("why"), lang)}
        if cmd != c["command"]:
            item["template"] = c["command"]
        if c.get("caution"):  # it changes shared state: what it does to others and what to record first
            item["caution"] = pick(c["caution"], lang)
        if c.get("root") or cmd.lstrip().startswith("sudo "):
            item["root"] = True
        out.append(item)
    return out


def _as_user_named(path: str) -> str:
    """A file the bot copied into its own temp folder (a Slack upload, a job's log) is named as the
    user knows it: its file name, not the bot's temp path."""
    parts = path.replace("\\", "/").split("/")
    if any(p.startswith(("gpu-triage-slack-", "gpu-triage-joblog-")) for p in parts[:-1]):
        return parts[-1]
    return path


def _support(block: dict[str, Any] | None, entry, lang: str) -> dict[str, Any]:
    block = dict(block or {"tier": entry.support.get("tier"), "why": entry.support.get("why"), "drivers": []})
    block["why"] = pick(block.get("why"), lang)
    block["tier_name"] = t(f"tier.{block['tier']}", lang)
    for d in block.get("drivers", []):
        d["name"] = t(f"driver.{d['driver']}", lang)
        if d.get("value") is not None:
            value = t(f"network.{d['value']}", lang) if d["driver"] == "network" else str(d["value"])
            if d.get("exact") is False:
                value = t("at_least", lang) + value
            d["shown"] = value + (f"; {t('basis.' + d['basis'], lang)}" if d.get("basis") else "")
    block.setdefault("estimate", None)
    return block


def _what(attrs: dict[str, Any], lang: str) -> str:
    """The compared quantity in the reader's language, with the device/GPU it concerns."""
    from bot.messages import TEXT

    what = str(attrs.get("what"))
    label = t(f"what.{what}", lang) if f"what.{what}" in TEXT else what
    where = attrs.get("device") and f"{attrs['device']}:{attrs.get('port', 1)}" or \
        (f"GPU {attrs['gpu']}" if attrs.get("gpu") is not None else "")
    return f"{label} ({where})" if where else label


# C0/C1 controls (ESC starts terminal sequences: clear screen, set title) and the bidi overrides
# (RLO and friends reorder what a reader sees) are shown as visible escapes, never sent raw
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(value: Any) -> Any:
    """``value`` (a reply document or any part of it) with every string made safe to print."""
    if isinstance(value, str):
        return _UNSAFE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                           else f"\\u{ord(m.group()):04x}", value)
    if isinstance(value, dict):
        return {k: printable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [printable(v) for v in value]
    return value


def culprit_line(doc: dict[str, Any], lang: str) -> str | None:
    """"Look at rank 17 (gpu03): ..." from the JSON's culprit, or None. A laggard's line says where
    the others wait ("63 ranks wait in ALLREDUCE #41201 of PG 0; rank 17 last completed #41198");
    the culprit's node evidence, when a collection has it, follows ("gpu03 logged: ... Xid 79")."""
    c = doc.get("culprit")
    if not c:
        return None
    who = ", ".join(x for x in (f"rank {c['rank']}" if c.get("rank") is not None else "", c.get("node") or "") if x)
    coll = c.get("collective") or {}
    proc = c.get("process") or {}
    if c["reason"] == "stuck-elsewhere" and proc:
        who = ", ".join(x for x in (f"pid {proc.get('pid')}", c.get("node") or "") if x)
    if c["reason"] == "laggard" and coll.get("waiting") and coll.get("seq") is not None:
        op = f"{coll['op']} " if coll.get("op") else ""
        pg = t("culprit.pg", lang, pg=coll["pg"]) if coll.get("pg") is not None else ""
        last = (t("culprit.last_completed", lang, who=f"rank {c['rank']}", seq=coll["last_completed"])
                if coll.get("last_completed") is not None else "")
        text = t("culprit.laggard_in", lang, n=coll["waiting"], op=op, seq=coll["seq"], pg=pg, last=last, who=who)
    elif c["reason"] == "mismatch":
        pg = t("culprit.pg", lang, pg=coll["pg"]) if coll.get("pg") is not None else ""
        text = t("culprit.mismatch", lang, who=who, seq=coll.get("seq"), pg=pg, ops=coll.get("ops"))
    elif c["reason"] == "stuck-elsewhere":
        text = t("culprit.stuck-elsewhere", lang, who=who, n=proc.get("waiting"), frame=(c.get("evidence") or [""])[0])
    else:
        text = t(f"culprit.{c['reason']}", lang, who=who)
    ev = c.get("node_evidence") or []
    if ev:
        text += t("culprit.node_logged", lang, node=c.get("node"), line=printable(ev[0]["line"])[:200])
    return text


def first_error_is_evidence(doc: dict[str, Any]) -> bool:
    """The top cause's first evidence line is the first error: say it once."""
    fe, causes = doc.get("first_error"), doc.get("causes") or []
    ev = causes[0]["evidence"][0] if causes and causes[0].get("evidence") else None
    return bool(fe and ev and (ev.get("source"), ev.get("line_no")) == (fe.get("source"), fe.get("line_no")))


def first_error_label(fe: dict[str, Any] | None, lang: str, sources: int = 1) -> str:
    """"First error in time"; with no comparable times, "First error in the log" for one log and
    "First error in file order" across several: never a claim about time the times cannot back."""
    if fe and fe.get("basis") == "file-order":
        return t("first_error_order" if sources > 1 else "first_error_in_log", lang)
    return t("first_error", lang)


def first_error_also(fe: dict[str, Any] | None, lang: str) -> str | None:
    """The other host's error within the clock skew, as one sentence, or None."""
    also = (fe or {}).get("also")
    if not also:
        return None
    where = ", ".join(x for x in (f"rank {also['rank']}" if also.get("rank") is not None else "",
                                  also.get("node") or "", f"{also.get('source')}:{also.get('line_no')}") if x)
    return t("first_error_also", lang, secs=also.get("seconds_later"), where=where, line=also["line"][:200])


def _has_logs(diagnosis) -> bool:
    return bool(getattr(diagnosis, "lines_read", 0))


def nodes_line(nodes: list[dict[str, Any]], lang: str) -> str:
    """"3 checked and reachable", or "1 of 1 reached, 0 fully checked" when some were partial."""
    ok = sum(n["status"] == "ok" for n in nodes)
    reached = sum(n["status"] in ("ok", "partial") for n in nodes)
    if reached == ok == len(nodes):
        return t("nodes_ok", lang, n=ok)
    return t("nodes_reached", lang, reached=reached, total=len(nodes), n=ok)


def culprit(diagnosis) -> dict[str, Any] | None:
    """The rank (and node) the evidence singles out, with the reason, or None.

    ``laggard``: one rank did not report the collective timeout every other rank reported at the
    same sequence number (it was elsewhere); ``collective`` then says where the others wait and how
    far the laggard got. ``first-error``: the first error in time names its rank or node, and is not
    itself a collective timeout (a rank that timed out was waiting for the culprit). Several
    laggards, or a first error without rank or node, single nobody out. When the culprit's node was
    collected from, its own faults (an XID, a port down, the OOM killer) come with it as
    ``node_evidence``, earliest first."""
    found = None
    for f in diagnosis.findings:
        if f.kind == "rank-straggler":
            ranks = [r for r in str(f.attrs.get("ranks", "")).split(",") if r.strip().isdigit()]
            if len(ranks) == 1:
                coll = {k: f.attrs[k] for k in ("pg", "seq", "op", "waiting", "last_completed") if k in f.attrs}
                found = {"rank": int(ranks[0]), "node": f.attrs.get("node"), "reason": "laggard",
                         "evidence": [f.line], "collective": coll}
                break
    if found is None:
        for f in diagnosis.findings:
            # ranks at one sequence number in different collectives: the odd one out ran another code path
            odd = [r for r in str(f.attrs.get("odd_ranks", "")).split(",") if r.strip().isdigit()]
            if f.kind == "collective-mismatch" and len(odd) == 1:
                coll = {k: f.attrs[k] for k in ("pg", "seq", "ops") if k in f.attrs}
                found = {"rank": int(odd[0]), "node": None, "reason": "mismatch", "evidence": [f.line],
                         "collective": coll}
                break
    if found is None:
        found = _stuck_elsewhere(diagnosis.findings)
    if found is None:
        fe = diagnosis.first_error
        if fe is None or (fe.rank is None and not fe.node):
            return None
        # a rank whose collective timed out was waiting for another: it is a witness, not the culprit
        waiting = any(f.kind in ("nccl-timeout", "collective-mismatch") and f.source == fe.source
                      and f.line_no == fe.line_no for f in diagnosis.findings)
        if waiting:
            return None
        found = {"rank": fe.rank, "node": fe.node, "reason": "first-error", "evidence": [fe.line]}
    if found["node"]:
        ev = node_faults(diagnosis, found["node"])
        if ev:
            found["node_evidence"] = [{"kind": f.kind, "line": f.line, "source": f.source, "ts": f.ts} for f in ev]
    return found


def _stuck_elsewhere(findings) -> dict[str, Any] | None:
    """py-spy's stacks of a hung job: every process but one waits in a collective; that one is the
    laggard, and its stack says where it is."""
    stacks = [f for f in findings if f.kind == "py-stack"]
    waiting = [f for f in stacks if f.attrs.get("where") == "collective"]
    elsewhere = [f for f in stacks if f.attrs.get("where") != "collective"]
    if not waiting or len(elsewhere) != 1:
        return None
    f = elsewhere[0]
    return {"rank": None, "node": f.node, "reason": "stuck-elsewhere", "evidence": [f.line],
            "process": {"pid": f.attrs.get("pid"), "where": f.attrs.get("where"),
                        "frames": list(f.attrs.get("frames") or [])[:6], "waiting": len(waiting)}}


# What a node's collectors can say that is a fault of that node (not a description of it)
_NODE_FAULT_KINDS = {"xid", "gpu-lost", "ecc-error", "nvlink-error", "pcie-error", "thermal", "oom-killer",
                     "host-oom", "ib-error", "disk-full", "io-error", "nfs-stall", "row-remap", "ib-port"}
_PORT_UP = ("active", "linkup", "4: active", "5: linkup")


def node_faults(diagnosis, node: str, limit: int = 3) -> list:
    """The collected faults of ``node``, earliest first: not the log's lines (those are the job's
    own), not facts marked normal, not a port that is up."""
    logs = set(getattr(diagnosis, "sources", None) or [])
    out = []
    for f in diagnosis.findings:
        if f.node != node or f.normal or f.source in logs or f.source == "compare" or f.kind not in _NODE_FAULT_KINDS:
            continue
        if f.kind == "ib-port" and str(f.attrs.get("state", "")).strip().lower() in _PORT_UP:
            continue
        out.append(f)
    out.sort(key=lambda f: (f.ts is None, f.ts or ""))
    return out[:limit]


FINDINGS_PER_KIND = 200  # findings of one kind in the document, beyond those that say something new
# the attributes whose new value makes a finding past the cap worth listing (an XID code, an IB status)
_NEW_KEYS = ("code", "status", "error", "reason", "event", "signal", "what", "device", "port")


def _findings(findings) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The findings for the document: of each kind the first FINDINGS_PER_KIND, and after them every
    one that says something new (another XID code, another IB status: _NEW_KEYS), so an error
    storm's 20 000 repeats of four warnings do not make an 11 MB answer; and how many were left out."""
    kept: list[dict[str, Any]] = []
    per_kind: dict[str, int] = {}
    seen: set[tuple] = set()
    omitted: dict[str, int] = {}
    for f in findings:
        sig = (f.kind, tuple((k, str(f.attrs[k])) for k in _NEW_KEYS if k in f.attrs))
        n = per_kind.get(f.kind, 0)
        if n >= FINDINGS_PER_KIND and sig in seen:
            omitted[f.kind] = omitted.get(f.kind, 0) + 1
            continue
        per_kind[f.kind] = n + 1
        seen.add(sig)
        kept.append(f.to_json())
    return kept, omitted


def as_dict(diagnosis, *, lang: str = "en", explain: bool = False) -> dict[str, Any]:
    findings, omitted = _findings(diagnosis.findings)
    out: dict[str, Any] = {
        "causes": [_cause_dict(diagnosis, c, lang, explain) for c in diagnosis.causes],
        "findings": findings,
        "first_error": diagnosis.first_error.to_json() if diagnosis.first_error else None,
        "culprit": culprit(diagnosis),
        "nodes": diagnosis.nodes,
        "job": diagnosis.job,
        "confident": diagnosis.confident,
        "lang": lang,
        "warnings": [in_lang(w, lang) for w in diagnosis.warnings],
        "stats": {"sources": diagnosis.sources, "lines": diagnosis.lines_read, "bytes": diagnosis.bytes_read,
                  "seconds": round(diagnosis.seconds, 4)},
    }
    out["odd_nodes"] = [
        {"node": f.node, "what": f.attrs.get("what"), "value": f.attrs.get("value"), "others": f.attrs.get("others"),
         "text": t("odd_line", lang, node=f.node, what=_what(f.attrs, lang), value=f.attrs.get("value"),
                   others=t("all_ports_active", lang) if f.attrs.get("others") == "all ports Active"
                   else f.attrs.get("others"))}
        for f in diagnosis.findings if f.kind == "node-mismatch"]
    if omitted:  # findings left out of "findings" (repeats of a kind already listed), per kind
        out["findings_omitted"] = omitted
    out["signature"] = getattr(diagnosis, "signature", "")
    out["similar"] = [_similar(g, lang) for g in getattr(diagnosis, "similar", None) or []]
    esc = getattr(diagnosis, "escalation", None)
    out["escalation"] = _escalation(esc.to_json(), lang) if esc is not None else None
    if not diagnosis.causes:
        out["message"] = t("no_cause_bundle" if diagnosis.nodes and not _has_logs(diagnosis) else "no_cause", lang)
        out["generic_next_steps"] = [{"command": s["command"], "why": pick(s["why"], lang)} for s in GENERIC_STEPS]
    if explain:
        out["candidates"] = [
            {"id": c.entry.id, "category": c.entry.category, "confidence": round(c.confidence, 3),
             "explain": [in_lang(e, lang) for e in c.explain]} for c in diagnosis.candidates]
    return out


def _similar(group: dict[str, Any], lang: str) -> dict[str, Any]:
    """"Seen 3 times, last on 2026-11-14 on gpu07; fixed by ..." from confirmed past incidents."""
    date = (group.get("last") or "")[:10]
    fix = pick(group.get("fixed_by"), lang) or "—"
    title = pick(group.get("title"), lang) or group["cause_id"]
    key = "similar_line" if group.get("node") else "similar_line_nonode"
    return {"cause_id": group["cause_id"], "title": title, "count": group["count"], "last": date,
            "node": group.get("node") or None, "fixed_by": fix, "incidents": group.get("incidents", []),
            "text": t(key, lang, n=group["count"], date=date, node=group.get("node"), fix=fix.rstrip("."),
                      title=title)}


def _escalation(esc: dict[str, Any], lang: str) -> dict[str, Any]:
    reasons = []
    for r in esc["reasons"]:
        serial = t("serial", lang, serial=r["serial"]) if r.get("serial") else ""
        text = t(f"escalate.{r['rule']}", lang, node=r.get("node"), gpu=r.get("gpu"), serial=serial,
                 code=r.get("code"), count=r.get("count"), hours=r.get("hours"), days=r.get("days"),
                 burst=r.get("burst_minutes"))
        reasons.append({**r, "text": text})
    return {"tier": esc["tier"], "tier_name": t(f"tier.{esc['tier']}", lang), "nodes": esc["nodes"],
            "reasons": reasons, "title": t("escalate", lang), "advice": t("escalate_advice", lang)}
