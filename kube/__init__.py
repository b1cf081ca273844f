"""Kubernetes semantics without Django: what the console and the emulator (kubesim) both follow."""
