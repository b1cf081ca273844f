"""The ground floor: helpers every app uses (API base classes, CSV, metrics, JSON logs, bounded parsing,
the request body limit, the login lockout's rules, the error pages). Imports nothing from the apps."""
