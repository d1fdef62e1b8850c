"""Opt-in demo content: the ``echo``/``add``/``get_time``/``progress_demo`` tools and the ``mcp_demo`` command.

Add ``"mcp_app.contrib.demo"`` to ``INSTALLED_APPS`` to get them; the core app registers no tools of its own.
"""
