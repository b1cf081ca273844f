"""Creating, using and revoking personal API tokens."""
from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from accounts.models import ApiToken

TOKEN_PREFIX = "gcc_"
# last_used is written at most this often per token, not on every request.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def token_digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


@transaction.atomic
def token_create(*, actor: Any, name: str) -> tuple[ApiToken, str]:
    """A new token of `actor`; returns the row and the token text, which is never shown again."""
    if actor is None or not getattr(actor, "is_authenticated", False):
        raise PermissionDenied("Log in to create an API token.")
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken(user=actor, name=name.strip(), prefix=raw[: len(TOKEN_PREFIX) + 6], digest=token_digest(raw))
    token.full_clean()
    if not token.name:
        raise ValidationError({"name": "Give the token a name that says what it is for."})
    token.save()
    return token, raw


@transaction.atomic
def token_revoke(*, actor: Any, token: ApiToken) -> ApiToken:
    if actor is None or token.user_id != actor.pk:
        raise PermissionDenied("You may revoke only your own tokens.")
    if token.revoked is None:
        token.revoked = timezone.now()
        token.save(update_fields=["revoked"])
    return token


def token_authenticate(raw: str) -> ApiToken | None:
    """The active token with this text (its user active too), or None."""
    if not raw.startswith(TOKEN_PREFIX):
        return None
    token = ApiToken.objects.active().select_related("user").filter(digest=token_digest(raw)).first()
    if token is None or not token.user.is_active:
        return None
    now = timezone.now()
    if token.last_used is None or now - token.last_used > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used=now)
        token.last_used = now
    return token
