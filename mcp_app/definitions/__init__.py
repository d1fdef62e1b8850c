"""What a catalog entry is, apart from where it is stored: the layer below the models.

- ``registry``: the code registry (``@tool``, ``@resource``, ``@prompt`` in any installed app's ``mcp_tools``);
- ``context``: the API a tool is written against (``ToolContext``, ``ToolResult``, ``ToolError``, ...);
- ``static``: the behaviour of ``static`` tools (canned results, cases, delays) and its validation;
- ``http_tools``: the configuration rules of ``http`` tools and the handling of their secret headers;
- ``prompts``: prompt templates (placeholders, arguments, messages) and their validation;
- ``patterns``: what tenants write that is matched on the event loop (regexes, URI templates, JSON Schema
  patterns), matched by RE2 in linear time, and the refusal of what RE2 cannot run;
- ``targets``: what the catalog resolves an entry to and a runner runs, besides the definitions above
  (``HttpTarget``, ``StaticResourceTarget``, ``StaticPromptTarget``).

The models validate against these (a python tool names a registered function, a static tool's configuration is
well formed), the catalog resolves entries to their targets and the runtime runs them (so the catalog and the
runtime meet here, and neither imports the other for it). So these modules import nothing of ``models``,
``catalog``, ``runtime`` or anything above (an import-linter contract in ``make lint``). Only
``protocol``, ``conf``, ``crypto`` and ``netguard`` lie below.
"""
