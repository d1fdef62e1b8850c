"""What a catalog entry is, apart from where it is stored: the layer below the models. The code registry
(``registry``), the API tools are written against (``context``), the rules and behaviour of each kind
(``static``, ``http_tools``, ``upstreams``, ``prompts``), linear-time matching of what tenants write
(``patterns``) and what the catalog resolves entries to (``targets``).

The models validate against these (a python tool names a registered function, a static tool's configuration is
well formed), the catalog resolves entries to their targets and the runtime runs them (so the catalog and the
runtime meet here, and neither imports the other for it). So these modules import nothing of ``models``,
``catalog``, ``runtime`` or anything above (an import-linter contract in ``make lint``). Only
``protocol``, ``conf``, ``crypto`` and ``netguard`` lie below.
"""
