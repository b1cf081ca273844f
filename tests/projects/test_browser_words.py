"""Words for people, in a real browser (Chromium through Playwright, against Daphne; fixtures of
tests/test_browser.py): an administrator names a department as people do, is told in words what a
Kubernetes name may hold, and sets a project's memory quota in GiB."""
from __future__ import annotations

from django.urls import reverse

from tests import test_browser
from tests.test_browser import chromium, live_asgi, log_in, page, shoot  # noqa: F401

pytestmark = test_browser.pytestmark


def test_an_administrator_names_a_department_and_sets_memory_in_gib(page, org, users):
    from playwright.sync_api import expect

    from projects.models import Department

    log_in(page, "sysadmin", "pw-sysadmin")
    page.goto(reverse("department-create"))
    expect(page.locator("form.form").get_by_label("Cluster")).to_have_value(str(org.cluster.pk))  # the current one
    page.get_by_label("Display name").fill("R&D Lab")
    page.get_by_label("Kubernetes name").fill("R&D Lab")  # what a person first types
    page.get_by_role("button", name="Save").click()
    error = page.locator(".has-error .error")
    expect(error).to_contain_text("Kubernetes name: Use lowercase letters, digits and '-'; start and end with a "
                                  "letter or digit; at most 63 characters (“R&D Lab” holds capital letters, '&' "
                                  "and a space).")
    expect(page.locator("body")).not_to_contain_text("regex")
    expect(page.get_by_label("Display name")).to_have_value("R&D Lab")  # nothing typed is lost
    shoot(page, "department-name-error")
    page.get_by_label("Kubernetes name").fill("rnd-lab")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("h1")).to_have_text("Department R&D Lab rnd-lab")
    expect(page.locator("h1 .k8s-name")).to_have_text("rnd-lab")
    assert Department.objects.get(name="rnd-lab").display_name == "R&D Lab"

    # The quota editor asks memory in GiB (stored in MiB) and shows it back in GiB.
    quota = org.quota(org.rnd_a, org.a100)
    page.goto(reverse("quota-grid", args=[org.cluster.pk]))
    cell = page.locator(f"#quota-{quota.pk}")
    cell.locator("a.cell-edit").click()
    editor = cell.locator(".quota-editor")
    memory = editor.get_by_label("Deserved CPU memory (GiB)")
    expect(memory).to_have_value("")
    memory.fill("1.5")
    editor.get_by_role("button", name="Save").click()
    expect(cell.locator(".quota-editor .saved")).to_contain_text("Saved:")
    quota.refresh_from_db()
    assert quota.memory_deserved_mib == 1536
    expect(cell.locator(".quota-editor").get_by_label("Deserved CPU memory (GiB)")).to_have_value("1.5")
    # A limit past what anyone means is said as an amount.
    cell.locator(".quota-editor").get_by_label("Deserved GPUs").fill("5000000")
    cell.locator(".quota-editor").get_by_role("button", name="Save").click()
    expect(cell.locator(".quota-editor .error")).to_contain_text("Enter at most 1,000,000 GPUs.")
    shoot(page, "quota-editor-gib")
