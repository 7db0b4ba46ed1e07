"""The protocol-agnostic data plane every frontend adapts (``data_plane``: what
``inferd.kernel.sdk.frontends.DataPlane`` describes) and the response streams of a request.
Client shared memory is a plugin's (``inferd.plugins.shared_memory``)."""
