"""The checkpoint-storage catalog (knowledge/catalog/storage.yaml): shared file-system clients (Lustre,
LNet, BeeGFS), FUSE mounts of object stores and the object-store client libraries. Each row is in the
checkpoint-storage category; the kernel NFS rules and the errno rules that were there before keep working;
healthy chatter from the same software gets no confident cause."""

from __future__ import annotations

import pytest

from knowledge import catalog as cat
from catalog_helpers import first_cause as _top


@pytest.fixture(scope="module")
def storage_rows():
    rows = [r for r in cat.load().rows if r.path.endswith("storage.yaml")]
    assert len(rows) >= 60, len(rows)
    return rows


def test_every_storage_row_is_checkpoint_storage_with_provenance(storage_rows):
    for row in storage_rows:
        assert row.category == "checkpoint-storage", row.id
        assert row.family == "family-storage-io", row.id
        assert row.where and row.example, row.id


@pytest.mark.parametrize("line, entry", [
    # Lustre: a lost OST connection is a stall that blocks I/O until recovery
    ("Lustre: scratch-OST0003-osc-ffff8a3c1e2b5000: Connection to scratch-OST0003 (at 10.0.0.5@o2ib) was lost; "
     "in progress operations using this service will wait for recovery to complete", "ckpt-nfs-parallel-fs-stall"),
    ("LustreError: 11-0: scratch-OST0003-osc-ffff8a3c1e2b5000: operation ost_write to node 10.0.0.5@o2ib failed: "
     "rc = -107", None),
    ("LustreError: 167-0: scratch-MDT0000-mdc-ffff8a3c1e2b5000: This client was evicted by scratch-MDT0000; in "
     "progress operations using this service will fail.", None),
    ("beegfs: FhgfsOpsCommKit (write file): Communication timeout in RECVDATA stage. Node: storage03 "
     "[beegfs-storage:3]", "ckpt-nfs-parallel-fs-stall"),
    ("s3fs[23456]: curl.cpp:RequestPerform(2155): HTTP response code 503, returning EIO. Body Text: <Error><Code>"
     "SlowDown</Code></Error>", None),
    ("botocore.exceptions.ClientError: An error occurred (SlowDown) when calling the UploadPart operation "
     "(reached max retries: 4): Please reduce your request rate.", None),
    ('botocore.exceptions.ConnectionClosedError: Connection was closed before we received a valid response from '
     'endpoint URL: "https://my-ckpts.s3.us-east-1.amazonaws.com/run42/step_12000/model_00.pt".', None),
    ("botocore.exceptions.ClientError: An error occurred (ExpiredToken) when calling the PutObject operation: "
     "The provided token has expired.", None),
    ("gcsfs.retry.HttpError: We encountered an internal error. Please try again., 503", None),
    ("ErrorCode:ServerBusy", None),
])
def test_storage_messages_are_checkpoint_storage(engine, line, entry):
    top = _top(engine, line)
    assert top is not None and top.category == "checkpoint-storage", (top.id if top else None)
    if entry:
        assert top.id == entry, top.id


def test_a_wrapped_upload_failure_speaks_for_the_inner_error(engine):
    # boto3's S3UploadFailedError frames the botocore ClientError; the frame alone still names the layer
    framed = ("boto3.exceptions.S3UploadFailedError: Failed to upload /local_nvme/ckpt/model_00.pt to "
              "my-ckpts/run42/model_00.pt: An error occurred (SlowDown) when calling the UploadPart operation "
              "(reached max retries: 4): Please reduce your request rate.")
    top = _top(engine, framed)
    assert top is not None and top.category == "checkpoint-storage"


@pytest.mark.parametrize("line, entry", [
    # the rules that were there before this catalog: kernel NFS, and the errnos as Python prints them
    ("nfs: server fs01.cluster.local not responding, still trying", "ckpt-nfs-parallel-fs-stall"),
    ("OSError: [Errno 122] Disk quota exceeded", "ckpt-disk-quota-exceeded"),
    ("OSError: [Errno 28] No space left on device", "ckpt-disk-full"),
    ("OSError: [Errno 5] Input/output error: '/mnt/s3/ckpt'", "ckpt-stale-handle-readonly-fs"),
    ("OSError: [Errno 107] Transport endpoint is not connected: '/mnt/gcs/ckpt/step_1000'",
     "ckpt-stale-handle-readonly-fs"),
])
def test_existing_storage_rules_still_hold(engine, line, entry):
    top = _top(engine, line)
    assert top is not None and top.id == entry, (top.id if top else None)


@pytest.mark.parametrize("line", [
    "Lustre: scratch-OST0003-osc-ffff8a3c1e2b5000: Connection restored to 10.0.0.5@o2ib (at 10.0.0.5@o2ib)",
    "Lustre: Mounted scratch-client",
    "nfs: server fs01.cluster.local OK",
    "beegfs: MessagingTk (connect): Connected: storage03 [beegfs-storage:3]@10.0.0.7:8003 (protocol: RDMA)",
    '{"severity":"INFO","message":"File system has been successfully mounted."}',
    "upload: ./ckpt/model_00.pt to s3://my-ckpts/run42/model_00.pt",
])
def test_healthy_storage_chatter_gets_no_confident_cause(engine, line):
    d = engine.diagnose_text(line)
    assert not [c for c in d.causes if c.confidence >= 0.5], [(c.id, c.confidence) for c in d.causes]
