"""Benchmarks of mcp-host against a real daphne (see docs/performance.md); not part of the installed package."""
