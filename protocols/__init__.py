"""The language every part of inferd speaks: message kinds, the wire format, tensor helpers,
error kinds and the native client. Pure: nothing here imports the kernel or the plugins."""
