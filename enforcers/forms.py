"""The enforcer setting of a cluster (a plain form; the page shows the dry-run diff before saving)."""
from __future__ import annotations

from django import forms

from enforcers.models import Enforcer


class EnforcementForm(forms.Form):
    enforcer = forms.ChoiceField(choices=Enforcer.choices, label="Enforcer", widget=forms.RadioSelect)
    confirm = forms.BooleanField(required=False, widget=forms.HiddenInput)
