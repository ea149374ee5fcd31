"""Pin verl resource pools to the Ray nodes that carry a custom resource.

verl places each resource pool as placement groups of ``{"CPU": n, <device>: 1}`` bundles and
lets Ray pick the nodes; no config key says which node a pool goes to. Its ``RayResourcePool``
does carry one extra bundle requirement, ``accelerator_type`` (a Ray resource name every bundle
asks ``1e-4`` of), that verl's trainers never set. :class:`PinnedResourcePoolManager` sets it
from a ``pool -> resource`` mapping after verl has sized the pools and before any placement
group exists, so a pool can start only on nodes started with that resource (``ray start
--resources='{"trainer_node": 1}'``). A resource that no node has would leave the placement
group pending forever; it is refused at once instead, naming the setting.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import ray
from verl.single_controller.ray.base import ResourcePoolManager


@dataclass
class PinnedResourcePoolManager(ResourcePoolManager):
    """verl's ``ResourcePoolManager`` whose named pools require a custom Ray resource."""

    #: pool name -> custom Ray resource its bundles require
    node_resources: dict[str, str] = field(default_factory=dict)
    #: the settings key the mapping came from, for errors
    where: str = "node_resources"

    def create_resource_pool(self) -> None:
        problems = [
            f"{self.where}.{pool}: this run has no resource pool {pool!r} (its pools: {sorted(self.resource_pool_spec)})"
            for pool in sorted(set(self.node_resources) - set(self.resource_pool_spec))
        ]
        cluster = ray.cluster_resources()
        problems += [
            f"{self.where}.{pool}: no node of the Ray cluster has the resource {resource!r}; start the "
            f"node(s) for this pool with `ray start ... --resources='{{\"{resource}\": 1}}'` "
            f"(cluster resources: {sorted(cluster)})"
            for pool, resource in sorted(self.node_resources.items())
            if pool in self.resource_pool_spec and cluster.get(resource, 0) <= 0
        ]
        if problems:
            raise ValueError("resource pool placement:\n  " + "\n  ".join(problems))
        super().create_resource_pool()
        for pool, resource in self.node_resources.items():
            self.resource_pool_dict[pool].accelerator_type = resource


def pin_resource_pools(manager: ResourcePoolManager, node_resources: dict[str, str], where: str) -> ResourcePoolManager:
    """``manager`` as a :class:`PinnedResourcePoolManager` (itself when nothing is pinned)."""
    if not node_resources:
        return manager
    return PinnedResourcePoolManager(
        resource_pool_spec=manager.resource_pool_spec,
        mapping=manager.mapping,
        max_colocate_count=manager.max_colocate_count,
        node_resources=dict(node_resources),
        where=where,
    )
