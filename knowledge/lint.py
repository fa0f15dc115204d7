"""Checks that keep the advice in the knowledge entries right, beyond what the loader validates.

Each check takes loaded entries (:class:`knowledge.loader.Entry`) and returns :class:`Problem`\\ s;
``tests/test_entry_lint.py`` runs them over every shipped entry. The facts they check against are
data: ``knowledge/tool_options.yaml`` (what each tool accepts, which uses need root, which change
shared state, each with its source) and ``docs/glossary.md`` (the Chinese terms every zh text uses).

* :func:`check_options` - every flag an entry's command gives ``nvidia-smi``, ``dcgmi``,
  ``ibdiagnet``, ``perfquery``, ``ibqueryerrors``, the perftest and nccl-tests binaries, ``scontrol``
  and ``sacct`` is one the tool documents, and so are the ``-d`` types, ``--query-gpu`` fields,
  ``sacct --format`` fields and ``scontrol update`` states;
* :func:`check_shared_state` - a command that resets counters, resets a GPU, drains a node, deletes
  files or restarts a service carries ``caution:`` saying what to record first;
* :func:`check_root` - a command that needs root says so (``sudo`` or ``root: true``);
* :func:`check_fabric_tests` - a bandwidth test (nccl-tests, perftest) that does not span two nodes
  says it tests one node only and never claims to rule the fabric in or out;
* :func:`check_zh` - no banned calque in a Chinese text, and one term for one thing.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

import yaml

HERE = Path(__file__).resolve().parent
TOOL_OPTIONS = HERE / "tool_options.yaml"
GLOSSARY = HERE.parent / "docs" / "glossary.md"


@dataclass(frozen=True)
class Problem:
    entry: str
    where: str  # "next_commands[2]", "cause.zh", ...
    reason: str

    def __str__(self) -> str:
        return f"{self.entry}: {self.where}: {self.reason}"


def load_rules(path: Path | None = None) -> dict[str, Any]:
    return yaml.safe_load((path or TOOL_OPTIONS).read_text(encoding="utf-8"))


# --- reading a shell line ----------------------------------------------------------------------

_OPERATORS = {";", "&&", "||", "|", "&", "(", ")", "|&", ";;"}
_NESTED = {"bash", "sh", "ssh"}  # their quoted argument is itself a command line


@dataclass
class Simple:
    """One simple command: its words (quotes removed) and whether its output is redirected where."""

    words: list[str]
    redirects: list[str]


_PLACEHOLDER = re.compile(r"<[A-Za-z][^<>\n]*>")


def _tokens(line: str) -> list[str]:
    """Shell words; an entry's placeholders (``<jobid>``, ``<log of that rank>``) stay one word."""
    held: list[str] = []

    def hold(m: re.Match) -> str:
        held.append(m.group(0))
        return f"\x00{len(held) - 1}\x00"

    masked = re.sub(r"(?<=\s)\d+(?=[<>])", "", _PLACEHOLDER.sub(hold, line))  # '2>&1': the fd is no word
    lex = shlex.shlex(masked, posix=True, punctuation_chars=";&|()<>")
    lex.whitespace_split = True
    lex.commenters = "#"
    try:
        words = list(lex)
    except ValueError:  # unbalanced quotes: fall back to words
        words = masked.split()
    return [re.sub(r"\x00(\d+)\x00", lambda m: held[int(m.group(1))], w) for w in words]


def simple_commands(line: str) -> list[Simple]:
    """Split a command line into simple commands; the quoted line given to ``bash -c``, ``sh -c`` or
    ``ssh host`` is split too, as its own commands."""
    out: list[Simple] = []
    cur = Simple([], [])
    toks = _tokens(line)
    i = 0
    while i < len(toks):
        tok = toks[i]
        if tok in _OPERATORS or (tok and set(tok) <= set(";&|()")):
            if cur.words:
                out.append(cur)
            cur = Simple([], [])
        elif tok and set(tok) <= set("<>&"):
            target = toks[i + 1] if i + 1 < len(toks) else ""
            cur.redirects.append(target)
            i += 1
        else:
            cur.words.append(tok)
        i += 1
    if cur.words:
        out.append(cur)
    nested: list[Simple] = []
    for cmd in out:
        names = [Path(w).name for w in cmd.words]
        for k, name in enumerate(names):
            if name in _NESTED:
                for w in cmd.words[k + 1:]:
                    if " " in w:
                        nested.extend(simple_commands(w))
    return out + nested


def _uses(words: list[str], tool: str) -> list[int]:
    """Indices where ``tool`` is run (not merely named as a grep pattern or a pgrep target)."""
    hits = []
    for k, w in enumerate(words):
        if Path(w).name == tool and w == w.strip():
            prev = Path(words[k - 1]).name if k else ""
            if prev in ("grep", "egrep", "pgrep", "pkill", "which", "man", "-C", "type", "command"):
                continue
            hits.append(k)
    return hits


def tool_runs(command: str, tool: str) -> Iterator[tuple[Simple, list[str]]]:
    """Each run of ``tool`` in the command line, with the words after it."""
    for cmd in simple_commands(command):
        for k in _uses(cmd.words, tool):
            yield cmd, cmd.words[k + 1:]


def _commands(entry) -> Iterator[tuple[int, dict[str, Any]]]:
    yield from enumerate(entry.next_commands)


# --- option lists -----------------------------------------------------------------------------

def _spec_options(spec: dict[str, Any]) -> tuple[set[str], set[str]]:
    flags, valued = set(), set()
    for opt in spec.get("options") or []:
        if opt.endswith("="):
            valued.add(opt[:-1])
        else:
            flags.add(opt)
    return flags, valued


def _value_key(spec: dict[str, Any], opt: str, valued: set[str]) -> str | None:
    """The key under ``values`` for an option: itself, or the short/long alias listed beside it."""
    values = spec.get("values") or {}
    if opt in values:
        return opt
    opts = [o.rstrip("=") for o in spec.get("options") or []]
    if opt in opts:
        k = opts.index(opt)
        for near in opts[max(0, k - 1): k + 2]:
            if near in values:
                return near
    return None


def _check_value(spec, key, value, tool) -> list[str]:
    allowed = (spec.get("values") or {}).get(key)
    if allowed is None or value.startswith(("<", "$", "{")):
        return []
    ci = spec.get("case_insensitive_values")
    norm = (lambda s: s.lower()) if ci else (lambda s: s)
    known = {norm(str(a)) for a in allowed}
    bad = []
    for item in value.split(","):
        item = item.strip()
        base = item.split("%")[0] if ci else item  # sacct: Field%width
        if item and norm(base) not in known and not item.startswith("<"):
            bad.append(f"{tool} {key}: {item!r} is not one it accepts")
    return bad


def parse_args(tool: str, spec: dict[str, Any], args: list[str]) -> tuple[list[str], str | None, list[str]]:
    """Walk ``args`` against ``spec``; return (problems, subcommand used, positional words)."""
    problems: list[str] = []
    sub: str | None = None
    positional: list[str] = []
    flags, valued = _spec_options(spec)
    i = 0
    while i < len(args):
        a = args[i]
        i += 1
        if a.startswith("-") and len(a) > 1 and not re.fullmatch(r"-\d+", a):
            name, eq, value = a.partition("=")
            if name in flags and not eq:
                continue
            if name in valued:
                if not eq:
                    if i >= len(args):
                        problems.append(f"{tool} {name} needs a value")
                        break
                    value = args[i]
                    i += 1
                key = _value_key(spec, name, valued)
                if key:
                    problems += _check_value(spec, key, value, tool)
                continue
            glued = next((v for v in sorted(valued, key=len, reverse=True)
                          if not v.startswith("--") and a.startswith(v) and len(a) > len(v)), None)
            if glued:  # -N1, -lms500
                continue
            where = f" {sub}" if sub else ""
            problems.append(f"{tool}{where}: option {a.split('=')[0]!r} is not in its documented option list")
            continue
        subs = spec.get("subcommands") or {}
        if sub is None and a in subs:
            sub = a
            spec = {**subs[a], "case_insensitive_values": spec.get("case_insensitive_values")}
            flags, valued = _spec_options(spec)
            continue
        positional.append(a)
    return problems, sub, positional


def _check_positional(tool: str, spec: dict[str, Any], sub: str | None, positional: list[str]) -> list[str]:
    subs = spec.get("subcommands") or {}
    if tool == "scontrol":
        if sub is None:
            return [f"scontrol: subcommand {positional[0] if positional else ''!r} is not one it documents"]
        sspec = subs[sub]
        out = []
        words = sspec.get("positional")
        keys = {k.lower(): k for k in sspec.get("keys") or []}
        for w in positional:
            if "=" in w and keys:
                k, _, v = w.partition("=")
                if k.lower() not in keys:
                    out.append(f"scontrol {sub}: key {k!r} is not one it documents")
                    continue
                allowed = (sspec.get("values") or {}).get(keys[k.lower()])
                if allowed and not v.startswith("<") and v.upper() not in {x.upper() for x in allowed}:
                    out.append(f"scontrol {sub}: {keys[k.lower()]}={v} is not a state it accepts")
            elif words is not None and w is positional[0] and w.lower() not in {x.lower() for x in words}:
                out.append(f"scontrol {sub}: {w!r} is not one of {', '.join(words)}")
        return out
    return []


def check_options(entries: Iterable[Any], rules: dict[str, Any] | None = None) -> list[Problem]:
    rules = rules or load_rules()
    tools = rules["tools"]
    out: list[Problem] = []
    for e in entries:
        for n, cmd in _commands(e):
            for tool, spec in tools.items():
                for _, args in tool_runs(cmd["command"], tool):
                    problems, sub, positional = parse_args(tool, spec, args)
                    problems += _check_positional(tool, spec, sub, positional)
                    out += [Problem(e.id, f"next_commands[{n}]", p) for p in problems]
    return out


# --- shared state and root ------------------------------------------------------------------------

def _rule_hits(rule: dict[str, Any], cmd: Simple, args: list[str], rules: dict[str, Any]) -> bool:
    tool = rule["tool"]
    spec = rules["tools"].get(tool) or {}
    sub = None
    if spec.get("subcommands"):
        sub = next((a for a in args if a in spec["subcommands"]), None)
    want = rule.get("subcommand")
    if want is not None and sub not in ([want] if isinstance(want, str) else want):
        return False
    if rule.get("no_subcommand") and sub is not None:
        return False
    text = " ".join(args)
    if rule.get("with") and not re.search(rule["with"], text, re.IGNORECASE):
        return False
    if rule.get("redirect") and not any(re.search(rule["redirect"], r) for r in cmd.redirects):
        return False
    return True


def _matching(command: str, table: list[dict[str, Any]], rules: dict[str, Any]) -> Iterator[tuple[dict, Simple]]:
    for rule in table:
        for cmd, args in tool_runs(command, rule["tool"]):
            if _rule_hits(rule, cmd, args, rules):
                yield rule, cmd


def _bilingual(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(value.get(k), str) and value[k].strip() for k in ("en", "zh"))


def check_shared_state(entries: Iterable[Any], rules: dict[str, Any] | None = None) -> list[Problem]:
    rules = rules or load_rules()
    out = []
    for e in entries:
        for n, cmd in _commands(e):
            for rule, _ in _matching(cmd["command"], rules["shared_state"], rules):
                if not _bilingual(cmd.get("caution")):
                    out.append(Problem(e.id, f"next_commands[{n}]",
                                       f"{rule['tool']} {rule['what']}: mark the command 'caution: {{en, zh}}' "
                                       "saying what to record first"))
                break
    return out


def check_root(entries: Iterable[Any], rules: dict[str, Any] | None = None) -> list[Problem]:
    rules = rules or load_rules()
    out = []
    for e in entries:
        for n, cmd in _commands(e):
            if cmd.get("root") is True:
                continue
            for rule, simple in _matching(cmd["command"], rules["root_needed"], rules):
                k = _uses(simple.words, rule["tool"])[0]
                if "sudo" not in [Path(w).name for w in simple.words[:k]]:
                    out.append(Problem(e.id, f"next_commands[{n}]",
                                       f"{rule['tool']} needs root here ({rule['why']}): write 'sudo {rule['tool']}' "
                                       "or mark the command 'root: true'"))
                    break
    return out


# --- fabric tests ---------------------------------------------------------------------------------

BANDWIDTH_TESTS = ("all_reduce_perf", "all_gather_perf", "sendrecv_perf", "alltoall_perf",
                   "ib_write_bw", "ib_read_bw", "ib_send_bw")
_LAUNCH_HOSTS = re.compile(r"(?:^|\s)(?:-H|--host|-host)\s+(\S+)|(?:^|\s)(?:-hostfile|--hostfile|-machinefile)\s+\S+")
_SRUN_NODES = re.compile(r"(?:^|\s)(?:-N\s*|--nodes[= ])(\S+)")
# what a test on one node cannot show
_FABRIC_CLAIM_EN = re.compile(r"rule (?:the )?(?:fabric|network|link)s? (?:in|out)|fabric (?:test|check|is|ok)|"
                              r"test(?:s)? the (?:fabric|network|ib|link)|confirms? the (?:link|fabric|network)|"
                              r"\bbetween (?:the )?(?:two )?nodes\b|\bacross (?:the )?nodes\b|inter-node", re.I)
_FABRIC_CLAIM_ZH = re.compile(r"排除网络|确认网络|确认或排除网络|测试网络|网络是否正常|跨节点|节点之间|节点对|确认链路")
_ONE_NODE_EN = re.compile(r"\b(?:one|a single|single|this) node\b|\bintra-node\b|\bwithin (?:the|one) node\b", re.I)
_ONE_NODE_ZH = re.compile(r"单节点|单个节点|一个节点|本节点|节点内")


def spans_nodes(command: str, test: str) -> bool:
    """Does a run of this bandwidth test in the command line reach a second host?"""
    for cmd in simple_commands(command):
        names = [Path(w).name for w in cmd.words]
        if test not in names:
            continue
        before = " ".join(cmd.words[: names.index(test)])
        after = cmd.words[names.index(test) + 1:]
        if re.search(r"\b(mpirun|mpiexec)\b", before):
            m = _LAUNCH_HOSTS.search(before)
            if m and (m.group(1) is None or "," in m.group(1) or m.group(1).startswith("<")):
                return True
        if re.search(r"\bsrun\b", before):
            m = _SRUN_NODES.search(before)
            if m and (m.group(1).startswith(("<", "$")) or (m.group(1).split("-")[0].isdigit()
                                                             and int(m.group(1).split("-")[0]) >= 2)):
                return True
        if test.startswith("ib_"):
            spec_opts = {"-d", "--ib-dev", "-x", "--gid-index", "-p", "--port", "-i", "--ib-port", "-s", "--size",
                         "-D", "--duration", "-q", "--qp", "-m", "--mtu", "-n", "--iters"}
            k = 0
            while k < len(after):
                w = after[k]
                if w.startswith("-"):
                    k += 2 if w in spec_opts else 1
                    continue
                return True  # a peer host: the client side of a two-host test
    return False


def check_fabric_tests(entries: Iterable[Any]) -> list[Problem]:
    out = []
    for e in entries:
        for n, cmd in _commands(e):
            for test in BANDWIDTH_TESTS:
                if not any(True for _ in tool_runs(cmd["command"], test)) or spans_nodes(cmd["command"], test):
                    continue
                why = cmd.get("why") or {}
                en, zh = why.get("en", ""), why.get("zh", "")
                if _FABRIC_CLAIM_EN.search(en) or _FABRIC_CLAIM_ZH.search(zh):
                    out.append(Problem(e.id, f"next_commands[{n}]",
                                       f"{test} on one node is offered as a fabric test; a fabric test runs across "
                                       "the node pair (mpirun -H a,b ... -g 1, or ib_write_bw between the two hosts)"))
                elif not (_ONE_NODE_EN.search(en) and _ONE_NODE_ZH.search(zh)):
                    out.append(Problem(e.id, f"next_commands[{n}]",
                                       f"{test} runs on one node here: say so in why.en and why.zh "
                                       "('on one node' / '单节点'), since it never touches the network"))
                break
    return out


# --- Chinese texts --------------------------------------------------------------------------------

@dataclass
class Glossary:
    terms: list[tuple[str, str, list[str]]]  # (zh, en, variants not to use)
    banned: list[tuple[re.Pattern, str]]     # (pattern, why)


def load_glossary(path: Path | None = None) -> Glossary:
    """The two tables of docs/glossary.md: | 中文 | English | 不用 | and | 禁用 | 原因 |."""
    text = (path or GLOSSARY).read_text(encoding="utf-8")
    terms, banned = [], []
    table = None
    for line in text.splitlines():
        if line.startswith("## "):
            table = "banned" if "禁用" in line or "Banned" in line else "terms"
            continue
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if cells[0] in ("中文", "禁用", "pattern"):
            continue
        if table == "terms" and len(cells) >= 2:
            avoid = [v.strip().strip("`") for v in cells[2].split("、")] if len(cells) > 2 and cells[2] else []
            terms.append((cells[0], cells[1], [v for v in avoid if v]))
        elif table == "banned" and len(cells) >= 2:
            banned.append((re.compile(cells[0].strip("`")), cells[1]))
    return Glossary(terms, banned)


def zh_texts(data: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """Every Chinese text in an entry-like structure: values under a 'zh' key (and 'name_zh',
    'action_zh' of the XID catalog), with where they are."""
    if isinstance(data, dict):
        for k, v in data.items():
            here = f"{path}.{k}" if path else str(k)
            if k == "zh" or (isinstance(k, str) and k.endswith("_zh")):
                if isinstance(v, str):
                    yield here, v
                elif isinstance(v, list):
                    for i, s in enumerate(v):
                        if isinstance(s, str):
                            yield f"{here}[{i}]", s
            else:
                yield from zh_texts(v, here)
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from zh_texts(v, f"{path}[{i}]")


def check_zh_text(owner: str, where: str, text: str, glossary: Glossary) -> list[Problem]:
    out = []
    for pattern, why in glossary.banned:
        m = pattern.search(text)
        if m:
            out.append(Problem(owner, where, f"{m.group(0)!r} in a Chinese text: {why} (docs/glossary.md)"))
    for zh, en, avoid in glossary.terms:
        for variant in avoid:
            if variant and variant in text:
                out.append(Problem(owner, where, f"{variant!r}: the glossary's word for {en} is {zh!r} (docs/glossary.md)"))
    return out


def check_zh(items: Iterable[tuple[str, Any]], glossary: Glossary | None = None) -> list[Problem]:
    """``items`` are (owner, data) pairs: an entry's JSON, a catalog row, a message table."""
    glossary = glossary or load_glossary()
    out = []
    for owner, data in items:
        for where, text in zh_texts(data):
            out += check_zh_text(owner, where, text, glossary)
    return out


def lint_entries(entries: list[Any]) -> list[Problem]:
    rules = load_rules()
    return (check_options(entries, rules) + check_shared_state(entries, rules) + check_root(entries, rules)
            + check_fabric_tests(entries) + check_zh([(e.id, e.to_json()) for e in entries]))
