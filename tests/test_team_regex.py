"""Team entries' signatures run on every diagnosis: they are matched in RE2 (linear time), so a
pattern that backtracks catastrophically in Python's re cannot stall the bot, and a pattern RE2
cannot run (backreferences, look-around) is refused with the line to change."""

from __future__ import annotations

import time

from knowledge.match import Matcher
from knowledge.team import validate_data


def team_entry(signature: str, example: str):
    data = {
        "id": "leaf-switch-flap", "category": "communication",
        "title": {"en": "Leaf switch flaps", "zh": "叶交换机抖动"},
        "signatures": [signature],
        "cause": {"en": "The leaf switch flaps under load.", "zh": "叶交换机在负载下抖动。"},
        "next_commands": [{"command": "ssh leaf3 show logging", "why": {"en": "See the flaps.", "zh": "查看抖动。"}}],
        "fix": {"en": ["Replace the optic."], "zh": ["更换光模块。"]},
        "support": {"tier": "onsite", "why": {"en": "Hands on the switch.", "zh": "需要现场处理交换机。"}},
        "references": ["https://docs.nvidia.com/networking/"],
        "examples": {"match": [example]},
    }
    return validate_data(data, name="leaf-switch-flap.yaml")


def test_a_backtracking_pattern_runs_in_linear_time():
    entry, errors = team_entry(r"(a+)+$", "aaaa")
    assert entry is not None, errors
    m = Matcher([entry])
    text = "a" * 40 + "!"
    started = time.perf_counter()
    hit = m._compiled[0].pattern(0).search(text)
    assert hit is None and time.perf_counter() - started < 0.5


def test_a_pattern_re2_cannot_run_is_refused_with_the_reason():
    entry, errors = team_entry(r"(\w+) \1 port down", "eth0 eth0 port down")
    assert entry is None
    assert "not a linear-time (RE2) pattern" in str(errors[0]) and "backreferences" in str(errors[0])
    entry, errors = team_entry(r"(?<!admin )port down", "link port down")
    assert entry is None and "RE2" in str(errors[0])
