"""The CustomResourceDefinitions of the schedulers and the provisioner the console drives, as their projects
publish them.

``kube/crds/*.yaml`` are ``apiextensions.k8s.io/v1`` CustomResourceDefinition manifests written from the
upstream CRDs: every field, type, enum, required list, bound, pattern, format, int-or-string, default, list
and map type and ``x-kubernetes-validations`` rule (its CEL expression and message verbatim) as upstream
has it, the long descriptions left out. Each names its source (repository, file, commit) in the
annotation :data:`SOURCE_ANNOTATION` and in its first comment line:

- KAI Scheduler: ``scheduling.run.ai/v2`` Queue, ``scheduling.run.ai/v2alpha2`` PodGroup,
  ``kai.scheduler/v1`` SchedulingShard;
- Kueue ``kueue.x-k8s.io/v1beta2``: ResourceFlavor, ClusterQueue, LocalQueue, Cohort, Workload,
  WorkloadPriorityClass (at the commit read, v0.20.0-devel, v1beta2 is served and the storage version,
  v1beta1 still served and left out here; Kueue's CRDs first carry v1beta2 in v0.15.0);
- Karpenter ``karpenter.sh/v1``: NodePool, NodeClaim.

:func:`load` reads one into a :class:`CustomResource` (names, scope, schema, subresources, printer
columns); :meth:`CustomResource.validator` checks objects against it as the API server does
(:mod:`kube.validation`). The emulator serves every manifest here; the console checks what it writes with
the same validator. ``python -m kube.crd strip UPSTREAM.yaml --source "owner/repo path @ commit"
[--version v1beta2]`` writes a manifest from an upstream file (descriptions dropped, the source noted).
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:  # jsonschema and the CEL interpreter load with the first validator (`CustomResource.validator`)
    from kube.validation import SchemaValidator

CRD_DIR = Path(__file__).resolve().parent / "crds"
SOURCE_ANNOTATION = "gpu-capacity.io/source"
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class PrinterColumn:
    """One ``additionalPrinterColumns`` entry: what ``kubectl get`` shows (``priority`` 1: only ``-o wide``)."""

    name: str
    type: str
    json_path: str
    priority: int = 0
    format: str = ""


@dataclass(frozen=True, eq=False)
class CustomResource:
    """One served version of a CustomResourceDefinition."""

    group: str
    version: str
    kind: str
    plural: str
    singular: str
    list_kind: str
    namespaced: bool
    short_names: tuple[str, ...]
    categories: tuple[str, ...]
    schema: dict[str, Any]
    status_subresource: bool
    scale: dict[str, str] | None  # specReplicasPath, statusReplicasPath, labelSelectorPath
    columns: tuple[PrinterColumn, ...]
    source: str

    @property
    def key(self) -> str:
        """``nodepools.karpenter.sh``: plural and group, as ``kubectl get`` and RBAC name it."""
        return f"{self.plural}.{self.group}"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @cached_property
    def validator(self) -> SchemaValidator:
        """Pruning, defaulting, OpenAPI and CEL validation of this version's ``openAPIV3Schema``."""
        from kube.validation import SchemaValidator  # on first use: a process that validates nothing never loads it

        return SchemaValidator(self.schema)


def read_manifest(path: str | Path) -> dict[str, Any]:
    """A CRD manifest file (YAML or JSON) as a dict."""
    with open(path, encoding="utf-8") as handle:
        doc = yaml.load(handle, Loader=_Loader)  # noqa: S506 -- the safe loader (C or Python)
    if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
        raise ValueError(f"{path}: not a CustomResourceDefinition manifest")
    return doc


def from_manifest(doc: dict[str, Any], version: str | None = None) -> CustomResource:
    """The ``version`` of a CRD manifest (default: its storage version)."""
    spec = doc["spec"]
    versions = spec["versions"]
    if version is None:
        chosen = next((v for v in versions if v.get("storage")), versions[0])
    else:
        chosen = next((v for v in versions if v["name"] == version), None)
        if chosen is None:
            raise KeyError(f"{spec['names']['kind']} has no version {version!r}")
    names = spec["names"]
    subresources = chosen.get("subresources") or {}
    return CustomResource(
        group=spec["group"],
        version=chosen["name"],
        kind=names["kind"],
        plural=names["plural"],
        singular=names.get("singular") or names["kind"].lower(),
        list_kind=names.get("listKind") or f"{names['kind']}List",
        namespaced=spec["scope"] == "Namespaced",
        short_names=tuple(names.get("shortNames") or ()),
        categories=tuple(names.get("categories") or ()),
        schema=chosen["schema"]["openAPIV3Schema"],
        status_subresource="status" in subresources,
        scale=subresources.get("scale"),
        columns=tuple(PrinterColumn(c["name"], c["type"], c["jsonPath"], int(c.get("priority") or 0),
                                    c.get("format") or "")
                      for c in chosen.get("additionalPrinterColumns") or ()),
        source=((doc.get("metadata") or {}).get("annotations") or {}).get(SOURCE_ANNOTATION, ""),
    )


def load(path: str | Path, version: str | None = None) -> CustomResource:
    return from_manifest(read_manifest(path), version)


def manifests() -> list[Path]:
    """Every CRD manifest of kube/crds/, in name order."""
    return sorted(CRD_DIR.glob("*.yaml"))


@cache
def custom_resource(key: str) -> CustomResource:
    """The CRD of kube/crds/ named ``<plural>.<group>`` (e.g. ``nodepools.karpenter.sh``), its storage version."""
    path = CRD_DIR / f"{key.split('.', 1)[1]}_{key.split('.', 1)[0]}.yaml"
    if not path.exists():
        raise KeyError(f"no CRD manifest for {key!r} in {CRD_DIR}")
    return load(path)


# ----------------------------------------------------------------------------------- writing a manifest

def _strip_schema(node: Any) -> Any:
    """A schema without its ``description`` keywords (field names, even ``description``, stay)."""
    if isinstance(node, list):
        return [_strip_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "description" and isinstance(value, str):
            continue
        if key == "properties" and isinstance(value, dict):
            out[key] = {name: _strip_schema(sub) for name, sub in value.items()}
        elif key in ("default", "enum", "example", "x-kubernetes-validations"):
            out[key] = value  # data, not schemas
        else:
            out[key] = _strip_schema(value)
    return out


def strip(doc: dict[str, Any], *, source: str, versions: list[str] | None = None) -> dict[str, Any]:
    """An upstream CRD manifest without descriptions, with only ``versions`` (all when None; the first kept is
    then the storage version if the stored one was dropped), naming ``source``."""
    spec = dict(doc["spec"])
    kept = [v for v in spec["versions"] if versions is None or v["name"] in versions]
    if not kept:
        raise ValueError(f"none of the versions {versions} in {spec['names']['kind']}")
    if not any(v.get("storage") for v in kept):
        kept[0] = {**kept[0], "storage": True}
    out_versions = []
    for version in kept:
        version = dict(version)
        if "additionalPrinterColumns" in version:
            version["additionalPrinterColumns"] = [
                {k: v for k, v in column.items() if k != "description"} for column in version["additionalPrinterColumns"]]
        version["schema"] = {"openAPIV3Schema": _strip_schema(version["schema"]["openAPIV3Schema"])}
        out_versions.append(version)
    spec["versions"] = out_versions
    metadata = dict(doc.get("metadata") or {})
    metadata["annotations"] = {**(metadata.get("annotations") or {}), SOURCE_ANNOTATION: source}
    return {"apiVersion": doc["apiVersion"], "kind": doc["kind"], "metadata": metadata, "spec": spec}


def dump(doc: dict[str, Any]) -> str:
    """The manifest as YAML, its source on the first line."""
    header = (f"# {doc['spec']['names']['kind']} ({doc['spec']['group']}), written from "
              f"{doc['metadata']['annotations'][SOURCE_ANNOTATION]}:\n"
              "# every schema keyword and CEL rule as upstream has it, the descriptions left out (see kube/crd.py).\n")
    return header + yaml.safe_dump(doc, sort_keys=False, width=1000, allow_unicode=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kube.crd", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    strip_cmd = sub.add_parser("strip", help="write our manifest from an upstream CRD file (to stdout)")
    strip_cmd.add_argument("upstream", type=Path)
    strip_cmd.add_argument("--source", required=True, help='"owner/repo path/in/repo.yaml @ commit (tag)"')
    strip_cmd.add_argument("--version", action="append", dest="versions", help="keep only this version (repeatable)")
    args = parser.parse_args(argv)
    doc = yaml.load(args.upstream.read_text(encoding="utf-8"), Loader=_Loader)  # noqa: S506
    sys.stdout.write(dump(strip(doc, source=args.source, versions=args.versions)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
