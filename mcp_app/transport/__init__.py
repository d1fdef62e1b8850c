"""The HTTP + SSE edge: a thin Channels consumer in front of the protocol core.

It reads the body within limits, checks headers, authenticates, builds the ``RequestContext``, awaits the
dispatcher, and writes JSON or SSE. HTTP status codes are decided here and only here.
"""
