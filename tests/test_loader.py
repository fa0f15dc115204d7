"""Entry validation: every shipped entry loads; every kind of bad file is named with file:line."""

import textwrap
from pathlib import Path

import pytest

from knowledge.loader import CATEGORIES, EntryError, entries_dir, load_dir, load_file


def finder(line):
    """The training-log parser, as `gpu-triage kb validate` uses it to check finding rules."""
    from collectors.trainlog import parse_text

    return parse_text(line, source="example").findings

GOOD = textwrap.dedent("""\
    id: shm-bus-error
    category: shared-memory
    title: {en: "DataLoader workers ran out of /dev/shm", zh: "DataLoader 工作进程耗尽了 /dev/shm"}
    signatures:
      - 'dataloader worker \\(pid \\d+\\) is killed by signal: bus error'
    phrases:
      - 'out of shared memory. Please try to raise your shared memory limit'
    findings:
      - {kind: shm-usage, min_used_pct: 90}
      - {kind: cuda-oom, rules_out: true}
    cause: {en: "Workers write batches into /dev/shm.", zh: "工作进程通过 /dev/shm 传递批数据。"}
    next_commands:
      - {command: 'df -h /dev/shm', why: {en: "how full it is", zh: "查看使用率"}}
    fix: {en: ["docker run --shm-size=16g"], zh: ["docker run --shm-size=16g"]}
    support: {tier: self, why: {en: "a flag", zh: "一个参数"}, drivers: [reproducibility]}
    references: [https://pytorch.org/docs/stable/data.html]
    examples:
      match: ['RuntimeError: DataLoader worker (pid 4070) is killed by signal: Bus error. It is possible that dataloader''s workers are out of shared memory. Please try to raise your shared memory limit.']
      near_miss: ['RuntimeError: DataLoader worker (pid(s) 4070) exited unexpectedly']
    """)


def write(tmp_path: Path, text: str, name: str = "shm-bus-error.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_shipped_entries_are_valid_and_cover_every_category():
    entries, errors = load_dir(entries_dir(), finder=finder)
    assert not errors, "\n".join(map(str, errors))
    assert len(entries) >= 60
    assert {e.category for e in entries} == set(CATEGORIES)
    for entry in entries:
        assert entry.examples["match"], f"{entry.id} has no real example line"
        assert entry.examples.get("near_miss"), f"{entry.id} has no near miss"
        for lang in ("en", "zh"):
            assert entry.title[lang] and entry.cause[lang] and entry.fix[lang]
            assert all(c["why"][lang] for c in entry.next_commands)


def test_good_entry_loads(tmp_path):
    entry = load_file(write(tmp_path, GOOD))
    assert entry.id == "shm-bus-error"
    assert entry.category == "shared-memory"
    assert entry.findings[1]["rules_out"] is True


@pytest.mark.parametrize("change, line, reason", [
    (("category: shared-memory", "category: shm"), 2, "category 'shm' is not one of"),
    (("id: shm-bus-error", "id: other-name"), 1, "must equal the file name"),
    (("  - 'dataloader worker", "  - '(dataloader worker"), 5, "does not compile"),
    (("  - {kind: shm-usage, min_used_pct: 90}", "  - {kind: shm-full, min_used_pct: 90}"), 9, "unknown finding kind"),
    (("  - {kind: shm-usage, min_used_pct: 90}", "  - {kind: shm-usage, min_usage: 90}"), 9, "has no attribute 'usage'"),
    (('zh: "工作进程通过 /dev/shm 传递批数据。"', 'de: "x"'), 11, "needs a non-empty 'zh'"),
    (("support: {tier: self,", "support: {tier: cheap,"), 15, "support tier 'cheap'"),
    (("references: [https://pytorch.org/docs/stable/data.html]", "references: [pytorch docs]"), 16, "not an http"),
    (("category: shared-memory\n", "category: shared-memory\nseverity: high\n"), 3, "unknown key 'severity'"),
    (("near_miss: ['RuntimeError: DataLoader worker (pid(s) 4070) exited unexpectedly']",
      "near_miss: ['RuntimeError: DataLoader worker (pid 9) is killed by signal: Bus error.']"), 17, "near miss"),
    (("match: ['RuntimeError: DataLoader worker (pid 4070) is killed", "match: ['RuntimeError: CUDA error: out of memory', '"),
     17, "is not matched"),
])
def test_bad_entry_is_named_with_file_line_and_reason(tmp_path, change, line, reason):
    old, new = change
    assert old in GOOD
    path = write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(EntryError) as exc:
        load_file(path, finder=finder)
    assert str(exc.value).startswith(f"{path}:{line}: "), str(exc.value)
    assert reason in str(exc.value)


def test_yaml_syntax_error_has_its_line(tmp_path):
    path = write(tmp_path, GOOD.replace("category: shared-memory", "category: [shared-memory"))
    with pytest.raises(EntryError) as exc:
        load_file(path)
    assert "YAML syntax error" in str(exc.value)
    assert str(exc.value).startswith(f"{path}:")


def test_invalid_utf8_and_missing_keys(tmp_path):
    bad = write(tmp_path, "", "x.yaml")
    bad.write_bytes(b"id: x\ncategory: \xff\xfe\n")
    with pytest.raises(EntryError, match=r"x.yaml:2: not valid UTF-8"):
        load_file(bad)
    with pytest.raises(EntryError, match="missing required key 'cause'"):
        load_file(write(tmp_path, GOOD.replace('cause: {en: "Workers write batches into /dev/shm.", '
                                               'zh: "工作进程通过 /dev/shm 传递批数据。"}\n', "")))


def test_load_dir_reports_every_bad_file_and_keeps_the_good(tmp_path):
    write(tmp_path, GOOD)
    write(tmp_path, GOOD.replace("shm-bus-error", "second").replace("category: shared-memory", "category: x"),
          "second.yaml")
    write(tmp_path, "id: [unclosed\n", "third.yaml")
    entries, errors = load_dir(tmp_path)
    assert [e.id for e in entries] == ["shm-bus-error"]
    assert sorted(Path(e.path).name for e in errors) == ["second.yaml", "third.yaml"]
