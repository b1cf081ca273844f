"""`sync_clusters`' threads: one runner per registered cluster, standby until leader, then sync."""
from __future__ import annotations

import logging
import threading

from django.db import connections, transaction

from audit.context import via
from common import metrics
from nodepools import versions
from nodepools.models import Cluster, ConnectionState, Node, NodeStatus
from nodepools.sync.informer import Backoff
from nodepools.sync.leadership import LeadershipLost, PgLeadership, leadership_for
from nodepools.sync.options import SyncOptions
from nodepools.sync.worker import ClusterSync

logger = logging.getLogger("nodepools.sync")


class ClusterRunner(threading.Thread):
    """sync_clusters' thread for one cluster: standby until leader, then sync; again after any failure."""

    def __init__(self, cluster_id: int, options: SyncOptions) -> None:
        super().__init__(name=f"sync:{cluster_id}", daemon=True)
        self.cluster_id, self.options = cluster_id, options
        self.stop_event = threading.Event()

    def stop(self) -> None:
        self.stop_event.set()

    def run(self) -> None:
        with via("sync"):
            try:
                self._run()
            finally:
                connections.close_all()

    def _run(self) -> None:
        backoff = Backoff(self.options.backoff_base, self.options.backoff_max)
        while not self.stop_event.is_set():
            leadership = leadership_for(self.cluster_id, self.options)
            worker = None
            try:
                cluster = Cluster.objects.filter(pk=self.cluster_id).first()
                if cluster is None:
                    return
                if isinstance(leadership, PgLeadership):
                    logger.info("cluster %s: standby, waiting for the leader lock", cluster.name)
                if not leadership.acquire(self.stop_event):
                    return
                cluster.refresh_from_db()
                logger.info("cluster %s: leader; syncing", cluster.name)
                metrics.sync_leadership(cluster.name, True)
                worker = ClusterSync(cluster, self.options, leadership)
                try:
                    worker.start()
                except Exception as exc:
                    self._unreachable(cluster, f"cannot reach the cluster: {exc}", leadership)
                    raise
                worker.run(self.stop_event)
                backoff.reset()
            except LeadershipLost as exc:
                logger.warning("cluster %s: lost leadership: %s; standing by", self.cluster_id, exc)
            except Exception as exc:
                delay = backoff.next()
                logger.exception("cluster %s: sync failed (%s); restarting in %.1fs", self.cluster_id, exc, delay)
                self._record_failure(exc, leadership)
                self.stop_event.wait(delay)
            finally:
                if worker is not None:
                    worker.stop()
                    metrics.sync_leadership(worker.cluster.name, False)
                leadership.release()
                connections.close_all()

    @staticmethod
    def _unreachable(cluster: Cluster, error: str, leadership) -> None:
        """No client at all (e.g. the kubeconfig is gone): unreachable, its nodes Unknown, nothing deleted."""
        try:
            with transaction.atomic():
                leadership.fence()
                versions.lock(cluster.pk)
                Cluster.objects.filter(pk=cluster.pk).update(connection_state=ConnectionState.UNREACHABLE,
                                                             last_error=error[:2000])
                Node.objects.filter(cluster=cluster).exclude(status=NodeStatus.UNKNOWN).update(status=NodeStatus.UNKNOWN)
        except Exception:
            logger.exception("cluster %s: could not record that it is unreachable", cluster.name)

    def _record_failure(self, exc: BaseException, leadership) -> None:
        try:
            with transaction.atomic():
                leadership.fence()
                Cluster.objects.filter(pk=self.cluster_id).update(last_error=str(exc)[:2000])
        except Exception:
            pass


def run_clusters(stop: threading.Event, options: SyncOptions, names: list[str] | None = None) -> None:
    """sync_clusters' loop: keep one runner per registered cluster until `stop` is set."""
    runners: dict[int, ClusterRunner] = {}
    try:
        while not stop.is_set():
            clusters = Cluster.objects.all()
            if names:
                clusters = clusters.filter(name__in=names)
            wanted = set(clusters.values_list("pk", flat=True))
            connections.close_all()
            for pk in wanted - set(runners):
                runners[pk] = ClusterRunner(pk, options)
                runners[pk].start()
            for pk in set(runners) - wanted:
                runners.pop(pk).stop()
            for pk, runner in list(runners.items()):
                if not runner.is_alive():  # the cluster vanished or the runner ended: look again later
                    runners.pop(pk)
            stop.wait(options.rescan)
    finally:
        for runner in runners.values():
            runner.stop()
        for runner in runners.values():
            runner.join(timeout=10)
