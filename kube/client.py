"""Speaking to a cluster through the official client: the one client factory, what the API server's refusals
say (`ApiRefusal`), and one client to custom objects (any group) with one error contract.

Objects are read and written as raw JSON (`_preload_content=False`, orjson): the client's typed objects are
about ten times slower and seventy times larger. Every write names the console's field manager, so that the
cluster's `managedFields` say which writes were the console's.

The error contract of `CustomObjects`: every failure is an `ApiRefusal` — the HTTP status (0: no answer),
the Status `reason` and `message`, the field its first cause names and every cause — except a 404 on `get`,
which is `None`, and a 404 on `delete`, which is what was wanted. A 404 on `list` is an ApiRefusal with
status 404: the cluster does not serve that kind (its CRD is not installed), which the caller may read as
"none there".
"""
from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any, NamedTuple

import orjson
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

__all__ = [
    "FIELD_MANAGER", "TIMEOUT", "ApiRefusal", "CustomKind", "CustomObjects", "api_client", "api_error_message",
    "refusal_from", "status_body",
]

# Named in the objects' managedFields, so that the cluster says which writes were the console's.
FIELD_MANAGER = "gpu-capacity-console"
# (connect, read) seconds of every call.
TIMEOUT = (5, 20)


def api_client(*, kubeconfig: str | None = None, context: str | None = None, in_cluster: bool = False):
    """An ApiClient from a kubeconfig file (and context), or the in-cluster service account.

    Retries are off: callers back off themselves, and a write must fail fast with the API's message.
    Raises ValueError when given neither a kubeconfig nor in-cluster access.
    """
    configuration = client.Configuration()
    if in_cluster:
        config.load_incluster_config(client_configuration=configuration)
    else:
        if not kubeconfig:
            raise ValueError("neither a kubeconfig path nor in-cluster access")
        config.load_kube_config(config_file=kubeconfig, context=context or None,
                                client_configuration=configuration, persist_config=False)
    configuration.retries = False
    return client.ApiClient(configuration)


@dataclass
class ApiRefusal(Exception):
    """The API server refused (or could not be reached): HTTP status (0: no answer), the field its Status
    names first (if any), its message, its reason (`Invalid`, `Conflict`, `NotFound`, ...) and every cause."""

    status: int
    field: str
    message: str
    reason: str = ""
    causes: tuple[dict[str, Any], ...] = dataclass_field(default=())

    def __str__(self) -> str:
        return f"{self.message} (HTTP {self.status})" if self.status else self.message


def status_body(exc: BaseException) -> dict[str, Any]:
    """The Kubernetes `Status` an API error carries (its JSON body), or {} when it has none."""
    try:
        body = orjson.loads(getattr(exc, "body", None) or b"{}")
    except orjson.JSONDecodeError:
        return {}
    return body if isinstance(body, dict) else {}


def refusal_from(exc: BaseException) -> ApiRefusal:
    """An ApiRefusal from what the official client raised: a Kubernetes `Status` body's message, reason and
    causes; anything else (no answer) as "the cluster could not be reached"."""
    if isinstance(exc, ApiRefusal):
        return exc
    if not isinstance(exc, ApiException):
        return ApiRefusal(0, "", f"the cluster could not be reached: {_unanswered(exc)}")
    body = status_body(exc)
    causes = tuple(c for c in ((body.get("details") or {}).get("causes") or []) if isinstance(c, dict))
    field = next((str(c["field"]) for c in causes if c.get("field")), "")
    return ApiRefusal(int(exc.status or 0), field, body.get("message") or f"HTTP {exc.status} {exc.reason}",
                      str(body.get("reason") or ""), causes)


def api_error_message(exc: BaseException) -> str:
    """The API's own message of a failed call (its Status `message`), else a short description."""
    if isinstance(exc, ApiRefusal):
        cause = exc.__cause__
        return api_error_message(cause) if exc.status == 0 and cause is not None else str(exc)
    if isinstance(exc, ApiException):
        message = status_body(exc).get("message")
        return f"{message} (HTTP {exc.status})" if message else f"HTTP {exc.status} {exc.reason}".strip()
    return _unanswered(exc)


def _unanswered(exc: BaseException) -> str:
    text = str(exc)
    # urllib3 wraps connection errors deeply; the last part says what happened.
    if "Caused by" in text:
        text = text.split("Caused by", 1)[1].strip(" ()")
    return f"{type(exc).__name__}: {text}"[:500]


class CustomKind(NamedTuple):
    """A custom resource: API group, version, plural (the URL's) and kind (the objects')."""

    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


class CustomObjects:
    """Custom objects of one cluster, any group, through `CustomObjectsApi`, with one error contract (see
    the module): every failure is an ApiRefusal."""

    def __init__(self, api_client: Any, *, timeout: tuple[float, float] = TIMEOUT):
        self.api = client.CustomObjectsApi(api_client)
        self.timeout = timeout

    def _call(self, fn, *args, **kwargs) -> dict[str, Any]:
        try:
            response = fn(*args, _preload_content=False, _request_timeout=self.timeout, **kwargs)
            data = response.data
            return orjson.loads(data) if data else {}
        except Exception as exc:  # ApiException, connection errors, a body that is no JSON: one refusal
            raise refusal_from(exc) from exc

    def get(self, kind: CustomKind, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The object, or None when there is none (404)."""
        group, version, plural, _ = kind
        try:
            if namespace:
                return self._call(self.api.get_namespaced_custom_object, group, version, namespace, plural, name)
            return self._call(self.api.get_cluster_custom_object, group, version, plural, name)
        except ApiRefusal as refusal:
            if refusal.status == 404:
                return None
            raise

    def list(self, kind: CustomKind, *, namespace: str | None = None, label_selector: str = "",
             page_size: int = 500) -> list[dict[str, Any]]:
        """Every object of the kind (in one namespace, or all), paginated, each with its apiVersion and kind.
        A kind the cluster does not serve is an ApiRefusal with status 404."""
        group, version, plural, kind_name = kind
        items: list[dict[str, Any]] = []
        token = None
        while True:
            kwargs: dict[str, Any] = {"limit": page_size}
            if label_selector:
                kwargs["label_selector"] = label_selector
            if token:
                kwargs["_continue"] = token
            if namespace:
                body = self._call(self.api.list_namespaced_custom_object, group, version, namespace, plural, **kwargs)
            else:
                body = self._call(self.api.list_cluster_custom_object, group, version, plural, **kwargs)
            for item in body.get("items") or []:
                item.setdefault("apiVersion", f"{group}/{version}")
                item.setdefault("kind", kind_name)
                items.append(item)
            token = (body.get("metadata") or {}).get("continue")
            if not token:
                return items

    def create(self, kind: CustomKind, obj: dict[str, Any]) -> dict[str, Any]:
        group, version, plural, _ = kind
        namespace = (obj.get("metadata") or {}).get("namespace")
        if namespace:
            return self._call(self.api.create_namespaced_custom_object, group, version, namespace, plural, obj,
                              field_manager=FIELD_MANAGER)
        return self._call(self.api.create_cluster_custom_object, group, version, plural, obj,
                          field_manager=FIELD_MANAGER)

    def replace(self, kind: CustomKind, obj: dict[str, Any]) -> dict[str, Any]:
        """PUT; with `metadata.resourceVersion` a 409 (ApiRefusal) when the object changed since it was read."""
        group, version, plural, _ = kind
        meta = obj.get("metadata") or {}
        if meta.get("namespace"):
            return self._call(self.api.replace_namespaced_custom_object, group, version, meta["namespace"], plural,
                              meta["name"], obj, field_manager=FIELD_MANAGER)
        return self._call(self.api.replace_cluster_custom_object, group, version, plural, meta["name"], obj,
                          field_manager=FIELD_MANAGER)

    def patch(self, kind: CustomKind, name: str, patch: Any, namespace: str | None = None) -> dict[str, Any]:
        """A JSON merge patch (RFC 7386: `None` removes a key), as the field manager."""
        group, version, plural, _ = kind
        if namespace:
            return self._call(self.api.patch_namespaced_custom_object, group, version, namespace, plural, name, patch,
                              field_manager=FIELD_MANAGER)
        return self._call(self.api.patch_cluster_custom_object, group, version, plural, name, patch,
                          field_manager=FIELD_MANAGER)

    def delete(self, kind: CustomKind, name: str, namespace: str | None = None, *, uid: str = "",
               resource_version: str = "") -> None:
        """Delete, on the preconditions given (the uid and/or resourceVersion read: a 409 when they no longer
        hold). Already gone (404) is what was wanted."""
        group, version, plural, _ = kind
        preconditions = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
        body = {"preconditions": preconditions} if preconditions else None
        try:
            if namespace:
                self._call(self.api.delete_namespaced_custom_object, group, version, namespace, plural, name, body=body)
            else:
                self._call(self.api.delete_cluster_custom_object, group, version, plural, name, body=body)
        except ApiRefusal as refusal:
            if refusal.status != 404:
                raise
