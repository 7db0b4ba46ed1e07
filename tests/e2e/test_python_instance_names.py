"""The names of a python model's instances, end to end.

The python backend runs each instance in an executor process of its own; each must still be
told its place in the model's instance groups, as Triton names it
(``<group name>_<index in the group>``, a group without a name being ``<model>_<group
index>``). ``instance_names`` (tests/plugins/python_models) has the groups ``{count: 2}`` and
``{count: 1}``: its instances record their ``initialize`` arguments, and answer their names to
three requests held at once.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient
from tests.e2e.inferd_harness import InferdHarness, wait_for

PYTHON_MODELS = Path(__file__).resolve().parents[1] / "plugins" / "python_models"
MODEL = "instance_names"
NAMES = ["instance_names_0_0", "instance_names_0_1", "instance_names_1_0"]


def test_each_instance_is_named_by_its_group_and_its_place_in_it(
        inferd: InferdHarness) -> None:
    root = inferd.copy_models(inferd.repository(), PYTHON_MODELS, MODEL)
    server = inferd.start(root)
    folder = root / MODEL
    initialized = folder / "initialized.txt"
    records = wait_for(
        lambda: initialized.exists() and len(lines := initialized.read_text().splitlines()) == 3
        and lines, "every instance's initialize", server)
    assert sorted(records) == [f"{name} CPU 0" for name in NAMES]

    answers: list[str] = []

    def ask() -> None:
        with httpclient.InferenceServerClient(server.http_url) as client:
            tensor = httpclient.InferInput("IN", [1], "INT32")
            tensor.set_data_from_numpy(np.array([1], np.int32))
            answers.append(client.infer(MODEL, [tensor]).as_numpy("INSTANCE")[0].decode())

    threads = [threading.Thread(target=ask) for _ in NAMES]
    for thread in threads:
        thread.start()
    started = folder / "started.txt"
    wait_for(lambda: started.exists() and len(started.read_text().split()) == len(NAMES),
             "a request started on every instance", server)
    assert sorted(started.read_text().split()) == NAMES
    (folder / "go").touch()
    for thread in threads:
        thread.join(60)
    assert sorted(answers) == NAMES
