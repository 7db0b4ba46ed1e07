"""The scheduler actor (``actor``, with its batch I/O in ``dispatch``, control's orders carried
out by ``serving`` and the BLS streams it relays for executors in ``remote_streams``) and its
sans-IO parts: what it keeps per request, instance and served version, and the queue logic over
them (admission, batch formation, hand-off to instances, in-flight accounting, results back to
requests). Nothing but ``actor``, ``dispatch`` and ``remote_streams`` sends a message or starts a
task: the actor supplies the I/O as callbacks and timers, so unit tests drive the rest directly,
without sockets or an event loop.

- ``requests``: a queued request (``Queued``) and an instance the scheduler may use (``Slot``);
- ``progress``: one wakeup for whoever waits for queues to empty (retire, reload, drain);
- ``version``: one served version: its queue, its batching and its instances (``Version``);
- ``queue_policy``: a version's queue under Triton's queue policies (``QueuePolicy``,
  ``PriorityQueue``): priority levels, timeouts, REJECT and DELAY, size limits;
- ``batcher``: the dynamic batching policy, which queued requests run together and when
  (``DynamicBatcher``);
- ``sequence_batcher``: a stateful model's sequences bound to instance slots, direct or oldest
  (``SequenceBatcher``), over the ``SequencePlan`` read from its config at load
  (``inferd.kernel.modelconfig.sequence_plan``);
- ``response_order``: ``preserve_ordering``, responses leaving in queue order (``ResponseOrder``);
- ``decoupled``: the open streams of decoupled models' requests, by token;
- ``version_table``: which version a request goes to (``RoutingTable``);
- ``samples``: a version's Prometheus samples;
- ``request_validation``, ``classification``: a request checked against its model, and an output
  answered as its top classes;
- ``response_cache``, ``cache_key``, ``cache_config``: the response cache (its plugins'
  contract is ``inferd.kernel.sdk.caches``);
- ``cuda_windows``: which of a request's CUDA shared memory stays on the device;
- ``ensembles``: what the scheduler keeps of a served ensemble and how it runs one request."""
