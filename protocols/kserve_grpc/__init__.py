"""The KServe v2 gRPC messages to and from inferd's: ``infer`` (ModelInfer both ways, its input
tensors in ``inputs``), ``framing`` (the protobuf framing of the two messages that carry tensor
bytes, so protobuf never copies them) and ``admin`` (every other RPC). Pure: no I/O, no gRPC objects
(``inferd.plugins.frontends.kserve_grpc`` serves them)."""
