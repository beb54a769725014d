"""A chat prompt as every backend takes it: a list of ``{"role", "content"}`` turns."""

Messages = list[dict[str, str]]
