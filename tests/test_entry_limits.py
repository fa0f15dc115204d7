"""Knowledge entries have bounded sizes: every entry is matched against every error line of every
diagnosis, so a team entry with 200 000 phrases or a 20 MB title is refused with the limit it broke
(knowledge.loader.LIMITS), quickly and in one line per problem, never after minutes or a traceback."""

from __future__ import annotations

import time

from bot.cli import main
from knowledge.loader import LIMITS, load_dir
from knowledge.team import validate_data

GOOD = """id: {id}
category: communication
title: {{en: "Leaf switch reboots", zh: "交换机重启"}}
cause: {{en: "The leaf switch reboots under load.", zh: "交换机在负载下重启。"}}
signatures: ["leaf switch \\\\d+ rebooted"]
next_commands: [{{command: "show log", why: {{en: "See the reboots.", zh: "查看重启记录。"}}}}]
fix: {{en: ["Drain rack B"], zh: ["排空 B 机架"]}}
support: {{tier: onsite, why: {{en: "Hands on the switch.", zh: "需要现场处理交换机。"}}}}
references: ["https://example.com/x"]
examples: {{match: ["leaf switch 3 rebooted"]}}
"""


def entry_data(**over):
    data = {
        "id": "leaf-switch-reboots", "category": "communication",
        "title": {"en": "Leaf switch reboots", "zh": "交换机重启"},
        "signatures": [r"leaf switch \d+ rebooted"],
        "cause": {"en": "The leaf switch reboots under load.", "zh": "交换机在负载下重启。"},
        "next_commands": [{"command": "show log", "why": {"en": "See the reboots.", "zh": "查看重启记录。"}}],
        "fix": {"en": ["Drain rack B"], "zh": ["排空 B 机架"]},
        "support": {"tier": "onsite", "why": {"en": "Hands on the switch.", "zh": "需要现场处理交换机。"}},
        "references": ["https://example.com/x"],
        "examples": {"match": ["leaf switch 3 rebooted"]},
    }
    data.update(over)
    return data


def test_an_entry_within_the_limits_is_accepted():
    entry, errors = validate_data(entry_data(), name="leaf-switch-reboots.yaml")
    assert entry is not None, errors


def test_200_000_phrases_are_refused_at_once_with_the_limit():
    started = time.perf_counter()
    entry, errors = validate_data(entry_data(phrases=[f"phrase number {i} words here" for i in range(200_000)]),
                                  name="leaf-switch-reboots.yaml")
    assert entry is None and len(errors) == 1
    assert "phrases has 200000 items" in str(errors[0]) and f"at most {LIMITS['items']}" in str(errors[0])
    assert time.perf_counter() - started < 5


def test_a_long_title_and_a_long_cause_are_refused_with_their_key():
    entry, errors = validate_data(entry_data(title={"en": "x" * (LIMITS["title"] + 1), "zh": "短"},
                                             cause={"en": "y" * (LIMITS["text"] + 1), "zh": "原因"}),
                                  name="leaf-switch-reboots.yaml")
    assert entry is None
    text = "\n".join(map(str, errors))
    assert f"title.en is {LIMITS['title'] + 1} characters long; at most {LIMITS['title']}" in text
    assert f"cause.en is {LIMITS['text'] + 1} characters long" in text


def test_kb_add_refuses_a_20_mb_file_and_a_100_000_character_title_flag(tmp_path, capsys):
    big = tmp_path / "team-long-title.yaml"
    big.write_text(GOOD.format(id="team-long-title").replace('en: "Leaf switch reboots"', 'en: "' + "x" * 20_000_000 + '"'))
    started = time.perf_counter()
    assert main(["--data-dir", str(tmp_path / "data"), "kb", "add", str(big)]) == 1
    assert time.perf_counter() - started < 10
    err = capsys.readouterr().err
    assert f"over {LIMITS['file_bytes'] // 1024} KB" in err and "Traceback" not in err
    assert main(["--data-dir", str(tmp_path / "data"), "kb", "add", "--title", "t" * 100_000, "--category",
                 "communication", "--cause", "c", "--line", "leaf switch 3 rebooted", "--fix", "f",
                 "--reference", "https://example.com"]) == 1
    assert "title.en is 100000 characters long" in capsys.readouterr().err


def test_50_000_deep_yaml_is_a_syntax_error_not_a_traceback(tmp_path, capsys):
    deep = tmp_path / "team-deep.yaml"
    deep.write_text(GOOD.format(id="team-deep") + "phrases: " + "[" * 50_000 + "]" * 50_000 + "\n")
    assert main(["--data-dir", str(tmp_path / "data"), "kb", "add", str(deep)]) == 1
    err = capsys.readouterr().err
    assert f"team-deep.yaml:11: YAML syntax error: nested deeper than {LIMITS['depth']} levels" in err
    assert "Traceback" not in err and "RecursionError" not in err


LAUGHS = ('[&a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"], '
          + ", ".join(f"&a{n} [" + ",".join([f"*a{n - 1}"] * 9) + "]" for n in range(1, 10)) + "]")


def test_a_billion_laughs_is_refused_at_once_wherever_it_is(tmp_path, capsys):
    """YAML aliases nine deep (9^10 strings if expanded) in phrases, a title or a finding rule's value."""
    cases = {"phrases": "phrases: " + LAUGHS,
             "title": 'title: {en: ' + LAUGHS + ', zh: "x"}',
             "findings": "findings: [{kind: xid, code: " + LAUGHS + "}]"}
    for name, line in cases.items():
        path = tmp_path / f"team-laughs-{name}.yaml"
        text = GOOD.format(id=path.stem)
        key = line.split(":", 1)[0] + ":"
        text = "\n".join(ln for ln in text.splitlines() if not ln.startswith(key)) + "\n" + line + "\n"
        path.write_text(text)
        started = time.perf_counter()
        assert main(["--data-dir", str(tmp_path / "data"), "kb", "add", str(path)]) == 1, name
        assert time.perf_counter() - started < 10, name
        err = capsys.readouterr().err
        assert f"team-laughs-{name}.yaml:" in err and "Traceback" not in err, err


def test_the_shipped_entries_are_within_the_limits():
    entries, errors = load_dir(examples=False)
    assert entries and not errors
