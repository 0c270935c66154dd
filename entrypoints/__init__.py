"""Front door: the command line and the HTTP API. Nothing below imports it."""
