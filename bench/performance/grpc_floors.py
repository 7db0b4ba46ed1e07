"""The floor gRPC servers ``grpc_options`` measures, one kind each (``KINDS``): just enough of
KServe v2's ``inference.GRPCInferenceService`` for ``perf_analyzer -m simple -i grpc``, ModelInfer
answered with one fixed response, built on grpc.aio (protobuf objects or raw bytes, uvloop or
asyncio, with or without running the graph), on grpc's thread pool, or on grpclib.

Each runs in a process of its own (``grpc_options --serve KIND PORT``) and prints ``READY``
when it listens. Owns the servers only; it measures nothing and starts no process.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.performance.kserve import ROOT

SERVICE = "inference.GRPCInferenceService"
MODEL = "simple"
READY = "READY"  # what a floor prints once it listens
KINDS = ("aio-protobuf", "aio-raw", "aio-raw-asyncio", "aio-raw-ort", "aio-raw-numpy",
         "sync-threads-1", "sync-threads-4", "grpclib")


def replies() -> dict[str, Any]:
    """The protobuf reply of each RPC perf_analyzer makes for ``simple``, as the floor's."""
    import numpy as np
    from tritonclient.grpc import model_config_pb2 as mc
    from tritonclient.grpc import service_pb2 as pb

    data = np.arange(16, dtype=np.int32).tobytes()
    pairs = (0, 1)
    infer = pb.ModelInferResponse(
        model_name=MODEL, model_version="1",
        outputs=[pb.ModelInferResponse.InferOutputTensor(name=f"OUTPUT{i}", datatype="INT32",
                                                         shape=[1, 16]) for i in pairs],
        raw_output_contents=[data, data])
    metadata = pb.ModelMetadataResponse(
        name=MODEL, versions=["1"], platform="onnxruntime_onnx",
        inputs=[pb.ModelMetadataResponse.TensorMetadata(name=f"INPUT{i}", datatype="INT32",
                                                        shape=[-1, 16]) for i in pairs],
        outputs=[pb.ModelMetadataResponse.TensorMetadata(name=f"OUTPUT{i}", datatype="INT32",
                                                         shape=[-1, 16]) for i in pairs])
    config = pb.ModelConfigResponse(config=mc.ModelConfig(
        name=MODEL, platform="onnxruntime_onnx", max_batch_size=8,
        input=[mc.ModelInput(name=f"INPUT{i}", data_type=mc.TYPE_INT32, dims=[16])
               for i in pairs],
        output=[mc.ModelOutput(name=f"OUTPUT{i}", data_type=mc.TYPE_INT32, dims=[16])
                for i in pairs]))
    return {
        "ServerLive": pb.ServerLiveResponse(live=True),
        "ServerReady": pb.ServerReadyResponse(ready=True),
        "ModelReady": pb.ModelReadyResponse(ready=True),
        "ServerMetadata": pb.ServerMetadataResponse(name="floor", version="0"),
        "ModelMetadata": metadata,
        "ModelConfig": config,
        "ModelStatistics": pb.ModelStatisticsResponse(),
        "ModelInfer": infer,
    }


def raw_replies() -> dict[str, bytes]:
    return {name: reply.SerializeToString() for name, reply in replies().items()}


def grpc_options(reuseport: bool) -> list[tuple[str, Any]]:
    return [("grpc.so_reuseport", 1 if reuseport else 0)]


def simple_run(kind: str) -> Callable[[], object]:
    """One run of ``simple`` (two INT32[1,16] inputs, their sum and difference) the way
    ``kind`` computes it: onnxruntime (``*-ort``), numpy (``*-numpy``) or not at all."""
    import numpy as np

    rows = np.arange(16, dtype=np.int32).reshape(1, 16)
    if kind.endswith("-numpy"):
        return lambda: (rows + rows, rows - rows)
    if not kind.endswith("-ort"):
        return lambda: None
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(ROOT / "model_repository" / MODEL / "1" / "model.onnx"),
                                   options, providers=["CPUExecutionProvider"])
    feeds = {"INPUT0": rows, "INPUT1": rows}
    return lambda: session.run(None, feeds)


def raw_handler(asynchronous: bool, run: Callable[[], object] = lambda: None) -> Any:
    """A generic handler of the service whose methods take the request's bytes and return
    prebuilt bytes: no (de)serializer, no protobuf object per message. ModelInfer calls
    ``run`` first."""
    import grpc

    def method(name: str, reply: bytes) -> Any:
        if asynchronous and name == "ModelInfer":
            async def answer(request: bytes, context: Any) -> bytes:
                run()
                return reply
        elif asynchronous:
            async def answer(request: bytes, context: Any) -> bytes:
                return reply
        else:
            def answer(request: bytes, context: Any) -> bytes:  # type: ignore[misc]
                return reply
        return grpc.unary_unary_rpc_method_handler(answer, request_deserializer=None,
                                                   response_serializer=None)

    handlers = {name: method(name, reply) for name, reply in raw_replies().items()}
    return grpc.method_handlers_generic_handler(SERVICE, handlers)


def announce(kind: str, port: int) -> None:
    loop = type(asyncio.get_running_loop()).__module__ if kind != "sync" else "threads"
    print(f"{READY} pid {os.getpid()} port {port} loop {loop}", flush=True)


def bind(server: Any, port: int) -> None:
    if server.add_insecure_port(f"127.0.0.1:{port}") != port:
        raise RuntimeError(f"could not bind 127.0.0.1:{port}")


async def serve_aio(kind: str, port: int, reuseport: bool) -> None:
    import grpc
    from tritonclient.grpc import service_pb2_grpc as svc

    server = grpc.aio.server(options=grpc_options(reuseport))
    if kind == "aio-protobuf":
        protobuf = replies()

        class Floor(svc.GRPCInferenceServiceServicer):  # type: ignore[misc]
            async def ServerLive(self, request: Any, context: Any) -> Any:
                return protobuf["ServerLive"]

            async def ServerReady(self, request: Any, context: Any) -> Any:
                return protobuf["ServerReady"]

            async def ModelReady(self, request: Any, context: Any) -> Any:
                return protobuf["ModelReady"]

            async def ServerMetadata(self, request: Any, context: Any) -> Any:
                return protobuf["ServerMetadata"]

            async def ModelMetadata(self, request: Any, context: Any) -> Any:
                return protobuf["ModelMetadata"]

            async def ModelConfig(self, request: Any, context: Any) -> Any:
                return protobuf["ModelConfig"]

            async def ModelStatistics(self, request: Any, context: Any) -> Any:
                return protobuf["ModelStatistics"]

            async def ModelInfer(self, request: Any, context: Any) -> Any:
                return protobuf["ModelInfer"]

        svc.add_GRPCInferenceServiceServicer_to_server(Floor(), server)
    else:
        server.add_generic_rpc_handlers((raw_handler(True, simple_run(kind)),))
    bind(server, port)
    await server.start()
    announce(kind, port)
    await server.wait_for_termination()


def serve_threads(workers: int, port: int, reuseport: bool) -> None:
    import grpc

    server = grpc.server(ThreadPoolExecutor(max_workers=workers),
                         options=grpc_options(reuseport))
    server.add_generic_rpc_handlers((raw_handler(asynchronous=False),))
    bind(server, port)
    server.start()
    announce("sync", port)
    server.wait_for_termination()


async def serve_grpclib(port: int, reuseport: bool) -> None:
    from grpclib.const import Cardinality, Handler
    from grpclib.encoding.base import CodecBase
    from grpclib.server import Server, Stream

    class RawCodec(CodecBase):  # type: ignore[misc]
        """Messages are bytes both ways; content type application/grpc(+proto)."""

        __content_subtype__ = "proto"

        def encode(self, message: bytes, message_type: Any) -> bytes:
            return message

        def decode(self, data: bytes, message_type: Any) -> bytes:
            return data

    def method(reply: bytes) -> Callable[[Stream], Any]:
        async def answer(stream: Stream) -> None:
            await stream.recv_message()
            await stream.send_message(reply)
        return answer

    class Service:
        def __mapping__(self) -> dict[str, Handler]:
            return {f"/{SERVICE}/{name}": Handler(method(reply), Cardinality.UNARY_UNARY,
                                                  bytes, bytes)
                    for name, reply in raw_replies().items()}

    server = Server([Service()], codec=RawCodec())
    await server.start("127.0.0.1", port, reuse_port=reuseport)
    announce("grpclib", port)
    await server.wait_closed()


def event_loop_factory(kind: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop, as the floor and inferd serve use, except for ``*-asyncio``."""
    if kind.endswith("-asyncio"):
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def serve(kind: str, port: int, reuseport: bool) -> None:
    if kind.startswith("sync-threads-"):
        serve_threads(int(kind.rsplit("-", 1)[1]), port, reuseport)
        return
    main = (serve_grpclib(port, reuseport) if kind == "grpclib"
            else serve_aio(kind, port, reuseport))
    with asyncio.Runner(loop_factory=event_loop_factory(kind)) as runner:
        runner.run(main)
