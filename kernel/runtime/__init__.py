"""The runtime core every actor runs on: the actor base class and the actors' addresses, the router
(asks, tells, replies in one process or across them), the process link and its transports (the
loop-driven ZeroMQ socket, link memory for large tensors), the run folder, the plugin registry and
the plugin manager, the GPUs the server sees, and the open-file limit."""
