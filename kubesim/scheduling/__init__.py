"""The emulator's schedulers, chosen by a pod's ``schedulerName``: pure cores over plain snapshots
(``fit``: filters and free resources; ``default``: the Kubernetes default scheduler; ``kai_share`` and
``kai``: KAI Scheduler's queues and cycle) and the adapter that reads the store and writes their
decisions back (``adapter``)."""
