"""The README's quick start, runnable as is: ``python examples/quickstart.py``.

"Your chain" is the bundled example app's LCEL chain (a keyword retriever and a deterministic
extractive chat model over a small handbook), so this runs offline in a second or two: local
metrics, no judge, no network. It writes ``tracescore.db`` in the current folder; then try
``tracescore report`` and ``tracescore show TRACE_ID``. The README's code block is this file
after this docstring (tests/test_first_hour.py checks both, and runs it).
"""

from tracescore.examples.langchain_rag import build_chain, load_questions

import tracescore

chain = build_chain()                         # your LangChain chain, graph or agent
question, reference = (load_questions()[0][k] for k in ("question", "reference"))

ts = tracescore.init(
    db="tracescore.db",                       # SQLite file (WAL); created if missing
    metrics=["rouge", "token_f1", "rgb_rejection"],
    sample_rate=0.1,                          # score 1 request in 10 (see below)
    keep_full_text="1h",                      # unsampled text kept 1 h, for late feedback
    # span_exporter=my_otlp_exporter,         # optional: any OTel SpanExporter
)
handler = ts.langchain_handler()              # or, for every chain in the process:
                                              # ts.instrument_langchain()
with ts.run() as run:                         # tells you this request's trace id
    answer = chain.invoke(question, config={"callbacks": [handler]})

if run.trace_id:                              # set once a run started in the block
    ts.add_ground_truth(run.trace_id, [reference])  # may arrive later: reference metrics
    ts.add_feedback(run.trace_id, "down")     # a user's thumbs down: forces scoring
# LlamaIndex:  ts.instrument_llama_index()   — or tracescore.instrument(...) for every framework
ts.flush(timeout=30)    # block until everything so far is stored, scored and exported
ts.shutdown()
print(f"Q: {question}\nA: {answer}\nNext: tracescore show {run.trace_id}")
