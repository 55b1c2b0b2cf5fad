"""Errors a user can hit: each message says what went wrong and how to fix it, in one line."""


class AitpError(Exception):
    """Base class of user-facing errors; the CLI prints the message on one line and exits non-zero."""


class UnknownTaskError(AitpError):
    """A task name that reasoning-gym does not register."""


class BadInputError(AitpError):
    """Malformed user input: a JSONL line, a field, a flag value."""


class CheckpointError(AitpError):
    """A checkpoint directory that is missing, incomplete or not of the expected kind."""


class UnknownExperimentError(AitpError):
    """An experiment this home has no record of: never started, or with no iterations in the lake."""
