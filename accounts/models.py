"""Personal API tokens: created by a user, shown once, stored only as a hash, revocable."""
from __future__ import annotations

from django.conf import settings
from django.db import models


class ApiTokenQuerySet(models.QuerySet):
    def active(self) -> "ApiTokenQuerySet":
        return self.filter(revoked__isnull=True)


class ApiToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, help_text="What the token is for, e.g. 'CI quota sync'.")
    # The first characters of the token, shown in lists so that a user can tell tokens apart.
    prefix = models.CharField(max_length=12)
    # SHA-256 of the whole token; the token itself is never stored.
    digest = models.CharField(max_length=64, unique=True)
    created = models.DateTimeField(auto_now_add=True)
    last_used = models.DateTimeField(null=True, blank=True)
    revoked = models.DateTimeField(null=True, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created", "-pk"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked is None


class OidcIdentity(models.Model):
    """A user signed in through single sign-on: the provider's (issuer, subject) pair, which never
    changes, links to one console user (user names at a provider may be renamed or reused)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="oidc_identities")
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    created = models.DateTimeField(auto_now_add=True)
    last_login = models.DateTimeField(null=True, blank=True)
    # The provider's groups at the last sign-in, as received (for the audit trail and support).
    groups = models.JSONField(default=list, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="oidc_identity_unique")]
        verbose_name = "single sign-on identity"

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"
