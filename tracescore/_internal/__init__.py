"""Private helpers; nothing here is public API.

- :mod:`.errors` — the one internal-error funnel (log and carry on; re-raise under pytest).
- :mod:`.openai_errors` — what the OpenAI-compatible judge and embedder read off SDK errors.
- :mod:`.validate` — ids, contexts and metadata checked and bounded at the public API.
- :mod:`.losses` — what was accepted and then lost, counted by reason.
- :mod:`.secrets` — API keys and bearer tokens scrubbed from error texts and log lines.
- :mod:`.json_server` — the HTTP plumbing of the scripted judge and embedding test servers.
- :mod:`.text` — values as span attribute text (bounded, never raising), shared by the
  adapters and the exporter.
- :mod:`.ids` — fresh trace/span ids for records made without a span.
- :mod:`.extras` — importing an optional framework, or saying which extra to install.
- :mod:`.otlp_receiver` — a real OTLP receiver (public as ``tracescore.testing.OtlpReceiver``).
"""
