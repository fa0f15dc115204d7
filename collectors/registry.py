"""The one registry of node collectors.

Each collector is a module under ``collectors/node/`` that defines ``COLLECTOR``: its bundle file
name, the fixed command it runs (no user text ever reaches it), what it needs, and a pure
``parse(text) -> (findings, unparsed)``. Collectors never open SSH sessions: the runner
(``collectors.remote``) executes what they declare, times it, and writes ``<node>/<name>.txt``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable

from collectors.findings import Finding

Parser = Callable[[str], "tuple[list[Finding], list[str]]"]


@dataclass(frozen=True)
class Collector:
    name: str                      # bundle file name without .txt, e.g. "ibstat"
    command: str                   # fixed shell command run on the node (sh -c); read-only
    parse: Parser                  # pure: raw stdout -> (findings, lines/notes it could not parse)
    binaries: tuple[str, ...] = ()  # what the command needs on the node
    timeout: float = 20.0          # seconds; the runner wraps the command in `timeout`
    root: bool = False             # needs root for full output (e.g. dmesg where restricted)
    description: str = ""
    tags: tuple[str, ...] = field(default_factory=tuple)
    local: Callable[[], str] | None = None  # in-process alternative for `collect --local` (stdout text)
    opt_in: bool = False           # runs only when named (--only): slow, or meaningful only for a hang


# Module names under collectors/node/, in the order collectors run and are shown.
MODULES = (
    "kernel_log", "nvidia_smi", "nvidia_smi_query", "nvidia_smi_q", "nvidia_smi_topo", "nvml",
    "ibstat", "ibstatus", "ibdev2netdev", "ip_link", "ethtool_s", "perfquery", "df", "free", "ulimit_l",
    "processes", "iostat", "py_spy",
)


def collectors() -> dict[str, Collector]:
    """name -> Collector, for every module that exists."""
    out: dict[str, Collector] = {}
    for mod in MODULES:
        try:
            module = importlib.import_module(f"collectors.node.{mod}")
        except ModuleNotFoundError as exc:
            if exc.name == f"collectors.node.{mod}":
                continue
            raise
        collector: Collector = module.COLLECTOR
        out[collector.name] = collector
    return out


def get(name: str) -> Collector:
    found = collectors().get(name)
    if found is None:
        raise KeyError(f"no collector named {name!r}; known: {', '.join(collectors())}")
    return found
