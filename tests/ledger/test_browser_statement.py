"""A department manager's statement in a real browser (Chromium through Playwright, against Daphne;
fixtures of tests/test_browser.py): from the page they land on to the totals, the CSV and the print."""
from __future__ import annotations

import csv
import datetime as dt
import io
import re
from decimal import Decimal
from pathlib import Path

from tests import test_browser
from tests.ledger.test_closing import run
from tests.test_browser import chromium, live_asgi, log_in, page, shoot  # noqa: F401
from tests.test_browser_charts import console_errors  # noqa: F401

pytestmark = test_browser.pytestmark


def test_a_department_manager_opens_reads_downloads_and_prints_their_statement(page, console_errors, org, users):
    from playwright.sync_api import expect

    from django.utils import timezone
    from ledger import services
    from ledger.selectors import Month

    hour = services.hour_floor(timezone.now())
    run(org, "train", org.rnd_a, "a100-1", hour, gpus=2)  # 2 GPU-hours in the current hour
    run(org, "notebook", org.rnd_b, "v100-1", hour + dt.timedelta(minutes=30), gpus="0.5")  # 0.25 GPU-hours
    run(org, "serve", org.ops_a, "v100-2", hour)  # another department's
    services.ledger_hour_close(cluster=org.cluster, hour=hour)
    services.rate_create(actor=None, gpu_model="NVIDIA-A100-SXM4-40GB", currency="EUR",
                         valid_from=hour.date().replace(day=1), gpu_hour=Decimal("2.5"))
    services.rate_create(actor=None, gpu_model="Tesla-V100-SXM2-16GB", currency="EUR",
                         valid_from=hour.date().replace(day=1), gpu_hour=Decimal("1"))

    log_in(page, "rnd-viewer", "pw-rnd-viewer")
    expect(page.locator("h1")).to_have_text("Department rnd")  # where a department viewer lands
    page.get_by_role("link", name="GPU-hours statement").click()
    month = Month.parse(None)
    expect(page.locator("h1")).to_have_text(f"GPU-hours statement: Department rnd, {month.title}")
    totals = page.locator("#statement-totals")
    expect(totals.locator('[data-total="gpu_hours"]')).to_have_text("2.25")
    expect(totals.locator('[data-total="cost"]')).to_have_text("5.25 EUR")  # 2 × 2.5 + 0.25 × 1
    lines = page.locator("#statement-lines tbody tr")
    expect(lines).to_have_count(2)
    expect(lines.nth(0)).to_contain_text("rnd-a")
    expect(page.locator("#statement-lines")).not_to_contain_text("ops-a")
    expect(page.locator("#statement-lines tfoot")).to_contain_text("2.25")
    expect(page.locator("#statement-trend canvas")).to_be_visible()  # the month's trend, drawn
    shoot(page, "statement")

    with page.expect_download() as info:
        page.get_by_role("link", name="Download CSV").click()
    assert re.fullmatch(rf"statement-rnd-{month}_lab_\d{{4}}-\d\d-\d\dT\d{{4}}Z\.csv", info.value.suggested_filename)
    rows = list(csv.reader(io.StringIO(Path(info.value.path()).read_text())))
    assert [r[:4] for r in rows[1:]] == [["rnd-a", "a100", "NVIDIA-A100-SXM4-40GB", "2.00"],
                                         ["rnd-b", "default", "Tesla-V100-SXM2-16GB", "0.25"],
                                         ["Total", "", "", "2.25"]]

    # "Print / save as PDF" opens the browser's print dialog (here counted); printed, only the statement.
    page.evaluate("() => { window.printed = 0; window.print = () => { window.printed += 1; }; }")
    page.get_by_role("button", name="Print / save as PDF").click()
    assert page.evaluate("window.printed") == 1
    page.emulate_media(media="print")
    expect(page.locator("header.topbar")).to_be_hidden()
    expect(page.get_by_role("button", name="Print / save as PDF")).to_be_hidden()
    expect(page.locator("#statement-lines")).to_be_visible()
    page.emulate_media(media="screen")

    # The previous month: another statement (none of this month's hours).
    page.get_by_role("link", name=f"← {month.previous().title}").click()
    expect(page.locator("h1")).to_contain_text(month.previous().title)
    expect(page.locator("#statement-totals [data-total='gpu_hours']")).to_have_text("0.00")


def test_a_department_manager_reads_each_line_s_unit_quantity_and_rate(page, console_errors, org, users):
    """Slices of a MIG profile and a replica of a time-sliced GPU: the statement says what each line counts
    in, how many and at what price per unit."""
    from kubesim import make_node, make_pod
    from playwright.sync_api import expect

    from django.utils import timezone
    from ledger import services
    from tests.ledger.test_closing import rfc, timed

    hour = services.hour_floor(timezone.now())
    a100 = {"gpu-type": "A100"}
    org.nodes += [make_node("mig-mixed", gpus=1, mig_config="all-balanced", labels=a100),
                  make_node("sliced", gpus=1, gpu_replicas=4, labels=a100)]
    for name, project, node, requests in (("embed", org.rnd_a, "mig-mixed", {"nvidia.com/mig-1g.10gb": "2"}),
                                          ("notebook", org.rnd_b, "sliced", {"nvidia.com/gpu": "1"})):
        pod = make_pod(name, f"runai-{project.name}", node=node, created=rfc(hour - dt.timedelta(seconds=5)),
                       containers=[{"name": "main", "requests": {"cpu": "1", **requests}}])
        pod["metadata"]["uid"] = f"uid-{name}"
        org.pods.append(timed(pod, hour))
    org.load()
    services.ledger_hour_close(cluster=org.cluster, hour=hour)
    since = hour.date().replace(day=1)
    services.rate_create(actor=None, gpu_model="NVIDIA-A100-SXM4-80GB", currency="EUR", valid_from=since,
                         gpu_hour=Decimal(8))
    services.rate_create(actor=None, gpu_model="NVIDIA-A100-SXM4-80GB", mig_profile="1g.10gb", currency="EUR",
                         valid_from=since, gpu_hour=Decimal("1.5"))

    log_in(page, "rnd-viewer", "pw-rnd-viewer")
    page.get_by_role("link", name="GPU-hours statement").click()
    lines = page.locator("#statement-lines tbody tr")
    expect(lines).to_have_count(2)
    embed = lines.filter(has_text="rnd-a")
    expect(embed.locator("td.unit")).to_have_text("MIG 1g.10gb")
    expect(embed).to_contain_text("2.00 slice-hours")  # 2 slices × 1 h
    expect(embed).to_contain_text("1.5000 per slice-hour")
    notebook = lines.filter(has_text="rnd-b")
    expect(notebook.locator("td.unit")).to_have_text("replica (1/4 GPU)")
    expect(notebook).to_contain_text("1.00 replica-hours")
    expect(notebook).to_contain_text("2.0000 per replica-hour")  # 8 / 4
    expect(notebook).to_contain_text("(model × share)")
    # 2 × 1.5 + 1 × 2, and the CPU of neither priced (no CPU price): 5.00.
    expect(page.locator('#statement-totals [data-total="cost"]')).to_have_text("5.00 EUR")
