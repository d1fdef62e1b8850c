"""Serializers of the API, one module per resource; ``base`` holds the validation of writes (the model's
``full_clean``, foreign keys scoped). The error body is ``api.exceptions``'.
"""
