"""The usage-history filter form: its one rule across fields (a date range runs forwards)."""
from __future__ import annotations

from django import forms


class UsageFilterForm(forms.Form):
    def clean(self):
        data = super().clean()
        start, end = data.get("date_from"), data.get("date_to")
        if start and end and start > end:
            # Beside the start field, naming the other one (the page shows "From (date, UTC): ...").
            self.add_error("date_from", f"must not be after {self.fields['date_to'].label} ({end:%Y-%m-%d}); "
                                        f"it is {start:%Y-%m-%d}.")
        return data


def range_errors(form: forms.Form) -> str:
    """Every error of an invalid filter form as lines "Field: message" (for a 400 answer in text)."""
    lines = []
    for name, errors in form.errors.items():
        label = form.fields[name].label if name in form.fields else name
        for error in errors:
            lines.append(f"{label}: {error}")
    return "\n".join(lines)
