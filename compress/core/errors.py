"""Errors a user fixes from the message alone (bad params, data, model path). Stage entry
points and the CLI print these as one line, without a traceback."""


class UserError(ValueError):
    pass


class DataError(UserError):
    """Input data is missing or malformed; the message names the file and line (or row)."""
