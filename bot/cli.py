"""``gpu-triage``: the command line face.

Exit codes: 0 a diagnosis was produced (even "no confident cause"), 1 a failure (bad input,
unusable data directory, invalid knowledge entry), 2 misuse (bad flags).  Heavy imports happen
inside the commands so that ``gpu-triage --help`` starts fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

EPILOG = """examples:
  gpu-triage diagnose job.log                 one log
  gpu-triage diagnose logs/                   a folder of per-rank logs
  kubectl logs trainer-0 | gpu-triage diagnose -
  gpu-triage diagnose job.log --format json   JSON for other tools (docs/json-output.md)
  gpu-triage diagnose job.log --lang zh       中文输出
  gpu-triage diagnose --job 123               resolve with Slurm, collect from the nodes, diagnose
  gpu-triage diagnose --nodes 'gpu[01-08]'    explicit nodes
  gpu-triage collect --job 123 -o incident-123.tar.gz
  gpu-triage collect --local -o node.tar.gz   on a node the bot cannot reach
  gpu-triage diagnose --bundle incident-123.tar.gz
  gpu-triage kb search watchdog timeout
"""


def _add_collection_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("collecting from nodes")
    g.add_argument("--job", help="Slurm job ID (123 or job-123), or a name in --inventory")
    g.add_argument("--nodes", help="nodes in hostlist syntax, e.g. 'gpu[01-04,07],gpu-b[1-2]'")
    g.add_argument("--inventory", help="YAML inventory: job or cluster name -> nodes and SSH settings "
                                       "(default: ssh.inventory / $GPU_TRIAGE_INVENTORY)")
    g.add_argument("--ssh-config", help="OpenSSH client config to use (default: ssh.config / "
                                        "$GPU_TRIAGE_SSH_CONFIG, else ~/.ssh/config)")
    g.add_argument("--login-node", help="run scontrol/sacct/srun on this SSH host instead of locally "
                                        "(default: ssh.login_node / $GPU_TRIAGE_LOGIN_NODE)")
    g.add_argument("--concurrency", type=int, help="nodes collected at once (default: ssh.concurrency, 32)")
    g.add_argument("--srun-above", type=int,
                   help="above this many nodes, collect through one srun step in the job (default 128)")
    g.add_argument("--only", help="comma-separated collectors to run (default: all)")
    g.add_argument("--connect-timeout", type=float, help="SSH connect timeout, seconds (default 10)")
    g.add_argument("--command-timeout", type=float,
                   help="limit for each collector command on a node, seconds (default: each collector's own)")


class Failure(Exception):
    """A failure the user can fix; printed without a traceback, exit 1."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpu-triage",
        description="Diagnose why a multi-GPU training job died: probable cause, evidence, next commands, fix "
                    "and which support tier is worth paying for.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", help="where the knowledge database lives (default: $GPU_TRIAGE_DATA_DIR or the "
                                      "user data directory)")
    p.add_argument("--config", help="YAML config file (default: $GPU_TRIAGE_CONFIG; see "
                                    "deploy/gpu-triage.example.yaml); the environment overrides it, flags override both")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    d = sub.add_parser("diagnose", help="diagnose training logs (files, folders, or - for stdin)",
                       description="Diagnose training logs: files, folders of per-rank logs (searched recursively), "
                                   ".gz files, or - for standard input.")
    d.add_argument("paths", nargs="*", metavar="LOG", help="log file, folder, or - for stdin")
    d.add_argument("--bundle", help="replay a bundle (folder or .tar.gz) written by gpu-triage collect")
    d.add_argument("--save-bundle", metavar="PATH", help="where to keep the collection (folder or .tar.gz)")
    _add_collection_flags(d)
    d.add_argument("--format", choices=("text", "json", "markdown"), default="text",
                   help="text (terminal, default), json (for other tools: docs/json-output.md) or markdown "
                        "(for a ticket)")
    d.add_argument("--lang", choices=("en", "zh"),
                   help="language of the reply (default: $GPU_TRIAGE_LANG, the config's lang, or en)")
    d.add_argument("--explain", action="store_true", help="show why each cause ranked where it did")
    d.add_argument("--record", action="store_true",
                   help="store this diagnosis as an incident (the team's history: similar incidents, feedback, "
                        "repeat-aware escalation); --post always records")
    d.add_argument("--rate-card",
                   help="YAML rate card for support estimates (see deploy/rate-card.example.yaml; default: "
                        "$GPU_TRIAGE_RATE_CARD or the config's rate_card)")
    d.add_argument("--region", help="region in the rate card (e.g. beijing, shanghai, shenzhen)")
    d.add_argument("--gpus", type=int, help="GPU count of the job, when the log does not tell")
    d.add_argument("--post", metavar="CHANNEL",
                   help="with --job: post the diagnosis to this Slack channel with $SLACK_BOT_TOKEN, once per job "
                        "and channel (later runs print 'already posted')")

    c = sub.add_parser("collect", help="collect evidence from a job's nodes into a bundle",
                       description="Run the read-only collectors on the job's nodes (or this node with --local) "
                                   "and save a bundle that `diagnose --bundle` replays.")
    c.add_argument("-o", "--output", required=True, help="bundle path: a new folder, or a .tar.gz file")
    c.add_argument("--local", action="store_true", help="collect on this machine, no SSH")
    c.add_argument("logs", nargs="*", metavar="LOG", help="training logs to include in the bundle")
    _add_collection_flags(c)

    sv = sub.add_parser("serve", help="run the Slack bot (Socket Mode by default)",
                        description="Run the Slack bot. Socket Mode needs SLACK_BOT_TOKEN and SLACK_APP_TOKEN; "
                                    "--http needs SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET and serves Slack's "
                                    "requests on /slack/events (and /healthz). SLACK_API_URL overrides the Web API.")
    sv.add_argument("--http", action="store_true", help="HTTP mode with request-signature verification")
    sv.add_argument("--host", default="127.0.0.1", help="HTTP mode: address to listen on (default 127.0.0.1)")
    sv.add_argument("--port", type=int, default=3000, help="HTTP mode: port (default 3000)")

    pf = sub.add_parser("preflight", help="check nodes before a job: exit 0 healthy, 1 blocking, 2 could not check",
                        description="Run the collectors and judge each node: ok, warn, critical, or unknown (not "
                                    "reached / a check could not run). Exit 0 healthy (ok/warn), 1 blocking findings "
                                    "(any critical), 2 could not check (any unknown, no critical).")
    pf.add_argument("--local", action="store_true", help="check this node, no SSH (a Slurm prolog)")
    pf.add_argument("--format", choices=("text", "json"), default="text")
    pf.add_argument("--lang", choices=("en", "zh"), default=os.environ.get("GPU_TRIAGE_LANG", "en"),
                    help="language of the reasons (en, zh)")
    _add_collection_flags(pf)

    cf = sub.add_parser("config", help="check the configuration file")
    cfsub = cf.add_subparsers(dest="config_command", metavar="CONFIG_COMMAND")
    cfc = cfsub.add_parser("check", help="validate a config file (default: --config / $GPU_TRIAGE_CONFIG) with "
                                         "the environment on top; exit 0 valid, 1 invalid")
    cfc.add_argument("path", nargs="?", help="config file")
    cfc.add_argument("--show", action="store_true", help="print the effective settings as YAML")

    kb = sub.add_parser("kb", help="inspect and validate the knowledge base")
    kbsub = kb.add_subparsers(dest="kb_command", metavar="KB_COMMAND")
    ls = kbsub.add_parser("list", help="list entries")
    ls.add_argument("--category", help="only this category")
    ls.add_argument("--format", choices=("text", "json"), default="text")
    show = kbsub.add_parser("show", help="show one entry")
    show.add_argument("id")
    show.add_argument("--lang", choices=("en", "zh"), default=os.environ.get("GPU_TRIAGE_LANG", "en"))
    show.add_argument("--format", choices=("text", "json", "yaml"), default="text")
    search = kbsub.add_parser("search", help="full-text search (English or Chinese)")
    search.add_argument("words", nargs="+")
    search.add_argument("--limit", type=int, default=10)
    val = kbsub.add_parser("validate", help="validate entry files (default: the shipped entries)")
    val.add_argument("dir", nargs="?", help="folder of entries")
    fb = sub.add_parser("feedback", help="confirm or reject a recorded diagnosis (builds the team's runbook)",
                        description="Tell gpu-triage whether a recorded diagnosis (diagnose --record / --post "
                                    "print its incident id) was right. Confirmed causes rank higher next time and "
                                    "show as 'seen before'; rejected ones rank lower.")
    fb.add_argument("incident", help="incident id printed by diagnose --record or --post")
    fb.add_argument("verdict", choices=("confirm", "reject"))
    fb.add_argument("--cause", help="the cause the verdict is about (default: the incident's top cause)")
    fb.add_argument("--note", default="", help="what you found (kept with the verdict)")
    fb.add_argument("--user", default=os.environ.get("USER", ""), help="who gives the verdict (default: $USER)")
    from bot.runbook_cli import add_parsers as _team_parsers  # kb add|edit|export|import, runbook export

    _team_parsers(sub, kbsub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "kb" and args.kb_command is None:
        parser.parse_args(["kb", "--help"])
    if args.command == "config" and args.config_command is None:
        parser.parse_args(["config", "--help"])
    if args.command == "config":
        return cmd_config(args)
    try:
        _apply_config(args)
        if args.command == "diagnose":
            return cmd_diagnose(args)
        if args.command == "collect":
            return cmd_collect(args)
        if args.command == "serve":
            return cmd_serve(args)
        if args.command == "preflight":
            return cmd_preflight(args)
        if args.command == "feedback":
            return cmd_feedback(args)
        if args.command == "runbook" or getattr(args, "kb_command", None) in ("add", "edit", "export", "import"):
            from bot import runbook_cli

            if args.command == "runbook" and args.runbook_command is None:
                parser.parse_args(["runbook", "--help"])
            return runbook_cli.run(args, Failure, _known_errors)
        return cmd_kb(args)
    except Failure as exc:
        print(f"gpu-triage: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("gpu-triage: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0


def _known_errors():
    from collectors.bundle import BundleError
    from collectors.remote import SSHError
    from collectors.resolve import ResolveError
    from collectors.trainlog import InputError
    from knowledge.loader import EntryError
    from knowledge.store import KnowledgeInvalid, StoreError
    from knowledge.support import RateCardError

    return (InputError, KnowledgeInvalid, StoreError, RateCardError, EntryError, ResolveError, BundleError,
            SSHError, FileNotFoundError)


def _engine(args, **kw):
    from bot.engine import Engine
    from knowledge.escalation import Thresholds

    settings = getattr(args, "settings", None)
    if settings is not None:
        kw.setdefault("thresholds", Thresholds.from_mapping(settings.section("escalation")))
    try:
        return Engine(data_dir=args.data_dir, **kw)
    except _known_errors() as exc:
        raise Failure(str(exc)) from exc


def _misuse(message: str) -> int:
    print(f"gpu-triage: {message}", file=sys.stderr)
    return 2


def _collect(args, logs: Sequence[str] = (), fetch_logs: bool = True):
    """Resolve and collect; return (plan, node results)."""
    from bot import investigate as inv
    from collectors.remote import SSHSettings

    settings = SSHSettings(args.ssh_config, connect_timeout=args.connect_timeout)
    cols = inv.select_collectors(args.only, args.command_timeout)
    if getattr(args, "local", False):
        p = inv.Plan(job=None, nodes=[])
        results = inv.local_collection(cols)
        p.nodes = list(results)
    else:
        p = inv.plan(job=args.job, nodes=args.nodes, inventory=args.inventory, settings=settings,
                     login=args.login_node, fetch_logs=fetch_logs)
        what = f"job {p.job}" if p.job else "the nodes"
        print(f"gpu-triage: collecting from {len(p.nodes)} node(s) of {what}: {', '.join(p.nodes[:8])}"
              f"{' ...' if len(p.nodes) > 8 else ''}", file=sys.stderr)
        results = inv.run_collection(p, cols, settings=settings, concurrency=args.concurrency,
                                     srun_above=args.srun_above, login=args.login_node,
                                     progress=inv.stderr_progress())
    for note in p.notes:
        print(f"gpu-triage: {note}", file=sys.stderr)
    from pathlib import Path

    for log in logs:
        if log != "-":
            p.logs[Path(log).name] = Path(log)
    return p, results


def cmd_diagnose(args) -> int:
    if args.gpus is not None and args.gpus <= 0:
        return _misuse("--gpus must be a positive number")
    if args.paths.count("-") > 1:
        return _misuse("'-' (standard input) can be given once")
    collecting = bool(args.job or args.nodes)
    if args.bundle and collecting:
        return _misuse("--bundle replays a saved collection; it cannot be combined with --job or --nodes")
    if not (args.paths or args.bundle or collecting):
        return _misuse("give a log (file, folder or -), --bundle PATH, --job ID or --nodes LIST")
    if args.concurrency < 1:
        return _misuse("--concurrency must be at least 1")
    if args.post is not None:
        return _diagnose_and_post(args)
    return _diagnose(args)


def _diagnose_and_post(args) -> int:
    """diagnose --job ID --post CHANNEL: claim (job, channel) once, diagnose, post; never twice."""
    from bot import post

    if not args.job:
        return _misuse("--post needs --job ID: the post is made once per job")
    if not args.post.strip():
        return _misuse("--post needs a channel (ID like C0123456789 or #name)")
    if not os.environ.get("SLACK_BOT_TOKEN", "").startswith("xoxb-"):
        raise Failure("--post needs SLACK_BOT_TOKEN (xoxb-..., the gpu-triage app's bot token) in the environment")
    job = args.job.strip()
    job = job[4:] if job.lower().startswith("job-") else job
    channel = args.post.strip()
    try:
        won = post.claim(args.data_dir, job, channel)
    except _known_errors() as exc:
        raise Failure(str(exc)) from exc
    if not won:
        row = post.posted(args.data_dir, job, channel) or {}
        what = "already posted" if row.get("state") == "posted" else "already being posted by another run"
        print(f"gpu-triage: job {job}: {what} to {channel} ({row.get('host') or '?'}, "
              f"{row.get('posted_at') or row.get('claimed_at') or '?'}); nothing to do", file=sys.stderr)
        return 0
    try:
        code = _diagnose(args)
        ts = post.post_diagnosis(args.last_doc, channel)
    except post.PostError as exc:
        post.release(args.data_dir, job, channel)
        raise Failure(str(exc)) from exc
    except BaseException:
        post.release(args.data_dir, job, channel)
        raise
    post.done(args.data_dir, job, channel, ts)
    print(f"gpu-triage: posted the diagnosis of job {job} to {channel}", file=sys.stderr)
    return code


def _diagnose(args) -> int:
    collecting = bool(args.job or args.nodes)
    engine = _engine(args, rate_card=args.rate_card, region=args.region, gpus=args.gpus)
    try:
        if collecting or args.bundle:
            from collectors.bundle import read_bundle

            path = args.bundle
            if collecting:
                plan, results = _collect(args, args.paths)
                if args.save_bundle:
                    path = args.save_bundle
                else:  # kept with the knowledge database, so every answer can be replayed later
                    from datetime import datetime

                    from knowledge.store import data_dir

                    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
                    from bot.investigate import bundle_name

                    path = str(data_dir(args.data_dir) / "bundles" / bundle_name(plan.job, stamp))
                from bot.investigate import save

                save(plan, results, path)
                print(f"gpu-triage: bundle saved to {path}", file=sys.stderr)
            with read_bundle(path) as bundle:
                extra = [p for p in args.paths if p != "-"] if args.bundle else []
                diagnosis = engine.diagnose_bundle(bundle, extra_logs=extra)
        else:
            diagnosis = engine.diagnose_paths(args.paths, stdin=sys.stdin.buffer if "-" in args.paths else None)
        from bot.render import as_dict

        doc = as_dict(diagnosis, lang=args.lang, explain=args.explain)
        args.last_doc = doc
        if args.record or args.post is not None:
            # the incident feeds the team's history: similar incidents, learning, repeat escalation
            record_doc = as_dict(diagnosis, lang=args.lang)
            if collecting:
                record_doc["bundle"] = str(path)
            doc["incident"] = engine.runbook.record_incident(record_doc, source="cli")
    except _known_errors() as exc:
        raise Failure(str(exc)) from exc
    if args.format == "json":
        import json

        sys.stdout.write(json.dumps(doc, ensure_ascii=False, indent=2) + "\n")
    elif args.format == "markdown":
        from bot.render.markdown import render

        sys.stdout.write(render(doc))
    else:
        from bot.render.terminal import render

        render(doc)
    if doc.get("incident"):
        from bot.messages import t

        print(t("recorded", args.lang or "en", id=doc["incident"]), file=sys.stderr)
    for warning in diagnosis.warnings if args.format != "text" else ():
        print(f"gpu-triage: warning: {warning}", file=sys.stderr)
    return 0


def cmd_feedback(args) -> int:
    """Record a verdict on a recorded diagnosis from the command line (the Slack buttons' twin)."""
    from knowledge.runbook import Runbook

    try:
        runbook = Runbook(args.data_dir)
        incident = runbook.incident(args.incident)
    except _known_errors() as exc:
        raise Failure(str(exc)) from exc
    if incident is None:
        raise Failure(f"no incident {args.incident!r} in this database; use the id that diagnose --record or "
                      f"--post printed (and the same --data-dir)")
    causes = [c["id"] for c in incident["doc"].get("causes", [])]
    cause = args.cause or incident.get("top_cause") or ""
    if not cause:
        raise Failure(f"incident {args.incident} has no cause to confirm or reject; name one with --cause ID")
    if args.cause and args.cause not in causes:
        raise Failure(f"incident {args.incident} did not propose {args.cause!r}; its causes: "
                      f"{', '.join(causes) or 'none'}")
    verdict = "confirmed" if args.verdict == "confirm" else "not-it"
    try:
        runbook.record_feedback(args.incident, cause, args.user or "", verdict, note=args.note)
    except _known_errors() as exc:
        raise Failure(str(exc)) from exc
    print(f"gpu-triage: {args.incident}: {cause} {verdict}"
          + (" (it will rank higher for this signature and show as seen before)" if verdict == "confirmed"
             else " (it will rank lower for this signature)"))
    return 0


def cmd_collect(args) -> int:
    if not (args.local or args.job or args.nodes):
        return _misuse("collect needs --job ID, --nodes LIST or --local")
    if args.local and (args.job or args.nodes):
        return _misuse("--local collects on this machine; drop --job/--nodes")
    try:
        plan, results = _collect(args, args.logs)
        from bot.investigate import save

        path = save(plan, results, args.output)
    except _known_errors() as exc:
        raise Failure(str(exc)) from exc
    bad = [r for r in results.values() if r.status != "ok"]
    print(f"gpu-triage: bundle saved to {path} ({len(results)} node(s), {len(bad)} not fully checked)",
          file=sys.stderr)
    for r in bad:
        print(f"  {r.node}: {r.status}: {r.detail}", file=sys.stderr)
    return 0


def cmd_serve(args) -> int:
    import logging

    from bot.slack.config import ConfigError, SlackConfig

    try:
        cfg = SlackConfig.from_env(http=args.http, settings=args.settings)
        if args.data_dir:
            cfg.data_dir = args.data_dir
    except ConfigError as exc:
        raise Failure(str(exc)) from exc
    from bot.logs import setup_logging

    setup_logging(args.settings.get("log.format"), args.settings.get("log.level"))
    metrics_cfg = args.settings.section("metrics")
    if metrics_cfg["enabled"] and not args.http:  # HTTP mode serves /metrics beside /slack/events
        from bot import metrics

        try:
            metrics.serve(metrics_cfg["host"], int(metrics_cfg["port"]))
        except OSError as exc:
            raise Failure(f"cannot serve /metrics on {metrics_cfg['host']}:{metrics_cfg['port']}: {exc.strerror}; "
                          "set metrics.port (or GPU_TRIAGE_METRICS_PORT), or metrics.enabled: false") from exc
        logging.getLogger("gpu_triage").info("serving /metrics and /healthz on http://%s:%s",
                                             metrics_cfg["host"], metrics_cfg["port"])
    from bot.slack.app import create_app

    try:
        app, ctx = create_app(cfg, http=args.http)
    except _known_errors() as exc:
        raise Failure(str(exc)) from exc
    if args.http:
        from bot.slack.http import make_server

        try:
            server = make_server(app, args.host, args.port)
        except OSError as exc:
            raise Failure(f"cannot listen on {args.host}:{args.port}: {exc.strerror}; choose another --port") from exc
        print(f"gpu-triage: serving Slack requests on http://{args.host}:{args.port}/slack/events", file=sys.stderr)
        server.serve_forever()
        return 0
    from bot.slack.socket_mode import SocketModeError, SocketModeHandler

    print("gpu-triage: connecting to Slack in Socket Mode", file=sys.stderr)
    try:
        SocketModeHandler(app, cfg.app_token, web_client=app.client).start()
    except SocketModeError as exc:
        raise Failure(str(exc)) from exc
    return 0


def cmd_kb(args) -> int:
    if args.kb_command == "validate":
        from pathlib import Path

        from knowledge.loader import entries_dir, load_dir

        directory = Path(args.dir) if args.dir else entries_dir()
        if not directory.is_dir():
            raise Failure(f"{directory} is not a folder of knowledge entries")
        from collectors.trainlog import parse_text

        entries, errors = load_dir(directory, finder=lambda line: parse_text(line, source="example").findings)
        for error in errors:
            print(error, file=sys.stderr)
        cats = sorted({e.category for e in entries})
        print(f"{len(entries)} entries valid in {len(cats)} categories; {len(errors)} problems")
        return 1 if errors else 0

    from knowledge.store import Store

    try:
        store = Store(args.data_dir)
        if args.kb_command == "list":
            entries = [e for e in store.entries() if not args.category or e.category == args.category]
            if args.category and not entries:
                from knowledge.loader import CATEGORIES

                raise Failure(f"no entries in category {args.category!r}; categories: {', '.join(CATEGORIES)}")
            if args.format == "json":
                import json

                print(json.dumps([{"id": e.id, "category": e.category, "title": e.title} for e in entries],
                                 ensure_ascii=False, indent=2))
            else:
                for e in entries:
                    print(f"{e.category:20} {e.id:45} {e.title['en']}")
                print(f"{len(entries)} entries")
            return 0
        if args.kb_command == "show":
            entry = store.get(args.id)
            if entry is None:
                from knowledge.store import SearchError

                try:
                    hits = store.search(args.id.replace("-", " "), limit=5)
                except SearchError:  # an id no entry could have: no suggestions
                    hits = []
                hint = f"; did you mean: {', '.join(e.id for e, _ in hits)}" if hits else ""
                raise Failure(f"no entry {args.id!r} (gpu-triage kb list shows them all){hint}")
            return _show(entry, args)
        if args.kb_command == "search":
            hits = store.search(" ".join(args.words), limit=args.limit)
            for entry, _ in hits:
                print(f"{entry.category:20} {entry.id:45} {entry.title['en']} / {entry.title['zh']}")
            if not hits:
                print("no matching entries")
            return 0
    except _known_errors() as exc:
        raise Failure(str(exc)) from exc
    return 2


def _show(entry, args) -> int:
    import json

    if args.format == "json":
        print(json.dumps(entry.to_json(), ensure_ascii=False, indent=2))
        return 0
    if args.format == "yaml":
        import yaml

        data = {k: v for k, v in entry.to_json().items() if k not in ("origin", "path")}
        print(yaml.safe_dump(data, allow_unicode=True, sort_keys=False), end="")
        return 0
    from bot.messages import pick, t

    lang = args.lang
    colon = "：" if lang == "zh" else ": "
    print(f"{entry.id}  [{entry.category}]  {pick(entry.title, lang)}\n")
    print(pick(entry.cause, lang) + "\n")
    print(t("next_commands", lang))
    for n, cmd in enumerate(entry.next_commands, 1):
        print(f"  {n}. {cmd['command']}\n     {pick(cmd['why'], lang)}")
    print(f"\n{t('fix', lang)}")
    for f in pick(entry.fix, lang):
        print(f"  - {f}")
    print(f"\n{t('support', lang)}{colon}{t('tier.' + entry.support['tier'], lang)} — {pick(entry.support['why'], lang)}")
    print(f"{t('references', lang)}{colon}" + " ".join(entry.references))
    return 0


# --- configuration, preflight ------------------------------------------------------------------

# flag attribute -> config key; a flag left unset takes the config's value (file, env on top)
_FROM_CONFIG = {"data_dir": "data_dir", "lang": "lang", "rate_card": "rate_card", "region": "region",
                "ssh_config": "ssh.config", "login_node": "ssh.login_node", "inventory": "ssh.inventory",
                "connect_timeout": "ssh.connect_timeout", "command_timeout": "ssh.command_timeout",
                "concurrency": "ssh.concurrency", "srun_above": "ssh.srun_above"}


def _load_settings(path=None):
    from bot.config import ConfigError, load_config

    try:
        return load_config(path)
    except ConfigError as exc:
        raise Failure(f"configuration: {exc}") from exc


def _apply_config(args) -> None:
    """Fill every flag the user did not give from the config file with the environment on top."""
    settings = _load_settings(getattr(args, "config", None))
    args.settings = settings
    for attr, key in _FROM_CONFIG.items():
        if hasattr(args, attr) and getattr(args, attr) is None:
            setattr(args, attr, settings.get(key))


def cmd_config(args) -> int:
    from bot.config import ConfigError, load_config

    path = args.path or args.config
    try:
        settings = load_config(path)
    except ConfigError as exc:
        print(f"gpu-triage: configuration: {exc}", file=sys.stderr)
        return 1
    where = settings.source or "no file (defaults)"
    env = f"; from the environment: {', '.join(f'{k} ({v})' for k, v in settings.from_env.items())}" \
        if settings.from_env else ""
    print(f"configuration OK: {where}{env}")
    if args.show:
        import yaml

        print(yaml.safe_dump(settings.values, sort_keys=False, allow_unicode=True), end="")
    return 0


def cmd_preflight(args) -> int:
    from bot import preflight

    if args.local and (args.job or args.nodes):
        return _misuse("--local checks this machine; drop --job/--nodes")
    if not (args.local or args.job or args.nodes):
        return _misuse("preflight needs --local, --job ID or --nodes LIST")
    if args.concurrency < 1:
        return _misuse("--concurrency must be at least 1")
    if not args.only:
        args.only = ",".join(preflight.COLLECTORS)
    try:
        plan, results = _collect(args, fetch_logs=False)  # a health check reads no job log
    except _known_errors() as exc:
        raise Failure(str(exc)) from exc
    thresholds = args.settings.section("preflight")
    report = preflight.evaluate(preflight.bundle_from_results(results, plan.job), thresholds, job=plan.job)
    from bot import metrics

    for n in report.nodes:
        metrics.inc("gpu_triage_preflight_nodes_total", severity=n.severity)
    code = report.exit_code
    if code == 2 and thresholds.get("unknown_fails"):
        code = 1
    if args.format == "json":
        import json

        doc = report.to_json(args.lang)
        doc["exit_code"] = code
        sys.stdout.write(json.dumps(doc, ensure_ascii=False, indent=2) + "\n")
    else:
        preflight.render_text(report, sys.stdout, args.lang)
    return code


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
