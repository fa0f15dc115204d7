"""``gpu-triage preflight``: is each node fit to start a job?  One verdict per node, with reasons.

The collectors run as for a diagnosis (over SSH, or ``--local`` on this node); their findings,
compared across the nodes (collectors.compare), go through :data:`RULES`, the one place where a
finding becomes a verdict.  Thresholds come from the config file's ``preflight`` section
(bot.config; defaults there).

Severity ladder: ``ok`` < ``warn`` < ``unknown`` < ``critical``.  A node that was not reached, or
a check whose collectors could not run on it, is ``unknown`` — never ``ok``.

Exit codes (for a Slurm prolog): 0 healthy (every node ok or warn), 1 blocking findings (any
critical), 2 could not check (any unknown and no critical).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from collectors.bundle import Bundle, NodeOutput
from collectors.findings import Finding
from collectors.remote import NodeResult
from collectors.said import Said, in_lang

OK, WARN, UNKNOWN, CRITICAL = "ok", "warn", "unknown", "critical"
ORDER = {OK: 0, WARN: 1, UNKNOWN: 2, CRITICAL: 3}
EXIT = {OK: 0, WARN: 0, CRITICAL: 1, UNKNOWN: 2}

# The collectors preflight needs, and which check each serves.  A check is "unknown" on a node
# when none of its collectors produced output there.
COLLECTORS = ("kernel-log", "nvidia-smi", "nvidia-smi-query", "nvidia-smi-q", "ibstat", "df", "ulimit-l")
CHECKS: dict[str, tuple[str, ...]] = {
    "xid": ("kernel-log",),
    "gpu": ("nvidia-smi", "nvidia-smi-q", "nvidia-smi-query", "nvml"),
    "ib": ("ibstat",),
    "storage": ("df",),
    "memlock": ("ulimit-l",),
}
GB = 1000 ** 3
VERSION_KINDS = {"driver", "cuda", "nccl", "ofed", "pytorch", "python", "deepspeed", "cudnn", "fabricmanager"}


@dataclass
class Reason:
    severity: str
    check: str
    text: str
    line: str = ""

    def to_json(self, lang: str = "en") -> dict[str, Any]:
        return {"severity": self.severity, "check": self.check, "reason": in_lang(self.text, lang), "line": self.line}


@dataclass
class NodeVerdict:
    node: str
    status: str                       # collection status: ok, partial, unreachable, auth-failed, timeout
    detail: str = ""
    reasons: list[Reason] = field(default_factory=list)

    @property
    def severity(self) -> str:
        return max((r.severity for r in self.reasons), key=ORDER.__getitem__, default=OK)

    def to_json(self, lang: str = "en") -> dict[str, Any]:
        return {"node": self.node, "severity": self.severity, "status": self.status, "detail": self.detail,
                "reasons": [r.to_json(lang) for r in sorted(self.reasons, key=lambda r: -ORDER[r.severity])]}


@dataclass
class Report:
    nodes: list[NodeVerdict]
    job: str | None = None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def severity(self) -> str:
        return max((n.severity for n in self.nodes), key=ORDER.__getitem__, default=UNKNOWN)

    @property
    def exit_code(self) -> int:
        return EXIT[self.severity]

    def to_json(self, lang: str = "en") -> dict[str, Any]:
        counts = {s: sum(1 for n in self.nodes if n.severity == s) for s in ORDER}
        return {"severity": self.severity, "exit_code": self.exit_code, "job": self.job, "counts": counts,
                "nodes": [n.to_json(lang) for n in self.nodes], "notes": [in_lang(n, lang) for n in self.notes],
                "seconds": round(self.seconds, 3), "lang": lang}


# --- rules: finding -> reasons.  Each takes (finding, context) and returns [(severity, check, text)] ---

@dataclass
class Context:
    t: Mapping[str, Any]                         # thresholds (config preflight section)
    peers_ib_rate: dict[str, float]              # link layer -> best Active rate among all nodes
    now: datetime = field(default_factory=datetime.now)


def _xid(f: Finding, c: Context):
    from knowledge.xid_catalog import XID

    code = f.attrs.get("code")
    if not isinstance(code, int) or code in c.t["xid_ignore"]:
        return []
    if c.t["xid_max_age_hours"] and f.ts:
        try:
            when = datetime.fromisoformat(f.ts.replace("Z", "+00:00")).replace(tzinfo=None)
            if c.now - when > timedelta(hours=float(c.t["xid_max_age_hours"])):
                return []
        except ValueError:
            pass
    row = XID.get(code) or {}
    name, name_zh = row.get("name", "not in the catalog"), row.get("name_zh") or row.get("name", "不在目录中")
    where, where_zh = (f" on {f.attrs['pci']}", f"（{f.attrs['pci']}）") if f.attrs.get("pci") else ("", "")
    if row.get("hardware"):
        return [(CRITICAL, "xid", Said(f"hardware XID {code}{where} ({name}): drain the node and follow the "
                                       "catalog's action",
                                       f"硬件 XID {code}{where_zh}（{name_zh}）：排空节点，按目录中的处理方法操作"))]
    # not a hardware fault by NVIDIA's resolution bucket: say what the catalog says to do
    action = row.get("action") or "restart the failed job; look again if it repeats on this GPU"
    action_zh = row.get("action_zh") or "重新提交出错的作业；同一块 GPU 反复出现时再排查"
    return [(WARN, "xid", Said(f"XID {code}{where} ({name}): {action}", f"XID {code}{where_zh}（{name_zh}）：{action_zh}"))]


def _gpu_lost(f: Finding, c: Context):
    pci = f.attrs.get("pci")
    return [(CRITICAL, "gpu", Said(f"GPU lost{' at ' + pci if pci else ''}: fallen off the bus; the node needs a "
                                   "reset or repair",
                                   f"GPU 掉卡{'（' + pci + '）' if pci else ''}：已从总线上掉线，节点需要重启或维修"))]


def _row_remap(f: Finding, c: Context):
    out = []
    if f.attrs.get("failure"):
        out.append((CRITICAL, "gpu", Said(f"GPU {f.attrs.get('gpu')}: row remapping failed (RMA candidate)",
                                          f"GPU {f.attrs.get('gpu')}：行重映射失败（可考虑 RMA）")))
    if f.attrs.get("pending"):
        out.append((CRITICAL, "gpu", Said(f"GPU {f.attrs.get('gpu')}: row remap pending; reset the GPU before a job",
                                          f"GPU {f.attrs.get('gpu')}：行重映射待生效；开始作业前先重置 GPU")))
    none = f.attrs.get("banks_none")
    if isinstance(none, int) and none > 0 and not f.attrs.get("failure"):
        out.append((WARN, "gpu", Said(f"GPU {f.attrs.get('gpu')}: {none} memory bank(s) have no spare row left; "
                                      "the next uncorrectable error there cannot be remapped (plan the RMA)",
                                      f"GPU {f.attrs.get('gpu')}：{none} 个显存 bank 已无备用行，"
                                      "那里再出现不可纠正错误就无法重映射（提前安排 RMA）")))
    return out


def _retired(f: Finding, c: Context):
    if f.attrs.get("pending") is True or str(f.attrs.get("pending")).lower() == "yes":
        return [(CRITICAL, "gpu", Said(f"GPU {f.attrs.get('gpu')}: page retirement pending; reset the GPU",
                                       f"GPU {f.attrs.get('gpu')}：页退役待生效；请重置 GPU"))]
    return []


def _ecc(f: Finding, c: Context):
    if f.attrs.get("type") == "uncorrectable" and (f.attrs.get("count") is None or f.attrs.get("count")):
        gpu = f.attrs.get("gpu")
        return [(CRITICAL, "gpu", Said(f"uncorrectable ECC errors{f' on GPU {gpu}' if gpu is not None else ''}",
                                       f"{f'GPU {gpu} ' if gpu is not None else ''}出现不可纠正的 ECC 错误"))]
    return []


def _gpu(f: Finding, c: Context):
    out = []
    used = f.attrs.get("memory_used_mib")
    if isinstance(used, (int, float)) and used > c.t["gpu_busy_mib"]:
        out.append((WARN, "gpu", Said(f"GPU {f.attrs.get('index')} already holds {used:.0f} MiB: another process "
                                      "is using it (a leftover job?)",
                                      f"GPU {f.attrs.get('index')} 已占用 {used:.0f} MiB 显存：有别的进程在用"
                                      "（残留作业？）")))
    if isinstance(f.attrs.get("ecc_uncorrected"), int) and f.attrs["ecc_uncorrected"] > 0:
        n = f.attrs["ecc_uncorrected"]
        out.append((CRITICAL, "gpu", Said(f"GPU {f.attrs.get('index')}: {n} uncorrectable ECC errors since the "
                                          "driver loaded",
                                          f"GPU {f.attrs.get('index')}：驱动加载以来有 {n} 个不可纠正的 ECC 错误")))
    return out


def _gpu_process(f: Finding, c: Context):
    name = f.attrs.get("name") or f"pid {f.attrs.get('pid')}"
    mem = f" ({f.attrs['memory_mib']} MiB)" if f.attrs.get("memory_mib") is not None else ""
    return [(WARN, "gpu", Said(f"GPU {f.attrs.get('gpu')} has a process on it: {name}{mem}",
                               f"GPU {f.attrs.get('gpu')} 上有进程：{name}{mem}"))]


def _port_name(f: Finding) -> str:
    return f"{f.attrs.get('device')}:{f.attrs.get('port', 1)}"


def _ib_port(f: Finding, c: Context):
    name = _port_name(f)
    if name in c.t["ib_ignore_ports"] or str(f.attrs.get("device")) in c.t["ib_ignore_ports"]:
        return []
    state = str(f.attrs.get("state") or "")
    if state.lower() == "down" or str(f.attrs.get("phys_state") or "").lower() in ("disabled", "polling"):
        phys = f.attrs.get("phys_state") or "?"
        return [(CRITICAL, "ib", Said(f"IB port {name} is {state or '?'} ({phys})",
                                      f"IB 端口 {name} 状态为 {state or '?'}（{phys}）"))]
    if state and state.lower() != "active":
        return [(WARN, "ib", Said(f"IB port {name} is {state}, not Active", f"IB 端口 {name} 状态为 {state}，不是 Active"))]
    rate = f.attrs.get("rate")
    best = c.peers_ib_rate.get(str(f.attrs.get("link_layer")))
    if isinstance(rate, (int, float)) and best and rate < best * c.t["ib_rate_warn_ratio"]:
        return [(WARN, "ib", Said(f"IB port {name} runs at {rate:g} Gb/s, below the {best:g} Gb/s of the others",
                                  f"IB 端口 {name} 速率 {rate:g} Gb/s，低于其他节点的 {best:g} Gb/s"))]
    return []


def _shm(f: Finding, c: Context):
    out = []
    size = f.attrs.get("size_bytes")
    if f.attrs.get("docker_default"):
        out.append((CRITICAL, "storage", Said("/dev/shm is Docker's 64 MB default: run the container with "
                                              "--shm-size or --ipc=host",
                                              "/dev/shm 是 Docker 默认的 64 MB：用 --shm-size 或 --ipc=host "
                                              "启动容器")))
    elif isinstance(size, (int, float)) and size < c.t["shm_critical_below_gb"] * GB:
        need = c.t["shm_critical_below_gb"]
        out.append((CRITICAL, "storage", Said(f"/dev/shm is only {size / GB:.2f} GB (needs at least {need:g} GB)",
                                              f"/dev/shm 只有 {size / GB:.2f} GB（至少需要 {need:g} GB）")))
    elif isinstance(size, (int, float)) and size < c.t["shm_warn_below_gb"] * GB:
        want = c.t["shm_warn_below_gb"]
        out.append((WARN, "storage", Said(f"/dev/shm is {size / GB:.1f} GB, under {want:g} GB",
                                          f"/dev/shm 为 {size / GB:.1f} GB，低于 {want:g} GB")))
    out.extend(_full("/dev/shm", f.attrs.get("used_pct"), c))
    return out


def _full(mount: str, pct: Any, c: Context, inodes: bool = False):
    if not isinstance(pct, (int, float)):
        return []
    what, what_zh = ("of inodes used", "的 inode 已用") if inodes else ("used", "已用")
    for severity, key in ((CRITICAL, "disk_critical_pct"), (WARN, "disk_warn_pct")):
        if pct >= c.t[key]:
            return [(severity, "storage", Said(f"{mount} is {pct:g} % {what} (>= {c.t[key]:g} %)",
                                               f"{mount} {what_zh} {pct:g} %（≥ {c.t[key]:g} %）"))]
    return []


def _disk(f: Finding, c: Context):
    mount = str(f.attrs.get("mount") or "")
    wanted = c.t["mounts"]
    if wanted and not any(mount == m or mount.startswith(m.rstrip("/") + "/") for m in wanted):
        return []
    if not wanted and mount.startswith("/boot"):
        return []
    return _full(mount, f.attrs.get("used_pct"), c, inodes=bool(f.attrs.get("inodes")))


def _memlock(f: Finding, c: Context):
    limit = f.attrs.get("limit_kb")
    if c.t["memlock_warn"] and isinstance(limit, int) and limit != -1:
        return [(WARN, "memlock", Said(f"locked-memory limit is {limit} kB, not unlimited: RDMA memory registration "
                                       "may fail (memlock unlimited in limits.conf and slurmd's LimitMEMLOCK)",
                                       f"locked memory 上限为 {limit} kB，不是 unlimited：RDMA 内存注册可能失败"
                                       "（在 limits.conf 和 slurmd 的 LimitMEMLOCK 中设为 unlimited）"))]
    return []


def _mismatch(f: Finding, c: Context):
    what = str(f.attrs.get("what"))
    if what in VERSION_KINDS:
        value, others = f.attrs.get("value"), f.attrs.get("others")
        return [(CRITICAL, "versions", Said(f"{what} {value} differs from the other nodes' {others}",
                                            f"{what} {value} 与其他节点的 {others} 不一致"))]
    if what == "gpu-count":
        value, others = f.attrs.get("value"), f.attrs.get("others")
        return [(CRITICAL, "gpu", Said(f"{value} GPUs visible where the other nodes have {others}",
                                       f"只能看到 {value} 块 GPU，而其他节点有 {others} 块"))]
    if what == "ib-port" and str(f.attrs.get("value")).lower() != "down":  # Down: the port rule says it
        port, value, others = f"{f.attrs.get('device')}:{f.attrs.get('port')}", f.attrs.get("value"), f.attrs.get("others")
        return [(CRITICAL, "ib", Said(f"IB port {port} is {value} where the other nodes have {others}",
                                      f"IB 端口 {port} 为 {value}，而其他节点为 {others}"))]
    return []  # shm / GPU-memory outliers are covered by the absolute rules above


RULES: dict[str, Callable[[Finding, Context], list]] = {
    "xid": _xid, "gpu-lost": _gpu_lost, "row-remap": _row_remap, "retired-pages": _retired, "ecc-error": _ecc,
    "gpu": _gpu, "gpu-process": _gpu_process, "ib-port": _ib_port, "shm-usage": _shm, "disk-usage": _disk,
    "memlock": _memlock, "node-mismatch": _mismatch,
}
RULE_CHECK = {"xid": "xid", "gpu-lost": "gpu", "row-remap": "gpu", "retired-pages": "gpu", "ecc-error": "gpu",
              "gpu": "gpu", "gpu-process": "gpu", "ib-port": "ib", "shm-usage": "storage", "disk-usage": "storage",
              "memlock": "memlock", "node-mismatch": "versions"}


def bundle_from_results(results: Mapping[str, NodeResult], job: str | None = None) -> Bundle:
    """The collection as an in-memory bundle, so the diagnosis parsers run on it unchanged."""
    nodes = {}
    for name, r in results.items():
        nodes[name] = NodeOutput(node=name, status=r.status, detail=r.detail,
                                 outputs={c.name: c.stdout for c in r.results},
                                 meta={c.name: {"exit": c.exit, "timed_out": c.timed_out, "command": c.command}
                                       for c in r.results})
    return Bundle(root=Path("."), manifest={"job": job, "nodes": list(results)}, nodes=nodes, logs=[])


def _ran(node: NodeOutput, names: Sequence[str]) -> bool:
    for name in names:
        meta = node.meta.get(name)
        if meta and meta.get("exit") == 0 and not meta.get("timed_out") and node.outputs.get(name, "").strip():
            return True
    return False


def evaluate(bundle: Bundle, thresholds: Mapping[str, Any], *, job: str | None = None) -> Report:
    """Verdicts for every node of a collection (pure: no I/O)."""
    from bot.engine import parse_node_outputs

    started = time.perf_counter()
    findings, notes = parse_node_outputs(bundle)
    skip = set(thresholds.get("skip_checks") or ())
    best: dict[str, float] = {}
    for f in findings:
        if f.kind == "ib-port" and str(f.attrs.get("state", "")).lower() == "active" \
                and isinstance(f.attrs.get("rate"), (int, float)):
            layer = str(f.attrs.get("link_layer"))
            best[layer] = max(best.get(layer, 0.0), float(f.attrs["rate"]))
    ctx = Context(t=thresholds, peers_ib_rate=best)
    verdicts: list[NodeVerdict] = []
    for node in bundle.nodes.values():
        v = NodeVerdict(node=node.node, status=node.status, detail=node.detail)
        verdicts.append(v)
        if node.status in ("unreachable", "auth-failed", "timeout"):
            v.reasons.append(Reason(UNKNOWN, "reach", Said(f"not checked: {node.status}: {node.detail}",
                                                           f"未检查：{node.status}：{node.detail}")))
            continue
        for check, names in CHECKS.items():
            if check in skip:
                continue
            if not _ran(node, names):
                why, why_zh = [], []
                for name in names:
                    meta = node.meta.get(name)
                    if meta is None:
                        continue
                    if meta.get("timed_out"):
                        why.append(f"{name} timed out"), why_zh.append(f"{name} 超时")
                    elif meta.get("exit") == 127:
                        why.append(f"{name} not found"), why_zh.append(f"未找到 {name}")
                    else:
                        why.append(f"{name} exit {meta.get('exit')}"), why_zh.append(f"{name} 退出码 {meta.get('exit')}")
                v.reasons.append(Reason(UNKNOWN, check, Said(
                    f"{check} could not be checked ({', '.join(why) or 'not run'})",
                    f"{check} 无法检查（{'、'.join(why_zh) or '未运行'}）")))
        seen: set[tuple[str, str]] = set()
        for f in findings:
            # what a healthy node shows (collectors.healthy: a disabled port, an idle GPU) is no reason
            if f.node != node.node or f.normal or f.kind not in RULES or RULE_CHECK.get(f.kind) in skip:
                continue
            for severity, check, text in RULES[f.kind](f, ctx):
                if check in skip or (check, text) in seen:
                    continue
                seen.add((check, text))
                v.reasons.append(Reason(severity, check, text, (f.line or "")[:200]))
    return Report(nodes=verdicts, job=job, seconds=time.perf_counter() - started, notes=notes)


def render_text(report: Report, stream, lang: str = "en") -> None:
    """A table per node: node, verdict, then one line per reason (worst first)."""
    from bot.messages import t

    colour = hasattr(stream, "isatty") and stream.isatty()
    paint = {OK: "32", WARN: "33", UNKNOWN: "35", CRITICAL: "31"}
    colon = "：" if lang == "zh" else ": "

    def tag(sev: str) -> str:
        text = f"{sev.upper():8}"
        return f"\033[{paint[sev]}m{text}\033[0m" if colour else text

    width = max([len(n.node) for n in report.nodes] + [4])
    print(f"{'NODE':{width}}  {'VERDICT':8}  {t('preflight_reasons', lang)}", file=stream)
    for n in report.nodes:
        reasons = sorted(n.reasons, key=lambda r: -ORDER[r.severity])
        if not reasons:
            print(f"{n.node:{width}}  {tag(OK)}  {t('preflight_all_passed', lang)}", file=stream)
            continue
        first, *rest = reasons
        print(f"{n.node:{width}}  {tag(n.severity)}  [{first.severity}] {first.check}{colon}{in_lang(first.text, lang)}",
              file=stream)
        for r in rest:
            print(f"{'':{width}}  {'':8}  [{r.severity}] {r.check}{colon}{in_lang(r.text, lang)}", file=stream)
    counts = {s: sum(1 for n in report.nodes if n.severity == s) for s in ORDER}
    summary = ", ".join(f"{k} {v}" for k, v in counts.items() if v)
    verdict = t(f"preflight_verdict.{report.exit_code}", lang)
    print("\n" + t("preflight_summary", lang, n=len(report.nodes), summary=summary, verdict=verdict,
                   code=report.exit_code), file=stream)
