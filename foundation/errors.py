"""The one kind of error a user can cause: bad input, printed as one line on stderr with exit status 2.

One class for the `stampede` command (`harness.errors` prints it) and the vendors' standalone `serve` commands
(`providers.sim.core.serving.serve_cli`), which import no harness code.
"""

from __future__ import annotations

EXIT_USAGE = 2


class UsageError(ValueError):
    """Input a user can get wrong; the message is the one line we print."""
