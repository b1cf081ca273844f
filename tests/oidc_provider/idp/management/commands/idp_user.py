from django.contrib.auth.models import Group, User
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create or update a user of the provider and set their groups (the groups claim)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--password", required=True)
        parser.add_argument("--email", default="")
        parser.add_argument("--groups", default="", help="comma-separated")

    def handle(self, username, password, email, groups, **options):
        user = User.objects.filter(username=username).first() or User(username=username)
        user.email = email
        user.set_password(password)
        user.save()
        user.groups.set([Group.objects.get_or_create(name=n.strip())[0] for n in groups.split(",") if n.strip()])
