#!/usr/bin/env python
"""Django's command-line utility for the mcp_host reference deployment."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcp_host.settings")
    # Without Redis, a change made here (a shell, a script, the admin of runserver) reaches the daphne process's
    # caches through the database's invalidation log (see mcp_host.settings).
    os.environ.setdefault("MCP_INVALIDATION", "database")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
