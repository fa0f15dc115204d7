"""Open MPI transport rows (knowledge/catalog/mpi.yaml: the TCP BTL and OOB, openib, the BML and the UCX
PML) and the UCX catalog (knowledge/catalog/ucx.yaml): wrong or duplicate interfaces, unreachable or vanished
peers and IB completion errors are communication; a locked-memory shortage at registration is host-memory
(memlock-limit-too-low); an old UCX under Open MPI is a version mismatch."""

from __future__ import annotations

import pytest

from knowledge import catalog as cat
from catalog_helpers import first_cause as _top


@pytest.fixture(scope="module")
def rows():
    return cat.load().rows


def test_ucx_catalog_rows_have_provenance_and_a_known_family(rows):
    ucx = [r for r in rows if r.path.endswith("ucx.yaml")]
    assert len(ucx) >= 15, len(ucx)
    for row in ucx:
        assert row.where and row.example, row.id
        # the network transports, the locked-memory limit, and the shared-memory transports (src/uct/sm/mm)
        assert row.category in ("communication", "host-memory", "shared-memory"), row.id
        assert (row.category == "shared-memory") == (row.family == "family-shared-memory"), row.id


@pytest.mark.parametrize("line, category, entry", [
    # two nodes answering on the same docker0/virbr0 address: the BTL reaches the wrong process
    ("[gpu-a17][[41877,1],3][btl_tcp_endpoint.c:625:mca_btl_tcp_endpoint_recv_connect_ack] received unexpected "
     "process identifier [[41877,1],9]", "communication", None),
    ("[gpu-a17][[41877,1],3][btl_tcp_endpoint.c:667:mca_btl_tcp_endpoint_recv_connect_ack] received unexpected "
     "process identifier: got [[41877,1],9] expected [[41877,1],2]", "communication", None),
    ("[gpu-a17:41877] [[41877,0],1] tcp_peer_recv_connect_ack: received unexpected process identifier "
     "[[41877,0],3] from [[41877,0],2]", "communication", None),
    ("[gpu-a17][[41877,1],3][btl_tcp_endpoint.c:793:mca_btl_tcp_endpoint_start_connect] peer: gpu-a18 Unable to "
     "connect to the peer 172.17.0.1 on port 1025: Connection refused", "communication", None),
    ("At least one pair of MPI processes are unable to reach each other for", "communication", None),
    ("[gpu-a17:41877] [[41877,0],1] orte_tcp_peer_try_connect: tcp_peer_send_connect_ack to proc [[41877,0],0] "
     "on 172.17.0.1:40123 failed: Connection refused (111)", "communication", None),
    # openib (Open MPI 4.1)
    ("The InfiniBand retry count between two MPI processes has been", "communication",
     "ib-transport-retry-exceeded"),
    ("memlock limits are set too low.  For most HPC installations, the", "host-memory", "memlock-limit-too-low"),
    # the UCX PML
    ("[gpu-a17:41877:0:41877] pml_ucx.c:940  Error: ucx send failed: Endpoint timeout", "communication", None),
    ("pml_ucx.c:219  Warning: UCX version 1.8.0 is too old, please install 1.9.x or newer", "software", None),
    # UCX itself
    ("[1714620247.512718] [gpu-a17:41877:0]      ib_mlx5_log.c:179  UCX  ERROR Transport retry count exceeded "
     "on mlx5_0:1/IB (synd 0x15 vend 0x81 hw_synd 0/0)", "communication", "ib-transport-retry-exceeded"),
    ("[gpu-a17:41877:0:41877]      ud_ep.c:278  Fatal: UD endpoint 0x1c9b4e0 to <no debug data>: unhandled "
     "timeout error", "communication", None),
    ("[1714620247.512718] [gpu-a17:41877:0]          ucp_ep.c:1661 UCX  ERROR ep 0x7f3a2c0c8000: error "
     "'Connection reset by remote peer' on rc_mlx5/mlx5_0:1 will not be handled since no error callback is "
     "installed", "communication", None),
    ("[1714620247.512718] [gpu-a17:41877:0]         select.c:722  UCX  ERROR no active messages transport to "
     "<no debug data>: self/memory - Destination is unreachable, tcp/docker0 - no am bcopy", "communication", None),
    ("[1714620247.512718] [gpu-a17:41877:0]          ib_md.c:316  UCX  ERROR ibv_reg_mr(address=0x7f2a40000000, "
     "length=268435456, access=0xf) failed: Cannot allocate memory : Please set max locked memory (ulimit -l) to "
     "'unlimited' (current: 65536 kbytes)", "host-memory", None),
    # UCX's locked-memory hint alone names the cause; with "Cannot allocate memory" in the same line the
    # parser's generic host-oom finding still leads to another host-memory entry (same category)
    ("Please set max locked memory (ulimit -l) to 'unlimited' (current: 65536 kbytes)", "host-memory",
     "memlock-limit-too-low"),
    ("[1714620247.512718] [gpu-a17:41877:0]        ib_iface.c:1376 UCX  ERROR mlx5_0: ibv_create_cq(cqe=4096) "
     "failed: Cannot allocate memory", "host-memory", None),
    # UCX's shared-memory transport in a pod whose /dev/shm is the container default
    ("[1714620247.512718] [worker-0:41877:0]        mm_iface.c:798  UCX  ERROR mm_iface failed to allocate "
     "receive FIFO", "shared-memory", None),
    ("[1714620247.512718] [worker-0:41877:0]        mm_posix.c:206  UCX  ERROR Not enough memory to write total "
     "of 4198400 bytes. Please check that /dev/shm or the directory you specified has more available memory.",
     "shared-memory", None),
])
def test_mpi_and_ucx_transport_messages(engine, line, category, entry):
    top = _top(engine, line)
    assert top is not None and top.category == category, (top.id if top else None)
    if entry:
        assert top.id == entry, top.id


def test_ucx_status_strings_alone_are_not_catalogued(rows):
    # "Input/output error" and "No such device" are glibc strerror texts too; UCX's are only matched in a frame
    ucx = [r for r in rows if r.path.endswith("ucx.yaml")]
    for row in ucx:
        assert (row.text or "").strip() not in ("Input/output error", "No such device",
                                                "Connection reset by remote peer", "Endpoint timeout"), row.id
