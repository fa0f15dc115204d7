"""Every user-facing string of the faces, in English and Chinese.

Knowledge entries carry their own bilingual texts; this module holds the words around them
(headings, the "no confident cause" reply, generic next steps, tier names).
"""

from __future__ import annotations

from typing import Any

LANGS = ("en", "zh")

TEXT: dict[str, dict[str, str]] = {
    "heading": {"en": "gpu-triage diagnosis", "zh": "gpu-triage 诊断结果"},
    "probable_cause": {"en": "Probable cause", "zh": "可能原因"},
    "other_causes": {"en": "Other candidates", "zh": "其他可能原因"},
    "confidence": {"en": "confidence", "zh": "置信度"},
    "evidence": {"en": "Evidence", "zh": "证据"},
    "first_error": {"en": "First error in time", "zh": "时间上最早的错误"},
    "first_error_note": {
        "en": "The first rank to fail is nearest the root cause; later 'remote process exited' lines are echoes.",
        "zh": "最先失败的 rank 离根因最近；之后各 rank 打印的 “remote process exited” 只是连锁反应。",
    },
    "next_commands": {"en": "Next commands, in order", "zh": "接下来按顺序执行的命令"},
    "fix": {"en": "Fix", "zh": "修复方法"},
    "support": {"en": "Support", "zh": "支持方式"},
    "cost_drivers": {"en": "cost drivers", "zh": "成本因素"},
    "estimate": {"en": "estimate", "zh": "估算"},
    "example_rates": {"en": "example rates from the rate card, not market prices",
                      "zh": "费率卡中的示例数值，并非市场价格"},
    "findings": {"en": "Findings", "zh": "发现"},
    "warnings": {"en": "Warnings", "zh": "警告"},
    "why_ranked": {"en": "Why it ranked here", "zh": "排序依据"},
    "references": {"en": "References", "zh": "参考资料"},
    "scanned": {"en": "Scanned {lines} lines ({mb:.1f} MB) from {sources} in {secs:.2f} s",
                "zh": "已扫描 {sources} 中的 {lines} 行（{mb:.1f} MB），用时 {secs:.2f} 秒"},
    "no_cause": {
        "en": "No confident cause: nothing in this log matches a known infrastructure failure well enough "
              "to name one. If the traceback ends in your own code (a KeyError, a shape mismatch), it is "
              "probably a code bug rather than the cluster.",
        "zh": "没有足够把握的原因：日志中没有内容与已知的基础设施故障足够吻合。如果 traceback 的最后一帧在你自己的代码里"
              "（例如 KeyError、张量形状不匹配），这多半是代码问题，而不是集群问题。",
    },
    "generic_steps": {"en": "Generic next steps", "zh": "通用排查步骤"},
    "tier.self": {"en": "self-service (your own engineers)", "zh": "自助处理（团队自己的工程师）"},
    "tier.remote": {"en": "remote support (hourly/daily)", "zh": "远程支持（按小时/天计费）"},
    "tier.onsite": {"en": "on-site engineer (person-days, travel, parts)", "zh": "现场工程师（人天、差旅、备件）"},
    "tier.vendor": {"en": "vendor warranty / support contract", "zh": "厂商保修 / 支持合同"},
    "driver.gpu-count": {"en": "GPU count", "zh": "GPU 数量"},
    "driver.network": {"en": "network type", "zh": "网络类型"},
    "driver.reproducibility": {"en": "how hard it is to reproduce", "zh": "复现难度"},
    "driver.parts": {"en": "spare parts", "zh": "备件"},
    "idle_cost": {"en": "the idle job costs {cur} {idle}/hour; this tier ~{cur} {cost} (≈ {hours} idle hours)",
                  "zh": "作业闲置每小时花费 {cur} {idle}；该支持方式约 {cur} {cost}（约等于闲置 {hours} 小时）"},
    "tier_cost": {"en": "this tier ~{cur} {cost}", "zh": "该支持方式约 {cur} {cost}"},
    "tier_changed": {"en": "tier raised from {old}: {why}", "zh": "支持级别由 {old} 调整：{why}"},
    "nodes": {"en": "Nodes", "zh": "节点"},
    "nodes_ok": {"en": "{n} checked and reachable", "zh": "{n} 个已检查且可达"},
    "nodes_not_checked": {"en": "not fully checked (never read these as healthy)",
                          "zh": "未完全检查（不能当作健康）"},
    "odd_one_out": {"en": "Not like the others", "zh": "与其他节点不同"},
    "odd_line": {"en": "{node}: {what} is {value} (others: {others})", "zh": "{node}：{what} 为 {value}（其他节点：{others}）"},
    "xid_detail": {"en": "XID {code}: {name}. {action}", "zh": "XID {code}：{name}。{action}"},
}

GENERIC_STEPS: list[dict[str, Any]] = [
    {"command": "grep -n -m1 -E 'Traceback|Error|error:|NCCL WARN' <each rank log>",
     "why": {"en": "find the first rank to fail and the first error it printed; the others usually echo it",
             "zh": "找出最先失败的 rank 及其打印的第一条错误；其他 rank 通常只是跟着报错"}},
    {"command": "dmesg -T | grep -i -E 'xid|nvrm|out of memory|killed process'",
     "why": {"en": "on the failed rank's node: GPU XIDs and the kernel OOM killer never reach the training log",
             "zh": "在失败 rank 所在节点上执行：GPU XID 和内核 OOM killer 的信息不会出现在训练日志里"}},
    {"command": "df -h /dev/shm <checkpoint dir> && free -g",
     "why": {"en": "a full /dev/shm, checkpoint disk or host RAM kills jobs with unhelpful errors",
             "zh": "/dev/shm、checkpoint 磁盘或主机内存耗尽时，报错往往看不出真正原因"}},
    {"command": "NCCL_DEBUG=INFO TORCH_DISTRIBUTED_DEBUG=DETAIL TORCH_NCCL_DUMP_ON_TIMEOUT=1 <rerun>",
     "why": {"en": "if it happens again, the next log names the failing rank, link and collective",
             "zh": "如果再次发生，新的日志会指出出错的 rank、链路和集合通信操作"}},
]


def t(key: str, lang: str, **kw: Any) -> str:
    text = TEXT[key].get(lang) or TEXT[key]["en"]
    return text.format(**kw) if kw else text


def pick(bilingual: Any, lang: str) -> Any:
    """Pick one language from an {en, zh} mapping (falls back to English)."""
    if isinstance(bilingual, dict) and ("en" in bilingual or "zh" in bilingual):
        return bilingual.get(lang) or bilingual.get("en")
    return bilingual

# --- the Slack bot -------------------------------------------------------------------------------
TEXT.update({
    "slack_ack": {"en": ":mag: On it: the diagnosis will appear here shortly.",
                  "zh": ":mag: 正在处理，诊断结果稍后会出现在这里。"},
    "slack_usage": {
        "en": "Usage: `/diagnose job-123` (a Slurm job), `/diagnose gpu07 gpu08` (nodes), or `/diagnose` followed "
              "by a pasted traceback. You can also mention me with a log file attached.",
        "zh": "用法：`/diagnose job-123`（Slurm 作业）、`/diagnose gpu07 gpu08`（节点），或在 `/diagnose` 后粘贴 "
              "traceback。也可以 @ 我并附上日志文件。"},
    "slack_not_here": {"en": "Diagnosis is not enabled in this channel; ask an admin to add it to "
                             "GPU_TRIAGE_DIAGNOSE_CHANNELS, or send me a direct message.",
                       "zh": "本频道未启用诊断；请管理员把它加入 GPU_TRIAGE_DIAGNOSE_CHANNELS，或直接私信我。"},
    "slack_not_allowed": {
        "en": "Sorry, you are not allowed to collect from cluster nodes here: SSH collection is limited to the "
              "channels and people the admins configured (GPU_TRIAGE_COLLECT_CHANNELS, GPU_TRIAGE_COLLECT_USERS, "
              "GPU_TRIAGE_COLLECT_GROUPS). Nothing was collected. Pasting the log works for everyone.",
        "zh": "抱歉，你无权在这里从集群节点收集信息：SSH 收集仅限管理员配置的频道和人员"
              "（GPU_TRIAGE_COLLECT_CHANNELS、GPU_TRIAGE_COLLECT_USERS、GPU_TRIAGE_COLLECT_GROUPS）。"
              "未进行任何收集。直接粘贴日志对所有人开放。"},
    "slack_collect_failed": {"en": ":warning: Could not collect", "zh": ":warning: 收集失败"},
    "slack_feedback_confirmed": {"en": "Thanks: recorded as confirmed. It will rank higher next time.",
                                 "zh": "谢谢：已记录为确认，下次会排得更靠前。"},
    "slack_feedback_rejected": {"en": "Thanks: recorded as not it. It will rank lower next time.",
                                "zh": "谢谢：已记录为不是这个原因，下次会排得更靠后。"},
    "slack_incident_gone": {"en": "That incident is no longer in the database.", "zh": "数据库中已找不到该事件。"},
    "slack_no_hint": {"en": "The log names no job or hosts to collect from; use `/diagnose job-123` or "
                            "`/diagnose gpu07`.",
                      "zh": "日志中没有可收集的作业或主机；请使用 `/diagnose job-123` 或 `/diagnose gpu07`。"},
    "slack_file_too_big": {"en": "{name} is larger than the {mb} MB upload cap (GPU_TRIAGE_MAX_UPLOAD_MB); upload "
                                 "the last part of the log, or gzip it.",
                           "zh": "{name} 超过了 {mb} MB 的上传上限（GPU_TRIAGE_MAX_UPLOAD_MB）；请上传日志的最后一部分，"
                                 "或先用 gzip 压缩。"},
    "slack_file_unreadable": {"en": "I could not download {name}; check that the app has the files:read scope.",
                              "zh": "无法下载 {name}；请确认应用具有 files:read 权限。"},
    "slack_full_report": {"en": "gpu-triage full report", "zh": "gpu-triage 完整报告"},
})
