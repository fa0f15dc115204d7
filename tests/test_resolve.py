"""Resolvers: hostlist syntax, scontrol/sacct output (real captures), inventories, validation."""

from pathlib import Path

import pytest

from collectors.resolve import (ResolveError, SlurmResolver, expand_hostlist, load_inventory, parse_job_id,
                                parse_sacct, parse_scontrol_job, table_rows)

FIX = Path(__file__).resolve().parent / "fixtures"


@pytest.mark.parametrize("expr, nodes", [
    ("gpu07", ["gpu07"]),
    ("gpu[01-04,07],gpu-b[1-2]", ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "gpu-b1", "gpu-b2"]),
    ("node[8-11]", ["node8", "node9", "node10", "node11"]),
    ("rack[1-2]-gpu[09-10]", ["rack1-gpu09", "rack1-gpu10", "rack2-gpu09", "rack2-gpu10"]),
    ("a1,a1,b2", ["a1", "b2"]),
    ("dgx-a100-[001-003]", ["dgx-a100-001", "dgx-a100-002", "dgx-a100-003"]),
])
def test_hostlist(expr, nodes):
    assert expand_hostlist(expr) == nodes


@pytest.mark.parametrize("bad", ["gpu[01-04", "gpu01]", "gpu[4-1]", "gpu[a-b]", "", "gpu;rm -rf /", "$(id)",
                                 "gpu01 gpu02", "-oProxyCommand=x"])
def test_hostlist_rejects_bad_input(bad):
    with pytest.raises(ResolveError):
        expand_hostlist(bad)


@pytest.mark.parametrize("text, job", [("123", "123"), ("job-123", "123"), ("  4567 ", "4567"),
                                       ("2681683_420", "2681683_420")])
def test_job_ids(text, job):
    assert parse_job_id(text) == job


@pytest.mark.parametrize("bad", ["12a", "123; reboot", "", "job-", "../1", "1 2"])
def test_bad_job_ids(bad):
    with pytest.raises(ResolveError, match="not a Slurm job ID"):
        parse_job_id(bad)


def test_scontrol_show_job_real_capture():
    fields = parse_scontrol_job((FIX / "scontrol-show-job" / "01.txt").read_text())
    assert fields["JobId"] == "10804568" and fields["JobState"] == "RUNNING"
    assert fields["NodeList"] == "f006" and fields["BatchHost"] == "f006"


def test_sacct_real_captures():
    info = parse_sacct((FIX / "sacct" / "01.txt").read_text(), "239023")
    assert info.nodes == ["galvani-cn001"] and info.state == "COMPLETED" and info.exit_code == "0:0"
    info = parse_sacct((FIX / "sacct" / "03.txt").read_text().split("\n", 1)[1], "1655360",
                       fields=("JobID", "State", "ExitCode"))
    assert info.state == "FAILED" and info.exit_code == "127:0" and info.nodes == []
    assert parse_sacct((FIX / "sacct" / "01.txt").read_text(), "999") is None


def test_sacct_default_fixed_width_table():
    # sacct without -P: a header, a line of dashes, columns cut to width ('2681683_420+' is the batch step)
    text = (FIX / "sacct" / "02.txt").read_text()
    rows = table_rows(text)
    assert [r["JobID"] for r in rows] == ["2681683_420", "2681683_420+"]
    assert rows[0] == {"JobID": "2681683_420", "JobName": "entropy.sh", "State": "FAILED", "ExitCode": "1:0"}
    info = parse_sacct(text, "2681683_420")
    assert info.state == "FAILED" and info.exit_code == "1:0"
    # the prompt line of a pasted parsable session is not a row
    assert parse_sacct((FIX / "sacct" / "03.txt").read_text(), "1655360",
                       fields=("JobID", "State", "ExitCode")).exit_code == "127:0"


# `scontrol show job -o` while EpilogSlurmctld runs (captured on the one-node test Slurm 22.05.8):
# the job is COMPLETING and the controller has already let go of its nodes.
COMPLETING = ("JobId=42 JobName=probe-1 UserId=root(0) GroupId=root(0) JobState=COMPLETING Reason=NonZeroExitCode "
              "ExitCode=3:0 NodeList= BatchHost=vm NumNodes=1 NumCPUs=1 StdErr=/tmp/o-42.out StdOut=/tmp/o-42.out")


def test_a_completing_job_takes_its_nodes_from_the_epilog_environment():
    calls = []

    def runner(argv):
        calls.append(argv[0])
        return (0, COMPLETING, "") if argv[0] == "scontrol" else (1, "", "sacct: error: accounting disabled")

    env = {"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_SCRIPT_CONTEXT": "epilog_slurmctld"}
    info = SlurmResolver(runner, env=env).resolve("42")
    assert info.nodes == ["gpu07", "gpu08"] and info.state == "COMPLETING" and info.uid == 0
    assert info.stderr == "/tmp/o-42.out" and info.source == "environment+scontrol"
    # another job's environment (diagnosing job 41 from inside job 42's epilog) is not used
    assert SlurmResolver(runner, env={**env, "SLURM_JOB_ID": "41"}).resolve("42").nodes == []
    # an array task is named by its array job and task ids
    array_env = {"SLURM_JOB_ID": "1300", "SLURM_ARRAY_JOB_ID": "1234", "SLURM_ARRAY_TASK_ID": "5",
                 "SLURM_JOB_NODELIST": "gpu01"}
    assert SlurmResolver(runner, env=array_env).resolve("1234_5").nodes == ["gpu01"]


def test_a_completing_job_without_environment_asks_accounting():
    def runner(argv):
        if argv[0] == "scontrol":
            return 0, COMPLETING, ""
        return 0, "42|COMPLETING|3:0|gpu[07-08]|/tmp/o-42.out|/tmp/o-42.out|0\n", ""

    info = SlurmResolver(runner, env={}).resolve("42")
    assert info.nodes == ["gpu07", "gpu08"] and info.source == "scontrol+sacct"


def test_slurm_resolver_uses_scontrol_then_sacct():
    calls = []

    def runner(argv):
        calls.append(list(argv))
        if argv[0] == "scontrol":
            return 1, "", "slurm_load_jobs error: Invalid job id specified"
        return 0, "239024|COMPLETED|0:0|galvani-cn[001-002]|/home/u/slurm-239024.out|/home/u/slurm-239024.out\n", ""

    info = SlurmResolver(runner).resolve("job-239024")
    assert calls[0] == ["scontrol", "show", "job", "239024"] and calls[1][0] == "sacct"
    assert info.nodes == ["galvani-cn001", "galvani-cn002"] and info.stdout == "/home/u/slurm-239024.out"


def test_a_controller_that_does_not_answer_is_not_an_unknown_job():
    # Slurm's own texts when slurmctld and slurmdbd cannot be reached
    def runner(argv):
        if argv[0] == "scontrol":
            return 1, "", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
        return 1, "", "sacct: error: Problem talking to the database: Connection refused"

    with pytest.raises(ResolveError) as err:
        SlurmResolver(runner).resolve("123")
    assert "did not answer" in str(err.value) and "scontrol ping" in str(err.value)
    assert "does not know job" not in str(err.value)


def test_a_huge_range_is_refused_before_it_is_built():
    import time
    import tracemalloc

    tracemalloc.start()
    started = time.perf_counter()
    for expr in ("gpu[1-100000000]", "gpu[1-60000],cpu[1-60000]", "a[1-1000]b[1-1000]"):
        with pytest.raises(ResolveError, match="more than 100000 nodes"):
            expand_hostlist(expr)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 50 * 1024 * 1024 and time.perf_counter() - started < 5
    assert len(expand_hostlist("gpu[1-100000]")) == 100_000


def test_unknown_job_is_a_clear_error():
    def runner(argv):
        return (1, "", "slurm_load_jobs error: Invalid job id specified") if argv[0] == "scontrol" else (0, "", "")

    with pytest.raises(ResolveError, match="does not know job 42.*--nodes"):
        SlurmResolver(runner).resolve("42")


def test_no_slurm_here():
    with pytest.raises(ResolveError, match="scontrol is not installed"):
        SlurmResolver(lambda argv: (127, "", "not found")).resolve("42")


def test_inventory(tmp_path):
    inv = tmp_path / "inventory.yaml"
    inv.write_text("llm-pretrain:\n  nodes: gpu[01-02]\n  ssh: {user: train, port: 2222}\n"
                   "lab: [box1, box2]\n")
    targets = load_inventory(inv)
    assert targets["llm-pretrain"].nodes == ["gpu01", "gpu02"] and targets["llm-pretrain"].ssh["port"] == 2222
    assert targets["lab"].nodes == ["box1", "box2"]
    inv.write_text("bad:\n  ssh: {}\n")
    with pytest.raises(ResolveError, match="needs 'nodes'"):
        load_inventory(inv)
    inv.write_text("x: [unclosed\n")
    with pytest.raises(ResolveError, match=r"inventory.yaml:\d+: the inventory is not valid YAML"):
        load_inventory(inv)


@pytest.mark.parametrize("text, reason", [
    ("llm: {nodes: 5}\n", "'nodes' must be a hostlist such as gpu\\[01-08\\] or a list of node names"),
    ("llm: {nodes: null}\n", "'nodes' must be a hostlist"),
    ("llm: {nodes: [{a: 1}]}\n", "'nodes' must be a hostlist"),
    ("llm: {nodes: gpu01, ssh: {port: '22; touch /tmp/x'}}\n", "ssh.port must be a port number such as 2222"),
    ("llm: {nodes: gpu01, ssh: {port: 70000}}\n", "ssh.port 70000 is not a port number"),
    ("llm: {nodes: gpu01, ssh: {user: [root]}}\n", "ssh.user must be a user name"),
    ("llm: {nodes: gpu01, ssh: [user]}\n", "'ssh' must be a mapping"),
    ("llm: {nodes: gpu01, log: [a, b]}\n", "'log' must be the path of the job's log file"),
    ("llm: " + "[" * 50_000 + "]" * 50_000 + "\n", "nested too deeply"),
])
def test_inventory_values_of_the_wrong_type_are_named(tmp_path, text, reason):
    inv = tmp_path / "inventory.yaml"
    inv.write_text(text)
    with pytest.raises(ResolveError, match=reason):
        load_inventory(inv)
