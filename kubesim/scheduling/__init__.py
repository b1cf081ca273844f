"""The emulator's schedulers, each written from its project's own published documentation and chosen by a
pod's ``schedulerName``: pure cores over plain snapshots (``fit``: filters and free resources; ``default``:
the Kubernetes default scheduler; ``kai_share`` and ``kai``: KAI Scheduler's queues and cycle; ``kueue``:
Kueue's admission) and the adapters that read the store and write their decisions back (``adapter``,
``kueue_adapter``)."""
