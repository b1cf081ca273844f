"""Image references by the distribution reference grammar (github.com/distribution/reference), with its
messages: what `reference.ParseNormalizedNamed`'s grammar takes and refuses."""
from __future__ import annotations

import pytest

from kube.reference import parse, reference_errors

DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize("text", [
    "busybox", "busybox:1.36", "library/busybox", "nvcr.io/nvidia/pytorch:24.05-py3", "localhost/app",
    "localhost:5000/team/train:v1", "registry.example.com:443/a/b/c@" + DIGEST, "busybox:latest@" + DIGEST,
    "[::1]:5000/app", "a__b/c--d/e.f_g", "x" * 255, "app:" + "T" * 128, "192.168.1.1:5000/app",
])
def test_valid_references(text):
    assert reference_errors(text) == []


@pytest.mark.parametrize("text,error", [
    ("../../etc/passwd", "invalid reference format"),
    ("BusyBox:ÄÖ", "invalid reference format"),
    ("busybox:ÄÖ", "invalid reference format"),
    ("BusyBox", "repository name must be lowercase"),
    ("nvcr.io/NVIDIA/pytorch", "repository name must be lowercase"),
    ("", "repository name must have at least one component"),
    ("a" * 256, "repository name must not be more than 255 characters"),
    ("app:" + "t" * 129, "invalid reference format"),
    ("app@sha256:abc", "invalid reference format"),
    ("app@md5:" + "a" * 32, "unsupported digest algorithm 'md5'"),
    ("app@sha256:" + "A" * 64, "invalid checksum digest format"),
    ("app@sha256:" + "a" * 63 + "0a", "invalid checksum digest format"),
    ("a///b", "invalid reference format"), ("-app", "invalid reference format"), ("app-", "invalid reference format"),
    ("a___b", "invalid reference format"), ("app:", "invalid reference format"), (":tag", "invalid reference format"),
    (" busybox", "invalid reference format"), ("busybox\n", "invalid reference format"),
    ("busybox\x00", "invalid reference format"), ("http://registry/app", "invalid reference format"),
])
def test_invalid_references(text, error):
    assert reference_errors(text) == [error]


def test_parts():
    ref = parse("registry.example.com:5000/team/train:v2@" + DIGEST)
    assert (ref.domain, ref.path, ref.tag, ref.digest) == ("registry.example.com:5000", "team/train", "v2", DIGEST)
    assert parse("library/busybox").domain == "" and parse("library/busybox").name == "library/busybox"
    assert parse("localhost/app").domain == "localhost"
