"""What a catalog entry is, apart from where it is stored: the layer below the models.

The code registry, the tool-author API (``context``), the rules and behaviour of each kind, linear-time matching
(``patterns``) and the targets entries resolve to. The models validate against these and the catalog and the
runtime meet here, so nothing here imports ``models``, ``catalog``, ``runtime`` or above (an import-linter
contract). Design: docs/architecture.md ("Layers, and how they are enforced").
"""
