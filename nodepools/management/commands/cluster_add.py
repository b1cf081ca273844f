"""Register a cluster: `manage.py cluster_add NAME --kubeconfig PATH [--context CTX]` or `--in-cluster`.

Only the path and context name are stored, never credentials: the kubeconfig stays a file on the server.
"""
from __future__ import annotations

import os

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from kubernetes import config

from nodepools import services
from nodepools.models import Cluster


class Command(BaseCommand):
    help = "Register a Kubernetes cluster by kubeconfig path (and context) or in-cluster service account."

    def add_arguments(self, parser):
        parser.add_argument("name", help="cluster name (a DNS label, e.g. prod-east)")
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig file on this server")
        source.add_argument("--in-cluster", action="store_true", help="use the pod's service account")
        parser.add_argument("--context", default="", help="kubeconfig context (default: its current-context)")
        parser.add_argument("--description", default="")
        parser.add_argument("--update", action="store_true", help="change the access of an existing cluster")
        parser.add_argument("--prometheus-url", default=None,
                            help="Prometheus holding the cluster's DCGM exporter series (GPU utilization)")
        parser.add_argument("--prometheus-bearer-token-file", default=None, metavar="PATH")
        parser.add_argument("--prometheus-basic-auth-file", default=None, metavar="PATH",
                            help="a file holding one line user:password")
        parser.add_argument("--prometheus-label-matchers", default=None, metavar="MATCHERS",
                            help='extra label matchers, e.g. cluster="prod-east"')

    def handle(self, *args, name, kubeconfig, in_cluster, context, description, update, **options):
        if in_cluster and context:
            raise CommandError("--context applies to --kubeconfig only.")
        path = ""
        if kubeconfig:
            path = os.path.abspath(kubeconfig)
            self._check_kubeconfig(path, context)
        values = dict(kubeconfig_path=path, kube_context=context, in_cluster=bool(in_cluster))
        for key in ("prometheus_url", "prometheus_bearer_token_file", "prometheus_basic_auth_file",
                    "prometheus_label_matchers"):
            if options.get(key) is not None:
                values[key] = options[key]
        existing = Cluster.objects.filter(name=name).first()
        try:
            if existing and not update:
                raise CommandError(f"Cluster '{name}' already exists (use --update to change its access).")
            if existing:
                if description:
                    values["description"] = description
                services.cluster_update(actor=None, cluster=existing, **values)
                self.stdout.write(f"Cluster '{name}' now uses {self._source(values)}.")
            else:
                services.cluster_create(actor=None, name=name, description=description, **values)
                self.stdout.write(f"Cluster '{name}' registered ({self._source(values)}); "
                                  "`manage.py sync_clusters` mirrors its nodes and pods.")
        except ValidationError as exc:
            raise CommandError("; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in exc.message_dict.items()))

    @staticmethod
    def _source(values) -> str:
        if values["in_cluster"]:
            return "the in-cluster service account"
        return f"kubeconfig {values['kubeconfig_path']}" + (f", context {values['kube_context']}" if values["kube_context"] else "")

    @staticmethod
    def _check_kubeconfig(path: str, context: str) -> None:
        if not os.path.isfile(path):
            raise CommandError(f"kubeconfig: no file at {path}.")
        try:
            contexts, current = config.list_kube_config_contexts(config_file=path)
        except Exception as exc:
            raise CommandError(f"kubeconfig {path} cannot be read: {exc}")
        names = [c["name"] for c in contexts]
        if context and context not in names:
            raise CommandError(f"kubeconfig {path} has no context '{context}' (it has: {', '.join(names) or 'none'}).")
        if not context and not current:
            raise CommandError(f"kubeconfig {path} has no current-context: name one with --context.")
