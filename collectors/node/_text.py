"""What every node parser does to pasted text before reading it.

Outputs reach gpu-triage raw from the runner, but also pasted into an issue or a chat by a person:
with the shell prompt and the command line above them (``$ df -h``, ``[root@gpu01 ~]# ibstat``,
``~$ free -h``), with the output of another command in between (``# echo x > f`` and its error),
with the poster's elisions (``...``, ``[...]``, ``<snip>``) and Markdown code fences.  None of those
lines is the collector's output, and none should read as "not understood": :func:`lines` drops them
and gives each parser the rest, with the line numbers of the original text.

A parser's note is one of two things.  A line it could not read is a plain ``str``.  A fact the tool
itself printed about what it could not check (``ibpanic: ... failed``, ``No devices were found``) is
a :class:`Note`: still a ``str`` (callers and tests compare it as one), but the reply files it under
"could not check", not under "not understood".
"""

from __future__ import annotations

import re
from typing import Iterator


class Note(str):
    """A parser note that is understood: the tool reported it could not check something."""

    __slots__ = ()


def note(text: str) -> Note:
    return Note(text)


def not_understood(unparsed: list[str]) -> list[str]:
    """The notes that are lines the parser could not read (not :class:`Note`)."""
    return [u for u in unparsed if not isinstance(u, Note)]


# Commands people run around a collector's command in a paste (and the collectors' own); a bare
# ``# word`` is a prompt only when the word is one of these (``# Port counters: ...`` is output).
COMMANDS = frozenset("""
    cat cd clush column date df dmesg docker echo env ethtool free grep head ibdev2netdev ibstat ibstatus
    iostat ip journalctl kubectl less ls lspci more mount nvidia-smi pdsh perfquery ps python python3
    sacct scontrol sh bash singularity apptainer squeue srun ssh sudo tail time timeout ulimit uname
    uptime watch zcat for while
""".split())

# A prompt: "[root@gpu01 ~]#", "[root@nixos:~]#", "user@host:~/dir$", "~$", "gpu01%", "(venv) user@h:~$",
# "$", "#", ">", "PS C:\\>" (and the Chinese/full-width variants people paste are rare enough to skip).
_PROMPT = re.compile(r"""^(?:\([\w.-]{1,40}\)\s*)?          # (venv) / (base)
    (?P<who>\[[^\]\n]{1,80}\]|[\w.-]{1,40}@[\w.:~/-]{1,80}|~[\w./-]{0,80}|[\w.-]{1,40}:[~/][\w./-]{0,80})?
    \s?(?P<sign>[$#%>])\s+(?P<cmd>\S.*)$""", re.VERBOSE)
_GLUED = re.compile(r"^[$#]([\w-]+)(?:\s|$)")
_LAUNCHERS = frozenset({"sudo", "time", "timeout", "env", "watch", "srun", "ssh", "pdsh", "clush", "docker",
                        "kubectl", "singularity", "apptainer"})
# The poster's elisions: "...", "…", "[...]", "(...)", "<snip>", "-- snip --", "[truncated]",
# "... (more lines)", "8:..." (a numbered elision), "# ..." and "etc.".
_ELISION = re.compile(r"""^(?:\d+[:.]\s*)?(?:
      (?:\.{2,}|…).*                              # "...", "...(Some more info)", "…"
    | [\[(<{]\s*(?:\.{2,}|…|snip(?:ped)?|truncated|cut|omitted|more)[^\])>}]{0,40}[\])>}].*
    | [-=#*\s]*(?:snip|cut here|truncated|omitted)[-=#*\s.]*
    | \#\s*[.…]+.*
    | etc\.?
)$""", re.VERBOSE | re.IGNORECASE)
_FENCE = re.compile(r"^(?:```|~~~)[\w+-]*\s*$")


def is_elision(line: str) -> bool:
    """``...``, ``[...]``, ``<snip>`` and friends: the poster cut something out here."""
    return bool(_ELISION.match(line.strip()))


def command_of(line: str, own: tuple[str, ...] = ()) -> str | None:
    """The command text a pasted prompt line runs (``[root@gpu01 ~]# df -h`` -> ``df -h``), or a bare
    command line that runs one of ``own`` (``docker run --rm alpine df -h``); None for output."""
    text = line.strip()
    m = _PROMPT.match(text)
    if m:
        cmd = m.group("cmd")
        if m.group("who") or m.group("sign") == "$" or _first(cmd) in COMMANDS:
            return cmd
        return None
    glued = _GLUED.match(text)  # "#df -h", "$nvidia-smi": the prompt sign without its space
    if glued and glued.group(1) in COMMANDS:
        return text[1:]
    if own and text.split(None, 1)[0] in COMMANDS and runs(text, own):
        return text
    return None


def _first(cmd: str) -> str:
    """The command word, past sudo/env/time, options and VAR=value."""
    for w in cmd.split():
        base = w.rsplit("/", 1)[-1]
        if base in _LAUNCHERS or w.startswith("-") or "=" in w:
            continue
        return base
    return ""


def runs(cmd: str, own: tuple[str, ...]) -> bool:
    """True when the command text runs one of ``own`` (directly, after sudo/srun/ssh, or in a pipe)."""
    tokens = re.split(r"[\s;|&()`'\"]+", cmd)
    return any(t.rsplit("/", 1)[-1] in own for t in tokens)


def lines(text: str, own: tuple[str, ...], *, commands: bool = False) -> Iterator[tuple[int, str]]:
    """(1-based line number, raw line) of the lines that are the command's own output.

    Dropped: prompts and command lines, the output of another command typed at a prompt (up to the
    next prompt), elisions and code fences.  ``own`` names the commands whose output this is (``df``;
    ``ibstat``), so ``docker run alpine df -h`` and ``srun -w gpu01 ibstat`` count as its command line.
    With ``commands`` the command lines of ``own`` are given too (``ethtool -S eth0`` names the
    interface the lines below it belong to).
    """
    foreign = False
    for no, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not stripped:
            continue
        if _FENCE.match(stripped) or is_elision(stripped):
            continue
        cmd = command_of(stripped, own)
        if cmd is not None:
            foreign = not runs(cmd, own)
            if commands and not foreign:
                yield no, raw
            continue
        if foreign:
            continue
        yield no, raw
