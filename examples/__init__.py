"""Offline example apps for tracescore (shipped as ``tracescore.examples``)."""
