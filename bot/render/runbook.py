"""The published team runbook: one Markdown page per failure mode, in English and Chinese.

A page says what the failure looks like (its example lines and signatures), lists the incidents
the team confirmed, then the next commands and the fix, first in English, then in Chinese.
Pages are written for team entries and for curated entries that have incidents (``everything``
writes every entry); ``README.md`` indexes them by category.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bot.messages import t
from bot.render.markdown import _fence


def page(entry, incidents: list[dict[str, Any]], seen: int) -> str:
    out = [f"# {entry.title['en']} / {entry.title['zh']}", "",
           f"`{entry.id}` · {entry.category} · {t(f'origin.{entry.origin}', 'en')} / "
           f"{t(f'origin.{entry.origin}', 'zh')} · support: {entry.support.get('tier')}", ""]
    out += [f"## {t('runbook_looks_like', 'en')} / {t('runbook_looks_like', 'zh')}", ""]
    for line in entry.examples.get("match", []):
        out += [_fence(line), ""]
    if entry.signatures:
        out += ["Signatures:", ""] + [f"- `{s}`" for s in entry.signatures] + [""]
    out += [f"## {t('runbook_incidents', 'en')} / {t('runbook_incidents', 'zh')}", ""]
    if incidents:
        out += ["| date | node | job | first error |", "|---|---|---|---|"]
        for i in incidents:
            first = (i.get("first_error") or "").replace("|", "/")[:160]
            out.append(f"| {i['created'][:10]} | {i.get('node') or ''} | {i.get('job') or ''} | {first} |")
        out.append("")
    else:
        out += [f"{t('runbook_no_incidents', 'en')} {t('runbook_no_incidents', 'zh')}", ""]
    if seen:
        out += [f"Diagnosed as the top cause {seen} time(s). / 作为首要原因被诊断 {seen} 次。", ""]
    for lang in ("en", "zh"):
        out += [f"## {'English' if lang == 'en' else '中文'}", "", entry.cause[lang], "",
                f"### {t('next_commands', lang)}", ""]
        out += [f"{n}. `{c['command']}` — {c['why'][lang]}" for n, c in enumerate(entry.next_commands, 1)]
        out += ["", f"### {t('fix', lang)}", ""] + [f"- {f}" for f in entry.fix[lang]]
        out += ["", f"**{t('support', lang)}:** {t('tier.' + entry.support['tier'], lang)} — "
                    f"{entry.support['why'][lang]}", ""]
    out += [f"{t('references', 'en')} / {t('references', 'zh')}: " + " ".join(f"<{r}>" for r in entry.references), ""]
    return "\n".join(out)


def write_runbook(store, runbook, directory: Path, *, everything: bool = False) -> list[Path]:
    counts = dict(runbook.db.execute(
        "SELECT top_cause, count(*) FROM incidents WHERE top_cause != '' GROUP BY top_cause").fetchall())
    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    index: dict[str, list[str]] = {}
    for entry in store.entries():
        incidents = runbook.confirmed_incidents(entry.id)
        seen = counts.get(entry.id, 0)
        if not (everything or entry.origin == "team" or incidents or seen):
            continue
        path = directory / f"{entry.id}.md"
        path.write_text(page(entry, incidents, seen), encoding="utf-8")
        written.append(path)
        index.setdefault(entry.category, []).append(
            f"- [{entry.title['en']} / {entry.title['zh']}]({entry.id}.md) — {len(incidents)} confirmed")
    lines = [f"# {t('runbook_index', 'en')} / {t('runbook_index', 'zh')}", ""]
    for category in sorted(index):
        lines += [f"## {category}", ""] + index[category] + [""]
    (directory / "README.md").write_text("\n".join(lines), encoding="utf-8")
    return written
