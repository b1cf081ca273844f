"""Errors the services raise besides Django's ValidationError and PermissionDenied."""


class ConcurrentUpdate(Exception):
    """The row changed since the caller read it: nothing was written; reload and try again."""

    def __init__(self, message: str, *, current_version: int | None = None):
        super().__init__(message)
        self.current_version = current_version
