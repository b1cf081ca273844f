"""HTTP: routing of every registered resource (namespaced and cluster-scoped, status subresources),
JSON and Table answers, chunked watches, the control surface and discovery."""

from __future__ import annotations

import http.server
import socket
import ssl
import time
import traceback
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

import orjson

import kubesim.dcgm as dcgm
import kubesim.protobuf as protobuf
from kube.labels import SelectorError
from kubesim.discovery import discovery_document
from kubesim.errors import ApiError, _already_exists, _not_found
from kubesim.faults import _peer_closed, _shutdown_socket
from kubesim.resources import NAMESPACE_RESOURCE, PODS, Resource, find_resource, get_resource
from kubesim.scheduling.kueue_adapter import VISIBILITY_GROUP
from kubesim.selectors import _Filter, parse_label_selector
from kubesim.store import WRITER, _event_line, _full_object
from kubesim.tables import table_for_list
from kubesim.util import Key, Obj

DCGM_PATH = "/dcgm/metrics"
# kube-apiserver's MaxRequestBodyBytes (k8s.io/apiserver/pkg/server/config.go: 3 * 1024 * 1024): a larger
# body of a write is a 413 Status "Request entity too large: limit is 3145728". Objects are refused above
# etcd's request limit, 1.5 MiB (kubesim/store.py: MAX_OBJECT_BYTES).
MAX_REQUEST_BODY_BYTES = 3 * 1024 * 1024

if TYPE_CHECKING:
    from kubesim.emulator import KubeEmulator



class _Server(http.server.ThreadingHTTPServer):
    """Thread-per-connection server; daemon threads so stop() never blocks on clients."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 128
    emulator: KubeEmulator
    tls: ssl.SSLContext | None = None

    def get_request(self):  # type: ignore[no-untyped-def]
        sock, address = super().get_request()
        if self.tls is not None:
            # The handshake happens in the connection's own thread, at its first read.
            sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, address


class _Server6(_Server):
    address_family = socket.AF_INET6


_TRUE = {"true", "1", "yes"}


class _Handler(http.server.BaseHTTPRequestHandler):
    """Routes core/v1 requests to the emulator; speaks HTTP/1.1 keep-alive and chunked watches."""

    protocol_version = "HTTP/1.1"
    server_version = "kube-emulator/1.0"
    sys_version = ""
    disable_nagle_algorithm = True  # small chunks (watch events) must not wait for delayed ACKs
    timeout = 300  # reclaim idle keep-alive connections
    server: _Server

    @property
    def emu(self) -> KubeEmulator:
        return self.server.emulator

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: tests and the benchmark make many requests

    def setup(self) -> None:
        super().setup()
        self.emu._track(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.emu._untrack(self.connection)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    # ------------------------------------------------------------------ plumbing

    def _send(
        self, code: int, body: bytes, content_type: str = "application/json", headers: Mapping[str, str] | None = None
    ) -> None:
        lines = [
            f"HTTP/1.1 {code} {self.responses.get(code, ('Error',))[0]}",
            f"Content-Type: {content_type}",
            f"Content-Length: {len(body)}",
            "Cache-Control: no-cache, private",
        ]
        for name, value in (headers or {}).items():
            lines.append(f"{name}: {value}")
        if self.close_connection:
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        self.emu._count_response(code)
        if len(body) < 65536:
            self.wfile.write(head + body)
        else:
            self.wfile.write(head)
            self.wfile.write(body)

    def _send_json(self, obj: Any, code: int = 200) -> None:
        self._send(code, orjson.dumps(obj))

    def _send_error(self, err: ApiError) -> None:
        headers = {"Retry-After": str(err.retry_after)} if err.retry_after is not None else None
        self._send(err.code, orjson.dumps(err.status()), headers=headers)

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_REQUEST_BODY_BYTES:
            # The API server reads at most its limit (+1) of a body and answers 413 (limitedReadBody in
            # k8s.io/apiserver/pkg/endpoints/handlers/rest.go); the rest is never read here either.
            self.close_connection = True
            raise ApiError(413, f"Request entity too large: limit is {MAX_REQUEST_BODY_BYTES}", "RequestEntityTooLarge")
        return self.rfile.read(length) if length > 0 else b""

    def _dispatch(self, method: str) -> None:
        emu = self.emu
        split = urlsplit(self.path)
        path = split.path
        try:
            is_control = path.startswith("/_emulator")
            if path == DCGM_PATH:
                # The DCGM exporter runs on the nodes, not in the API server: it answers while the API is offline.
                if method != "GET":
                    raise ApiError(405, f"use GET {DCGM_PATH}", "MethodNotAllowed")
                emu._count_request("dcgm metrics")
                self._send(200, emu._dcgm_state()[1], content_type=dcgm.CONTENT_TYPE)
                return
            if emu._offline_mode is not None and not is_control:
                # Offline: drop the connection without answering.
                self.close_connection = True
                _shutdown_socket(self.connection)
                return
            body = self._read_body()
            query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
            if is_control:
                self._control(method, path, body)
                return
            if method in ("POST", "PUT", "PATCH"):
                agent = (self.headers.get("User-Agent") or "unknown").split("/", 1)[0].split(" ", 1)[0]
                WRITER.manager = query.get("fieldManager") or agent
                WRITER.operation = "Apply" if "apply-patch" in (self.headers.get("Content-Type") or "") else "Update"
            emu._record_access(method, path, query)  # authorised before it is handled, whatever the answer
            fault = emu._take_fault(path)
            if fault is not None:
                emu._count_request(f"fault {fault.code}")
                self._send_error(fault)
                return
            self._route(method, path, query, body)
        except ApiError as err:
            self._send_error(err)
        except SelectorError as err:
            self._send_error(ApiError(400, f"unable to parse requirement: {err}", "BadRequest"))
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError):
            self.close_connection = True
        except Exception as exc:  # a bug must come back as a Status, not a hung client
            try:
                self._send_error(ApiError(500, f"emulator internal error: {exc!r}", "InternalError"))
            except OSError:
                self.close_connection = True
        finally:
            WRITER.manager = None  # in-process writes (tests, chaos) record no manager

    def _control(self, method: str, path: str, body: bytes) -> None:
        op = path[len("/_emulator") :].strip("/")
        self.emu._count_request(f"control {op}")
        if method == "GET" and op in ("stats", ""):
            self._send_json(self.emu.stats())
            return
        if method == "GET" and op == "access_log":
            self._send_json(self.emu.access_log())
            return
        if method != "POST":
            raise ApiError(405, f"use POST /_emulator/{op}", "MethodNotAllowed")
        try:
            args = orjson.loads(body) if body.strip() else {}
        except orjson.JSONDecodeError as exc:
            raise ApiError(400, f"invalid JSON body: {exc}", "BadRequest") from exc
        if not isinstance(args, dict):
            raise ApiError(400, "the JSON body must be an object of keyword arguments", "BadRequest")
        kwargs = self.emu._control_args(op, args)
        if op == "set_offline":
            # Offline before the answer, so that a request sent once the answer is read finds the API offline;
            # every connection is cut but this one, which closes once answered.
            self.close_connection = True
            self.emu._control_call(op, {**kwargs, "spare": self.connection})
            self._send_json({"ok": True, "result": None})
            return
        result = self.emu._control_call(op, kwargs)
        self._send_json({"ok": True, "result": result})

    def _route(self, method: str, path: str, query: dict[str, str], body: bytes) -> None:
        parts = [unquote(p) for p in path.strip("/").split("/")] if path.strip("/") else []
        if parts[:2] == ["api", "v1"] and len(parts) > 2:
            group, version, rest = "", "v1", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) > 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            self._discovery(method, parts, query)
            return
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        elif rest[0] == "namespaces" and not group:
            if len(rest) == 1:
                self._namespaces(method, query, body)
            else:
                self._namespace(method, rest[1], body)
            return
        if group == VISIBILITY_GROUP:  # Kueue's visibility API (an aggregated API server in a real cluster)
            if method != "GET":
                raise ApiError(405, f"method {method} not allowed", "MethodNotAllowed")
            self.emu._count_request("get pendingworkloads")
            self._send_json(self.emu.kueue_pending_workloads(version, rest, namespace, query))
            return
        if not group and rest == ["bindings"] and namespace is not None:
            # The older form of the same: POST namespaces/<ns>/bindings, the pod named by the Binding.
            binding = self._object_body(body) if body else {}
            self.emu._count_request("create bindings")
            self._binding(method, (namespace, str((binding.get("metadata") or {}).get("name") or "")), body)
            return
        res = find_resource(group, version, rest[0])
        if res is None or len(rest) > 3 or (namespace is not None and not res.namespaced):
            self.emu._count_request(f"{method.lower()} unknown")
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        if len(rest) == 1:
            self._collection(method, res, namespace, query, body)
            return
        sub = rest[2] if len(rest) == 3 else None
        if (sub is not None and not ((sub == "status" and res.status_subresource)
                                     or (sub == "scale" and res.scale_subresource)
                                     or (sub == "binding" and res.key == PODS))) or (
            res.namespaced and namespace is None
        ):
            self.emu._count_request(f"{method.lower()} unknown")
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        self._item(method, res, (namespace or "", rest[1]), query, body, sub)

    # ------------------------------------------------------------------ resources

    def _object_body(self, body: bytes) -> Obj:
        """The request's object: JSON, or the protobuf kubectl's typed generators send."""
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if ctype == protobuf.CONTENT_TYPE:
            return protobuf.decode(body)
        return _parse_json_object(body)

    def _wants_table(self) -> bool:
        return "as=Table" in (self.headers.get("Accept") or "")

    def _collection(
        self, method: str, res: Resource, namespace: str | None, query: dict[str, str], body: bytes
    ) -> None:
        emu, kind = self.emu, res.key
        if method == "POST":
            emu._count_request(f"create {kind}")
            obj = self._object_body(body)
            self._check_type(res, obj)
            if res.namespaced and namespace is not None:
                md = obj.setdefault("metadata", {})
                if md.get("namespace") not in (None, "", namespace):
                    raise ApiError(
                        400,
                        "the namespace of the provided object does not match the namespace sent on the request",
                        "BadRequest",
                    )
                md["namespace"] = namespace
            if query.get("dryRun") == "All":
                stored = emu._normalize(kind, obj, strict=_strict(query), client=True)
            else:
                stored = emu._put(kind, obj, upsert=False, strict=_strict(query), client=True)
            self._send(201, _full(res, stored))
            return
        if method == "DELETE":
            emu._count_request(f"deletecollection {kind}")
            flt = _Filter(kind, query.get("labelSelector"), query.get("fieldSelector"))
            options = self._delete_options(query, body)
            options.pop("preconditions", None)
            deleted = emu._delete_collection(kind, namespace, flt, **options)
            self._send(200, orjson.dumps({"kind": res.list_kind, "apiVersion": res.api_version,
                                          "metadata": {"resourceVersion": str(emu.resource_version)},
                                          "items": deleted}))
            return
        if method != "GET":
            raise ApiError(405, f"method {method} not allowed on {kind} collection", "MethodNotAllowed")
        flt = _Filter(kind, query.get("labelSelector"), query.get("fieldSelector"))
        if query.get("watch", "").lower() in _TRUE:
            emu._count_request(f"watch {kind}")
            self._watch(kind, namespace, flt, query)
            return
        emu._count_request(f"list {kind}")
        limit: int | None = None
        token = query.get("continue") or None
        if query.get("limit"):
            try:
                limit = int(query["limit"])
            except ValueError:
                raise ApiError(400, f"invalid limit {query['limit']!r}", "BadRequest") from None
            limit = limit if limit > 0 else None
        if query.get("resourceVersion") == "0" and not token:
            limit = None  # rv=0 is served "from the watch cache", which ignores limit
        page = emu._list_page(kind, namespace, flt, limit, token)
        if self._wants_table():
            self._send(200, orjson.dumps(table_for_list(res, orjson.loads(page), query, emu.clock.datetime())),
                       "application/json;as=Table;v=v1;g=meta.k8s.io")
            return
        self._send(200, page)

    def _check_type(self, res: Resource, obj: Obj) -> None:
        kind, api_version = obj.get("kind"), obj.get("apiVersion")
        if (kind and kind != res.kind) or (api_version and api_version != res.api_version):
            raise ApiError(400, f"the API version in the data ({api_version}) does not match the expected API "
                                f"version ({res.api_version})" if api_version != res.api_version else
                                f"the kind in the data ({kind}) does not match the expected kind ({res.kind})",
                           "BadRequest")

    def _item(
        self, method: str, res: Resource, key: Key, query: dict[str, str], body: bytes, sub: str | None = None
    ) -> None:
        emu, kind = self.emu, res.key
        verb = {"GET": "get", "PATCH": "patch", "DELETE": "delete", "PUT": "update"}.get(method, method.lower())
        emu._count_request(f"{verb} {kind}" if sub != "scale" else f"{verb} {kind}/scale")
        if sub == "scale":
            self._scale(method, res, key, body)
            return
        if sub == "binding":
            self._binding(method, key, body)
            return
        strict = _strict(query)
        if method == "GET":
            with emu._lock:
                entry = emu._stores[kind].entries.get(key)
                data = entry[0] if entry else None
            if data is None:
                raise _not_found(kind, key[1])
            if self._wants_table():
                obj = orjson.loads(_full_object(kind, data))
                self._send(200, orjson.dumps(table_for_list(res, {"metadata": {}, "items": [obj]}, query,
                                                            emu.clock.datetime())),
                           "application/json;as=Table;v=v1;g=meta.k8s.io")
                return
            self._send(200, _full_object(kind, data))
            return
        if method == "PATCH":
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            patch_type = {
                "application/merge-patch+json": "merge",
                "application/strategic-merge-patch+json": "strategic",
                "application/json-patch+json": "json",
            }.get(ctype)
            if patch_type == "strategic" and not res.strategic_patch:
                patch_type = None
            if patch_type is None:
                raise ApiError(
                    415,
                    "the body of the request was in an unknown format - accepted media types include: "
                    "application/json-patch+json, application/merge-patch+json"
                    + (", application/strategic-merge-patch+json" if res.strategic_patch else "")
                    + f" (got {ctype!r})",
                    "UnsupportedMediaType",
                )
            try:
                patch = orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                raise ApiError(400, f"invalid JSON patch: {exc}", "BadRequest") from exc
            if patch_type == "json" and not isinstance(patch, list):
                raise ApiError(400, "a JSON patch must be a list of operations", "BadRequest")
            if patch_type != "json" and not isinstance(patch, dict):
                raise ApiError(400, "a merge patch must be a JSON object", "BadRequest")
            expect = None
            if isinstance(patch, dict):
                expect = (patch.get("metadata") or {}).get("resourceVersion")
            new = emu._update(kind, key, patch, patch_type=patch_type, expect_rv=expect, subresource=sub,
                              strict=strict)
            self._send(200, _full(res, new))
            return
        if method == "PUT":
            obj = self._object_body(body)
            self._check_type(res, obj)
            if res.namespaced:
                obj.setdefault("metadata", {}).setdefault("namespace", key[0])
            expect = (obj.get("metadata") or {}).get("resourceVersion") or None
            new = emu._update(kind, key, lambda _cur: obj, expect_rv=expect, subresource=sub, strict=strict)
            self._send(200, _full(res, new))
            return
        if method == "DELETE":
            options = self._delete_options(query, body)
            if query.get("dryRun") == "All":
                current = emu._get(kind, key)
                if current is None:
                    raise _not_found(kind, key[1])
                self._send(200, _full(res, current))
                return
            final = emu._delete(kind, key, **options)
            # 200 with the object, gone or lingering (finalizers, a pod being stopped), as the API server answers.
            self._send(200, _full(res, final))
            return
        raise ApiError(405, f"method {method} not allowed", "MethodNotAllowed")

    def _delete_options(self, query: dict[str, str], body: bytes) -> Obj:
        """A DELETE's options (meta/v1 DeleteOptions), from the query and the JSON body: propagation policy
        (or the older ``orphanDependents``), grace period, preconditions."""
        given: Obj = {}
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if body.strip() and ctype != protobuf.CONTENT_TYPE:
            given = _parse_json_object(body)
        elif body.strip():
            given = protobuf.decode_delete_options(body)
        policy = query.get("propagationPolicy") or given.get("propagationPolicy")
        orphan = query.get("orphanDependents", given.get("orphanDependents"))
        if not policy and orphan is not None:
            policy = "Orphan" if str(orphan).lower() in _TRUE else "Background"
        grace = query.get("gracePeriodSeconds", given.get("gracePeriodSeconds"))
        try:
            grace = int(grace) if grace is not None and grace != "" else None
        except (TypeError, ValueError):
            raise ApiError(400, f"invalid gracePeriodSeconds {grace!r}", "BadRequest") from None
        options: Obj = {"propagation": policy or None, "grace_period_seconds": grace}
        if isinstance(given.get("preconditions"), dict):
            options["preconditions"] = given["preconditions"]
        return options

    def _binding(self, method: str, key: Key, body: bytes) -> None:
        """``POST pods/<name>/binding``: a scheduler binds the pod to the node its Binding's target names."""
        if method != "POST":
            raise ApiError(405, f"method {method} not allowed on pods/binding", "MethodNotAllowed")
        binding = _parse_json_object(body)
        target = binding.get("target") or {}
        if not isinstance(target, dict) or not target.get("name"):
            raise ApiError(422, f'Binding "{key[1]}" is invalid: target.name: Required value', "Invalid")
        self.emu.bind_pod(key[0], key[1], str(target["name"]))
        self._send_json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, 201)

    def _scale(self, method: str, res: Resource, key: Key, body: bytes) -> None:
        """The scale subresource: an autoscaling/v1 Scale over spec.replicas (GET, PUT, merge PATCH)."""
        emu, kind = self.emu, res.key

        def scale_of(obj: Obj) -> Obj:
            md = obj.get("metadata") or {}
            spec, status = obj.get("spec") or {}, obj.get("status") or {}
            labels = ((spec.get("selector") or {}).get("matchLabels")) or {}
            return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                    "metadata": {k: md[k] for k in ("name", "namespace", "uid", "resourceVersion",
                                                       "creationTimestamp") if k in md},
                    "spec": {"replicas": spec.get("replicas", 1)},
                    "status": {"replicas": status.get("replicas", 0),
                               "selector": ",".join(f"{k}={v}" for k, v in sorted(labels.items()))}}

        if method == "GET":
            with emu._lock:
                entry = emu._stores[kind].entries.get(key)
                data = entry[0] if entry else None
            if data is None:
                raise _not_found(kind, key[1])
            self._send_json(scale_of(orjson.loads(_full_object(kind, data))))
            return
        if method not in ("PUT", "PATCH"):
            raise ApiError(405, f"method {method} not allowed on {res.plural}/scale", "MethodNotAllowed")
        if method == "PATCH":
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            if ctype not in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
                raise ApiError(415, f"unsupported patch type {ctype!r} on {res.plural}/scale", "UnsupportedMediaType")
        wanted = _parse_json_object(body)
        replicas = (wanted.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise ApiError(422, f'Scale.autoscaling "{key[1]}" is invalid: spec.replicas: Invalid value: '
                                f"{replicas!r}: must be greater than or equal to 0", "Invalid")
        expect = ((wanted.get("metadata") or {}).get("resourceVersion") or None) if method == "PUT" else None

        def set_replicas(current: Obj) -> Obj:
            current.setdefault("spec", {})["replicas"] = replicas
            return current

        new = emu._update(kind, key, set_replicas, expect_rv=expect)
        self._send_json(scale_of({"kind": res.kind, "apiVersion": res.api_version, **new}))

    def _namespaces(self, method: str, query: dict[str, str], body: bytes) -> None:
        if method == "POST":
            self.emu._count_request("create namespaces")
            obj = self._object_body(body)
            name = (obj.get("metadata") or {}).get("name")
            if not name or not isinstance(name, str):
                raise ApiError(422, 'Namespace "" is invalid: metadata.name: Required value: name or generateName '
                                    "is required", "Invalid")
            with self.emu._lock:
                if self.emu._namespace_exists(name):
                    raise _already_exists("namespaces", name)
                self.emu.add_namespace(name, labels=(obj.get("metadata") or {}).get("labels"),
                                       annotations=(obj.get("metadata") or {}).get("annotations"))
                created = self.emu._namespace_object(name)
            self._send(201, orjson.dumps({"kind": "Namespace", "apiVersion": "v1", **created}))
            return
        self.emu._count_request("list namespaces")
        if method != "GET" or query.get("watch", "").lower() in _TRUE:
            raise ApiError(405, "only list and create are supported for namespaces", "MethodNotAllowed")
        field_name = None
        for term in filter(None, (query.get("fieldSelector") or "").split(",")):
            field, _, value = term.partition("=")
            if field.strip() != "metadata.name":
                raise SelectorError(f'"{field}" is not a known field selector: only "metadata.name"')
            field_name = value.lstrip("=").strip()
        objs = self.emu._namespace_objects(parse_label_selector(query.get("labelSelector")), field_name)
        body_obj = {
            "kind": "NamespaceList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(self.emu.resource_version)},
            "items": objs,
        }
        if self._wants_table():
            body_obj = table_for_list(NAMESPACE_RESOURCE, body_obj, query, self.emu.clock.datetime())
            self._send(200, orjson.dumps(body_obj), "application/json;as=Table;v=v1;g=meta.k8s.io")
            return
        self._send_json(body_obj)

    def _namespace(self, method: str, name: str, body: bytes = b"") -> None:
        emu = self.emu
        if method == "PATCH":
            emu._count_request("patch namespaces")
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            if ctype not in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
                raise ApiError(415, f"a namespace takes merge or strategic merge patches (got {ctype!r})",
                               "UnsupportedMediaType")
            patch = _parse_json_object(body)
            metadata = patch.get("metadata") or {}
            if set(patch) - {"metadata", "apiVersion", "kind"} or set(metadata) - {"labels", "annotations", "name"}:
                raise ApiError(422, f'Namespace "{name}" is invalid: only metadata.labels and metadata.annotations '
                                    "can be patched here", "Invalid")
            final = emu.patch_namespace_metadata(name, labels=metadata.get("labels"),
                                                 annotations=metadata.get("annotations"))
            self._send_json({"kind": "Namespace", "apiVersion": "v1", **final})
            return
        if method == "DELETE":
            emu._count_request("delete namespaces")
            final = emu.delete_namespace(name)
            self._send_json({"kind": "Namespace", "apiVersion": "v1", **final})
            return
        emu._count_request("get namespaces")
        if method != "GET":
            raise ApiError(405, "only get, patch and delete are supported for a namespace", "MethodNotAllowed")
        with emu._lock:
            if not emu._namespace_exists(name):
                raise _not_found("namespaces", name)
            obj = {"kind": "Namespace", "apiVersion": "v1", **emu._namespace_object(name)}
        if self._wants_table():
            table = table_for_list(NAMESPACE_RESOURCE, {"metadata": {}, "items": [obj]}, {}, emu.clock.datetime())
            self._send(200, orjson.dumps(table), "application/json;as=Table;v=v1;g=meta.k8s.io")
            return
        self._send_json(obj)

    def _discovery(self, method: str, parts: list[str], query: dict[str, str]) -> None:
        self.emu._count_request(f"{method.lower()} discovery")
        if method != "GET":
            raise ApiError(405, "method not allowed", "MethodNotAllowed")
        host = self.headers.get("Host") or "127.0.0.1"
        doc = discovery_document(parts, host)
        if doc is None:
            if parts in (["healthz"], ["livez"], ["readyz"]):
                self._send(200, b"ok", "text/plain; charset=utf-8")
                return
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        self._send_json(doc)

    _table_watch: Resource | None = None
    _table_query: dict[str, str] = {}

    def _write_chunk(self, data: bytes) -> None:
        if self._table_watch is not None:
            data = self._as_table_events(self._table_watch, data)
        self.wfile.write(b"%x\r\n" % len(data) + data + b"\r\n")

    def _as_table_events(self, res: Resource, data: bytes) -> bytes:
        """Watch events as kubectl asks for them (Accept ...;as=Table): each object a one-row Table."""
        out = []
        for line in data.split(b"\n"):
            if not line:
                continue
            event = orjson.loads(line)
            obj = event.get("object") or {}
            if event.get("type") in ("ADDED", "MODIFIED", "DELETED") and obj.get("kind") == res.kind:
                event["object"] = table_for_list(res, {"metadata": {}, "items": [obj]}, self._table_query,
                                                 self.emu.clock.datetime())
            out.append(orjson.dumps(event) + b"\n")
        return b"".join(out)

    def _watch(self, kind: str, namespace: str | None, flt: _Filter, query: dict[str, str]) -> None:
        emu = self.emu
        bookmarks = query.get("allowWatchBookmarks", "").lower() in _TRUE
        try:
            timeout = float(query.get("timeoutSeconds") or emu.watch_timeout)
        except ValueError:
            raise ApiError(400, "invalid timeoutSeconds", "BadRequest") from None
        w, initial, error = emu._open_watch(kind, namespace, flt, query.get("resourceVersion", ""), self.connection)
        self._table_watch = get_resource(kind) if self._wants_table() else None
        self._table_query = query
        emu._count_response(200)
        self.wfile.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
            b"Cache-Control: no-cache, private\r\n\r\n"
        )
        # From now on drop_watches() may cut the socket: before the headers, that would look like a
        # broken server rather than a watch that ended.
        w.started = True
        pending: list[bytes] = [error] if error else []
        finished = error is not None
        res = get_resource(kind)
        bookmark_prefix = (
            b'{"type":"BOOKMARK","object":{"kind":"'
            + res.kind.encode()
            + b'","apiVersion":"'
            + res.api_version.encode()
            + b'","metadata":{"resourceVersion":"'
        )
        interval = max(emu.bookmark_interval, 0.01)
        start = time.monotonic()
        deadline = start + timeout
        next_bookmark = start + interval
        abrupt = False
        bookmark_pending = 0
        try:
            for i in range(0, len(initial), 500):  # the initial state, in bounded chunks
                batch = initial[i : i + 500]
                self._write_chunk(b"".join([_event_line("ADDED", kind, data) for data in batch]))
                emu._count("events_sent", len(batch))
            del initial
            while True:
                if pending:
                    self._write_chunk(b"".join(pending))
                    emu._count("events_sent", len(pending) - bookmark_pending)
                    pending, bookmark_pending = [], 0
                now = time.monotonic()
                if finished or now >= deadline:
                    break
                wait = min(deadline, next_bookmark if bookmarks else deadline, now + 1.0) - now
                pending, caught_up_rv, state = emu._watch_poll(w, max(wait, 0.0))
                if state == "dropped":
                    abrupt = True
                    emu._count("watches_dropped")
                    break
                if state == "expired":
                    emu._count("watch_expired")
                    finished = True
                    continue
                now = time.monotonic()
                if bookmarks and now >= next_bookmark and now < deadline:
                    pending.append(bookmark_prefix + str(caught_up_rv).encode() + b'"}}}\n')
                    bookmark_pending = 1
                    emu._count("bookmarks_sent")
                    next_bookmark = now + interval
                if not pending and _peer_closed(self.connection):
                    abrupt = True
                    break
            if not abrupt:
                # Unregister before the terminator: once the client has it, it may reuse this
                # connection for another request, which drop_watches() must not cut.
                if not emu._close_watch(w):
                    abrupt = True  # dropped meanwhile: the socket is already shut down
                else:
                    self.wfile.write(b"0\r\n\r\n")
        except OSError:
            abrupt = True
        except Exception:  # a bug mid-stream: the response cannot turn into a Status any more
            abrupt = True
            traceback.print_exc()
        finally:
            emu._close_watch(w)
            if abrupt:
                self.close_connection = True




def _parse_json_object(body: bytes) -> Obj:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"invalid JSON body: {exc}", "BadRequest") from exc
    if not isinstance(obj, dict):
        raise ApiError(400, "the body must be a JSON object", "BadRequest")
    return obj


def _strict(query: Mapping[str, str]) -> bool:
    """``fieldValidation=Strict`` (kubectl's default): unknown fields are an error, not dropped."""
    return query.get("fieldValidation", "") == "Strict"


def _full(res: Resource, obj: Obj) -> bytes:
    return orjson.dumps({"kind": res.kind, "apiVersion": res.api_version, **obj})
