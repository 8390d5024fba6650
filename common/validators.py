"""Validators shared by several apps."""

from django.core.validators import RegexValidator

USER_ID_RE = r"^[A-Za-z0-9][A-Za-z0-9_.:@\-]{0,127}$"
CONSOLE_USER_PREFIX = "console:"  # the console's people (learning.console.console_user_id); agents cannot name them
user_id_validator = RegexValidator(USER_ID_RE, "Use 1-128 letters, digits or _ . : @ -, starting with a letter or digit.")
