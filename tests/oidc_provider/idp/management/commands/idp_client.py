from django.core.management.base import BaseCommand
from oauth2_provider.models import get_application_model


class Command(BaseCommand):
    help = "Create or update a confidential OIDC client (authorization code, RS256)."

    def add_arguments(self, parser):
        parser.add_argument("client_id")
        parser.add_argument("--secret", required=True)
        parser.add_argument("--redirect-uri", action="append", default=[])
        parser.add_argument("--post-logout-uri", action="append", default=[])

    def handle(self, client_id, secret, redirect_uri, post_logout_uri, **options):
        Application = get_application_model()
        app = Application.objects.filter(client_id=client_id).first() or Application(client_id=client_id)
        app.name = client_id
        app.client_type = Application.CLIENT_CONFIDENTIAL
        app.authorization_grant_type = Application.GRANT_AUTHORIZATION_CODE
        app.algorithm = Application.RS256_ALGORITHM
        app.client_secret = secret
        app.redirect_uris = " ".join(redirect_uri)
        app.post_logout_redirect_uris = " ".join(post_logout_uri)
        app.skip_authorization = True
        app.save()
