"""What the CLI's command modules share."""

from __future__ import annotations


class UsageError(ValueError):
    """Bad command-line input, refused before anything is sent or read (exit 2)."""
