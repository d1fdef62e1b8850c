"""Serializers of the API, one module per resource: what each looks like on the wire, and the validation of
writes (``base``: the model's ``full_clean`` decides, foreign keys are scoped to the user's tenants).

Tokens and API keys never show their digest; the raw value is in the create response only. Secrets are
write-only (``upstreams``). The error body is ``api.exceptions``'.
"""
