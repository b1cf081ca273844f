"""The emulator: the store, faults, chaos and control surface, served over HTTP."""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import random
import socket
import ssl
import tempfile
import threading
from collections import Counter

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kubesim.access import AccessMixin
from kubesim.chaos import ChaosMixin
from kubesim.clock import Clock, RealClock
from kubesim.control import ControlMixin
from kubesim.controllers import ControllersMixin
from kubesim.device_plugin import DevicePluginMixin
from kubesim.dcgm import DcgmMixin
from kubesim.faults import FaultsMixin
from kubesim.jobs import JobControllerMixin
from kubesim.karpenter import KarpenterMixin
from kubesim.kubelet import KubeletMixin
from kubesim.mig_manager import MigManagerMixin
from kubesim.schedulers import SchedulerStatusMixin
from kubesim.scheduling.adapter import SchedulingMixin
from kubesim.scheduling.kueue_adapter import KueueMixin
from kubesim.server import _Handler, _Server, _Server6
from kubesim.store import Store, _Event, _Fault, _Stores, _Watch


class KubeEmulator(ControlMixin, AccessMixin, DcgmMixin, ChaosMixin, ControllersMixin, JobControllerMixin, KubeletMixin,
                   SchedulingMixin, SchedulerStatusMixin, KueueMixin, KarpenterMixin, MigManagerMixin, DevicePluginMixin,
                   FaultsMixin, Store):
    """A thread-safe, scriptable Kubernetes API server emulator (every registered resource).

    Use as a context manager or call :meth:`start`/:meth:`stop`::

        with KubeEmulator() as emu:
            emu.add_node(make_node("gpu-1", gpus=8))
            emu.write_kubeconfig("/tmp/kc")
            ...

    Every mutating method takes effect atomically, assigns the next global
    resourceVersion and records an event that open watches receive.
    ``update_*`` callables run under the emulator lock and receive a private
    copy of the object (mutate it in place or return a new dict).
    """

    def __init__(
        self,
        *,
        history_size: int = 10_000,
        bookmark_interval: float = 1.0,
        initial_resource_version: int = 1000,
        watch_timeout: float = 1800.0,
        node_controller: bool = True,
        clock: Clock | None = None,
        controllers: bool = False,
        controller_interval: float | None = None,
        schedulers: bool = True,
    ) -> None:
        """
        :param history_size: events kept for watch replay and consistent paging.
        :param bookmark_interval: seconds between BOOKMARK events on watches that allow them.
        :param initial_resource_version: the first resourceVersion handed out is this + 1.
        :param watch_timeout: watch duration when the client gives no ``timeoutSeconds``.
        :param node_controller: keep node taints in line with spec.unschedulable and
            conditions, as the node lifecycle controller does.
        :param clock: the one clock of steps and timestamps (:mod:`kubesim.clock`); default the wall clock.
        :param controllers: run the controllers (Job controller, schedulers' slot, kubelets, Karpenter,
            queue status; :mod:`kubesim.controllers`): on a real clock a thread ticks them every
            ``controller_interval`` seconds (default 1) while the emulator is started; on a manual clock
            the caller ticks (:meth:`tick`).
        :param schedulers: put the schedulers (:mod:`kubesim.scheduling`: KAI Scheduler, then the default
            scheduler) into the controller loop; without them nobody binds a pod but the caller.
        """
        self.clock: Clock = clock if clock is not None else RealClock()
        self._hooks: dict[str, list] = {}
        self._kind_rv: dict[str, int] = {}  # resource -> resourceVersion of its last change
        self._names_rng = random.Random()
        self._init_gc()
        self.bookmark_interval = bookmark_interval
        self.watch_timeout = watch_timeout
        self.node_controller = node_controller
        self.url: str | None = None

        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._stores = _Stores()
        self._rv = initial_resource_version
        # Event ring buffer: event with sequence number s lives at _ring[s % _ring_size]
        # while s >= _seq - _ring_size.  _floor_rv: watches/continues from an rv below it
        # cannot be served completely any more (410).
        self._ring_size = max(1, int(history_size))
        self._ring: list[_Event | None] = [None] * self._ring_size
        self._seq = 0
        self._min_seq = 0  # compact() makes older (still physically present) events unusable
        self._floor_rv = initial_resource_version
        self._explicit_namespaces: set[str] = set()
        self._ns_counts: Counter[str] = Counter()  # namespace -> objects in it
        self._namespace_meta: dict[str, tuple[str, int, str]] = {}  # name -> (uid, rv, created)
        self._namespace_labels: dict[str, dict[str, str]] = {}
        self._namespace_annotations: dict[str, dict[str, str]] = {}

        self._watches: set[_Watch] = set()
        self._faults: list[_Fault] = []
        self._stats_lock = threading.Lock()
        self._stats: Counter[str] = Counter()
        self._requests: Counter[str] = Counter()
        self._responses: Counter[str] = Counter()

        self._server: _Server | None = None
        self._server_thread: threading.Thread | None = None
        self._host = "127.0.0.1"
        self._port = 0
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        self._offline_mode: str | None = None  # None, "refuse" or "reset"
        self._offline_timer: threading.Timer | None = None
        self._init_chaos()
        self._init_access()
        self._init_controllers(controllers, controller_interval)
        self._init_kueue()  # Kueue first in the schedulers' slot: it decides which Jobs may run
        self._init_scheduling(schedulers)
        self._tls: tuple[ssl.SSLContext, str, tempfile.TemporaryDirectory] | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self, host: str = "127.0.0.1", port: int = 0, *, tls: bool = False) -> str:
        """Listen on ``host:port`` (0 = any free port); returns and sets :attr:`url`.

        ``tls=True``: HTTPS with a self-signed certificate for ``host`` made at start (it needs the
        ``cryptography`` package); :attr:`ca_cert_path` is the file a client verifies it with, as a pod's
        ``ca.crt`` (see :meth:`write_service_account`).
        """
        with self._lock:
            if self._server is not None:
                raise RuntimeError("emulator already started")
            self._host = host
            self._offline_mode = None
            if tls and self._tls is None:
                self._tls = _tls_context(host)
            self._bind(port)
            shown = f"[{host}]" if ":" in host else host
            self.url = f"{'https' if self._tls else 'http'}://{shown}:{self._port}"
        if self.controllers and not self.clock.manual and self.controller_interval > 0:
            self.start_controllers()
        return self.url

    def stop(self) -> None:
        """Stop chaos and the controllers, close all watches and connections and the listening socket."""
        self.stop_chaos()
        self.stop_controllers()
        with self._lock:
            if self._offline_timer is not None:
                self._offline_timer.cancel()
                self._offline_timer = None
            self._offline_mode = None
        self.drop_watches()
        self._unbind()

    def __enter__(self) -> KubeEmulator:
        if self._server is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _bind(self, port: int) -> None:
        server_cls = _Server6 if ":" in self._host else _Server
        server = server_cls((self._host, port), _Handler)
        server.emulator = self
        server.tls = self._tls[0] if self._tls else None
        self._port = server.server_address[1]
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=f"kube-emulator:{self._port}", daemon=True
        )
        self._server, self._server_thread = server, thread
        thread.start()

    def _unbind(self, spare: socket.socket | None = None) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        self._cut_connections(spare=spare)

    def write_kubeconfig(
        self, path: str | os.PathLike[str], context: str = "emulator", cluster_name: str = "emulator"
    ) -> str:
        """Write a kubeconfig (server = :attr:`url`, TLS verify off, dummy bearer token); returns the path."""
        if self.url is None:
            raise RuntimeError("start() the emulator before writing a kubeconfig")
        path = os.fspath(path)
        user = f"{cluster_name}-user"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": cluster_name, "cluster": {"server": self.url, "insecure-skip-tls-verify": True}}],
            "users": [{"name": user, "user": {"token": "emulator-token"}}],
            "contexts": [{"name": context, "context": {"cluster": cluster_name, "user": user, "namespace": "default"}}],
            "current-context": context,
            "preferences": {},
        }
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        # JSON is valid YAML, so kubernetes.config (yaml.safe_load) reads it.
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(config, fh, indent=2)
            fh.write("\n")
        return path

    @property
    def ca_cert_path(self) -> str | None:
        """The certificate a client verifies the emulator's HTTPS with (``start(tls=True)``), else None."""
        return self._tls[1] if self._tls else None

    def write_service_account(
        self, directory: str | os.PathLike[str], token: str = "emulator-token", namespace: str = "default"
    ) -> dict[str, str]:
        """What Kubernetes gives a pod for in-cluster access to this emulator: ``token``, ``ca.crt`` and
        ``namespace`` in ``directory`` (a pod's /var/run/secrets/kubernetes.io/serviceaccount), and the
        environment variables KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT, returned. Needs
        ``start(tls=True)``: in-cluster clients speak HTTPS only."""
        if self.url is None or self._tls is None:
            raise RuntimeError("in-cluster access needs an emulator started with tls=True")
        directory = os.fspath(directory)
        os.makedirs(directory, exist_ok=True)
        with open(self._tls[1], encoding="ascii") as fh:
            ca = fh.read()
        for name, content in (("token", token), ("ca.crt", ca), ("namespace", namespace)):
            with open(os.path.join(directory, name), "w", encoding="utf-8") as fh:
                fh.write(content)
        return {"KUBERNETES_SERVICE_HOST": self._host, "KUBERNETES_SERVICE_PORT": str(self._port)}

    @property
    def resource_version(self) -> int:
        """The current global resourceVersion."""
        with self._lock:
            return self._rv



def _tls_context(host: str) -> tuple[ssl.SSLContext, str, tempfile.TemporaryDirectory]:
    """A server context with a fresh self-signed certificate for ``host`` (an IP address or a name)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubesim")])
    try:
        alt: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        alt = x509.DNSName(host)
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName([alt, x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    folder = tempfile.TemporaryDirectory(prefix="kubesim-tls-")
    cert_path, key_path = os.path.join(folder.name, "ca.crt"), os.path.join(folder.name, "tls.key")
    with open(cert_path, "wb") as fh:
        fh.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as fh:
        fh.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    return context, cert_path, folder
