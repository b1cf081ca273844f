"""Tables of platforms, pod templates and rule sets (django-tables2): every column declared, a
default set chosen; the user's choice of columns is saved through the `ui` app."""

from __future__ import annotations

from decimal import Decimal

import django_tables2 as tables
from django.urls import reverse
from django.utils.safestring import mark_safe
from django.utils.timesince import timesince

from nodepools.tables import GpuMetricColumn, NumberColumn
from ui.formats import number as _num
from ui.html import format_html
from ui.paths import path_to
from ui.tables import ConsoleTable
from ui.views import register
from workloads import engine, selectors

# Long text (reasons, selectors, descriptions) wraps in its cell rather than widening the page.
WRAP = {"td": {"class": "wrap"}}


def _pairs(mapping) -> str:
    return ", ".join(f"{k}={v}" for k, v in (mapping or {}).items())


def _enrich_platforms(platforms: list) -> None:
    """Nodes and GPUs (total / free) of each platform, and whether it is its pool's default: the pools'
    nodes are read once per pool on the page."""
    by_pool: dict[int, list] = {}
    for platform in platforms:
        by_pool.setdefault(platform.pool_id, []).append(platform)
    for pool_platforms in by_pool.values():
        pool = pool_platforms[0].pool
        nodes = selectors.pool_node_views(pool=pool)
        default_id = selectors.pool_settings(pool=pool).default_platform_id
        for platform in pool_platforms:
            members = engine.platform_nodes(node_selector=platform.node_selector, tolerations=platform.tolerations,
                                            nodes=nodes)
            platform.node_count = len(members)
            platform.gpus_total = sum((Decimal(n.gpu_allocatable) for n in members), Decimal(0))
            platform.gpus_free = sum((Decimal(n.gpus) for n in members if n.ready), Decimal(0))
            platform.is_default = platform.pk == default_id


@register
class PlatformTable(ConsoleTable):
    key = "platforms"
    default_columns = ("name", "pool", "cluster", "is_default", "node_selector", "node_count", "gpus_total",
                       "gpus_free", "privileged_allowed", "host_network_allowed")
    enrich = staticmethod(_enrich_platforms)

    name = tables.Column("Platform", linkify=lambda record: path_to("platform-detail", record.pk))
    pool = tables.Column("Node pool", accessor="pool__name", order_by=("pool__name",),
                         linkify=lambda record: path_to("pool-platforms", record.pool_id))
    cluster = tables.Column("Cluster", accessor="pool__cluster__name", order_by=("pool__cluster__name",))
    is_default = tables.BooleanColumn("Pool's default", empty_values=(), orderable=False)
    description = tables.Column("Description", default="", attrs=WRAP)
    node_selector = tables.Column("Node selector", orderable=False, default="", attrs=WRAP)
    tolerations = tables.Column("Tolerations", orderable=False, default="", attrs=WRAP)
    node_count = NumberColumn("Nodes", empty_values=(), orderable=False)
    gpus_total = NumberColumn("Total GPUs", empty_values=(), orderable=False)
    gpus_free = NumberColumn("Free GPUs", empty_values=(), orderable=False)
    privileged_allowed = tables.BooleanColumn("Privileged allowed")
    host_network_allowed = tables.BooleanColumn("Host network allowed")
    allowed_mounts = tables.Column("Allowed host mounts", orderable=False, default="")
    updated = tables.DateTimeColumn(verbose_name="Last updated", format="Y-m-d H:i")

    def render_node_selector(self, value):
        return _pairs(value) or "—"

    def render_tolerations(self, value):
        return "; ".join(engine_toleration_text(t) for t in value or []) or "—"

    def render_allowed_mounts(self, value):
        return ", ".join(value or []) or "—"

    export_node_selector = lambda self, record: _pairs(record.node_selector)  # noqa: E731
    export_tolerations = lambda self, record: "; ".join(engine_toleration_text(t) for t in record.tolerations or [])  # noqa: E731
    export_allowed_mounts = lambda self, record: ", ".join(record.allowed_mounts or [])  # noqa: E731


def start_estimate_html(found) -> str:
    """A workload's start estimate in its cell: "in 40–70 min", its basis beside it (a person reads it, a
    screen reader too); "—" when it has none."""
    if found is None:
        return "—"
    return format_html('<span class="estimate" title="{}">{}</span><br><span class="hint">{}</span>',
                       found.text(), found.short(), found.basis)


def engine_toleration_text(toleration: dict) -> str:
    key = toleration.get("key") or "*"
    operator = toleration.get("operator") or "Equal"
    value = f"={toleration.get('value')}" if operator == "Equal" and toleration.get("value") else ""
    effect = toleration.get("effect") or "all effects"
    return f"{key}{value}:{effect}" if operator == "Equal" else f"{key} exists:{effect}"


@register
class PodTemplateTable(ConsoleTable):
    key = "pod-templates"
    default_columns = ("name", "cluster", "description", "updated")

    name = tables.Column("Pod template", linkify=lambda record: path_to("podtemplate-detail", record.pk))
    cluster = tables.Column("Cluster", accessor="cluster__name", order_by=("cluster__name",))
    description = tables.Column("Description", default="")
    created = tables.DateTimeColumn(verbose_name="Created", format="Y-m-d H:i")
    updated = tables.DateTimeColumn(verbose_name="Last updated", format="Y-m-d H:i")


@register
class RuleSetTable(ConsoleTable):
    key = "rule-sets"
    default_columns = ("name", "cluster", "rule_count", "description", "updated")

    name = tables.Column("Rule set", linkify=lambda record: path_to("ruleset-detail", record.pk))
    cluster = tables.Column("Cluster", accessor="cluster__name", order_by=("cluster__name",))
    rule_count = NumberColumn("Rules", accessor="rules", orderable=False)
    description = tables.Column("Description", default="")
    created = tables.DateTimeColumn(verbose_name="Created", format="Y-m-d H:i")
    updated = tables.DateTimeColumn(verbose_name="Last updated", format="Y-m-d H:i")

    def render_rule_count(self, value):
        return len(value or [])

    def export_rule_count(self, record):
        return len(record.rules or [])


# ---------------------------------------------------------------------------------------------------
# Submission side (pool access, submitting, the workloads table)
@register
class WorkloadTable(ConsoleTable):
    key = "workloads"
    # What fits a 1440 px window: the rest (platform, priority class, preemptible, queue position, preempted
    # by, ...) through the column chooser; the reason's whole story opens in its row.
    default_columns = ("name", "project", "pools_tried", "placed_pool", "phase", "gpus", "gpu_utilization", "age",
                       "pending_reason", "start_estimate", "stop")

    name = tables.Column("Workload", attrs={"td": {"class": "name-cell"}})
    project = tables.Column("Project", accessor="project_name", order_by=("project_name",), default="—")
    cluster = tables.Column("Cluster", accessor="cluster__name", order_by=("cluster__name",))
    namespace = tables.Column("Namespace")
    pools_tried = tables.Column("Pools tried", orderable=False, default="—")
    placed_pool = tables.Column("Placed in", default="—")
    platform = tables.Column("Platform", default="—")
    phase = tables.Column("Phase")
    pods = tables.Column("Pods")
    gpus = tables.Column("GPUs")
    gpu_utilization = GpuMetricColumn("GPU utilization (%)")
    priority_class = tables.Column("Priority class", default="—")
    preemptible = tables.Column("Preemptible", accessor="priority", order_by=("priority",))
    age = tables.Column("Age", accessor="created_in_cluster", order_by=("-created_in_cluster",))
    pending_reason = tables.Column("Pending reason", empty_values=(), orderable=False,
                                   attrs={"td": {"class": "reason-cell"}})
    scheduler_reason = tables.Column("Scheduler's reason", empty_values=(), orderable=False, attrs=WRAP)
    waiting_category = tables.Column("Waits for", empty_values=(), orderable=False)
    queue_position = tables.Column("Queue position", empty_values=(), orderable=False)
    start_estimate = tables.Column("Start estimate", empty_values=(), orderable=False,
                                   attrs={"td": {"class": "wrap estimate-cell"}})
    preempted_by = tables.Column("Preempted by", empty_values=(), orderable=False, attrs=WRAP)
    scheduler = tables.Column("Scheduler", accessor="scheduler_name", default="—")
    kind = tables.Column("Kind")
    owner = tables.Column("Owner", default="—")
    origin = tables.Column("Made by", empty_values=(), orderable=False, attrs=WRAP)
    gpus_held = tables.Column("GPUs held", order_by=("gpus_held",))
    submitted_by = tables.Column("Submitted by", default="—")
    stop = tables.Column("Actions", empty_values=(), orderable=False)

    class Meta(ConsoleTable.Meta):
        row_attrs = {"data-workload": lambda record: record.name}

    # The cells of a waiting row that the HTML page fills after it loads, slow by nature on a large fleet:
    # the start estimate simulates the pools' queues; the console's answer to "Why is it waiting?", what the
    # row waits for and KAI's queue turn read the cluster's fair shares and facts (every node, quota and
    # running pod). Column -> the prefix of the id its content is swapped by (out of band), with the row's id.
    LATER = {"pending_reason": "pending-reason", "waiting_category": "waits-for", "queue_position": "queue-position",
             "start_estimate": "start-estimate"}

    def __init__(self, *args, stoppable=None, user=None, later=False, **kwargs):
        """`stoppable`: the workloads the user may stop (a queryset), read for the rows shown only."""
        super().__init__(*args, **kwargs)
        self.stoppable = stoppable
        self.stoppable_ids: set[int] = set()
        self.user = user
        # The HTML page leaves the LATER cells of its waiting rows to a request made after it (`later_url`:
        # workloads.views.workload_start_estimates); the CSV and the API carry them whole.
        self.later = later
        self.later_ids: dict[int, None] = {}  # the rows whose cells wait, in the page's order
        self.later_cells: set[str] = set()

    def enrich_records(self, records):
        """The page's rows (or a CSV batch) at once: the scheduler's decisions, the console's answers, what
        Karpenter can do and GPU utilization (workloads.selectors.workloads_enrich), and which of them the user
        may stop."""
        selectors.workloads_enrich(records, user=self.user, slow=not self.later)
        if self.stoppable is not None and records:
            self.stoppable_ids.update(self.stoppable.filter(pk__in=[r.pk for r in records]).order_by()
                                      .values_list("pk", flat=True))

    def _enriched(self, record):
        if not hasattr(record, "decision_reason"):
            selectors.workloads_enrich([record], user=self.user, slow=not self.later)
        return record

    def _waits_later(self, record, column: str) -> bool:
        """Whether this cell of the page is filled after it (a waiting row's LATER cell): noted for `later_url`."""
        if not self.later or not selectors.is_waiting(record):
            return False
        self.later_ids[record.pk] = None
        self.later_cells.add(column)
        return True

    @property
    def later_url(self) -> str:
        """Where the page fetches the LATER cells of its waiting rows after it loads ("" when none)."""
        if not self.later_ids:
            return ""
        cells = ",".join(c for c in self.LATER if c in self.later_cells)
        return (reverse("workload-start-estimates") + "?ids=" + ",".join(str(pk) for pk in self.later_ids)
                + "&cells=" + cells)

    def _later_span(self, record, column: str, html) -> str:
        """A LATER cell's content in the element the fetch after the page replaces (by its id)."""
        return format_html('<span id="{}-{}" class="later">{}</span>', self.LATER[column], record.pk, html)

    def later_html(self, record, column: str) -> str:
        """A LATER cell of a row, whole, as the fetch after the page sends it (swapped by its id, out of band)."""
        render = {"pending_reason": self.render_pending_reason, "waiting_category": self.render_waiting_category,
                  "queue_position": self.render_queue_position,
                  "start_estimate": lambda r: start_estimate_html(getattr(r, "start_estimate", None))}[column]
        return format_html('<span id="{}-{}" hx-swap-oob="true" data-workload="{}">{}</span>', self.LATER[column],
                           record.pk, record.name, render(record))

    def _reading(self, record, what: str) -> str:
        """What a LATER cell says until it is filled: a link to the same fragment (read without scripts too)."""
        url = path_to("workload-start-estimates") + f"?ids={record.pk}"
        return format_html('<span class="muted"><a href="{}">{}</a></span>', url, what)

    def render_name(self, record):
        """Its name, linked to its page; a workload the console did not submit is marked so (its kind)."""
        link = format_html('<a href="{}">{}</a>', path_to("workload-detail", record.pk), record.name)
        mark = record.origin_mark
        if not mark:
            return link
        return format_html('{} <span class="origin muted" title="{}">{}</span>', link, record.origin, mark)

    def render_origin(self, record):
        return record.origin

    def render_gpus_held(self, value):
        return selectors.gpus_text(value)

    def render_pools_tried(self, value):
        return selectors.pools_of_list(value) or "—"

    def render_phase(self, record):
        return selectors.display_phase(record)

    def render_gpus(self, value):
        return selectors.gpus_text(value)

    def render_preemptible(self, record):
        value = record.preemptible
        return "—" if value is None else ("yes" if value else "no")

    def render_age(self, value):
        return timesince(value).split(",")[0] if value else "—"

    def render_pending_reason(self, record):
        record = self._enriched(record)
        if not selectors.is_waiting(record):
            return ""
        if self._waits_later(record, "pending_reason"):
            # The scheduler's words and what Karpenter can do now; the console's answer after the page.
            return self._later_span(record, "pending_reason", self._pending_reason_html(
                record, reading=format_html('<span class="why">Why is it waiting? {}</span>',
                                            self._reading(record, "reading…"))))
        return self._pending_reason_html(record)

    def _pending_reason_html(self, record, reading=None):
        """One line (the scheduler's words, cut to the cell), its whole story on demand: a disclosure in the
        row holding the scheduler's words, the console's answer to "Why is it waiting?" and what Karpenter
        can do in the pools it asked for, each on its own line (the same words as the CSV and the API, which
        join them with spaces)."""
        story = selectors.pending_reason_story(record)
        if reading is not None:  # the console's answer comes after the page: the scheduler's words lead until then
            story = [(part, text) for part, text in story if part != "why"]
            story.insert(1 if story and story[0][0] == "scheduler" else 0, ("reading", ""))
        parts = [reading if part == "reading" else format_html('<span class="{}">{}</span>', part, text)
                 for part, text in story]
        if not parts:
            return ""
        line = next((text for _, text in story if text), "Why is it waiting?")
        return format_html('<details class="reason-story" id="story-{}" data-keep-open><summary title="{}">'
                           '<span class="line">{}</span></summary><div class="story">{}</div></details>',
                           record.pk, line, line, mark_safe("<br>".join(parts)))

    def render_scheduler_reason(self, record):
        found = self._enriched(record).decision_reason
        return found.in_words() if found is not None else "—"

    def render_waiting_category(self, record):
        text = selectors.waiting_category_text(self._enriched(record)) or "—"
        if self._waits_later(record, "waiting_category"):
            return self._later_span(record, "waiting_category", text)  # the scheduler's reading first
        return text

    def render_start_estimate(self, record):
        record = self._enriched(record)
        if self._waits_later(record, "start_estimate"):
            # Filled in after the page loads (workloads.views.workload_start_estimates swaps it by its id).
            return self._later_span(record, "start_estimate", self._reading(record, "estimating…"))
        return start_estimate_html(getattr(record, "start_estimate", None))

    def export_start_estimate(self, record):
        found = getattr(self._enriched(record), "start_estimate", None)
        return found.text() if found is not None else ""

    def render_queue_position(self, record):
        found = self._enriched(record).decision_position
        text = (found.in_words() or "—") if found is not None else "—"
        if self._waits_later(record, "queue_position"):
            return self._later_span(record, "queue_position", text)  # its place in its queue; the queue's turn after
        return text

    def render_preempted_by(self, record):
        found = self._enriched(record).decision_preemption
        if found is None:
            return "—"
        if found.by_id is not None:
            return format_html('<a href="{}">{}</a>', path_to("workload-detail", found.by_id),
                               found.in_words())
        return found.in_words()

    def render_stop(self, record):
        """Stop, for those who may stop it, while it has not ended: it asks first (a confirmation loaded into
        the page above the table; without scripts, the confirmation page), naming what stops."""
        if record.pk not in self.stoppable_ids or selectors.display_phase(record) in selectors.ENDED:
            return ""
        if getattr(record, "stop_requested", False):
            return format_html('<span class="muted">Stopping…</span>')
        url = path_to("workload-stop", record.pk)
        return format_html(
            '<a class="button danger small" href="{}" hx-get="{}" hx-target="#stop-confirm" hx-swap="innerHTML" '
            'hx-push-url="false" aria-label="Stop {}">Stop</a>', url, url, record.name)

    def _gpu(self, record):
        if not hasattr(record, "gpu_metrics_reason"):
            selectors.workloads_attach_gpu_utilization([record])
        return record.gpu_utilization, record.gpu_metrics_reason

    def gpu_gpu_utilization(self, record):
        value, reason = self._gpu(record)
        return (None, reason) if value is None else (_num(round(value, 1)), "")

    # CSV: plain values
    def export_name(self, record):
        return record.name

    def export_gpu_utilization(self, record):
        value, _ = self._gpu(record)
        return None if value is None else round(value, 1)

    def export_pools_tried(self, record):
        return selectors.pools_of_list(record.pools_tried)

    def export_phase(self, record):
        return selectors.display_phase(record)

    def export_preemptible(self, record):
        return record.preemptible

    def export_age(self, record):
        return record.created_in_cluster

    def export_pending_reason(self, record):
        return selectors.pending_reason(self._enriched(record))

    def export_scheduler_reason(self, record):
        found = self._enriched(record).decision_reason
        return found.in_words() if found is not None else ""

    def export_waiting_category(self, record):
        return selectors.waiting_category_text(self._enriched(record))

    def export_queue_position(self, record):
        found = self._enriched(record).decision_position
        return found.in_words() if found is not None else ""

    def export_preempted_by(self, record):
        found = self._enriched(record).decision_preemption
        return found.in_words() if found is not None else ""

    def export_stop(self, record):
        return ""
