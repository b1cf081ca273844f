"""The console as the control plane of a scheduler: it writes and watches the scheduler's queues
(KAI Scheduler or Kueue) from the pools and quotas it records, and explains what waits and why."""
