"""The executor actor (``actor``) and its process's entry point (``main``): how a version loads
(``version_load``), the instances' own requests to the server (``bls_requests``), a model version's
instances (``instance_slot``) and their ids, unique over the processes an executor name has had
(``instance_ids``), warm-up, the python models' execution environments, the low-priority threads
loads run on, and the clients' CUDA regions opened in its process (``device_memory``). The batch
skeleton array-based backends share and a framework's per-process thread pools are the SDK's
(``inferd.kernel.sdk.batching``, ``inferd.kernel.sdk.process_threads``)."""
