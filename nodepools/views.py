from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from nodepools import selectors


@login_required
def home(request):
    """Each pool the user may see, with its nodes and GPUs total / allocated / free."""
    return render(request, "home.html", {"pools": selectors.pool_list(user=request.user)})
