"""Test-only administration of the provider over HTTP (faster than a manage.py process per change).
Needs `Authorization: Bearer $IDP_ADMIN_TOKEN`; off when that variable is unset."""
import hmac
import json
import os

from django.contrib.auth.models import Group, User
from django.http import HttpResponse, HttpResponseForbidden
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST


@csrf_exempt
@require_POST
def set_user(request):
    token = os.environ.get("IDP_ADMIN_TOKEN", "")
    given = request.headers.get("Authorization", "").removeprefix("Bearer ")
    if not token or not hmac.compare_digest(given, token):
        return HttpResponseForbidden("no")
    data = json.loads(request.body)
    user = User.objects.filter(username=data["username"]).first() or User(username=data["username"])
    user.email = data.get("email", "")
    user.set_password(data["password"])
    user.save()
    user.groups.set([Group.objects.get_or_create(name=name)[0] for name in data.get("groups", [])])
    return HttpResponse("ok")
