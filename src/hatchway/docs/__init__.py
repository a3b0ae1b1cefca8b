"""Generated reference docs: ``python -m hatchway.docs`` writes them, ``--check`` says which are stale.

- docs/configuration.md — every key of the four YAML files (``configuration``);
- docs/errors.md — every error ``type``/``code`` (``error_catalogue``, codes found by ``error_codes``);
- docs/schemas/*.json — the JSON Schemas editors validate the YAML files with (``hatchway.config.schema``).
"""
