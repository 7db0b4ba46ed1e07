"""``pb_utils.ModelConfig``: the config object a python model's ``auto_complete_config`` edits.

It holds the model's config as Triton's JSON dictionary and offers the methods Triton's python
backend offers to fill it in (``set_max_batch_size``, ``add_input``, ``add_output``,
``set_dynamic_batching``, ``set_model_transaction_policy``), with the same refusals: a tensor
the config already declares may only be completed, never changed. Pure: it never sees a
protobuf; the backend turns the dictionary back into a ``ModelConfig``.
"""

from __future__ import annotations

import json
from typing import Any

_INPUT_PROPERTIES = ("name", "data_type", "dims", "optional")
_OUTPUT_PROPERTIES = ("name", "data_type", "dims")


class ModelConfig:
    """The config under auto-completion. Only ``max_batch_size``, the inputs and outputs, the
    scheduler choice and the transaction policy may be changed, through the methods below."""

    def __init__(self, model_config: str) -> None:
        self._model_config: dict[str, Any] = json.loads(model_config)
        self._model_config.setdefault("input", [])
        self._model_config.setdefault("output", [])
        self._model_config.setdefault("max_batch_size", 0)

    def as_dict(self) -> dict[str, Any]:
        """The config as a dictionary (meant to be read, not edited)."""
        return self._model_config

    @property
    def _name(self) -> str:
        return str(self._model_config.get("name", ""))

    def set_max_batch_size(self, max_batch_size: int) -> None:
        """Set ``max_batch_size``; refused when the config already sets a larger one."""
        configured = int(self._model_config.get("max_batch_size", 0))
        if configured > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {configured}, but in "
                f"auto-complete-config function for model '{self._name}' specified "
                f"max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        """Choose the dynamic batcher, unless the config chose another scheduler."""
        for other in ("sequence_batching", "ensemble_scheduling"):
            if other in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{other}', but "
                    f"auto-complete-config function for model '{self._name}' tries to set "
                    "scheduling_choice as 'dynamic_batching'"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def add_input(self, input: dict[str, Any]) -> None:
        """Declare an input (``name``, ``data_type``, ``dims``, optionally ``optional``), or
        complete the one the config declares under that name."""
        self._add("input", input, _INPUT_PROPERTIES)

    def add_output(self, output: dict[str, Any]) -> None:
        """Declare an output (``name``, ``data_type``, ``dims``), or complete the one the config
        declares under that name."""
        self._add("output", output, _OUTPUT_PROPERTIES)

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        """Set ``model_transaction_policy`` (only ``decoupled``); refused when the config sets
        ``decoupled`` differently."""
        for key in transaction_policy_dict:
            if key != "decoupled":
                raise ValueError(
                    "model transaction property in auto-complete-config function for model "
                    f"'{self._name}' contains property other than 'decoupled'."
                )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            wanted = transaction_policy_dict["decoupled"]
            if "decoupled" in policy and policy["decoupled"] != wanted:
                raise ValueError(
                    "trying to change decoupled property in auto-complete-config for model "
                    f"'{self._name}', which is already set to '{policy['decoupled']}'."
                )
            policy["decoupled"] = wanted

    def _add(self, kind: str, tensor: dict[str, Any], allowed: tuple[str, ...]) -> None:
        label = tensor.get("name", "")
        extra = [key for key in tensor if key not in allowed]
        if extra:
            listed = ", ".join(f"'{key}'" for key in allowed)
            raise ValueError(
                f"{kind} '{label}' in auto-complete-config function for model '{self._name}' "
                f"contains property other than {listed}."
            )
        for required in ("name", "data_type", "dims"):
            if required not in tensor:
                where = f"{kind} '{label}'" if required != "name" else kind
                raise ValueError(
                    f"{where} in auto-complete-config function for model '{self._name}' is "
                    f"missing '{required}' property."
                )
        for existing in self._model_config[kind]:
            if existing.get("name") != tensor["name"]:
                continue
            self._complete(kind, existing, tensor)
            return
        self._model_config[kind].append(dict(tensor))

    def _complete(self, kind: str, existing: dict[str, Any], tensor: dict[str, Any]) -> None:
        name = tensor["name"]
        declared_type = existing.get("data_type", "TYPE_INVALID")
        if declared_type != "TYPE_INVALID" and declared_type != tensor["data_type"]:
            raise ValueError(
                f"unable to load model '{self._name}', configuration expects datatype "
                f"{declared_type} for {kind} '{name}', model provides {tensor['data_type']}"
            )
        declared_dims = [int(dim) for dim in existing.get("dims", [])]
        if declared_dims and declared_dims != [int(dim) for dim in tensor["dims"]]:
            raise ValueError(
                f"model '{self._name}', tensor '{name}': the model expects dims "
                f"{list(tensor['dims'])} but the model configuration specifies dims "
                f"{declared_dims}"
            )
        if "optional" in tensor and "optional" in existing and (
            bool(existing["optional"]) != bool(tensor["optional"])
        ):
            raise ValueError(
                f"model '{self._name}', tensor '{name}': the model expects optional "
                f"{tensor['optional']} but the model configuration specifies optional "
                f"{existing['optional']}"
            )
        existing["data_type"] = tensor["data_type"]
        existing["dims"] = list(tensor["dims"])
        if "optional" in tensor:
            existing["optional"] = tensor["optional"]
