"""Creating, using and revoking personal API tokens."""
from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from accounts.models import ApiToken, OidcIdentity
from audit.models import AuditEvent
from audit.services import audit_record

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


# --- Single sign-on (accounts/oidc.py) ---------------------------------------------------------------------

class SignInRefused(Exception):
    """A sign-in through the provider that must not log anyone in; the message is shown to the person."""


def _claim_groups(claims: dict, claim: str) -> list[str]:
    value = claims.get(claim, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        return []
    names = {item.strip()[:150] for item in value if isinstance(item, str) and item.strip()}
    return sorted(names)


def _free_username(wanted: str) -> str:
    User = get_user_model()
    field = User._meta.get_field(User.USERNAME_FIELD)
    base = (wanted or "user")[: field.max_length - 4]
    candidate, n = base, 1
    # A local account of the same name is never taken over: the newcomer gets a suffix.
    while User.objects.filter(**{User.USERNAME_FIELD: candidate}).exists():
        n += 1
        candidate = f"{base}-{n}"
    return candidate


@transaction.atomic
def oidc_user_sign_in(*, issuer: str, claims: dict, groups_claim: str = "groups",
                      username_claim: str = "preferred_username") -> Any:
    """The console user of a verified identity token (claims), created on first sign-in; its Django
    groups made to match the provider's group claim (added and removed), so that role assignments to
    groups decide access."""
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject:
        raise SignInRefused("the identity token names no subject (sub).")
    User = get_user_model()
    identity = OidcIdentity.objects.select_related("user").select_for_update().filter(
        issuer=issuer, subject=subject).first()
    created = identity is None
    if created:
        username = claims.get(username_claim) or claims.get("email") or subject
        user = User(**{User.USERNAME_FIELD: _free_username(str(username))})
        user.set_unusable_password()  # signs in only through the provider
    else:
        user = identity.user
        if not user.is_active:
            raise SignInRefused("your console account is disabled. Ask an administrator.")
    user.email = str(claims.get("email") or user.email or "")[:254]
    user.first_name = str(claims.get("given_name") or user.first_name or "")[:150]
    user.last_name = str(claims.get("family_name") or user.last_name or "")[:150]
    user.last_login = timezone.now()
    user.full_clean(exclude=["password"])
    user.save()
    if created:
        identity = OidcIdentity(user=user, issuer=issuer, subject=subject)
    before = {"groups": sorted(user.groups.values_list("name", flat=True))}
    wanted = _claim_groups(claims, groups_claim)
    groups = []
    for name in wanted:
        group, _ = Group.objects.get_or_create(name=name)
        groups.append(group)
    user.groups.set(groups)
    identity.groups = wanted
    identity.last_login = user.last_login
    identity.full_clean(exclude=["user"])
    identity.save()
    after = {"groups": wanted}
    if created:
        audit_record(actor=user, action=AuditEvent.Action.CREATE, obj=identity,
                     after={"user": user.get_username(), "issuer": issuer, "subject": subject, **after})
    else:
        audit_record(actor=user, action=AuditEvent.Action.UPDATE, obj=identity, before=before, after=after)
    return user
