"""The live mirror of each cluster's Kubernetes objects (docs/concepts.md#sync), kept as Kubernetes' informers do.

Modules by concern:

- `options`: the tunables (each a `sync_clusters` option);
- `resources`: what is mirrored, one `Resource` registration per Kubernetes resource (Nodes, Pods);
- `informer`: list (paginated) + watch (bookmarks, resume, relist on 410, jittered backoff), raw JSON;
- `mirror`: the in-memory index of stored rows (only changed rows are written; mark-and-sweep);
- `derived`: node pool membership, status and not-ready reasons (in Python per dirty node, or set-wise
  in SQL on PostgreSQL's bulk path);
- `writer`: the SQL that writes rows (row by row, or in bulk through COPY on PostgreSQL);
- `leadership`: one leader per cluster, its heartbeat, the write fence, hung-leader takeover;
- `hints`: coalesced change hints to the live pages;
- `worker`: one cluster's informers and writer (`ClusterSync`); `runner`: sync_clusters' threads.
"""
from nodepools.sync.informer import Backoff, Gone, Informer, StreamBroken, api_client_for
from nodepools.sync.leadership import (
    FENCE_KEY, LEADER_KEY, LeadershipLost, PgLeadership, SingleLeadership, leadership_for,
)
from nodepools.sync.mirror import Mirror
from nodepools.sync.options import SyncOptions
from nodepools.sync.resources import NODES, PODS, REGISTRY, Resource, register
from nodepools.sync.runner import ClusterRunner, run_clusters
from nodepools.sync.worker import ClusterSync

__all__ = [
    "Backoff", "ClusterRunner", "ClusterSync", "FENCE_KEY", "Gone", "Informer", "LEADER_KEY", "LeadershipLost",
    "Mirror", "NODES", "PODS", "PgLeadership", "REGISTRY", "Resource", "SingleLeadership", "StreamBroken",
    "SyncOptions", "api_client_for", "leadership_for", "register", "run_clusters",
]
