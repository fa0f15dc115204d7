"""The Slack Block Kit renderer, on documents diagnosed from real logs, checked with slack_sdk's models."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from slack_sdk.models.blocks import Block
from slack_sdk.models.views import View

from bot.messages import GENERIC_STEPS, TEXT, pick, t
from bot.render import as_dict
from bot.render.blocks import (MAX_BLOCKS, MAX_HEADER, MAX_SECTION, parse_button_value, progress_blocks,
                               render, home_view, runbook_modal, runbook_prefill)
from knowledge.loader import CATEGORIES

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus"
ECC = CORPUS / "gpu-hardware" / "kohya-sdxl-ecc-nccl-watchdog.log"
WATCHDOG = CORPUS / "communication" / "basicsr-allreduce-watchdog-timeout.log"
SHM = CORPUS / "shared-memory" / "megatron-dataloader-bus-error-shm.log"
XID79 = ROOT / "tests" / "fixtures" / "cluster" / "kernel-log" / "11.txt"
KEYERROR = ('Traceback (most recent call last):\n  File "train.py", line 88, in <module>\n'
            '    lr = cfg["optim"]["lr"]\nKeyError: \'optim\'\n')


def diagnose(engine, path, lang="en"):
    return as_dict(engine.diagnose_paths([str(path)]), lang=lang)


def check_blocks(blocks):
    """Every block parses into its slack_sdk model and validates; Slack's message limits hold."""
    assert 0 < len(blocks) <= MAX_BLOCKS
    for b in blocks:
        model = Block.parse(b)
        assert model is not None and type(model) is not Block, b
        model.validate_json()
        if b["type"] == "section":
            assert 0 < len(b["text"]["text"]) <= MAX_SECTION
            assert b["text"]["text"].count("```") % 2 == 0, "a code block left open"
        if b["type"] == "header":
            assert len(b["text"]["text"]) <= MAX_HEADER
        if b["type"] == "actions":
            assert len(b["elements"]) <= 25
            assert all(len(e["value"]) <= 2000 for e in b["elements"])
    return blocks


def all_text(blocks):
    out = []
    for b in blocks:
        if "text" in b:
            out.append(b["text"]["text"])
        for e in b.get("elements", []):
            if e.get("type") == "mrkdwn":
                out.append(e["text"])
    return "\n".join(out)


def sections(blocks):
    return [b["text"]["text"] for b in blocks if b["type"] == "section"]


def contexts(blocks):
    return [e["text"] for b in blocks if b["type"] == "context" for e in b["elements"]]


def actions(blocks):
    found = [b for b in blocks if b["type"] == "actions"]
    return {e["action_id"]: e for e in found[0]["elements"]} if found else {}


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("path", [ECC, WATCHDOG, SHM], ids=lambda p: p.stem)
def test_real_logs_render_valid_replies(engine, path, lang):
    doc = diagnose(engine, path, lang)
    assert doc["causes"], path
    top = doc["causes"][0]
    reply = render(doc, incident_id="inc42")
    check_blocks(reply.blocks)
    assert reply.overflow is False
    assert not any(t("overflow_note", lang) in c for c in contexts(reply.blocks))
    head = reply.blocks[0]
    assert head["type"] == "header" and top["title"] in head["text"]["text"]
    assert f"{top['confidence']:.2f}" in head["text"]["text"]
    assert top["title"] in reply.text and f"{top['confidence']:.2f}" in reply.text and "\n" not in reply.text
    text = all_text(reply.blocks)
    assert top["category"] in text
    assert t("evidence", lang) in text and t("next_commands", lang) in text and t("fix", lang) in text
    # evidence lines in code blocks, with where they came from
    for ev in top["evidence"]:
        assert f"```\n{ev['line'].replace('&', '&amp;').replace('<', '&lt;').replace('>', '&gt;')}\n```" in text
    assert Path(top["evidence"][0]["source"]).name in text
    # next commands numbered with the command in code
    first = top["next_commands"][0]["command"].replace("<", "&lt;").replace(">", "&gt;")
    assert f"1. `{first}`" in text or f"1. ```" in text
    assert top["support"]["tier_name"] in text
    fe = doc["first_error"]
    # the first error is shown once: as the evidence line, or in its own section when it differs
    assert f"```\n{fe['line'].replace('&', '&amp;').replace('<', '&lt;').replace('>', '&gt;')}\n```" in text
    ev = top["evidence"][0]
    same = (ev["source"], ev["line_no"]) == (fe["source"], fe["line_no"])
    assert (t("first_error", lang) in text) is not same
    # "the first rank to fail..." only where ranks or several files make it apply
    applies = len(doc["stats"]["sources"]) > 1 or fe.get("rank") is not None
    assert (t("first_error_note", lang) in text) is (applies and not same)
    for other in doc["causes"][1:]:
        assert other["title"].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") in text
    buttons = actions(reply.blocks)
    assert set(buttons) == {"feedback_confirm", "feedback_reject", "add_runbook", "full_report"}
    assert parse_button_value(buttons["feedback_confirm"]["value"]) == ("inc42", top["id"])
    assert buttons["feedback_confirm"]["text"]["text"] == t("btn.confirm", lang)
    assert reply.report_markdown.startswith("# ") and top["title"] in reply.report_markdown


def test_chinese_reply_is_chinese(engine):
    reply = render(diagnose(engine, SHM, "zh"))
    assert re.search(r"[\u4e00-\u9fff]", reply.blocks[0]["text"]["text"])
    assert "Probable cause" not in all_text(reply.blocks) and "Evidence" not in all_text(reply.blocks)


def test_no_actions_when_asked(engine):
    reply = render(diagnose(engine, ECC), actions=False)
    check_blocks(reply.blocks)
    assert not actions(reply.blocks)


def test_xid_details_and_nodes_from_a_real_bundle(engine, tmp_path):
    bundle = tmp_path / "bundle"
    (bundle / "gpu01").mkdir(parents=True)
    (bundle / "gpu01" / "kernel-log.txt").write_text(XID79.read_text(encoding="utf-8"), encoding="utf-8")
    manifest = {"format": 1, "job": "4711", "nodes": ["gpu01", "gpu02", "gpu03"], "created": "2024-05-01T10:00:00+00:00",
                "collectors": {"gpu01/kernel-log.txt": {"command": "dmesg -T", "exit": 0, "seconds": 0.1}},
                "node_status": {"gpu01": {"status": "ok", "detail": ""},
                                "gpu02": {"status": "unreachable", "detail": "gpu02:22: connection refused; is sshd up?"},
                                "gpu03": {"status": "auth-failed", "detail": "gpu03: key <rejected> & denied"}}}
    (bundle / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    from collectors.bundle import read_bundle

    with read_bundle(bundle) as b:
        doc = as_dict(engine.diagnose_bundle(b), lang="en")
    top = doc["causes"][0]
    assert top.get("xid"), top["id"]
    reply = render(doc, incident_id="inc1")
    check_blocks(reply.blocks)
    text = all_text(reply.blocks)
    assert "XID 79" in text
    assert t("nodes_not_checked", "en") in text
    assert "`gpu02`" in text and "connection refused" in text
    assert "`gpu03`" in text and "key &lt;rejected&gt; &amp; denied" in text
    assert t("nodes_reached", "en", reached=1, total=3, n=1) in text  # "1 of 3 reached, 1 fully checked"
    assert "4711" in text
    # there are nodes, so no "Collect from nodes" even with a hint
    doc["collect_hint"] = "job 4711"
    assert "collect_nodes" not in actions(render(doc, incident_id="inc1").blocks)


def test_collect_button_only_without_nodes_and_with_a_hint(engine):
    doc = diagnose(engine, WATCHDOG)
    assert "collect_nodes" not in actions(render(doc, incident_id="i").blocks)
    doc["collect_hint"] = "hosts gpu-a01, gpu-a02 <job 99>"
    reply = render(doc, incident_id="i")
    check_blocks(reply.blocks)
    assert "collect_nodes" in actions(reply.blocks)
    assert any("gpu-a01, gpu-a02 &lt;job 99&gt;" in c for c in contexts(reply.blocks))


def test_the_collect_hint_offers_only_names_collection_accepts(engine):
    from bot.slack.listeners import _hint

    def hint(log):
        doc = {}
        _hint(doc, engine.diagnose_text(log))
        return doc.get("collect_hint")

    assert hint("srun: error: gpu07: task 0: Killed") == "gpu07"
    # shell words and a range past the node limit (from the log's text) are not offered
    assert hint("srun: error: gpu07;id: task 0: Killed") is None
    assert hint("srun: error: gpu0[1-100000000000]: task 0: Killed") is None


def test_estimate_uses_the_rate_card(data_dir):
    from bot.engine import Engine

    engine = Engine(data_dir=str(data_dir), rate_card=str(ROOT / "deploy" / "rate-card.example.yaml"), gpus=16)
    for lang in ("en", "zh"):
        doc = diagnose(engine, ECC, lang)
        est = doc["causes"][0]["support"]["estimate"]
        assert est
        from bot.render.markdown import _estimate_line

        reply = render(doc)
        check_blocks(reply.blocks)
        line = _estimate_line(est, lang)
        assert line in all_text(reply.blocks)
        assert t("cost_drivers", lang) in all_text(reply.blocks)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_no_confident_cause(engine, tmp_path, lang):
    log = tmp_path / "keyerror.log"
    log.write_text(KEYERROR, encoding="utf-8")
    doc = diagnose(engine, log, lang)
    assert doc["causes"] == []
    reply = render(doc, incident_id="inc9")
    check_blocks(reply.blocks)
    assert reply.text == t("no_cause_title", lang)
    assert reply.blocks[0]["text"]["text"] == t("no_cause_title", lang)
    text = all_text(reply.blocks)
    assert doc["message"].replace("<", "&lt;") in text
    assert t("generic_steps", lang) in text
    for step in GENERIC_STEPS:
        assert pick(step["why"], lang) in text
    # a command with <placeholders> is escaped, never a Slack link
    assert "&lt;each rank log&gt;" in text and "<each rank log>" not in text
    buttons = actions(reply.blocks)
    assert "feedback_confirm" not in buttons and {"add_runbook", "full_report"} <= set(buttons)
    assert parse_button_value(buttons["add_runbook"]["value"]) == ("inc9", None)


def test_log_text_is_escaped_and_cannot_break_code_blocks(engine, tmp_path):
    nasty = "RuntimeError: CUDA error: uncorrectable ECC error encountered ```<@U123> <!channel> &amp; `` done```"
    log = tmp_path / "nasty.log"
    log.write_text(ECC.read_text(encoding="utf-8").replace(
        "RuntimeError: CUDA error: uncorrectable ECC error encountered", nasty, 1), encoding="utf-8")
    doc = diagnose(engine, log)
    # the parser keeps the mention and the fence (it decodes the HTML entity of a scraped log to "&")
    assert any("```<@U123> <!channel> &" in ev["line"] for ev in doc["causes"][0]["evidence"])
    # and a literal entity straight in the document must reach the reader as typed
    doc["causes"][0]["evidence"].append(dict(doc["causes"][0]["evidence"][0], line="saved to a&amp;b ``` <@U123>"))
    reply = render(doc)
    check_blocks(reply.blocks)
    text = all_text(reply.blocks)
    assert "<@U123>" not in text and "<!channel>" not in text and "<!" not in text
    assert "&lt;@U123&gt;" in text and "a&amp;amp;b" in text
    assert not re.search(r"&(?!amp;|lt;|gt;)", text), "a bare & reached Slack"
    for s in sections(reply.blocks):
        # code blocks are opened and closed by fences on their own lines; no ``` inside
        inside = False
        for line in s.split("\n"):
            if line == "```":
                inside = not inside
            elif inside:
                assert "``" not in line, line
        assert not inside
    assert "&lt;@U123&gt;" in reply.report_markdown or "<@U123>" in reply.report_markdown


def _huge_doc(engine):
    doc = diagnose(engine, ECC)
    top = doc["causes"][0]
    line = top["evidence"][0]
    top["evidence"] = [dict(line, line_no=i, rank=i % 64, node=f"gpu{i % 40:02d}") for i in range(600)]
    others = []
    for i in range(60):
        c = copy.deepcopy(top)
        c.update(id=f"{top['id']}-{i}", title=f"{top['title']} variant {i}", confidence=0.5)
        others.append(c)
    doc["causes"] = [top] + others
    doc["nodes"] = [{"node": f"gpu{i:03d}", "status": "ok" if i % 3 == 0 else "unreachable",
                     "detail": "" if i % 3 == 0 else f"gpu{i:03d}:22: no route to host; check the node is up"}
                    for i in range(400)]
    doc["warnings"] = [f"nvidia-smi not checked (command not found on the node) — gpu{i:03d}" for i in range(30)]
    return doc


def test_huge_document_overflows_visibly(engine):
    doc = _huge_doc(engine)
    reply = render(doc, incident_id="big")
    check_blocks(reply.blocks)
    assert reply.overflow is True
    assert len(reply.blocks) <= MAX_BLOCKS
    assert any(t("overflow_note", "en") in c for c in contexts(reply.blocks))
    assert reply.blocks[-1]["type"] == "actions"
    text = all_text(reply.blocks)
    # the top cause, its first evidence and the next commands survive; the rest is in the report
    assert doc["causes"][0]["title"] in reply.blocks[0]["text"]["text"]
    assert t("next_commands", "en") in text and t("evidence", "en") in text
    # nodes that could not be checked are never silently dropped: each is listed or counted and named
    bad = [n["node"] for n in doc["nodes"] if n["status"] != "ok"]
    listed = [n for n in bad if f"`{n}`" in text]
    m = re.search(r"and (\d+) more nodes not checked: (.*)", text)
    assert m, "unchecked nodes beyond the listed ones must be counted"
    assert len(listed) + int(m.group(1)) == len(bad)
    assert all(n in m.group(2) or f"`{n}`" in text for n in bad[len(listed):len(listed) + 20])
    assert t("more_in_report", "en", n=25) in text  # warnings summarized
    # the full report has what the message could not hold
    assert "variant 59" in reply.report_markdown and "gpu399" in reply.report_markdown


def test_huge_document_in_chinese(engine):
    doc = _huge_doc(engine)
    doc["lang"] = "zh"
    reply = render(doc)
    check_blocks(reply.blocks)
    assert reply.overflow and any(t("overflow_note", "zh") in c for c in contexts(reply.blocks))


def test_a_giant_log_line_is_cut_and_says_so(engine):
    doc = diagnose(engine, ECC)
    giant = doc["causes"][0]["evidence"][0]["line"] + " <x>" * 20000
    doc["causes"][0]["evidence"][0]["line"] = giant
    doc["first_error"]["line"] = giant
    reply = render(doc)
    check_blocks(reply.blocks)
    assert reply.overflow
    assert any(t("overflow_note", "en") in c for c in contexts(reply.blocks))
    assert giant in reply.report_markdown


def test_long_title_is_cut_in_the_header_and_flagged(engine):
    doc = diagnose(engine, ECC)
    doc["causes"][0]["title"] = "A very long title " * 20
    reply = render(doc)
    check_blocks(reply.blocks)
    assert reply.overflow and reply.blocks[0]["text"]["text"].endswith("…")


def test_many_fix_lines_and_next_commands_are_cut_at_line_boundaries(engine):
    doc = diagnose(engine, ECC)
    top = doc["causes"][0]
    top["fix"] = [f"step {i}: " + "drain and reset the GPU, then rerun dcgmi diag. " * 3 for i in range(1000)]
    top["next_commands"] = [{"command": f"nvidia-smi -i {i} -q -d ECC", "why": "look at GPU " + str(i)}
                            for i in range(1000)]
    reply = render(doc)
    check_blocks(reply.blocks)
    assert reply.overflow and any(t("overflow_note", "en") in c for c in contexts(reply.blocks))
    fixes = {f"• {f}" for f in top["fix"]}
    commands = {f"{n}. `{c['command']}` — {c['why']}" for n, c in enumerate(top["next_commands"], 1)}
    shown_fix = shown_cmd = 0
    for s in sections(reply.blocks):
        for line in s.split("\n"):
            if line.startswith("• step"):
                assert line in fixes  # whole lines only
                shown_fix += 1
            if re.match(r"\d+\. `nvidia-smi -i", line):
                assert line in commands
                shown_cmd += 1
    assert shown_fix and shown_cmd
    assert "1. `nvidia-smi -i 0 -q -d ECC`" in all_text(reply.blocks)  # the first commands come first


# --- progress, App Home, modal ------------------------------------------------------------------------

STATUSES = ["connecting", "running", "ok", "unreachable", "auth-failed", "timeout", "partial"]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_progress_blocks(lang):
    nodes = [{"node": f"gpu{i:02d}", "status": s, "detail": f"{s} <detail> & more" if s not in ("ok", "running") else ""}
             for i, s in enumerate(STATUSES)]
    text, blocks = progress_blocks("4711", nodes, lang)
    check_blocks(blocks)
    body = all_text(blocks)
    assert "4711" in blocks[0]["text"]["text"] and "4711" in text
    assert t("progress_counts", lang, done=5, total=7) in body
    for n in nodes:
        assert n["node"] in body
    for emoji in (":white_check_mark:", ":x:", ":alarm_clock:", ":warning:", ":hourglass_flowing_sand:"):
        assert emoji in body
    assert "&lt;detail&gt; &amp; more" in body and "<detail>" not in body
    done_text, done_blocks = progress_blocks("4711", [dict(n, status="ok") for n in nodes], lang)
    assert t("progress_done_job", lang, job="4711") == done_blocks[0]["text"]["text"]
    empty_text, empty = progress_blocks(None, [], lang)
    check_blocks(empty)
    assert t("progress_resolving", lang) in all_text(empty)


def test_progress_blocks_with_thousands_of_nodes():
    nodes = [{"node": f"node-{i:05d}", "status": STATUSES[i % len(STATUSES)],
              "detail": f"node-{i:05d}:22: connection timed out after 10 s, check the firewall"} for i in range(3000)]
    text, blocks = progress_blocks(None, nodes, "en")
    check_blocks(blocks)
    body = all_text(blocks)
    assert t("progress_nodes", "en", n=3000) in body
    assert "more nodes not checked" in body or all(n["node"] in body for n in nodes)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_home_view(lang):
    recent = [{"id": "a1b2c3", "created": "2024-05-01T10:00:00+00:00", "top_cause": "cuda-uncorrectable-ecc",
               "category": "gpu-hardware", "confidence": 0.93, "outcome": "confirmed", "job": "4711"},
              {"id": "d4e5f6", "created": "2024-05-02T11:30:00+00:00", "top_cause": "", "category": "",
               "confidence": 0.0, "outcome": "open", "job": ""},
              {"id": "0a0b0c", "when": "yesterday", "title": "NCCL watchdog <timeout>", "outcome": "not-it"}]
    view = home_view(recent, [("cuda-uncorrectable-ecc", 4), ("nccl-watchdog-timeout", 2)], 7, lang)
    assert view["type"] == "home"
    View(**view).validate_json()
    check_blocks(view["blocks"])
    body = all_text(view["blocks"])
    for r in recent:
        assert r["id"] in body
    assert "<!date^1714557600^" in body
    for outcome in ("confirmed", "not-it", "open"):
        assert t(f"outcome.{outcome}", lang) in body
    assert t("no_cause_title", lang) in body and "NCCL watchdog &lt;timeout&gt;" in body
    assert t("home_top_line", lang, cause="cuda-uncorrectable-ecc", n=4) in body
    assert t("home_runbook", lang, n=7) in body
    empty = home_view([], [], 0, lang)
    View(**empty).validate_json()
    assert t("home_no_incidents", lang).replace("<", "&lt;").replace(">", "&gt;") in all_text(empty["blocks"])


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_runbook_modal_prefilled_from_a_real_incident(engine, lang):
    doc = diagnose(engine, ECC, lang)
    modal = runbook_modal(runbook_prefill(doc, "inc42"), lang)
    View(**modal).validate_json()
    assert modal["type"] == "modal" and modal["callback_id"] == "add_runbook" and modal["private_metadata"] == "inc42"
    inputs = {b["block_id"]: b for b in modal["blocks"] if b["type"] == "input"}
    assert list(inputs) == ["title", "category", "signature", "cause", "fix", "next_commands"]
    for b in modal["blocks"]:
        Block.parse(b).validate_json()
    top = doc["causes"][0]
    assert inputs["title"]["element"]["initial_value"] == top["title"]
    select = inputs["category"]["element"]
    assert select["type"] == "static_select" and [o["value"] for o in select["options"]] == list(CATEGORIES)
    assert select["initial_option"]["value"] == "gpu-hardware"
    assert inputs["signature"]["element"]["initial_value"] == doc["first_error"]["line"]
    assert inputs["cause"]["element"]["initial_value"] == top["cause"]
    assert inputs["fix"]["element"]["initial_value"].split("\n") == top["fix"]
    assert inputs["next_commands"]["element"]["initial_value"].split("\n")[0].startswith(top["next_commands"][0]["command"])
    assert inputs["title"]["label"]["text"] == t("field.title", lang)


def test_runbook_modal_without_a_cause(engine, tmp_path):
    log = tmp_path / "keyerror.log"
    log.write_text(KEYERROR, encoding="utf-8")
    doc = diagnose(engine, log)
    modal = runbook_modal(runbook_prefill(doc, "inc9"), "en")
    View(**modal).validate_json()
    inputs = {b["block_id"]: b for b in modal["blocks"] if b["type"] == "input"}
    assert "initial_option" not in inputs["category"]["element"]
    assert "KeyError" in inputs["signature"]["element"]["initial_value"]


def test_new_messages_are_bilingual():
    keys = [k for k in TEXT if k.startswith(("btn.", "status.", "outcome.", "field.", "category.", "home_",
                                              "progress_", "modal_", "where.", "slack_", "overflow", "more_in"))]
    assert len(keys) > 30
    for k in keys:
        assert TEXT[k].get("en") and TEXT[k].get("zh"), k
    for c in CATEGORIES:
        assert f"category.{c}" in TEXT


def test_the_slack_reply_follows_the_terminal_summary_order(engine):
    """Slack shows what the terminal's first screen shows, in the same order: evidence, the first
    commands, the support tier; the explanation and the fix come after."""
    from bot.render.blocks import render

    log = Path(__file__).resolve().parent.parent / "examples" / "dolly-torch-save-errno28-no-space.log"
    for lang in ("en", "zh"):
        doc = as_dict(engine.diagnose_paths([str(log)]), lang=lang)
        body = json.dumps(render(doc).blocks, ensure_ascii=False)
        marks = [f"*{t('evidence', lang)}*", f"*{t('next_commands', lang)}*", t("support", lang),
                 f"*{t('why_cause', lang)}*", f"*{t('fix', lang)}*"]
        at = [body.find(m) for m in marks]
        assert all(i >= 0 for i in at) and at == sorted(at), list(zip(marks, at))
