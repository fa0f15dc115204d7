"""GPU, process and disk collectors (nvidia-smi in its forms, NVML, processes, iostat) and the
cross-node comparison, on real captured outputs (tests/fixtures/<collector>/, listed with their
sources and facts in each folder's SOURCES.jsonl)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path

import pytest

from collectors import nvml_probe
from collectors.compare import compare
from collectors.findings import KINDS, Finding
from collectors.registry import MODULES, Collector, collectors

FIXTURES = Path(__file__).resolve().parent / "fixtures"
MINE = ("nvidia-smi", "nvidia-smi-query", "nvidia-smi-q", "nvidia-smi-topo", "nvml", "processes", "iostat")


def facts(collector: str, name: str) -> dict:
    for line in (FIXTURES / collector / "SOURCES.jsonl").read_text().splitlines():
        entry = json.loads(line)
        if entry["file"].endswith(f"/{name}") and entry["file"].split("/")[0] in (collector, "compare"):
            return entry["facts"]
    raise KeyError(f"{collector}/{name} not in SOURCES.jsonl")


def run(collector: str, name: str) -> tuple[list[Finding], list[str]]:
    text = (FIXTURES / collector / name).read_text()
    return collectors()[collector].parse(text)


def of(findings: list[Finding], kind: str) -> list[Finding]:
    return [f for f in findings if f.kind == kind]


def assert_known(findings: list[Finding], source: str | None = None) -> None:
    for f in findings:
        assert f.kind in KINDS, f.kind
        unknown = set(f.attrs) - set(KINDS[f.kind])
        assert not unknown, (f.kind, unknown)
        for value in f.attrs.values():
            assert isinstance(value, (int, float, str, bool)), (f.kind, f.attrs)
        if source is not None:
            assert f.source == source
            assert f.node is None
            assert f.line and (f.line_no is None or f.line_no >= 1)


# --------------------------------------------------------------------------------------------
# Registry surface
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", MINE)
def test_registered(name):
    found = collectors()
    assert name in found
    c = found[name]
    assert isinstance(c, Collector)
    assert c.command and c.binaries and c.timeout > 0 and c.description
    assert not c.root


def test_registry_modules_cover_mine():
    for module in ("nvidia_smi", "nvidia_smi_query", "nvidia_smi_q", "nvidia_smi_topo", "nvml", "processes",
                   "iostat"):
        assert module in MODULES


# --------------------------------------------------------------------------------------------
# Empty and garbage input: no findings, nothing raised, garbage reported
# --------------------------------------------------------------------------------------------

GARBAGE = "hello world\nthis is not it: at all\n\x00\x01 binary junk ][ | |\n<html><body>502</body></html>\n"


@pytest.mark.parametrize("name", MINE)
def test_empty_input(name):
    findings, unparsed = collectors()[name].parse("")
    assert findings == []
    assert isinstance(unparsed, list)


@pytest.mark.parametrize("name", MINE)
def test_garbage_input(name):
    findings, unparsed = collectors()[name].parse(GARBAGE)
    assert findings == []
    assert unparsed, "garbage must be reported as unparsed"
    if name != "nvml":
        assert any("hello world" in u for u in unparsed)


@pytest.mark.parametrize("name", MINE)
def test_truncated_inputs_never_raise(name):
    # Every real fixture cut at every 7th character boundary of its first 600: never an exception.
    for folder in ("nvidia-smi", "nvidia-smi-q", "nvidia-smi-query", "nvidia-smi-topo", "iostat"):
        for path in sorted((FIXTURES / folder).glob("*.txt")):
            text = path.read_text()
            for cut in range(0, min(len(text), 600), 7):
                findings, unparsed = collectors()[name].parse(text[:cut])
                assert_known(findings)


# --------------------------------------------------------------------------------------------
# nvidia-smi (default table)
# --------------------------------------------------------------------------------------------

def test_nvidia_smi_h100_table():
    want = facts("nvidia-smi", "01.txt")
    findings, unparsed = run("nvidia-smi", "01.txt")
    assert_known(findings, "nvidia-smi")
    assert unparsed == []
    versions = {f.attrs["component"]: f.attrs["value"] for f in of(findings, "version")}
    assert versions == {"driver": want["driver_version"], "cuda": want["cuda_version"]}
    gpus = of(findings, "gpu")
    assert len(gpus) == want["gpu_count"]
    assert [g.attrs["index"] for g in gpus] == list(range(want["gpu_count"]))
    assert [g.attrs["bus_id"] for g in gpus] == want["bus_ids"]
    assert {g.attrs["name"] for g in gpus} == {want["gpu_name"]}
    assert {g.attrs["memory_total_mib"] for g in gpus} == {want["memory_total_mib"]}
    assert [g.attrs["ecc_uncorrected"] for g in gpus] == want["volatile_uncorr_ecc"]
    assert gpus[0].attrs["memory_used_mib"] == 1
    assert gpus[0].attrs["temperature_c"] == 27
    assert gpus[0].attrs["utilization_pct"] == 0
    assert gpus[0].attrs["power_w"] == 72
    assert all(g.attrs["processes"] == len(want["processes"]) for g in gpus)
    assert of(findings, "gpu-process") == []
    assert gpus[0].line_no == 9 and "00000000:19:00.0" in gpus[0].line


@pytest.mark.parametrize("name", ["02.txt", "03.txt"])
def test_nvidia_smi_device_handle_failure(name):
    # 02 is a newer driver's spelling without a space ("GPU0000:07:00.0"), 03 the older one.
    want = facts("nvidia-smi", name)
    findings, unparsed = run("nvidia-smi", name)
    assert_known(findings, "nvidia-smi")
    assert want["table_printed"] is False and of(findings, "gpu") == []
    lost = of(findings, "gpu-lost")
    assert len(lost) == 1
    assert lost[0].attrs["pci"] == want["bus_id"]
    assert want["reason"] in lost[0].attrs["text"]
    assert lost[0].line_no == 2
    assert unparsed == []  # the pasted shell prompt is not an unparsed line


def test_nvidia_smi_processes_and_old_layout():
    # Constructed from the documented table of an older driver (R470: no GI/CI columns in the
    # process table, names cut with '...'), with the figures of a busy 2-GPU V100 box.
    text = """\
+-----------------------------------------------------------------------------+
| NVIDIA-SMI 470.57.02    Driver Version: 470.57.02    CUDA Version: 11.4     |
|-------------------------------+----------------------+----------------------+
| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |
|                               |                      |               MIG M. |
|===============================+======================+======================|
|   0  Tesla V100-SXM2...  On   | 00000000:06:00.0 Off |                    2 |
| N/A   44C    P0   250W / 300W |  30512MiB / 32510MiB |     98%      Default |
|                               |                      |                  N/A |
+-------------------------------+----------------------+----------------------+
|   1  Tesla V100-SXM2...  On   | 00000000:07:00.0 Off |                    0 |
| N/A   ERR!   P0   ERR! /  ERR! |  30500MiB / 32510MiB |     ERR!     Default |
|                               |                      |                  N/A |
+-------------------------------+----------------------+----------------------+

+-----------------------------------------------------------------------------+
| Processes:                                                                  |
|  GPU   GI   CI        PID   Type   Process name                  GPU Memory |
|        ID   ID                                                   Usage      |
|=============================================================================|
|    0   N/A  N/A     41230      C   /opt/conda/bin/python           30509MiB |
|    1   N/A  N/A     41231      C   /opt/conda/bin/python           30497MiB |
+-----------------------------------------------------------------------------+
"""
    findings, unparsed = collectors()["nvidia-smi"].parse(text)
    assert_known(findings, "nvidia-smi")
    assert unparsed == []
    gpus = {g.attrs["index"]: g.attrs for g in of(findings, "gpu")}
    assert gpus[0]["name"] == "Tesla V100-SXM2..."
    assert gpus[0]["ecc_uncorrected"] == 2
    assert gpus[0]["memory_used_mib"] == 30512 and gpus[0]["utilization_pct"] == 98
    assert gpus[0]["processes"] == 1 and gpus[1]["processes"] == 1
    assert "temperature_c" not in gpus[1]
    procs = of(findings, "gpu-process")
    assert [(p.attrs["gpu"], p.attrs["pid"], p.attrs["memory_mib"]) for p in procs] == [
        (0, 41230, 30509), (1, 41231, 30497)]
    assert [f.attrs["pci"] for f in of(findings, "gpu-lost")] == ["00000000:07:00.0"]


def test_nvidia_smi_mig_rows_do_not_overwrite_the_gpu():
    # Constructed: the first GPU block of nvidia-smi/01.txt followed by the documented "MIG devices"
    # table, whose memory cells must not be read as the GPU's.
    lines = (FIXTURES / "nvidia-smi" / "01.txt").read_text().splitlines()
    text = "\n".join(lines[:12] + [
        "",
        "+-----------------------------------------------------------------------------------------+",
        "| MIG devices:                                                                            |",
        "+------------------+----------------------------------+-----------+-----------------------+",
        "| GPU  GI  CI  MIG |                     Memory-Usage |        Vol|        Shared         |",
        "|      ID  ID  Dev |                       BAR1-Usage | SM     Unc| CE ENC  DEC  OFA  JPG |",
        "|==================+==================================+===========+=======================|",
        "|  0    1   0   0  |           10212MiB / 40192MiB    | 60      0 |  3   0    2    0    0 |",
        "+------------------+----------------------------------+-----------+-----------------------+",
    ]) + "\n"
    findings, unparsed = collectors()["nvidia-smi"].parse(text)
    assert unparsed == []
    gpus = of(findings, "gpu")
    assert len(gpus) == 1 and gpus[0].attrs["memory_used_mib"] == 1


@pytest.mark.parametrize("line, kind", [
    ("No devices were found", "gpu-lost"),
    ("Unable to determine the device handle for GPU 0000:3B:00.0: GPU is lost.  Reboot the system to "
     "recover this GPU", "gpu-lost"),
])
def test_nvidia_smi_failure_lines(line, kind):
    findings, unparsed = collectors()["nvidia-smi"].parse(line + "\n")
    assert [f.kind for f in findings] == [kind]


def test_nvidia_smi_driver_not_loaded_is_not_checked():
    text = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that "
            "the latest NVIDIA driver is installed and running.\n")
    findings, unparsed = collectors()["nvidia-smi"].parse(text)
    assert findings == []
    assert unparsed and "could not check" in unparsed[0]


# --------------------------------------------------------------------------------------------
# nvidia-smi --query-gpu
# --------------------------------------------------------------------------------------------

def test_query_azure_header_without_units():
    want = facts("nvidia-smi-query", "01.txt")
    findings, unparsed = run("nvidia-smi-query", "01.txt")
    assert_known(findings, "nvidia-smi-query")
    assert unparsed == []
    gpus = of(findings, "gpu")
    assert len(gpus) == want["gpus"]
    assert [g.attrs["bus_id"] for g in gpus] == want["bus_ids"]
    assert [g.attrs["serial"] for g in gpus] == ["0000000000001", "0000000000002", "0000000000003",
                                                 "0000000000004"]
    pages = of(findings, "retired-pages")
    assert [p.attrs["dbe"] for p in pages] == want["retired_pages_dbe"]
    assert all(p.attrs["sbe"] == 0 for p in pages)
    # remapped_rows.failure is "[N/A]": missing, never read as "no failure"
    assert want["remapped_rows_failure"] == "[N/A]" and of(findings, "row-remap") == []


def test_query_header_with_units_windows_driver():
    want = facts("nvidia-smi-query", "02.txt")["row0"]
    findings, unparsed = run("nvidia-smi-query", "02.txt")
    assert_known(findings, "nvidia-smi-query")
    assert unparsed == []
    row0 = of(findings, "gpu")[0].attrs  # row 1 is a placeholder: only the format is used
    assert row0["index"] == want["index"]
    assert row0["name"] == want["name"]
    assert row0["bus_id"] == want["pci_bus_id"]
    assert row0["memory_used_mib"] == 575 and want["memory_used"] == "575 MiB"
    assert "serial" not in row0 and want["serial"] == "[N/A]"
    assert {"component": "driver", "value": "466.63"} in [f.attrs for f in of(findings, "version")]


def test_query_default_columns_throttle_and_pcie():
    # Constructed in the collector's own format (noheader,nounits, its 18 columns) with the
    # identity of the A10 of nvidia-smi-q/02.txt and the H100 figures of nvidia-smi/01.txt.
    text = (
        "0, NVIDIA A10, 00000000:07:00.0, GPU-73d12ef7-f589-f867-4259-c7090ab44736, 1324521052681, 535.129.03, "
        "4, 23028, 0, 33, 43.89, 0, 0, 0x0000000000000001, 1, 4, 16, 16\n"
        "1, NVIDIA H100 80GB HBM3, 00000000:3B:00.0, GPU-00000000-0000-0000-0000-000000000001, [N/A], 535.129.03, "
        "70211, 81559, 100, 88, 690.12, 3, 12, 0x0000000000000044, 4, 5, 8, 16\n"
    )
    findings, unparsed = collectors()["nvidia-smi-query"].parse(text)
    assert_known(findings, "nvidia-smi-query")
    assert unparsed == []
    gpus = {g.attrs["index"]: g.attrs for g in of(findings, "gpu")}
    assert gpus[0]["serial"] == "1324521052681" and gpus[0]["power_w"] == 43.89
    assert "serial" not in gpus[1] and gpus[1]["ecc_uncorrected"] == 3
    assert [f.attrs for f in of(findings, "version")] == [{"component": "driver", "value": "535.129.03"}]
    throttle = of(findings, "gpu-throttle")
    assert [(t.attrs["gpu"], t.attrs["reasons"]) for t in throttle] == [(1, "sw_power_cap,hw_thermal_slowdown")]
    links = {p.attrs["gpu"]: p.attrs for p in of(findings, "pcie-link")}
    assert links[0]["degraded"] is False  # gen 1 of 4 while idle: power saving, not a fault
    assert links[1] == {"gpu": 1, "gen": 4, "max_gen": 5, "width": 8, "max_width": 16, "degraded": True}
    ecc = sorted((e.attrs["type"], e.attrs["count"]) for e in of(findings, "ecc-error"))
    assert ecc == [("correctable", 12), ("uncorrectable", 3)]


# --------------------------------------------------------------------------------------------
# nvidia-smi -q
# --------------------------------------------------------------------------------------------

def test_q_a100_older_driver():
    want = facts("nvidia-smi-q", "01.txt")
    findings, unparsed = run("nvidia-smi-q", "01.txt")
    assert_known(findings, "nvidia-smi-q")
    assert unparsed == []
    versions = {f.attrs["component"]: f.attrs["value"] for f in of(findings, "version")}
    assert versions == {"driver": want["driver_version"], "cuda": want["cuda_version"]}
    gpus = of(findings, "gpu")
    assert len(gpus) == want["gpus_in_excerpt"]
    g = gpus[0].attrs
    assert g["bus_id"] == want["bus_id"] and g["name"] == want["product"]
    assert g["temperature_c"] == want["temperature_c"]
    assert g["ecc_uncorrected"] == want["ecc_volatile"]["sram_uncorrectable"] + want["ecc_volatile"]["dram_uncorrectable"]
    assert g["uuid"] == "GPU-b01e9f90-c60c-4ad1-2052-154833662357" and g["serial"] == "1323120035212"
    remap = of(findings, "row-remap")[0].attrs
    rr = want["remapped_rows"]
    assert remap == {"gpu": 0, "correctable": rr["correctable"], "uncorrectable": rr["uncorrectable"],
                     "pending": rr["pending"], "failure": rr["failure_occurred"],
                     # the Bank Remap Availability Histogram of the capture: all 640 banks at Max
                     "banks_max": 640, "banks_high": 0, "banks_partial": 0, "banks_low": 0, "banks_none": 0}
    assert want["retired_pages"] == "N/A" and of(findings, "retired-pages") == []
    assert of(findings, "ecc-error") == [] and of(findings, "gpu-throttle") == []  # Idle only
    assert of(findings, "pcie-link")[0].attrs == {"gpu": 0, "gen": 4, "max_gen": 4, "width": 16, "max_width": 16,
                                                  "degraded": False}


def test_q_a10_pending_row_remap_newer_driver():
    want = facts("nvidia-smi-q", "02.txt")
    findings, unparsed = run("nvidia-smi-q", "02.txt")
    assert_known(findings, "nvidia-smi-q")
    assert unparsed == []
    versions = {f.attrs["component"]: f.attrs["value"] for f in of(findings, "version")}
    assert versions == {"driver": want["driver_version"], "cuda": want["cuda_version"]}
    gpus = of(findings, "gpu")
    assert len(gpus) == want["gpu_count"]
    g = gpus[0].attrs
    assert g["bus_id"] == want["bus_id"] and g["name"] == want["product"]
    assert g["memory_total_mib"] == want["fb_total_mib"] and g["temperature_c"] == want["temperature_c"]
    remap = of(findings, "row-remap")
    assert len(remap) == 1
    assert remap[0].attrs["uncorrectable"] == want["remapped_rows"]["uncorrectable"] == 4
    assert remap[0].attrs["pending"] is True and remap[0].attrs["failure"] is False
    assert remap[0].line.startswith("Uncorrectable Error") and remap[0].line_no == 141
    assert of(findings, "ecc-error") == []  # the ECC counters themselves are all 0
    assert of(findings, "gpu-throttle") == []  # "Clocks Event Reasons": Idle only


def test_q_retired_pages_excerpt():
    want = facts("nvidia-smi-q", "03.txt")["retired_pages"]
    findings, unparsed = run("nvidia-smi-q", "03.txt")
    assert_known(findings, "nvidia-smi-q")
    assert unparsed == []
    pages = of(findings, "retired-pages")
    assert [p.attrs for p in pages] == [{"gpu": 0, "sbe": want["single_bit_ecc"], "dbe": want["double_bit_ecc"],
                                         "pending": want["pending_blacklist"]}]


def _q_variant(**swaps: str) -> str:
    text = (FIXTURES / "nvidia-smi-q" / "01.txt").read_text()
    for old, new in swaps.items():
        pattern = re.compile(r"^(\s*" + re.escape(old.replace("_", " ")) + r"\s*:\s*).*$", re.M)
        assert pattern.search(text), old
        text = pattern.sub(lambda m: m.group(1) + new, text, count=1)
    return text


def test_q_throttle_thermal_and_degraded_link():
    # The A100 report of 01.txt with values changed as on a hot, busy GPU with a x8 link.
    text = _q_variant(Idle="Not Active", HW_Slowdown="Active", HW_Thermal_Slowdown="Active")
    text = text.replace("                Max                       : 16x\n                Current                   : 16x",
                        "                Max                       : 16x\n                Current                   : 8x")
    findings, unparsed = collectors()["nvidia-smi-q"].parse(text)
    assert_known(findings, "nvidia-smi-q")
    throttle = of(findings, "gpu-throttle")
    assert [t.attrs for t in throttle] == [{"gpu": 0, "reasons": "hw_slowdown,hw_thermal_slowdown"}]
    assert [t.attrs["gpu"] for t in of(findings, "thermal")] == [0]
    link = of(findings, "pcie-link")[0].attrs
    assert link["width"] == 8 and link["degraded"] is True


def test_q_ecc_counts_both_layouts():
    # Uncorrectable DRAM errors in the Ampere layout ...
    text = _q_variant(DRAM_Uncorrectable="2")
    findings, _ = collectors()["nvidia-smi-q"].parse(text)
    ecc = of(findings, "ecc-error")
    assert [(e.attrs["type"], e.attrs["counter"], e.attrs["count"]) for e in ecc] == [("uncorrectable", "volatile", 2)]
    assert of(findings, "gpu")[0].attrs["ecc_uncorrected"] == 2
    # ... and in the pre-Ampere Single Bit / Double Bit tree (constructed from the documented layout).
    old = """\
==============NVSMI LOG==============

Driver Version                            : 418.87.01
CUDA Version                              : 10.1

Attached GPUs                             : 1
GPU 00000000:06:00.0
    Ecc Mode
        Current                           : Enabled
        Pending                           : Enabled
    ECC Errors
        Volatile
            Single Bit
                Device Memory             : 5
                Register File             : 0
                Total                     : 5
            Double Bit
                Device Memory             : 1
                Register File             : 0
                Total                     : 1
        Aggregate
            Single Bit
                Device Memory             : 7
                Total                     : 7
            Double Bit
                Device Memory             : 1
                Total                     : 1
    Retired Pages
        Single Bit ECC                    : 0
        Double Bit ECC                    : 1
        Pending Page Blacklist            : No
"""
    findings, unparsed = collectors()["nvidia-smi-q"].parse(old)
    assert_known(findings, "nvidia-smi-q")
    assert unparsed == []
    got = sorted((e.attrs["type"], e.attrs["counter"], e.attrs["count"]) for e in of(findings, "ecc-error"))
    assert got == [("correctable", "aggregate", 7), ("correctable", "volatile", 5),
                   ("uncorrectable", "aggregate", 1), ("uncorrectable", "volatile", 1)]
    assert of(findings, "retired-pages")[0].attrs == {"gpu": 0, "sbe": 0, "dbe": 1, "pending": False}


# --------------------------------------------------------------------------------------------
# nvidia-smi topo -m
# --------------------------------------------------------------------------------------------

def _affinity(findings):
    return {f.attrs["gpu"]: f.attrs for f in of(findings, "gpu-nic-affinity")}


def test_topo_workstation_without_nics():
    want = facts("nvidia-smi-topo", "01.txt")
    findings, unparsed = run("nvidia-smi-topo", "01.txt")
    assert want["nics"] == 0 and of(findings, "gpu-nic-affinity") == [] and unparsed == []
    (topo,) = of(findings, "gpu-topology")  # no NIC is a fact of the matrix, not a line not understood
    assert (topo.attrs["gpus"], topo.attrs["nics"]) == (want["gpus"], 0)


def test_topo_old_driver_spaces_hca_name():
    want = facts("nvidia-smi-topo", "02.txt")
    findings, unparsed = run("nvidia-smi-topo", "02.txt")
    assert_known(findings, "nvidia-smi-topo")
    assert unparsed == []
    got = _affinity(findings)
    assert {f"GPU{g}": a["link"] for g, a in got.items()} == want["gpu_nic"]
    assert {a["nic"] for a in got.values()} == set(want["nics"])
    assert {a["cpu_affinity"] for a in got.values()} == {want["cpu_affinity"]["GPU0-3"]}
    assert all("numa" not in a for a in got.values())  # no NUMA Affinity column in that driver


@pytest.mark.parametrize("name, key", [("03.txt", "gpu_nic_pix"), ("04.txt", "gpu_nic_pix")])
def test_topo_pix_nic_per_gpu(name, key):
    want = facts("nvidia-smi-topo", name)
    findings, unparsed = run("nvidia-smi-topo", name)
    assert_known(findings, "nvidia-smi-topo")
    assert unparsed == []
    got = _affinity(findings)
    assert {f"GPU{g}": a["nic"] for g, a in got.items()} == want[key]
    assert {a["link"] for a in got.values()} == {"PIX"}
    numa = {g: a["numa"] for g, a in got.items()}
    assert all(numa[g] == (0 if g < 4 else 1) for g in numa)


def test_topo_two_pxb_nics_per_gpu():
    want = facts("nvidia-smi-topo", "05.txt")
    findings, unparsed = run("nvidia-smi-topo", "05.txt")
    assert unparsed == []
    got = _affinity(findings)
    assert len(got) == want["gpus"]
    assert {f"GPU{g}": a["nics"].split(",") for g, a in got.items()} == want["gpu_nic_pxb"]
    assert {a["link"] for a in got.values()} == {"PXB"}


def test_topo_legend_wrapped_rows_and_sys_link():
    # Constructed from the real 04.txt rows: NIC legend appended, GPU0's NIC columns changed to
    # NODE/SYS only, and GPU1's row wrapped by a narrow terminal.
    rows = (FIXTURES / "nvidia-smi-topo" / "04.txt").read_text().splitlines()
    header, gpu0, gpu1 = rows[0], rows[1], rows[2]
    gpu0 = gpu0.replace("PIX", "NODE", 1)
    cut = gpu1.index("NODE")
    text = "\n".join([header, gpu0, gpu1[:cut], "        " + gpu1[cut:], "", "NIC Legend:", ""]
                     + [f"  NIC{i}: mlx5_{i}" for i in range(9)]) + "\n"
    findings, unparsed = collectors()["nvidia-smi-topo"].parse(text)
    assert_known(findings, "nvidia-smi-topo")
    assert unparsed == []
    got = _affinity(findings)
    assert got[0]["link"] == "NODE" and got[0]["nic"] == "mlx5_0"
    assert got[0]["nics"] == "mlx5_0,mlx5_2,mlx5_4,mlx5_6,mlx5_8"
    assert got[1]["link"] == "PIX" and got[1]["nic"] == "mlx5_4" and got[1]["numa"] == 0


# --------------------------------------------------------------------------------------------
# iostat
# --------------------------------------------------------------------------------------------

def _io(findings):
    return {f.attrs["device"]: f.attrs for f in of(findings, "disk-io")}


def test_iostat_sysstat12_layout():
    want = facts("iostat", "01.txt")["devices"]
    findings, unparsed = run("iostat", "01.txt")
    assert_known(findings, "iostat")
    assert unparsed == []
    got = _io(findings)
    assert set(got) == set(want)
    for device, values in want.items():
        assert got[device]["util_pct"] == values["util"]
        if "r_await" in values:
            assert got[device]["await_ms"] >= values["r_await"]
    assert got["dm-10"]["await_ms"] == 9.23  # worse of r_await 9.23 / w_await 8.57


def test_iostat_old_sysstat_layout():
    want = facts("iostat", "02.txt")["devices"]
    findings, unparsed = run("iostat", "02.txt")
    assert_known(findings, "iostat")
    assert unparsed == []
    got = _io(findings)
    assert set(got) == set(want)
    assert got["sda"]["util_pct"] == want["sda"]["util"]
    assert got["sda"]["await_ms"] == 1.29  # w_await; the combined await is 0.88
    assert want["sda"]["await"] == 0.88


def test_iostat_mb_units_with_avg_cpu():
    want = facts("iostat", "03.txt")
    findings, unparsed = run("iostat", "03.txt")
    assert unparsed == []
    got = _io(findings)
    assert len(got) == want["devices_shown"] + 1  # nvme7n1 is the 13th row shown
    for device in want["zero_activity"]:
        assert got[device]["util_pct"] == 0.0
    top = max(got.values(), key=lambda a: a["util_pct"])
    assert {top["device"]: top["util_pct"]} == want["max_util"]


def test_iostat_takes_the_last_report():
    # iostat -dxm 1 2: the first report averages since boot, the second is the sample.  Built from
    # the real rows of 02.txt (sysstat 10), the second report with dm-0 saturated.
    lines = (FIXTURES / "iostat" / "02.txt").read_text().splitlines()
    header = next(l for l in lines if l.startswith("Device"))
    first = [l for l in lines if l.startswith(("sda", "dm-"))]
    busy = first[1].replace("0.92    0.54    1.27   0.50   0.01", "0.92   41.30   88.50   0.50  99,80")
    text = "\n".join([lines[0], "", header, *first, "", header, first[0], busy, first[2], ""])
    findings, unparsed = collectors()["iostat"].parse(text)
    assert unparsed == []
    got = _io(findings)
    assert len(of(findings, "disk-io")) == 3
    assert got["dm-0"]["util_pct"] == 99.8 and got["dm-0"]["await_ms"] == 88.5


# --------------------------------------------------------------------------------------------
# processes (ps -eo pid,ppid,rss,etimes,args --no-headers)
# --------------------------------------------------------------------------------------------

# CONSTRUCTED test data (no captured fixture exists): written to the documented procps format
# (right-aligned pid/ppid/rss/etimes, then the full command line) for a node running torchrun
# with 2 ranks x 4 fork-started DataLoader workers, plus a resource tracker and a Python daemon.
PS_TORCHRUN = """\
      1       0 13256 864000 /sbin/init splash
    812       1 24600 864000 /usr/bin/python3 /usr/bin/networkd-dispatcher --run-startup-triggers
   2201       1  8112 864000 sshd: /usr/sbin/sshd -D [listener] 0 of 10-100 startups
   4099    2201 10240   3700 sshd: alice@notty
   4100    4099  5200   3700 bash -c cd /work && torchrun --nproc_per_node=2 train.py --bs 32
   5000    4100 420112   3600 /opt/conda/bin/python3.10 /opt/conda/bin/torchrun --nproc_per_node=2 train.py --bs 32
   5010    5000 9800120   3590 /opt/conda/bin/python3.10 -u train.py --bs 32
   5011    5000 9700404   3590 /opt/conda/bin/python3.10 -u train.py --bs 32
   5012    5010 52100   3588 /opt/conda/bin/python3.10 -c from multiprocessing.resource_tracker import main;main(31)
   5020    5010 2100332   3400 /opt/conda/bin/python3.10 -u train.py --bs 32
   5021    5010 2100332   3400 /opt/conda/bin/python3.10 -u train.py --bs 32
   5022    5010 2100332   3400 /opt/conda/bin/python3.10 -u train.py --bs 32
   5023    5010 2100332   3400 /opt/conda/bin/python3.10 -u train.py --bs 32
   5030    5011 2100332   3400 /opt/conda/bin/python3.10 -u train.py --bs 32
   5031    5011 2100332   3400 /opt/conda/bin/python3.10 -u train.py --bs 32
   5032    5011 2100332   3400 /opt/conda/bin/python3.10 -u train.py --bs 32
   5033    5011 2100332   3400 /opt/conda/bin/python3.10 -u train.py --bs 32
   5100    5010   3104   3000 nvidia-smi
   6001    2201  9000     12 sshd: triage@notty
   6002    6001  3200      0 ps -eo pid,ppid,rss,etimes,args --no-headers
"""

# CONSTRUCTED: a Slurm step (srun) with one rank whose DataLoader uses the spawn start method
# (workers show as multiprocessing.spawn children), and an inductor compile worker pool.
PS_SRUN_SPAWN = """\
      1       0 13256 864000 /lib/systemd/systemd --system --deserialize 35
   3300       1  9000 864000 /usr/sbin/slurmd -D -s
   7000       1  7340   1200 slurmstepd: [4242.0]
   7010    7000 8800300   1190 python train.py --config cfg.yaml
   7020    7010 1500100   1100 /usr/bin/python -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=9, pipe_handle=21) --multiprocessing-fork
   7021    7010 1500100   1100 /usr/bin/python -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=9, pipe_handle=23) --multiprocessing-fork
   7030    7010  90000   1150 /usr/bin/python -m torch._inductor.compile_worker --pickler=torch._inductor.compile_worker.subproc_pool.SubprocPickler --workers=32 --parent=7010
"""


def test_processes_torchrun_fork_workers():
    findings, unparsed = collectors()["processes"].parse(PS_TORCHRUN)
    assert_known(findings, "processes")
    assert unparsed == []
    assert len(findings) == 1
    f = findings[0]
    assert f.attrs == {"count": 8, "trainers": 2, "per_rank": 4}
    assert "train.py" in f.line and f.line_no == 7


def test_processes_srun_spawn_workers():
    findings, _ = collectors()["processes"].parse(PS_SRUN_SPAWN)
    assert findings[0].attrs == {"count": 2, "trainers": 1, "per_rank": 2}


def test_processes_nothing_training_is_a_fact():
    text = "\n".join(l for l in PS_TORCHRUN.splitlines() if not re.search(r"\b(?:50\d\d)\b", l.split()[0]))
    findings, _ = collectors()["processes"].parse(text + "\n")
    assert findings[0].attrs == {"count": 0, "trainers": 0, "per_rank": 0}
    assert findings[0].line_no is None


def test_processes_header_and_odd_lines():
    text = "    PID    PPID   RSS ELAPSED COMMAND\n" + PS_SRUN_SPAWN + "ps: warning: bad syntax, perhaps a bogus '-'?\n"
    findings, unparsed = collectors()["processes"].parse(text)
    assert findings[0].attrs["count"] == 2
    assert unparsed == ["ps: warning: bad syntax, perhaps a bogus '-'?"]


# --------------------------------------------------------------------------------------------
# NVML: the probe with a fake NVML module, and the parser of its JSON
# --------------------------------------------------------------------------------------------

class FakeNVMLError(Exception):
    pass


class _Struct:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class FakeNVML:
    """The pynvml names the probe calls, answering from a table of GPUs.

    ``gpus`` holds dicts with the values of real nvidia-smi -q reports; a value that is an
    exception instance is raised, as pynvml raises NVMLError (NotSupported, GPU is lost ...).
    """

    NVMLError = FakeNVMLError
    NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_AGGREGATE_ECC = 1
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, gpus, driver="535.129.03", init_error=None):
        self.gpus = gpus
        self.driver = driver
        self.init_error = init_error
        self.shutdown = False

    def _get(self, handle, key):
        value = self.gpus[handle][key]
        if isinstance(value, Exception):
            raise value
        return value

    def nvmlInit(self):
        if self.init_error:
            raise self.init_error

    def nvmlShutdown(self):
        self.shutdown = True

    def nvmlSystemGetDriverVersion(self):
        return self.driver

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        if isinstance(self.gpus[index].get("handle"), Exception):
            raise self.gpus[index]["handle"]
        return index

    def nvmlDeviceGetName(self, h):
        return self._get(h, "name")

    def nvmlDeviceGetUUID(self, h):
        return self._get(h, "uuid")

    def nvmlDeviceGetSerial(self, h):
        return self._get(h, "serial")

    def nvmlDeviceGetPciInfo(self, h):
        return _Struct(busId=self._get(h, "bus_id"))

    def nvmlDeviceGetMemoryInfo(self, h):
        used, total = self._get(h, "memory_mib")
        return _Struct(used=used << 20, total=total << 20, free=(total - used) << 20)

    def nvmlDeviceGetTemperature(self, h, sensor):
        assert sensor == self.NVML_TEMPERATURE_GPU
        return self._get(h, "temperature")

    def nvmlDeviceGetTotalEccErrors(self, h, error_type, counter):
        table = self._get(h, "ecc")
        value = table[("aggregate" if counter == self.NVML_AGGREGATE_ECC else "volatile",
                       "uncorrected" if error_type == self.NVML_MEMORY_ERROR_TYPE_UNCORRECTED else "corrected")]
        if isinstance(value, Exception):
            raise value
        return value

    def nvmlDeviceGetRemappedRows(self, h):
        return self._get(h, "remapped")

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return self._get(h, "pcie")[0]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return self._get(h, "pcie")[1]

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self._get(h, "pcie")[2]

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return self._get(h, "pcie")[3]

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
        return self._get(h, "throttle")

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [_Struct(pid=pid, usedGpuMemory=mib << 20 if mib is not None else None)
                for pid, mib in self._get(h, "processes")]


def _zero_ecc():
    return {(s, k): 0 for s in ("volatile", "aggregate") for k in ("corrected", "uncorrected")}


# Values from nvidia-smi-q/02.txt (A10, driver 535.129.03: 4 rows remapped for uncorrectable
# errors, remap pending) and nvidia-smi-q/01.txt (A100-SXM4-40GB, healthy).
A10 = {"name": "NVIDIA A10", "uuid": "GPU-73d12ef7-f589-f867-4259-c7090ab44736", "serial": "1324521052681",
       "bus_id": "00000000:07:00.0", "memory_mib": (4, 23028), "temperature": 33, "ecc": _zero_ecc(),
       "remapped": (0, 4, 1, 0), "pcie": (4, 4, 16, 16), "throttle": 0x1, "processes": []}
A100 = {"name": b"A100-SXM4-40GB", "uuid": b"GPU-b01e9f90-c60c-4ad1-2052-154833662357", "serial": b"1323120035212",
        "bus_id": b"00000001:00:00.0", "memory_mib": (0, 40536), "temperature": 41, "ecc": _zero_ecc(),
        "remapped": (0, 0, 0, 0), "pcie": (4, 4, 16, 16), "throttle": 0x1, "processes": []}


def _through_parser(result: dict):
    text = json.dumps(result, sort_keys=True) + "\n"
    return collectors()["nvml"].parse(text)


def test_nvml_probe_a10_pending_remap():
    fake = FakeNVML([A10])
    result = nvml_probe.probe(fake)
    assert fake.shutdown
    assert result["status"] == "ok" and result["driver"] == "535.129.03"
    gpu = result["gpus"][0]
    assert gpu["remapped_rows"] == {"correctable": 0, "uncorrectable": 4, "pending": True, "failure": False}
    assert gpu["memory_total_mib"] == 23028 and gpu["pcie"] == {"gen": 4, "max_gen": 4, "width": 16, "max_width": 16}
    findings, notes = _through_parser(result)
    assert_known(findings, "nvml")
    assert notes == []
    g = of(findings, "gpu")[0].attrs
    assert g == {"index": 0, "name": "NVIDIA A10", "uuid": A10["uuid"], "serial": "1324521052681",
                 "bus_id": "00000000:07:00.0", "memory_used_mib": 4, "memory_total_mib": 23028,
                 "temperature_c": 33, "ecc_uncorrected": 0, "ecc_corrected": 0, "processes": 0}
    assert of(findings, "row-remap")[0].attrs == {"gpu": 0, "correctable": 0, "uncorrectable": 4, "pending": True,
                                                  "failure": False}
    assert of(findings, "ecc-error") == [] and of(findings, "gpu-throttle") == []
    assert of(findings, "pcie-link")[0].attrs["degraded"] is False
    assert {"component": "driver", "value": "535.129.03"} in [f.attrs for f in of(findings, "version")]


def test_nvml_probe_faults_and_unsupported_values():
    hot = dict(A100, name="A100-SXM4-40GB", throttle=0x4 | 0x40, pcie=(4, 4, 8, 16),
               ecc={**_zero_ecc(), ("volatile", "uncorrected"): 2, ("aggregate", "uncorrected"): 2},
               processes=[(41230, 30509), (41300, None)], memory_mib=(30600, 40536))
    geforce = dict(A10, serial=FakeNVMLError("Not Supported"), remapped=FakeNVMLError("Not Supported"),
                   ecc={k: FakeNVMLError("Not Supported") for k in _zero_ecc()})
    gone = {"handle": FakeNVMLError("GPU is lost"), "bus_id": "00000000:0B:00.0"}
    result = nvml_probe.probe(FakeNVML([hot, geforce, gone]))
    assert result["gpus"][1]["errors"]["serial"] == "Not Supported"
    assert "remapped_rows" not in result["gpus"][1]
    assert result["gpus"][2] == {"index": 2, "error": "GPU is lost"}
    findings, notes = _through_parser(result)
    assert_known(findings, "nvml")
    assert [t.attrs for t in of(findings, "gpu-throttle")] == [{"gpu": 0, "reasons": "sw_power_cap,hw_thermal_slowdown"}]
    link = {p.attrs["gpu"]: p.attrs for p in of(findings, "pcie-link")}
    assert link[0]["degraded"] is True and link[1]["degraded"] is False
    ecc = sorted((e.attrs["gpu"], e.attrs["counter"], e.attrs["count"]) for e in of(findings, "ecc-error"))
    assert ecc == [(0, "aggregate", 2), (0, "volatile", 2)]
    procs = of(findings, "gpu-process")
    assert [p.attrs for p in procs] == [{"gpu": 0, "pid": 41230, "memory_mib": 30509}, {"gpu": 0, "pid": 41300}]
    assert len(of(findings, "gpu-lost")) == 1
    assert [r.attrs["gpu"] for r in of(findings, "row-remap")] == [0]  # GPU 1 could not say: no finding
    assert any("GPU 1: serial not read" in n for n in notes)


def test_nvml_init_failure_is_not_checked():
    result = nvml_probe.probe(FakeNVML([], init_error=FakeNVMLError("Driver Not Loaded")))
    assert result == {"status": "error", "reason": "nvmlInit failed: Driver Not Loaded"}
    findings, notes = _through_parser(result)
    assert findings == [] and notes == ["NVML not checked: nvmlInit failed: Driver Not Loaded"]


def test_nvml_without_pynvml_is_not_checked():
    findings, notes = collectors()["nvml"].parse('{"reason": "pynvml not installed", "status": "not-checked"}\n')
    assert findings == []
    assert notes == ["NVML not checked: pynvml not installed"]


@pytest.mark.skipif(importlib.util.find_spec("pynvml") is not None, reason="pynvml is installed here")
def test_nvml_command_runs_standalone(tmp_path):
    # The real command, run by a shell from an empty directory with no gpu-triage on the path:
    # the probe must stand alone, and without pynvml it says so instead of reporting health.
    command = collectors()["nvml"].command
    assert command.startswith("python3 -c ")
    out = subprocess.run(["sh", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/local/bin:/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"status": "not-checked", "reason": "pynvml not installed"}
    findings, notes = collectors()["nvml"].parse(out.stdout)
    assert findings == [] and notes and "not checked" in notes[0]


# --------------------------------------------------------------------------------------------
# compare(): the node unlike the others
# --------------------------------------------------------------------------------------------

def _node(findings: list[Finding], node: str) -> list[Finding]:
    out = []
    for f in findings:
        copy = Finding(kind=f.kind, attrs=dict(f.attrs), line=f.line, line_no=f.line_no, node=node, source=f.source)
        out.append(copy)
    return out


def _ibstat_ports(name: str) -> list[Finding]:
    """ib-port findings read from a real ibstat capture (just CA, port and state)."""
    findings, ca, port = [], None, None
    for no, line in enumerate((FIXTURES / "compare" / name).read_text().splitlines(), 1):
        if m := re.match(r"^CA '(\S+)'", line):
            ca = m.group(1)
        elif m := re.match(r"^\s+Port (\d+):", line):
            port = m.group(1)
        elif (m := re.match(r"^\s+State:\s*(\S+)", line)) and ca and port:
            findings.append(Finding(kind="ib-port", attrs={"device": ca, "port": int(port), "state": m.group(1)},
                                    line=line.strip(), line_no=no, source="ibstat"))
    return findings


_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _df_shm(name: str) -> Finding:
    """shm-usage finding read from the /dev/shm row of a real df -h capture."""
    for no, line in enumerate((FIXTURES / "compare" / name).read_text().splitlines(), 1):
        cols = line.split()
        if cols and cols[-1] == "/dev/shm":
            size = float(cols[1][:-1].replace(",", ".")) * _UNITS[cols[1][-1]]
            return Finding(kind="shm-usage", attrs={"size_bytes": int(size), "used_pct": float(cols[4].rstrip("%"))},
                           line=line.strip(), line_no=no, source="df")
    raise AssertionError(name)


def _mismatches(result, what):
    return {(f.node, f.attrs["value"], f.attrs["others"]) for f in result if f.attrs["what"] == what}


def test_compare_single_node_and_agreement():
    h100, _ = run("nvidia-smi", "01.txt")
    assert compare({"gpu01": _node(h100, "gpu01")}) == []
    assert compare({n: _node(h100, n) for n in ("gpu01", "gpu02", "gpu03")}) == []
    assert compare({}) == []


def test_compare_driver_and_cuda_majority():
    h100, _ = run("nvidia-smi", "01.txt")
    a10, _ = run("nvidia-smi-q", "02.txt")
    per_node = {n: _node(h100, n) for n in ("gpu01", "gpu02", "gpu03")}
    per_node["gpu04"] = _node(a10, "gpu04")
    result = compare(per_node)
    assert_known(result)
    assert all(f.kind == "node-mismatch" and f.source == "compare" for f in result)
    assert _mismatches(result, "driver") == {("gpu04", "535.129.03", "550.90.07")}
    assert _mismatches(result, "cuda") == {("gpu04", "12.2", "12.4")}
    assert _mismatches(result, "gpu-count") == {("gpu04", 1, "8")}
    driver = next(f for f in result if f.attrs["what"] == "driver")
    assert driver.node == "gpu04" and "535.129.03" in driver.line


def test_compare_tie_reports_both_sides():
    h100, _ = run("nvidia-smi", "01.txt")
    a100, _ = run("nvidia-smi-q", "01.txt")
    per_node = {"a1": _node(h100, "a1"), "a2": _node(h100, "a2"), "b1": _node(a100, "b1"), "b2": _node(a100, "b2")}
    got = _mismatches(compare(per_node), "driver")
    assert got == {("a1", "550.90.07", "460.32.03"), ("a2", "550.90.07", "460.32.03"),
                   ("b1", "460.32.03", "550.90.07"), ("b2", "460.32.03", "550.90.07")}


def test_compare_ib_port_down_on_one_node():
    want_down = facts("compare", "ibstat-02.txt")["down_physical_state"]
    healthy = _ibstat_ports("ibstat-03.txt")
    polling = _ibstat_ports("ibstat-02.txt")
    per_node = {n: _node(healthy, n) for n in ("gpu01", "gpu02", "gpu03")}
    per_node["gpu04"] = _node(polling, "gpu04")
    result = compare(per_node)
    assert_known(result)
    odd = {(f.attrs["device"], f.attrs["value"], f.attrs["others"]) for f in result if f.attrs["what"].startswith("ib-port")}
    assert ("mlx5_11", "Down", "Active") in odd and "mlx5_11/1" in want_down
    assert ("mlx5_5", "Down", "Active") in odd and "mlx5_5/1" in want_down
    assert {f.node for f in result} == {"gpu04"}


def test_compare_shm_small_and_full():
    big = [_df_shm("df-01.txt") for _ in range(3)]
    docker = _df_shm("df-03.txt")
    assert facts("compare", "df-03.txt")["dev_shm"]["docker_default"] is True
    per_node = {f"n{i}": [Finding(kind=f.kind, attrs=dict(f.attrs), line=f.line, node=f"n{i}", source="df")]
                for i, f in enumerate(big)}
    per_node["n9"] = [Finding(kind="shm-usage", attrs=dict(docker.attrs), line=docker.line, node="n9", source="df")]
    result = compare(per_node)
    assert_known(result)
    assert _mismatches(result, "shm-size-bytes") == {("n9", 64 * (1 << 20), 126 * (1 << 30))}
    # CONSTRUCTED: the same healthy 126G /dev/shm, 97% used on one node only.
    per_node["n9"] = [Finding(kind="shm-usage", attrs={**big[0].attrs, "used_pct": 97.0}, node="n9", source="df")]
    assert _mismatches(compare(per_node), "shm-used-pct") == {("n9", 97.0, 1)}


def test_compare_gpu_memory_outlier():
    # CONSTRUCTED variation of nvidia-smi/01.txt: on three nodes every GPU holds ~70 GB of a
    # running job; on the fourth GPU 3 holds 1 MiB (its rank is gone).
    h100, _ = run("nvidia-smi", "01.txt")
    per_node = {}
    for n in ("gpu01", "gpu02", "gpu03", "gpu04"):
        findings = _node(h100, n)
        for g in of(findings, "gpu"):
            g.attrs["memory_used_mib"] = 70211 + g.attrs["index"] * 3
            if n == "gpu04" and g.attrs["index"] == 3:
                g.attrs["memory_used_mib"] = 1
        per_node[n] = findings
    result = [f for f in compare(per_node) if f.attrs["what"] == "gpu-memory-used-mib"]
    assert_known(result)
    assert [(f.node, f.attrs["gpu"], f.attrs["value"]) for f in result] == [("gpu04", 3, 1)]


def test_compare_ignores_nodes_without_evidence():
    h100, _ = run("nvidia-smi", "01.txt")
    lost, _ = run("nvidia-smi", "03.txt")  # nvidia-smi failed: no GPU table, no version
    per_node = {"gpu01": _node(h100, "gpu01"), "gpu02": _node(h100, "gpu02"), "gpu03": _node(lost, "gpu03")}
    assert compare(per_node) == []  # gpu03's gpu-lost stands on its own; no fake "0 GPUs" mismatch
