"""The first screen: at 80 columns a summary block of at most 15 rows, nothing wider than the
terminal, each fact once, in English and in Chinese (full-width punctuation)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.cells import cell_len

from bot.render import as_dict
from bot.render import terminal

CORPUS = Path(__file__).resolve().parent / "corpus"
LOGS = sorted(CORPUS.glob("*/*.log"))
RULE = "─" * 80


def render(engine, path: Path, lang: str, columns: int, monkeypatch) -> list[str]:
    monkeypatch.setenv("COLUMNS", str(columns))
    buf = io.StringIO()
    terminal.render(as_dict(engine.diagnose_paths([str(path)]), lang=lang), file=buf)
    return buf.getvalue().splitlines()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_corpus_answer_fits_80_columns_with_a_short_summary(engine, lang, monkeypatch):
    too_tall, too_wide = [], []
    for path in LOGS:
        rows = render(engine, path, lang, 80, monkeypatch)
        summary = rows.index(RULE)
        if summary > 15:
            too_tall.append((path.name, summary))
        too_wide += [(path.name, r) for r in rows if cell_len(r) > 80]
    assert not too_tall, too_tall[:5]
    assert not too_wide, too_wide[:3]


def test_the_layout_follows_the_width_and_says_each_fact_once(engine, monkeypatch):
    log = CORPUS / "communication" / "hf-trainer-multinode-allreduce-timeout-connection-closed.log"
    narrow = render(engine, log, "en", 80, monkeypatch)
    wide = render(engine, log, "en", 200, monkeypatch)
    assert narrow != wide and max(map(len, wide)) > 80 and len(wide) < len(narrow)
    text = "\n".join(narrow)
    # the summary's evidence line is also the first error: said once, then referred to
    assert text.count("[Rank 13] Watchdog caught collective operation timeout") == 1
    # the commands name the file given, not a made-up one
    assert "hf-trainer-multinode-allreduce-timeout-connection-closed.log" in text.split(RULE)[0]
    assert "train.log" not in text and "rank*.log" not in text and "<logs>" not in text


def test_no_first_rank_boilerplate_on_a_single_kernel_log(engine, monkeypatch):
    log = CORPUS / "gpu-hardware" / "rtx5090-xid79-fallen-off-bus-gsp.log"
    text = "\n".join(render(engine, log, "en", 80, monkeypatch))
    assert "first rank to fail" not in text


def test_chinese_labels_use_full_width_colons(engine, monkeypatch):
    log = CORPUS / "host-memory" / "open-r1-grpo-childfailed-signal9-sigkill.log"
    head = render(engine, log, "zh", 80, monkeypatch)[:8]
    assert head[0].startswith("可能原因：")
    assert any(r.strip().startswith("先执行：") for r in head)


def test_control_sequences_in_a_log_never_reach_the_terminal(engine, monkeypatch):
    # a log line (or a node's output) carrying a screen clear, a title change and a bidi override
    text = ("\x1b[2J\x1b]0;owned\x07RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB "
            "\u202egnp.evil\n")
    from bot.render import markdown

    doc = as_dict(engine.diagnose_text(text), lang="en")
    monkeypatch.setenv("COLUMNS", "120")
    buf = io.StringIO()
    terminal.render(doc, file=buf)
    for out in (buf.getvalue(), markdown.render(doc)):
        assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
        assert "\\x1b[2J" in out or "CUDA out of memory" in out

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_a_command_that_changes_shared_state_carries_its_caution_everywhere(engine):
    """A drain (XID 79's second command) says what it does to other users and what to record first, in
    the JSON, the terminal (a mark in the summary, the text in the details), Markdown and Slack, en and zh."""
    import io
    import json

    from bot.render import as_dict, blocks, markdown, terminal

    text = (EXAMPLES / "nvsentinel-fallen-off-bus-probe-failed.log").read_text(encoding="utf-8")
    for lang, word in (("en", "caution"), ("zh", "注意")):
        doc = as_dict(engine.diagnose_text(text), lang=lang)
        cmds = doc["causes"][0]["next_commands"]
        drain = next(c for c in cmds if "drain" in c["command"])
        assert drain["caution"] and drain.get("root") is True
        assert ("Record first" in drain["caution"]) if lang == "en" else ("先" in drain["caution"])
        assert not any(c.get("caution") for c in cmds if "drain" not in c["command"] and "reboot" not in c["command"]
                       and "reset" not in c["command"] and "rm " not in c["command"])
        buf = io.StringIO()
        terminal.render(doc, file=buf)
        flat = "".join(buf.getvalue().split())  # Chinese wraps between characters: compare without spaces
        assert f"⚠{word}" in flat and "".join(drain["caution"].split())[:40] in flat
        assert drain["caution"] in markdown.render(doc)
        assert word in json.dumps(blocks.render(doc).blocks, ensure_ascii=False)


def test_chinese_wraps_between_characters_and_fills_its_rows():
    """A Chinese paragraph (a real entry's zh text) wraps as Chinese is written: rows are filled to the
    width, never wider, no row starts with closing punctuation, and English words stay whole."""
    from rich.cells import cell_len
    from rich.text import Text

    from bot.render.terminal import _wrap_cjk
    from knowledge.loader import load_dir

    entries, _ = load_dir(Path(__file__).resolve().parent.parent / "knowledge" / "entries")
    zh = next(e for e in entries if e.id == "ib-transport-retry-exceeded").cause["zh"]
    words = set(re.findall(r"[A-Za-z_]{4,}", zh))
    for room in (40, 60, 78):
        rows = [r.plain for r in _wrap_cjk(Text(zh), room)]
        assert "".join(rows).replace(" ", "") == zh.replace(" ", "").replace("\n", "")
        assert all(cell_len(r) <= room for r in rows)
        assert all(r[:1] not in "，。、；：）" for r in rows[1:])
        assert all(cell_len(r) >= room - 12 for r in rows[:-1])  # no half-empty rows before a long run
        assert words <= set(re.findall(r"[A-Za-z_]{4,}", " ".join(rows)))  # no English word split
