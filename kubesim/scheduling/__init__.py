"""The emulator's schedulers, each written from its project's own published documentation."""
