"""The runtime core every actor runs on: the actor base class and the actors' addresses, the router
(asks, tells, replies in one process or across them), the process link and its transport (link
memory for large tensors; its loop-driven ZeroMQ socket is the SDK's,
``inferd.kernel.sdk.loop_socket``), the run folder, the plugin manager, and the GPUs the server
sees."""
