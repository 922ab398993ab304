"""Pure text logic, no I/O: codecs, edit matching and quotes, flexible match, placeholders, merge by
commutation, revert. The bottom layer: imports nothing of the package above coordinator.errors."""
