"""Container image references by the distribution reference grammar (standard library only).

The grammar of `github.com/distribution/reference` (regexp.go, reference.go; the package the
container runtimes and Docker use to read an image name):

    reference        := name [ ":" tag ] [ "@" digest ]
    name             := [domain "/"] remote-name
    domain           := host [":" port-number]
    host             := domain-name | "[" IPv6address "]"
    domain-name      := domain-component ["." domain-component]*
    domain-component := /([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])/
    port-number      := /[0-9]+/
    remote-name      := path-component ["/" path-component]*
    path-component   := alpha-numeric [separator alpha-numeric]*
    alpha-numeric    := /[a-z0-9]+/
    separator        := /[_.]|__|[-]+/
    tag              := /[\\w][\\w.-]{0,127}/              (ASCII word characters)
    digest           := algorithm ":" hex                (algorithm /[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*/,
                                                           hex /[0-9a-fA-F]{32,}/)

with its further rules: the name is at most 255 characters (NameTotalLengthMax); a name that would
match in lower case is "repository name must be lowercase"; a digest of a known algorithm has its exact
length of lower-case hex (go-digest: sha256 64, sha384 96, sha512 128) and others are unsupported. The
first component is a domain when it contains "." or ":" or is "localhost" (or an IPv6 address).

`reference_errors("nvcr.io/nvidia/pytorch:24.05-py3")` is empty; `reference_errors("../../etc/passwd")`
and `reference_errors("BusyBox:ÄÖ")` say what is wrong in the package's words.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

NAME_TOTAL_LENGTH_MAX = 255

_ALPHANUMERIC = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_IPV6 = r"\[(?:[a-fA-F0-9:]+)\]"
_DOMAIN_NAME = _DOMAIN_COMPONENT + r"(?:\." + _DOMAIN_COMPONENT + r")*"
_HOST = r"(?:" + _DOMAIN_NAME + "|" + _IPV6 + ")"
_DOMAIN_AND_PORT = _HOST + r"(?::[0-9]+)?"
_PATH_COMPONENT = _ALPHANUMERIC + r"(?:" + _SEPARATOR + _ALPHANUMERIC + r")*"
_REMOTE_NAME = _PATH_COMPONENT + r"(?:/" + _PATH_COMPONENT + r")*"
_NAME = r"(?:" + _DOMAIN_AND_PORT + r"/)?" + _REMOTE_NAME
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][0-9a-fA-F]{32,}"

# re.ASCII: Go's \w is [0-9A-Za-z_], Python's would take any letter (Ä, Ö).
REFERENCE_RE = re.compile(r"(" + _NAME + r")(?::(" + _TAG + r"))?(?:@(" + _DIGEST + r"))?", re.ASCII)
_ANCHORED_NAME_RE = re.compile(r"(?:(" + _DOMAIN_AND_PORT + r")/)?(" + _REMOTE_NAME + r")", re.ASCII)
_DIGEST_LENGTHS = {"sha256": 64, "sha384": 96, "sha512": 128}
_LOWER_HEX = re.compile(r"[a-f0-9]+", re.ASCII)


@dataclass(frozen=True)
class Reference:
    domain: str
    path: str
    tag: str
    digest: str

    @property
    def name(self) -> str:
        return f"{self.domain}/{self.path}" if self.domain else self.path


class ReferenceError(ValueError):
    """Not an image reference; the message in the distribution reference package's words."""


def parse(text: str) -> Reference:
    """A reference split into domain, path, tag and digest; raises ReferenceError."""
    if not isinstance(text, str) or text == "":
        raise ReferenceError("repository name must have at least one component")
    match = REFERENCE_RE.fullmatch(text)
    if match is None:
        if REFERENCE_RE.fullmatch(text.lower()) is not None:
            raise ReferenceError("repository name must be lowercase")
        raise ReferenceError("invalid reference format")
    name, tag, digest = match.group(1), match.group(2) or "", match.group(3) or ""
    if len(name) > NAME_TOTAL_LENGTH_MAX:
        raise ReferenceError(f"repository name must not be more than {NAME_TOTAL_LENGTH_MAX} characters")
    if digest:
        algorithm, _, encoded = digest.partition(":")
        expected = _DIGEST_LENGTHS.get(algorithm)
        if expected is None:
            raise ReferenceError(f"unsupported digest algorithm {algorithm!r}")
        if len(encoded) != expected or not _LOWER_HEX.fullmatch(encoded):
            raise ReferenceError("invalid checksum digest format")
    parts = _ANCHORED_NAME_RE.fullmatch(name)
    domain, path = (parts.group(1) or "", parts.group(2)) if parts else ("", name)
    if domain and not ("." in domain or ":" in domain or domain == "localhost" or domain.startswith("[")):
        # "library/busybox": the first component is a path component, not a registry.
        domain, path = "", name
    return Reference(domain=domain, path=path, tag=tag, digest=digest)


def reference_errors(text: str) -> list[str]:
    """What keeps `text` from being an image reference (empty list: it is one)."""
    try:
        parse(text)
    except ReferenceError as exc:
        return [str(exc)]
    return []
