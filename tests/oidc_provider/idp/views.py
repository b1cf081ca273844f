"""Test-only administration of the provider over HTTP (faster than a manage.py process per change).
Needs `Authorization: Bearer $IDP_ADMIN_TOKEN`; off when that variable is unset."""
import hmac
import json
import os

from django.contrib.auth.models import Group, User
from django.http import HttpResponse, HttpResponseBadRequest, HttpResponseForbidden
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from idp.validators import set_next_fault


def _admin(request) -> bool:
    token = os.environ.get("IDP_ADMIN_TOKEN", "")
    given = request.headers.get("Authorization", "").removeprefix("Bearer ")
    return bool(token) and hmac.compare_digest(given, token)


@csrf_exempt
@require_POST
def set_user(request):
    if not _admin(request):
        return HttpResponseForbidden("no")
    data = json.loads(request.body)
    user = User.objects.filter(username=data["username"]).first() or User(username=data["username"])
    user.email = data.get("email", "")
    user.set_password(data["password"])
    user.save()
    user.groups.set([Group.objects.get_or_create(name=name)[0] for name in data.get("groups", [])])
    return HttpResponse("ok")


@csrf_exempt
@require_POST
def set_fault(request):
    """The fault of the next ID token (idp/validators.py): {"fault": "expired"}, or {"fault": null}."""
    if not _admin(request):
        return HttpResponseForbidden("no")
    try:
        set_next_fault(json.loads(request.body).get("fault"))
    except ValueError as exc:
        return HttpResponseBadRequest(str(exc))
    return HttpResponse("ok")
