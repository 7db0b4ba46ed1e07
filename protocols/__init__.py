"""The language every part of inferd speaks: message kinds, the wire format, tensor helpers,
error kinds and the native client. Pure: nothing here imports the kernel or the plugins."""

from inferd.protocols import build as _build

# Before any compiled module is imported: a stale one must load as its source.
_build.install()
