"""The python backend: runs Triton python-backend ``model.py`` files unchanged.

Owns a version's load (its ``model.py`` imported and its ``auto_complete_config`` run, by
``model_code``), its instances (``initialize`` with Triton's ``args``, ``execute``, plain or
``async def``, the latter on an event loop private to the instance's thread, and ``finalize``
at close) and turning inferd requests into ``pb_utils`` requests and the returned responses
back, with Triton's rules: one response per request, a response's error fails only its
request, an exception from ``execute`` fails every request of the call. A decoupled model
(``model_transaction_policy { decoupled: true }``) sends its responses through each request's
response sender instead, any number, from any thread, until the final flag; its ``execute``
returns ``None``. Its instances never run on the executor's event loop, because a BLS call
waits on that loop. The utility module itself is ``triton_python_backend_utils``; which
instance a thread serves is ``scope``'s. With ``INFERD_FORK_AFTER_INITIALIZE`` the instances
past the first are forks of it (``forked``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from tritonclient.grpc import model_config_pb2

from inferd.kernel.sdk import Backend, Emit, Instance, Model, ModelContext
from inferd.kernel.sdk.modelconfig import forks_after_initialize
from inferd.plugins.backends.python import forked, scope
from inferd.plugins.backends.python import triton_python_backend_utils as pb_utils
from inferd.plugins.backends.python.model_code import (
    DEFAULT_FILENAME,
    MODEL_CLASS_NAME,
    auto_complete,
    copy_config,
    forget_module,
    instance_args,
    load_module,
)
from inferd.plugins.backends.python.pb_errors import exception_text
from inferd.plugins.backends.python.readiness import ReadinessCheck, call_is_ready
from inferd.protocols.errors import InferdError, Internal, InvalidArgument
from inferd.protocols.messages import InferRequest, InferResponse, Tensor
from inferd.protocols.tensors import config_type_to_datatype

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

log = logging.getLogger(__name__)


class PythonBackend(Backend):
    name = "python"

    def load_model(self, context: ModelContext) -> Model:
        path = context.model_file(DEFAULT_FILENAME)
        if not path.is_file():
            raise InvalidArgument(
                f"model '{context.name}': Python model file not found in '{path}'"
            )
        module = load_module(context.name, path)
        try:
            model_class = getattr(module, MODEL_CLASS_NAME)
            config = (
                auto_complete(model_class, context.config, context.name)
                if context.auto_complete else copy_config(context.config)
            )
            if not config.name:
                config.name = context.name
            if forks_after_initialize(config):
                forked.check_forkable(config, context.name)
        except BaseException:
            forget_module(module)
            raise
        return PythonModel(context, path, config, module)


class PythonModel(Model):
    """One loaded version: its config and the module its first instance will use."""

    def __init__(
        self, context: ModelContext, path: Path, config: ModelConfig, module: ModuleType
    ) -> None:
        self.config = config
        self.context = context
        self.path = path
        self.version = str(context.version)
        self.output_names = tuple(output.name for output in config.output)
        self.output_datatypes = {
            output.name: config_type_to_datatype(
                model_config_pb2.DataType.Name(output.data_type)
            )
            for output in config.output
            if output.data_type != model_config_pb2.TYPE_INVALID  # control refuses those
        }
        # The module imported at load serves the first instance: one import fewer.
        self._spare_module: ModuleType | None = module
        self._forks = forks_after_initialize(config)
        self._fork_source: PythonInstance | None = None  # instance 0, when instances fork

    def create_instance(self, index: int) -> Instance:
        if self._fork_source is not None:
            return self._fork(self._fork_source, index)
        instance = self._create_instance(index)
        if self._forks:
            self._fork_source = instance
        return instance

    def _fork(self, source: PythonInstance, index: int) -> Instance:
        """Instance ``index`` as a fork of ``source``, taken now (after its initialize)."""
        args = instance_args(self.config, self.context, index)
        name = args["model_instance_name"]

        def serve(link: forked.Link) -> None:
            fork_scope = scope.InstanceScope(forked.server_infer(link), str(self.path.parent),
                                             forked.no_streams)
            scope.set_process_default(fork_scope)
            instance = PythonInstance(self, source.triton_model, source.module, fork_scope,
                                      name)
            instance.cancelled = forked.AskedCancellations(link)

            def after_fork() -> None:
                hook = getattr(source.triton_model, "after_fork", None)
                if hook is not None:
                    with scope.bound(fork_scope):
                        hook(args)

            forked.serve_forked(link, instance.execute, lambda: instance.phase_ns,
                                instance.close, after_fork)

        pid, link = forked.fork_instance(serve, name)
        log.info("model '%s': instance %s forked after initialize (pid %d)",
                 self.context.name, name, pid)
        return forked.ForkedInstance(name, self.context.name, self.context.version, pid, link,
                                     self.context.infer)

    def _create_instance(self, index: int) -> PythonInstance:
        module, self._spare_module = self._spare_module, None
        if module is None:
            module = load_module(self.context.name, self.path)
        instance_scope = scope.InstanceScope(self.context.infer, str(self.path.parent),
                                             self.context.infer_stream)
        if instance_scope.infer is not None:
            scope.set_process_default(instance_scope)
        args = instance_args(self.config, self.context, index)
        try:
            triton_model = getattr(module, MODEL_CLASS_NAME)()
            initialize = getattr(triton_model, "initialize", None)
            if initialize is not None:
                with scope.bound(instance_scope):
                    initialize(args)
        except Exception as error:
            forget_module(module)
            raise InvalidArgument(
                f"model '{self.context.name}': initialize failed: "
                f"{type(error).__name__}: {error}"
            ) from error
        return PythonInstance(self, triton_model, module, instance_scope,
                              args["model_instance_name"])

    def unload(self) -> None:
        self._fork_source = None
        if self._spare_module is not None:
            forget_module(self._spare_module)
            self._spare_module = None

    # ------------------------------------------------------------------ responses

    @staticmethod
    def failure(instance: str, problem: str) -> Internal:
        """Triton's python backend names the instance (``<model>_<group>_<index>``)."""
        return Internal(
            f"Failed to process the request(s) for model '{instance}', message: {problem}"
        )

    def results(
        self, instance: str, requests: Sequence[InferRequest], returned: Any
    ) -> list[InferResponse | InferdError]:
        """One response or error per request from what ``execute`` returned."""
        count = len(requests)
        if not isinstance(returned, (list, tuple)):
            failure = self.failure(
                instance,
                f"Expected a list in the execute return, found type '{type(returned)}'."
            )
            return [failure] * count
        if len(returned) != count:
            failure = self.failure(
                instance,
                "Number of InferenceResponse objects do not match the number of "
                f"InferenceRequest objects. InferenceRequest(s) size is:{count}, and "
                f"InferenceResponse(s) size is:{len(returned)}"
            )
            return [failure] * count
        for response in returned:
            if response is not None and not isinstance(response, pb_utils.InferenceResponse):
                failure = self.failure(
                    instance,
                    "Expected an 'InferenceResponse' object in the execute function return "
                    f"list, found type '{type(response)}'."
                )
                return [failure] * count
        return [
            self.result(instance, request, response)
            for request, response in zip(requests, returned, strict=True)
        ]

    def result(
        self, instance: str, request: InferRequest, response: pb_utils.InferenceResponse | None
    ) -> InferResponse | InferdError:
        if response is None:
            return self.failure(instance,
                                "execute returned None for a request instead of its response")
        error = response.error()
        if error is not None:
            return error.to_inferd()
        produced = {tensor.name(): tensor for tensor in response.output_tensors()}
        outputs: list[Tensor] = []
        try:
            for name in request.outputs or self.output_names:
                tensor = produced.get(name)
                if tensor is not None:
                    outputs.append(tensor.to_inferd(self.output_datatypes.get(name)))
        except InferdError as problem:
            return self.failure(instance, problem.message)
        return InferResponse(
            model=self.context.name,
            version=self.version,
            outputs=tuple(outputs),
            id=request.id,
            parameters=response.parameters_dict(),
        )


class PythonInstance(Instance):
    """One ``TritonPythonModel`` object, run by its executor thread."""

    runs_on_event_loop = False  # a BLS call inside execute waits on the executor's loop

    def __init__(
        self,
        model: PythonModel,
        triton_model: Any,
        module: ModuleType,
        instance_scope: scope.InstanceScope,
        name: str,
    ) -> None:
        self._model = model
        self._name = name
        self.triton_model = triton_model
        self.module = module
        self._scope = instance_scope
        self._loop: asyncio.AbstractEventLoop | None = None
        # A model's own is_ready() (python_backend#430) runs at every readiness check.
        self.checks_readiness = callable(getattr(triton_model, "is_ready", None))
        self._readiness = ReadinessCheck(partial(self._is_ready, triton_model))

    def ready(self) -> bool:
        return self._readiness.run()

    def _is_ready(self, triton_model: Any) -> bool:
        with scope.bound(self._scope):
            return call_is_ready(triton_model)

    def execute(self, requests: Sequence[InferRequest]) -> list[InferResponse | InferdError]:
        model = self._model
        started = time.perf_counter_ns()
        try:
            pb_requests = [
                pb_utils.InferenceRequest.from_inferd(request, model.output_names)
                for request in requests
            ]
            cancelled = self.cancelled
            for index, pb_request in enumerate(pb_requests):
                pb_request.watch_cancellation(partial(cancelled.__contains__, index))
            prepared = time.perf_counter_ns()
            with scope.bound(self._scope):
                returned = self.triton_model.execute(pb_requests)
                if inspect.isawaitable(returned):
                    returned = self._event_loop().run_until_complete(returned)
        except Exception as error:  # noqa: BLE001 - Triton fails the whole call
            failure = model.failure(self._name, exception_text(error))
            log.error("%s", failure.message)  # as Triton's python backend logs it
            return [failure] * len(requests)
        executed = time.perf_counter_ns()
        results = model.results(self._name, requests, returned)
        # As Triton's python backend reports them: making the requests, execute, the outputs.
        self.phase_ns = (prepared - started, executed - prepared,
                         time.perf_counter_ns() - executed)
        return results

    def execute_decoupled(self, requests: Sequence[InferRequest], emit: Emit) -> None:
        model = self._model
        senders = []
        pb_requests = []
        cancelled = self.cancelled
        for index, request in enumerate(requests):
            pb_request = pb_utils.InferenceRequest.from_inferd(request, model.output_names)
            is_cancelled = partial(cancelled.__contains__, index)
            pb_request.watch_cancellation(is_cancelled)
            sender = pb_utils.InferenceResponseSender(
                partial(self._send, emit, index, request), is_cancelled)
            pb_request.attach_response_sender(sender)
            senders.append(sender)
            pb_requests.append(pb_request)
        try:
            with scope.bound(self._scope):
                returned = self.triton_model.execute(pb_requests)
                if inspect.isawaitable(returned):
                    returned = self._event_loop().run_until_complete(returned)
        except Exception as error:  # noqa: BLE001 - Triton fails the requests still open
            failure = model.failure(self._name, exception_text(error))
            log.error("%s", failure.message)
            self._close_open(senders, emit, failure)
            return
        if returned is not None:
            self._close_open(senders, emit, model.failure(
                self._name,
                "Python model '" + model.context.name + "' is using the decoupled mode and "
                "the execute function must return None."))

    def _send(self, emit: Emit, index: int, request: InferRequest,
              response: pb_utils.InferenceResponse | None, final: bool) -> None:
        result = None if response is None else self._model.result(self._name, request, response)
        emit(index, result, final)

    @staticmethod
    def _close_open(senders: list[pb_utils.InferenceResponseSender], emit: Emit,
                    failure: InferdError) -> None:
        """End every request whose sender is still open with ``failure``."""
        for index, sender in enumerate(senders):
            if sender.close():
                emit(index, failure, True)

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        # ``async def execute`` runs on a loop of this instance's own: the executor thread
        # that runs it never runs another instance.
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop

    def close(self) -> None:
        finalize = getattr(self.triton_model, "finalize", None)
        try:
            if finalize is not None:
                with scope.bound(self._scope):
                    finalize()
        except Exception:  # noqa: BLE001 - an unload always completes
            log.exception("model '%s': finalize failed", self._model.context.name)
        finally:
            if self._loop is not None:
                self._loop.run_until_complete(self._loop.shutdown_default_executor())
                self._loop.close()
                self._loop = None
            forget_module(self.module)

