"""The built-in repository agents (Triton's ``model_repository_agents``): ``checksum``, a plugin
module registered by its own entry point."""
