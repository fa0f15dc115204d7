"""The config file (bot/config.py, `gpu-triage config check`), deploy/ checked by parse-and-check
and by hadolint / systemd-analyze / shellcheck where installed, metrics and structured logs."""

import io
import json
import logging
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml

from bot.config import ConfigError, load_config
from test_preflight import cli

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
EXAMPLE = DEPLOY / "gpu-triage.example.yaml"


# --- configuration -------------------------------------------------------------------------------

def test_example_config_passes_config_check(tmp_path):
    proc = cli(["config", "check", str(EXAMPLE)], tmp_path)
    assert proc.returncode == 0 and "configuration OK" in proc.stdout, proc.stderr


def test_example_documents_every_key():
    from bot.config import SCHEMA

    text = EXAMPLE.read_text()
    data = yaml.safe_load(text)
    for key, spec in SCHEMA.items():
        assert key in data, key
        if isinstance(spec, dict):
            assert set(spec) == set(data[key]), key


@pytest.mark.parametrize("content,needle", [
    ("sssh:\n  config: x\n", "sssh: unknown key"),
    ("ssh:\n  concurency: 4\n", "ssh.concurency: unknown key"),
    ("ssh:\n  connect_timeout: -1\n", "ssh.connect_timeout: must be > 0"),
    ("slack:\n  bot_token: xoxb-1\n", "set the environment variable SLACK_BOT_TOKEN"),
    # a secret under a key that is not a secret's: refused, and never echoed back
    ("slack:\n  post_channel: \"xoxb-123456789012-123456789012-AbCdEfGhIjKlMnOpQrStUvWx\"\n",
     "slack.post_channel: this value looks like a secret"),
    ("lang: fr\n", "lang: must be one of"),
    ("preflight:\n  disk_warn_pct: 99\n  disk_critical_pct: 90\n", "preflight.disk_warn_pct"),
    ("ssh: [1, 2\n", "not valid YAML"),
])
def test_bad_config_names_the_key_and_fix(tmp_path, content, needle):
    path = tmp_path / "c.yaml"
    path.write_text(content)
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    assert needle in str(err.value)
    proc = cli(["config", "check", str(path)], tmp_path)
    assert proc.returncode == 1 and needle in proc.stderr and "Traceback" not in proc.stderr
    assert "AbCdEfGhIjKlMnOp" not in proc.stderr + proc.stdout


def test_environment_overrides_the_file_and_flags_override_both(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("ssh:\n  concurrency: 4\nslack:\n  collect_channels: [CFILE]\n  workers: 2\n")
    cfg = load_config(path, env={"GPU_TRIAGE_COLLECT_CHANNELS": "CENV1,CENV2"})
    assert cfg.get("ssh.concurrency") == 4 and cfg.get("slack.collect_channels") == ["CENV1", "CENV2"]
    assert cfg.from_env == {"slack.collect_channels": "GPU_TRIAGE_COLLECT_CHANNELS"}
    with pytest.raises(ConfigError, match="GPU_TRIAGE_SLACK_WORKERS"):
        load_config(path, env={"GPU_TRIAGE_SLACK_WORKERS": "many"})
    # the bot reads the same settings
    from bot.slack.config import SlackConfig

    slack = SlackConfig.from_env({"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APP_TOKEN": "xapp-1",
                                  "GPU_TRIAGE_CONFIG": str(path)})
    assert slack.collect_channels == {"CFILE"} and slack.workers == 2
    # the CLI: GPU_TRIAGE_CONFIG is read, a bad file is a clear failure for every command
    bad = tmp_path / "bad.yaml"
    bad.write_text("nope: 1\n")
    proc = cli(["kb", "list"], tmp_path, env={"GPU_TRIAGE_CONFIG": str(bad)})
    assert proc.returncode == 1 and "nope: unknown key" in proc.stderr


# --- deploy/ ---------------------------------------------------------------------------------------

REQUIRED = {
    ("v1", "Namespace"): [],
    ("v1", "ConfigMap"): ["data"],
    ("v1", "Secret"): [],
    ("v1", "Service"): ["spec.selector", "spec.ports"],
    ("v1", "PersistentVolumeClaim"): ["spec.accessModes", "spec.resources.requests.storage"],
    ("apps/v1", "Deployment"): ["spec.selector.matchLabels", "spec.template.spec.containers"],
    ("apps/v1", "DaemonSet"): ["spec.selector.matchLabels", "spec.template.spec.containers"],
}


def _get(doc, dotted):
    for part in dotted.split("."):
        if not isinstance(doc, dict) or part not in doc:
            return None
        doc = doc[part]
    return doc


def _manifests():
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                yield path.name, doc


def test_kubernetes_manifests_parse_and_have_required_fields():
    kinds = set()
    for name, doc in _manifests():
        key = (doc.get("apiVersion"), doc.get("kind"))
        assert key in REQUIRED, f"{name}: unexpected {key}"
        kinds.add(key[1])
        assert _get(doc, "metadata.name"), f"{name}: {key[1]} without metadata.name"
        for field in REQUIRED[key]:
            assert _get(doc, field) is not None, f"{name}: {key[1]} misses {field}"
        if key[1] in ("Deployment", "DaemonSet"):
            labels = _get(doc, "spec.template.metadata.labels")
            assert _get(doc, "spec.selector.matchLabels").items() <= labels.items(), name
            for c in _get(doc, "spec.template.spec.containers"):
                assert c.get("name") and c.get("image"), name
                mounts = {m["name"] for m in c.get("volumeMounts", [])}
                volumes = {v["name"] for v in _get(doc, "spec.template.spec.volumes") or []}
                assert mounts <= volumes, f"{name}: mounts without volumes {mounts - volumes}"
        if key[1] == "Secret":  # placeholders only: no real token is ever committed
            for k, v in (doc.get("stringData") or {}).items():
                assert "REPLACE-ME" in str(v) or k == "config", f"{name}: {k} is not a placeholder"
    assert {"Deployment", "Secret", "ConfigMap", "DaemonSet"} <= kinds
    deployment = next(d for _, d in _manifests() if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["containers"][0]["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_configmap_config_passes_config_check(tmp_path):
    cm = next(d for _, d in _manifests() if d["kind"] == "ConfigMap")
    path = tmp_path / "config.yaml"
    path.write_text(cm["data"]["config.yaml"])
    proc = cli(["config", "check", str(path)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert yaml.safe_load(EXAMPLE.read_text()) == yaml.safe_load(path.read_text())  # kept in step


def test_dockerfile_is_slim_non_root_with_kb_and_healthcheck():
    text = (DEPLOY / "Dockerfile").read_text()
    assert "FROM python:3.11-slim" in text
    users = [line.split()[1] for line in text.splitlines() if line.startswith("USER ")]
    assert users and users[-1] not in ("root", "0")
    assert "gpu-triage kb validate" in text and "HEALTHCHECK" in text and 'CMD ["serve"]' in text


@pytest.mark.skipif(not shutil.which("hadolint"), reason="hadolint not installed (optional)")
def test_hadolint():
    proc = subprocess.run(["hadolint", str(DEPLOY / "Dockerfile")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze not installed (optional)")
def test_systemd_unit_verifies(tmp_path):
    exe = shutil.which("gpu-triage") or "/bin/true"
    unit = tmp_path / "gpu-triage.service"
    unit.write_text((DEPLOY / "gpu-triage.service").read_text().replace("/usr/local/bin/gpu-triage", exe))
    proc = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    problems = [line for line in (proc.stdout + proc.stderr).splitlines()
                if "gpu-triage.service" in line]
    assert proc.returncode == 0 and not problems, proc.stdout + proc.stderr
    text = unit.read_text()
    assert "EnvironmentFile=" in text and "NoNewPrivileges=yes" in text and "User=gpu-triage" in text


@pytest.mark.skipif(not shutil.which("shellcheck"), reason="shellcheck not installed (optional)")
@pytest.mark.parametrize("script", ["prolog.sh", "epilog.sh"])
def test_shellcheck(script):
    proc = subprocess.run(["shellcheck", str(DEPLOY / "slurm" / script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize("script", ["prolog.sh", "epilog.sh"])
def test_slurm_scripts_parse(script):
    assert subprocess.run(["bash", "-n", str(DEPLOY / "slurm" / script)]).returncode == 0


def test_prolog_fails_only_on_blocking_findings(tmp_path):
    fake = tmp_path / "fake-gpu-triage"
    for rc, strict, expected in [(0, "0", 0), (1, "0", 1), (2, "0", 0), (2, "1", 1), (3, "0", 0)]:
        fake.write_text(f"#!/bin/sh\necho 'node01  CRITICAL  [critical] xid: hardware XID 79'\nexit {rc}\n")
        fake.chmod(0o755)
        env = {"PATH": "/usr/bin:/bin", "GPU_TRIAGE_BIN": str(fake), "GPU_TRIAGE_PREFLIGHT_STRICT": strict,
               "GPU_TRIAGE_ENV_FILE": str(tmp_path / "none")}
        proc = subprocess.run(["bash", str(DEPLOY / "slurm" / "prolog.sh")], env=env, capture_output=True, text=True)
        assert proc.returncode == expected, (rc, strict, proc.stderr)


# --- observability -----------------------------------------------------------------------------------

def test_metrics_text_and_http_endpoints(engine):
    from bot import metrics
    from bot.slack.http import make_server, serve_in_thread

    engine.diagnose_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    metrics.inc("gpu_triage_ssh_failures_total", reason="unreachable")
    text = metrics.render()
    assert 'gpu_triage_diagnoses_total{category="gpu-memory"}' in text
    assert "gpu_triage_diagnosis_seconds_count" in text and 'le="+Inf"' in text
    assert 'gpu_triage_ssh_failures_total{reason="unreachable"}' in text
    for line in text.splitlines():  # every sample line is NAME{labels} VALUE
        if not line.startswith("#"):
            float(line.rsplit(" ", 1)[1])

    from slack_bolt import App

    app = App(token="xoxb-1", signing_secret="s", token_verification_enabled=False)
    server = make_server(app, "127.0.0.1", 0)
    serve_in_thread(server)
    try:
        port = server.server_address[1]
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert "# TYPE gpu_triage_diagnoses_total counter" in body
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).read() == b"ok\n"
    finally:
        server.shutdown()
    standalone = metrics.serve("127.0.0.1", 0)  # Socket Mode: its own port
    try:
        port = standalone.server_address[1]
        assert b"gpu_triage_nodes_collected_total" in urllib.request.urlopen(
            f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    finally:
        standalone.shutdown()


def test_slack_api_errors_are_counted(slack_api):
    from slack_sdk.errors import SlackApiError

    from bot import metrics
    from bot.slack.app import web_client
    from bot.slack.config import SlackConfig
    from conftest_slack import BOT_TOKEN

    before = metrics.value("gpu_triage_slack_api_errors_total", method="chat.postMessage", error="channel_not_found")
    client = web_client(SlackConfig(bot_token=BOT_TOKEN, api_url=slack_api.url))
    slack_api.fail("chat.postMessage", status=200, error="channel_not_found")
    with pytest.raises(SlackApiError):
        client.chat_postMessage(channel="CNOSUCH", text="x")
    after = metrics.value("gpu_triage_slack_api_errors_total", method="chat.postMessage", error="channel_not_found")
    assert after == before + 1


def test_json_logs_when_not_a_terminal():
    from bot.logs import setup_logging

    stream = io.StringIO()
    handler = setup_logging("auto", "info", stream=stream)
    try:
        logging.getLogger("gpu_triage.test").info("collected %d nodes", 3, extra={"job": "123"})
        doc = json.loads(stream.getvalue().splitlines()[-1])
        assert doc["msg"] == "collected 3 nodes" and doc["level"] == "info" and doc["job"] == "123"
    finally:
        logging.getLogger().removeHandler(handler)
