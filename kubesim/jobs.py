"""The Job controller of ``batch/v1``, as the Kubernetes documentation describes it.

Source: "Jobs", https://kubernetes.io/docs/concepts/workloads/controllers/job/ (parallel execution,
completion modes, the pod backoff failure policy, backoff limit per index, pod failure policy, Job
termination and cleanup, terminal Job conditions, suspending a Job, pod replacement policy), the task page
"Handling retriable and non-retriable pod failures with Pod failure policy"
(https://kubernetes.io/docs/tasks/job/pod-failure-policy/), the JobSpec/JobStatus API reference
(https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/job-v1/) and, where the pages are
silent, upstream's controller and validation (pkg/controller/job: job_controller.go, pod_failure_policy.go,
indexed_job_utils.go, backoff_utils.go; pkg/apis/batch/validation/validation.go) as of Kubernetes 1.31-1.33.

What the API server does when a Job is created (:func:`admit_job`): defaults (``parallelism`` and
``completions`` 1 when both are unset, ``parallelism`` 1, ``backoffLimit`` 6 — the int32 maximum with a
``backoffLimitPerIndex`` —, ``completionMode`` NonIndexed, ``suspend`` false, ``podReplacementPolicy``
TerminatingOrFailed — Failed with a ``podFailurePolicy`` —, an ``onPodConditions`` pattern's ``status``
True), the generated selector ``batch.kubernetes.io/controller-uid=<uid>`` and the pod template labels
``batch.kubernetes.io/job-name``, ``job-name``, ``batch.kubernetes.io/controller-uid``, ``controller-uid`` (a
Job without labels gets its template's), and the refusals (``restartPolicy`` other than Never/OnFailure,
and other than Never with a ``podFailurePolicy``; Indexed without ``completions``; no containers;
``podReplacementPolicy`` other than Failed with a ``podFailurePolicy``; ``backoffLimitPerIndex`` and
``maxFailedIndexes`` only for Indexed Jobs, ``maxFailedIndexes`` only with ``backoffLimitPerIndex`` and at
most ``completions``; and every rule of validatePodFailurePolicy: at most 20 rules, an action among
Count/FailIndex/FailJob/Ignore — FailIndex only with ``backoffLimitPerIndex`` —, exactly one of
``onExitCodes`` and ``onPodConditions``, an ``In``/``NotIn`` operator, a ``containerName`` of the template,
1 to 255 exit codes, unique, ordered, no 0 with ``In``, at most 20 condition patterns with a qualified
``type`` and a status True/False/Unknown), each in the API server's words.

What the controller does, one :meth:`JobControllerMixin.job_controller_step` at a time, for the Jobs that
changed (or whose pods changed, or whose deadline or backoff delay is due):

- pods from ``spec.template`` up to ``parallelism``, never more than the completions left (a work-queue
  Job, without ``completions``, starts no pod once one succeeded): named ``<job>-<5 random>``, Indexed
  ``<job>-<index>-<5 random>`` with the annotation and label ``batch.kubernetes.io/job-completion-index``,
  hostname ``<job>-<index>`` and ``JOB_COMPLETION_INDEX`` in every container's environment; each with an
  ``ownerReferences`` entry (``controller: true``, ``blockOwnerDeletion: true``) and the finalizer
  ``batch.kubernetes.io/job-tracking`` (removed once the pod is counted); events ``SuccessfulCreate`` /
  ``SuccessfulDelete``;
- ``status.active`` / ``ready`` / ``terminating`` / ``succeeded`` / ``failed`` / ``startTime`` /
  ``completionTime`` / ``completedIndexes`` / ``uncountedTerminatedPods`` (always flushed: ``{}``);
  ``active``, ``succeeded`` and ``failed`` are left out when 0, as the API's ``omitempty`` does;
- ``spec.suspend``: active pods deleted (not counted as failed), condition ``Suspended`` True
  (``JobSuspended``) and event ``Suspended``; on resume the condition turns False (``JobResumed``),
  ``status.startTime`` is reset to now (the ``activeDeadlineSeconds`` timer restarts) and event ``Resumed``;
- failures: a pod counts as failed when it is Failed or, with ``podReplacementPolicy`` TerminatingOrFailed,
  being deleted; more than ``backoffLimit`` failures (or, with ``restartPolicy`` OnFailure, container
  restarts reaching it) end the Job with reason ``BackoffLimitExceeded`` ("Job has reached the specified
  backoff limit"); ``activeDeadlineSeconds`` after ``startTime`` with ``DeadlineExceeded`` ("Job was active
  longer than specified deadline"). Failed pods are replaced after upstream's exponential delay: 10 s
  after the last failure, doubling with every consecutive failure, at most 6 minutes (simplified: the
  delay counts from when the controller saw the failure, not the container's exit);
- ``podFailurePolicy`` (matchPodFailurePolicy): a Failed pod is held against the rules in order, the first
  that matches decides — ``onExitCodes`` (the first terminated container, app containers then init
  containers, named ``containerName`` if given, whose non-zero exit code is ``In``/``NotIn`` the values) or
  ``onPodConditions`` (a condition of the pod with the pattern's type and status); ``FailJob`` ends the Job
  at once with reason ``PodFailurePolicy`` and upstream's message ("Container main for pod ns/p failed with
  exit code 42 matching FailJob rule at index 0", "Pod ns/p has condition DisruptionTarget matching FailJob
  rule at index 1"), ``Ignore`` lets the pod go uncounted (no backoff limit reached; it is replaced, after
  the delay, which ignored failures still lengthen), ``Count`` and no match count it, ``FailIndex`` fails
  its index; an unknown action skips the rule;
- ``backoffLimitPerIndex`` (Indexed): each index counts its own failures in its pods' annotations
  ``batch.kubernetes.io/job-index-failure-count`` (and ``...-ignored-failure-count``), carried to the
  replacement (the failed pod keeps its tracking finalizer until it is replaced); an index whose failures
  reach the limit, or whose pod matched ``FailIndex``, is failed (``status.failedIndexes``) and not started
  again; its replacement waits 10 s doubled per earlier failure of the index; past ``maxFailedIndexes`` the
  Job fails with ``MaxFailedIndexesExceeded``, and once every index succeeded or failed with
  ``FailedIndexes`` ("Job has failed indexes");
- the end, as 1.31+ do it: first the interim condition (``FailureTarget`` with the reason, or
  ``SuccessCriteriaMet`` reason ``CompletionsReached`` "Reached expected number of succeeded pods"), the
  remaining active pods deleted (on failure they count as failed); once no pod is terminating, the
  terminal condition ``Failed`` (same reason and message) or ``Complete`` with ``completionTime``, and the
  event ``Completed`` "Job completed" (or a Warning with the failure's reason);
- pods of a deleted Job (or orphaned from it) lose the tracking finalizer, as upstream's controller does.

Not emulated: ``successPolicy``, ``managedBy``, adoption of pods matching the selector without an owner
reference, ``ttlSecondsAfterFinished``, updates of a Job checked against its old spec.
"""

from __future__ import annotations

import copy
import heapq
import json
from collections.abc import Iterable

import orjson

from kube.labels import label_key_errors
from kubesim.clock import parse_rfc3339
from kubesim.errors import ApiError
from kubesim.resources import PODS
from kubesim.util import Key, Obj

JOBS = "jobs.batch"
TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
LEGACY_JOB_NAME_LABEL = "job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
LEGACY_CONTROLLER_UID_LABEL = "controller-uid"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
#: Upstream's pod failure backoff: 10 s, doubled per consecutive failure, at most 6 minutes.
DEFAULT_BACKOFF_SECONDS = 10.0
MAX_BACKOFF_SECONDS = 360.0
#: Pods created or deleted for one Job in one step, at most (upstream's MaxPodCreateDeletePerSync).
MAX_POD_CHANGES_PER_SYNC = 500
# The DefaultTolerationSeconds admission plugin's tolerations, which every pod gets.
_DEFAULT_TOLERATIONS = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
)
_FINISHED = ("Complete", "Failed")


# ---------------------------------------------------------------------------------------------- admission

POD_FAILURE_POLICY_ACTIONS = ("Count", "FailIndex", "FailJob", "Ignore")
EXIT_CODE_OPERATORS = ("In", "NotIn")
CONDITION_STATUSES = ("False", "True", "Unknown")
MAX_POD_FAILURE_POLICY_RULES = 20
MAX_EXIT_CODE_VALUES = 255
MAX_CONDITION_PATTERNS = 20
INT32_MAX = 2147483647


def _cause(field: str, reason: str, message: str) -> Obj:
    return {"reason": reason, "message": message, "field": field}


def _go(value: object) -> str:
    """A bad value as the API server's field errors print it (strings quoted, int32 lists as Go writes them)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return "[]int32{" + ", ".join(str(v) for v in value) + "}"
    return json.dumps(value)


def _quoted(values: Iterable[str]) -> str:
    return ", ".join(json.dumps(v) for v in values)


def _go_list(values: Iterable[str]) -> str:
    """``%q`` of a Go string slice: ["a" "b"]."""
    return "[" + " ".join(json.dumps(v) for v in values) + "]"


def _invalid(field: str, value: object, detail: str) -> Obj:
    return _cause(field, "FieldValueInvalid", f"Invalid value: {_go(value)}: {detail}")


def _policy_causes(spec: Obj, containers: set[str]) -> list[Obj]:
    """validatePodFailurePolicy (pkg/apis/batch/validation): the rules, their actions and requirements."""
    causes: list[Obj] = []
    policy = spec.get("podFailurePolicy")
    rules = policy.get("rules") or [] if isinstance(policy, dict) else []
    path = "spec.podFailurePolicy.rules"
    if len(rules) > MAX_POD_FAILURE_POLICY_RULES:
        causes.append(_cause(path, "FieldValueTooMany",
                             f"Too many: {len(rules)}: must have at most {MAX_POD_FAILURE_POLICY_RULES} items"))
    for i, rule in enumerate(rules):
        at = f"{path}[{i}]"
        rule = rule if isinstance(rule, dict) else {}
        action = rule.get("action") or ""
        if not action:
            causes.append(_cause(f"{at}.action", "FieldValueRequired",
                                 f"Required value: valid values: {_go_list(POD_FAILURE_POLICY_ACTIONS)}"))
        elif action == "FailIndex":
            if spec.get("backoffLimitPerIndex") is None:
                causes.append(_invalid(f"{at}.action", action, "requires the backoffLimitPerIndex to be set"))
        elif action not in POD_FAILURE_POLICY_ACTIONS:
            causes.append(_cause(f"{at}.action", "FieldValueNotSupported", f"Unsupported value: {_go(action)}: "
                                 f"supported values: {_quoted(POD_FAILURE_POLICY_ACTIONS)}"))
        on_exit, on_conditions = rule.get("onExitCodes"), rule.get("onPodConditions") or []
        if isinstance(on_exit, dict):
            causes += _exit_code_causes(on_exit, f"{at}.onExitCodes", containers)
        if on_conditions:
            causes += _condition_causes(on_conditions, f"{at}.onPodConditions")
        if on_exit is not None and on_conditions:
            causes.append(_cause(at, "FieldValueInvalid",
                                 "Invalid value: specifying both OnExitCodes and OnPodConditions is not supported"))
        if on_exit is None and not on_conditions:
            causes.append(_cause(at, "FieldValueInvalid",
                                 "Invalid value: specifying one of OnExitCodes and OnPodConditions is required"))
    return causes


def _exit_code_causes(req: Obj, at: str, containers: set[str]) -> list[Obj]:
    causes: list[Obj] = []
    operator = req.get("operator") or ""
    if not operator:
        causes.append(_cause(f"{at}.operator", "FieldValueRequired",
                             f"Required value: valid values: {_go_list(EXIT_CODE_OPERATORS)}"))
    elif operator not in EXIT_CODE_OPERATORS:
        causes.append(_cause(f"{at}.operator", "FieldValueNotSupported",
                             f"Unsupported value: {_go(operator)}: supported values: {_quoted(EXIT_CODE_OPERATORS)}"))
    name = req.get("containerName")
    if name is not None and name not in containers:
        causes.append(_invalid(f"{at}.containerName", name,
                               "must be one of the container or initContainer names in the pod template"))
    values = [v for v in req.get("values") or [] if isinstance(v, int)]
    if not values:
        causes.append(_invalid(f"{at}.values", values, "at least one value is required"))
    elif len(values) > MAX_EXIT_CODE_VALUES:
        causes.append(_cause(f"{at}.values", "FieldValueTooMany",
                             f"Too many: {len(values)}: must have at most {MAX_EXIT_CODE_VALUES} items"))
    seen: set[int] = set()
    for j, value in enumerate(values):
        if operator == "In" and value == 0:
            causes.append(_invalid(f"{at}.values[{j}]", value, "must not be 0 for the In operator"))
        if value in seen:
            causes.append(_cause(f"{at}.values[{j}]", "FieldValueDuplicate", f"Duplicate value: {value}"))
        seen.add(value)
    if any(a > b for a, b in zip(values, values[1:])):
        causes.append(_invalid(f"{at}.values", values, "must be ordered"))
    return causes


def _condition_causes(patterns: list, at: str) -> list[Obj]:
    causes: list[Obj] = []
    if len(patterns) > MAX_CONDITION_PATTERNS:
        causes.append(_cause(at, "FieldValueTooMany",
                             f"Too many: {len(patterns)}: must have at most {MAX_CONDITION_PATTERNS} items"))
    for j, pattern in enumerate(patterns):
        pattern = pattern if isinstance(pattern, dict) else {}
        kind = str(pattern.get("type") or "")
        for error in label_key_errors(kind):
            causes.append(_invalid(f"{at}[{j}].type", kind, error))
        status = pattern.get("status") or ""
        if not status:
            causes.append(_cause(f"{at}[{j}].status", "FieldValueRequired",
                                 f"Required value: valid values: {_go_list(CONDITION_STATUSES)}"))
        elif status not in CONDITION_STATUSES:
            causes.append(_cause(f"{at}[{j}].status", "FieldValueNotSupported",
                                 f"Unsupported value: {_go(status)}: supported values: {_quoted(CONDITION_STATUSES)}"))
    return causes


def _per_index_causes(spec: Obj) -> list[Obj]:
    """backoffLimitPerIndex and maxFailedIndexes (validateJobSpec)."""
    causes: list[Obj] = []
    per_index, max_failed = spec.get("backoffLimitPerIndex"), spec.get("maxFailedIndexes")
    indexed = spec.get("completionMode") == "Indexed"
    if max_failed is not None and per_index is None:
        causes.append(_cause("spec.backoffLimitPerIndex", "FieldValueRequired",
                             "Required value: when maxFailedIndexes is specified"))
    if indexed and max_failed is not None and spec.get("completions") is not None and max_failed > spec["completions"]:
        causes.append(_invalid("spec.maxFailedIndexes", max_failed, "must be less than or equal to completions"))
    if not indexed:
        if per_index is not None:
            causes.append(_invalid("spec.backoffLimitPerIndex", per_index, "requires indexed completion mode"))
        if max_failed is not None:
            causes.append(_invalid("spec.maxFailedIndexes", max_failed, "requires indexed completion mode"))
    return causes


def admit_job(job: Obj) -> None:
    """The API server's work on a new Job: defaults, the generated selector and labels, the refusals (422)."""
    md = job["metadata"]
    spec = job.setdefault("spec", {})
    if not isinstance(spec, dict):
        return  # the schema has refused it already
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = spec["parallelism"] = 1
    elif spec.get("parallelism") is None:
        spec["parallelism"] = 1
    # SetDefaults_Job: with a backoff limit per index the global one is out of the way.
    spec.setdefault("backoffLimit", INT32_MAX if spec.get("backoffLimitPerIndex") is not None else 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    policy = spec.get("podFailurePolicy")
    spec.setdefault("podReplacementPolicy", "Failed" if policy is not None else "TerminatingOrFailed")
    if isinstance(policy, dict):
        for rule in policy.get("rules") or []:
            for pattern in (rule.get("onPodConditions") or []) if isinstance(rule, dict) else []:
                if isinstance(pattern, dict):
                    pattern.setdefault("status", "True")
    template = spec.setdefault("template", {})
    tmd = template.setdefault("metadata", {})
    tspec = template.setdefault("spec", {})
    causes = []
    causes += _per_index_causes(spec)
    if policy is not None:
        containers = {str(c.get("name")) for c in [*(tspec.get("containers") or []), *(tspec.get("initContainers") or [])]
                      if isinstance(c, dict)}
        causes += _policy_causes(spec, containers)
        if spec["podReplacementPolicy"] != "Failed":
            causes.append(_cause("spec.podReplacementPolicy", "FieldValueNotSupported",
                                 f'Unsupported value: {_go(spec["podReplacementPolicy"])}: supported values: "Failed"'))
    restart = tspec.get("restartPolicy") or "Always"
    if restart not in ("Never", "OnFailure"):
        causes.append(_cause("spec.template.spec.restartPolicy", "FieldValueNotSupported",
                             f'Unsupported value: "{restart}": supported values: "OnFailure", "Never"'))
    elif policy is not None and restart != "Never":
        causes.append(_invalid("spec.template.spec.restartPolicy", restart,
                               'only "Never" is supported when podFailurePolicy is specified'))
    if spec["completionMode"] == "Indexed" and spec.get("completions") is None:
        causes.append(_cause("spec.completions", "FieldValueRequired",
                             "Required value: when completion mode is Indexed"))
    if not tspec.get("containers"):
        causes.append(_cause("spec.template.spec.containers", "FieldValueRequired", "Required value"))
    labels = tmd.setdefault("labels", {})
    if spec.get("manualSelector") is True:
        wanted = ((spec.get("selector") or {}).get("matchLabels")) or {}
        if not spec.get("selector"):
            causes.append(_cause("spec.selector", "FieldValueRequired", "Required value"))
        elif any(labels.get(k) != v for k, v in wanted.items()):
            causes.append(_cause("spec.template.metadata.labels", "FieldValueInvalid",
                                 "Invalid value: `selector` does not match template `labels`"))
    else:
        uid = md.get("uid", "")
        for key, value in ((JOB_NAME_LABEL, md["name"]), (LEGACY_JOB_NAME_LABEL, md["name"]),
                           (CONTROLLER_UID_LABEL, uid), (LEGACY_CONTROLLER_UID_LABEL, uid)):
            labels.setdefault(key, value)
        selector = spec.setdefault("selector", {})
        selector.setdefault("matchLabels", {})[CONTROLLER_UID_LABEL] = uid
    if causes:
        summary = causes[0]["field"] + ": " + causes[0]["message"] if len(causes) == 1 else \
            "[" + ", ".join(f"{c['field']}: {c['message']}" for c in causes) + "]"
        raise ApiError(422, f'Job.batch "{md["name"]}" is invalid: {summary}', "Invalid",
                       details={"name": md["name"], "group": "batch", "kind": "Job", "causes": causes})
    if not md.get("labels"):
        md["labels"] = dict(labels)


# ---------------------------------------------------------------------------------------------- pods' facts


def _phase(pod: Obj) -> str:
    return (pod.get("status") or {}).get("phase") or "Pending"


def _terminal(pod: Obj) -> bool:
    return _phase(pod) in ("Succeeded", "Failed")


def _deleting(pod: Obj) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def _tracked(pod: Obj) -> bool:
    return TRACKING_FINALIZER in (pod["metadata"].get("finalizers") or ())


def _ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or ())


def _index(pod: Obj) -> int | None:
    text = (pod["metadata"].get("annotations") or {}).get(COMPLETION_INDEX)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _restarts(pod: Obj) -> int:
    status = pod.get("status") or {}
    return sum(int(s.get("restartCount") or 0)
               for s in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []))


def _finished_at(pod: Obj) -> float | None:
    times = [parse_rfc3339(((s.get("state") or {}).get("terminated") or {}).get("finishedAt"))
             for s in (pod.get("status") or {}).get("containerStatuses") or ()]
    times = [t for t in times if t is not None]
    return max(times) if times else None


def _finish_time(pod: Obj) -> float:
    """When a pod finished, as upstream's getFinishedTime reads it: its containers' last finishedAt, else
    its Ready=False transition, else its deletion time less the grace period, else its creation."""
    status = pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    ends = [parse_rfc3339(((s.get("state") or {}).get("terminated") or {}).get("finishedAt")) for s in statuses]
    if statuses and all(t is not None for t in ends):
        return max(t for t in ends if t is not None)
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    if ready is not None and ready.get("status") == "False" and parse_rfc3339(ready.get("lastTransitionTime")):
        return parse_rfc3339(ready.get("lastTransitionTime")) or 0.0
    md = pod["metadata"]
    deleted = parse_rfc3339(md.get("deletionTimestamp"))
    if deleted is not None:
        return deleted - float(md.get("deletionGracePeriodSeconds") or 0)
    return parse_rfc3339(md.get("creationTimestamp")) or 0.0


def parse_indexes(text: str | None, completions: int) -> set[int]:
    """The indexes of ``status.completedIndexes`` ("1,3-5,7") below ``completions``."""
    out: set[int] = set()
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        first, _, last = part.partition("-")
        try:
            lo, hi = int(first), int(last or first)
        except ValueError:
            continue
        out.update(i for i in range(lo, hi + 1) if 0 <= i < completions)
    return out


def format_indexes(indexes: Iterable[int]) -> str:
    """Upstream's text of a set of indexes: runs of three or more as "first-last", "1,3-5,7"."""
    parts: list[str] = []
    ordered = sorted(set(indexes))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        first, last = ordered[i], ordered[j]
        parts.append(str(first) if first == last else f"{first},{last}" if last == first + 1 else f"{first}-{last}")
        i = j + 1
    return ",".join(parts)


def _condition(status: Obj, ctype: str) -> Obj | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == ctype), None)


def _true(status: Obj, ctype: str) -> Obj | None:
    cond = _condition(status, ctype)
    return cond if cond is not None and cond.get("status") == "True" else None


def _ensure_condition(status: Obj, ctype: str, value: str, reason: str, message: str, now: str) -> bool:
    """Upstream's ensureJobConditionStatus: set a condition (a False one only if it exists already)."""
    conditions = status.setdefault("conditions", [])
    cond = _condition(status, ctype)
    if cond is not None:
        if (cond.get("status"), cond.get("reason"), cond.get("message")) == (value, reason, message):
            return False
        cond.update(status=value, reason=reason, message=message, lastProbeTime=now, lastTransitionTime=now)
        return True
    if value == "False":
        if not conditions:
            status.pop("conditions")
        return False
    conditions.append({"type": ctype, "status": value, "reason": reason, "message": message,
                       "lastProbeTime": now, "lastTransitionTime": now})
    return True


def _removal_order(pod: Obj) -> tuple:
    """Upstream's ActivePods order of pods to delete first: unscheduled, pending, not ready, newest."""
    rank = {"Pending": 0, "Unknown": 1, "Running": 2}.get(_phase(pod), 3)
    created = parse_rfc3339(pod["metadata"].get("creationTimestamp")) or 0.0
    return (bool((pod.get("spec") or {}).get("nodeName")), rank, _ready(pod), -created, pod["metadata"]["name"])


# ---------------------------------------------------------------------------------------------- pod failure policy

INDEX_FAILURE_COUNT = "batch.kubernetes.io/job-index-failure-count"
INDEX_IGNORED_FAILURE_COUNT = "batch.kubernetes.io/job-index-ignored-failure-count"


def _matching_container(pod: Obj, requirement: Obj) -> Obj | None:
    """The first terminated container (app containers first, then init containers) whose non-zero exit code
    meets ``onExitCodes`` (pod_failure_policy.go matchOnExitCodes)."""
    status = pod.get("status") or {}
    name = requirement.get("containerName")
    values = set(requirement.get("values") or [])
    operator = requirement.get("operator")
    for statuses in (status.get("containerStatuses") or [], status.get("initContainerStatuses") or []):
        for cs in statuses:
            terminated = (cs.get("state") or {}).get("terminated")
            if terminated is None or (name is not None and cs.get("name") != name):
                continue
            code = int(terminated.get("exitCode") or 0)
            if code == 0:
                continue  # a container that succeeded is left out of the requirement
            if (operator == "In" and code in values) or (operator == "NotIn" and code not in values):
                return cs
    return None


def _matching_condition(pod: Obj, patterns: list) -> Obj | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        for pattern in patterns:
            if isinstance(pattern, dict) and condition.get("type") == pattern.get("type") \
                    and condition.get("status") == (pattern.get("status") or "True"):
                return condition
    return None


def match_pod_failure_policy(policy: Obj | None, pod: Obj) -> tuple[str | None, bool, str | None]:
    """Upstream's matchPodFailurePolicy for a failed pod: (the Job's failure message when a FailJob rule
    matched, whether the failure counts towards the backoff limits, the action of the rule that matched).
    Rules are tried in order and the first that matches decides; a rule with an action this controller does
    not know is skipped; none matching: the failure counts."""
    if not policy:
        return None, True, None
    md = pod["metadata"]
    for index, rule in enumerate(policy.get("rules") or []):
        if not isinstance(rule, dict):
            continue
        action = rule.get("action")
        if rule.get("onExitCodes") is not None:
            matched = _matching_container(pod, rule["onExitCodes"])
            if matched is None:
                continue
            code = matched["state"]["terminated"].get("exitCode")
            message = (f"Container {matched.get('name')} for pod {md.get('namespace')}/{md['name']} failed with exit "
                       f"code {code} matching {action} rule at index {index}")
        elif rule.get("onPodConditions") is not None:
            condition = _matching_condition(pod, rule["onPodConditions"])
            if condition is None:
                continue
            message = (f"Pod {md.get('namespace')}/{md['name']} has condition {condition.get('type')} matching "
                       f"{action} rule at index {index}")
        else:
            continue
        if action == "Ignore":
            return None, False, action
        if action in ("Count", "FailIndex"):
            return None, True, action
        if action == "FailJob":
            return message, True, action
    return None, True, None


def _failure_rank(pod: Obj) -> tuple[int, float]:
    """The later of two failed pods of one index: more failures of the index, then finished later."""
    return (_annotation_count(pod, INDEX_FAILURE_COUNT) + _annotation_count(pod, INDEX_IGNORED_FAILURE_COUNT),
            _finish_time(pod))


def _annotation_count(pod: Obj, key: str) -> int:
    try:
        value = int((pod["metadata"].get("annotations") or {}).get(key, 0))
    except (TypeError, ValueError):
        return 0
    return value if 0 <= value <= INT32_MAX else 0


# ---------------------------------------------------------------------------------------------- the controller


class JobControllerMixin:
    """Part of :class:`kubesim.KubeEmulator`: the Job controller, stepwise."""

    def _init_jobs(self) -> None:
        self._job_dirty: set[Key] = set()  # Jobs to sync at the next step
        self._job_uids: dict[str, Key] = {}  # uid -> key of every Job
        self._job_uid_of: dict[Key, str] = {}
        self._job_timers: list[tuple[float, Key]] = []  # (when, Job): a deadline or a backoff delay is due
        self._job_timer_at: dict[Key, float] = {}
        self._job_orphans: set[Key] = set()  # pods with the tracking finalizer whose Job may be gone
        self._job_backoff: dict[Key, tuple[int, float]] = {}  # Job -> (consecutive failures, last failure)

    # ------------------------------------------------------------------ what changed (lock held)

    def _job_hook(self, key: Key, obj: Obj | None, gone_owners: tuple[str, ...] = ()) -> None:
        self._job_dirty.add(key)
        old = self._job_uid_of.pop(key, None)
        if old is not None:
            self._job_uids.pop(old, None)
        if obj is not None:
            uid = str(obj["metadata"].get("uid") or "")
            self._job_uids[uid] = key
            self._job_uid_of[key] = uid
        else:
            self._job_backoff.pop(key, None)
            for dep_kind, dep_key in self._dependents.get(old or "", {}):
                if dep_kind == PODS:
                    self._job_orphans.add(dep_key)

    def _job_pod_hook(self, key: Key, obj: Obj | None, gone_owners: tuple[str, ...] = ()) -> None:
        if obj is None:
            for uid in gone_owners:
                job = self._job_uids.get(uid)
                if job is not None:
                    self._job_dirty.add(job)
            self._job_orphans.discard(key)
            return
        md = obj["metadata"]
        owner = None
        for ref in md.get("ownerReferences") or ():
            if isinstance(ref, dict) and ref.get("controller") is True and ref.get("kind") == "Job":
                owner = self._job_uids.get(str(ref.get("uid") or ""))
                break
        if owner is not None:
            self._job_dirty.add(owner)
        elif TRACKING_FINALIZER in (md.get("finalizers") or ()):
            self._job_orphans.add(key)

    def _job_scan(self) -> None:
        """Every Job (and every job pod with the tracking finalizer) once: the start of tracking."""
        for key, entry in self._stores[JOBS].entries.items():
            self._job_hook(key, orjson.loads(entry[0]))
        marker = TRACKING_FINALIZER.encode()
        for key, entry in self._stores[PODS].entries.items():
            if marker in entry[0]:
                self._job_pod_hook(key, orjson.loads(entry[0]))

    # ------------------------------------------------------------------ the step

    def job_controller_step(self) -> list[str]:
        """Sync every Job that changed, whose pods changed or whose timer is due; returns what happened."""
        done: list[str] = []
        with self._lock:
            now = self.clock.now()
            due = self._job_dirty
            self._job_dirty = set()
            while self._job_timers and self._job_timers[0][0] <= now:
                when, key = heapq.heappop(self._job_timers)
                if self._job_timer_at.get(key) == when:
                    del self._job_timer_at[key]
                due.add(key)
            orphans = self._job_orphans
            self._job_orphans = set()
            for key in sorted(due):
                done += self._sync_job(key, now)
            for key in sorted(orphans):
                done += self._release_orphan(key)
        return done

    def _job_timer(self, key: Key, when: float) -> None:
        current = self._job_timer_at.get(key)
        if current is not None and current <= when:
            return
        self._job_timer_at[key] = when
        heapq.heappush(self._job_timers, (when, key))

    def _release_orphan(self, key: Key) -> list[str]:
        """A pod with the tracking finalizer whose Job is gone (or that has no Job any more) loses it."""
        entry = self._stores[PODS].entries.get(key)
        if entry is None:
            return []
        pod = orjson.loads(entry[0])
        if not _tracked(pod):
            return []
        for ref in pod["metadata"].get("ownerReferences") or ():
            if isinstance(ref, dict) and ref.get("controller") is True and ref.get("kind") == "Job" \
                    and str(ref.get("uid") or "") in self._job_uids:
                return []  # its Job is there: the Job's own sync counts it
        self._drop_tracking(key)
        return [f"pod {key[0]}/{key[1]}: tracking finalizer removed (its Job is gone)"]

    def _drop_tracking(self, key: Key) -> None:
        def change(pod: Obj) -> None:
            pod["metadata"]["finalizers"] = [f for f in pod["metadata"].get("finalizers") or []
                                             if f != TRACKING_FINALIZER]
            if not pod["metadata"]["finalizers"]:
                del pod["metadata"]["finalizers"]

        if key in self._stores[PODS].entries:
            self._update(PODS, key, change)

    def _job_pods(self, uid: str) -> list[tuple[Key, Obj]]:
        out = []
        for kind, key in sorted(self._dependents.get(uid, {})):
            if kind != PODS:
                continue
            entry = self._stores[PODS].entries.get(key)
            if entry is None:
                continue
            pod = orjson.loads(entry[0])
            if any(isinstance(r, dict) and r.get("uid") == uid and r.get("controller") is True
                   for r in pod["metadata"].get("ownerReferences") or ()):
                out.append((key, pod))
        return out

    # ------------------------------------------------------------------ one Job

    def _sync_job(self, key: Key, now: float) -> list[str]:
        entry = self._stores[JOBS].entries.get(key)
        if entry is None:
            self._job_backoff.pop(key, None)
            return []
        job: Obj = orjson.loads(entry[0])
        md, spec = job["metadata"], job.get("spec") or {}
        old_status = job.get("status") or {}
        status: Obj = copy.deepcopy(old_status)
        if any(_true(status, c) for c in _FINISHED):
            self._job_backoff.pop(key, None)
            return []  # a finished Job is left alone
        mode = spec.get("completionMode") or "NonIndexed"
        if mode not in ("NonIndexed", "Indexed"):
            return []
        uid = str(md.get("uid") or "")
        stamp = self.clock.rfc3339(now)
        name = md["name"]
        done: list[str] = []
        indexed = mode == "Indexed"
        completions = spec.get("completions")
        parallelism = int(spec.get("parallelism") if spec.get("parallelism") is not None else 1)
        backoff_limit = int(spec.get("backoffLimit") if spec.get("backoffLimit") is not None else 6)
        suspended = spec.get("suspend") is True
        only_failed = spec.get("podReplacementPolicy") == "Failed" or bool(spec.get("podFailurePolicy"))
        deadline = spec.get("activeDeadlineSeconds")
        policy = spec.get("podFailurePolicy") if isinstance(spec.get("podFailurePolicy"), dict) else None
        per_index = spec.get("backoffLimitPerIndex") if indexed else None
        per_index = per_index if isinstance(per_index, int) and not isinstance(per_index, bool) else None
        max_failed_indexes = spec.get("maxFailedIndexes")

        pods = self._job_pods(uid)
        verdicts: dict[Key, tuple[str | None, bool, str | None]] = {}

        def verdict(pod_key: Key, pod: Obj) -> tuple[str | None, bool, str | None]:
            """The pod failure policy's answer for a failed pod (message, counts, action)."""
            found = verdicts.get(pod_key)
            if found is None:
                found = verdicts[pod_key] = match_pod_failure_policy(policy, pod)
            return found

        def valid(pod: Obj) -> bool:
            if not indexed:
                return True
            index = _index(pod)
            return index is not None and 0 <= index < int(completions)

        def failed(pod: Obj) -> bool:
            if _phase(pod) == "Failed":
                return True
            return not only_failed and _deleting(pod) and _phase(pod) != "Succeeded"

        active = [(k, p) for k, p in pods if not _terminal(p) and not _deleting(p)]
        terminating = sum(1 for _k, p in pods if not _terminal(p) and _deleting(p))
        ready = sum(1 for _k, p in active if _ready(p))
        tracked = [(k, p) for k, p in pods if _tracked(p) and valid(p)]
        new_succeeded = [(k, p) for k, p in tracked if _phase(p) == "Succeeded"]
        new_failed = [(k, p) for k, p in tracked if _phase(p) != "Succeeded" and failed(p)]
        if indexed:
            done_indexes = parse_indexes(status.get("completedIndexes"), int(completions))
            done_indexes |= {_index(p) for _k, p in new_succeeded}  # type: ignore[misc]
            succeeded = len(done_indexes)
        else:
            succeeded = int(status.get("succeeded") or 0) + len(new_succeeded)
        # Failures an Ignore rule matched count towards no limit (nonIgnoredFailedPodsCount).
        failed_count = int(status.get("failed") or 0) + sum(1 for k, p in new_failed if verdict(k, p)[1])
        failed_indexes: set[int] = set()
        if per_index is not None:
            # An index fails when its pod matched a FailIndex rule, or failed (counted) with the index's
            # earlier failures reaching backoffLimitPerIndex (isIndexFailed).
            failed_indexes = parse_indexes(status.get("failedIndexes"), int(completions))
            for pod_key, pod in new_failed:
                _message, counts, action = verdict(pod_key, pod)
                if action == "FailIndex" or (counts and _annotation_count(pod, INDEX_FAILURE_COUNT) >= per_index):
                    failed_indexes.add(_index(pod))  # type: ignore[arg-type]

        if not status.get("startTime") and not suspended:
            status["startTime"] = stamp
        # Consecutive failures since the last success, for the replacement delay.
        failures, last_failure = self._job_backoff.get(key, (0, 0.0))
        if new_failed:
            failures += len(new_failed)
            last_failure = max([now] + [t for t in (_finished_at(p) for _k, p in new_failed) if t is not None and t > now])
        elif new_succeeded:
            failures, last_failure = 0, 0.0
        self._job_backoff[key] = (failures, last_failure)

        # The end: an interim condition already there, or one reached now.
        finished: tuple[str, str, str] | None = None  # (terminal type, reason, message)
        met = _true(status, "SuccessCriteriaMet")
        target = _true(status, "FailureTarget")
        if met is not None:
            finished = ("Complete", met.get("reason") or "", met.get("message") or "")
        elif target is not None:
            finished = ("Failed", target.get("reason") or "", target.get("message") or "")
        elif policy is not None and (fail_job := next((m for m in (verdict(k, p)[0] for k, p in pods if failed(p))
                                                       if m is not None), None)):
            finished = ("Failed", "PodFailurePolicy", fail_job)
        else:
            on_failure_restarts = sum(_restarts(p) for _k, p in pods if _phase(p) in ("Pending", "Running"))
            past_restarts = (spec.get("template") or {}).get("spec", {}).get("restartPolicy") == "OnFailure" and (
                on_failure_restarts > 0 if backoff_limit == 0 else on_failure_restarts >= backoff_limit)
            start = parse_rfc3339(status.get("startTime"))
            if failed_count > backoff_limit or past_restarts:
                finished = ("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
            elif isinstance(deadline, int) and start is not None and not suspended and now - start >= deadline:
                finished = ("Failed", "DeadlineExceeded", "Job was active longer than specified deadline")
            elif isinstance(deadline, int) and start is not None and not suspended:
                self._job_timer(key, start + deadline)
        if finished is None and per_index is not None:
            if isinstance(max_failed_indexes, int) and len(failed_indexes) > max_failed_indexes:
                finished = ("Failed", "MaxFailedIndexesExceeded",
                            "Job has exceeded the specified maximal number of failed indexes")
            elif failed_indexes and len(failed_indexes) + len(done_indexes) >= int(completions):
                finished = ("Failed", "FailedIndexes", "Job has failed indexes")
        # With a backoff limit per index, the last failed pod of an index waiting for its replacement (its
        # failure counts pass on to it: getPodsWithDelayedDeletionPerIndex).
        replaced: dict[int, tuple[Key, Obj]] = {}
        if per_index is not None:
            for pod_key, pod in new_failed:
                index = _index(pod)
                if index is None or index in done_indexes or index in failed_indexes:
                    continue
                known = replaced.get(index)
                if known is None or _failure_rank(pod) >= _failure_rank(known[1]):
                    replaced[index] = (pod_key, pod)

        finalized: set[Key] = set()  # pods whose tracking finalizer goes without being counted
        created: list[str] = []
        deleted: list[str] = []

        def delete(pod_key: Key, *, keep_tracking: bool) -> None:
            if not keep_tracking and pod_key in dict(tracked):
                self._drop_tracking(pod_key)
                finalized.add(pod_key)
            try:
                self._delete(PODS, pod_key)
            except ApiError:
                return
            deleted.append(pod_key[1])

        if finished is not None:
            if finished[0] == "Failed":
                for pod_key, pod in active:  # they count as failed (below)
                    delete(pod_key, keep_tracking=True)
                    pod["metadata"]["deletionTimestamp"] = stamp
                terminating += len(active)
                active, ready = [], 0
        else:
            # A Job being deleted (foreground) creates no pods; its pods only lose their tracking finalizer.
            manage_called = not md.get("deletionTimestamp")
            if not manage_called:
                pass
            elif suspended:
                for pod_key, _pod in active:
                    delete(pod_key, keep_tracking=False)
                terminating += len(active)
                active, ready = [], 0
            else:
                if completions is None:
                    want = len(active) if succeeded > 0 else parallelism
                else:
                    want = max(min(int(completions) - succeeded, parallelism), 0)
                excess = len(active) - want
                if excess > 0:
                    doomed = sorted(active, key=lambda kp: _removal_order(kp[1]))[:min(excess, MAX_POD_CHANGES_PER_SYNC)]
                    for pod_key, pod in doomed:
                        delete(pod_key, keep_tracking=False)
                        ready -= _ready(pod)
                    gone = {k for k, _p in doomed}
                    active = [(k, p) for k, p in active if k not in gone]
                    terminating += len(doomed)
                else:
                    diff = want - (terminating if only_failed else 0) - len(active)
                    if diff > 0:
                        wait = 0.0
                        if failures > 0 and per_index is None:
                            delay = min(DEFAULT_BACKOFF_SECONDS * 2 ** (failures - 1), MAX_BACKOFF_SECONDS)
                            wait = last_failure + delay - now
                        if wait > 0:
                            self._job_timer(key, now + wait)
                        else:
                            diff = min(diff, MAX_POD_CHANGES_PER_SYNC)
                            indexes: list[int | None] = [None] * diff
                            if indexed:
                                held = {_index(p) for _k, p in active}
                                if only_failed:
                                    held |= {_index(p) for _k, p in pods if _deleting(p) and not _terminal(p)}
                                indexes = [i for i in range(int(completions)) if i not in done_indexes
                                           and i not in held and i not in failed_indexes][:diff]
                                if per_index is not None:
                                    indexes = self._indexes_due(key, indexes, replaced, now)
                            for index in indexes:
                                pod = self._job_new_pod(job, index, stamp)
                                if per_index is not None:
                                    self._carry_failure_counts(pod, replaced.get(index), verdict)
                                try:
                                    stored = self._put(PODS, pod, upsert=False)
                                except ApiError as err:
                                    self._record_event(job, "Warning", "FailedCreate", f"Error creating: {err.message}")
                                    break
                                created.append(stored["metadata"]["name"])
                                active.append(((stored["metadata"]["namespace"], stored["metadata"]["name"]), stored))
                            if diff == MAX_POD_CHANGES_PER_SYNC:
                                self._job_dirty.add(key)  # more to create at the next step
            if completions is None:
                complete = succeeded > 0 and not active
            else:
                complete = succeeded >= int(completions) and not active
            if complete:
                finished = ("Complete", "CompletionsReached", "Reached expected number of succeeded pods")
            elif manage_called:
                if suspended:
                    if _ensure_condition(status, "Suspended", "True", "JobSuspended", "Job suspended", stamp):
                        self._record_event(job, "Normal", "Suspended", "Job suspended")
                        done.append(f"job {key[0]}/{name} suspended")
                elif _ensure_condition(status, "Suspended", "False", "JobResumed", "Job resumed", stamp):
                    self._record_event(job, "Normal", "Resumed", "Job resumed")
                    status["startTime"] = stamp
                    done.append(f"job {key[0]}/{name} resumed")

        # Count the finished pods and let them go (their tracking finalizer removed).
        failing = finished is not None and finished[0] == "Failed"
        counted_succeeded, counted_failed, released = [], [], []
        active_keys = {k for k, _p in active}
        held_indexes = {_index(p) for _k, p in active}
        waiting = {k for k, p in replaced.values() if _index(p) not in held_indexes} \
            if finished is None and not md.get("deletionTimestamp") else set()
        for pod_key, pod in tracked:
            if pod_key in finalized or pod_key in waiting:
                continue
            if _phase(pod) == "Succeeded":
                counted_succeeded.append((pod_key, pod))
            elif (failed(pod) or failing) and pod_key not in active_keys:
                if verdict(pod_key, pod)[1]:
                    counted_failed.append((pod_key, pod))
                else:
                    released.append((pod_key, pod))  # an Ignore rule matched: not counted, let go
            elif md.get("deletionTimestamp"):
                released.append((pod_key, pod))  # the Job goes: its pods are not held back
        # Pods with the finalizer that are not valid for the Job (an index out of range) are let go too.
        released += [(k, p) for k, p in pods if _tracked(p) and not valid(p)]
        if indexed:
            done_indexes |= {_index(p) for _k, p in counted_succeeded}  # type: ignore[misc]
            succeeded = len(done_indexes)
            if done_indexes:
                status["completedIndexes"] = format_indexes(done_indexes)
            else:
                status.pop("completedIndexes", None)
            if per_index is not None:
                status["failedIndexes"] = format_indexes(failed_indexes)
        else:
            succeeded = int(old_status.get("succeeded") or 0) + len(counted_succeeded)
        failed_total = int(old_status.get("failed") or 0) + len(counted_failed)
        for field, value in (("succeeded", succeeded), ("failed", failed_total), ("active", len(active))):
            if value:
                status[field] = value
            else:
                status.pop(field, None)
        status["ready"] = max(ready, 0)
        status["terminating"] = terminating
        status["uncountedTerminatedPods"] = {}
        for pod_key, _pod in counted_succeeded + counted_failed + released:
            self._drop_tracking(pod_key)

        if finished is not None:
            terminal_type, reason, message = finished
            interim = "SuccessCriteriaMet" if terminal_type == "Complete" else "FailureTarget"
            if _condition(status, interim) is None:
                _ensure_condition(status, interim, "True", reason, message, stamp)
                done.append(f"job {key[0]}/{name} {interim} ({reason})")
            if terminating == 0:
                _ensure_condition(status, terminal_type, "True", reason, message, stamp)
                if terminal_type == "Complete":
                    status["completionTime"] = stamp
                    self._record_event(job, "Normal", "Completed", "Job completed")
                else:
                    self._record_event(job, "Warning", reason, message)
                done.append(f"job {key[0]}/{name} {terminal_type}")
                self._job_backoff.pop(key, None)
        for pod_name in created:
            self._record_event(job, "Normal", "SuccessfulCreate", f"Created pod: {pod_name}")
        for pod_name in deleted:
            self._record_event(job, "Normal", "SuccessfulDelete", f"Deleted pod: {pod_name}")
        if created:
            done.append(f"job {key[0]}/{name}: created {', '.join(created)}")
        if deleted:
            done.append(f"job {key[0]}/{name}: deleted {', '.join(deleted)}")
        if status != old_status and key in self._stores[JOBS].entries:

            def write(current: Obj) -> None:
                current["status"] = status

            self._update(JOBS, key, write, subresource="status")
        return done

    def _indexes_due(self, key: Key, indexes: list[int], replaced: dict[int, tuple[Key, Obj]], now: float) -> list[int]:
        """Of the indexes to start, those whose own back-off is over: 10 s after the index's last failure,
        doubled for each earlier failure of the index, at most 6 minutes (getRemainingTimePerIndex); a timer
        for the soonest of the others."""
        due: list[int] = []
        soonest: float | None = None
        for index in indexes:
            last = replaced.get(index)
            if last is not None:
                pod = last[1]
                count = _annotation_count(pod, INDEX_FAILURE_COUNT) + _annotation_count(pod, INDEX_IGNORED_FAILURE_COUNT)
                delay = min(DEFAULT_BACKOFF_SECONDS * 2 ** min(count, 16), MAX_BACKOFF_SECONDS)
                remaining = _finish_time(pod) + delay - now
                if remaining > 0:
                    soonest = remaining if soonest is None else min(soonest, remaining)
                    continue
            due.append(index)
        if soonest is not None:
            self._job_timer(key, now + soonest)
        return due

    @staticmethod
    def _carry_failure_counts(pod: Obj, last: tuple[Key, Obj] | None, verdict) -> None:
        """The replacement of an index's failed pod carries the index's failures on in its annotations
        (getNewIndexFailureCounts): one more counted failure, or one more ignored (an Ignore rule matched)."""
        failures = ignored = 0
        if last is not None:
            failures = _annotation_count(last[1], INDEX_FAILURE_COUNT)
            ignored = _annotation_count(last[1], INDEX_IGNORED_FAILURE_COUNT)
            if verdict(*last)[1]:
                failures += 1
            else:
                ignored += 1
        annotations = pod["metadata"].setdefault("annotations", {})
        annotations[INDEX_FAILURE_COUNT] = str(failures)
        if ignored:
            annotations[INDEX_IGNORED_FAILURE_COUNT] = str(ignored)

    def _job_new_pod(self, job: Obj, index: int | None, stamp: str) -> Obj:
        """A pod of ``job`` as the controller creates it from the template (index: Indexed mode)."""
        md = job["metadata"]
        template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
        tmd = template.get("metadata") or {}
        pod_md: Obj = {
            "generateName": f"{md['name']}-" if index is None else f"{md['name']}-{index}-",
            "namespace": md.get("namespace") or "default",
            "labels": dict(tmd.get("labels") or {}),
            "annotations": dict(tmd.get("annotations") or {}),
            "finalizers": [*(f for f in tmd.get("finalizers") or [] if f != TRACKING_FINALIZER), TRACKING_FINALIZER],
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": md["name"], "uid": md.get("uid", ""),
                                 "controller": True, "blockOwnerDeletion": True}],
        }
        spec: Obj = template.get("spec") or {}
        if index is not None:
            pod_md["annotations"][COMPLETION_INDEX] = str(index)
            pod_md["labels"][COMPLETION_INDEX] = str(index)
            spec["hostname"] = f"{md['name']}-{index}"
            for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
                env = container.setdefault("env", [])
                if not any(e.get("name") == "JOB_COMPLETION_INDEX" for e in env):
                    env.append({"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
                        "apiVersion": "v1", "fieldPath": f"metadata.labels['{COMPLETION_INDEX}']"}}})
        if not pod_md["annotations"]:
            del pod_md["annotations"]
        # What the API server's pod defaulting and admission add.
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("serviceAccountName", "default")
        spec.setdefault("enableServiceLinks", True)
        tolerations = spec.setdefault("tolerations", [])
        for toleration in _DEFAULT_TOLERATIONS:
            if not any(t.get("key") == toleration["key"] and t.get("effect") == "NoExecute" for t in tolerations):
                tolerations.append(dict(toleration))
        klass = spec.get("priorityClassName")
        if klass and spec.get("priority") is None:
            pc = self._stores["priorityclasses.scheduling.k8s.io"].entries.get(("", klass))
            if pc is not None:
                value = orjson.loads(pc[0])
                spec["priority"] = value.get("value", 0)
                spec.setdefault("preemptionPolicy", value.get("preemptionPolicy") or "PreemptLowerPriority")
        return {"metadata": pod_md, "spec": spec, "status": {"phase": "Pending"}}
