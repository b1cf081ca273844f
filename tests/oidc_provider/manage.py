#!/usr/bin/env python
"""A small OpenID provider (django-oauth-toolkit) the console's single sign-on is tested against.

Run as its own process with its own SQLite file (IDP_DB) and RS256 key (IDP_RSA_KEY_FILE); see
tests/accounts/oidc_helpers.py. Not part of the console.
"""
import os
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    os.environ["DJANGO_SETTINGS_MODULE"] = "idp.settings"
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
