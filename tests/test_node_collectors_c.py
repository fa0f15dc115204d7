"""Node evidence, part C (issue 14): every common variant of each command's output, every field a
parser reads in its finding, parser notes folded into the reply's warnings, and the healthy-node
rules (collectors/healthy.py) on real captures (tests/fixtures/<collector>/, sources in each
folder's SOURCES.jsonl)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collectors import healthy
from collectors.bundle import Bundle, NodeOutput
from collectors.findings import KINDS, Finding
from collectors.node import _text
from collectors.registry import collectors

FIX = Path(__file__).resolve().parent / "fixtures"


def text(collector: str, name: str) -> str:
    return (FIX / collector / name).read_text(encoding="utf-8")


def facts(collector: str, name: str) -> dict:
    for line in (FIX / collector / "SOURCES.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row["file"] == f"{collector}/{name}":
            return row["facts"]
    raise KeyError(f"{collector}/{name} has no row in SOURCES.jsonl")


def parse(collector: str, body: str) -> tuple[list[Finding], list[str]]:
    findings, unparsed = collectors()[collector].parse(body)
    for f in findings:
        assert f.kind in KINDS and set(f.attrs) <= set(KINDS[f.kind]), (f.kind, set(f.attrs) - set(KINDS[f.kind]))
    return findings, unparsed


def of(findings: list[Finding], kind: str) -> list[Finding]:
    return [f for f in findings if f.kind == kind]


def bundle(nodes: dict[str, dict[str, str]]) -> Bundle:
    """An in-memory bundle: node -> {collector: output}, as a replay reads it."""
    return Bundle(FIX, {"job": None}, {n: NodeOutput(n, "ok", "", dict(outs), {}) for n, outs in nodes.items()}, [])


# --------------------------------------------------------------------------------------------
# Pasted text: prompts, other commands, elisions
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("line, own, is_command", [
    ("$ df -h", ("df",), True),
    ("[root@gpu01 ~]# ibstat", ("ibstat",), True),
    ("~$ ibstat mlx5_ib0", ("ibstat",), True),
    ("[root@nixos:~]# echo \"test\" > test.txt", ("df",), True),
    ("docker run --rm -it alpine df -h", ("df",), True),
    ("# Port counters: Lid 10 port 1", ("perfquery",), False),
    ("python invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0", ("dmesg",), False),
    ("1: lo: <LOOPBACK> mtu 65536 qdisc noop state DOWN", ("ip",), False),
])
def test_prompt_and_command_lines(line, own, is_command):
    assert (_text.command_of(line, own) is not None) is is_command


def test_lines_drop_paste_noise_and_keep_numbers():
    body = "```\n$ df -h\nFilesystem Size Used Avail Use% Mounted on\n[...]\n# echo x > f\nbash: f: No space\n$ df -i\nrow\n```\n"
    assert list(_text.lines(body, ("df",))) == [(3, "Filesystem Size Used Avail Use% Mounted on"), (8, "row")]


# --------------------------------------------------------------------------------------------
# nvidia-smi topo -m
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["03.txt", "04.txt", "05.txt"])
def test_topo_rows_without_their_header(name):
    want = facts("nvidia-smi-topo", name)
    rows = text("nvidia-smi-topo", name).splitlines()
    start = next(i for i, r in enumerate(rows) if r.startswith("GPU0"))
    full, _ = parse("nvidia-smi-topo", "\n".join(rows))
    bare, unparsed = parse("nvidia-smi-topo", "\n".join(rows[start:]))
    assert unparsed == []
    (topo,) = of(bare, "gpu-topology")
    assert topo.attrs["header"] is False and (topo.attrs["gpus"], topo.attrs["nics"]) == (want["gpus"], want["nics"])
    assert topo.attrs["nvlink"] == want["nvlink"] and topo.attrs["nvlink_links"] == int(want["nvlink"][2:])

    def nearest(findings):
        return {f.attrs["gpu"]: (f.attrs["nics"], f.attrs["link"], f.attrs.get("numa")) for f in of(findings, "gpu-nic-affinity")}

    assert nearest(bare) == nearest(full) and nearest(bare)


def test_topo_counts_and_nvlink_width_per_gpu():
    want = facts("nvidia-smi-topo", "03.txt")
    findings, _ = parse("nvidia-smi-topo", text("nvidia-smi-topo", "03.txt"))
    (topo,) = of(findings, "gpu-topology")
    assert topo.attrs["header"] is True and topo.attrs["gpus"] == want["gpus"] and topo.attrs["nics"] == want["nics"]
    rows = {f.attrs["gpu"]: f.attrs for f in of(findings, "gpu-affinity")}
    assert sorted(rows) == list(range(want["gpus"]))
    assert all(r["nvlink"] == want["nvlink"] and r["nvlink_peers"] == want["gpus"] - 1 for r in rows.values())
    assert rows[0]["cpu_affinity"] == want["cpu_affinity"]["GPU0-3"] and rows[7]["numa"] == 1


# --------------------------------------------------------------------------------------------
# Healthy-node rules
# --------------------------------------------------------------------------------------------

# Real captures of healthy nodes (or of nothing a job could die of), per collector.
HEALTHY = [
    ("df", "06.txt"), ("ethtool-S", "01.txt"), ("free", "01.txt"), ("free", "02.txt"), ("free", "03.txt"),
    ("ibstat", "03.txt"), ("ibstat", "04.txt"), ("ibstat", "07.txt"),
    ("iostat", "02.txt"), ("ip-link", "02.txt"), ("nvidia-smi", "01.txt"), ("nvidia-smi-q", "01.txt"),
    ("nvidia-smi-query", "01.txt"), ("nvidia-smi-topo", "01.txt"), ("nvidia-smi-topo", "03.txt"),
    ("perfquery", "01.txt"),
]


@pytest.mark.parametrize("collector, name", HEALTHY)
def test_a_healthy_capture_alone_produces_no_cause(engine, collector, name):
    d = engine.diagnose_bundle(bundle({"gpu01": {collector: text(collector, name)}}))
    assert d.causes == [], [(c.id, [e.line for e in c.evidence]) for c in d.causes]
    assert not any("not understood" in w for w in d.warnings), d.warnings


def test_healthy_nodes_side_by_side_produce_no_cause(engine):
    # every healthy capture of a collector on its own node, so the nodes are compared too
    nodes: dict[str, dict[str, str]] = {}
    for collector, name in HEALTHY:
        slot = next(i for i in range(len(HEALTHY)) if collector not in nodes.setdefault(f"gpu{i:02d}", {}))
        nodes[f"gpu{slot:02d}"][collector] = text(collector, name)
    d = engine.diagnose_bundle(bundle(nodes))
    assert d.causes == [], [(c.id, [(e.node, e.line) for e in c.evidence]) for c in d.causes]
    assert all(f.normal for f in d.findings if f.kind == "node-mismatch" and f.attrs["what"] == "ib-port")


def test_disabled_and_spare_ethernet_ports_are_normal():
    findings, _ = parse("ibstat", text("ibstat", "03.txt"))
    healthy.mark(findings)
    down = {f.attrs["device"]: f.normal for f in findings if f.attrs["state"] != "Active"}
    assert sorted(down) == ["mlx5_2", "mlx5_7", "mlx5_8"] and all(down.values())
    assert not any(f.normal for f in findings if f.attrs["state"] == "Active")


def test_an_ethernet_port_on_a_roce_host_is_not_excused():
    # ibstat/02: every port is Ethernet (RoCE); mlx5_11 polls (no link) and is the fault, mlx5_5 is disabled
    findings, _ = parse("ibstat", text("ibstat", "02.txt"))
    healthy.mark(findings)
    normal = {f.attrs["device"]: bool(f.normal) for f in findings if f.attrs["state"] != "Active"}
    assert normal == {"mlx5_11": False, "mlx5_5": True}


def test_polling_ib_port_is_cited_not_the_healthy_node(engine):
    """Node A: InfiniBand ports Active and three admin-disabled Ethernet ports; node B: an
    InfiniBand port Down/Polling.  Only B is the sick node."""
    assert facts("ibstat", "08.txt")["down_physical_state"] == {"mlx5_10/1": "Polling"}
    d = engine.diagnose_bundle(bundle({"gpu-a": {"ibstat": text("ibstat", "03.txt")},
                                       "gpu-b": {"ibstat": text("ibstat", "08.txt")}}))
    assert d.causes and d.causes[0].id == "nccl-timeout-nic-link-fault"
    for cause in d.causes:
        assert {e.node for e in cause.evidence} == {"gpu-b"}, (cause.id, [(e.node, e.line) for e in cause.evidence])
    odd = {f.node: f.normal for f in d.findings if f.kind == "node-mismatch"}
    assert odd["gpu-b"] is None and odd.get("gpu-a")  # A differs only by a port that is Active


def test_read_only_image_and_idle_gpu_are_normal():
    disk = Finding("disk-usage", {"mount": "/snap/core/8689", "device": "/dev/loop0", "used_pct": 100})
    squash = Finding("disk-usage", {"mount": "/opt/images/base", "device": "/dev/sdb", "fstype": "squashfs",
                                    "used_pct": 100})
    root = Finding("disk-usage", {"mount": "/", "device": "/dev/sda2", "fstype": "ext4", "used_pct": 100})
    idle = Finding("gpu", {"index": 0, "memory_used_mib": 1, "processes": 0})
    busy = Finding("gpu", {"index": 1, "memory_used_mib": 1, "processes": 2})
    healthy.mark([disk, squash, root, idle, busy])
    assert disk.normal and squash.normal and idle.normal
    assert root.normal is None and busy.normal is None


def test_normal_findings_support_no_cause_but_still_rule_out(engine):
    full = Finding("disk-usage", {"mount": "/snap/x", "device": "/dev/loop3", "used_pct": 100}, "/dev/loop3 100% /snap/x",
                   1, node="gpu01", source="df")
    healthy.mark([full])
    entry = engine.matcher.entry("ckpt-disk-full")
    rule = next(r for r in entry.findings if r["kind"] == "disk-usage")
    from knowledge.match import rule_matches

    assert rule_matches(rule, full)  # the rule alone would take it ...
    causes = engine.matcher.match([], [full])
    assert not any(c.id == "ckpt-disk-full" for c in causes)  # ... the healthy rule keeps it out


# --------------------------------------------------------------------------------------------
# Parser notes reach the reply's warnings, one folded line per collector
# --------------------------------------------------------------------------------------------

def test_lines_not_understood_fold_into_one_warning_per_collector(engine):
    df = text("df", "06.txt")
    nodes = {f"gpu{i:02d}": {"df": df + f"\nsomething odd {i}\nand more {i}\n", "ibstat": text("ibstat", "04.txt")}
             for i in range(8)}
    d = engine.diagnose_bundle(bundle(nodes))
    lines = [w for w in d.warnings if w.startswith("df:")]
    assert len(lines) == 1 and "16 lines not understood" in lines[0] and "'something odd 0'" in lines[0]
    assert "gpu00, gpu01" in lines[0] and "and 2 more" in lines[0]
    # ibstat's own error is what it could not check, said once for every node, never "not understood"
    (ib,) = [w for w in d.warnings if w.startswith("ibstat:")]
    assert "mlx5_8" in ib and "not understood" not in ib


# --------------------------------------------------------------------------------------------
# df: -kPT (POSIX 1K blocks with a Type column), header-less rows, snap images
# --------------------------------------------------------------------------------------------

def test_df_kpt_type_column_every_field():
    want = facts("df", "07.txt")
    findings, unparsed = parse("df", text("df", "07.txt"))
    assert unparsed == []
    disks = {f.attrs["mount"]: f.attrs for f in of(findings, "disk-usage")}
    assert sorted(disks) == ["/", "/boot/efi"]  # tmpfs /run, /run/lock, /run/user/* are pseudo filesystems
    root = want["root"]
    assert disks["/"] == {"mount": "/", "device": root["device"], "fstype": root["fstype"], "used_pct": root["use_pct"],
                          "inodes": False, "size_bytes": root["size_kb"] * 1024, "used_bytes": root["used_kb"] * 1024,
                          "avail_bytes": root["avail_kb"] * 1024}
    assert disks["/boot/efi"]["fstype"] == want["boot_efi"]["fstype"]
    (shm,) = of(findings, "shm-usage")
    assert shm.attrs["size_bytes"] == want["dev_shm"]["size_kb"] * 1024 and shm.attrs["fstype"] == "tmpfs"
    assert shm.attrs["used_bytes"] == want["dev_shm"]["used_kb"] * 1024 and shm.attrs["docker_default"] is False


def test_df_rows_without_header_are_1k_blocks():
    rows = text("df", "07.txt").splitlines()[1:]
    findings, unparsed = parse("df", "\n".join(rows))
    assert unparsed == []
    root = next(f for f in of(findings, "disk-usage") if f.attrs["mount"] == "/")
    assert root.attrs["fstype"] == "ext4" and root.attrs["size_bytes"] == facts("df", "07.txt")["root"]["size_kb"] * 1024


def test_df_snap_images_under_a_glued_prompt_are_normal():
    want = facts("df", "08.txt")
    findings, unparsed = parse("df", text("df", "08.txt"))
    assert unparsed == []  # '#df -h' is the prompt and the command, not a row
    healthy.mark(findings)
    full = {f.attrs["mount"]: bool(f.normal) for f in of(findings, "disk-usage") if f.attrs["used_pct"] == 100}
    assert full == {m: True for m in want["always_full_ignore"]}


# --------------------------------------------------------------------------------------------
# nvidia-smi: --query-gpu without an index column; every cell of the table in attrs
# --------------------------------------------------------------------------------------------

def test_query_without_index_column_numbers_gpus_in_row_order():
    # the real nvidia_gpu_exporter capture (02.txt) with its index column taken out
    import csv
    import io

    rows = [r for r in csv.reader(io.StringIO(text("nvidia-smi-query", "02.txt")), skipinitialspace=True) if r]
    drop = [c.strip() for c in rows[0]].index("index")
    body = "\n".join(", ".join(c for i, c in enumerate(r) if i != drop) for r in rows)
    findings, unparsed = parse("nvidia-smi-query", body)
    assert unparsed == []
    row0 = facts("nvidia-smi-query", "02.txt")["row0"]
    gpus = {f.attrs["index"]: f.attrs for f in of(findings, "gpu")}
    assert sorted(gpus) == [0, 1]  # row 1 is the test author's placeholder; only its order is used
    g = gpus[row0["index"]]
    assert (g["name"], g["bus_id"], g["memory_used_mib"]) == (row0["name"], row0["pci_bus_id"], 575)
    assert g["fan_pct"] == 38 and g["compute_cap"] == row0["compute_cap"] and g["driver_model"] == "WDDM"
    assert "serial" not in g  # '[N/A]' is missing, never a value


def test_table_reads_every_cell_of_the_gpu_rows():
    findings, unparsed = parse("nvidia-smi", text("nvidia-smi", "01.txt"))
    assert unparsed == []
    g = of(findings, "gpu")[0].attrs
    assert (g["pstate"], g["power_w"], g["power_limit_w"], g["persistence_mode"], g["compute_mode"]) == (
        "P0", 72, 700, "On", "Default")
    assert "fan_pct" not in g  # N/A on an SXM board
    healthy.mark(findings)
    assert all(f.normal for f in of(findings, "gpu"))  # 1 MiB, no process: idle


# --------------------------------------------------------------------------------------------
# ibstatus beside ibstat
# --------------------------------------------------------------------------------------------

def test_ibstatus_every_port_and_field():
    want = facts("ibstatus", "02.txt")
    findings, unparsed = parse("ibstatus", text("ibstatus", "02.txt"))
    assert unparsed == []
    ports = {f"{f.attrs['device']}/{f.attrs['port']}": f.attrs for f in findings}
    assert len(ports) == want["ports_total"] and not [p for p, a in ports.items() if a["state"] != "Active"]
    for port in want["ib_ports_200"]:
        a = ports[port]
        assert (a["rate"], a["width"], a["speed"], a["link_layer"], a["phys_state"]) == (200, "4X", "HDR", "InfiniBand",
                                                                                         "LinkUp")
    (eth,) = want["ethernet_ports"]
    assert ports[eth]["link_layer"] == "Ethernet" and ports[eth]["rate"] == 40 and "gid" not in ports[eth]
    assert ports["mlx5_0/1"]["base_lid"] == 0x33bf and ports["mlx5_0/1"]["sm_lid"] == 1


def test_ibstatus_without_indentation_after_its_prompt():
    want = facts("ibstatus", "01.txt")["ports"]["mlx5_an0/1"]
    findings, unparsed = parse("ibstatus", text("ibstatus", "01.txt"))
    assert unparsed == []
    (port,) = findings
    assert port.attrs["state"] == "Active" and want["state"].endswith("ACTIVE")
    assert port.attrs["phys_state"] == "LinkUp" and want["phys"].endswith("LinkUp")
    assert port.line == "state: 4: ACTIVE"


def test_ibstatus_states_read_like_ibstat():
    # 08.txt's Polling port, as ibstatus prints a port in that state
    body = ("Infiniband device 'mlx5_10' port 1 status:\n\tdefault gid:\t unknown\n\tbase lid:\t 0x364\n"
            "\tsm lid:\t\t 0x14e\n\tstate:\t\t 1: DOWN\n\tphys state:\t 2: Polling\n\trate:\t\t 10 Gb/sec (4X SDR)\n"
            "\tlink_layer:\t InfiniBand\n")
    (ibstatus_port,), _ = parse("ibstatus", body)
    (ibstat_port,), _ = parse("ibstat", text("ibstat", "08.txt"))
    for key in ("device", "port", "state", "phys_state", "rate", "link_layer", "base_lid", "sm_lid"):
        assert ibstatus_port.attrs[key] == ibstat_port.attrs[key], key


def test_a_port_both_tools_print_is_one_port(engine):
    d = engine.diagnose_bundle(bundle({"gpu01": {"ibstat": text("ibstat", "04.txt"),
                                                 "ibstatus": text("ibstatus", "02.txt")}}))
    ports = [(f.attrs["device"], f.source) for f in d.findings if f.kind == "ib-port"]
    assert ports.count(("mlx5_7", "ibstat")) == 1 and ("mlx5_7", "ibstatus") not in ports
    assert ("mlx5_8", "ibstatus") in ports  # the device ibstat could not read (ibpanic) comes from ibstatus


# --------------------------------------------------------------------------------------------
# Every column a parser reads: free, iostat (avg-cpu), perfquery (traffic counters)
# --------------------------------------------------------------------------------------------

def test_free_every_column():
    want = facts("free", "03.txt")
    (mem,), unparsed = parse("free", text("free", "03.txt"))
    assert unparsed == []
    m, s = want["mem"], want["swap"]
    assert (mem.attrs["total_mib"], mem.attrs["used_mib"], mem.attrs["free_mib"], mem.attrs["shared_mib"],
            mem.attrs["buff_cache_mib"], mem.attrs["available_mib"]) == (
        m["total"], m["used"], m["free"], m["shared"], m["buff_cache"], m["available"])
    assert (mem.attrs["swap_total_mib"], mem.attrs["swap_used_mib"], mem.attrs["swap_free_mib"]) == (
        s["total"], s["used"], s["free"])


@pytest.mark.parametrize("name", ["02.txt", "03.txt"])
def test_iostat_avg_cpu_and_iowait(name):
    want = facts("iostat", name)["avg_cpu"]
    findings, unparsed = parse("iostat", text("iostat", name))
    assert unparsed == []
    (cpu,) = of(findings, "host-cpu")
    assert {k: cpu.attrs[f"{k}_pct"] for k in want} == want


def test_iostat_device_columns_with_units():
    findings, _ = parse("iostat", text("iostat", "03.txt"))
    nvme = {f.attrs["device"]: f.attrs for f in of(findings, "disk-io")}["nvme6n1"]
    assert nvme["util_pct"] == facts("iostat", "03.txt")["max_util"]["nvme6n1"]
    assert "read_mb_per_s" in nvme and "read_kb_per_s" not in nvme  # iostat -m: MB/s, named so


def test_a_disabled_infiniband_port_is_not_excused():
    # ibstat/05: an HDR node with mlx5_2 InfiniBand Down/Disabled beside an Active port: one rail fewer
    findings, _ = parse("ibstat", text("ibstat", "05.txt"))
    healthy.mark(findings)
    assert [(f.attrs["device"], f.normal) for f in findings if f.attrs["state"] != "Active"] == [("mlx5_2", None)]


# --------------------------------------------------------------------------------------------
# kernel-log: the GPU's UUID on its Xid, a three-line "fallen off the bus", the OOM killer's context
# --------------------------------------------------------------------------------------------

def test_xid_carries_the_gpu_uuid_of_its_pci_id():
    want = facts("kernel-log", "11.txt")
    findings, unparsed = parse("kernel-log", text("kernel-log", "11.txt"))
    assert unparsed == []  # the poster's '...' is an elision
    (xid,) = of(findings, "xid")
    assert (xid.attrs["code"], xid.attrs["pci"], xid.attrs["uuid"]) == (79, want["pci"], want["gpu_uuid"])
    assert {f.attrs["uuid"] for f in of(findings, "gpu-lost")} == {want["gpu_uuid"]}


def test_three_line_fallen_off_the_bus_keeps_the_pci_id_of_its_first_line():
    want = facts("kernel-log", "16.txt")
    findings, unparsed = parse("kernel-log", text("kernel-log", "16.txt"))
    assert unparsed == []
    (lost,) = of(findings, "gpu-lost")
    assert lost.attrs["pci"] == want["lost_pci"] and lost.line_no == 3
    assert of(findings, "xid") == [] and of(findings, "version")[0].attrs["value"] == want["driver"]


@pytest.mark.parametrize("name", ["04.txt", "13.txt"])
def test_oom_killer_uid_cgroup_and_scope(name):
    want = facts("kernel-log", name)
    findings, _ = parse("kernel-log", text("kernel-log", name))
    (kill,) = of(findings, "oom-killer")
    (victim,) = want["oom_killed"]
    assert (kill.attrs["pid"], kill.attrs["uid"]) == (victim["pid"], victim["uid"])
    assert kill.attrs["scope"] == ("global" if want["global_oom"] else "cgroup")
    assert kill.attrs["task_memcg"].startswith(f"/user.slice/user-{victim['uid']}.slice")
    assert kill.attrs["total_vm_kb"] > kill.attrs["anon_rss_kb"] > 0


def test_ibdev2netdev_maps_ports_to_interfaces_and_blames_nothing():
    """A real H100 node (ibdev2netdev | column -t, with the poster's # notes): 12 ports with their
    interfaces; the IPoIB interfaces read Down while the fabric works, so no finding is a fault."""
    from collectors import healthy
    from collectors.node.ibdev2netdev import parse

    text = (Path(__file__).resolve().parent / "fixtures" / "ibdev2netdev" / "01.txt").read_text()
    findings, notes = parse(text)
    assert not notes and len(findings) == 12
    first = findings[0].attrs
    assert first == {"device": "mlx5_0", "port": 1, "netdev": "ibp26s0", "state": "Down"}
    assert [f.attrs["netdev"] for f in findings if f.attrs["state"] == "Up"] == ["enp27s0f0np0", "enp157s0f0np0"]
    assert all(f.normal for f in healthy.mark(findings))
