"""The one exception type users see: a one-paragraph message, printed without a traceback."""


class PhazecError(Exception):
    """Bad input or an impossible request; the message names the bad value and what is valid."""
