"""Attribute names the intake reads (other instrumentations' conventions) and the two it
documents for any language (ground truths on a span).

OpenInference names come from :mod:`tracescore.attributes` (tracescore writes them too);
OpenLLMetry (traceloop) and the GenAI names that tracescore only reads are here.
"""

from __future__ import annotations

# OpenInference (read side)
RERANKER_INPUT_DOCUMENTS = "reranker.input_documents"
RERANKER_OUTPUT_DOCUMENTS = "reranker.output_documents"
LLM_INPUT_MESSAGES = "llm.input_messages"
LLM_OUTPUT_MESSAGES = "llm.output_messages"
KIND_RERANKER = "RERANKER"
KIND_AGENT = "AGENT"
KIND_EMBEDDING = "EMBEDDING"
LLM_TOOLS = "llm.tools"  # llm.tools.N.tool.json_schema: a tool offered to the model
TOOL_NAME = "tool.name"
#: OpenInference's placeholder for text hidden by its TraceConfig (hide_inputs, ...)
OI_REDACTED = "__REDACTED__"

# OpenLLMetry (traceloop)
TRACELOOP_SPAN_KIND = "traceloop.span.kind"
TRACELOOP_ENTITY_INPUT = "traceloop.entity.input"
TRACELOOP_ENTITY_OUTPUT = "traceloop.entity.output"
TRACELOOP_ENTITY_NAME = "traceloop.entity.name"
TRACELOOP_SESSION = "traceloop.association.properties.session_id"
TRACELOOP_USER = "traceloop.association.properties.user_id"
LLM_REQUEST_TYPE = "llm.request.type"
GEN_AI_PROMPT = "gen_ai.prompt"  # gen_ai.prompt.N.{role,content} (OpenLLMetry, older GenAI)
GEN_AI_COMPLETION = "gen_ai.completion"

# GenAI conventions
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
GEN_AI_SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
GEN_AI_RETRIEVAL_DOCUMENTS = "gen_ai.retrieval.documents"
GEN_AI_RETRIEVAL_QUERY = "gen_ai.retrieval.query.text"
GEN_AI_USAGE_PROMPT_TOKENS = "gen_ai.usage.prompt_tokens"  # older name
GEN_AI_USAGE_COMPLETION_TOKENS = "gen_ai.usage.completion_tokens"
GEN_AI_TOOL_DEFINITIONS = "gen_ai.tool.definitions"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT = "gen_ai.tool.call.result"
LLM_OPERATIONS = frozenset({"chat", "text_completion", "generate_content", "completion"})
RETRIEVAL_OPERATIONS = frozenset({"retrieval", "vector_db_retrieve", "retrieve"})

# resource
SERVICE_VERSION = "service.version"
DEPLOYMENT_ENVIRONMENT = ("deployment.environment.name", "deployment.environment")

#: Documented for any language: the reference answer(s) of a request, on any span of its
#: trace — a string, or an array of strings (docs/otlp.md "Ground truth").
GROUND_TRUTH = "tracescore.ground_truth"
#: The same as an event's attribute: an event named ``tracescore.ground_truth`` whose
#: attribute ``tracescore.ground_truth`` holds the answer(s).
GROUND_TRUTH_EVENT = "tracescore.ground_truth"
#: What a record built from received spans says about its text (metadata key).
CONTENT_NOTE = "tracescore.intake.content"
CONVENTION = "tracescore.intake.convention"
