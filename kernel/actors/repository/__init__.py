"""The repository actor (``actor``) and what it reads: the model folders and their layout rules
(``folders``), their fingerprints, remote roots mirrored into a local cache (``mirror``,
``remote_roots``, ``remote_objects``, ``remote_storage``), and each model's catalog metadata
(``catalog``, ``catalog_listing``). A load runs the repository agents its config lists (``agents``)
on the model's files first. The contracts of storage and agent plugins are the SDK's
(``inferd.kernel.sdk.storage``, ``inferd.kernel.sdk.agents``)."""
