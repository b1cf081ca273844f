"""Reactions to the floors below (connected in ProvisioningConfig.ready())."""
from __future__ import annotations

from django.dispatch import receiver

from nodepools.signals import pool_updating
from provisioning.services import pool_gpu_limit_write_through


@receiver(pool_updating)
def pool_gpu_limit_follows_to_the_nodepool(sender, pool, changes, **kwargs):
    """A Karpenter-backed pool's GPU limit edited on the pool form: the NodePool's limit follows."""
    if "gpu_limit" in changes:
        pool_gpu_limit_write_through(pool=pool, gpu_limit=changes["gpu_limit"])
