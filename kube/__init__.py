"""Kubernetes semantics without Django (`kube.reference`: container image references)."""
