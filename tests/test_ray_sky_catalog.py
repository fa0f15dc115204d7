"""The Ray/KubeRay rows on resources that never arrive and nodes taken away, and the SkyPilot catalog:
each example alone names its category and family, and the lines around them that say something
else are not read as a scheduler event."""

from __future__ import annotations

import pytest


# rows added for the autoscaler v1/v2, pending leases, Train/Tune start-up and failure policy,
# KubeRay, and the SkyPilot catalog: the family each example must be heard in
PENDING = "family-scheduler-termination"
NODE = "family-node-failure"


def _rows(shipped, prefixes, source):
    return [r for r in shipped.rows
            if r.path.endswith(f"/{source}.yaml") and r.id.startswith(prefixes)]


def test_skypilot_catalog_is_picked_up(shipped):
    rows = [r for r in shipped.rows if r.path.endswith("/skypilot.yaml")]
    assert len(rows) >= 15, len(rows)
    assert {r.library for r in rows} == {"SkyPilot (managed jobs, SkyServe, provisioning)"}
    assert all(r.id.startswith("skypilot-") for r in rows)


@pytest.mark.parametrize("example,family", [
    ("(autoscaler +9m40s) Warning: The following resource request cannot be scheduled right now: "
     "{'CPU': 1.0, 'GPU': 1.0}. This is likely due to all cluster resources being claimed by actors.", PENDING),
    ("Error: No available node types can fulfill resource request {'GPU': 8.0}. Add suitable node types "
     "to this cluster to resolve this issue.", PENDING),
    ("TimeoutError: Placement group creation timed out. Make sure your cluster either has enough resources "
     "or use an autoscaling cluster.", PENDING),
    ("Update instance RAY_RUNNING->RAY_STOPPED (id=8c1f, type=gpu, cloud_instance_id=i-0a1b, ray_id=3a4b): "
     "ray node 3a4b is DEAD", NODE),
    ("Update instance RAY_RUNNING->TERMINATED (id=8c1f, type=gpu, cloud_instance_id=i-0a1b, ray_id=3a4b): "
     "cloud instance i-0a1b no longer found", PENDING),
    ("I 05-01 10:20:11 recovery_strategy.py:1310] Retrying to launch the cluster in 60.0 seconds.", PENDING),
    ("I 05-01 11:02:13 replica_managers.py:1249] Replica 3 is preempted: its spot instance is no longer up "
     "(status: STOPPED). Recycling the replica.", PENDING),
])
def test_a_taken_or_missing_resource_names_the_scheduler_family(engine, example, family):
    d = engine.diagnose_text(example)
    assert d.causes, example
    top = d.causes[0]
    assert top.category == "scheduler", [(c.id, c.confidence) for c in d.causes]
    assert top.id == family or not top.entry.backstop, [(c.id, c.confidence) for c in d.causes]


@pytest.mark.parametrize("line", [
    # the autoscaler removing an idle node it chose itself: no cloud reclaim
    "Update instance TERMINATING->TERMINATED (id=8c1f, type=gpu, cloud_instance_id=i-0a1b, ray_id=3a4b): "
    "cloud instance i-0a1b no longer found",
    # a drain the autoscaler requested (idle), and a node that finished it
    "Update instance RAY_STOPPING->RAY_STOPPED (id=8c1f, type=gpu, cloud_instance_id=i-0a1b, ray_id=3a4b): "
    "ray node 3a4b is DEAD",
    "Instance 8c1f(RAY_STOPPING) is stuck in RAY_STOPPING for 700.0 seconds.",
    "Removing 2 nodes of type gpu-worker (idle).",
])
def test_the_autoscaler_own_scale_down_is_not_a_catalogued_failure(shipped, line):
    from collectors.findings import LogLine

    hits = [h for h in shipped.scan([LogLine(text=line, line_no=1)]) if h.row.path.endswith("/ray.yaml")]
    assert not hits, [h.row.id for h in hits]
