"""Every attribute name tracescore writes, in one place.

Span names follow OpenInference and the OTel GenAI semantic conventions. The GenAI names are
still "Development" status upstream, so they are kept here as our own constants rather than
imported from ``opentelemetry-semantic-conventions`` (whose names may move).
"""

from __future__ import annotations

# OpenInference
SPAN_KIND = "openinference.span.kind"
INPUT_VALUE = "input.value"
INPUT_MIME_TYPE = "input.mime_type"
OUTPUT_VALUE = "output.value"
OUTPUT_MIME_TYPE = "output.mime_type"
RETRIEVAL_DOCUMENTS = "retrieval.documents"
#: How many documents a retrieval returned; the span carries the first MAX_SPAN_DOCUMENTS
#: (an OTel span holds 128 attributes by default; the database keeps every document).
RETRIEVAL_DOCUMENT_COUNT = "tracescore.retrieval.documents.count"
MAX_SPAN_DOCUMENTS = 24
DOCUMENT_ID = "document.id"
DOCUMENT_CONTENT = "document.content"
DOCUMENT_SCORE = "document.score"
DOCUMENT_METADATA = "document.metadata"
LLM_MODEL_NAME = "llm.model_name"
LLM_TOKEN_COUNT_PROMPT = "llm.token_count.prompt"
LLM_TOKEN_COUNT_COMPLETION = "llm.token_count.completion"
LLM_TOKEN_COUNT_TOTAL = "llm.token_count.total"
SESSION_ID = "session.id"
USER_ID = "user.id"
METADATA = "metadata"
TAG_TAGS = "tag.tags"
EVALUATIONS = "evaluations"

KIND_CHAIN = "CHAIN"
KIND_RETRIEVER = "RETRIEVER"
KIND_LLM = "LLM"
KIND_TOOL = "TOOL"
KIND_EVALUATOR = "EVALUATOR"

# OTel GenAI
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_EVALUATION_RESULT = "gen_ai.evaluation.result"
GEN_AI_EVALUATION_NAME = "gen_ai.evaluation.name"
GEN_AI_EVALUATION_SCORE_VALUE = "gen_ai.evaluation.score.value"
GEN_AI_EVALUATION_SCORE_LABEL = "gen_ai.evaluation.score.label"
GEN_AI_EVALUATION_EXPLANATION = "gen_ai.evaluation.explanation"

# tracescore's own
SCORE_PREFIX = "tracescore.score."
RECORD_ID = "tracescore.record_id"
RAG_ROOT = "tracescore.rag_root"
SAMPLED = "tracescore.sampled"
#: False on a root span whose answer stream the client cut off (the record is incomplete).
ANSWER_COMPLETE = "tracescore.answer.complete"
RETRIEVER_NAME = "tracescore.retriever"
SCORES_LATE = "tracescore.scores_late"
SCORED_SPAN_ID = "tracescore.scored_span_id"
JUDGE_DEGENERATE = "tracescore.judge.degenerate"
ERROR_TYPE = "error.type"
GEN_AI_TOKEN_TYPE = "gen_ai.token.type"  # "input" / "output" on the judge token counter
EXPORT_SIGNAL = "tracescore.signal"  # "traces" / "logs" / "metrics" on the export-loss counters

# Metric instruments (tracescore's own namespace; see docs/backends.md)
METRIC_EVALUATION_SCORE = "tracescore.evaluation.score"
METRIC_EVALUATION_ERRORS = "tracescore.evaluation.errors"
METRIC_RECORDS_SEEN = "tracescore.records.seen"
METRIC_RECORDS_SAMPLED = "tracescore.records.sampled"
METRIC_RECORDS_DROPPED = "tracescore.records.dropped"
METRIC_QUEUE_DEPTH = "tracescore.queue.depth"
METRIC_JOBS_OPEN = "tracescore.jobs.open"
METRIC_SCORING_LAG = "tracescore.scoring.lag"
METRIC_EXPORT_FAILURES = "tracescore.export.failures"
METRIC_EXPORT_LOST = "tracescore.export.lost"
METRIC_JUDGE_CALLS = "tracescore.judge.calls"
METRIC_JUDGE_TOKENS = "tracescore.judge.tokens"
METRIC_JUDGE_ERRORS = "tracescore.judge.errors"
METRIC_JUDGE_BREAKER_STATE = "tracescore.judge.breaker.state"


def retrieval_document(i: int, field: str) -> str:
    return f"{RETRIEVAL_DOCUMENTS}.{i}.{field}"


def evaluation(i: int, field: str) -> str:
    """``evaluations.{i}.evaluation.{name,score,label,explanation}`` (OpenInference)."""
    return f"{EVALUATIONS}.{i}.evaluation.{field}"


def score_attribute(name: str) -> str:
    return SCORE_PREFIX + name

#: Score-point attributes for the process's release and environment: the OTel resource
#: semantic-convention names (the values may come from ``init`` rather than the resource, and
#: Prometheus drops resource attributes unless asked, so they go on each point too).
RELEASE = "service.version"
ENVIRONMENT = "deployment.environment.name"
#: Monitors: the state-change log record's event name and attributes, and the state gauge.
MONITOR_STATE_CHANGE = "tracescore.monitor.state_change"
MONITOR_STATE_GAUGE = "tracescore.monitor.state"
MONITOR_NAME = "tracescore.monitor.name"
MONITOR_STATE = "tracescore.monitor.state"
MONITOR_PREVIOUS = "tracescore.monitor.previous"
MONITOR_SCORE = "tracescore.monitor.score"
MONITOR_VALUE = "tracescore.monitor.value"
MONITOR_LO = "tracescore.monitor.lo"
MONITOR_HI = "tracescore.monitor.hi"
MONITOR_N = "tracescore.monitor.n"
