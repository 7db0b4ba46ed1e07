"""The protocol-agnostic data plane every frontend adapts (``data_plane``: what
``inferd.kernel.sdk.frontends.DataPlane`` describes), the response streams of a request, and
the KServe shared-memory extension (``system_shared_memory`` and ``cuda_shared_memory``: client
regions, not the process link's ``link_memory``)."""
