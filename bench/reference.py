"""The machine reference every bench prints: how fast the machine (and its load) was while the bench ran.

    .venv/bin/python bench/reference.py            # measure it now, beside the recorded reference machine
    .venv/bin/python bench/reference.py --record   # record this machine as the reference (bench/reference.json)
                                       [--runs 3] [--quiet LOAD]

A bench's figure says little alone: the same page takes 40 ms on one machine and 110 ms on another, or on
the same machine beside other work. Every bench measures, at the start and at the end of its run, two fixed
workloads that stand for what the console does, each in a fresh child process:

  page    a fixed page rendered through Django's test client, logged in (sessions, auth and CSRF
          middleware), on a small fixed database in a temporary SQLite file: 150 users in 20 groups, the
          page lists them with their groups (a query, a prefetch, a count per group) in a template of a
          table row per user (loops, conditions, filters, an include, links by `{% url %}`), 25 requests
          after 3 to warm; the median, and the spread (p25-p75 around it)
  python  a pure-Python loop of fixed work (dicts, strings, arithmetic, a sort: what a page's Python and the
          sync's parsing do), the median of 7 runs, and their spread

It is built only of Django and Python, never of the console's own code, so that it moves with the machine
(and the versions of Python and Django, which are recorded beside it) and never with a change of the
console: a page that gets slower gets slower against it. It takes about 4 s (twice per bench run).

Each figure is then printed also as a multiple of the reference ("p95 71.2 ms = 3.1 × ref"), and, when the
reference machine's own values are recorded (bench/reference.json, `--record`), scaled to it ("≈ 35.1 ms on
the reference machine"): figure × recorded reference / this run's reference. The page reference scales the
figures of the console's pages and of what runs Django and a database; the Python one those of pure
Python (the emulator, its schedulers). The ratio of the two machines is printed beside each other: when
they disagree much, the machine differs in more than its speed (disk, memory) and the scaled figures are
rough. The reference at the end should match the one at the start: a drift of more than 25 % says the
machine's load changed during the run, and the figures taken meanwhile are unreliable.

In a bench:

    from bench.reference import Reference
    ref = Reference.start()          # measures and prints the reference at the start
    ...                              # the bench's work
    ref.finish()                     # measures and prints it at the end (and the drift)
    print(f"p95 {ref.ms(p95)}")      # "p95 71.2 ms (3.1 × ref; ≈ 35.1 ms on the reference machine)"
    ref.seconds(42.8), ref.rate(31380, "rows/s"), ref.ms(5.0, basis="python")

`Reference.off()` (a bench's --no-reference) prints the figures alone.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve()
RECORD = HERE.parent / "reference.json"
USERS, GROUPS, WARM, REQUESTS, LOOP_RUNS = 150, 20, 3, 25, 7
DRIFT = 0.25  # end against start: more says the machine's load changed during the run

PAGE_TEMPLATE = """{% load static %}<!doctype html><html><head><title>People</title></head><body>
<h1>People ({{ users|length }})</h1>
<table><thead><tr><th>user</th><th>name</th><th>groups</th><th>joined</th><th>staff</th></tr></thead><tbody>
{% for user in users %}{% include "row.html" %}{% empty %}<tr><td>nobody</td></tr>{% endfor %}
</tbody></table>
<ul>{% for group in groups %}<li class="{% cycle 'odd' 'even' %}">{{ group.name|title }}: {{ group.members }}
  member{{ group.members|pluralize }} ({% widthratio group.members total 100 %} %)</li>{% endfor %}</ul>
<form method="post">{% csrf_token %}<input name="q" value="{{ q|default:'' }}"></form>
</body></html>"""
ROW_TEMPLATE = """<tr class="{% if user.is_staff %}staff{% else %}plain{% endif %}">
<td><a href="{% url 'person' user.pk %}?next={{ request.path|urlencode }}">{{ user.username }}</a></td>
<td>{{ user.first_name|capfirst }} {{ user.last_name|upper|truncatechars:12 }}</td>
<td>{% for group in user.groups.all %}{{ group.name }}{% if not forloop.last %}, {% endif %}{% endfor %}</td>
<td>{{ user.date_joined|date:"Y-m-d H:i" }}</td><td>{{ user.is_staff|yesno:"yes,no" }} {{ user.pk|floatformat:2 }}</td>
</tr>"""


def machine() -> dict:
    """The machine's identity: CPU model, cores, Python and Django versions."""
    found: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            found.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    model, mhz = found.get("model name") or platform.processor() or "?", found.get("cpu MHz", "")
    try:
        import django

        django_version = django.get_version()
    except ImportError:
        django_version = "?"
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": model, "mhz": mhz, "cores": os.cpu_count(), "usable_cores": usable,
            "python": platform.python_version(), "django": django_version, "host": platform.node()}


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def spread(values: list[float]) -> float:
    """The p25-p75 range over the median, halved (so "±3 %")."""
    values = sorted(values)
    q = statistics.quantiles(values, n=4, method="inclusive")
    return (q[2] - q[0]) / 2 / statistics.median(values)


# --- the workloads (run in a child process) -------------------------------------------------------------

def python_work() -> int:
    """Fixed pure-Python work (about 0.12 s of CPU on a 2026 Xeon core): dicts, f-strings, arithmetic, a sort."""
    counts: dict[str, int] = {}
    total = 0
    for i in range(100_000):
        key = f"node-{i % 5000:05d}"
        counts[key] = counts.get(key, 0) + (i * 7) % 13
        if key.endswith("7"):
            total += len(key.upper())
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return total + sum(value for _, value in ranked[:100])


def page_work(workdir: Path) -> list[float]:
    """Milliseconds of each of REQUESTS requests of the fixed page (after WARM), in this process."""
    from django.conf import settings

    settings.configure(
        DEBUG=False, SECRET_KEY="bench-reference", ALLOWED_HOSTS=["*"], ROOT_URLCONF=__name__, USE_TZ=True,
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(workdir / "ref.sqlite3")}},
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "django.contrib.sessions"],
        MIDDLEWARE=["django.middleware.security.SecurityMiddleware",
                    "django.contrib.sessions.middleware.SessionMiddleware",
                    "django.middleware.common.CommonMiddleware", "django.middleware.csrf.CsrfViewMiddleware",
                    "django.contrib.auth.middleware.AuthenticationMiddleware"],
        PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"],
        TEMPLATES=[{"BACKEND": "django.template.backends.django.DjangoTemplates", "OPTIONS": {
            "context_processors": ["django.template.context_processors.request",
                                   "django.contrib.auth.context_processors.auth"],
            "loaders": [("django.template.loaders.locmem.Loader",
                         {"page.html": PAGE_TEMPLATE, "row.html": ROW_TEMPLATE})]}}],
        STATIC_URL="/static/", LOGGING_CONFIG=None,
    )
    import django

    django.setup()
    from datetime import timedelta

    from django.contrib.auth.models import Group, User
    from django.core.management import call_command
    from django.test import Client

    call_command("migrate", verbosity=0)
    groups = Group.objects.bulk_create([Group(name=f"team {g:02d}") for g in range(GROUPS)])
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    users = User.objects.bulk_create([
        User(username=f"user{u:04d}", first_name=f"first{u}", last_name=f"last name {u}", is_staff=u % 9 == 0,
             date_joined=start + timedelta(hours=u), password="x") for u in range(USERS)])
    through = User.groups.through
    through.objects.bulk_create([through(user_id=user.pk, group_id=groups[(i + k * 7) % GROUPS].pk)
                                 for i, user in enumerate(users) for k in range(2)])
    admin = User.objects.create_user("reference-admin", password="x")
    client = Client()
    client.force_login(admin)
    for _ in range(WARM):
        assert client.get("/people/?q=a").status_code == 200
    times, cpu = [], []
    for _ in range(REQUESTS):
        started, started_cpu = time.perf_counter(), time.process_time()
        response = client.get("/people/?q=a")
        times.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - started_cpu) * 1000)
        assert response.status_code == 200 and b"user0149" in response.content
    return times, cpu


def people(request):
    from django.contrib.auth.models import Group, User
    from django.db.models import Count
    from django.shortcuts import render

    users = list(User.objects.exclude(username="reference-admin").order_by("username").prefetch_related("groups"))
    groups = list(Group.objects.annotate(members=Count("user")).order_by("name"))
    return render(request, "page.html", {"users": users, "groups": groups, "total": len(users),
                                         "q": request.GET.get("q")})


def person(request, pk):  # only reversed by {% url %}
    from django.http import HttpResponse

    return HttpResponse(str(pk))


def _urlpatterns():
    from django.urls import path

    return [path("people/", people), path("people/<int:pk>/", person, name="person")]


def __getattr__(name):  # ROOT_URLCONF is this module: its urlpatterns, built once Django is set up
    if name == "urlpatterns":
        return _urlpatterns()
    raise AttributeError(name)


def child() -> dict:
    """Both workloads, in this (fresh) process: the figures as a dict."""
    with tempfile.TemporaryDirectory(prefix="bench-reference-") as workdir:
        page, page_cpu = page_work(Path(workdir))
    python_work()  # warm
    loops, loops_cpu = [], []
    for _ in range(LOOP_RUNS):
        started, started_cpu = time.perf_counter(), time.process_time()
        python_work()
        loops.append((time.perf_counter() - started) * 1000)
        loops_cpu.append((time.process_time() - started_cpu) * 1000)
    # The CPU time beside the wall time: their ratio is the share of a core the reference got (a loaded
    # machine gives less; the benches' wall times suffer alike).
    return {"page_ms": statistics.median(page), "page_spread": spread(page), "page_requests": len(page),
            "page_cpu_ms": statistics.median(page_cpu),
            "python_ms": statistics.median(loops), "python_spread": spread(loops), "python_runs": len(loops),
            "python_cpu_ms": statistics.median(loops_cpu)}


# --- measuring and printing ---------------------------------------------------------------------------

def measure() -> dict:
    """The reference, measured in a fresh child process (its own Django settings, whatever the bench's)."""
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL")}
    before = load_average()
    started = time.perf_counter()
    done = subprocess.run([sys.executable, str(HERE), "--child"], capture_output=True, text=True, env=env,
                          cwd=str(HERE.parent), timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"the machine reference failed:\n{done.stderr[-2000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    figures.update(load=before, load_after=load_average(), took_s=round(time.perf_counter() - started, 1),
                   at=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
    return figures


def recorded() -> dict | None:
    try:
        return json.loads(RECORD.read_text())
    except (OSError, ValueError):
        return None


def load_text(values) -> str:
    return "load " + "/".join(f"{x:.2f}" for x in values)


def describe(figures: dict) -> str:
    share = (figures["page_cpu_ms"] + figures["python_cpu_ms"]) / (figures["page_ms"] + figures["python_ms"])
    return (f"page {figures['page_ms']:.1f} ms (median of {figures['page_requests']}, ±{figures['page_spread']:.0%}), "
            f"python {figures['python_ms']:.1f} ms (median of {figures['python_runs']}, "
            f"±{figures['python_spread']:.0%}); {share:.0%} of a core (CPU/wall); {load_text(figures['load'])}; "
            f"{figures['took_s']:.1f} s")


BASES = {"page": ("page_ms", "ref"), "python": ("python_ms", "py-ref")}


def ratio(value: float) -> str:
    """A multiple of the reference, with the digits that say something: 12.3, 3.14, 0.052."""
    if value >= 10:
        return f"{value:.1f}"
    if value >= 0.1:
        return f"{value:.2f}"
    return f"{value:.2g}"


@dataclass
class Reference:
    """The reference of one bench run: measured at its start and end; formats figures against it."""

    runs: list = field(default_factory=list)
    record: dict | None = None
    enabled: bool = True
    out: object = None

    @classmethod
    def start(cls, *, out=None) -> "Reference":
        ref = cls(record=recorded(), out=out)
        ref._take("start")
        return ref

    @classmethod
    def off(cls) -> "Reference":
        return cls(enabled=False)

    def _print(self, text: str) -> None:
        print(text, file=self.out or sys.stdout, flush=True)

    def _take(self, when: str) -> None:
        figures = measure()
        self.runs.append(figures)
        if when == "start":
            m = machine()
            self._print(f"machine reference (bench/reference.py): {m['cpu']}, {m['cores']} cores "
                        f"({m['usable_cores']} usable), Python {m['python']}, Django {m['django']}")
        self._print(f"  reference at the {when}: {describe(figures)}")
        if when == "start":
            rec = self.record
            if rec:
                self._print(f"  the reference machine (bench/reference.json, {rec['at']}): {rec['machine']['cpu']}, "
                            f"{rec['machine']['cores']} cores: page {rec['page_ms']:.1f} ms, python "
                            f"{rec['python_ms']:.1f} ms ({load_text(rec['load'])}"
                            + (f"; {rec['note']}" if rec.get("note") else "") + "); this machine is "
                            f"{figures['page_ms'] / rec['page_ms']:.2f}× (page) and "
                            f"{figures['python_ms'] / rec['python_ms']:.2f}× (python) as slow as it")
                same = (rec["machine"].get("python"), rec["machine"].get("django")) == (machine()["python"],
                                                                                         machine()["django"])
                if not same:
                    self._print(f"  (recorded with Python {rec['machine'].get('python')}, Django "
                                f"{rec['machine'].get('django')}: the scaled figures are rough)")
            else:
                self._print("  no reference machine recorded (bench/reference.py --record): figures × ref only")

    def finish(self) -> None:
        """The reference at the end of the run, and its drift against the start."""
        if not self.enabled or len(self.runs) != 1:
            return
        self._take("end")
        first, last = self.runs
        for key, label in (("page_ms", "page"), ("python_ms", "python")):
            drift = last[key] / first[key] - 1
            if abs(drift) > DRIFT:
                self._print(f"  the {label} reference moved {drift:+.0%} during the run: the machine's load changed, "
                            "the figures taken meanwhile are unreliable")

    def value(self, basis: str = "page") -> float:
        """This run's reference (ms): the mean of its start and end."""
        key = BASES[basis][0]
        return statistics.fmean(run[key] for run in self.runs)

    def factor(self, basis: str = "page") -> float | None:
        """Multiply a time by this to read it on the reference machine (None: none recorded)."""
        if not self.enabled or not self.record:
            return None
        return self.record[BASES[basis][0]] / self.value(basis)

    def ms(self, value: float, *, basis: str = "page", digits: int = 1, unit: str = "ms") -> str:
        """A time in ms: "71.2 ms (3.1 × ref; ≈ 35.1 ms on the reference machine)"."""
        text = f"{value:.{digits}f} {unit}"
        if not self.enabled:
            return text
        scale = {"ms": 1, "s": 1000}[unit]
        text += f" ({ratio(value * scale / self.value(basis))} × {BASES[basis][1]}"
        factor = self.factor(basis)
        if factor is not None:
            text += f"; ≈ {value * factor:.{digits}f} {unit} on the reference machine"
        return text + ")"

    def seconds(self, value: float, *, basis: str = "page", digits: int = 2) -> str:
        return self.ms(value, basis=basis, digits=digits, unit="s")

    def rate(self, value: float, unit: str, *, basis: str = "page") -> str:
        """A rate: "31,380 rows/s (734 per ref; ≈ 64,000 rows/s on the reference machine)"."""
        text = f"{value:,.0f} {unit}"
        if not self.enabled:
            return text
        per = unit.rsplit("/", 1)[0]
        text += f" ({value * self.value(basis) / 1000:,.1f} {per} per {BASES[basis][1]}"
        factor = self.factor(basis)
        if factor is not None:
            text += f"; ≈ {value / factor:,.0f} {unit} on the reference machine"
        return text + ")"

    def columns(self, value_ms: float, *, basis: str = "page") -> tuple[str, str]:
        """For a table: ("3.1", "35.1") — × ref and the value on the reference machine ("" when none)."""
        if not self.enabled:
            return "", ""
        factor = self.factor(basis)
        return ratio(value_ms / self.value(basis)), ("" if factor is None else f"{value_ms * factor:.1f}")


def record_now(runs: int, quiet: float, note: str = "") -> dict:
    """Measure `runs` times (after waiting for a 1-minute load of at most `quiet`) and write bench/reference.json."""
    if quiet:
        deadline = time.monotonic() + 600
        while os.getloadavg()[0] > quiet and time.monotonic() < deadline:
            time.sleep(5)
    taken = [measure() for _ in range(runs)]
    for figures in taken:
        print(f"  {describe(figures)}")
    rec = {
        "page_ms": round(statistics.median(t["page_ms"] for t in taken), 2),
        "python_ms": round(statistics.median(t["python_ms"] for t in taken), 2),
        "page_spread": round(max(t["page_spread"] for t in taken), 3),
        "python_spread": round(max(t["python_spread"] for t in taken), 3),
        "page_cpu_ms": round(statistics.median(t["page_cpu_ms"] for t in taken), 2),
        "python_cpu_ms": round(statistics.median(t["python_cpu_ms"] for t in taken), 2),
        "runs": [{k: t[k] for k in ("page_ms", "python_ms", "load")} for t in taken],
        "load": taken[0]["load"], "load_after": taken[-1]["load_after"],
        "at": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
        "how": f"bench/reference.py --record --runs {runs}" + (f" --quiet {quiet:g}" if quiet else ""),
        "note": note,
    }
    RECORD.write_text(json.dumps(rec, indent=2) + "\n")
    return rec


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--record", action="store_true", help="record this machine as the reference machine")
    parser.add_argument("--runs", type=int, default=3, help="measurements taken to record (their median)")
    parser.add_argument("--quiet", metavar="LOAD", type=float, default=0,
                        help="first wait (at most 10 min) for a 1-minute load average of at most LOAD")
    parser.add_argument("--note", default="", help="what to say of the recording (kept in bench/reference.json)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child()))
        return 0
    if args.record:
        rec = record_now(args.runs, args.quiet, args.note)
        print(f"recorded {RECORD}: page {rec['page_ms']} ms, python {rec['python_ms']} ms, "
              f"{load_text(rec['load'])} on {rec['machine']['cpu']} ({rec['machine']['cores']} cores)")
        return 0
    ref = Reference.start()
    ref.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
