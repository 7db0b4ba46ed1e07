"""The built-in repository storage: ``fsspec`` (``s3://``, ``gs://``, ``as://``, ``az://``
through s3fs, gcsfs and adlfs), a plugin module registered by its own entry point."""
