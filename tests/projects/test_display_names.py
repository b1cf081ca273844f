"""Departments and projects are read by their display names ("R&D"), their Kubernetes names ("rnd") beside
where an operator needs them; without a display name, the name is all there is."""
import pytest
from django.urls import reverse

from projects import services
from projects.models import Department, Project
from tests.pages import csv_of, first_column, login, page_text, table_rows


def name_rule(value: str, problem: str) -> str:
    return ("Use lowercase letters, digits and '-'; start and end with a letter or digit; at most 63 characters "
            f"(“{value}” {problem}).")


def test_a_department_created_with_a_display_name_is_read_by_it_everywhere(client, org, users):
    login(client, users, "sysadmin")
    response = client.post(reverse("department-create"), {"cluster": org.cluster.pk, "display_name": "Vision & Speech",
                                                          "name": "vision-speech", "description": ""})
    department = Department.objects.get(name="vision-speech")
    assert response.url == reverse("department-detail", args=[department.pk])
    assert department.display_name == "Vision & Speech"
    page = client.get(response.url)
    shown = page_text(page)
    assert "Department Vision & Speech vision-speech" in shown  # the Kubernetes name beside, muted
    assert '<span class="k8s-name" title="Kubernetes name">vision-speech</span>' in page.content.decode()
    assert "<title>Department Vision &amp; Speech" in page.content.decode()
    assert "Department 'Vision & Speech' created" in shown
    rows = {r[0]: r for r in table_rows(client.get(reverse("department-list"), {"sort": "name"}))}
    assert "Vision & Speech vision-speech" in rows
    csv = csv_of(client.get(reverse("department-list"), {"sort": "name", "format": "csv"}))
    assert [r[0] for r in csv[1:]] == ["ops", "rnd", "Vision & Speech (vision-speech)"]
    # The project form offers the department by its display name.
    assert ">Vision &amp; Speech</option>" in client.get(reverse("project-create")).content.decode()


def test_a_bad_kubernetes_name_is_refused_in_words_and_nothing_is_created(client, org, users):
    login(client, users, "sysadmin")
    response = client.post(reverse("department-create"), {"cluster": org.cluster.pk, "display_name": "R&D 2",
                                                          "name": "R&D 2", "description": ""})
    assert response.status_code == 200
    shown = page_text(response)
    assert "Kubernetes name: " + name_rule("R&D 2", "holds capital letters, '&' and a space") in shown
    assert "regex" not in shown and "RFC 1123" not in shown
    assert 'value="R&amp;D 2"' in response.content.decode()  # what was typed is kept
    assert not Department.objects.filter(display_name="R&D 2").exists()


def test_without_a_display_name_the_name_is_the_label(client, org, users):
    login(client, users, "sysadmin")
    assert first_column(client.get(reverse("department-list"), {"sort": "name"})) == ["ops", "rnd"]
    page = page_text(client.get(reverse("department-detail", args=[org.rnd.pk])))
    assert "Department rnd cluster lab" in page and "k8s-name" not in page
    assert str(org.rnd) == org.rnd.label == org.rnd.label_with_name == "rnd"


def test_project_pages_show_both_display_names(client, org, users):
    services.department_update(actor=None, department=org.rnd, display_name="R&D")
    services.project_update(actor=None, project=org.rnd_a, display_name="Vision")
    login(client, users, "rnd_admin")
    shown = page_text(client.get(reverse("project-detail", args=[org.rnd_a.pk])))
    assert "Project Vision rnd-a department R&D rnd" in shown
    dept = page_text(client.get(reverse("department-detail", args=[org.rnd.pk])))
    assert "Department R&D rnd" in dept and "Vision rnd-a" in dept
    rows = {r[0]: r for r in table_rows(client.get(reverse("project-list"), {"sort": "name"}))}
    assert rows["Vision rnd-a"][1] == "R&D rnd"
    csv = csv_of(client.get(reverse("project-list"), {"sort": "name", "format": "csv"}))
    assert csv[1][:2] == ["Vision (rnd-a)", "R&D (rnd)"]
    grid = page_text(client.get(reverse("quota-grid", args=[org.cluster.pk])))
    assert "R&D rnd" in grid and "Vision rnd-a" in grid
    # Searching finds it by either name.
    assert first_column(client.get(reverse("project-list"), {"q": "vision"})) == ["Vision rnd-a"]


def test_the_api_reads_and_sets_display_names_and_refuses_a_bad_name_in_words(api, org, users):
    client = api(users["sysadmin"])
    created = client.post("/api/v1/departments/", {"cluster": org.cluster.pk, "name": "finance",
                                                   "display_name": "Finance & Legal"}, format="json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["name"], body["display_name"], body["label"]) == ("finance", "Finance & Legal", "Finance & Legal")
    changed = client.patch(f"/api/v1/departments/{body['id']}/", {"display_name": ""}, format="json")
    assert changed.status_code == 200 and changed.json()["label"] == "finance"
    project = client.post("/api/v1/projects/", {"department": org.rnd.pk, "name": "nlp", "display_name": "NLP"},
                          format="json")
    assert project.status_code == 201 and project.json()["label"] == "NLP"
    bad = client.post("/api/v1/departments/", {"cluster": org.cluster.pk, "name": "R&D"}, format="json")
    assert bad.status_code == 400
    assert bad.json()["errors"]["name"] == [name_rule("R&D", "holds capital letters and '&'")]
    assert not Department.objects.filter(name="R&D").exists()
    assert Project.objects.get(name="nlp").label_with_name == "NLP (nlp)"


@pytest.mark.parametrize("display, name, label", [("R&D", "rnd", "R&D (rnd)"), ("", "rnd", "rnd"),
                                                  ("rnd", "rnd", "rnd"), ("  ", "rnd", "rnd")])
def test_label_with_name(display, name, label):
    assert Department(name=name, display_name=display).label_with_name == label
