from django.apps import AppConfig


class NodepoolsConfig(AppConfig):
    name = "nodepools"
