"""Responses vary on `HX-Request`: the same URL answers htmx with a fragment (`#table`) and a browser with
the whole page, so a cache (the browser's own, which "back" reads without asking) must keep them apart;
otherwise "back" to a URL htmx pushed shows the bare fragment. htmx's documented advice."""
from __future__ import annotations

from asgiref.sync import iscoroutinefunction
from django.utils.cache import patch_vary_headers
from django.utils.decorators import sync_and_async_middleware


@sync_and_async_middleware
def VaryOnHtmxMiddleware(get_response):  # noqa: N802 (a middleware is named like a class in settings)
    if iscoroutinefunction(get_response):
        async def middleware(request):
            response = await get_response(request)
            patch_vary_headers(response, ("HX-Request",))
            return response
    else:
        def middleware(request):
            response = get_response(request)
            patch_vary_headers(response, ("HX-Request",))
            return response
    return middleware
