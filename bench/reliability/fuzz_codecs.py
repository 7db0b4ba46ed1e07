"""Coverage-guided fuzzing (atheris, libFuzzer) of the request decoders: the kernel wire codec
(``protocols/wire/codec.py``), the KServe HTTP JSON/binary codec
(``protocols/kserve_http/infer.py``, ``protocols/kserve_http/admin.py``) and the gRPC framing and
conversion (``protocols/kserve_grpc/framing.py``, ``protocols/kserve_grpc/infer.py``,
``protocols/kserve_grpc/inputs.py``).

Each input's first byte picks the decoder; the rest becomes its frames, or its body and the
header length, or its message bytes. Anything but ``InvalidArgument`` (``Unsupported`` for a
trace file) is a crash, which libFuzzer reports with the input that caused it. The hypothesis
properties in ``tests/protocols/test_codec_fuzz.py`` run in CI; this runs for longer:

    python -m bench.reliability.fuzz_codecs -max_total_time=300        # libFuzzer flags pass through
    python -m bench.reliability.fuzz_codecs -runs=100000

libFuzzer's closing ``Done N runs`` line is the inputs tried; every ``REPORT_EVERY`` inputs this
prints the split per decoder. A failure stops the run: libFuzzer prints it and the input.
"""

from __future__ import annotations

import sys
from collections import Counter

import atheris

with atheris.instrument_imports():
    from inferd.protocols.kserve_grpc import infer as grpc_convert
    from inferd.protocols.kserve_grpc import framing as grpc_wire
    from inferd.protocols.kserve_http import infer as http_codec
    from inferd.protocols.kserve_http import admin
    from inferd.protocols.wire import codec as wire
    from inferd.protocols.errors import InvalidArgument, Unsupported

LIMIT = 1 << 16
DECODERS = ("wire", "http_infer", "grpc_infer", "http_bodies")
REPORT_EVERY = 50_000
tried: Counter[str] = Counter()


def one_input(data: bytes) -> None:
    provider = atheris.FuzzedDataProvider(data)
    decoder = DECODERS[provider.ConsumeIntInRange(0, len(DECODERS) - 1)]
    tried[decoder] += 1
    if tried.total() % REPORT_EVERY == 0:
        report()
    try:
        if decoder == "wire":
            frames = [provider.ConsumeBytes(provider.ConsumeIntInRange(0, 256))
                      for _ in range(provider.ConsumeIntInRange(0, 5))]
            if frames and provider.ConsumeBool():
                frames[0] = wire.VERSION
            wire.decode(frames)
        elif decoder == "http_infer":
            given_length = provider.ConsumeBool()
            length = provider.ConsumeIntInRange(0, 1 << 12)
            body = provider.ConsumeBytes(provider.remaining_bytes())
            header = http_codec.parse_header_length(str(length) if given_length else None,
                                                    len(body))
            http_codec.decode_infer_request("m", "", body, header, LIMIT)
        elif decoder == "grpc_infer":
            parsed = grpc_wire.parse_infer_request(provider.ConsumeBytes(
                provider.remaining_bytes()))
            if not parsed.error:
                grpc_convert.decode_infer_request(parsed.header, parsed.raw_input_contents,
                                                  LIMIT)
        else:
            body = provider.ConsumeBytes(provider.remaining_bytes())
            admin.decode_index_request(body)
            admin.decode_load_request("m", body)
    except (InvalidArgument, Unsupported):
        pass


def report() -> None:
    print(f"atheris: {tried.total()} inputs tried ("
          + ", ".join(f"{name} {tried[name]}" for name in DECODERS) + "), 0 failures",
          file=sys.stderr, flush=True)


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
