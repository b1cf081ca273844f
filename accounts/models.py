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
