"""Node collectors on real captured output: kernel-log, ibstat, ip-link, ethtool-S, perfquery, df,
free, ulimit-l.

Fixtures are copies of shared/fixtures/real/<command>/NN.txt under tests/fixtures/<command>/, each
folder with the SOURCES.jsonl rows that say where the output came from and which facts a parser
must extract; the tests below read those facts and check them.
"""

from __future__ import annotations

import json
import os

import pytest

from collectors import healthy, registry
from collectors.findings import KINDS, Finding
from collectors.node import df, ethtool_s, free, ibstat, ip_link, kernel_log, perfquery, ulimit_l

FIX = os.path.join(os.path.dirname(__file__), "fixtures")

PARSERS = {
    "kernel-log": kernel_log, "ibstat": ibstat, "ip-link": ip_link, "ethtool-S": ethtool_s,
    "perfquery": perfquery, "df": df, "free": free, "ulimit-l": ulimit_l,
}


def sources(command: str) -> dict[str, dict]:
    """NN.txt -> its SOURCES.jsonl row."""
    out = {}
    with open(os.path.join(FIX, command, "SOURCES.jsonl"), encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                out[os.path.basename(row["file"])] = row
    return out


def run(command: str, name: str) -> tuple[list[Finding], list[str]]:
    with open(os.path.join(FIX, command, name), encoding="utf-8") as fh:
        return PARSERS[command].parse(fh.read())


def of(findings: list[Finding], kind: str) -> list[Finding]:
    return [f for f in findings if f.kind == kind]


def fixture_cases():
    for command in PARSERS:
        folder = os.path.join(FIX, command)
        if os.path.isdir(folder):
            for name in sorted(os.listdir(folder)):
                if name.endswith(".txt"):
                    yield command, name


# ---- the contract every parser keeps ---------------------------------------------------------
@pytest.mark.parametrize("command, name", list(fixture_cases()))
def test_findings_follow_kinds_and_carry_their_line(command, name):
    findings, unparsed = run(command, name)
    with open(os.path.join(FIX, command, name), encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    for f in findings:
        assert f.kind in KINDS, f.kind
        assert set(f.attrs) <= set(KINDS[f.kind]), (f.kind, set(f.attrs) - set(KINDS[f.kind]))
        assert f.source == command and f.node is None
        assert f.line_no and f.line
        raw = lines[f.line_no - 1].strip()
        assert f.line == raw or f.line.endswith(raw)  # a df row wrapped by df is joined with its device
    assert all(isinstance(u, str) for u in unparsed)


def test_every_fixture_has_its_source_row():
    for command in PARSERS:
        if os.path.isdir(os.path.join(FIX, command)):
            files = {n for c, n in fixture_cases() if c == command}
            assert files == set(sources(command)), command


def test_registry_lists_them():
    got = registry.collectors()
    for command, module in PARSERS.items():
        c = got[command]
        assert c is module.COLLECTOR and c.name == command and c.parse is module.parse
        assert c.command and c.description and c.timeout > 0


@pytest.mark.parametrize("command", list(PARSERS))
def test_empty_input_is_could_not_check(command):
    for text in ("", "\n\n  \n"):
        findings, unparsed = PARSERS[command].parse(text)
        assert findings == [] and unparsed, command  # a note, so that it never reads as healthy


GARBAGE = "\x00\x01 lorem ipsum dolor\n<html><body>502 Bad Gateway</body></html>\n{'a': [1, 2]}\n" + "é" * 50


@pytest.mark.parametrize("command", list(PARSERS))
def test_garbage_input(command):
    findings, unparsed = PARSERS[command].parse(GARBAGE)
    assert findings == []
    assert any("lorem ipsum" in u for u in unparsed), (command, unparsed)
    assert any("502 Bad Gateway" in u for u in unparsed), (command, unparsed)


# ---- kernel-log ------------------------------------------------------------------------------
KERNEL = sources("kernel-log")


@pytest.mark.parametrize("name", sorted(n for n, row in KERNEL.items() if "xid" in row["facts"]))
def test_kernel_every_xid_line(name):
    facts = KERNEL[name]["facts"]
    findings, _ = run("kernel-log", name)
    xids = of(findings, "xid")
    codes = [x.attrs["code"] for x in xids]
    count = facts.get("xid_event_count") or facts.get("xid_lines")
    if count:  # 06, 07: the facts list each code once and count the lines
        assert list(dict.fromkeys(codes)) == facts["xid"] and len(codes) == count
    else:
        assert codes == facts["xid"]
    pci = facts.get("pci")
    if isinstance(pci, str) and "xid119_pci" not in facts:
        assert {x.attrs["pci"] for x in xids} == {pci}
    elif isinstance(pci, list):
        assert [x.attrs["pci"] for x in xids] == pci
    if isinstance(facts.get("pcis"), dict):
        for code, p in facts["pcis"].items():
            assert {x.attrs["pci"] for x in xids if x.attrs["code"] == int(code)} == {p}
    elif isinstance(facts.get("pcis"), list):
        assert {x.attrs["pci"] for x in xids} == set(facts["pcis"])
    if "xid119_pci" in facts:
        assert {x.attrs["pci"] for x in xids if x.attrs["code"] == 119} == {facts["xid119_pci"]}
        assert {x.attrs["pci"] for x in xids if x.attrs["code"] != 119} == {pci}
    assert all("NVRM: Xid" in x.line for x in xids)


@pytest.mark.parametrize("name, pid, process", [
    ("03.txt", 13332, "cuda_plot_k32_v"), ("06.txt", 1797828, "pt_main_thread"), ("09.txt", 13705, "UnrealEditor"),
])
def test_kernel_xid_pid_and_process(name, pid, process):
    findings, _ = run("kernel-log", name)
    assert any(x.attrs["pid"] == pid and x.attrs["process"] == process for x in of(findings, "xid"))


def test_kernel_xid_unknown_pid_and_legacy_format():
    findings, _ = run("kernel-log", "01.txt")
    x94 = [x for x in of(findings, "xid") if x.attrs["code"] == 94]
    assert x94[0].attrs["pid"] is None and x94[0].attrs["process"] is None
    assert x94[0].ts == "2024-08-09T13:32:56"
    legacy, unparsed = run("kernel-log", "02.txt")  # 2015 driver: no pid, "Channel ID" / engmask
    assert [x.attrs for x in legacy] == [{"code": 32, "pci": "0000:01:00", "pid": None, "process": None}] * 2 + [
        {"code": 31, "pci": "0000:01:00", "pid": None, "process": None}]
    assert unparsed == []


def test_kernel_07_processes():
    findings, _ = run("kernel-log", "07.txt")
    assert {x.attrs["process"] for x in of(findings, "xid")} == set(KERNEL["07.txt"]["facts"]["processes"])


def test_kernel_caused_by():
    findings, _ = run("kernel-log", "10.txt")
    facts = KERNEL["10.txt"]["facts"]
    for x in of(findings, "xid"):
        assert x.attrs["caused_by"] == facts["caused_by_xid"][x.attrs["pci"]]
        assert x.attrs["process"] == facts["process"]


@pytest.mark.parametrize("name", ["01.txt", "09.txt"])
def test_kernel_driver_version(name):
    findings, _ = run("kernel-log", name)
    (v,) = of(findings, "version")
    assert v.attrs == {"component": "driver", "value": KERNEL[name]["facts"]["driver_version"]}


def test_kernel_fallen_off_bus():
    findings, _ = run("kernel-log", "11.txt")
    lost = of(findings, "gpu-lost")
    assert KERNEL["11.txt"]["facts"]["fallen_off_bus"]
    assert lost and {g.attrs["pci"] for g in lost} == {KERNEL["11.txt"]["facts"]["pci"]}


def test_kernel_nvlink5_xids_are_nvlink_errors():
    findings, _ = run("kernel-log", "05.txt")
    assert [n.line_no for n in of(findings, "nvlink-error")] == [1, 2, 3]
    # Xid 45 "caused by previous Xid 149" is a channel teardown, not an NVLink error itself
    findings, _ = run("kernel-log", "10.txt")
    assert of(findings, "nvlink-error") == []


@pytest.mark.parametrize("name", sorted(n for n, row in KERNEL.items() if "oom_killed" in row["facts"]))
def test_kernel_oom_killer(name):
    findings, _ = run("kernel-log", name)
    want = [{"pid": k["pid"], "process": k["comm"], "anon_rss_kb": k["anon_rss_kb"]}
            for k in KERNEL[name]["facts"]["oom_killed"]]
    got = [{key: k.attrs[key] for key in ("pid", "process", "anon_rss_kb")} for k in of(findings, "oom-killer")]
    assert got == want


def test_kernel_iso_timestamps_kept():
    findings, _ = run("kernel-log", "04.txt")
    (k,) = of(findings, "oom-killer")
    assert k.ts == "2024-04-29T14:55:41.679700+02:00" and k.line_no == 5


# Lines as other kernels and drivers print them (journalctl short-iso, AER on 5.x and 6.x kernels,
# cgroup and pre-4.x OOM killers, NVSwitch SXid, the open module's banner on arm64).
KERNEL_VARIANTS = [
    ("2024-03-01T10:00:00+0000 gpu07 kernel: pcieport 0000:00:03.0: AER: Corrected error received: 0000:3b:00.0",
     "pcie-error", {"severity": "corrected"}),
    ("[Fri Mar  1 10:00:00 2024] pcieport 0000:00:03.0: PCIe Bus Error: severity=Uncorrected (Fatal), "
     "type=Transaction Layer, (Requester ID)", "pcie-error", {"severity": "uncorrected"}),
    ("[  12.5] nvidia 0000:3b:00.0: AER: Uncorrectable (Non-Fatal) error message received from 0000:3b:00.0",
     "pcie-error", {"severity": "uncorrected"}),
    ("[ 100.1] nfs: server fs01.example not responding, still trying", "nfs-stall", {"server": "fs01.example"}),
    ("kernel: EXT4-fs error (device sda1): ext4_find_entry:1455: inode #2: comm ls: reading directory lblock 0",
     "io-error", {}),
    ("[ 5.0] blk_update_request: I/O error, dev sdc, sector 2048 op 0x0:(READ) flags 0x0 phys_seg 1 prio class 0",
     "io-error", {}),
    ("[ 5.0] Buffer I/O error on dev sdc, logical block 0, async page read", "io-error", {}),
    ("kernel: XFS (dm-3): metadata I/O error in \"xfs_trans_read_buf_map\" at daddr 0x2 len 1 error 5",
     "io-error", {}),
    ("[ 5.1] Memory cgroup out of memory: Killed process 4242 (python) total-vm:100kB, anon-rss:5000kB, "
     "file-rss:0kB", "oom-killer", {"pid": 4242, "process": "python", "anon_rss_kb": 5000, "total_vm_kb": 100,
                                    "file_rss_kb": 0, "scope": "cgroup"}),
    ("[ 5.2] Out of memory: Kill process 12 (java) score 950 or sacrifice child", "oom-killer",
     {"pid": 12, "process": "java", "scope": "global"}),
    ("[ 6.0] NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x26:0xffff:1096)", "gpu-lost", {"pci": "0000:3b:00"}),
    ("[ 6.0] NVRM: Xid (PCI:0000:3b:00): 74, pid=1, name=python, NVLink: fatal error detected on link 3", "xid",
     {"code": 74, "pci": "0000:3b:00", "pid": 1, "process": "python"}),
    ("[ 6.0] NVRM: Xid (PCI:0000:3b:00): 74, pid=1, name=python, NVLink: fatal error detected on link 3",
     "nvlink-error", {}),
    ("[ 6.0] nvidia-nvswitch2: SXid (PCI:0000:8b:00.0): 12028, Non-fatal, Link 30 egress non-posted PRIV error",
     "nvlink-error", {}),
    ("[ 7.0] NVRM: Xid (0000:02:00): 13, 0003 00000000 000090c0 00001b0c 00000000 00000000", "xid",
     {"code": 13, "pci": "0000:02:00", "pid": None, "process": None}),
    ("[ 0.0] NVRM: loading NVIDIA UNIX Open Kernel Module for aarch64  550.54.15  Release Build  "
     "(dvs-builder@U16)  Thu Feb 22 01:25:25 UTC 2024", "version", {"component": "driver", "value": "550.54.15"}),
]


@pytest.mark.parametrize("line, kind, attrs", KERNEL_VARIANTS)
def test_kernel_other_formats(line, kind, attrs):
    findings, unparsed = kernel_log.parse(line + "\n")
    got = of(findings, kind)
    assert got, (line, findings)
    assert {k: v for k, v in got[0].attrs.items() if k != "text"} == attrs
    assert got[0].line == line.strip() and got[0].line_no == 1 and unparsed == []


@pytest.mark.parametrize("line", [
    "[ 1.0] EXT4-fs (sda1): mounted filesystem with ordered data mode. Opts: errors=remount-ro",
    "[ 1.0] XFS (sdb1): Mounting V5 Filesystem",
    "[ 1.0] nfs: server fs01 OK",
    "[ 1.0] pcieport 0000:00:01.0: AER: enabled with IRQ 122",
    "[ 1.0] NVRM: GPU4 RPC history (CPU -> GSP):",
    "[ 1.0] oom_reaper: reaped process 1440763 (perl), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB",
])
def test_kernel_near_misses(line):
    findings, unparsed = kernel_log.parse(line)
    assert findings == [] and unparsed == []


def test_kernel_unreadable_and_unknown_xid_reported():
    text = ("dmesg: read kernel buffer failed: Operation not permitted\n"
            "-- No entries --\n"
            "[ 6.1] NVRM: Xid something new 12\n")
    findings, unparsed = kernel_log.parse(text)
    assert findings == []
    assert len(unparsed) == 3 and unparsed[2].startswith("Xid line in an unknown format")


# ---- ibstat ---------------------------------------------------------------------------------
IBSTAT = sources("ibstat")


def ports(findings):
    return {f"{p.attrs['device']}/{p.attrs['port']}": p.attrs for p in of(findings, "ib-port")}


@pytest.mark.parametrize("name", sorted(IBSTAT))
def test_ibstat_facts(name):
    facts = IBSTAT[name]["facts"]
    findings, unparsed = run("ibstat", name)
    got = ports(findings)
    down = sorted(k for k, a in got.items() if a["state"] != "Active")
    if "ports_down" in facts:
        assert down == sorted(facts["ports_down"])
    if "ports_not_active" in facts:
        assert down == sorted(facts["ports_not_active"])
    for key in ("ports_total", "ports_shown"):
        if key in facts:
            assert len(got) == facts[key]
    if "ports_parsed" in facts:
        assert sorted(got) == sorted(facts["ports_parsed"])
    for port, phys in facts.get("down_physical_state", {}).items():
        assert got[port]["phys_state"] == phys
    for key, rate in (("active_400", 400), ("active_100", 100), ("ib_ports_active_400", 400),
                      ("active_200_ethernet", 200)):
        for port in facts.get(key, []):
            assert got[port]["state"] == "Active" and got[port]["rate"] == rate
    for port, rate in {**facts.get("active", {}), **facts.get("rate", {})}.items():
        assert got[port]["rate"] == rate
    if facts.get("link_layer"):
        assert {a["link_layer"] for a in got.values()} == {facts["link_layer"]}
    if "active_200_ethernet" in facts:
        assert all(got[p]["link_layer"] == "Ethernet" for p in facts["active_200_ethernet"])
    if facts.get("down_link_layer"):
        assert {got[p]["link_layer"] for p in facts["ports_down"]} == {facts["down_link_layer"]}
    if "ib_ports_active_400" in facts:
        assert all(got[p]["link_layer"] == "InfiniBand" for p in facts["ib_ports_active_400"])
    if facts.get("error") == "ibpanic":
        assert any(u.startswith("ibpanic") and facts["failed_device"] in u for u in unparsed)
    else:
        assert not any("ibpanic" in u for u in unparsed)
    for port, want in facts.get("ports", {}).items():  # 01: no indentation at all
        assert (got[port]["state"], got[port]["phys_state"], got[port]["rate"]) == (
            want["state"], want["phys"], want["rate"])


def test_ibstat_down_port_evidence_is_its_state_line():
    findings, _ = run("ibstat", "05.txt")
    (down,) = [p for p in of(findings, "ib-port") if p.attrs["state"] == "Down"]
    assert down.line == "State: Down" and down.line_no == 27
    assert down.attrs == {"device": "mlx5_2", "port": 1, "state": "Down", "phys_state": "Disabled", "rate": 10,
                          "link_layer": "InfiniBand", "base_lid": 65535, "sm_lid": 0, "lmc": 0,
                          "port_guid": "0x0c42a1030017bb48"}


def test_ibstat_cut_block_keeps_what_it_has():
    findings, _ = run("ibstat", "06.txt")
    assert ports(findings)["mlx5_10/1"] == {"device": "mlx5_10", "port": 1, "state": "Down",
                                             "phys_state": "Disabled"}


def test_ibstat_other_forms():
    # Two-port ConnectX-3 (old infiniband-diags, space-indented, SDR-era fractional rate) and the
    # single-port form `ibstat mlx4_0 2` prints.
    text = ("CA 'mlx4_0'\n  CA type: MT4099\n  Number of ports: 2\n  Port 1:\n    State: Active\n"
            "    Physical state: LinkUp\n    Rate: 56\n    Link layer: InfiniBand\n  Port 2:\n    State: Down\n"
            "    Physical state: Polling\n    Rate: 2.5\n    Link layer: InfiniBand\n"
            "CA: 'mlx4_1'\nPort 1:\nState: Armed\nPhysical state: LinkUp\nRate: 40\n")
    findings, unparsed = ibstat.parse(text)
    got = ports(findings)
    assert unparsed == []
    assert got["mlx4_0/1"]["rate"] == 56 and got["mlx4_0/2"]["rate"] == 2.5
    assert got["mlx4_0/2"]["phys_state"] == "Polling" and got["mlx4_1/1"]["state"] == "Armed"


def test_ibstat_no_devices():
    findings, unparsed = ibstat.parse("ibpanic: [12] main: can't list IB device names: No such file or directory\n")
    assert findings == [] and unparsed and unparsed[0].startswith("ibpanic")


# ---- ip-link --------------------------------------------------------------------------------
IPLINK = sources("ip-link")


def test_ip_link_no_carrier_and_lowerlayerdown():
    facts = IPLINK["01.txt"]["facts"]["interfaces"]
    findings, unparsed = run("ip-link", "01.txt")
    got = {f.attrs["interface"]: f.attrs for f in findings}
    assert unparsed == []
    eth0 = got["eth0"]
    assert (eth0["state"], eth0["mtu"], eth0["admin_up"], eth0["carrier"]) == (
        facts["eth0"]["state"], facts["eth0"]["mtu"], facts["eth0"]["admin_up"], facts["eth0"]["carrier"])
    vlan = got["vlan2"]  # printed as vlan2@bond0
    assert vlan["state"] == facts["vlan2@bond0"]["state"] and vlan["carrier"] is facts["vlan2@bond0"]["carrier"]


def test_ip_link_loopback_down_then_up():
    facts = IPLINK["02.txt"]["facts"]
    findings, unparsed = run("ip-link", "02.txt")
    assert len(findings) == facts["captures"]
    first, second = (f.attrs for f in findings)
    assert (first["state"], first["admin_up"], first["kind"]) == (facts["first"]["lo"]["state"], False, "loopback")
    assert "carrier" not in first
    assert (second["state"], second["admin_up"], second["carrier"]) == (facts["second"]["lo"]["state"], True, True)
    assert all("ip addr" in u for u in unparsed)  # the poster's prompts; inet/valid_lft lines are known


def test_ip_link_one_line_form():
    text = ("1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN mode DEFAULT group default "
            "qlen 1000\\    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00\n"
            "2: eth0@if23: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP mode DEFAULT "
            "group default \\    link/ether 02:42:ac:11:00:02 brd ff:ff:ff:ff:ff:ff link-netnsid 0\n"
            "4: ib0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 4092 qdisc mq state UP mode DEFAULT group default "
            "qlen 256\\    link/infiniband 00:00:10:29:fe:80:00:00:00:00:00:00:98:03:9b:03:00:9a:2c:a2 brd "
            "00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:ff:ff:ff:ff\n"
            "5: ens1f0: <NO-CARRIER,BROADCAST,MULTICAST,UP> mtu 9000 qdisc mq state DOWN mode DEFAULT group "
            "default qlen 1000\\    link/ether b8:3f:d2:2a:1a:1c brd ff:ff:ff:ff:ff:ff\n")
    findings, unparsed = ip_link.parse(text)
    got = {f.attrs["interface"]: f.attrs for f in findings}
    assert unparsed == []
    assert got["lo"]["kind"] == "loopback" and got["eth0"]["kind"] == "ether"
    assert got["ib0"] == {"interface": "ib0", "state": "UP", "mtu": 4092, "kind": "infiniband", "admin_up": True,
                          "carrier": True}
    assert got["ens1f0"]["state"] == "DOWN" and got["ens1f0"]["carrier"] is False and got["ens1f0"]["mtu"] == 9000


# ---- ethtool -S -----------------------------------------------------------------------------
ETHTOOL = sources("ethtool-S")


def test_ethtool_bnx2x_all_zero():
    facts = ETHTOOL["01.txt"]["facts"]
    findings, unparsed = run("ethtool-S", "01.txt")
    assert all(v == 0 for v in facts["rx_discards"].values())
    assert findings == [] and unparsed == []


def test_ethtool_be2net_nonzero_errors():
    facts = ETHTOOL["02.txt"]["facts"]
    findings, unparsed = run("ethtool-S", "02.txt")
    got = {f.attrs["counter"]: f.attrs["value"] for f in findings}
    assert got == facts["nonzero_errors"]  # traffic counters (rx_address_filtered, forwarded_packets) skipped
    assert {f.attrs["device"] for f in findings} == {"unknown"}  # no "== iface" header in the capture
    assert unparsed == []


def test_ethtool_per_interface_and_queues():
    text = ("== ens1f0\nNIC statistics:\n     rx_packets: 1000\n     rx_crc_errors_phy: 12\n"
            "     [3]: rx_discards: 4\n     rxq7: rx_drops_no_skbs: 9\n     link_down_events_phy: 2\n"
            "     rx_out_of_buffer: 77\n     tx_bytes: 5\n"
            "== docker0\nno stats available\n"
            "== ib0\nCannot get stats strings information: Operation not supported\n")
    findings, unparsed = ethtool_s.parse(text)
    got = [(f.attrs["device"], f.attrs.get("queue"), f.attrs["counter"], f.attrs["value"]) for f in findings]
    assert got == [("ens1f0", None, "rx_crc_errors_phy", 12), ("ens1f0", "3", "rx_discards", 4),
                   ("ens1f0", "rxq7", "rx_drops_no_skbs", 9), ("ens1f0", None, "link_down_events_phy", 2),
                   ("ens1f0", None, "rx_out_of_buffer", 77)]
    assert unparsed == ["docker0: no stats available",
                        "ib0: Cannot get stats strings information: Operation not supported"]


# ---- perfquery ------------------------------------------------------------------------------
PERFQUERY = sources("perfquery")


def test_perfquery_idle_port_is_clean():
    facts = PERFQUERY["01.txt"]["facts"]
    findings, unparsed = run("perfquery", "01.txt")
    assert facts["healthy"] and all(v == 0 for v in facts["errors"].values())
    assert of(findings, "nic-counter") == [] and unparsed == []
    (port,) = of(findings, "ib-port-counters")  # the traffic counters, zero on an idle port
    assert port.attrs["device"] == "lid 10 port 1" and port.attrs["xmit_wait"] == facts["errors"]["PortXmitWait"]


def test_perfquery_nonzero_counters():
    with open(os.path.join(FIX, "perfquery", "01.txt"), encoding="utf-8") as fh:
        text = fh.read()
    text = (text.replace("SymbolErrorCounter:..............0", "SymbolErrorCounter:..............65535")
            .replace("LinkDownedCounter:...............0", "LinkDownedCounter:...............3")
            .replace("PortXmitWait:....................0", "PortXmitWait:....................999"))
    findings, _ = perfquery.parse(text)
    assert [(f.attrs["device"], f.attrs["counter"], f.attrs["value"]) for f in of(findings, "nic-counter")] == [
        ("lid 10 port 1", "SymbolErrorCounter", 65535), ("lid 10 port 1", "LinkDownedCounter", 3)]
    assert of(findings, "ib-port-counters")[0].attrs["xmit_wait"] == 999


def test_perfquery_old_names_and_errors():
    text = ("# Port counters: Lid 3 port 1\nPortSelect:......................1\n"
            "CounterSelect:...................0x1b01\nSymbolErrors:....................0065\n"
            "LinkRecovers:....................2\nRcvErrors:.......................0\n"
            "ibwarn: [123] mad_rpc_open_port: can't open UMAD port ((null):0)\n")
    findings, unparsed = perfquery.parse(text)
    assert [(f.attrs["counter"], f.attrs["value"]) for f in of(findings, "nic-counter")] == [
        ("SymbolErrorCounter", 65), ("LinkErrorRecoveryCounter", 2)]
    assert unparsed == ["ibwarn: [123] mad_rpc_open_port: can't open UMAD port ((null):0)"]


# ---- df -------------------------------------------------------------------------------------
DF = sources("df")
G, M, T = 1024 ** 3, 1024 ** 2, 1024 ** 4
SHM_BYTES = {"01.txt": 126 * G, "02.txt": 252 * G, "03.txt": 64 * M, "04.txt": 3.8 * G, "05.txt": 3.1 * G,
             "06.txt": 7.9 * G, "07.txt": 10183680 * 1024, "08.txt": 992 * M}


def usage(findings, inodes=False):
    return {f.attrs["mount"]: f.attrs for f in of(findings, "disk-usage") if f.attrs["inodes"] is inodes}


@pytest.mark.parametrize("name", sorted(DF))
def test_df_facts(name):
    facts = DF[name]["facts"]
    findings, _ = run("df", name)
    healthy.mark(findings)  # snap images are reported, and always full: the healthy rules excuse them
    space = usage(findings)
    normal = {f.attrs["mount"] for f in of(findings, "disk-usage") if f.normal}
    if "full_mounts" in facts:
        assert sorted(m for m, a in space.items() if a["used_pct"] >= 100 and m not in normal) == sorted(
            facts["full_mounts"])
    root = facts.get("root") or facts.get("df_h", {}).get("root")
    if root:
        assert space["/"]["used_pct"] == root["use_pct"]
        if "device" in root:
            assert space["/"]["device"] == root["device"]
        if root.get("avail") == "0":
            assert space["/"]["avail_bytes"] == 0
    for mount, pct in facts.get("near_full", {}).items():
        assert space[mount]["used_pct"] == pct
    for mount, desc in facts.get("other", {}).items():
        assert space[mount]["used_pct"] == int(desc.split()[1].rstrip("%"))
    for mount in facts.get("always_full_ignore", []):
        assert mount in normal
    shm = of(findings, "shm-usage")
    if "dev_shm" in facts:
        (s,) = shm
        assert s.attrs["used_pct"] == facts["dev_shm"]["use_pct"]
        assert abs(s.attrs["size_bytes"] - SHM_BYTES[name]) < 0.001 * SHM_BYTES[name]
        assert s.attrs["docker_default"] is facts["dev_shm"].get("docker_default", False)
    # tmpfs other than /dev/shm, /dev, /run, /sys, /proc are never disk-usage
    assert not any(m.startswith(("/run", "/sys", "/proc")) or m == "/dev" for m in space)


def test_df_inode_table():
    facts = DF["05.txt"]["facts"]["df_ih"]
    findings, unparsed = run("df", "05.txt")
    inodes = usage(findings, inodes=True)
    assert inodes["/"]["used_pct"] == facts["root"]["iuse_pct"]
    assert facts["boot"]["iuse_pct"] is None and "/boot" not in inodes  # "-": nothing to report
    assert usage(findings)["/"]["used_pct"] == 69  # space looked fine
    # another command typed at a prompt in between (its output is not df's): skipped, no note
    assert unparsed == []


def test_df_busybox_docker_binds_collapse():
    findings, _ = run("df", "03.txt")
    space = usage(findings)
    assert space["/"]["size_bytes"] == pytest.approx(59 * G)
    # /dev/vda2 shows up three times as file bind mounts: one finding, not three
    assert [a["device"] for a in space.values()].count("/dev/vda2") == 1


def test_df_posix_blocks_wrapped_and_inodes():
    text = ("Filesystem                                  1024-blocks      Used Available Capacity Mounted on\n"
            "/dev/mapper/very--long--volume--group-root\n"
            "                                              102400000  97280000   5120000      95% /\n"
            "server:/export/home                              2000      1000      1000      50% /home\n"
            "shm                                             65536         0     65536       0% /dev/shm\n"
            "overlay   100000 60000 40000 60% /var/lib/docker/overlay2/abc/merged\n"
            "overlay   100000 60000 40000 60% /var/lib/docker/overlay2/def/merged\n"
            "\n"
            "Filesystem       Inodes  IUsed   IFree IUse% Mounted on\n"
            "/dev/sda1       6553600 6553000     600  100% /data\n"
            "tmpfs             1000       1     999    1% /dev/shm\n")
    findings, unparsed = df.parse(text)
    assert unparsed == []
    space = usage(findings)
    assert space["/"] == {"mount": "/", "device": "/dev/mapper/very--long--volume--group-root", "used_pct": 95,
                          "inodes": False, "size_bytes": 102400000 * 1024, "avail_bytes": 5120000 * 1024,
                          "used_bytes": 97280000 * 1024}
    assert space["/home"]["used_pct"] == 50
    assert [m for m in space if "overlay2" in m] == ["/var/lib/docker/overlay2/abc/merged"]
    (shm,) = of(findings, "shm-usage")
    assert shm.attrs == {"used_pct": 0, "size_bytes": 64 * M, "docker_default": True, "used_bytes": 0,
                         "avail_bytes": 64 * M, "device": "shm"}
    assert usage(findings, inodes=True) == {"/data": {"mount": "/data", "device": "/dev/sda1", "used_pct": 100,
                                                      "inodes": True, "inodes_total": 6553600,
                                                      "inodes_used": 6553000, "inodes_free": 600}}


# ---- free -----------------------------------------------------------------------------------
FREE = sources("free")


def _mib(v):
    if isinstance(v, (int, float)):
        return v
    units = {"B": 1 / M, "M": 1, "G": 1024}
    return float(v[:-1]) * units[v[-1]]


@pytest.mark.parametrize("name", sorted(FREE))
def test_free_facts(name):
    facts = FREE[name]["facts"]
    findings, _ = run("free", name)
    (h,) = findings
    mem, swap = facts["mem"], facts["swap"]
    assert h.attrs["total_mib"] == pytest.approx(_mib(mem["total"]), rel=1e-3)
    assert h.attrs["used_mib"] == pytest.approx(_mib(mem["used"]), rel=1e-3)
    assert h.attrs["available_mib"] == pytest.approx(_mib(mem["available"]), rel=1e-3)
    assert h.attrs["available_pct"] == pytest.approx(100 * _mib(mem["available"]) / _mib(mem["total"]), abs=0.1)
    assert h.attrs["swap_total_mib"] == pytest.approx(_mib(swap["total"]), rel=1e-3)
    if "used" in swap:
        assert h.attrs["swap_used_mib"] == pytest.approx(_mib(swap["used"]), rel=1e-3)
    assert h.line.startswith("Mem:")


def test_free_old_procps_layout():
    text = ("             total       used       free     shared    buffers     cached\n"
            "Mem:         15951      15470        481          0        316      11876\n"
            "-/+ buffers/cache:       3277      12674\n"
            "Swap:         8191          2       8189\n")
    (h,), unparsed = free.parse(text)
    assert unparsed == []
    assert h.attrs == {"total_mib": 15951, "used_mib": 3277, "available_mib": 12674, "available_pct": 79.5,
                       "swap_total_mib": 8191, "swap_used_mib": 2, "swap_free_mib": 8189, "free_mib": 481,
                       "shared_mib": 0, "buffers_mib": 316, "cache_mib": 11876, "buff_cache_mib": 12192,
                       "used_with_cache_mib": 15470}


def test_free_new_procps_gi_suffixes():
    text = ("               total        used        free      shared  buff/cache   available\n"
            "Mem:            31Gi        10Gi       8,9Gi       1.5Gi        13Gi        20Gi\n"
            "Swap:          2.0Gi       137Mi       1.9Gi\n"
            "Total:          33Gi        10Gi        10Gi\n")
    (h,), unparsed = free.parse(text)
    assert unparsed == []
    assert h.attrs["total_mib"] == 31 * 1024 and h.attrs["available_mib"] == 20 * 1024
    assert h.attrs["swap_used_mib"] == 137


# ---- ulimit -l ------------------------------------------------------------------------------
@pytest.mark.parametrize("text, limit", [("unlimited\n", -1), ("64\n", 64), ("8192", 8192)])
def test_ulimit_l(text, limit):
    (m,), unparsed = ulimit_l.parse(text)
    assert m.kind == "memlock" and m.attrs == {"limit_kb": limit} and unparsed == []
    assert set(m.attrs) <= set(KINDS["memlock"])


def test_ulimit_l_with_prompt():
    findings, unparsed = ulimit_l.parse("$ ulimit -l\n65536\n")
    assert [f.attrs["limit_kb"] for f in findings] == [65536] and unparsed == []  # the prompt is no output
