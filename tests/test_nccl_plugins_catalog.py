"""The NCCL network-plugin catalog (knowledge/catalog/nccl_plugins.yaml): aws-ofi-nccl (EFA), the SHARP/UCX
plugins, GPUDirect-TCPX and the libfabric EFA provider. Transport failures are communication; registration
that fails with ENOMEM is the locked-memory limit (as in nccl.yaml); a provider or libfabric that cannot do
what the plugin needs is a version mismatch; follow-on init lines are pointers."""

from __future__ import annotations

import pytest

from knowledge import catalog as cat
from catalog_helpers import first_cause as _top


@pytest.fixture(scope="module")
def plugin_rows():
    rows = [r for r in cat.load().rows if r.path.endswith("nccl_plugins.yaml")]
    assert len(rows) >= 100, len(rows)
    return rows


def test_rows_have_provenance_and_known_families(plugin_rows):
    families = {"family-nccl-net-transport", "family-version-mismatch", "family-launch-config", "family-host-oom"}
    for row in plugin_rows:
        assert row.where and (row.text or row.pattern), row.id
        assert row.family in families, row.id
        if row.family == "family-host-oom":
            assert row.entry == "memlock-limit-too-low", row.id
    ids = {r.id for r in plugin_rows}
    assert {"ofi-request-completed-with-error", "ofi-initialization-failed", "efa-peer-becomes-unresponsive",
            "sharp-coll-init-error", "tcpx-failed-to-connect-socket"} <= ids


@pytest.mark.parametrize("line, category", [
    ("ip-10-1-2-3:48213:48790 [3] NCCL WARN NET/OFI Request 0x7f1b4c0a2d80 completed with error. RC: 5. "
     "Error: 4124 (Unresponsive receiver (connection previously established)). Completed length: 0, "
     "Request: { dev: 3, size: 0, state: CREATED, type: SEND_CTRL }", "communication"),
    ("ip-10-1-2-3:48213:48790 [0] NCCL WARN NET/OFI Unable to insert remote address into address vector "
     "for device 0. RC: Invalid argument", "communication"),
    ("ip-10-1-2-3:48213:48790 [1] NCCL WARN NET/OFI Unable to register memory (type = 1) for device 0. "
     "RC: -12, Error: Cannot allocate memory", "host-memory"),
    ("ip-10-1-2-3:48213:48213 [0] NCCL WARN NET/OFI OFI fi_getinfo() call failed: No data available", "software"),
    ("ip-10-1-2-3:48213:48213 [0] NCCL WARN NET/OFI EFA provider requires at least libfabric version 1.22.0.",
     "software"),
    ("libfabric:48213:1718044712::efa:cq:efa_rdm_cq_poll_ibv_cq():633<warn> The peer of address "
     "fi_addr_efa://[fe80::4d1:22ff:fe3c:a10b]:1:987654321 becomes unresponsive", "communication"),
    ("node-7:5521:5630 [0] NCCL WARN NET/IB : SHARP coll init error: Cannot connect to SHARPD(-53)", "communication"),
    ("a3-node-3:771:902 [2] NCCL WARN NET/GPUDirectTCPX failed to connect socket", "communication"),
])
def test_plugin_messages_are_diagnosed_in_their_category(engine, line, category):
    top = _top(engine, line)
    assert top is not None and top.category == category, (top.id if top else None)


def test_memlock_registration_failure_is_host_memory(engine):
    # the rows point at memlock-limit-too-low; the generic ENOMEM entry may still lead (same category)
    top = _top(engine, "NET/OFI Couldn't register memory region with regattr. RC: -12, ERROR: Cannot allocate memory")
    assert top is not None and top.category == "host-memory", (top.id if top else None)


def test_a_follow_on_init_line_alone_is_no_confident_cause(engine):
    rows = [r for r in cat.load().rows if r.id in ("ofi-initialization-failed", "ofi-failed-to-initialize-protocol")]
    assert rows and all(r.pointer for r in rows)
