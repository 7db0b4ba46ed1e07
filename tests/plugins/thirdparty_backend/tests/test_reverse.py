"""The package's own test, as its author writes it: a real server from the SDK serves a model
of the ``reverse`` backend, called with the real client."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from inferd.kernel.sdk.testing import serve

CONFIG = """
name: "rev"
backend: "reverse"
max_batch_size: 0
input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] }]
"""


def test_a_reverse_model_reverses(tmp_path: Path) -> None:
    (tmp_path / "rev" / "1").mkdir(parents=True)
    (tmp_path / "rev" / "config.pbtxt").write_text(CONFIG)
    with serve(tmp_path) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        tensor = httpclient.InferInput("INPUT0", [4], "INT32")
        tensor.set_data_from_numpy(np.array([1, 2, 3, 4], dtype=np.int32))
        result = client.infer("rev", [tensor])
        assert result.as_numpy("OUTPUT0").tolist() == [4, 3, 2, 1]
