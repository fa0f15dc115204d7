"""The README keeps up with the code: every command, collector and category appears with an example,
and the quick start's commands are the ones CI runs."""

import re
from pathlib import Path

from bot.cli import _parser
from collectors.registry import collectors
from knowledge.loader import CATEGORIES

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _subcommands(parser, prefix=""):
    for action in parser._actions:  # argparse keeps subparsers here
        if getattr(action, "choices", None) and isinstance(action.choices, dict):
            for name, sub in action.choices.items():
                yield f"{prefix}{name}"
                yield from _subcommands(sub, f"{prefix}{name} ")


def test_every_command_has_an_example():
    commands = list(_subcommands(_parser()))
    assert {"diagnose", "collect", "serve", "preflight", "kb list", "kb validate"} <= set(commands)
    for command in commands:
        assert f"gpu-triage {command}" in README, f"README has no example of `gpu-triage {command}`"


def test_every_collector_and_category_is_documented():
    for name in collectors():
        assert f"`{name}`" in README, name
    for category in CATEGORIES:
        assert f"`{category}`" in README, category


def test_quick_start_is_what_ci_runs():
    quick = README.split("## Quick start", 1)[1].split("##", 1)[0]
    block = re.search(r"```sh\n(.*?)```", quick, re.S).group(1).strip().splitlines()
    assert len(block) == 2 and block[0].startswith("pip install . && gpu-triage diagnose examples/")
    assert (ROOT / block[0].split()[-1]).is_file()
    assert block[1] == "bash .ci/run"
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install '.[test]' && python -m pytest" in ci and "`pip install '.[test]' && python -m pytest`" in README


def test_every_example_gives_the_answer_its_readme_promises(engine):
    """examples/README.md lists one real log per category with its expected top cause."""
    table = (ROOT / "examples" / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([^`]+\.log)` \| ([a-z-]+) \| `([a-z0-9-]+)` \|", table, re.M)
    assert {cat for _, cat, _ in rows} == set(CATEGORIES), rows
    listed = {f for f, _, _ in rows}
    assert listed == {p.name for p in (ROOT / "examples").glob("*.log")}, "every example log is listed once"
    for name, category, cause in rows:
        d = engine.diagnose_paths([str(ROOT / "examples" / name)])
        assert d.causes and (d.causes[0].id, d.causes[0].category) == (cause, category), name
