"""A controller of load agents on the lab's loader hosts, to be killed: it starts group zone-a on
ld-a and zone-b on ld-b (through the lab's Ray cluster when the inventory has one), prints
`started` once they load, and then only keeps their lease until it is killed.

    python tests/integration/loaders_controller.py INVENTORY RUN_ID LEASE_S
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from chaoskit.inventory.fanout import RemotePool
from chaoskit.inventory.loader import load_inventory
from chaoskit.recorder import Recorder
from chaoskit.workload.placement import loader_agent_sources
from chaoskit.workload.runner import LoadRunner, LoadSpec
from chaoskit.workload.spec import ClientGroup
from chaoskit.workload.workloads import WorkloadParams


def main() -> None:
    inv = load_inventory(Path(sys.argv[1]))
    spec = LoadSpec(workload="ledger", workers=4, params=WorkloadParams(table_rows=2_000),
                    groups=(ClientGroup("zone-a", workers=2), ClientGroup("zone-b", workers=2, first_worker=3)))
    pool = RemotePool(inv)
    runner = LoadRunner(inv.clusters["pg"], inv, spec, Recorder(base=time.time()),
                        make_sources=loader_agent_sources(pool, {"zone-a": ("ld-a",), "zone-b": ("ld-b",)},
                                                          sys.argv[2], lease_s=float(sys.argv[3])))
    runner.setup()
    runner.start()
    print("started", flush=True)
    time.sleep(600)


if __name__ == "__main__":
    main()
