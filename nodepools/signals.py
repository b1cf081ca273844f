"""What this floor tells the apps above it. Apps above (projects) connect receivers at start-up, so
that a cross-app reaction (a new pool gets zero quota rows) goes one way: nodepools imports none of them.
"""
from django.dispatch import Signal

# Sent inside the creating transaction, after the pool is saved: `pool=`.
pool_created = Signal()
# Sent inside the deleting transaction, before the cluster is deleted: `cluster=`. Receivers remove
# what a plain cascade cannot (projects are protected by their departments).
cluster_deleting = Signal()
# Sent inside the updating transaction, after the changes are set and checked and before the pool is saved:
# `pool=` (with its new values), `changes=` (field -> new value). A receiver may refuse the change by
# raising ValidationError naming the field (e.g. the cluster refused to follow it); nothing is saved then.
pool_updating = Signal()
