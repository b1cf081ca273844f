"""Researchers (whose roles are all in projects) land on their own projects, not on an overview that
says "no departments": one project, its page; several, "My projects"."""
import io
import re

import pytest
from django.urls import reverse

from tests.pages import login, page_text, table_rows


@pytest.mark.parametrize("role", ["proj_admin", "researcher"])
def test_a_user_with_one_project_lands_on_it(client, org, users, role):
    login(client, users, role)
    response = client.get(reverse("home"))
    assert response.status_code == 302 and response.url == reverse("project-detail", args=[org.rnd_a.pk])
    page = client.get(response.url)
    assert "Project rnd-a" in page_text(page)
    # Its quota per pool, allocation and priority list are there.
    assert [r[0] for r in table_rows(page, "project-summary")] == ["default", "a100"]
    assert "Node pool priority" in page_text(page)


def test_a_user_with_several_projects_lands_on_my_projects(client, org, users):
    from projects import services

    researcher = users["researcher"]
    services.role_assign(actor=None, role="viewer", user=researcher, project=org.ops_a)
    services.quota_update(actor=None, quota=org.quota(org.rnd_a, org.a100), expected_version=None, gpu_deserved=2)
    services.project_priority_set(actor=None, project=org.rnd_a, pools=[org.a100, org.default])
    org.run("train-1", org.rnd_a, "a100-1", gpus=3)
    login(client, users, "researcher")
    response = client.get(reverse("home"))
    assert response.status_code == 302 and response.url == reverse("my-projects")
    page = client.get(response.url)
    text = page_text(page)
    assert "My projects" in text and "no departments" not in text.lower()
    # Per project and pool: deserved, allocated, over quota, fair share, limit.
    assert table_rows(page, f"project-{org.rnd_a.pk}-quota") == [
        ["default", "0", "0", "0", "0", "—"], ["a100", "2", "3", "1", "3", "—"]]
    assert [r[0] for r in table_rows(page, f"project-{org.ops_a.pk}-quota")] == ["default", "a100"]
    html = page.content.decode()

    def section(project):
        return re.search(rf'<section[^>]*id="project-{project.pk}".*?</section>', html, re.S).group(0)

    assert "<li>a100</li><li>default</li>" in section(org.rnd_a)
    assert "Empty: the cluster's default order." in section(org.ops_a)  # no list of its own
    # Nothing of the projects it holds no role in.
    assert "rnd-b" not in text


def test_mixed_roles_keep_their_landing(client, org, users):
    from projects import services

    # A department role as well: the department manager's landing, as before.
    services.role_assign(actor=None, role="department_viewer", user=users["researcher"], department=org.ops)
    login(client, users, "researcher")
    response = client.get(reverse("home"))
    assert response.status_code == 200 and "Cluster lab" in page_text(response)
    login(client, users, "rnd_viewer")
    assert client.get(reverse("home")).url == reverse("department-detail", args=[org.rnd.pk])


def test_my_projects_for_a_user_without_project_roles(client, org, users):
    login(client, users, "sysadmin")
    assert "You hold no role in a project." in page_text(client.get(reverse("my-projects")))


def test_demo_researcher_lands_on_team_vision(client, db):
    from django.core.management import call_command

    from projects.models import Project

    call_command("demo", stdout=io.StringIO())
    assert client.login(username="researcher", password="gpu-demo")
    response = client.get(reverse("home"))
    assert response.url == reverse("project-detail", args=[Project.objects.get(name="team-vision").pk])
    page = page_text(client.get(response.url))
    assert "Project Vision team-vision" in page and "Node pool priority" in page
