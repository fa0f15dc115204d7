"""A log reaches us in the form its path to the user gave it: a Docker json-file log, a page's HTML
source, a CRI (containerd) log, an e-mail quote. Each form of a real log is diagnosed as the log
itself (collectors/trainlog.py _undecorate); what only looks like such a form is left alone."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest

from collectors.trainlog import clean_line

CORPUS = Path(__file__).resolve().parent / "corpus"

REAL = [
    "communication/alpaca-ncclremoteerror-net-ib-completion-error-12.log",
    "communication/basicsr-allreduce-watchdog-timeout.log",
    "host-memory/deepspeed-gptj-resume-checkpoint-sigkill.log",
    "gpu-memory/accelerate-ddp-reducer-init-oom-25gib.log",
    "checkpoint-storage/tf-keras-h5-save-nas-stale-file-handle.log",
]

FORMS = {
    # Docker's json-file driver (/var/lib/docker/containers/<id>/<id>-json.log), UTF-8 as Docker writes it
    "docker-json": lambda line: json.dumps({"log": line + "\n", "stream": "stderr",
                                            "time": "2024-05-02T03:14:07.741223011Z"}, ensure_ascii=False),
    # a JSON logger's record
    "json-logger": lambda line: json.dumps({"level": "error", "msg": line}, ensure_ascii=False),
    # the page source of a thread (entities for quotes, apostrophes and angle brackets)
    "html": html.escape,
    # containerd's CRI log (kubectl logs reads these files)
    "cri": lambda line: "2024-05-02T03:14:07.741223011Z stderr F " + line,
    # an e-mail or Slack quote
    "quote": lambda line: "> " + line,
    # `kubectl logs --prefix`, `docker compose logs`
    "kubectl-prefix": lambda line: "[pod/trainer-worker-3/pytorch] " + line,
    "compose": lambda line: "trainer-1  | " + line,
    # colours around the level words (a terminal capture, a CI log)
    "ansi": lambda line: line.replace("Error", "\x1b[31mError\x1b[0m").replace("error", "\x1b[1;31merror\x1b[0m"),
}


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("name", REAL)
def test_a_log_in_another_form_is_diagnosed_as_the_log_itself(engine, name, form):
    text = (CORPUS / name).read_text(encoding="utf-8")
    want = engine.diagnose_text(text).causes[0]
    dressed = "\n".join(FORMS[form](line) if line else line for line in text.split("\n"))
    assert dressed != text or form in ("html", "ansi")  # html.escape leaves a log without < > & " ' as it is
    got = engine.diagnose_text(dressed).causes
    assert got and (got[0].id, got[0].category) == (want.id, want.category)


def test_a_docker_json_record_reads_as_its_message_at_its_time():
    rec = json.dumps({"log": "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n",
                      "stream": "stderr", "time": "2024-05-02T03:14:07.741223011Z"})
    cl = clean_line(rec)
    assert cl.text == "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert cl.ts and cl.ts.startswith("2024-05-02T03:14:07")


@pytest.mark.parametrize("line", [
    '{"train_batch_size": 64, "zero_optimization": {"stage": 3}}',   # a config dump: no message field
    '{"log": 42}',                                                      # not a text
    '{"log": "unterminated',                                            # not JSON
    '[1, 2, 3]',
])
def test_what_only_looks_like_a_json_record_is_left_alone(line):
    assert clean_line(line).text == line


def test_html_entities_are_read_and_plain_ampersands_kept():
    assert clean_line("Expected tensor &quot;x&quot; &lt;float&gt; on cuda:0").text == 'Expected tensor "x" <float> on cuda:0'
    assert clean_line("set NCCL_IB_HCA=mlx5_0 && run").text == "set NCCL_IB_HCA=mlx5_0 && run"


@pytest.mark.parametrize("line, node, text", [
    ("[pod/trainer-worker-3/pytorch] RuntimeError: CUDA out of memory.", "trainer-worker-3",
     "RuntimeError: CUDA out of memory."),
    ("trainer-1  | RuntimeError: CUDA out of memory.", "trainer-1", "RuntimeError: CUDA out of memory."),
    ("proj_trainer_1  | Killed", "proj_trainer_1", "Killed"),
    ("step 10 | loss 0.5", None, "step 10 | loss 0.5"),                       # a table cell, not a service
    ("2024-05-02T03:14:07.741223011Z stderr F Killed", None, "Killed"),       # CRI: stream and tag go too
])
def test_container_log_prefixes_are_read(line, node, text):
    cl = clean_line(line)
    assert (cl.node, cl.text) == (node, text)


def test_colours_escaped_by_rsyslog_are_taken_off():
    # rsyslog writes a control character as "#" and its octal code: ESC is "#033"
    line = "#033[2m#033[33m(raylet)#033[0m Workers (tasks / actors) killed due to memory pressure (OOM)"
    cl = clean_line(line)
    assert "#033" not in cl.text and cl.text.endswith("killed due to memory pressure (OOM)")
    assert cl.text.startswith("(raylet)") or cl.text.startswith("Workers")
