"""aitp: an orchestrated eval -> filter -> train -> promote loop for verifiable reasoning and proving."""

__version__ = "0.1.0"
