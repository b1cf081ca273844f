"""Who may see and do what: role assignments and the one access choke point, `restrict(user, action)`.

The ground floor of the console: every app may import it, and it imports no app above it (its model
names clusters, departments and projects by string reference only).
"""
