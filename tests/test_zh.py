"""Chinese everywhere a person reads (issue 12): every rendering of a diagnosis (terminal, Markdown,
Slack blocks, --explain), `kb show` and preflight, in zh, has no English sentence left in it.

An English *sentence* is a run of three or more English words outside what stays as it is in any
language: commands and code (`...`), quoted text, the log's own lines, the messages the software
prints (the catalogs' texts), identifiers and file names. Single technical words (rank, NCCL,
checkpoint) are how Chinese engineers write them and are not counted."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from bot.render import as_dict, blocks, markdown, terminal

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.log"))
RUN = re.compile(r"(?<![\w'/.<>=-])(?:[A-Za-z][a-z]+[ ,]+){2,}[A-Za-z][a-z]+(?![\w'/.<>=-])")
QUOTED = re.compile(r"`[^`]*`|\"[^\"]*\"|“[^”]*”|'[^']*'|「[^」]*」|‘[^’]*’")


def _known_messages() -> list[str]:
    """What software prints, from the catalogs: quoting it in a Chinese sentence is right."""
    from knowledge.catalog import catalog_files, load_file

    out = []
    for path in catalog_files():
        rows, _ = load_file(path, validate=False)
        out += [r.text.lower() for r in rows if getattr(r, "text", None)]
    return out


MESSAGES = _known_messages()


def english_runs(text: str, verbatim: list[str]) -> list[str]:
    """Runs of 3+ English words in ``text`` not inside code, quotes, the verbatim strings (log lines,
    commands) or a catalogued message."""
    found = []
    low_verbatim = [v.lower() for v in verbatim if v]
    for raw in text.splitlines():
        line = QUOTED.sub(" ", raw.strip().rstrip("…"))
        for m in RUN.finditer(line):
            run = m.group().strip(" ,").lower()
            if any(run in v for v in low_verbatim) or any(run in msg for msg in MESSAGES):
                continue
            found.append(f"{run!r} in {raw.strip()[:120]!r}")
    return found


def _verbatim(doc) -> list[str]:
    out = [doc["first_error"]["line"]] if doc.get("first_error") else []
    for c in doc["causes"]:
        out += [e.get("line") or "" for e in c["evidence"]]
        out += [n["command"] for n in c["next_commands"]]
    return out


def _texts(node) -> list[str]:
    """Every "text" string in Slack blocks, whatever the nesting."""
    if isinstance(node, list):
        return [t for n in node for t in _texts(n)]
    if isinstance(node, dict):
        out = [node["text"]] if isinstance(node.get("text"), str) else []
        return out + [t for k, v in node.items() if k != "text" or not isinstance(v, str) for t in _texts(v)]
    return []


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_rendering_of_a_diagnosis_is_chinese(engine, path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # no wrapping: a command stays on one line
    doc = as_dict(engine.diagnose_paths([str(path)]), lang="zh", explain=True)
    verbatim = _verbatim(doc) + path.read_text(encoding="utf-8", errors="replace").splitlines()
    buf = io.StringIO()
    terminal.render(doc, file=buf)
    slack = "\n".join(_texts(blocks.render(doc).blocks))
    problems = {name: english_runs(text, verbatim)
                for name, text in (("terminal", buf.getvalue()), ("markdown", markdown.render(doc)), ("slack", slack))}
    assert not any(problems.values()), json.dumps(problems, ensure_ascii=False, indent=1)


def test_kb_show_is_chinese(capsys, tmp_path):
    from bot.cli import main

    for entry in ("xid-79-fallen-off-bus", "nccl-watchdog-timeout", "memlock-limit-too-low", "dataloader-bus-error-shm"):
        code = main(["--data-dir", str(tmp_path), "kb", "show", entry, "--lang", "zh"])
        out = capsys.readouterr().out
        if code != 0:
            continue  # an id that does not exist in this knowledge base
        verbatim = [ln for ln in out.splitlines() if re.match(r"\s*\d+\.\s", ln)]  # the numbered commands
        assert not english_runs(out, verbatim), english_runs(out, verbatim)


def test_the_checker_finds_an_english_sentence():
    assert english_runs("原因：the first rank to fail is nearest the root cause", [])
    assert not english_runs("原因：`nvidia-smi -q -d ECC` 显示 \"No space left on device\"", [])
