"""Who may see and do what: role assignments and the one access choke point, `restrict(user, action)`.

The ground floor of the console: every app may import it, and it imports no app above it (the scope
relations of its role assignments, to clusters, departments and projects, are declared by the apps that
own those kinds: nodepools/models.py and projects/models.py).
"""
