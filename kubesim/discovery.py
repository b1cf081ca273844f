"""Discovery (``/api``, ``/apis``, ``/apis/<group>/<version>``, ``/version``) and OpenAPI v2/v3 documents
built from the resource registry: enough for kubectl (resource mapping, server-side field validation
support, apply) and the official Python client's dynamic client."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from kubesim.resources import NAMESPACE_RESOURCE, Resource, group_versions, resources
from kubesim.util import Obj

VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.4-kubesim",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.23.8",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def _resource_list(group: str, version: str) -> Obj | None:
    members = [r for r in resources() if r.group == group and r.version == version]
    if group == "" and version == "v1":
        members = [NAMESPACE_RESOURCE, *members]
    if not members:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": version if not group else f"{group}/{version}",
        "resources": [entry for r in members for entry in r.discovery()],
    }


def _group(name: str, versions: list[str]) -> Obj:
    gvs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"kind": "APIGroup", "apiVersion": "v1", "name": name, "versions": gvs, "preferredVersion": gvs[0]}


def discovery_document(parts: list[str], host: str) -> Obj | None:
    """The discovery or OpenAPI document at a path (split into parts), or None."""
    if parts == ["version"]:
        return VERSION
    if parts == ["api"]:
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}],
        }
    if parts == ["api", "v1"]:
        return _resource_list("", "v1")
    if parts == ["apis"]:
        return {"kind": "APIGroupList", "apiVersion": "v1",
                "groups": [_group(g, vs) for g, vs in group_versions().items()]}
    if len(parts) == 2 and parts[0] == "apis":
        versions = group_versions().get(parts[1])
        return _group(parts[1], versions) if versions else None
    if len(parts) == 3 and parts[0] == "apis":
        return _resource_list(parts[1], parts[2])
    if parts == ["openapi", "v2"]:
        return openapi_v2()
    if parts == ["openapi", "v3"]:
        return openapi_v3_index()
    if parts[:2] == ["openapi", "v3"] and len(parts) > 2:
        return openapi_v3("/".join(parts[2:]))
    return None


# --------------------------------------------------------------------------- OpenAPI

def _definition_name(res: Resource) -> str:
    group = res.group or "core"
    reversed_group = ".".join(reversed(group.split("."))) if res.group else "io.k8s.api.core"
    return f"{reversed_group}.{res.version}.{res.kind}"


def _gvk(res: Resource) -> Obj:
    return {"group": res.group, "version": res.version, "kind": res.kind}


def _object_schema(res: Resource) -> Obj:
    schema: Obj = dict(res.schema or {"type": "object", "x-kubernetes-preserve-unknown-fields": True})
    props = dict(schema.get("properties") or {})
    props.setdefault("apiVersion", {"type": "string"})
    props.setdefault("kind", {"type": "string"})
    props["metadata"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    schema["properties"] = props
    schema.setdefault("type", "object")
    schema["x-kubernetes-group-version-kind"] = [_gvk(res)]
    return schema


_PARAMS = [
    {"name": name, "in": "query", "schema": {"type": "string"}, "uniqueItems": True}
    for name in ("dryRun", "fieldManager", "fieldValidation", "force", "pretty")
]


def _paths(res: Resource, v3: bool) -> Obj:
    base = "/api/v1" if not res.group else f"/apis/{res.group}/{res.version}"
    collection = f"{base}/namespaces/{{namespace}}/{res.plural}" if res.namespaced else f"{base}/{res.plural}"
    item = collection + "/{name}"
    ok = {"200": {"description": "OK"}}
    params = _PARAMS if v3 else [{k: v for k, v in p.items() if k != "schema"} | {"type": "string"} for p in _PARAMS]

    def op(action: str) -> Obj:
        return {
            "operationId": f"{action}{res.kind}",
            "parameters": params,
            "responses": ok,
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": _gvk(res),
        }

    paths = {
        collection: {"get": op("list"), "post": op("post")},
        item: {"get": op("get"), "put": op("put"), "patch": op("patch"), "delete": op("delete")},
    }
    if res.status_subresource:
        paths[item + "/status"] = {"get": op("get"), "put": op("put"), "patch": op("patch")}
    return paths


def openapi_v2() -> Obj:
    every = [NAMESPACE_RESOURCE, *resources()]
    paths: Obj = {}
    for res in every:
        paths.update(_paths(res, v3=False))
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": VERSION["gitVersion"]},
        "paths": paths,
        "definitions": {_definition_name(r): _object_schema(r) for r in every},
    }


def _gv_path(res: Resource) -> str:
    return "api/v1" if not res.group else f"apis/{res.group}/{res.version}"


def openapi_v3(gv_path: str) -> Obj | None:
    members = [r for r in [NAMESPACE_RESOURCE, *resources()] if _gv_path(r) == gv_path]
    if not members:
        return None
    paths: Obj = {}
    for res in members:
        paths.update(_paths(res, v3=True))
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": VERSION["gitVersion"]},
        "paths": paths,
        "components": {"schemas": {_definition_name(r): _object_schema(r) for r in members}},
    }


def openapi_v3_index() -> Obj:
    paths: dict[str, Any] = {}
    for gv in sorted({_gv_path(r) for r in resources()}):
        digest = hashlib.sha256(orjson.dumps(openapi_v3(gv), option=orjson.OPT_SORT_KEYS)).hexdigest()[:32].upper()
        paths[gv] = {"serverRelativeURL": f"/openapi/v3/{gv}?hash={digest}"}
    return {"paths": paths}
