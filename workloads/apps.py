from django.apps import AppConfig

from ui import slots


class WorkloadsConfig(AppConfig):
    name = "workloads"
    verbose_name = "Workloads through pools"

    def ready(self) -> None:
        # late: apps' models and services load only once Django's app registry is ready (AppConfig.ready)
        from workloads import receivers  # noqa: F401  (a new cluster gets OSMO's shipped rule sets)
        # The sync mirrors Jobs into Workload rows, and the schedulers' PodGroups, Workloads and eviction
        # Events: registered from this (upper) app.
        from workloads.sync import register_jobs, register_scheduler_resources, register_unmanaged

        register_jobs()
        register_unmanaged()  # the pods no Job owns (bare pods, other controllers') are workloads too
        # Its sections on the pool page of nodepools, which never names this app (ui/slots.py).
        slots.register("pool-detail.workloads", library="workloads_ui", tag="pool_platforms_section")
        slots.register("pool-detail.workloads", library="workloads_submit", tag="pool_submit_line")
        slots.register("capacity-preview.consequences", library="workloads_ui", tag="preview_platforms_left_empty")
        slots.register("project-detail.start-estimates", library="workloads_forecast", tag="project_start_estimates")
        register_scheduler_resources()
        from workloads import forecast  # noqa: F401  (the start estimates join what workloads_enrich attaches)
