"""HTTP/2 as the loop gRPC server speaks it, without I/O: RFC 9113's framing, stream states and flow
control and RFC 7541's header compression, for ``inferd.plugins.frontends.kserve_grpc.loop_server``.
``connection`` is the module callers import (the frame loop, DATA and header blocks; it re-exports
the frame vocabulary of ``frames``); ``control`` handles the connection-level frames, ``streams``
holds the streams and what this side sends on them, ``guard`` what a peer may spend, ``hpack`` and
``huffman`` the header compression. Compiled with mypyc as part of the request path; knows nothing
of gRPC or KServe."""
