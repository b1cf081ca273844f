"""Shared fixtures: a small organisation built through the services, and one login per role."""
from __future__ import annotations

import http.server
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from common import caches
from tests import profiles  # noqa: F401  (loads this run's Hypothesis profile)

REQUIRE_POSTGRES = os.environ.get("CONSOLE_REQUIRE_POSTGRES") == "1"
REQUIRE_REDIS = os.environ.get("CONSOLE_REQUIRE_REDIS") == "1"
# CI installs Debian's prometheus and sets this: there a missing Prometheus is a failure, not a skip.
REQUIRE_PROMETHEUS = os.environ.get("CONSOLE_REQUIRE_PROMETHEUS") == "1"


# pytest-xdist runs the suite in worker processes (`make test`: tests/parallel.py). Each worker has its own
# test database (pytest-django adds the worker's name to it), and here its own Redis: a database number and
# a channel prefix of its own, so that one worker's cache.clear() or hint never reaches another's pages.
# Set in the environment too, for the processes a test starts (Daphne, the sync, the demo).
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")


def _worker_redis_url(url: str) -> str:
    """REDIS_URL with database 1 + the worker's number (gw0 -> /1, gw1 -> /2, ...): 0 stays production's."""
    if not url or not WORKER:
        return url
    from urllib.parse import urlsplit, urlunsplit

    number = int(WORKER.removeprefix("gw") or 0) + 1
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{number}"))


if WORKER and os.environ.get("REDIS_URL"):
    os.environ["REDIS_URL"] = _worker_redis_url(os.environ["REDIS_URL"])
    os.environ["CONSOLE_CHANNEL_PREFIX"] = f"asgi-{WORKER}"


def pytest_configure(config):
    from django.conf import settings

    if settings.configured:
        # Password hashing is deliberately slow; tests log in many users.
        settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
        if WORKER and settings.REDIS_URL:
            url = _worker_redis_url(settings.REDIS_URL)
            settings.REDIS_URL = url
            for host in settings.REDIS_CHANNEL_HOSTS:
                host["address"] = url
            settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] = f"asgi-{WORKER}"
            settings.CACHES["default"]["LOCATION"] = url


def pytest_report_header(config):
    from tests import profiles

    lines = [f"console: Hypothesis profile {profiles.PROFILE!r}; the agreement runs take "
             f"{profiles.examples(ci=500, default=100)} cases (HYPOTHESIS_PROFILE=ci: 500, default: 100)"]
    if DJANGO_FREE_RAN:
        lines.append("console: CONSOLE_DJANGO_FREE_RAN=1: the Django-free tests of tests/kube and tests/kubesim are "
                     "deselected (they ran in the SQLite run; no database or Redis in them)")
    return lines



# How `make test` hands tests to its workers (pytest-xdist `--dist loadgroup --no-loadscope-reorder`): one test at a
# time to whichever worker has at most two waiting, in the order below; but the tests of a module whose fixtures are
# made once per module (a server, a browser, the demo, `kept_db`'s data) go together to one worker, so that the
# module's fixtures are made once, not once on every worker that would get one of its tests.
#
# The longest files first (a grouped module counts as one long test), so that they run side by side from the start
# instead of one worker finishing them alone at the end: measured with `make test --durations=0`, the sum of each
# file's setup, call and teardown, longest first. The order of everything else is the collection's.
LONGEST_FIRST = (
    "tests/test_permission_matrix.py", "tests/test_browser_navigation.py", "tests/workloads/test_loop_agreement.py",
    "tests/workloads/test_fit_agreement.py", "tests/workloads/test_demo_story.py", "tests/test_browser.py",
    "tests/test_schemathesis.py", "tests/test_browser_layout.py", "tests/hostile/test_endpoints.py",
    "tests/accounts/test_oidc_provider.py", "tests/test_run_demo.py", "tests/nodepools/test_sync_commands.py",
    "tests/nodepools/test_migrations.py", "tests/hostile/test_daphne.py", "tests/nodepools/test_gpu_metrics.py",
    "tests/test_fuzz_filters.py", "tests/test_browser_charts.py", "tests/nodepools/test_demo_sharing.py",
    "tests/test_security.py", "tests/workloads/test_views.py", "tests/ui/test_tables.py", "tests/kubesim/test_emulator.py",
    "tests/workloads/test_browser_submit.py", "tests/test_browser_tables_live.py", "tests/usage/test_usage.py",
    "tests/usage/test_idle_slices.py",
)


def _longest_first(items) -> None:
    rank = {path: index for index, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))  # stable: the rest in order


def _grouped_by_module(items) -> None:
    """Mark the tests of a module that uses a fixture made once per module `xdist_group(<its file>)`: under
    `--dist loadgroup` they run on one worker (a session fixture is made once per worker anyway: no group)."""
    for item in items:
        definitions = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
        if any(defs and defs[-1].scope in ("module", "package") for defs in definitions.values()):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


# The tests of kube/ and kubesim/ run without Django (`pytest tests/kube tests/kubesim -p no:django`): no
# database, no cache, no channel layer. CI's PostgreSQL + Redis run sets CONSOLE_DJANGO_FREE_RAN=1 (they ran
# in its SQLite run, and would run the very same code again): there they are deselected, and counted.
DJANGO_FREE = ("tests/kube/", "tests/kubesim/")
DJANGO_FREE_RAN = os.environ.get("CONSOLE_DJANGO_FREE_RAN") == "1"
_DATABASE_FIXTURES = {"db", "transactional_db", "django_db_setup", "live_asgi", "client", "settings"}


def _deselect_django_free(config, items) -> None:
    chosen, dropped = [], []
    for item in items:
        free = item.nodeid.startswith(DJANGO_FREE) and not _DATABASE_FIXTURES & set(getattr(item, "fixturenames", ()))
        (dropped if free else chosen).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = chosen


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the groups
def pytest_collection_modifyitems(config, items):
    if DJANGO_FREE_RAN:
        _deselect_django_free(config, items)
    _longest_first(items)
    _grouped_by_module(items)
    # PostgreSQL-only tests skip on SQLite with the reason; CI's PostgreSQL pass sets
    # CONSOLE_REQUIRE_POSTGRES=1 so that they can never skip silently there.
    from django.conf import settings

    if not settings.configured:  # running Django-free tests alone (-p no:django)
        return
    from django.db import connection

    if connection.vendor != "postgresql":
        if REQUIRE_POSTGRES:
            raise pytest.UsageError("CONSOLE_REQUIRE_POSTGRES=1 but DATABASE_URL does not name a PostgreSQL database")
        skip = pytest.mark.skip(reason="needs PostgreSQL: run with DATABASE_URL=postgres://postgres@127.0.0.1:5432/console")
        for item in items:
            if "postgres" in item.keywords:
                item.add_marker(skip)
    if not settings.REDIS_URL:
        if REQUIRE_REDIS:
            raise pytest.UsageError("CONSOLE_REQUIRE_REDIS=1 but REDIS_URL is not set")
        skip = pytest.mark.skip(reason="needs Redis: run with REDIS_URL=redis://127.0.0.1:6379/0")
        for item in items:
            if "redis" in item.keywords:
                item.add_marker(skip)


# kube/ and kubesim/ import the standard library only (not even common/): their functools caches are
# found here rather than registered. Kept: the CRDs read from the manifests of kube/crds/, which no test
# changes (read and compiled again before each test, they made tests/kube about twice as slow).
STANDALONE_PACKAGES = ("kube", "kubesim")
KEPT = {"kube.crd.custom_resource"}


_STANDALONE_CACHES: dict[str, list] = {}  # module name -> its functools caches' cache_clear, found once per module


def _standalone_cache_clears() -> Iterator[Callable[[], None]]:
    for name, module in list(sys.modules.items()):
        if name.partition(".")[0] not in STANDALONE_PACKAGES:
            continue
        found = _STANDALONE_CACHES.get(name)
        if found is None:
            found = _STANDALONE_CACHES[name] = [
                value.cache_clear for value in list(vars(module).values())
                if (hasattr(value, "cache_clear") and getattr(value, "__module__", None) == name
                    and f"{name}.{getattr(value, '__name__', '')}" not in KEPT)]
        yield from found


@pytest.fixture(autouse=True)
def _process_caches_emptied():
    """Every process-wide cache starts each test empty (common/caches.py): nothing one test cached
    answers the next."""
    caches.clear_all()
    for clear in _standalone_cache_clears():
        clear()
    yield


def require_prometheus() -> None:
    """Skip (or, under CONSOLE_REQUIRE_PROMETHEUS=1, fail) when /usr/bin/prometheus is not installed."""
    from gpumetrics import localprom

    if not localprom.available():
        if REQUIRE_PROMETHEUS:
            pytest.fail(f"CONSOLE_REQUIRE_PROMETHEUS=1 but Prometheus is missing ({localprom.PROMETHEUS})")
        pytest.skip("Prometheus is not installed (apt-get install prometheus; CONSOLE_REQUIRE_PROMETHEUS=1 makes "
                    "this a failure)")


@pytest.fixture
def prometheus():
    """`prometheus(*scrape_urls, scrape_interval="1s")`: a real Prometheus (Debian's /usr/bin/prometheus)
    scraping those URLs (e.g. `emulator.url + "/dcgm/metrics"`), ready, stopped after the test. Skips
    with the reason when Prometheus is not installed, except under CONSOLE_REQUIRE_PROMETHEUS=1."""
    from gpumetrics import cache_clear
    from gpumetrics.localprom import LocalPrometheus

    require_prometheus()
    started = []

    def start(*urls: str, scrape_interval: str = "1s", tsdb_dir: str | None = None):
        prom = LocalPrometheus(urls, scrape_interval=scrape_interval, tsdb_dir=tsdb_dir)
        started.append(prom)
        prom.start()
        return prom

    cache_clear()
    yield start
    for prom in started:
        prom.stop()
    cache_clear()


def _emulator_factory() -> Iterator[Callable[..., object]]:
    from kubesim import KubeEmulator

    started = []

    def start(*, tls: bool = False, **options):
        emulator = KubeEmulator(**{"bookmark_interval": 0.1, **options})
        emulator.start(tls=tls)
        started.append(emulator)
        return emulator

    yield start
    for emulator in reversed(started):
        emulator.stop()


@pytest.fixture
def emulators() -> Iterator[Callable[..., object]]:
    """`emulators(**options)`: a Kubernetes API emulator (kubesim.KubeEmulator with these options) on a free
    port, started (`tls=True`: over HTTPS, its own CA); every one started is stopped after the test. The one place
    an emulator is made for a test."""
    yield from _emulator_factory()


@pytest.fixture(scope="module")
def module_emulators() -> Iterator[Callable[..., object]]:
    """`emulators`, for a fixture made once per module (`kept_db`): stopped when the module's tests end. What a
    test writes in such an emulator stays for the module's next tests."""
    yield from _emulator_factory()


@pytest.fixture
def sim(emulators):
    """The emulator the console's tests speak to over HTTP (bookmarks every 0.1 s, the real clock)."""
    return emulators()


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False


@pytest.fixture
def http_server() -> Iterator[Callable[..., str]]:
    """`http_server(handler(request) -> (status, content_type, body))`: a local server's URL."""
    servers = []

    def start(answer: Callable[[http.server.BaseHTTPRequestHandler], tuple[int, str, bytes]]) -> str:
        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                status, ctype, body = answer(self)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass

            do_GET = do_POST = _answer

        server = _Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def slow_prometheus(http_server) -> str:
    """A 'Prometheus' that answers every query after 3 seconds."""
    def answer(request):
        time.sleep(3)
        return 200, "application/json", b'{"status":"success","data":{"resultType":"vector","result":[]}}'

    return http_server(answer)


# A module whose tests only read the org and the logins, or write rows that are rolled back (they change none of
# `Org`'s lists: no `org.run`, no `org.load`), builds them once: `pytestmark = pytest.mark.usefixtures("kept_org")`
# (with `django_db`). Its tests' `cluster`, `org` and `users` are then the module's (`kept_db`).
KEPT_ORG = "kept_org"


@pytest.fixture(scope="module")
def kept_org(kept_db):
    """The org and its logins, built once for the module (`kept_db`); `cluster`, `org` and `users` answer them."""
    from nodepools import services as pool_services

    with kept_db.unblock():
        org = Org(pool_services.cluster_create(actor=None, name="lab"))
        return org, role_users(org)


@pytest.fixture
def cluster(request, db):
    from nodepools import services as pool_services

    if KEPT_ORG in request.fixturenames:
        return request.getfixturevalue(KEPT_ORG)[0].cluster
    return pool_services.cluster_create(actor=None, name="lab")


class Org:
    """cluster `lab`: pools default and a100 (gpu-type=A100); departments rnd (projects rnd-a, rnd-b)
    and ops (project ops-a); two V100 nodes in default, two A100 nodes in a100."""

    def __init__(self, cluster):
        from nodepools import services as pool_services
        from nodepools.demo_cluster import operand_pods
        from kubesim import make_node
        from projects import services

        self.cluster = cluster
        self.default = cluster.default_pool
        self.a100 = pool_services.pool_create(actor=None, cluster=cluster, name="a100", label_key="gpu-type",
                                              label_value="A100")
        self.rnd = services.department_create(actor=None, cluster=cluster, name="rnd")
        self.ops = services.department_create(actor=None, cluster=cluster, name="ops")
        self.rnd_a = services.project_create(actor=None, department=self.rnd, name="rnd-a")
        self.rnd_b = services.project_create(actor=None, department=self.rnd, name="rnd-b")
        self.ops_a = services.project_create(actor=None, department=self.ops, name="ops-a")
        self.nodes = [
            make_node("v100-1", gpus=4, gpu_product="Tesla-V100-SXM2-16GB", gpu_memory_mib=16384),
            make_node("v100-2", gpus=4, gpu_product="Tesla-V100-SXM2-16GB", gpu_memory_mib=16384),
            make_node("a100-1", gpus=4, gpu_product="NVIDIA-A100-SXM4-40GB", gpu_memory_mib=40960,
                      labels={"gpu-type": "A100"}),
            make_node("a100-2", gpus=4, gpu_product="NVIDIA-A100-SXM4-40GB", gpu_memory_mib=40960,
                      labels={"gpu-type": "A100"}),
        ]
        # The NVIDIA operands run on every GPU node, else it is "Missing NVIDIA container toolkit".
        self.pods: list[dict] = operand_pods(self.nodes)
        self.load()

    def load(self):
        from nodepools import services as pool_services

        pool_services.cluster_objects_replace(cluster=self.cluster, nodes=self.nodes, pods=self.pods)

    def run(self, name, project, node, *, gpus=1, priority=50, phase="Running", cpu="1", memory="1Gi", **extra):
        """Add a pod of `project` on `node` and reload the mirror."""
        from kubesim import make_pod

        requests = {"cpu": cpu, "memory": memory}
        if gpus:
            requests["nvidia.com/gpu"] = str(gpus)
        self.pods.append(
            make_pod(name, f"runai-{project.name}", node=node, phase=phase, priority=priority,
                     containers=[{"name": "main", "requests": requests}], **extra)
        )
        self.load()

    def quota(self, owner, pool):
        field = "project" if hasattr(owner, "department_id") else "department"
        return pool.quotas.get(**{field: owner})


@pytest.fixture
def org(request, cluster):
    if KEPT_ORG in request.fixturenames:
        return request.getfixturevalue(KEPT_ORG)[0]
    return Org(cluster)


def make_user(username, **extra):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_user(username=username, password="pw-" + username, **extra)


@pytest.fixture
def users(request, org):
    """One login per role, scoped into the org: department roles on rnd, project roles on rnd-a."""
    if KEPT_ORG in request.fixturenames:
        return request.getfixturevalue(KEPT_ORG)[1]
    return role_users(org)


def role_users(org) -> dict:
    """`users`' logins, made for `org` (for a fixture of a wider scope, `kept_db`)."""
    from projects import services
    from access.rules import Role

    made = {
        "sysadmin": make_user("sysadmin"),
        "rnd_admin": make_user("rnd-admin"),
        "rnd_viewer": make_user("rnd-viewer"),
        "proj_admin": make_user("proj-admin"),
        "researcher": make_user("researcher"),
        "cluster_viewer": make_user("cluster-viewer"),
        "nobody": make_user("nobody"),
    }
    services.role_assign(actor=None, role=Role.SYSTEM_ADMIN, user=made["sysadmin"])
    services.role_assign(actor=None, role=Role.DEPARTMENT_ADMIN, user=made["rnd_admin"], department=org.rnd)
    services.role_assign(actor=None, role=Role.DEPARTMENT_VIEWER, user=made["rnd_viewer"], department=org.rnd)
    services.role_assign(actor=None, role=Role.PROJECT_ADMIN, user=made["proj_admin"], project=org.rnd_a)
    services.role_assign(actor=None, role=Role.RESEARCHER, user=made["researcher"], project=org.rnd_a)
    services.role_assign(actor=None, role=Role.VIEWER, user=made["cluster_viewer"], cluster=org.cluster)
    return made


@pytest.fixture(scope="module")
def kept_db(django_db_setup, django_db_blocker):
    """Data that a module's tests share, built once (as Django's TestCase.setUpTestData builds a class's): the
    module's tests run in an outer transaction, each test's own transaction a savepoint in it, and the outer one is
    rolled back when the module's tests end. A module-scoped fixture that builds the data depends on this one and
    builds it inside `django_db_blocker.unblock()` (yielded here). Only for a module whose tests are none of them
    transactional (`transaction=True` flushes the database) and none build the shared objects again (a second
    `org` would clash with the kept one)."""
    from django.db import transaction

    with django_db_blocker.unblock():
        outer = transaction.atomic()
        outer._from_testcase = True  # a service's durable atomic block is checked as in a TestCase
        outer.__enter__()
        try:
            yield django_db_blocker
        finally:
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)


@pytest.fixture
def api():
    """`api(user)`: a DRF test client logged in as `user` (None: anonymous); session auth, CSRF not enforced."""
    from rest_framework.test import APIClient

    def make(user=None):
        client = APIClient()
        if user is not None:
            client.force_login(user)
        return client

    return make
