"""The JSON answer stays bounded on an error storm: of each finding kind the first 200 are listed,
then only findings that say something new (another XID code), and the rest are counted."""

import tempfile

from bot.engine import Engine
from bot.render import FINDINGS_PER_KIND, as_dict

# real lines (tests/corpus): an IB completion error and two XIDs
WARN = ("kp-ddp-worker-{w}:3468:3905 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer "
        "10.216.210.236<54862> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid "
        "fd00:1148:9000:5000:4:200:3:ff22 remoteGidsfd00:1148:9000:5000:4:200:3:ff1f")
XID79 = "[74889.644138] NVRM: Xid (PCI:0000:02:00): 79, GPU has fallen off the bus."
XID145 = "kernel: NVRM: Xid (PCI:...): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 11 (...)"


def test_a_storm_lists_each_kind_once_per_new_fact_and_counts_the_rest():
    lines = [WARN.format(w=i % 64) for i in range(900)] + [XID79] * 300 + [XID145]
    with tempfile.TemporaryDirectory() as tmp:
        d = Engine(data_dir=tmp).diagnose_text("\n".join(lines))
    doc = as_dict(d)
    kinds: dict[str, int] = {}
    for f in doc["findings"]:
        kinds[f["kind"]] = kinds.get(f["kind"], 0) + 1
    assert all(n <= FINDINGS_PER_KIND + 1 for n in kinds.values()), kinds
    # the XID past the cap with a new code is listed; the repeats are counted, per kind
    assert {f["attrs"].get("code") for f in doc["findings"] if f["kind"] == "xid"} == {79, 145}
    total = {}
    for f in d.findings:
        total[f.kind] = total.get(f.kind, 0) + 1
    for kind, n in total.items():
        assert kinds.get(kind, 0) + doc.get("findings_omitted", {}).get(kind, 0) == n, kind
    assert doc["findings_omitted"]["xid"] >= 300 - FINDINGS_PER_KIND
    assert doc["causes"] and doc["causes"][0]["category"] == "gpu-hardware"


def test_a_small_answer_lists_every_finding():
    with tempfile.TemporaryDirectory() as tmp:
        d = Engine(data_dir=tmp).diagnose_text("\n".join([XID79, WARN.format(w=1)]))
    doc = as_dict(d)
    assert len(doc["findings"]) == len(d.findings) and "findings_omitted" not in doc
