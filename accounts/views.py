"""Pages to create, list and revoke one's personal API tokens."""
from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from accounts import services
from accounts.models import ApiToken


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What the token is for, e.g. 'CI quota sync'.")


@login_required
def token_list(request):
    form = TokenForm(request.POST or None)
    created = None
    if request.method == "POST" and form.is_valid():
        try:
            token, created = services.token_create(actor=request.user, name=form.cleaned_data["name"])
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            form = TokenForm()
    tokens = ApiToken.objects.filter(user=request.user)
    response = render(request, "account/tokens.html", {"form": form, "tokens": tokens, "created": created})
    if created:
        response["Cache-Control"] = "no-store"  # the token text must not linger in a cache
    return response


@login_required
@require_POST
def token_revoke(request, pk: int):
    token = get_object_or_404(ApiToken, pk=pk, user=request.user)
    services.token_revoke(actor=request.user, token=token)
    messages.success(request, f"Token '{token.name}' revoked: it no longer works.")
    return redirect("account-tokens")
