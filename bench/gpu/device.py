"""The GPU check's parts that use CUDA in the check's own process (``bench/gpu/check.py`` says
what each shows): the pytorch backend's copies (``zero_copy``), CUDA shared memory through
``tritonclient.utils.cuda_shared_memory`` (``cuda_shared_memory``) and read in place by the
GPU twin (``in_place``), and the CPU-vs-GPU throughput table (``throughput``, which uses none
but measures the GPU twin)."""

from __future__ import annotations

import base64
import ctypes
import os
import re
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from bench.gpu.parts import (
    LOG_WAIT_SECS,
    Skip,
    World,
    cpu_seconds,
    reference,
    server_processes,
)

NO_GPU_REFUSAL = "failed to register CUDA shared memory region: '{}', GPUs not supported"


def zero_copy(gpu: bool, repository: Path) -> str:
    """numpy <-> torch without copies on the CPU (the backend's own conversions, and DLPack);
    on the GPU, one batch through the backend's instance costs exactly one host-to-device copy
    per input and one device-to-host copy per output, as torch's profiler counts them."""
    import torch

    from inferd.plugins.backends.pytorch.tensors import to_numpy, to_torch

    array = np.arange(32, dtype=np.float32).reshape(4, 8)
    tensor = to_torch(torch, array, False, False)
    assert tensor.data_ptr() == array.ctypes.data, "to_torch copied a writable array"
    back = to_numpy(torch, tensor)
    assert back.ctypes.data == tensor.data_ptr(), "to_numpy copied a CPU tensor"
    assert torch.from_dlpack(array).data_ptr() == array.ctypes.data, "DLPack copied (numpy)"
    assert np.from_dlpack(tensor).ctypes.data == tensor.data_ptr(), "DLPack copied (torch)"
    shown = "CPU: numpy and torch share memory both ways (the backend's and DLPack)"
    model = "ts_gpu" if gpu else "ts_cpu"
    instance = _instance(repository, model)
    batch = np.random.default_rng(1).standard_normal((8, 256)).astype(np.float32)
    # Warm (cuBLAS and the caching allocator set up first), and the answer checked.
    answer = _run(instance, model, batch)
    assert np.allclose(answer, reference(256, batch), rtol=1e-3, atol=1e-3), (
        f"{model} run in this process differs from torch's answer")
    if not gpu:
        raise Skip(f"no GPU, so no copies to count; checked instead: {shown}; {model} run in "
                   "this process through the backend")
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
        _run(instance, model, batch)
        torch.cuda.synchronize()
    events = [event.name for event in profiler.events()]
    to_device = sum(1 for name in events if name.startswith("Memcpy HtoD"))
    to_host = sum(1 for name in events if name.startswith("Memcpy DtoH"))
    kernels = sum(1 for event in profiler.events()
                  if str(getattr(event, "device_type", "")).endswith("CUDA"))
    if not kernels:
        raise Skip(f"{shown}; GPU: torch's profiler saw no CUDA activity here (CUPTI?), so "
                   "the copies were not counted")
    assert (to_device, to_host) == (1, 1), (
        f"one batch made {to_device} host-to-device and {to_host} device-to-host copies, "
        "expected 1 and 1")
    return shown + f"; GPU: one batch = 1 copy in, 1 copy out ({kernels} CUDA events)"


def _instance(repository: Path, model: str) -> Any:
    """An instance of ``model`` loaded by the pytorch backend in this process."""
    from inferd.kernel.modelconfig.reading import parse_config_text
    from inferd.kernel.sdk.backends import ModelContext
    from inferd.plugins.backends.pytorch.backend import PyTorchBackend

    folder = repository / model
    config = parse_config_text((folder / "config.pbtxt").read_text(), "config.pbtxt")
    config.name = model
    context = ModelContext(name=model, version=1, model_dir=folder, config=config,
                           auto_complete=True, options={})
    return PyTorchBackend().load_model(context).create_instance(0)


def _run(instance: Any, model: str, batch: np.ndarray) -> np.ndarray:
    from inferd.protocols.messages import InferRequest, InferResponse
    from inferd.protocols.tensors import from_numpy

    [result] = instance.execute([InferRequest(model, (from_numpy("INPUT__0", batch),))])
    assert isinstance(result, InferResponse), result
    output: np.ndarray = result.outputs[0].data
    return output


# ------------------------------------------------------------------- CUDA shared memory


def _raw_handle(cudashm: Any, region: Any) -> bytes:
    """The region's CUDA IPC handle in base64, as tritonclient gives it, or read from the
    handle's memory where cuda-bindings does not expose its ``reserved`` field."""
    try:
        handle: bytes = cudashm.get_raw_handle(region)
    except AttributeError:
        handle = base64.b64encode(ctypes.string_at(region._cuda_shm_handle.getPtr(), 64))
    return handle


def _status_rows(protocol: str, status: Any) -> dict[str, tuple[int, int]]:
    if protocol == "http":
        return {row["name"]: (int(row["device_id"]), int(row["byte_size"])) for row in status}
    return {name: (row.device_id, row.byte_size) for name, row in status.regions.items()}


def _refused(message: str, call: Any, *arguments: Any) -> None:
    try:
        call(*arguments)
    except InferenceServerException as error:
        assert message in str(error), f"refused with {error}, expected {message!r}"
        return
    raise AssertionError(f"not refused: expected {message!r}")


def cuda_shared_memory(world: World) -> str:
    clients = {"http": (world.http, httpclient), "grpc": (world.grpc, grpcclient)}
    if not world.gpu:
        for protocol, (connect, _) in clients.items():
            with connect() as client:
                handle = base64.b64encode(os.urandom(64))
                _refused(NO_GPU_REFUSAL.format(f"r_{protocol}"),
                         client.register_cuda_shared_memory, f"r_{protocol}", handle, 0, 64)
                assert not _status_rows(protocol, client.get_cuda_shared_memory_status())
        raise Skip("no GPU, so no CUDA region; checked instead: a register is refused over "
                   "HTTP and gRPC with Triton's message for a server without GPUs")
    import tritonclient.utils.cuda_shared_memory as cudashm

    small = world.small
    batch = np.random.default_rng(2).standard_normal((4, small)).astype(np.float32)
    expected = reference(small, batch)
    nbytes = batch.nbytes
    shown = []
    for protocol, (connect, module) in clients.items():
        inputs = cudashm.create_shared_memory_region(f"in_{protocol}", nbytes, 0)
        outputs = cudashm.create_shared_memory_region(f"out_{protocol}", nbytes, 0)
        try:
            cudashm.set_shared_memory_region(inputs, [batch])
            with connect() as client:
                client.register_cuda_shared_memory(
                    f"in_{protocol}", _raw_handle(cudashm, inputs), 0, nbytes)
                client.register_cuda_shared_memory(
                    f"out_{protocol}", _raw_handle(cudashm, outputs), 0, nbytes)
                rows = _status_rows(protocol, client.get_cuda_shared_memory_status())
                assert rows == {f"in_{protocol}": (0, nbytes),
                                f"out_{protocol}": (0, nbytes)}, rows
                register = client.register_cuda_shared_memory
                _refused(f"shared memory region 'in_{protocol}' already in manager",
                         register, f"in_{protocol}", _raw_handle(cudashm, inputs), 0, nbytes)
                _refused("failed to register shared memory region: invalid args",
                         register, f"bad_{protocol}", base64.b64encode(os.urandom(64)), 0, nbytes)
                for model in ("ts_gpu", "ts_cpu", "export_gpu"):
                    source, target = world.io_names(model)
                    tensor = module.InferInput(source, list(batch.shape), "FP32")
                    tensor.set_shared_memory(f"in_{protocol}", nbytes)
                    wanted = module.InferRequestedOutput(target)
                    wanted.set_shared_memory(f"out_{protocol}", nbytes)
                    client.infer(model, [tensor], outputs=[wanted])
                    answer = cudashm.get_contents_as_numpy(outputs, np.float32, list(batch.shape))
                    assert np.allclose(answer, expected, rtol=world.rtol, atol=world.atol), (
                        f"{model} over {protocol}: the output region differs from torch's answer")
                    shown.append(f"{model}/{protocol}")
                client.unregister_cuda_shared_memory(f"in_{protocol}")
                rows = _status_rows(protocol, client.get_cuda_shared_memory_status())
                assert list(rows) == [f"out_{protocol}"], rows
                client.unregister_cuda_shared_memory()
                assert not _status_rows(protocol, client.get_cuda_shared_memory_status())
        finally:
            cudashm.destroy_shared_memory_region(inputs)
            cudashm.destroy_shared_memory_region(outputs)
    return (f"inputs and outputs in GPU regions (in place on the GPU twins, one copy each way on "
            f"the CPU twin): {', '.join(shown)}; status, Triton's refusals, unregister one and "
            "all")


def in_place(world: World, repository: Path) -> str:
    """CUDA shared memory read and written on the device by the GPU twin. In this process,
    through the pytorch backend's own path: a batch whose input and output are device memory
    (a window at a pointer, as the executor hands it) costs no host-to-device and no
    device-to-host copy, one device-to-device copy per output (torch's profiler). In the
    server (after ``cuda_shm``): ``executor/gpu0`` opened the client's regions itself (its
    log line), so its requests reached the model as device memory. Without a GPU: a batch for
    a GPU instance carries its windows and not one byte of tensor data on the kernel wire."""
    from inferd.protocols.wire import codec as wire
    from inferd.protocols.device_tensors import device_tensor, window_of
    from inferd.protocols.messages import (
        DeviceWindow,
        Envelope,
        InferBatch,
        InferRequest,
        InferResponse,
    )

    small = world.small
    batch = np.random.default_rng(3).standard_normal((8, small)).astype(np.float32)
    inputs = DeviceWindow(bytes(64), 0, 0, batch.nbytes, 1)
    outputs = DeviceWindow(bytes(64), 0, 0, batch.nbytes, 2)
    if not world.gpu:
        request = InferRequest("ts_gpu", (device_tensor("INPUT__0", "FP32", batch.shape,
                                                        inputs),),
                               output_windows={"OUTPUT__0": outputs})
        frames = wire.encode(Envelope(1, "scheduler", "executor/gpu0",
                                      InferBatch("ts_gpu", 1, 1, (request,))))
        assert len(frames) == 2, f"{len(frames) - 2} tensor frames for device memory"
        sent = wire.decode(frames).body
        assert isinstance(sent, InferBatch)
        assert window_of(sent.requests[0].inputs[0]) == inputs
        assert sent.requests[0].output_windows == {"OUTPUT__0": outputs}
        raise Skip(f"no GPU, so nothing read or written in place; checked instead: a batch "
                   f"for a GPU instance carries its CUDA windows, no tensor bytes "
                   f"({len(frames[1])} bytes of header for {batch.nbytes} of input)")
    import torch
    from torch.profiler import ProfilerActivity, profile

    instance = _instance(repository, "ts_gpu")
    source = torch.from_numpy(batch).cuda()
    target = torch.zeros_like(source)
    request = InferRequest("ts_gpu", (device_tensor(
        "INPUT__0", "FP32", batch.shape, inputs, owner=source, pointer=source.data_ptr()),),
        output_windows={"OUTPUT__0": outputs})
    instance.window_addresses = {outputs: target.data_ptr()}
    [result] = instance.execute([request])  # warm
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
        [result] = instance.execute([request])
        torch.cuda.synchronize()
    assert isinstance(result, InferResponse), result
    assert window_of(result.outputs[0]) is not None, "the output came back to the host"
    answer = target.cpu().numpy()
    assert np.allclose(answer, reference(small, batch), rtol=world.rtol, atol=world.atol), (
        "the output window differs from torch's answer")
    names = [event.name for event in profiler.events()]
    copies = {kind: sum(1 for name in names if name.startswith(f"Memcpy {kind}"))
              for kind in ("HtoD", "DtoH", "DtoD")}
    kernels = sum(1 for event in profiler.events()
                  if str(getattr(event, "device_type", "")).endswith("CUDA"))
    shown = "in this process: "
    if not kernels:
        shown += "torch's profiler saw no CUDA activity (CUPTI?), copies not counted"
    else:
        assert copies["HtoD"] == copies["DtoH"] == 0, f"copies through the host: {copies}"
        assert copies["DtoD"] == 1, f"expected one device-to-device copy: {copies}"
        shown += "one batch = 0 copies in or out through the host, 1 device-to-device"
    opened = re.compile(r"\[executor/gpu0\] \S+: opened CUDA shared memory region")
    deadline = time.monotonic() + LOG_WAIT_SECS
    while not opened.search(world.log.read_text(errors="replace")):
        assert time.monotonic() < deadline, (
            "executor/gpu0 never opened a CUDA region: the GPU twins got host copies")
        time.sleep(0.2)
    count = len(opened.findall(world.log.read_text(errors="replace")))
    return shown + f"; in the server: executor/gpu0 opened {count} client region(s) itself"


# ---------------------------------------------------------------------------- throughput


def _load(world: World, model: str, batch: np.ndarray, concurrency: int, seconds: float
          ) -> tuple[int, float, list[str]]:
    """(requests, p50 ms, errors) of ``concurrency`` gRPC clients sending ``batch``."""
    source, _ = world.io_names(model)
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def client_loop() -> None:
        with world.grpc() as client:
            tensor = grpcclient.InferInput(source, list(batch.shape), "FP32")
            tensor.set_data_from_numpy(batch)
            client.infer(model, [tensor])  # warm, not counted
            while time.monotonic() < deadline:
                started = time.perf_counter()
                try:
                    client.infer(model, [tensor])
                except InferenceServerException as error:
                    with lock:
                        errors.append(str(error))
                    return
                with lock:
                    latencies.append(time.perf_counter() - started)

    threads = [threading.Thread(target=client_loop) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 120)
    p50 = statistics.median(latencies) * 1e3 if latencies else 0.0
    return len(latencies), p50, errors


def throughput(world: World, batches: list[int], concurrency: int, seconds: float) -> str:
    from inferd.kernel.sdk.table import format_table

    width = int(world.io_width("wide_cpu"))
    devices = ["cpu", "gpu"] if world.gpu else ["cpu"]
    rows, rates, problems = [], {}, []
    pids = list(server_processes(world.server).values())
    for batch_size in batches:
        batch = np.random.default_rng(batch_size).standard_normal(
            (batch_size, width)).astype(np.float32)
        for device in devices:
            model = f"wide_{device}"
            spent = cpu_seconds(pids)
            began = time.monotonic()
            count, p50, errors = _load(world, model, batch, concurrency, seconds)
            elapsed = time.monotonic() - began
            cpu_ms = (cpu_seconds(pids) - spent) * 1e3 / max(count, 1)
            rate = count / elapsed
            rates[(device, batch_size)] = rate
            problems += [f"{model} batch {batch_size}: {e}" for e in errors[:1]]
            cpu_rate = rates.get(("cpu", batch_size))
            speedup = f"{rate / cpu_rate:.2f}x" if device == "gpu" and cpu_rate else ""
            rows.append((model, str(batch_size), f"{rate:,.1f}", f"{rate * batch_size:,.0f}",
                         f"{p50:,.2f}", f"{cpu_ms:,.2f}", speedup))
    print(format_table(("model", "batch", "req/s", "rows/s", "p50 ms", "server CPU ms/req",
                        "xCPU"), rows), flush=True)
    assert not problems, "; ".join(problems)
    largest = max(batches)
    shown = f"width {width}, c={concurrency}, {seconds:g} s per point"
    if world.gpu:
        gain = rates[("gpu", largest)] / max(rates[("cpu", largest)], 1e-9)
        shown += f"; batch {largest}: GPU {gain:.1f}x the CPU twin's requests/s"
    return shown
