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
    "words_only": {"en": "read from the words of the error lines only: no known message matched",
                   "zh": "仅凭报错行的用词判断：没有匹配到已知报错"},
    "alternative": {"en": "weaker evidence, worth checking", "zh": "证据较弱，值得排查"},
    "evidence": {"en": "Evidence", "zh": "证据"},
    "first_error": {"en": "First error in time", "zh": "时间上最早的错误"},
    "culprit.laggard": {"en": "Look at {who}: it never reported the collective every other rank timed out in",
                        "zh": "重点排查 {who}：其他 rank 都在该集合通信上超时，只有它没有报告"},
    "culprit.first-error": {"en": "Look at {who}: it failed first with its own error",
                            "zh": "重点排查 {who}：它最先因自身错误失败"},
    "below_threshold": {"en": "below threshold", "zh": "未达阈值"},
    "caution": {"en": "caution", "zh": "注意"},
    "why_cause": {"en": "Why", "zh": "原因分析"},
    "preflight_reasons": {"en": "REASONS", "zh": "原因"},
    "preflight_all_passed": {"en": "all checks passed", "zh": "全部检查通过"},
    "preflight_verdict.0": {"en": "healthy", "zh": "健康"},
    "preflight_verdict.1": {"en": "BLOCKING findings", "zh": "有阻断性问题"},
    "preflight_verdict.2": {"en": "could not check every node", "zh": "未能检查全部节点"},
    "preflight_summary": {"en": "{n} node(s): {summary} — {verdict} (exit {code})",
                          "zh": "共 {n} 个节点：{summary} —— {verdict}（退出码 {code}）"},
    "culprit.laggard_in": {"en": "{n} ranks wait in {op}#{seq}{pg}{last}: look at {who}",
                           "zh": "{n} 个 rank 停在 {op}#{seq}{pg}{last}：重点排查 {who}"},
    "culprit.mismatch": {"en": "Look at {who}: at collective #{seq}{pg} it called another collective than the others "
                                "({ops}): a code path only it took",
                         "zh": "重点排查 {who}：在集合通信 #{seq}{pg} 上，它调用的集合通信与其他 rank 不一致（{ops}），"
                               "说明只有它走了另一条代码路径"},
    "culprit.stuck-elsewhere": {"en": "Look at {who}: {n} process(es) wait in a collective, this one is in {frame}",
                                "zh": "重点排查 {who}：{n} 个进程在集合通信里等待，只有它停在 {frame}"},
    "culprit.pg": {"en": " of PG {pg}", "zh": "（进程组 {pg}）"},
    "culprit.last_completed": {"en": "; {who} last completed #{seq}", "zh": "；{who} 最后完成的是 #{seq}"},
    "culprit.node_logged": {"en": "; {node} logged: {line}", "zh": "；{node} 的记录：{line}"},
    "first_error_order": {"en": "First error in file order", "zh": "按文件顺序最早的错误"},
    "first_error_in_log": {"en": "First error in the log", "zh": "日志中最早的错误"},
    "first_error_also": {"en": "within {secs} s on {where} (clocks may differ by that much): {line}",
                         "zh": "{secs} 秒内 {where} 也报错（时钟可能相差这么多）：{line}"},
    "first_error_note": {
        "en": "The first rank to fail is nearest the root cause; later 'remote process exited' lines are echoes.",
        "zh": "最先失败的 rank 离根因最近；之后各 rank 打印的 “remote process exited” 只是连锁反应。",
    },
    "recorded": {"en": "gpu-triage: recorded as incident {id}; when you know the answer: "
                       "gpu-triage feedback {id} confirm|reject [--cause ID] [--note TEXT]",
                 "zh": "gpu-triage：已记录为事件 {id}；确认原因后执行："
                       "gpu-triage feedback {id} confirm|reject [--cause ID] [--note 说明]"},
    "run_first": {"en": "Run first", "zh": "先执行"},
    "also_check": {"en": "Also check", "zh": "另请排查"},
    "first_error_is_evidence": {"en": "the evidence line above", "zh": "即上面的证据行"},
    "files_folded": {"en": "{n} files: {first} … {last}", "zh": "{n} 个文件：{first} … {last}"},
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
    "idle_cost": {"en": "{cur} {fee} for the tier + {hours} h of {gpus} idle GPUs ({cur} {wait}) ≈ {cur} {total}",
                  "zh": "支持费用 {cur} {fee} + {gpus} 张 GPU 闲置 {hours} 小时（{cur} {wait}）≈ {cur} {total}"},
    "tier_cost": {"en": "{cur} {fee} for the tier + {hours} h of idle GPUs (give --gpus to price the waiting)",
                  "zh": "支持费用 {cur} {fee} + GPU 闲置 {hours} 小时（用 --gpus 指定 GPU 数量即可估算闲置成本）"},
    "network.infiniband": {"en": "InfiniBand", "zh": "InfiniBand"},
    "network.roce": {"en": "RoCE", "zh": "RoCE"},
    "network.ethernet": {"en": "Ethernet/TCP", "zh": "以太网/TCP"},
    "at_least": {"en": "at least ", "zh": "至少 "},
    "basis.given": {"en": "given with --gpus", "zh": "由 --gpus 指定"},
    "basis.nranks": {"en": "NCCL nranks", "zh": "来自 NCCL nranks"},
    "basis.world-size": {"en": "the job's world size", "zh": "来自作业的 world size"},
    "basis.ranks-seen": {"en": "ranks seen in the log", "zh": "日志中出现的 rank"},
    "basis.roce-devices": {"en": "NCCL NET/IB devices marked /RoCE", "zh": "NCCL NET/IB 设备标注为 /RoCE"},
    "basis.roce-config": {"en": "RoCE named in the log", "zh": "日志中出现 RoCE 配置"},
    "basis.ib-devices": {"en": "NCCL NET/IB devices marked /IB", "zh": "NCCL NET/IB 设备标注为 /IB"},
    "basis.net-ib": {"en": "NCCL NET/IB or InfiniBand lines", "zh": "NCCL NET/IB 或 InfiniBand 日志行"},
    "basis.net-socket": {"en": "NCCL NET/Socket (TCP) lines", "zh": "NCCL NET/Socket（TCP）日志行"},
    "tier_changed": {"en": "tier raised from {old}: {why}", "zh": "支持级别由 {old} 调整：{why}"},
    "nodes": {"en": "Nodes", "zh": "节点"},
    "nodes_ok": {"en": "{n} checked and reachable", "zh": "{n} 个已检查且可达"},
    "nodes_reached": {"en": "{reached} of {total} reached, {n} fully checked",
                      "zh": "{total} 个节点中 {reached} 个可达，{n} 个已完整检查"},
    "no_cause_bundle": {
        "en": "No confident cause: nothing in the collected node evidence (and logs, if any) matches a known "
              "infrastructure failure well enough to name one. Nodes not fully checked are listed below: "
              "never read them as healthy.",
        "zh": "没有足够把握的原因：采集到的节点证据（以及日志，如有）中没有内容与已知的基础设施故障足够吻合。"
              "下面列出了未完整检查的节点：不能把它们当作健康。",
    },
    "nodes_not_checked": {"en": "not fully checked (never read these as healthy)",
                          "zh": "未完全检查（不能当作健康）"},
    "odd_one_out": {"en": "Not like the others", "zh": "与其他节点不同"},
    "odd_line": {"en": "{node}: {what} is {value} (others: {others})", "zh": "{node}：{what} 为 {value}（其他节点：{others}）"},
    "xid_detail": {"en": "XID {code}: {name}. {action}", "zh": "XID {code}：{name}。{action}"},
    # Slack replies (bot/render/blocks.py)
    "no_cause_title": {"en": "No confident cause", "zh": "没有足够把握的原因"},
    "slack_header": {"en": "Probable cause: {title} (confidence {conf:.2f})", "zh": "可能原因：{title}（置信度 {conf:.2f}）"},
    "label": {"en": "{label}:", "zh": "{label}："},
    "where.job": {"en": "job {n}", "zh": "作业 {n}"},
    "slack_fallback": {"en": "Probable cause: {title} ({category}, confidence {conf:.2f})",
                       "zh": "可能原因：{title}（{category}，置信度 {conf:.2f}）"},
    "where.line": {"en": "line {n}", "zh": "第 {n} 行"},
    "where.rank": {"en": "rank {n}", "zh": "rank {n}"},
    "where.node": {"en": "node {n}", "zh": "节点 {n}"},
    "overflow_note": {"en": "Part of this reply did not fit in a Slack message; the rest is in the full report.",
                      "zh": "回复内容超出 Slack 消息的长度限制，其余部分见完整报告。"},
    "more_in_report": {"en": "… and {n} more in the full report", "zh": "……另有 {n} 条，见完整报告"},
    "nodes_not_checked_more": {"en": "… and {n} more nodes not checked: {names}",
                               "zh": "……另有 {n} 个节点未检查：{names}"},
    "collect_hint": {"en": "The log names {hint}. *Collect from nodes* runs the collectors there and re-diagnoses.",
                     "zh": "日志中提到了 {hint}。点击 *从节点收集* 会在这些节点上运行采集并重新诊断。"},
    "btn.confirm": {"en": "Confirmed", "zh": "确认是这个原因"},
    "btn.reject": {"en": "Not it", "zh": "不是这个原因"},
    "btn.collect": {"en": "Collect from nodes", "zh": "从节点收集"},
    "btn.runbook": {"en": "Add to runbook", "zh": "加入运行手册"},
    "btn.report": {"en": "Full report", "zh": "完整报告"},
    "status.connecting": {"en": "connecting", "zh": "连接中"},
    "status.running": {"en": "collecting", "zh": "采集中"},
    "status.ok": {"en": "ok", "zh": "完成"},
    "status.unreachable": {"en": "unreachable", "zh": "无法连接"},
    "status.auth-failed": {"en": "authentication failed", "zh": "认证失败"},
    "status.timeout": {"en": "timed out", "zh": "超时"},
    "status.partial": {"en": "partly collected", "zh": "部分采集"},
    "progress_job": {"en": "Collecting evidence for job {job}", "zh": "正在为作业 {job} 收集证据"},
    "progress_nodes": {"en": "Collecting evidence from {n} nodes", "zh": "正在从 {n} 个节点收集证据"},
    "progress_done_job": {"en": "Evidence collected for job {job}", "zh": "作业 {job} 的证据已收集完毕"},
    "progress_done_nodes": {"en": "Evidence collected from {n} nodes", "zh": "已从 {n} 个节点收集完证据"},
    "progress_node": {"en": "Collecting evidence from {node}", "zh": "正在从节点 {node} 收集证据"},
    "progress_done_node": {"en": "Evidence collected from {node}", "zh": "已从节点 {node} 收集完证据"},
    "progress_counts": {"en": "{done} of {total} nodes finished", "zh": "{total} 个节点中已完成 {done} 个"},
    "progress_resolving": {"en": "Finding the job's nodes…", "zh": "正在查找作业所在的节点……"},
    "progress_problems": {"en": "Not fully checked (never read these as healthy)",
                          "zh": "未完全检查（不能当作健康）"},
    "home_recent": {"en": "Recent incidents", "zh": "最近的事件"},
    "home_no_incidents": {"en": "No incidents yet. Paste a traceback in a channel with the bot, "
                                "or type `/diagnose <job>`.",
                          "zh": "还没有事件。在有机器人的频道中粘贴 traceback，或输入 `/diagnose <作业号>`。"},
    "home_top": {"en": "Top causes in the last 30 days", "zh": "最近 30 天最常见的原因"},
    "home_no_top": {"en": "Nothing diagnosed in the last 30 days.", "zh": "最近 30 天没有诊断记录。"},
    "home_top_line": {"en": "{cause}: {n} incidents", "zh": "{cause}：{n} 次"},
    "home_runbook": {"en": "Team runbook: {n} entries and drafts", "zh": "团队运行手册：{n} 条条目和草稿"},
    "outcome.confirmed": {"en": "confirmed", "zh": "已确认"},
    "outcome.not-it": {"en": "not it", "zh": "不是该原因"},
    "outcome.open": {"en": "open", "zh": "待确认"},
    "modal_title": {"en": "Add to runbook", "zh": "加入运行手册"},
    "modal_submit": {"en": "Save draft", "zh": "保存草稿"},
    "modal_close": {"en": "Cancel", "zh": "取消"},
    "modal_intro": {"en": "Saved as a draft team entry for review; the next diagnosis that sees this signature "
                          "will offer it.",
                    "zh": "将保存为待审核的团队条目草稿；之后的诊断遇到这个特征时会给出它。"},
    "field.title": {"en": "Title", "zh": "标题"},
    "field.category": {"en": "Category", "zh": "类别"},
    "field.signature": {"en": "Signature (the log line that identifies this failure)",
                        "zh": "特征（能识别此故障的日志行）"},
    "field.signature_hint": {"en": "Keep the stable part; node names, PIDs and addresses are normalised when matching.",
                             "zh": "保留稳定的部分；匹配时会去掉节点名、PID 和地址。"},
    "field.cause": {"en": "Cause", "zh": "原因"},
    "field.fix": {"en": "Fix (one step per line)", "zh": "修复方法（每行一步）"},
    "field.next_commands": {"en": "Next commands (one per line, reason after #)",
                            "zh": "下一步命令（每行一条，# 后写原因）"},
    "category_placeholder": {"en": "Choose a category", "zh": "选择类别"},
    "category.gpu-memory": {"en": "GPU memory", "zh": "GPU 显存"},
    "category.communication": {"en": "Communication (NCCL, network)", "zh": "通信（NCCL、网络）"},
    "category.shared-memory": {"en": "Shared memory (/dev/shm)", "zh": "共享内存（/dev/shm）"},
    "category.gpu-hardware": {"en": "GPU hardware (XID, ECC)", "zh": "GPU 硬件（XID、ECC）"},
    "category.checkpoint-storage": {"en": "Checkpoint storage", "zh": "检查点存储"},
    "category.host-memory": {"en": "Host memory (OOM killer)", "zh": "主机内存（OOM killer）"},
    "category.scheduler": {"en": "Scheduler", "zh": "调度器"},
    "category.software": {"en": "Software and versions", "zh": "软件与版本"},
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

# --- the team runbook (issue 5): similar past incidents, repeat-aware escalation, /runbook -------------
TEXT.update({
    "similar": {"en": "Seen before", "zh": "以前出现过"},
    "similar_line": {"en": "Seen {n} time(s), last on {date} on {node}; fixed by {fix} ({title})",
                     "zh": "已出现 {n} 次，最近一次是 {date} 在 {node} 上；修复方法：{fix}（{title}）"},
    "similar_line_nonode": {"en": "Seen {n} time(s), last on {date}; fixed by {fix} ({title})",
                            "zh": "已出现 {n} 次，最近一次是 {date}；修复方法：{fix}（{title}）"},
    "escalate": {"en": "Escalate to the vendor: this keeps failing", "zh": "升级给厂商：同一故障反复出现"},
    "escalate_advice": {"en": "Isolate the node, stop restarting, call the vendor.",
                        "zh": "隔离该节点，停止重启作业，联系厂商。"},
    "escalate.same_xid_per_gpu": {
        "en": "XID {code} on {node} GPU {gpu}{serial} {count} times within {hours} h (bursts within {burst} min "
              "counted once)",
        "zh": "{node} 的 GPU {gpu}{serial} 在 {hours} 小时内出现 XID {code} 共 {count} 次（{burst} 分钟内的连续报错算一次）"},
    "escalate.hardware_per_gpu": {
        "en": "{count} hardware errors on {node} GPU {gpu}{serial} within {hours} h",
        "zh": "{node} 的 GPU {gpu}{serial} 在 {hours} 小时内出现 {count} 次硬件错误"},
    "escalate.node_failed_jobs": {"en": "{node} failed {count} jobs with hardware errors within {days} days",
                                  "zh": "{node} 在 {days} 天内有 {count} 个作业因硬件错误失败"},
    "serial": {"en": " (serial {serial})", "zh": "（序列号 {serial}）"},
    "runbook_usage": {"en": "Usage: `/runbook search <words>` or `/runbook <entry-id>`.",
                      "zh": "用法：`/runbook search <关键词>` 或 `/runbook <条目 id>`。"},
    "runbook_no_hits": {"en": "No runbook entry matches “{words}”.", "zh": "没有与“{words}”匹配的条目。"},
    "runbook_hits": {"en": "Runbook entries for “{words}”", "zh": "与“{words}”相关的条目"},
    "runbook_no_entry": {"en": "No entry `{id}`; try `/runbook search <words>`.",
                         "zh": "没有条目 `{id}`；试试 `/runbook search <关键词>`。"},
    "runbook_search_too_long": {
        "en": "A search takes at most {words} words of at most {chars} characters each; search for the "
              "distinctive ones, such as the error's name or code.",
        "zh": "搜索最多 {words} 个关键词，每个最多 {chars} 个字符；请只搜索有区分度的词，例如错误名称或错误码。"},
    "origin.team": {"en": "team entry", "zh": "团队条目"},
    "origin.curated": {"en": "curated entry", "zh": "精选条目"},
    "runbook_looks_like": {"en": "What it looks like", "zh": "日志特征"},
    "runbook_incidents": {"en": "Confirmed incidents", "zh": "已确认的事件"},
    "runbook_no_incidents": {"en": "No confirmed incidents yet.", "zh": "还没有已确认的事件。"},
    "runbook_index": {"en": "Team runbook", "zh": "团队运行手册"},
})

# labels for the cross-node comparison (collectors/compare.py "what")
TEXT.update({
    "what.driver": {"en": "driver version", "zh": "驱动版本"},
    "what.cuda": {"en": "CUDA version", "zh": "CUDA 版本"},
    "what.nccl": {"en": "NCCL version", "zh": "NCCL 版本"},
    "what.pytorch": {"en": "PyTorch version", "zh": "PyTorch 版本"},
    "what.ofed": {"en": "OFED version", "zh": "OFED 版本"},
    "what.ib-port": {"en": "IB port state", "zh": "IB 端口状态"},
    "what.shm-used-pct": {"en": "/dev/shm use %", "zh": "/dev/shm 使用率 %"},
    "what.shm-size-bytes": {"en": "/dev/shm size (bytes)", "zh": "/dev/shm 大小（字节）"},
    "what.gpu-memory-used-mib": {"en": "GPU memory in use (MiB)", "zh": "GPU 显存占用（MiB）"},
    "what.gpu-count": {"en": "GPU count", "zh": "GPU 数量"},
    "all_ports_active": {"en": "all ports Active", "zh": "所有端口均为 Active"},
})
