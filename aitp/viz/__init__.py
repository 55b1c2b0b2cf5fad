"""Views of what the loop recorded: pages a person opens in a browser, built from the lake alone."""

from aitp.viz.proof import ProofTrace, UnknownTraceError, load_trace, render_html, write_proof_page

__all__ = ["ProofTrace", "UnknownTraceError", "load_trace", "render_html", "write_proof_page"]
