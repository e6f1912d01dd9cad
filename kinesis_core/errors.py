"""Exceptions shared by every layer.

Every error that is the caller's fault names the field and the limit it broke, so a user can fix
the input without reading our code.
"""

from __future__ import annotations


class KinesisConnectorError(Exception):
    """Base class of every exception this project raises."""


class ValidationError(KinesisConnectorError, ValueError):
    """Input refused before anything was sent: names the field, the limit and what was seen."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.reason = message


class ConfigurationError(KinesisConnectorError, ValueError):
    """A configuration value is out of range or inconsistent with another one."""


class EmulatorError(KinesisConnectorError, RuntimeError):
    """The local Kinesis emulator could not be installed, started or reached."""
